// Non-finite inputs: NaN, +inf and -inf planted in every input of layers of every form (whole
// rows, flash chunks, split-KV decode, the reference schedule), mask kind and storage type,
// checked against the double-precision reference that follows PyTorch's IEEE rules (see
// check_non_finite and docs/api.md, "Non-finite inputs").
#include "test_support.h"

#include "t_d128_additive.h"
#include "t_d16_causal_padding.h"
#include "t_d16_plain.h"
#include "t_d32_bf16.h"
#include "t_d32_f16.h"
#include "t_d32_gqa_causal.h"
#include "t_d32_rope_neox.h"
#include "t_d32_whole_rows.h"
#include "t_d48_odd_blocks.h"
#include "t_d64_all_masks.h"
#include "t_d64_flash_gqa.h"
#include "t_d64_flash_plain.h"
#include "t_d64_gqa_decode.h"
#include "t_d64_mqa_padding.h"
#include "t_d64_reference.h"
#include "t_d64_rope_decode.h"
#include "t_d64_rows_or_chunks.h"
#include "t_d80_decode_window.h"
#include "t_d80_flash_window.h"
#include "t_d80_window.h"
#include "t_mha_cross.h"
#include "t_mha_decode.h"
#include "t_mha_odd_gemm.h"
#include "t_mha_self.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace attngen_test;

TEST_CASE("non-finite inputs: whole rows and flash chunks, every structured mask") {
    check_non_finite(t_d16_plain_layer(), 4601);
    check_non_finite(t_d32_gqa_causal_layer(), 4602);
    check_non_finite(t_d64_mqa_padding_layer(), 4603);
    check_non_finite(t_d80_window_layer(), 4604);
    check_non_finite(t_d16_causal_padding_layer(), 4605);
    check_non_finite(t_d48_odd_blocks_layer(), 4606);
    check_non_finite(t_d32_whole_rows_layer(), 4607);
}

TEST_CASE("non-finite inputs: an additive mask, and all mask kinds combined") {
    check_non_finite(t_d128_additive_layer(), 4611);
    check_non_finite(t_d64_all_masks_layer(), 4612);
}

TEST_CASE("non-finite inputs: the flash forms (chunks, alternating chunks), and rows or chunks") {
    check_non_finite(t_d64_flash_gqa_layer(), 4621);
    check_non_finite(t_d80_flash_window_layer(), 4622);
    check_non_finite(t_d64_flash_plain_layer(), 4623);
    check_non_finite(t_d64_rows_or_chunks_layer(), 4624);
}

TEST_CASE("non-finite inputs: the split-KV decode form") {
    check_non_finite(t_d64_gqa_decode_layer(), 4631);
    check_non_finite(t_d80_decode_window_layer(), 4632);
    check_non_finite(t_mha_decode_layer(), 4633);
}

TEST_CASE("non-finite inputs: f16 and bf16 storage, the reference schedule, rotary embeddings") {
    check_non_finite(t_d32_f16_layer(), 4641);
    check_non_finite(t_d32_bf16_layer(), 4642);
    check_non_finite(t_d64_reference_layer(), 4643);
    check_non_finite(t_d32_rope_neox_layer(), 4644);
    check_non_finite(t_d64_rope_decode_layer(), 4645);
}

TEST_CASE("non-finite inputs: projections, in place, packed and cross") {
    check_non_finite(t_mha_self_layer(), 4651);
    check_non_finite(t_mha_odd_gemm_layer(), 4652);
    check_non_finite(t_mha_cross_layer(), 4653);
}

