// See storage_types.h.
#include "storage_types.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace attngen_test {

uint16_t to_f16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    uint32_t sign = (bits >> 16) & 0x8000u;
    int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
    uint32_t mantissa = bits & 0x7fffffu;
    if (((bits >> 23) & 0xff) == 0xff) // inf or nan
        return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0));
    if (exponent >= 31)
        return static_cast<uint16_t>(sign | 0x7c00u);
    if (exponent <= 0) { // subnormal or zero
        if (exponent < -10)
            return static_cast<uint16_t>(sign);
        mantissa |= 0x800000u;
        int shift = 14 - exponent;
        uint32_t half = mantissa >> shift, rest = mantissa & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (half & 1)))
            half++;
        return static_cast<uint16_t>(sign | half);
    }
    uint32_t half = (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
    uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1)))
        half++; // may carry into the exponent, which is the right rounding
    return static_cast<uint16_t>(sign | half);
}

float from_f16(uint16_t bits) {
    int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
    double magnitude = exponent == 0    ? std::ldexp(mantissa, -24)
                       : exponent == 31 ? (mantissa ? std::nan("") : INFINITY)
                                        : std::ldexp(mantissa + 1024, exponent - 25);
    return static_cast<float>((bits & 0x8000) ? -magnitude : magnitude);
}

uint16_t to_bf16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1);
    return static_cast<uint16_t>((bits + rounding) >> 16);
}

float from_bf16(uint16_t bits) {
    uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &wide, 4);
    return value;
}

float quantize_i8(const float *row, size_t count, int8_t *bytes) {
    float largest = 0.0f;
    for (size_t i = 0; i < count; i++)
        largest = std::max(largest, std::abs(row[i]));
    const float scale = largest / 127.0f;
    for (size_t i = 0; i < count; i++)
        bytes[i] =
            scale > 0.0f
                ? static_cast<int8_t>(std::clamp(std::nearbyint(row[i] / scale), -127.0f, 127.0f))
                : int8_t(0);
    return scale;
}

void round_rows_to_i8(float *values, size_t count, size_t row, int8_t *bytes, float *scales) {
    for (size_t first = 0, r = 0; first < count; first += row, r++) {
        scales[r] = quantize_i8(values + first, row, bytes + first);
        for (size_t i = 0; i < row; i++)
            values[first + i] = static_cast<float>(bytes[first + i]) * scales[r];
    }
}

} // namespace attngen_test
