// Attention sinks (sinks = true): generated layers against the double-precision reference in
// every form (flash chunks, whole rows, split-KV decode, projections, a cache), sinks at the
// extremes, a NaN sink, and the arguments refused.
#include "cached_batch.h"
#include "test_support.h"

#include "t_d16_plain.h"
#include "t_d32_cache_sinks.h"
#include "t_d32_sinks_rows.h"
#include "t_d64_sinks.h"
#include "t_d64_sinks_decode.h"
#include "t_mha_sinks.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

using namespace attngen_test;

namespace {

constexpr float infinity = std::numeric_limits<float>::infinity();

/** Runs `problem` and compares it with the reference within the layer's tolerance. */
void check_problem(const attngen::Layer &layer, const Problem &problem, uint32_t seed) {
    INFO(layer.info.name << " " << describe(problem, seed));
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    const attngen::Status status = attngen::run(layer, problem.arguments(out.data()));
    REQUIRE(status.ok());
    const double error = relative_error(out.values(), reference_attention(problem.reference()));
    INFO("relative error " << error << ", tolerance " << tolerance_for(layer.info.dtype));
    CHECK(error <= tolerance_for(layer.info.dtype));
}

} // namespace

TEST_CASE("sinks in the flash form with grouped heads and a causal mask match the reference") {
    check_against_reference(t_d64_sinks_layer(), 7101);
}

TEST_CASE("sinks in the whole-row form match the reference") {
    check_against_reference(t_d32_sinks_rows_layer(), 7102);
}

TEST_CASE("sinks in the split-KV decode form match the reference") {
    check_against_reference(t_d64_sinks_decode_layer(), 7103, decode_shapes());
}

TEST_CASE("sinks after projections match the reference") {
    check_against_reference(t_mha_sinks_layer(), 7104);
}

TEST_CASE("sinks with a paged KV cache, step after step, match the reference") {
    check_steps_against_reference(t_d32_cache_sinks_layer(), 7109);
}

TEST_CASE("sinks at the extremes: -inf is no sink, a large one takes nearly all the mass") {
    const uint32_t seed = test_seed(7105);
    INFO("seed " << seed);
    const attngen::Layer &layer =
        GENERATE(std::cref(t_d64_sinks_layer()), std::cref(t_d32_sinks_rows_layer()),
                 std::cref(t_d64_sinks_decode_layer()));
    const int query_len = layer.info.key_padding ? 3 : 37;
    Problem problem(layer.info, 2, query_len, 70, seed);
    // Per head: no sink, one far above every score, one far below, one about as large.
    const float extremes[] = {-infinity, 60.0f, -60.0f, 0.5f};
    for (size_t h = 0; h < problem.sinks.values.size(); h++)
        problem.sinks.values[h] = extremes[h % 4];
    check_problem(layer, problem, seed);
}

TEST_CASE("a row whose every key is masked stays zero with a sink") {
    const uint32_t seed = test_seed(7106);
    INFO("seed " << seed);
    const attngen::Layer &layer = t_d64_sinks_decode_layer();
    Problem problem(layer.info, 2, 4, 40, seed);
    problem.key_lengths.ints = {0, 17};
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    REQUIRE(attngen::run(layer, problem.arguments(out.data())).ok());
    const std::vector<float> values = out.values();
    for (size_t i = 0; i < values.size() / 2; i++)
        REQUIRE(values[i] == 0.0f);
    const double error = relative_error(values, reference_attention(problem.reference()));
    CHECK(error <= tolerance_for(layer.info.dtype));
}

TEST_CASE("a NaN sink makes its head's rows NaN and leaves the other heads alone") {
    const uint32_t seed = test_seed(7107);
    INFO("seed " << seed);
    const attngen::Layer &layer =
        GENERATE(std::cref(t_d64_sinks_layer()), std::cref(t_d64_sinks_decode_layer()));
    INFO(layer.info.name);
    const int batch = 1, query_len = 5, key_len = 33, nan_head = 1;
    Problem problem(layer.info, batch, query_len, key_len, seed);
    problem.key_lengths.ints.assign(problem.key_lengths.ints.size(), key_len);
    problem.sinks.values[nan_head] = std::numeric_limits<float>::quiet_NaN();
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    REQUIRE(attngen::run(layer, problem.arguments(out.data())).ok());
    const std::vector<float> values = out.values();
    const size_t per_head = static_cast<size_t>(query_len) * layer.info.head_dim;
    for (size_t i = 0; i < values.size(); i++) {
        const bool in_nan_head = i / per_head == static_cast<size_t>(nan_head);
        INFO("element " << i);
        REQUIRE(std::isnan(values[i]) == in_nan_head);
    }
}

TEST_CASE("sinks of the wrong shape or dtype, missing, or given to a layer without them are "
          "refused, output untouched") {
    const uint32_t seed = test_seed(7108);
    INFO("seed " << seed);
    const attngen::Layer &layer = t_d64_sinks_layer();
    Problem problem(layer.info, 1, 6, 6, seed);
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    const std::vector<float> before = out.values();
    auto refused = [&](const attngen::Layer &called, const attngen::Arguments &args,
                       const std::string &expected) {
        const attngen::Status status = attngen::run(called, args);
        INFO(status.message());
        CHECK_FALSE(status.ok());
        CHECK(status.message().find(expected) != std::string::npos);
    };
    const std::vector<float> short_sinks(static_cast<size_t>(layer.info.heads) - 1, 0.5f);
    const std::vector<int32_t> int_sinks(static_cast<size_t>(layer.info.heads), 1);

    attngen::Arguments args = problem.arguments(out.data());
    args.sinks = attngen::view(short_sinks.data(), {static_cast<int64_t>(short_sinks.size())});
    refused(layer, args, "sinks");
    args.sinks = attngen::view(int_sinks.data(), {static_cast<int64_t>(int_sinks.size())});
    refused(layer, args, "sinks");
    args.sinks = attngen::Tensor();
    refused(layer, args, "sinks");
    CHECK(out.values() == before);

    const attngen::Layer &plain = t_d16_plain_layer();
    Problem other(plain.info, 1, 6, 6, seed);
    OutputBuffer other_out(plain.info.dtype, other.out_elements());
    const std::vector<float> other_before = other_out.values();
    const std::vector<float> sinks(static_cast<size_t>(plain.info.heads), 0.5f);
    attngen::Arguments plain_args = other.arguments(other_out.data());
    plain_args.sinks = attngen::view(sinks.data(), {static_cast<int64_t>(sinks.size())});
    refused(plain, plain_args, "sinks");
    CHECK(other_out.values() == other_before);
}
