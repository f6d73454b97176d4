// Key and value inputs stored apart from the layer's dtype (kv_dtype): i8 rows with a scale each
// (as llama.cpp's q8_0 K/V) in the flash, whole-row and split-KV decode forms, with rotary
// embeddings, grouped heads, masks and f16 queries; f16 keys and values under an f32 layer. Each
// against the double-precision reference on the values the layer reads, the i8 ones also against
// attention over the unquantized values within the quantization's worst-case bound, and every
// bad scale or dtype refused by name with the output untouched.
#include "test_support.h"

#include "t_d32_kv_f16.h"
#include "t_d32_kv_i8.h"
#include "t_d64_gqa_decode.h"
#include "t_d64_kv_i8_decode.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace attngen_test;
using attngen::DType;

TEST_CASE("i8 keys and values with rotary embeddings and f16 queries in the flash form match the "
          "reference on their dequantized values") {
    check_against_reference(t_d32_kv_i8_layer(), 7401);
}

TEST_CASE("i8 keys and values in the split-KV decode form match the reference on their "
          "dequantized values") {
    // On x86 this form rounds the queries to 16 bits (integer scores): its error bound joins
    // the f32 tolerance there.
    const attngen::Layer &layer = t_d64_kv_i8_decode_layer();
#if defined(__x86_64__)
    const double rounding = query_rounding_error(layer.info.head_dim, layer.info.scale);
#else
    const double rounding = 0.0;
#endif
    check_against_reference(layer, 7402, decode_shapes(), rounding);
}

TEST_CASE("f16 keys and values under an f32 layer in the whole-row form match the reference") {
    check_against_reference(t_d32_kv_f16_layer(), 7403);
}

TEST_CASE("i8 keys and values stay within their quantization's worst-case error bound of "
          "attention over the unquantized values") {
    // As for an i8 cache: |q|, |K|, |V| <= 1, D = 64, scale = 1/8, and the bound is 0.069.
    const uint32_t seed = test_seed(7404);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const attngen::Layer &layer = t_d64_kv_i8_decode_layer();
    const double bound = i8_error_bound(layer.info.head_dim, layer.info.scale);
    double worst = 0.0;
    for (const Shape &shape : {Shape{2, 1, 700}, Shape{1, 5, 300}, Shape{3, 16, 77}}) {
        Problem problem(layer.info, shape.batch, shape.query_len, shape.key_len, seed);
        OutputBuffer out(layer.info.dtype, problem.out_elements());
        REQUIRE(attngen::run(layer, problem.arguments(out.data())).ok());
        ReferenceProblem unquantized = problem.reference();
        unquantized.key.assign(problem.key.unquantized.begin(), problem.key.unquantized.end());
        unquantized.value.assign(problem.value.unquantized.begin(),
                                 problem.value.unquantized.end());
        const std::vector<double> want = reference_attention(unquantized);
        const std::vector<float> got = out.values();
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); i++)
            worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    }
    INFO("largest error " << worst << ", bound " << bound);
    CHECK(worst <= bound);
    CHECK(worst > 0.0); // the inputs were quantized
}

TEST_CASE("i8 scales that are missing, misshapen, not f32 or non-finite, keys of another dtype, "
          "and scales given to a layer without i8 inputs are refused by name, output untouched") {
    const uint32_t seed = test_seed(7405);
    INFO("seed " << seed);
    const attngen::Layer &layer = t_d64_kv_i8_decode_layer();
    Problem problem(layer.info, 2, 3, 20, seed);
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    const std::vector<float> before = out.values();
    const int64_t Hkv = layer.info.kv_heads;
    attngen::Arguments args = problem.arguments(out.data());
    REQUIRE(attngen::validate(layer, args).ok()); // the unspoiled call is valid

    attngen::Arguments spoiled = args;
    spoiled.key_scales = attngen::Tensor();
    check_refused(layer, spoiled, "`key_scales`");
    const std::vector<float> short_scales(static_cast<size_t>(2 * Hkv * 19), 1.0f);
    spoiled = args;
    spoiled.value_scales = attngen::view(short_scales.data(), {2, Hkv, 19});
    check_refused(layer, spoiled, "`value_scales` has key length 19");
    const std::vector<uint16_t> half_scales(static_cast<size_t>(2 * Hkv * 20), 0x3c00);
    spoiled = args;
    spoiled.key_scales = attngen::view(half_scales.data(), DType::f16, {2, Hkv, 20});
    check_refused(layer, spoiled, "`key_scales`");
    for (const float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        // Batch 1, kv head 0, key 13.
        std::vector<float> poisoned = problem.value_scales.values;
        poisoned[static_cast<size_t>((1 * Hkv + 0) * 20 + 13)] = bad;
        spoiled = args;
        spoiled.value_scales = attngen::view(poisoned.data(), {2, Hkv, 20});
        check_refused(layer, spoiled,
                      "`value_scales` holds " + std::string(std::isnan(bad) ? "NaN" : "+inf") +
                          " at [1, 0, 13]");
    }
    // f32 keys where the layer takes i8.
    const std::vector<float> f32_keys(problem.key.unquantized);
    spoiled = args;
    spoiled.key = attngen::view(f32_keys.data(), {2, Hkv, 20, layer.info.head_dim});
    check_refused(layer, spoiled, "`key`");
    CHECK(out.values() == before);

    const attngen::Layer &plain = t_d64_gqa_decode_layer();
    Problem other(plain.info, 2, 3, 20, seed);
    OutputBuffer other_out(plain.info.dtype, other.out_elements());
    const std::vector<float> other_before = other_out.values();
    attngen::Arguments plain_args = other.arguments(other_out.data());
    plain_args.key_scales = problem.key_scales.view();
    check_refused(plain, plain_args, "`key_scales`");
    CHECK(other_out.values() == other_before);
}
