// Target families and their expansion (see targets.h).
#include "targets.h"

#include <cstdlib>
#include <cstring>

#include "Halide.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace attngen {

namespace {

/** Whether the CPU has what LLVM's sapphirerapids code may use: AVX512-FP16 and AVX-VNNI. */
bool cpu_has_sapphire_rapids_features() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx))
        return false;
    const bool avx512_fp16 = (edx >> 23) & 1u;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx))
        return false;
    const bool avx_vnni = (eax >> 4) & 1u;
    return avx512_fp16 && avx_vnni;
#else
    return false;
#endif
}

} // namespace

Halide::Target host_target() {
    Halide::Target host = Halide::get_host_target();
    if (host.has_feature(Halide::Target::AVX512_SapphireRapids) &&
        !cpu_has_sapphire_rapids_features())
        host = host.without_feature(Halide::Target::AVX512_SapphireRapids);
    return host;
}

Halide::Target jit_target() {
    const char *named = std::getenv("HL_JIT_TARGET");
    if (named != nullptr && *named != '\0' && std::strncmp(named, "host", 4) != 0)
        return Halide::get_jit_target_from_environment();
    return host_target().with_feature(Halide::Target::JIT);
}

std::vector<TargetFamily> target_families() {
    return {
        {"x86-64-linux",
         "x86-64 Linux, one library with AVX-512, AVX2+FMA and SSE4.1 variants, chosen at run time",
         {"x86-64-linux-avx512_skylake", "x86-64-linux-avx2-fma-f16c", "x86-64-linux-sse41"}},
        {"arm-64-linux",
         "AArch64 Linux (NEON), with a variant for half-precision arithmetic (ARMv8.2 FP16), "
         "chosen at run time",
         {"arm-64-linux-arm_fp16", "arm-64-linux"}},
        {"cuda",
         "NVIDIA GPUs through CUDA (PTX for compute capability 8.6 and 8.0, which newer GPUs "
         "also run); add --target x86-64-linux for a CPU fallback in the same library",
         {"x86-64-linux-cuda-cuda_capability_86", "x86-64-linux-cuda-cuda_capability_80"}},
        {"host",
         "the machine running attngen: " + host_target().to_string(),
         {host_target().to_string()}},
    };
}

std::vector<std::string> expand_targets(const std::vector<std::string> &requested,
                                        std::string &error) {
    std::vector<std::string> expanded;
    for (const std::string &name : requested) {
        bool family = false;
        for (const TargetFamily &candidate : target_families())
            if (candidate.name == name) {
                expanded.insert(expanded.end(), candidate.halide_targets.begin(),
                                candidate.halide_targets.end());
                family = true;
            }
        if (family)
            continue;
        if (!Halide::Target::validate_target_string(name)) {
            error = "unknown target '" + name + "'; see `attngen targets`";
            return {};
        }
        expanded.push_back(name);
    }
    if (expanded.empty()) {
        error = "no target given; use --target x86-64-linux (see `attngen targets`)";
        return {};
    }
    const Halide::Target first(expanded.front());
    for (const std::string &target : expanded) {
        const Halide::Target t(target);
        if (t.arch != first.arch || t.os != first.os || t.bits != first.bits) {
            error = "targets " + expanded.front() + " and " + target +
                    " are for different machines; compile each into its own library";
            return {};
        }
        if (t.arch != Halide::Target::X86 && !(t.arch == Halide::Target::ARM && t.bits == 64)) {
            error = "target " + target +
                    " is not supported by this attngen yet (x86-64 and arm-64 only)";
            return {};
        }
    }
    return expanded;
}

std::string variant_target(const std::string &halide_target) {
    return halide_target + "-user_context-no_runtime";
}

} // namespace attngen
