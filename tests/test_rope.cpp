// Rotary position embeddings: generated layers against the double-precision reference in every
// form (flash chunks, whole rows, split-KV decode, reversed query tiles, projections separate
// and fused), both layouts, partial rotary and each scaling; and the reference's rotation
// against the properties and values that define it.
#include "test_support.h"

#include "t_d32_rope_neox.h"
#include "t_d64_rope_decode.h"
#include "t_d64_rope_llama3.h"
#include "t_mha_rope.h"
#include "t_mha_rope_fused.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>

using namespace attngen_test;

namespace {

// Positions in the thousands, where an angle rounded to f32 would be off by up to 2.4e-4
// radians (half an f32 ulp at 4096 and above): the pipeline reduces it exactly instead.
const std::vector<Shape> long_positions = {{1, 1, 5000}, {1, 3, 4099}};

std::vector<double> random_rows(std::mt19937 &rng, size_t count) {
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    std::vector<double> values(count);
    for (double &value : values)
        value = uniform(rng);
    return values;
}

double dot(const double *a, const double *b, int dim) {
    double sum = 0.0;
    for (int d = 0; d < dim; d++)
        sum += a[d] * b[d];
    return sum;
}

} // namespace

TEST_CASE("rotary embeddings (neox) in the flash form with grouped heads and causal mask") {
    check_against_reference(t_d32_rope_neox_layer(), 3301, long_positions);
}

TEST_CASE("interleaved partial rotary with llama3 scaling in the whole-row form") {
    check_against_reference(t_d64_rope_llama3_layer(), 3302, long_positions);
}

TEST_CASE("rotary embeddings in the split-KV decode form with f16 storage and a window") {
    std::vector<Shape> shapes = decode_shapes();
    shapes.insert(shapes.end(), long_positions.begin(), long_positions.end());
    check_against_reference(t_d64_rope_decode_layer(), 3303, shapes);
}

TEST_CASE("rotary embeddings between the projections and the scores, linear scaling") {
    check_against_reference(t_mha_rope_layer(), 3304, {{1, 700, 700}});
}

TEST_CASE("rotary embeddings on a fused Q/K/V projection") {
    check_against_reference(t_mha_rope_fused_layer(), 3305, {{2, 90, 90}});
}

TEST_CASE("the reference rotation turns the written-out pairs of both layouts") {
    // head_dim 4, theta 100: pair 0 turns by p radians, pair 1 by p / 10.
    ReferenceRope rope;
    rope.theta = 100.0;
    rope.rotary_dim = 4;
    const double x[] = {1.0, 2.0, 3.0, 4.0};
    const double c0 = std::cos(3.0), s0 = std::sin(3.0), c1 = std::cos(0.3), s1 = std::sin(0.3);

    rope.layout = ReferenceRope::Layout::neox; // pairs (0, 2) and (1, 3)
    std::vector<double> neox(x, x + 4);
    reference_rope(rope, neox, 1, 1, 1, 4, 3);
    const double want_neox[] = {1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 3 * c0 + 1 * s0, 4 * c1 + 2 * s1};
    for (int d = 0; d < 4; d++)
        CHECK(neox[d] == Approx(want_neox[d]).epsilon(1e-14));

    rope.layout = ReferenceRope::Layout::interleaved; // pairs (0, 1) and (2, 3)
    std::vector<double> interleaved(x, x + 4);
    reference_rope(rope, interleaved, 1, 1, 1, 4, 3);
    const double want_interleaved[] = {1 * c0 - 2 * s0, 2 * c0 + 1 * s0, 3 * c1 - 4 * s1,
                                       4 * c1 + 3 * s1};
    for (int d = 0; d < 4; d++)
        CHECK(interleaved[d] == Approx(want_interleaved[d]).epsilon(1e-14));

    // Linear scaling by 3 turns position 3 as far as position 1 unscaled.
    rope.scaling = ReferenceRope::Scaling::linear;
    rope.factor = 3.0;
    std::vector<double> scaled(x, x + 4), unscaled(x, x + 4);
    reference_rope(rope, scaled, 1, 1, 1, 4, 3);
    rope.scaling = ReferenceRope::Scaling::none;
    reference_rope(rope, unscaled, 1, 1, 1, 4, 1);
    for (int d = 0; d < 4; d++)
        CHECK(scaled[d] == Approx(unscaled[d]).epsilon(1e-14));
}

TEST_CASE("the reference rotation keeps norms and makes scores depend on relative position") {
    const uint32_t seed = test_seed(3306);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    std::mt19937 rng(seed);
    const int dim = 24;
    for (auto layout : {ReferenceRope::Layout::neox, ReferenceRope::Layout::interleaved}) {
        ReferenceRope rope;
        rope.layout = layout;
        rope.rotary_dim = 16; // partial: features 16..23 pass unchanged
        rope.scaling = ReferenceRope::Scaling::llama3;
        rope.factor = 8.0;
        rope.original_max_positions = 32;
        const std::vector<double> q = random_rows(rng, dim), k = random_rows(rng, dim);
        // q at position 11 + shift, k at 4 + shift (a sequence of 12 rows, rotated from
        // offset `shift`): the score is the same for every shift.
        double first = 0.0;
        for (int shift : {0, 5, 1000}) {
            std::vector<double> qs(12 * dim), ks(12 * dim);
            std::copy(q.begin(), q.end(), qs.begin() + 11 * dim);
            std::copy(k.begin(), k.end(), ks.begin() + 4 * dim);
            reference_rope(rope, qs, 1, 1, 12, dim, shift);
            reference_rope(rope, ks, 1, 1, 12, dim, shift);
            const double score = dot(&qs[11 * dim], &ks[4 * dim], dim);
            CHECK(dot(&qs[11 * dim], &qs[11 * dim], dim) == Approx(dot(q.data(), q.data(), dim)));
            for (int d = 16; d < dim; d++)
                CHECK(qs[11 * dim + d] == q[d]);
            if (shift == 0)
                first = score;
            else
                CHECK(score == Approx(first).epsilon(1e-10));
        }
    }
}
