// The GPU schedule against the double-precision reference: masks, grouped and multi-query heads,
// projections, decode shapes (the split-KV form) and odd lengths. Compiled for OpenCL by
// default and run on whatever OpenCL device the machine has (in CI: the CPU, through PoCL); with
// -DATTNGEN_GPU_TEST_API=cuda compiled for CUDA and run on an NVIDIA GPU (bench/gpu/run.sh),
// where f16 storage is tested too (PoCL's CPU device has no cl_khr_fp16). The same layers carry
// a CPU variant, so the GPU policy's fallback and its errors are tested here too. Without a
// device of the API the GPU cases say so and skip, unless ATTNGEN_REQUIRE_GPU=1 (CI sets it).
#include "cached_batch.h"
#include "device_buffer.h"
#include "packed_problem.h"
#include "test_support.h"

#include "c_d16_cuda_fallback.h"
#include "g_d128_plain.h"
#include "g_d16_cache_decode.h"
#include "g_d16_mqa_padding.h"
#include "g_d16_rope_table.h"
#include "g_d16_v32_decode.h"
#include "g_d32_all_masks.h"
#include "g_d32_cache_i8.h"
#include "g_d32_cache_paged.h"
#include "g_d32_decode_masks.h"
#include "g_d32_kv_i8.h"
#include "g_d32_kv_i8_decode.h"
#include "g_d32_lse.h"
#include "g_d32_lse_decode.h"
#include "g_d32_rope_decode.h"
#include "g_d32_shared_heads.h"
#include "g_d32_sinks.h"
#include "g_d32_sinks_decode.h"
#include "g_d32_v16.h"
#include "g_d64_gqa_causal.h"
#include "g_d64_gqa_decode.h"
#include "g_mha_rope.h"
#include "g_mha_self.h"
#include "g_packed.h"
#include "g_packed_cache.h"
#include "t_d16_plain.h"
#if ATTNGEN_TEST_CUDA
#include "g_d64_f16_causal.h"
#endif

#include "HalideRuntimeCuda.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

using namespace attngen_test;

namespace {

/** The API the GPU layers were compiled for. */
constexpr attngen::Device test_api =
    ATTNGEN_TEST_CUDA ? attngen::Device::cuda : attngen::Device::opencl;

/** Whether the GPU cases can run here; prints why not, and fails where CI requires them. */
bool gpu_present() {
    if (attngen::gpu_available(test_api))
        return true;
    const std::string missing =
        ATTNGEN_TEST_CUDA ? "no CUDA driver with a device is present"
                          : "no OpenCL platform with a device is present (install pocl-opencl-icd)";
    const char *required = std::getenv("ATTNGEN_REQUIRE_GPU");
    if (required != nullptr && std::strcmp(required, "1") == 0)
        FAIL("ATTNGEN_REQUIRE_GPU=1 but " << missing);
    WARN("skipped: " << missing);
    return false;
}

/** Runs the GPU variant only, and restores the default policy after. */
struct RequireGpu {
    RequireGpu() { attngen::set_gpu_policy(attngen::GpuPolicy::require); }
    ~RequireGpu() { attngen::set_gpu_policy(attngen::GpuPolicy::prefer); }
};

size_t bytes_of(const attngen::Layout &tensor) {
    size_t elements = 1;
    for (int i = 0; i < tensor.rank; i++)
        elements *= static_cast<size_t>(tensor.shape[i]);
    return elements * (tensor.dtype == attngen::DType::f32 ? 4 : 2);
}

void check_on_gpu(const attngen::Layer &layer, uint32_t seed) {
    if (!gpu_present())
        return;
    RequireGpu gpu;
    // Decode shapes, and long queries against about as many keys: a split-KV CUDA kernel with a
    // causal or window mask once trapped there on an in-kernel bounds check.
    std::vector<Shape> shapes = decode_shapes();
    shapes.push_back({1, 256, 256});
    shapes.push_back({1, 300, 420});
    check_against_reference(layer, seed, shapes);
    CHECK(attngen::last_device() == test_api);
}

} // namespace

TEST_CASE("GPU schedule: a paged KV cache with rotary embeddings, step after step") {
    if (!gpu_present())
        return;
    RequireGpu gpu;
    check_steps_against_reference(g_d32_cache_paged_layer(), 531);
    CHECK(attngen::last_device() == test_api);
}

TEST_CASE("GPU schedule: a paged i8 KV cache with rotary embeddings, step after step") {
    if (!gpu_present())
        return;
    RequireGpu gpu;
    check_steps_against_reference(g_d32_cache_i8_layer(), 534);
    CHECK(attngen::last_device() == test_api);
}

