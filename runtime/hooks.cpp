// Process-wide hooks into the Halide runtime: thread count and the CPU dispatch of multi-target
// libraries, which can be restricted to one variant so that each code path can be tested.
#include "attngen/runtime.h"
#include "internal.h"

#include "HalideRuntime.h"

#include <atomic>
#include <mutex>

namespace attngen {

namespace {

std::atomic<CpuVariant> forced_variant{CpuVariant::automatic};
thread_local CpuVariant dispatched_variant = CpuVariant::automatic;

bool has_feature(int count, const uint64_t *features, halide_target_feature_t feature) {
    int word = static_cast<int>(feature) / 64, bit = static_cast<int>(feature) % 64;
    return word < count && ((features[word] >> bit) & 1) != 0;
}

/** The variant a multi-target candidate belongs to, from the features it was compiled with. */
CpuVariant variant_of(int count, const uint64_t *features) {
    if (has_feature(count, features, halide_target_feature_avx512_skylake) ||
        has_feature(count, features, halide_target_feature_avx512))
        return CpuVariant::avx512;
    if (has_feature(count, features, halide_target_feature_avx2))
        return CpuVariant::avx2;
    return CpuVariant::baseline;
}

int rank_of(CpuVariant variant) {
    switch (variant) {
    case CpuVariant::baseline:
        return 0;
    case CpuVariant::avx2:
        return 1;
    case CpuVariant::avx512:
    case CpuVariant::automatic:
        return 2;
    }
    return 2;
}

int can_use_target_features(int count, const uint64_t *features) {
    if (!halide_default_can_use_target_features(count, features))
        return 0;
    CpuVariant candidate = variant_of(count, features);
    if (rank_of(candidate) > rank_of(forced_variant.load()))
        return 0;
    dispatched_variant = candidate;
    return 1;
}

bool cpu_supports(CpuVariant variant) {
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
    }
    return false;
#else
    return variant == CpuVariant::automatic || variant == CpuVariant::baseline;
#endif
}

} // namespace

namespace internal {

void install_halide_hooks() {
    static std::once_flag once;
    std::call_once(once, [] {
        install_error_routing();
        install_scratch_allocator();
        halide_set_custom_can_use_target_features(can_use_target_features);
    });
}

void begin_dispatch() {
    // The last candidate of a multi-target library is taken without asking the hook.
    dispatched_variant = CpuVariant::baseline;
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
    }
    return "?";
}

Status force_cpu_variant(CpuVariant variant) {
    if (!cpu_supports(variant))
        return Status::error(std::string("attngen: cannot force CPU variant ") +
                             cpu_variant_name(variant) + ": this CPU does not support it");
    internal::install_halide_hooks();
    forced_variant.store(variant);
    return Status();
}

CpuVariant last_cpu_variant() { return dispatched_variant; }

Status set_num_threads(int threads) {
    if (threads < 0 || threads > 1024)
        return Status::error("attngen: threads must be in 0..1024 (0 = one per core), got " +
                             std::to_string(threads));
    internal::install_halide_hooks();
    halide_set_num_threads(threads);
    return Status();
}

} // namespace attngen
