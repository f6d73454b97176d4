// Whether an output agrees with the one it is checked against: the one test the benchmark
// applies to attngen against its references and to every peer against attngen.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace attngen_bench {

/** The largest |actual - expected|, or NaN if any difference is NaN. */
template <typename Expected>
double max_abs_diff(const std::vector<float> &actual, const std::vector<Expected> &expected) {
    double worst = 0;
    for (size_t i = 0; i < actual.size(); i++) {
        const double diff = std::fabs(double(actual[i]) - double(expected[i]));
        if (std::isnan(diff))
            return diff;
        worst = std::max(worst, diff);
    }
    return worst;
}

template <typename Value> double max_abs(const std::vector<Value> &values) {
    double largest = 0;
    for (Value value : values)
        largest = std::max(largest, std::fabs(double(value)));
    return largest;
}

/**
 * Whether `actual` agrees with `expected`: max |actual - expected| <= relative * max |expected| +
 * absolute. If not, says so on stderr, naming the comparison `what`.
 */
template <typename Expected>
bool agrees(const std::string &what, const std::vector<float> &actual,
            const std::vector<Expected> &expected, double relative, double absolute) {
    const double limit = relative * max_abs(expected) + absolute;
    const double diff = max_abs_diff(actual, expected);
    if (diff <= limit)
        return true;
    fmt::print(stderr, "bench_attention: {} = {:g} > {:g}\n", what, diff, limit);
    return false;
}

} // namespace attngen_bench