TEST_CASE("non-finite inputs: the issue's causal GQA case, a hidden +inf key leaves rows alone") {
    // A NaN in query 0 of head 0 and +inf in key 2 of kv head 0 (heads 0 and 1 read it), 16
    // queries and keys: row 0 of head 0 is NaN; key 2 is hidden from queries 0 and 1, whose rows
    // are bit for bit those without the +inf; later queries of heads 0 and 1 see a score of
    // +inf (their rows are NaN) or -inf (key 2 weighs 0), by the sign of their element 7.
    const attngen::Layer &layer = t_d32_gqa_causal_layer();
    const uint32_t seed = test_seed(4661);
    INFO("seed " << seed);
    const int L = 16, D = layer.info.head_dim;
    Problem problem(layer.info, 1, L, L, seed);
    problem.query.values[5] = std::numeric_limits<float>::quiet_NaN();
    OutputBuffer finite_key(layer.info.dtype, problem.out_elements());
    REQUIRE(attngen::run(layer, problem.arguments(finite_key.data())).ok());
    problem.key.values[2 * D + 7] = std::numeric_limits<float>::infinity();
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    REQUIRE(attngen::run(layer, problem.arguments(out.data())).ok());
    ReferenceProblem reference = problem.reference();
    reference.zero_weight_values = false;
    const std::vector<double> want = reference_attention(reference);
    const std::vector<float> got = out.values(), before = finite_key.values();
    for (int h = 0; h < layer.info.heads; h++)
        for (int q = 0; q < L; q++) {
            INFO("head " << h << ", query " << q);
            const size_t row = (static_cast<size_t>(h) * L + q) * D;
            const bool nan_query = h == 0 && q == 0;
            const bool sees_inf = h < 2 && q >= 2;
            const bool positive =
                sees_inf && problem.query.values[row + 7] > 0; // score +inf, not -inf
            for (int d = 0; d < D; d++) {
                INFO("element " << d << ": " << got[row + d] << ", reference " << want[row + d]);
                if (nan_query || positive) {
                    CHECK(std::isnan(got[row + d]));
                    CHECK(std::isnan(want[row + d]));
                } else {
                    CHECK(std::abs(got[row + d] - want[row + d]) <= 5e-6);
                    if (!sees_inf) // key 2 hidden, or another kv head's: untouched
                        CHECK(got[row + d] == before[row + d]);
                }
            }
        }
}

namespace {

/**
 * Fills the keys and values at or past each sequence's key_lengths[b] with NaN and +inf, and
 * checks that the CPU forms match the reference exactly as if they were finite: they read no
 * value row there (docs/api.md, "Non-finite inputs").
 */
void check_padding_never_read(const attngen::Layer &layer, uint32_t base_seed) {
    const uint32_t seed = test_seed(base_seed);
    INFO("layer " << layer.info.name << ", seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    uint32_t problem_seed = seed;
    for (const Shape &shape : {Shape{2, 19, 19}, Shape{3, 3, 45}, Shape{1, 40, 130}}) {
        Problem problem(layer.info, shape.batch, shape.query_len, shape.key_len, ++problem_seed);
        const int64_t Hkv = layer.info.kv_heads, D = layer.info.head_dim, Lk = problem.key_len;
        for (int64_t b = 0; b < shape.batch; b++)
            for (int64_t h = 0; h < Hkv; h++)
                for (int64_t k = problem.key_lengths.ints[b]; k < Lk; k++)
                    for (int64_t d = 0; d < D; d++) {
                        const size_t i = static_cast<size_t>(((b * Hkv + h) * Lk + k) * D + d);
                        problem.key.values[i] = std::numeric_limits<float>::infinity();
                        problem.value.values[i] = std::numeric_limits<float>::quiet_NaN();
                    }
        ReferenceProblem reference = problem.reference();
        reference.zero_weight_values = false;
        OutputBuffer out(layer.info.dtype, problem.out_elements());
        INFO(describe(problem, problem_seed));
        REQUIRE(attngen::run(layer, problem.arguments(out.data())).ok());
        const double error = relative_error(out.values(), reference_attention(reference));
        INFO("relative error " << error << ", tolerance 5e-6");
        CHECK(error <= 5e-6);
    }
}

} // namespace

TEST_CASE("non-finite inputs: keys and values past key_lengths are never read on the CPU") {
    check_padding_never_read(t_d64_mqa_padding_layer(), 4671);
    check_padding_never_read(t_d16_causal_padding_layer(), 4672);
    check_padding_never_read(t_d64_all_masks_layer(), 4673);
    check_padding_never_read(t_d48_odd_blocks_layer(), 4674);
    check_padding_never_read(t_d64_flash_gqa_layer(), 4675);
    check_padding_never_read(t_d64_gqa_decode_layer(), 4676);
    check_padding_never_read(t_d64_rows_or_chunks_layer(), 4677);
}
