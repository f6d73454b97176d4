// Attention sinks (sinks = true): generated layers against the double-precision reference in
// every form (flash chunks, whole rows, split-KV decode, projections, a cache), sinks at the
// extremes, a NaN sink, and the arguments refused.
#include "cached_batch.h"
#include "test_support.h"

#include "t_d16_plain.h"
#include "t_d16_sinks_bias.h"
#include "t_d32_cache_sinks.h"
#include "t_d32_sinks_rows.h"
#include "t_d64_sinks.h"
#include "t_d64_sinks_decode.h"
#include "t_mha_sinks.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>

using namespace attngen_test;

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

TEST_CASE("sinks at the edges: -inf is none, NaN and +inf make NaN rows, masked rows stay 0") {
    const attngen::Layer &layer =
        GENERATE(std::cref(t_d64_sinks_layer()), std::cref(t_d32_sinks_rows_layer()),
                 std::cref(t_d64_sinks_decode_layer()), std::cref(t_d16_sinks_bias_layer()));
    check_sink_edges(layer, 7105);
}

TEST_CASE("rows whose scores all lie below -1e30 keep their softmax: an absent sink is no max") {
    // Batch 1's additive bias puts every score of its rows in [-1e38, -0.9e38], far below the
    // -1e30 that stands in for an absent sink; the keys' biases differ by about 1e32, so each
    // row's softmax is the one key of the largest bias. Head 0 has no sink (-inf): its rows
    // must be that key's V row, not 0. Head 1's sink (0.5) takes all the mass: its rows are 0.
    const uint32_t seed = test_seed(7110);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const attngen::Layer &layer = t_d16_sinks_bias_layer();
    const int batch = 2, query_len = 5, key_len = 24;
    Problem problem(layer.info, batch, query_len, key_len, seed);
    problem.sinks.values = {-std::numeric_limits<float>::infinity(), 0.5f};
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> far_below(-1.0e38f, -0.9e38f);
    const size_t per_batch = problem.attn_bias.values.size() / batch;
    for (size_t i = per_batch; i < problem.attn_bias.values.size(); i++)
        problem.attn_bias.values[i] = far_below(rng);
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    const attngen::Status status = attngen::run(layer, problem.arguments(out.data()));
    INFO(describe(problem, seed) << ": " << status.message());
    REQUIRE(status.ok());
    const std::vector<float> got = out.values();
    const std::vector<double> want = reference_attention(problem.reference());
    REQUIRE(got.size() == want.size());
    double scale = 1.0;
    for (double value : want)
        scale = std::max(scale, std::abs(value));
    size_t nonzero = 0;
    for (size_t i = 0; i < got.size(); i++) {
        INFO("element " << i << ": got " << got[i] << ", reference " << want[i]);
        REQUIRE(std::abs(got[i] - want[i]) <= tolerance_for(layer.info.dtype) * scale);
        nonzero += i >= got.size() / batch && want[i] != 0.0;
    }
    // Head 0 of batch 1 is a V row per query: the case the test is for did happen.
    CHECK(nonzero > 0);
}

TEST_CASE("sinks of the wrong shape or dtype, missing, or given to a layer without them are "
          "refused, output untouched") {
    const uint32_t seed = test_seed(7108);
    INFO("seed " << seed);
    const attngen::Layer &layer = t_d64_sinks_layer();
    Problem problem(layer.info, 1, 6, 6, seed);
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    const std::vector<float> before = out.values();
    const std::vector<float> short_sinks(static_cast<size_t>(layer.info.heads) - 1, 0.5f);
    const std::vector<int32_t> int_sinks(static_cast<size_t>(layer.info.heads), 1);

    attngen::Arguments args = problem.arguments(out.data());
    args.sinks = attngen::view(short_sinks.data(), {static_cast<int64_t>(short_sinks.size())});
    check_refused(layer, args, "sinks");
    args.sinks = attngen::view(int_sinks.data(), {static_cast<int64_t>(int_sinks.size())});
    check_refused(layer, args, "sinks");
    args.sinks = attngen::Tensor();
    check_refused(layer, args, "sinks");
    CHECK(out.values() == before);

    const attngen::Layer &plain = t_d16_plain_layer();
    Problem other(plain.info, 1, 6, 6, seed);
    OutputBuffer other_out(plain.info.dtype, other.out_elements());
    const std::vector<float> other_before = other_out.values();
    const std::vector<float> sinks(static_cast<size_t>(plain.info.heads), 0.5f);
    attngen::Arguments plain_args = other.arguments(other_out.data());
    plain_args.sinks = attngen::view(sinks.data(), {static_cast<int64_t>(sinks.size())});
    check_refused(plain, plain_args, "sinks");
    CHECK(other_out.values() == other_before);
}
