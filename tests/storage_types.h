// The 16-bit storage types written out plainly (round to nearest even), for the tests, the
// examples and the benchmark: what a layer's f16 and bf16 tensors hold.
#pragma once

#include <cstdint>

namespace attngen_test {

uint16_t to_f16(float value);
float from_f16(uint16_t bits);
uint16_t to_bf16(float value);
float from_bf16(uint16_t bits);

} // namespace attngen_test
