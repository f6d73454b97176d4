// The 16-bit storage types written out plainly (round to nearest even), and the rows of an i8
// cache, for the tests, the examples and the benchmark: what a layer's f16, bf16 and i8 tensors
// hold.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attngen_test {

uint16_t to_f16(float value);
float from_f16(uint16_t bits);
uint16_t to_bf16(float value);
float from_bf16(uint16_t bits);

/**
 * A row of an i8 cache as attngen writes it: returns its scale, max |x| / 127 in f32, and sets
 * bytes[i] = round(x_i / scale), ties to even, in [-127, 127] (all 0 where the scale is 0).
 */
float quantize_i8(const float *row, size_t count, int8_t *bytes);

/**
 * `count` values in rows of `row` as an i8 tensor holds them: each row quantized (quantize_i8),
 * its bytes and scale written to `bytes` and `scales[row index]`, and its values replaced by
 * byte times scale.
 */
void round_rows_to_i8(float *values, size_t count, size_t row, int8_t *bytes, float *scales);

} // namespace attngen_test
