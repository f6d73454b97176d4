// softmax_exp, the polynomial exponential of the CPU schedules' softmax, against std::exp in
// double: on a dense grid over the softmax's whole input range, on random points from a printed
// seed, and at its edges. Compiled with Halide's JIT for the host, vectorized as the schedules
// vectorize it.
#include "dsl/attention_algorithm.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace {

/** softmax_exp of every value, evaluated 16 lanes at a time. */
std::vector<float> softmax_exp_of(const std::vector<float> &values) {
    const int count = static_cast<int>(values.size());
    Halide::Buffer<float> input(count);
    std::copy(values.begin(), values.end(), input.begin());
    Halide::Var x{"x"};
    Halide::Func exp_of{"exp_of"};
    exp_of(x) = attngen::softmax_exp(input(x));
    exp_of.vectorize(x, 16, Halide::TailStrategy::GuardWithIf);
    Halide::Buffer<float> output = exp_of.realize({count});
    return {output.begin(), output.end()};
}

/** The largest error of softmax_exp over `values`, in units of the stated bounds. */
struct Errors {
    double absolute = 0;        ///< max |got - exp(x)|
    double scaled_relative = 0; ///< max |got - exp(x)| / (exp(x) (1 + |x|)) over x >= -87
};

Errors errors_over(const std::vector<float> &values) {
    const std::vector<float> got = softmax_exp_of(values);
    Errors errors;
    for (size_t i = 0; i < values.size(); i++) {
        const double x = values[i], want = std::exp(x);
        const double error = std::abs(static_cast<double>(got[i]) - want);
        INFO("x = " << x << ": got " << got[i] << ", want " << want);
        REQUIRE(std::isfinite(got[i]));
        errors.absolute = std::max(errors.absolute, error);
        if (x >= -87)
            errors.scaled_relative =
                std::max(errors.scaled_relative, error / (want * (1 + std::abs(x))));
        else
            REQUIRE(got[i] <= 1.7e-38f); // exp(-87) = 1.65e-38
    }
    return errors;
}

} // namespace

TEST_CASE("softmax_exp is within 1e-7 absolute and 1e-7 (1 + |x|) relative of exp on x <= 0") {
    SECTION("a grid of 2^20 points over [-104, 0]") {
        std::vector<float> grid(1 << 20);
        for (size_t i = 0; i < grid.size(); i++)
            grid[i] = -104.0f * static_cast<float>(i) / static_cast<float>(grid.size() - 1);
        const Errors errors = errors_over(grid);
        INFO("max absolute error " << errors.absolute << ", tolerance 1e-7");
        CHECK(errors.absolute <= 1e-7);
        INFO("max relative error / (1 + |x|) " << errors.scaled_relative << ", tolerance 1e-7");
        CHECK(errors.scaled_relative <= 1e-7);
    }
    SECTION("random points, dense near 0 where the softmax's weight is") {
        const uint32_t seed = 20261124;
        std::mt19937 rng(seed);
        std::exponential_distribution<float> distance(0.5f);
        std::vector<float> points(1 << 16);
        for (float &point : points)
            point = -std::min(distance(rng), 120.0f);
        const Errors errors = errors_over(points);
        INFO("seed " << seed << ": max absolute error " << errors.absolute
                     << ", max relative error / (1 + |x|) " << errors.scaled_relative
                     << ", tolerance 1e-7 for both");
        CHECK(errors.absolute <= 1e-7);
        CHECK(errors.scaled_relative <= 1e-7);
    }
}

TEST_CASE("softmax_exp is exact at 0, zero far below, and 1 for the positive x it never gets") {
    const float lowest = std::numeric_limits<float>::lowest();
    const std::vector<float> got =
        softmax_exp_of({0.0f, -0.0f, -1e-30f, -88.0f, -1000.0f, lowest, 1e-30f, 3.0f});
    CHECK(got[0] == 1.0f);
    CHECK(got[1] == 1.0f);
    CHECK(got[2] == 1.0f);
    CHECK(got[3] < 1.2e-38f);
    CHECK(got[4] == 0.0f);
    CHECK(got[5] == 0.0f); // a masked score minus its row's maximum
    CHECK(got[6] == 1.0f);
    CHECK(got[7] == 1.0f);
}
