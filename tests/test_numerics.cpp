// Generated layers against the double-precision reference on random data: every head_dim class,
// mask kind and combination, grouped- and multi-query, projections, cross attention, storage
// types, and shapes with Lq or Lk = 1, lengths off the vector width, Lq != Lk and batch > 1.
#include "test_support.h"

#include "t_d128_additive.h"
#include "t_d16_causal_padding.h"
#include "t_d16_plain.h"
#include "t_d32_bf16.h"
#include "t_d32_f16.h"
#include "t_d32_gqa_causal.h"
#include "t_d32_whole_rows.h"
#include "t_d48_odd_blocks.h"
#include "t_d64_all_masks.h"
#include "t_d64_flash_gqa.h"
#include "t_d64_flash_plain.h"
#include "t_d64_gqa_decode.h"
#include "t_d64_mqa_padding.h"
#include "t_d64_reference.h"
#include "t_d64_rows_or_chunks.h"
#include "t_d80_decode_window.h"
#include "t_d80_flash_window.h"
#include "t_d80_window.h"
#include "t_mha_cross.h"
#include "t_mha_cross_decode.h"
#include "t_mha_decode.h"
#include "t_mha_inplace_odd.h"
#include "t_mha_odd_gemm.h"
#include "t_mha_qkv.h"
#include "t_mha_rows_or_chunks.h"
#include "t_mha_self.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attngen_test;

TEST_CASE("plain attention with head_dim 16 matches the reference") {
    check_against_reference(t_d16_plain_layer(), 1601);
}

TEST_CASE("grouped-query causal attention with head_dim 32 matches the reference") {
    check_against_reference(t_d32_gqa_causal_layer(), 3201);
}

TEST_CASE("multi-query attention with key padding and head_dim 64 matches the reference") {
    check_against_reference(t_d64_mqa_padding_layer(), 6401);
}

TEST_CASE("sliding-window attention with head_dim 80 matches the reference") {
    check_against_reference(t_d80_window_layer(), 8001);
}

TEST_CASE("an additive mask with head_dim 128 matches the reference") {
    check_against_reference(t_d128_additive_layer(), 12801);
}

TEST_CASE("causal and key-padding masks combined match the reference") {
    check_against_reference(t_d16_causal_padding_layer(), 1602);
}

TEST_CASE("all four mask kinds combined match the reference") {
    check_against_reference(t_d64_all_masks_layer(), 6402);
}

TEST_CASE("self-attention with projections, biases and grouped heads matches the reference") {
    check_against_reference(t_mha_self_layer(), 9001);
}

TEST_CASE("cross-attention with projections and key padding matches the reference") {
    check_against_reference(t_mha_cross_layer(), 9002);
}

TEST_CASE("q/k/v projections without an output projection match the reference") {
    check_against_reference(t_mha_qkv_layer(), 9003);
}

TEST_CASE("packed projection GEMMs with tiles that divide nothing match the reference") {
    check_against_reference(t_mha_odd_gemm_layer(), 9005);
}

TEST_CASE("in-place projection GEMMs with tiles the lengths do not divide match the reference") {
    check_against_reference(t_mha_inplace_odd_layer(), 9008, {{2, 100, 131}, {1, 131, 7}});
}

TEST_CASE("f16 storage with f32 accumulation matches the reference") {
    check_against_reference(t_d32_f16_layer(), 3202);
}

TEST_CASE("bf16 storage with f32 accumulation matches the reference") {
    check_against_reference(t_d32_bf16_layer(), 3203);
}

TEST_CASE("register blocks that divide nothing evenly match the reference") {
    check_against_reference(t_d48_odd_blocks_layer(), 4801);
}

TEST_CASE("the prefill flash form with grouped queries, causal and padding matches") {
    check_against_reference(t_d64_flash_gqa_layer(), 6405, decode_shapes());
}

TEST_CASE("the prefill flash form with a window, an additive mask and f16 matches") {
    check_against_reference(t_d80_flash_window_layer(), 8003, decode_shapes());
}

