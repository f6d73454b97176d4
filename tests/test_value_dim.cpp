// V's head size apart from Q's and K's (value_dim, as DeepSeek's 192/128 heads): generated layers
// against the double-precision reference in every form (flash chunks, whole rows, split-KV
// decode), after projections, with KV caches (paged i8 after projections, contiguous f16 in
// decode), and tensors of head_dim where value_dim is wanted refused by name.
#include "cached_batch.h"
#include "test_support.h"

#include "t_d32_v16_cache_decode.h"
#include "t_d32_v64_rows.h"
#include "t_d48_v32.h"
#include "t_d64_v48_decode.h"
#include "t_mha_v16.h"
#include "t_mha_v16_cache.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace attngen_test;

TEST_CASE("value_dim 32 under head_dim 48 with rotary embeddings in the flash form matches the "
          "reference") {
    check_against_reference(t_d48_v32_layer(), 7501);
}

TEST_CASE("value_dim 64 over head_dim 32 with sinks and the lse in the whole-row form matches the "
          "reference") {
    check_against_reference(t_d32_v64_rows_layer(), 7502);
}

TEST_CASE("value_dim 48 under head_dim 64 in the split-KV decode form matches the reference") {
    check_against_reference(t_d64_v48_decode_layer(), 7503, decode_shapes());
}

TEST_CASE("value_dim after projections: wv and the output projection follow it") {
    check_against_reference(t_mha_v16_layer(), 7504);
}

TEST_CASE("value_dim with a paged i8 cache after projections, step after step, matches the "
          "reference") {
    check_steps_against_reference(t_mha_v16_cache_layer(), 7505);
}

TEST_CASE("value_dim with a contiguous f16 cache: chunked prefill and decode match one prefill") {
    check_steps_against_reference(t_d32_v16_cache_decode_layer(), 7506);
    check_chunks_match_one_prefill(t_d32_v16_cache_decode_layer(), 7507);
}

TEST_CASE("value, out and wv of head_dim where the layer's value_dim is wanted are refused by "
          "name, output untouched") {
    const uint32_t seed = test_seed(7508);
    INFO("seed " << seed);
    const attngen::Layer &layer = t_d48_v32_layer();
    REQUIRE(layer.info.value_dim == 32);
    Problem problem(layer.info, 2, 5, 9, seed);
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    const std::vector<float> before = out.values();
    attngen::Arguments args = problem.arguments(out.data());
    REQUIRE(attngen::validate(layer, args).ok()); // the unspoiled call is valid

    const int64_t Hkv = layer.info.kv_heads, D = layer.info.head_dim;
    const std::vector<float> wide(static_cast<size_t>(2 * Hkv * 9 * D), 0.5f);
    attngen::Arguments spoiled = args;
    spoiled.value = attngen::view(wide.data(), {2, Hkv, 9, D});
    check_refused(layer, spoiled,
                  "`value` has value_dim 48 but layer 't_d48_v32' was generated "
                  "for 32");
    std::vector<float> wide_out(static_cast<size_t>(2 * layer.info.heads * 5 * D));
    spoiled = args;
    spoiled.out = attngen::mutable_view(wide_out.data(), {2, layer.info.heads, 5, D});
    check_refused(layer, spoiled, "`out` has value_dim 48");
    CHECK(out.values() == before);

    const attngen::Layer &projected = t_mha_v16_layer();
    Problem other(projected.info, 1, 4, 4, seed);
    OutputBuffer other_out(projected.info.dtype, other.out_elements());
    const std::vector<float> other_before = other_out.values();
    const int64_t M = projected.info.model_dim;
    const std::vector<float> wv(
        static_cast<size_t>(projected.info.kv_heads) * projected.info.head_dim * M, 0.1f);
    attngen::Arguments projected_args = other.arguments(other_out.data());
    projected_args.wv =
        attngen::view(wv.data(), {projected.info.kv_heads * projected.info.head_dim, M});
    check_refused(projected, projected_args, "`wv` has kv_heads*value_dim 48");
    CHECK(other_out.values() == other_before);
}
