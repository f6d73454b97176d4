// Layers with score_mod and mask predicates from tests/layers/modifications.attn, each checked
// against the double-precision reference with the same modification written plainly here.
#include "test_support.h"

#include "t_mods.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

using namespace attngen_test;

namespace {

struct Shape {
    int batch, query_len, key_len;
};

const Shape shapes[] = {{1, 1, 1}, {1, 1, 29}, {2, 17, 17}, {1, 40, 33}, {2, 64, 64}, {1, 23, 90}};

/**
 * Runs `layer` on every shape, then with non-finite inputs (check_non_finite); `prepare` may
 * adjust the random problem (its declared tensors and scalars) and must set the reference's
 * modification, written out plainly.
 */
void check_modification(const attngen::Layer &layer, uint32_t base_seed, const Prepare &prepare) {
    const uint32_t seed = test_seed(base_seed);
    INFO("layer " << layer.info.name << ", seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    uint32_t problem_seed = seed;
    for (const Shape &shape : shapes) {
        Problem problem(layer.info, shape.batch, shape.query_len, shape.key_len, ++problem_seed);
        ReferenceProblem reference = problem.reference();
        prepare(problem, reference);
        OutputBuffer out(layer.info.dtype, problem.out_elements());
        attngen::Status status = attngen::run(layer, problem.arguments(out.data()));
        INFO(describe(problem, problem_seed) << ": " << status.message());
        REQUIRE(status.ok());
        // score_mods add a transcendental or two: 1e-5 instead of the plain layers' 5e-6.
        double error = relative_error(out.values(), reference_attention(reference));
        INFO("relative error " << error << ", tolerance 1e-5");
        CHECK(error <= 1e-5);
    }
    // NaN and infinities in the inputs, the declared tensors included, under the modification.
    check_non_finite(layer, base_seed + 50, prepare, 1e-5);
}

} // namespace

TEST_CASE("ALiBi slopes from a run-time tensor match the plain modification") {
    check_modification(alibi_layer(), 100, [](Problem &p, ReferenceProblem &r) {
        const std::vector<float> slope = p.tensors.at("slope").values;
        r.score_mod = [slope](double score, int, int h, int q, int k) {
            return score + slope[h] * (k - q);
        };
    });
}

TEST_CASE("soft-capping with a run-time scalar matches the plain modification") {
    check_modification(softcap_layer(), 200, [](Problem &p, ReferenceProblem &r) {
        p.scalars["cap"] = 0.75; // low enough that the cap bites on these scores
        r.score_mod = [](double score, int, int, int, int) {
            return 0.75 * std::tanh(score / 0.75);
        };
    });
}

TEST_CASE("relative position bias from a table matches the plain modification") {
    check_modification(relpos_layer(), 300, [](Problem &p, ReferenceProblem &r) {
        const std::vector<float> table = p.tensors.at("rel_bias").values; // (heads, 65)
        r.score_mod = [table](double score, int, int h, int q, int k) {
            int bucket = std::clamp(k - q + 32, 0, 64);
            return score + table[h * 65 + bucket];
        };
    });
}

TEST_CASE("document masking of packed sequences matches the plain predicate") {
    check_modification(documents_layer(), 400, [](Problem &p, ReferenceProblem &r) {
        // Three documents per sequence, in order, so that every query sees its own document.
        HostTensor &doc = p.tensors.at("doc"); // (batch, keys)
        const int64_t keys = doc.shape[1];
        for (int64_t b = 0; b < doc.shape[0]; b++)
            for (int64_t k = 0; k < keys; k++)
                doc.ints[b * keys + k] = static_cast<int32_t>(3 * k / keys);
        const std::vector<int32_t> ids = doc.ints;
        r.visible = [ids, keys](int b, int, int q, int k) {
            // Reads are clamped to the tensor: a query past Lk reads the last key's document.
            int64_t qi = std::min<int64_t>(q, keys - 1);
            return ids[b * keys + qi] == ids[b * keys + k];
        };
    });
}

TEST_CASE("a prefix-LM mask matches the plain predicate") {
    check_modification(prefix_lm_layer(), 500, [](Problem &p, ReferenceProblem &r) {
        const std::vector<int32_t> prefix = p.tensors.at("prefix").ints;
        r.visible = [prefix](int b, int, int q, int k) { return k < prefix[b] || k <= q; };
    });
}

TEST_CASE("ALiBi inside multi-head attention with projections matches the plain modification") {
    const attngen::Layer &layer = mha_alibi_layer();
    const uint32_t seed = test_seed(600);
    INFO("seed " << seed);
    for (int length : {1, 9, 40}) {
        Problem problem(layer.info, 2, length, length, seed + length);
        ReferenceProblem reference = problem.reference();
        const std::vector<float> slope = problem.tensors.at("slope").values;
        reference.score_mod = [slope](double score, int, int h, int q, int k) {
            return score + slope[h] * (k - q);
        };
        OutputBuffer out(layer.info.dtype, problem.out_elements());
        attngen::Status status = attngen::run(layer, problem.arguments(out.data()));
        INFO(describe(problem, seed + length) << ": " << status.message());
        REQUIRE(status.ok());
        CHECK(relative_error(out.values(), reference_attention(reference)) <= 1e-5);
    }
}

TEST_CASE("an additive mask's -inf still masks under a score_mod") {
    check_modification(capped_bias_layer(), 700, [](Problem &p, ReferenceProblem &r) {
        p.scalars["cap"] = 2.0;
        r.score_mod = [](double score, int, int, int, int) { return 2.0 * std::tanh(score / 2.0); };
    });
}

TEST_CASE("declared tensors and scalars are checked by name and shape") {
    const attngen::Layer &layer = alibi_layer();
    Problem problem(layer.info, 1, 5, 5, test_seed(800));
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    const std::vector<float> before = out.values();
    std::vector<float> short_slope(3, 0.5f);

    attngen::Arguments missing = problem.arguments(out.data());
    missing.tensors.clear();
    attngen::Status status = attngen::run(layer, missing);
    CHECK(status.message() ==
          "attngen: layer 'alibi' needs `slope` (size[0]) but it was not given");

    attngen::Arguments wrong_shape = problem.arguments(out.data());
    wrong_shape.set_tensor("slope", attngen::view(short_slope.data(), {3}));
    CHECK(attngen::run(layer, wrong_shape).message() ==
          "attngen: `slope` has size[0] 3 but layer 'alibi' was generated for 4");

    attngen::Arguments unknown = problem.arguments(out.data());
    unknown.set_tensor("slopes", attngen::view(short_slope.data(), {3}));
    CHECK(attngen::run(layer, unknown).message() ==
          "attngen: tensor `slopes` was given but layer 'alibi' declares no tensor of "
          "that name");

    attngen::Arguments scalar = problem.arguments(out.data());
    scalar.set_scalar("cap", 1.0);
    CHECK(attngen::run(layer, scalar).message() ==
          "attngen: scalar `cap` was given but layer 'alibi' declares no scalar of that "
          "name");

    const attngen::Layer &capped = softcap_layer();
    Problem softcap(capped.info, 1, 5, 5, test_seed(801));
    OutputBuffer softcap_out(capped.info.dtype, softcap.out_elements());
    attngen::Arguments no_cap = softcap.arguments(softcap_out.data());
    no_cap.scalars.clear();
    CHECK(attngen::run(capped, no_cap).message() ==
          "attngen: layer 'softcap' needs scalar `cap` but it was not given");
    attngen::Arguments infinite = softcap.arguments(softcap_out.data());
    infinite.set_scalar("cap", INFINITY);
    CHECK(attngen::run(capped, infinite).message() ==
          "attngen: scalar `cap` is inf; it must be finite");
    attngen::Arguments huge = softcap.arguments(softcap_out.data());
    huge.set_scalar("cap", 1e300); // no float holds it
    CHECK(attngen::run(capped, huge).message() ==
          "attngen: scalar `cap` is 1e+300; an f32 scalar must be within +-3.4e38 (FLT_MAX)");
    CHECK(out.values() == before);
}
