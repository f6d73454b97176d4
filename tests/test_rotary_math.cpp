// turns_cos_sin, the cos and sin of rotary embeddings' angles given as fixed-point turns,
// against std::cos and std::sin in double: on every quarter-turn boundary and its neighbours, on
// a dense grid over one turn, and on random turns from a printed seed. Compiled with Halide's
// JIT for the host, vectorized as the schedules vectorize it.
#include "dsl/attention_algorithm.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

/** The largest |error| of cos and sin over `turns` (each a fraction of a turn times 2^64). */
double largest_error(const std::vector<uint64_t> &turns) {
    const int count = static_cast<int>(turns.size());
    Halide::Buffer<uint64_t> input(count);
    std::copy(turns.begin(), turns.end(), input.begin());
    Halide::Var x{"x"};
    Halide::Func table{"table"};
    table(x) = attngen::turns_cos_sin(input(x));
    table.vectorize(x, 8, Halide::TailStrategy::GuardWithIf);
    Halide::Realization result = table.realize({count});
    Halide::Buffer<float> cos = result[0], sin = result[1];
    const double pi = std::acos(-1.0);
    double worst = 0;
    for (int i = 0; i < count; i++) {
        const double angle = 2 * pi * std::ldexp(static_cast<double>(turns[i]), -64);
        INFO("turns " << turns[i] << ", angle " << angle);
        const double error =
            std::max(std::abs(cos(i) - std::cos(angle)), std::abs(sin(i) - std::sin(angle)));
        worst = std::max(worst, error);
    }
    return worst;
}

} // namespace

TEST_CASE("turns_cos_sin is within 2e-7 of cos and sin everywhere on the turn") {
    std::vector<uint64_t> turns;
    // Each eighth of a turn (where the quadrant changes) and its neighbours.
    for (uint64_t eighth = 0; eighth < 8; eighth++)
        for (int64_t offset : {-2, -1, 0, 1, 2})
            turns.push_back((eighth << 61) + static_cast<uint64_t>(offset));
    // A grid of 2^16 points over the turn.
    for (uint64_t i = 0; i < (1 << 16); i++)
        turns.push_back(i << 48);
    const uint32_t seed = 20261127;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    for (int i = 0; i < (1 << 16); i++)
        turns.push_back(rng());
    const double error = largest_error(turns);
    INFO("largest error " << error);
    CHECK(error < 2e-7);
}
