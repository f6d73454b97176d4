// softmax_exp and softmax_exp2, the polynomial exponentials of the CPU schedules' softmax, and
// softmax_log, the lse output's logarithm, against std::exp, std::exp2 and std::log in double: on a
// dense grid over the softmax's whole input range, on random points from a printed seed, and at its
// edges. Compiled with Halide's JIT for the host, vectorized as the schedules vectorize it.
#include "dsl/attention_algorithm.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

/** `function` (softmax_exp or softmax_exp2) of every value, evaluated 16 lanes at a time. */
std::vector<float> evaluate(Halide::Expr (*function)(const Halide::Expr &),
                            const std::vector<float> &values) {
    const int count = static_cast<int>(values.size());
    Halide::Buffer<float> input(count);
    std::copy(values.begin(), values.end(), input.begin());
    Halide::Var x{"x"};
    Halide::Func exp_of{"exp_of"};
    exp_of(x) = function(input(x));
    exp_of.vectorize(x, 16, Halide::TailStrategy::GuardWithIf);
    Halide::Buffer<float> output = exp_of.realize({count});
    return {output.begin(), output.end()};
}

/**
 * 2^16 random arguments from `seed`, dense near `top` where the softmax's weight is: `top` less
 * exponentially distributed distances (mean 2), capped at `depth`.
 */
std::vector<float> random_arguments(uint32_t seed, float top, float depth) {
    std::mt19937 rng(seed);
    std::exponential_distribution<float> distance(0.5f);
    std::vector<float> points(1 << 16);
    for (float &point : points)
        point = top - std::min(distance(rng), depth);
    return points;
}

/** The largest error of softmax_exp over `values`, in units of the stated bounds. */
struct Errors {
    double absolute = 0;        ///< max |got - exp(x)|
    double scaled_relative = 0; ///< max |got - exp(x)| / (exp(x) (1 + |x|)) over x >= -87
};

std::vector<float> softmax_exp_of(const std::vector<float> &values) {
    return evaluate(attngen::softmax_exp, values);
}

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
        const Errors errors = errors_over(random_arguments(seed, 0.0f, 120.0f));
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

/** The largest relative error of softmax_exp2 over `values` >= -125.5; smaller values must give
 * at most 2^-125.5. */
double exp2_relative_error(const std::vector<float> &values) {
    const std::vector<float> got = evaluate(attngen::softmax_exp2, values);
    double worst = 0;
    for (size_t i = 0; i < values.size(); i++) {
        const double x = values[i], want = std::exp2(x);
        INFO("x = " << x << ": got " << got[i] << ", want " << want);
        REQUIRE(std::isfinite(got[i]));
        if (x >= -125.5)
            worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want) / want);
        else
            REQUIRE(got[i] <= std::exp2(-125.5));
    }
    return worst;
}

TEST_CASE("softmax_exp2 is within 1.5e-7 relative of 2^x from x = -125.5 up to 1/2") {
    SECTION("a grid of 2^20 points over [-150, 0.499]") {
        std::vector<float> grid(1 << 20);
        for (size_t i = 0; i < grid.size(); i++)
            grid[i] =
                0.499f - 150.499f * static_cast<float>(i) / static_cast<float>(grid.size() - 1);
        const double error = exp2_relative_error(grid);
        INFO("max relative error " << error << ", tolerance 1.5e-7");
        CHECK(error <= 1.5e-7);
    }
    SECTION("random points, dense near 0 where the softmax's weight is") {
        const uint32_t seed = 20261125;
        const double error = exp2_relative_error(random_arguments(seed, 0.49f, 170.0f));
        INFO("seed " << seed << ": max relative error " << error << ", tolerance 1.5e-7");
        CHECK(error <= 1.5e-7);
    }
    SECTION("exact at 0, zero for a masked score minus its row's maximum") {
        const std::vector<float> got =
            evaluate(attngen::softmax_exp2,
                     {0.0f, -0.0f, -1.0f, -126.5f, std::numeric_limits<float>::lowest()});
        CHECK(got[0] == 1.0f);
        CHECK(got[1] == 1.0f);
        CHECK(got[2] == 0.5f);
        CHECK(got[3] == 0.0f);
        CHECK(got[4] == 0.0f);
    }
}

/** The largest error of softmax_log over `values`, relative to 1 + |log x|. */
double log_scaled_error(const std::vector<float> &values) {
    const std::vector<float> got = evaluate(attngen::softmax_log, values);
    double worst = 0;
    for (size_t i = 0; i < values.size(); i++) {
        const double x = values[i], want = std::log(x);
        INFO("x = " << x << ": got " << got[i] << ", want " << want);
        REQUIRE(std::isfinite(got[i]));
        worst =
            std::max(worst, std::abs(static_cast<double>(got[i]) - want) / (1 + std::abs(want)));
    }
    return worst;
}

TEST_CASE("softmax_log is within 1.5e-7 (1 + |log x|) of log x over the normal floats") {
    SECTION("every float in [1, 2) and its neighbours by powers of two, every 64th") {
        // A softmax denominator is at least 1 and at most the number of keys.
        std::vector<float> points;
        for (uint32_t bits = 0x3f800000; bits < 0x40000000; bits += 64) {
            float one_two = 0;
            std::memcpy(&one_two, &bits, sizeof(bits));
            for (const float power : {1.0f, 0.5f, 2.0f, 0x1p20f, 0x1p-30f})
                points.push_back(one_two * power);
        }
        const double error = log_scaled_error(points);
        INFO("max error / (1 + |log x|) " << error << ", tolerance 1.5e-7");
        CHECK(error <= 1.5e-7);
    }
    SECTION("random points over the normal floats") {
        const uint32_t seed = 20261129;
        std::mt19937 rng(seed);
        std::uniform_int_distribution<uint32_t> normal(0x00800000, 0x7f7fffff);
        std::vector<float> points(1 << 16);
        for (float &point : points) {
            const uint32_t bits = normal(rng);
            std::memcpy(&point, &bits, sizeof(bits));
        }
        const double error = log_scaled_error(points);
        INFO("seed " << seed << ": max error / (1 + |log x|) " << error << ", tolerance 1.5e-7");
        CHECK(error <= 1.5e-7);
    }
    CHECK(evaluate(attngen::softmax_log, {1.0f})[0] == 0.0f);
}
