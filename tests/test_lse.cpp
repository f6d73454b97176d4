// The lse output (outputs = out, lse): each row's log-sum-exp against the double-precision
// reference in every form (flash chunks, whole rows and chunks in one layer, split-KV decode
// with sinks, projections, a paged cache), rows that see no key, the exact merge of attention
// over two key sets into attention over their union, and the arguments refused.
#include "cached_batch.h"
#include "test_support.h"

#include "t_d16_plain.h"
#include "t_d32_cache_lse.h"
#include "t_d32_lse_rows.h"
#include "t_d64_lse.h"
#include "t_d64_lse_decode.h"
#include "t_mha_lse.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace attngen_test;

namespace {

constexpr float not_written = 12345.0f;

/** An lse buffer for `problem`'s call, every element not_written, and its view. */
struct LseBuffer {
    explicit LseBuffer(const Problem &problem)
        : values(static_cast<size_t>(problem.batch) * problem.info.heads * problem.query_len,
                 not_written),
          view(attngen::mutable_view(values.data(),
                                     {problem.batch, problem.info.heads, problem.query_len})) {}
    std::vector<float> values;
    attngen::MutableTensor view;
};

/**
 * Runs `problem` with key rows [first, first + count) of its keys and values (strided views into
 * them) and key_lengths of `count`, writing out and lse.
 */
void run_on_keys(const attngen::Layer &layer, const Problem &problem, int first, int count,
                 OutputBuffer &out, LseBuffer &lse) {
    attngen::Arguments args = problem.arguments(out.data());
    const int64_t B = problem.batch, Hkv = layer.info.kv_heads, D = layer.info.head_dim;
    const int64_t Lk = problem.key_len;
    const size_t offset = static_cast<size_t>(first) * D * sizeof(float);
    const std::initializer_list<int64_t> strides = {Hkv * Lk * D, Lk * D, D, 1};
    args.key = attngen::strided_view(static_cast<const char *>(problem.key.data()) + offset,
                                     attngen::DType::f32, {B, Hkv, count, D}, strides);
    args.value = attngen::strided_view(static_cast<const char *>(problem.value.data()) + offset,
                                       attngen::DType::f32, {B, Hkv, count, D}, strides);
    const std::vector<int32_t> lengths(static_cast<size_t>(B), count);
    args.key_lengths = attngen::view(lengths.data(), {B});
    args.lse = lse.view;
    const attngen::Status status = attngen::run(layer, args);
    INFO("keys [" << first << ", " << first + count << "): " << status.message());
    REQUIRE(status.ok());
}

} // namespace

TEST_CASE("the lse in the flash form with grouped heads and key padding matches the reference") {
    check_against_reference(t_d64_lse_layer(), 7201);
}

TEST_CASE("the lse with whole rows or chunks by length, queries last to first, f16 storage") {
    check_against_reference(t_d32_lse_rows_layer(), 7202);
}

TEST_CASE("the lse in the split-KV decode form with sinks matches the reference") {
    check_against_reference(t_d64_lse_decode_layer(), 7203, decode_shapes());
}

TEST_CASE("the lse after projections, with an output projection, matches the reference") {
    check_against_reference(t_mha_lse_layer(), 7204);
}

TEST_CASE("the lse of a paged KV cache's steps matches the reference; rows past a sequence's "
          "new tokens are -inf") {
    check_steps_against_reference(t_d32_cache_lse_layer(), 7205);
}

TEST_CASE("rows that see no key: lse -inf and output 0, or with a sink the sink's logit") {
    const uint32_t seed = test_seed(7206);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    for (const attngen::Layer *layer : {&t_d64_lse_layer(), &t_d64_lse_decode_layer()}) {
        const attngen::LayerInfo &info = layer->info;
        INFO("layer " << info.name);
        const int query_len = info.sinks ? 3 : 20;
        Problem problem(info, 2, query_len, 50, seed);
        problem.key_lengths.ints = {0, 31}; // batch 0 sees nothing
        OutputBuffer out(info.dtype, problem.out_elements());
        LseBuffer lse(problem);
        attngen::Arguments args = problem.arguments(out.data());
        args.lse = lse.view;
        const attngen::Status status = attngen::run(*layer, args);
        INFO(status.message());
        REQUIRE(status.ok());
        const std::vector<float> got = out.values();
        for (size_t i = 0; i < got.size() / 2; i++)
            REQUIRE(got[i] == 0.0f);
        for (int h = 0; h < info.heads; h++)
            for (int q = 0; q < query_len; q++) {
                const float value = lse.values[static_cast<size_t>(h) * query_len + q];
                INFO("head " << h << ", query " << q << ": lse " << value);
                if (info.sinks)
                    CHECK(value == Approx(problem.sinks.values[h]).margin(1e-6));
                else
                    CHECK(value == -std::numeric_limits<float>::infinity());
            }
        std::vector<double> want_lse;
        reference_attention(problem.reference(), &want_lse);
        CHECK(lse_error(lse.values, want_lse) <= lse_tolerance);
    }
}

