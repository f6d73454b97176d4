// A packed call (layout = packed) over random sequences, checked sequence by sequence against
// the double-precision reference of that sequence alone: shared by the CPU tests
// (test_packed.cpp) and the GPU schedule's (test_gpu.cpp).
#pragma once

#include "test_support.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace attngen_test {

/**
 * A packed call over random sequences: a batched problem of the longest lengths, whose first
 * query_lengths[b] queries and key_lengths[b] keys of each entry are packed end to end (in
 * self-attention with projections, the keys are the queries).
 */
struct PackedProblem {
    PackedProblem(const attngen::Layer &layer, std::vector<int> queries, std::vector<int> keys,
                  uint32_t seed);

    size_t row_width() const;
    /** Sequence b's output rows (1, H, Lq, Dv) or (1, Lq, M), as the reference lays them out. */
    std::vector<float> output_rows(int b) const;
    /** Sequence b's lse (1, H, Lq). */
    std::vector<float> lse_rows(int b) const;

    const attngen::LayerInfo &info;
    std::vector<int> query_lengths, key_lengths;
    Problem problem;
    std::vector<int32_t> query_offsets, key_offsets;
    std::vector<PackedRows> packed;
    OutputBuffer out;
    std::vector<float> lse;
    attngen::Arguments args;
};

/**
 * Runs a packed problem and checks every sequence against the reference of it alone, within
 * tolerance_for(dtype) (the lse within lse_tolerance). `modify` sets the reference's score_mod
 * and mask predicate from the problem's declared tensors, as the layer's expressions read them.
 */
void check_packed(const attngen::Layer &layer, const std::vector<int> &queries,
                  const std::vector<int> &keys, uint32_t base_seed,
                  const std::function<void(const Problem &, ReferenceProblem &)> &modify = {});

} // namespace attngen_test
