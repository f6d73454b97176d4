// Process-wide hooks: the thread count, and the CPU dispatch of layers over their variants,
// which can be restricted to one variant so that each code path can be tested.
#include "attngen/runtime.h"
#include "internal.h"

#include "HalideRuntime.h"

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <atomic>
#include <mutex>
#include <string>

namespace attngen {

namespace {

std::atomic<CpuVariant> forced_variant{CpuVariant::automatic};
thread_local const LayerVariant *dispatched = nullptr;

int rank_of(CpuVariant variant) {
    switch (variant) {
    case CpuVariant::baseline:
        return 0;
    case CpuVariant::avx2:
    case CpuVariant::arm_fp16:
        return 1;
    case CpuVariant::avx512:
    case CpuVariant::automatic:
        return 2;
    }
    return 2;
}

bool detect_cpu_support(CpuVariant variant) {
#if defined(__x86_64__) || defined(__i386__)
    switch (variant) {
    case CpuVariant::avx512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    case CpuVariant::avx2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuVariant::baseline:
        return __builtin_cpu_supports("sse4.1");
    case CpuVariant::automatic:
        return true;
    case CpuVariant::arm_fp16:
        return false;
    }
    return false;
#elif defined(__aarch64__)
    const unsigned long hwcap = getauxval(AT_HWCAP);
    switch (variant) {
    case CpuVariant::arm_fp16:
        return (hwcap & HWCAP_FPHP) && (hwcap & HWCAP_ASIMDHP);
    case CpuVariant::baseline:
    case CpuVariant::automatic:
        return true;
    default:
        return false;
    }
#else
    return variant == CpuVariant::automatic || variant == CpuVariant::baseline;
#endif
}

/** CPU features are read once: dispatch happens on every call. */
bool cpu_supports(CpuVariant variant) {
    static const bool supported[] = {
        true, detect_cpu_support(CpuVariant::avx512), detect_cpu_support(CpuVariant::avx2),
        detect_cpu_support(CpuVariant::baseline), detect_cpu_support(CpuVariant::arm_fp16)};
    return supported[static_cast<int>(variant)];
}

} // namespace

namespace internal {

void install_halide_hooks() {
    static std::once_flag once;
    std::call_once(once, [] {
        install_error_routing();
        install_scratch_allocator();
        install_cuda_hooks();
    });
}

CpuVariant forced_cpu_variant() {
    return forced_variant.load();
}

const LayerVariant *choose_variant(const Layer &layer, bool device_tensors, std::string &why) {
    const GpuPolicy policy = gpu_policy();
    const bool gpu_wanted = device_tensors || policy != GpuPolicy::never;
    const bool gpu_needed = device_tensors || policy == GpuPolicy::require;
    std::string missing;
    for (int i = 0; i < layer.variant_count; i++) {
        const LayerVariant &variant = layer.variants[i];
        if (variant.device == Device::cpu)
            continue;
        if (!gpu_wanted)
            break;
        if (gpu_variant_runs(variant)) {
            dispatched = &variant;
            record_device(variant.device);
            return &variant;
        }
        missing += std::string(missing.empty() ? "" : ", ") + device_name(variant.device);
    }
    if (gpu_needed) {
        why = missing.empty()
                  ? "it has no GPU variant"
                  : "no " + missing + " driver and device that runs its GPU variants is present";
        why += device_tensors ? ", and tensors were given as device pointers"
                              : ", and the GPU policy is require";
        return nullptr;
    }
    const int allowed = rank_of(forced_variant.load());
    for (int i = 0; i < layer.variant_count; i++) {
        const LayerVariant &variant = layer.variants[i];
        if (variant.device == Device::cpu && rank_of(variant.cpu) <= allowed &&
            cpu_supports(variant.cpu)) {
            dispatched = &variant;
            record_device(Device::cpu);
            return &variant;
        }
    }
    why = std::string("it has no variant this CPU can run with CPU variant ") +
          cpu_variant_name(forced_variant.load());
    return nullptr;
}

} // namespace internal

const char *cpu_variant_name(CpuVariant variant) {
    switch (variant) {
    case CpuVariant::automatic:
        return "automatic";
    case CpuVariant::avx512:
        return "avx512";
    case CpuVariant::avx2:
        return "avx2";
    case CpuVariant::baseline:
        return "baseline";
    case CpuVariant::arm_fp16:
        return "arm_fp16";
    }
    return "?";
}

Status force_cpu_variant(CpuVariant variant) {
    const int value = static_cast<int>(variant);
    if (value < static_cast<int>(CpuVariant::automatic) ||
        value > static_cast<int>(CpuVariant::arm_fp16))
        return Status::error("attngen: force_cpu_variant was given CpuVariant value " +
                             std::to_string(value) +
                             "; expected one of automatic, avx512, avx2, baseline, arm_fp16 (0.." +
                             std::to_string(static_cast<int>(CpuVariant::arm_fp16)) + ")");
    if (!cpu_supports(variant))
        return Status::error(std::string("attngen: cannot force CPU variant ") +
                             cpu_variant_name(variant) + ": this CPU does not support it");
    internal::install_halide_hooks();
    forced_variant.store(variant);
    return Status();
}

CpuVariant last_cpu_variant() {
    return dispatched ? dispatched->cpu : CpuVariant::automatic;
}

const char *last_target() {
    return dispatched ? dispatched->target : "";
}

Status set_num_threads(int threads) {
    if (threads < 0 || threads > 1024)
        return Status::error("attngen: threads must be in 0..1024 (0 = one per core), got " +
                             std::to_string(threads));
    internal::install_halide_hooks();
    halide_set_num_threads(threads);
    return Status();
}

} // namespace attngen