TEST_CASE("attention over keys A and B, merged by their lse, is attention over A and B together") {
    const uint32_t seed = test_seed(7207);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const attngen::Layer &layer = t_d64_lse_layer();
    const attngen::LayerInfo &info = layer.info;
    for (const int split : {1, 37, 64, 99}) {
        const int key_len = 100;
        Problem problem(info, 2, 19, key_len, seed + static_cast<uint32_t>(split));
        INFO("keys split at " << split << ", " << describe(problem, seed));
        OutputBuffer whole(info.dtype, problem.out_elements()), a(whole), b(whole);
        LseBuffer whole_lse(problem), a_lse(problem), b_lse(problem);
        run_on_keys(layer, problem, 0, key_len, whole, whole_lse);
        run_on_keys(layer, problem, 0, split, a, a_lse);
        run_on_keys(layer, problem, split, key_len - split, b, b_lse);

        const std::vector<int64_t> shape = problem.out_shape();
        const std::initializer_list<int64_t> out_shape = {shape[0], shape[1], shape[2], shape[3]};
        const std::initializer_list<int64_t> lse_shape = {shape[0], shape[1], shape[2]};
        OutputBuffer merged(info.dtype, problem.out_elements());
        std::vector<float> merged_lse(whole_lse.values.size(), not_written);
        const attngen::Status status =
            attngen::merge_attention({{attngen::view(a.data(), info.dtype, out_shape),
                                       attngen::view(a_lse.values.data(), lse_shape)},
                                      {attngen::view(b.data(), info.dtype, out_shape),
                                       attngen::view(b_lse.values.data(), lse_shape)}},
                                     attngen::mutable_view(merged.data(), info.dtype, out_shape),
                                     attngen::mutable_view(merged_lse.data(), lse_shape));
        INFO(status.message());
        REQUIRE(status.ok());

        // Against the layer over all keys, and both against the reference over all of them.
        std::vector<double> want_lse;
        problem.key_lengths.ints.assign(2, key_len);
        const std::vector<double> want = reference_attention(problem.reference(), &want_lse);
        CHECK(relative_error(merged.values(), want) <= tolerance_for(info.dtype));
        CHECK(lse_error(merged_lse, want_lse) <= lse_tolerance);
        const std::vector<float> whole_floats = whole.values();
        const std::vector<double> whole_values(whole_floats.begin(), whole_floats.end());
        CHECK(relative_error(merged.values(), whole_values) <= tolerance_for(info.dtype));
        CHECK(lse_error(merged_lse, std::vector<double>(whole_lse.values.begin(),
                                                        whole_lse.values.end())) <= lse_tolerance);
    }
}

TEST_CASE("an lse missing, misshapen, of another dtype, overlapping or given to a layer without "
          "one is refused by name, outputs untouched") {
    const uint32_t seed = test_seed(7208);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const attngen::Layer &layer = t_d64_lse_layer();
    const int64_t B = 2, H = layer.info.heads, Lq = 5;
    Problem problem(layer.info, static_cast<int>(B), static_cast<int>(Lq), 9, seed);
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    const std::vector<float> out_before = out.values();
    LseBuffer lse(problem);
    std::vector<uint16_t> half(lse.values.size(), 0x3c00);
    auto refused = [&](const attngen::Layer &called, const attngen::Arguments &args,
                       const std::string &expected) {
        const std::vector<float> lse_before = lse.values;
        const attngen::Status status = attngen::run(called, args);
        INFO("expected \"" << expected << "\", got \"" << status.message() << "\"");
        CHECK_FALSE(status.ok());
        CHECK(status.message().find(expected) != std::string::npos);
        CHECK(out.values() == out_before);
        CHECK(std::memcmp(lse.values.data(), lse_before.data(), lse_before.size() * 4) == 0);
    };
    attngen::Arguments args = problem.arguments(out.data());
    refused(layer, args, "needs `lse` (batch, heads, query length) but it was not given");
    args.lse = attngen::mutable_view(lse.values.data(), {B, H - 1, Lq});
    refused(layer, args, "`lse` has heads 3 but layer 't_d64_lse' was generated for 4");
    args.lse = attngen::mutable_view(lse.values.data(), {B, H, Lq - 1});
    refused(layer, args, "`lse` has query length 4 but");
    args.lse = attngen::mutable_view(half.data(), attngen::DType::f16, {B, H, Lq});
    refused(layer, args, "`lse` has dtype f16");
    args.lse = lse.view;
    args.lse.data = nullptr;
    refused(layer, args, "`lse` has a null data pointer");
    args.lse = lse.view;
    args.lse.strides[1] = 0; // every head writes the same elements
    refused(layer, args, "`lse` has overlapping elements");
    // lse over the first elements of out, and over query's.
    args.lse = attngen::mutable_view(static_cast<float *>(out.data()), {B, H, Lq});
    refused(layer, args, "`out` overlaps `lse`");
    args.lse = attngen::mutable_view(static_cast<float *>(const_cast<void *>(problem.query.data())),
                                     {B, H, Lq});
    refused(layer, args, "`lse` overlaps `query`");

    const attngen::Layer &plain = t_d16_plain_layer();
    Problem other(plain.info, 1, 6, 6, seed);
    OutputBuffer other_out(plain.info.dtype, other.out_elements());
    const std::vector<float> other_before = other_out.values();
    std::vector<float> stray(static_cast<size_t>(plain.info.heads) * 6, not_written);
    attngen::Arguments plain_args = other.arguments(other_out.data());
    plain_args.lse = attngen::mutable_view(stray.data(), {1, plain.info.heads, 6});
    const attngen::Status status = attngen::run(plain, plain_args);
    INFO(status.message());
    CHECK(status.message().find("`lse` was given but layer 't_d16_plain' writes no lse") !=
          std::string::npos);
    CHECK(other_out.values() == other_before);
    CHECK(stray == std::vector<float>(stray.size(), not_written));
}