TEST_CASE("GPU split-KV decode form: a contiguous KV cache after projections, and chunked prefill "
          "against one prefill") {
    if (!gpu_present())
        return;
    RequireGpu gpu;
    check_steps_against_reference(g_d16_cache_decode_layer(), 532);
    check_chunks_match_one_prefill(g_d16_cache_decode_layer(), 533);
    CHECK(attngen::last_device() == test_api);
}

TEST_CASE("GPU schedule and split-KV decode form: NaN and infinities in the inputs") {
    if (!gpu_present())
        return;
    RequireGpu gpu;
    check_non_finite(g_d32_all_masks_layer(), 521);
    check_non_finite(g_d64_gqa_decode_layer(), 522);
    CHECK(attngen::last_device() == test_api);
}

TEST_CASE("GPU schedule: grouped-query causal attention, head_dim 64") {
    check_on_gpu(g_d64_gqa_causal_layer(), 501);
}

TEST_CASE("GPU schedule: every mask kind combined, head_dim 32") {
    check_on_gpu(g_d32_all_masks_layer(), 502);
}

TEST_CASE("GPU schedule: two heads per block share each step, every mask kind combined") {
    check_on_gpu(g_d32_shared_heads_layer(), 514);
}

TEST_CASE("GPU schedule: multi-query attention with key padding, head_dim 16") {
    check_on_gpu(g_d16_mqa_padding_layer(), 503);
}

TEST_CASE("GPU schedule: head_dim 128 keeps within shared memory and matches") {
    check_on_gpu(g_d128_plain_layer(), 504);
}

TEST_CASE("GPU schedule: projections, biases and grouped heads") {
    check_on_gpu(g_mha_self_layer(), 505);
}

TEST_CASE("GPU split-KV decode form: grouped-query, causal and padding, several chunks") {
    check_on_gpu(g_d64_gqa_decode_layer(), 509);
}

TEST_CASE("GPU split-KV decode form: every mask kind combined, default chunks") {
    check_on_gpu(g_d32_decode_masks_layer(), 510);
}

TEST_CASE("GPU schedule: rotary embeddings (neox, partial) after projections, causal") {
    check_on_gpu(g_mha_rope_layer(), 515);
}

TEST_CASE("GPU split-KV decode form: interleaved rotary embeddings with llama3 scaling") {
    check_on_gpu(g_d32_rope_decode_layer(), 516);
}

TEST_CASE("GPU schedule: attention sinks, grouped heads and a causal mask") {
    check_on_gpu(g_d32_sinks_layer(), 541);
}

TEST_CASE("GPU split-KV decode form: attention sinks, grouped heads, causal and padding") {
    check_on_gpu(g_d32_sinks_decode_layer(), 542);
}

TEST_CASE("GPU schedule and split-KV decode form: sinks at the edges, fully masked rows") {
    if (!gpu_present())
        return;
    RequireGpu gpu;
    check_sink_edges(g_d32_sinks_layer(), 543);
    check_sink_edges(g_d32_sinks_decode_layer(), 544);
    CHECK(attngen::last_device() == test_api);
}

TEST_CASE("GPU schedule: the lse output, grouped heads, causal and padding") {
    check_on_gpu(g_d32_lse_layer(), 545);
}

TEST_CASE("GPU split-KV decode form: the lse output with sinks, causal and padding") {
    check_on_gpu(g_d32_lse_decode_layer(), 546);
}

TEST_CASE("GPU schedule: i8 keys and values with rotary embeddings") {
    check_on_gpu(g_d32_kv_i8_layer(), 547);
}

TEST_CASE("GPU split-KV decode form: i8 keys and values, causal and padding") {
    check_on_gpu(g_d32_kv_i8_decode_layer(), 548);
}

TEST_CASE("GPU schedule: V's head size apart from K's (value_dim 16, head_dim 32)") {
    check_on_gpu(g_d32_v16_layer(), 549);
}

TEST_CASE("GPU split-KV decode form: value_dim 32 over head_dim 16, causal and padding") {
    check_on_gpu(g_d16_v32_decode_layer(), 550);
}

TEST_CASE("GPU schedule: packed sequences with their own key offsets, causal, rope and lse") {
    if (!gpu_present())
        return;
    RequireGpu gpu;
    check_packed(g_packed_layer(), {37, 1, 0, 70, 5, 9}, {37, 40, 3, 130, 2, 0}, 8201);
    CHECK(attngen::last_device() == test_api);
}

TEST_CASE("GPU schedule: a paged i8 cache stepped with packed new tokens") {
    if (!gpu_present())
        return;
    RequireGpu gpu;
    check_steps_against_reference(g_packed_cache_layer(), 8202);
    CHECK(attngen::last_device() == test_api);
}

TEST_CASE("GPU schedule: rotary embeddings from the caller's tables") {
    check_on_gpu(g_d16_rope_table_layer(), 517);
}