TEST_CASE("the prefill flash form without a mask, over several query tiles, matches") {
    // Several query tiles (16 to 48 queries each, by target), the last one short, each walking
    // every 16-key chunk, the last chunk short.
    std::vector<Shape> shapes = decode_shapes();
    const std::vector<Shape> tiles = {{1, 100, 70}, {2, 65, 130}, {1, 33, 47}, {1, 97, 16}};
    shapes.insert(shapes.end(), tiles.begin(), tiles.end());
    check_against_reference(t_d64_flash_plain_layer(), 6407, shapes);
}

TEST_CASE("the whole-row form (flash_chunk 0) with grouped queries and masks matches") {
    check_against_reference(t_d32_whole_rows_layer(), 3204, decode_shapes());
}

TEST_CASE("a layer with both forms (rows_up_to) matches on either side of its threshold") {
    // Whole rows up to Lk = 40, chunks of 16 keys beyond: both sides of the boundary, short
    // queries against long keys, and the shapes every layer runs.
    const std::vector<Shape> boundary = {{1, 40, 40}, {2, 41, 41}, {1, 3, 40},
                                         {1, 3, 41},  {2, 70, 39}, {1, 39, 90}};
    std::vector<Shape> shapes = decode_shapes();
    shapes.insert(shapes.end(), boundary.begin(), boundary.end());
    check_against_reference(t_d64_rows_or_chunks_layer(), 6406, shapes);
}

TEST_CASE("a layer with both forms and projections matches on either side of its threshold") {
    check_against_reference(t_mha_rows_or_chunks_layer(), 9007,
                            {{1, 24, 24}, {2, 25, 25}, {1, 5, 24}, {1, 5, 25}, {1, 60, 200}});
}

TEST_CASE("the plain reference schedule matches the reference") {
    check_against_reference(t_d64_reference_layer(), 6403);
}

TEST_CASE("the split-KV decode form with grouped queries, causal and padding matches") {
    check_against_reference(t_d64_gqa_decode_layer(), 6404, decode_shapes());
}

TEST_CASE("the split-KV decode form with a window, an additive mask and f16 matches") {
    check_against_reference(t_d80_decode_window_layer(), 8002, decode_shapes());
}

TEST_CASE("the split-KV decode form with projections matches the reference") {
    check_against_reference(t_mha_decode_layer(), 9004);
}

TEST_CASE("cross-attention decode with projections over a long context matches the reference") {
    check_against_reference(t_mha_cross_decode_layer(), 9006, decode_shapes());
}

TEST_CASE("a query row whose every key is masked gives zeros, not NaN") {
    const uint32_t seed = test_seed(77);
    INFO("seed " << seed);
    // Whole rows, the flash form and the split-KV form, where every chunk of a row is masked.
    const attngen::Layer &layer =
        GENERATE(std::cref(t_d32_whole_rows_layer()), std::cref(t_d64_flash_gqa_layer()),
                 std::cref(t_d64_rows_or_chunks_layer()), std::cref(t_d64_gqa_decode_layer()));
    INFO("layer " << layer.info.name);
    // Key padding of length 0 hides every key of batch 0; batch 1 keeps some.
    Problem problem(layer.info, 2, 9, 12, seed);
    problem.key_lengths.ints = {0, 5};
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    attngen::Status status = attngen::run(layer, problem.arguments(out.data()));
    REQUIRE(status.ok());
    std::vector<float> values = out.values();
    const size_t batch_elements = values.size() / 2;
    for (size_t i = 0; i < batch_elements; i++)
        REQUIRE(values[i] == 0.0f);
    for (float value : values)
        REQUIRE(std::isfinite(value));

    // Causal with Lq > Lk: the first Lq - Lk queries see no key at all.
    Problem early(layer.info, 1, 10, 4, seed + 1);
    early.key_lengths.ints = {4};
    OutputBuffer early_out(layer.info.dtype, early.out_elements());
    REQUIRE(attngen::run(layer, early.arguments(early_out.data())).ok());
    std::vector<double> want = reference_attention(early.reference());
    std::vector<float> got = early_out.values();
    const int D = layer.info.head_dim, Lq = 10;
    for (int h = 0; h < layer.info.heads; h++)
        for (int q = 0; q < 6; q++)
            for (int d = 0; d < D; d++)
                REQUIRE(got[(static_cast<size_t>(h) * Lq + q) * D + d] == 0.0f);
    CHECK(relative_error(got, want) <= tolerance_for(layer.info.dtype));
}
