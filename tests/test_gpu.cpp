// The GPU schedule, compiled for OpenCL, run on whatever OpenCL device the machine has (in CI:
// the CPU, through PoCL), against the double-precision reference: masks, grouped and
// multi-query heads, projections, decode shapes and odd lengths. The same layers carry a CPU
// variant, so the GPU policy's fallback and its errors are tested here too. Without an OpenCL
// device the GPU cases say so and skip, unless ATTNGEN_REQUIRE_OPENCL=1 (CI sets it).
#include "test_support.h"

#include "g_d128_plain.h"
#include "g_d16_mqa_padding.h"
#include "g_d32_all_masks.h"
#include "g_d32_decode_masks.h"
#include "g_d64_gqa_causal.h"
#include "g_d64_gqa_decode.h"
#include "g_mha_self.h"
#include "t_d16_plain.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>

using namespace attngen_test;

namespace {

/** Whether the OpenCL cases can run here; prints why not, and fails where CI requires them. */
bool opencl_present() {
    if (attngen::gpu_available(attngen::Device::opencl))
        return true;
    const char *required = std::getenv("ATTNGEN_REQUIRE_OPENCL");
    if (required != nullptr && std::strcmp(required, "1") == 0)
        FAIL("ATTNGEN_REQUIRE_OPENCL=1 but no OpenCL platform with a device is present "
             "(install pocl-opencl-icd)");
    WARN("skipped: no OpenCL platform with a device is present (install pocl-opencl-icd)");
    return false;
}

/** Runs the GPU variant only, and restores the default policy after. */
struct RequireGpu {
    RequireGpu() { attngen::set_gpu_policy(attngen::GpuPolicy::require); }
    ~RequireGpu() { attngen::set_gpu_policy(attngen::GpuPolicy::prefer); }
};

void check_on_gpu(const attngen::Layer &layer, uint32_t seed) {
    if (!opencl_present())
        return;
    RequireGpu gpu;
    check_against_reference(layer, seed, decode_shapes());
    CHECK(attngen::last_device() == attngen::Device::opencl);
}

} // namespace

TEST_CASE("GPU schedule: grouped-query causal attention, head_dim 64, on OpenCL") {
    check_on_gpu(g_d64_gqa_causal_layer(), 501);
}

TEST_CASE("GPU schedule: every mask kind combined, head_dim 32, on OpenCL") {
    check_on_gpu(g_d32_all_masks_layer(), 502);
}

TEST_CASE("GPU schedule: multi-query attention with key padding, head_dim 16, on OpenCL") {
    check_on_gpu(g_d16_mqa_padding_layer(), 503);
}

TEST_CASE("GPU schedule: head_dim 128 keeps within shared memory and matches, on OpenCL") {
    check_on_gpu(g_d128_plain_layer(), 504);
}

TEST_CASE("GPU schedule: projections, biases and grouped heads, on OpenCL") {
    check_on_gpu(g_mha_self_layer(), 505);
}

TEST_CASE(
    "GPU split-KV decode form: grouped-query, causal and padding, several chunks, on OpenCL") {
    check_on_gpu(g_d64_gqa_decode_layer(), 509);
}

TEST_CASE("GPU split-KV decode form: every mask kind combined, default chunks, on OpenCL") {
    check_on_gpu(g_d32_decode_masks_layer(), 510);
}

TEST_CASE("GPU policy never runs the CPU variant of a GPU layer and still matches") {
    attngen::set_gpu_policy(attngen::GpuPolicy::never);
    check_against_reference(g_d64_gqa_causal_layer(), 506);
    CHECK(attngen::last_device() == attngen::Device::cpu);
    attngen::set_gpu_policy(attngen::GpuPolicy::prefer);
}

TEST_CASE("GPU policy require on a layer without a GPU variant is refused, output untouched") {
    const attngen::Layer &layer = t_d16_plain_layer();
    Problem problem(layer.info, 1, 5, 5, 507);
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    for (float &value : out.f32)
        value = 42.0f;
    RequireGpu gpu;
    attngen::Status status = attngen::run(layer, problem.arguments(out.data()));
    REQUIRE_FALSE(status.ok());
    CHECK(status.message() ==
          "attngen: layer 't_d16_plain' cannot run: it has no GPU variant, and the GPU policy is "
          "require; it has " +
              std::string(layer.variants[0].target) +
              [&] {
                  std::string rest;
                  for (int i = 1; i < layer.variant_count; i++)
                      rest += std::string(", ") + layer.variants[i].target;
                  return rest;
              }());
    for (float value : out.values())
        REQUIRE(value == 42.0f);
}

TEST_CASE("device tensors on a layer without a GPU variant are refused") {
    const attngen::Layer &layer = t_d16_plain_layer();
    Problem problem(layer.info, 1, 3, 3, 508);
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    attngen::Arguments args = problem.arguments(out.data());
    args.query.on_device = true;
    attngen::Status status = attngen::run(layer, args);
    REQUIRE_FALSE(status.ok());
    CHECK(std::string(status.message()).find("tensors were given as device pointers") !=
          std::string::npos);
}
