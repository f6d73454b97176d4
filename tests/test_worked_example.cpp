// The worked example of reference/seed_examples.md ("pool beats badminton"), reproduced by
// generated code: both printed matrices at scale 1, and the default scale 1/sqrt(4) pinned.
#include "test_support.h"

#include "pool_default_scale.h"
#include "pool_unit_scale.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attngen_test;

namespace {

const float pool_beats_badminton[3 * 4] = {0.5f, 0.1f, 0.1f, 0.2f, 0.1f, 0.5f,
                                           0.2f, 0.1f, 0.5f, 0.1f, 0.2f, 0.1f};

std::vector<float> attend(const attngen::Layer &layer) {
    std::vector<float> out(12, -1.0f);
    attngen::Arguments args;
    args.query = args.key = args.value = attngen::view(pool_beats_badminton, {1, 1, 3, 4});
    args.out = attngen::mutable_view(out.data(), {1, 1, 3, 4});
    attngen::Status status = attngen::run(layer, args);
    INFO(status.message());
    REQUIRE(status.ok());
    return out;
}

} // namespace

TEST_CASE("the worked example reproduces the printed output at scale 1") {
    // Unrounded values from reference/seed_examples.md; f32 tolerance 1e-6 absolute.
    const double printed[12] = {0.3809104062057195,  0.2190895937942805,  0.1647106316834669,
                                0.1352893683165331,  0.35162151379195444, 0.24837848620804553,
                                0.16870457291161006, 0.13129542708838993, 0.3800723804098767,
                                0.21992761959012336, 0.1651659962278259,  0.13483400377217417};
    const double rounded[12] = {0.38, 0.22, 0.16, 0.14, 0.35, 0.25,
                                0.17, 0.13, 0.38, 0.22, 0.17, 0.13};
    std::vector<float> out = attend(pool_unit_scale_layer());
    for (int i = 0; i < 12; i++) {
        INFO("element " << i);
        CHECK(std::abs(out[i] - printed[i]) <= 1e-6);
        CHECK(std::round(out[i] * 100) / 100 == Approx(rounded[i]).margin(1e-9));
    }
}

TEST_CASE("the worked example's similarity matrix is the printed one") {
    const double printed[9] = {0.31, 0.14, 0.30, 0.14, 0.31, 0.15, 0.30, 0.15, 0.31};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            double dot = 0;
            for (int f = 0; f < 4; f++)
                dot += double(pool_beats_badminton[i * 4 + f]) * pool_beats_badminton[j * 4 + f];
            CHECK(std::round(dot * 100) / 100 == Approx(printed[i * 3 + j]).margin(1e-9));
        }
}

TEST_CASE("the worked example at the default scale 1/sqrt(4) matches the reference") {
    REQUIRE(pool_default_scale_layer().info.scale == 0.5);
    REQUIRE(pool_unit_scale_layer().info.scale == 1.0);
    ReferenceProblem problem;
    problem.heads = problem.kv_heads = 1;
    problem.head_dim = 4;
    problem.query_len = problem.key_len = 3;
    problem.scale = 0.5;
    problem.query.assign(pool_beats_badminton, pool_beats_badminton + 12);
    problem.key = problem.value = problem.query;
    std::vector<double> want = reference_attention(problem);
    std::vector<float> out = attend(pool_default_scale_layer());
    CHECK(relative_error(out, want) <= 1e-6);
    // Pinned: the default scale gives a different answer than scale 1.
    const double first_row[4] = {0.37389675957057933, 0.2261032404294207, 0.16567731249462955,
                                 0.13432268750537046};
    for (int i = 0; i < 4; i++)
        CHECK(std::abs(out[i] - first_row[i]) <= 1e-6);
    CHECK(std::abs(out[0] - 0.3809104062057195) > 1e-3);
}