#if ATTNGEN_TEST_CUDA
TEST_CASE("GPU schedule: f16 storage, f32 arithmetic") {
    check_on_gpu(g_d64_f16_causal_layer(), 512);
}
#endif

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
              std::string(layer.variants[0].target) + [&] {
                  std::string rest;
                  for (int i = 1; i < layer.variant_count; i++)
                      rest += std::string(", ") + layer.variants[i].target;
                  return rest;
              }());
    for (float value : out.values())
        REQUIRE(value == 42.0f);
}

TEST_CASE("GPU policy prefer runs a CUDA layer on the CPU where no CUDA driver is present and "
          "require refuses it with the output untouched") {
    const attngen::Layer &layer = c_d16_cuda_fallback_layer();
    check_against_reference(layer, 513);
    // With a driver present, prefer runs the GPU variant where the device runs compute
    // capability 8.0 PTX, else the CPU one; either way it matched above.
    if (attngen::gpu_available(attngen::Device::cuda))
        return;
    CHECK(attngen::last_device() == attngen::Device::cpu);

    Problem problem(layer.info, 1, 6, 6, 514);
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    std::fill(out.f32.begin(), out.f32.end(), 42.0f);
    RequireGpu gpu;
    attngen::Status status = attngen::run(layer, problem.arguments(out.data()));
    REQUIRE_FALSE(status.ok());
    CHECK_THAT(status.message(),
               Catch::Contains("no cuda driver and device that runs its GPU variants is present, "
                               "and the GPU policy is require"));
    for (float value : out.values())
        REQUIRE(value == 42.0f);
}

TEST_CASE("the app's CUDA context and stream reach Halide's CUDA runtime from the first "
          "question about GPUs on") {
    // Each test case runs in a process of its own under ctest: nothing has run a layer yet, so
    // the hooks must come from gpu_available itself (an app may allocate device memory through
    // Halide before its first run()).
    (void)attngen::gpu_available(attngen::Device::cuda);
    // Read the installed hooks back by swapping them out and in again, before anything else
    // could install them.
    const halide_cuda_acquire_context_t acquire = halide_set_cuda_acquire_context(nullptr);
    halide_set_cuda_acquire_context(acquire);
    const halide_cuda_get_stream_t get_stream = halide_set_cuda_get_stream(nullptr);
    halide_set_cuda_get_stream(get_stream);
    void *const app_context = reinterpret_cast<void *>(uintptr_t{0x1000});
    void *const app_stream = reinterpret_cast<void *>(uintptr_t{0x2000});
    attngen::set_cuda_context(app_context, app_stream);
    void *context = nullptr, *stream = nullptr;
    const int acquired = acquire(nullptr, &context, true);
    const int streamed = get_stream(nullptr, context, &stream);
    attngen::set_cuda_context(nullptr, nullptr);
    REQUIRE(acquired == 0);
    CHECK(context == app_context);
    REQUIRE(streamed == 0);
    CHECK(stream == app_stream);
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

TEST_CASE("device tensors: the app's own device buffers are wrapped, not copied, and receive "
          "the output") {
    if (!gpu_present())
        return;
    const attngen::Layer &layer = g_d64_gqa_causal_layer();
    const uint32_t seed = test_seed(511);
    Problem problem(layer.info, 2, 9, 13, seed);
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    std::fill(out.f32.begin(), out.f32.end(), 42.0f);
    attngen::Arguments args = problem.arguments(out.data());
    DeviceBuffer query(test_api, const_cast<void *>(args.query.data), bytes_of(args.query));
    DeviceBuffer key(test_api, const_cast<void *>(args.key.data), bytes_of(args.key));
    DeviceBuffer value(test_api, const_cast<void *>(args.value.data), bytes_of(args.value));
    DeviceBuffer output(test_api, args.out.data, bytes_of(args.out));
    for (const DeviceBuffer *buffer : {&query, &key, &value, &output})
        REQUIRE(buffer->ok());
    args.query.data = query.handle();
    args.key.data = key.handle();
    args.value.data = value.handle();
    args.out.data = output.handle();
    args.query.on_device = args.key.on_device = args.value.on_device = args.out.on_device = true;
    // The host copy of the output changes only by reading the device buffer back.
    std::fill(out.f32.begin(), out.f32.end(), -7.0f);

    RequireGpu gpu;
    attngen::Status status = attngen::run(layer, args);
    INFO(describe(problem, seed) << ": " << status.message());
    REQUIRE(status.ok());
    CHECK(attngen::last_device() == test_api);
    for (float element : out.f32)
        REQUIRE(element == -7.0f);
    REQUIRE(output.read_back() == 0);
    const double error = relative_error(out.values(), reference_attention(problem.reference()));
    const double tolerance = tolerance_for(layer.info.dtype);
    INFO("relative error " << error << ", tolerance " << tolerance);
    CHECK(error <= tolerance);
}
