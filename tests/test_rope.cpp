// Rotary position embeddings: generated layers against the double-precision reference in every
// form (flash chunks, whole rows, split-KV decode, reversed query tiles, projections separate
// and fused), both layouts, partial rotary and each scaling; and the reference's rotation
// against the properties and values that define it.
#include "test_support.h"

#include "t_d32_rope_neox.h"
#include "t_d32_rope_table.h"
#include "t_d64_rope_decode.h"
#include "t_d64_rope_llama3.h"
#include "t_mha_rope.h"
#include "t_mha_rope_packed.h"
#include "t_mha_rope_table.h"

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

TEST_CASE("rotary embeddings on packed Q/K/V projections") {
    check_against_reference(t_mha_rope_packed_layer(), 3305, {{2, 90, 90}});
}

TEST_CASE("rotary embeddings from the caller's tables, interleaved and partial, flash form") {
    check_against_reference(t_d32_rope_table_layer(), 3307, long_positions);
}

TEST_CASE("rotary embeddings from the caller's tables after projections") {
    check_against_reference(t_mha_rope_table_layer(), 3308, {{2, 130, 130}});
}

TEST_CASE("rope tables of the wrong shape, missing, or too short for the queries are refused") {
    const attngen::Layer &layer = t_d32_rope_table_layer();
    Problem problem(layer.info, 2, 5, 9, test_seed(3309));
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    const std::vector<float> untouched = out.values();
    auto refused = [&](const attngen::Arguments &args, const std::string &message) {
        attngen::Status status = attngen::run(layer, args);
        CHECK_FALSE(status.ok());
        CHECK(status.message() == message);
        CHECK(out.values() == untouched);
    };

    attngen::Arguments missing = problem.arguments(out.data());
    missing.rope_sin = attngen::Tensor();
    refused(missing, "attngen: layer 't_d32_rope_table' needs `rope_sin` (key length, "
                     "rotary_dim/2) but it was not given");

    HostTensor short_table = problem.rope_cos;
    short_table.shape = {8, 12};
    short_table.values.resize(8 * 12);
    attngen::Arguments too_short = problem.arguments(out.data());
    too_short.rope_cos = short_table.view();
    refused(too_short, "attngen: `rope_cos` has key length 8 but `key` has key length 9");

    HostTensor narrow = problem.rope_cos;
    narrow.shape = {9, 8};
    narrow.values.resize(9 * 8);
    attngen::Arguments wrong_pairs = problem.arguments(out.data());
    wrong_pairs.rope_cos = narrow.view();
    refused(wrong_pairs, "attngen: `rope_cos` has rotary_dim/2 8 but layer 't_d32_rope_table' was "
                         "generated for 12");

    // More queries than keys: query 0 would sit at a negative position, before the table.
    Problem long_queries(layer.info, 1, 10, 9, test_seed(3310));
    OutputBuffer long_out(layer.info.dtype, long_queries.out_elements());
    attngen::Status status = attngen::run(layer, long_queries.arguments(long_out.data()));
    CHECK(status.message() == "attngen: `rope_cos` and `rope_sin` hold key positions 0..8, and "
                              "query q sits at q + Lk - Lq: rope = table needs Lq <= Lk, got Lq "
                              "10 and Lk 9");

    // A layer that computes its own angles takes no tables.
    const attngen::Layer &computed = t_d32_rope_neox_layer();
    Problem plain(computed.info, 1, 4, 9, test_seed(3311));
    OutputBuffer plain_out(computed.info.dtype, plain.out_elements());
    attngen::Arguments extra = plain.arguments(plain_out.data());
    extra.rope_cos = problem.rope_cos.view();
    CHECK(attngen::run(computed, extra).message() ==
          "attngen: `rope_cos` was given but layer 't_d32_rope_neox' takes no rope tables (it is "
          "not rope = table)");
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
