// The targets attngen can generate for, and how the names users give expand to Halide targets.
#pragma once

#include <string>
#include <vector>

namespace Halide {
struct Target;
}

namespace attngen {

/**
 * The machine running attngen, as Halide should target it: Halide::get_host_target() less what
 * Halide 14 claims but the CPU lacks. Halide 14 names any CPU with AVX512-BF16 and AVX512-VNNI
 * avx512_sapphirerapids, AMD Zen 4 among them, and LLVM's sapphirerapids code uses AVX512-FP16
 * (vmovw), which Zen 4 does not have: such code stops with an illegal instruction there.
 */
Halide::Target host_target();

/** The JIT target: HL_JIT_TARGET when it names one, otherwise host_target() with jit. */
Halide::Target jit_target();

/** A named target family and the Halide targets (best first) it expands to. */
struct TargetFamily {
    std::string name;
    std::string description;
    std::vector<std::string> halide_targets;
};

/** The families this build can generate for. */
std::vector<TargetFamily> target_families();

/**
 * Expands what a user asked for (family names, "host", or Halide target strings) into Halide
 * targets, best first, all of one architecture and OS. On a problem, returns none and says why.
 */
std::vector<std::string> expand_targets(const std::vector<std::string> &requested,
                                        std::string &error);

/** A Halide target with the features every attngen layer is generated with. */
std::string variant_target(const std::string &halide_target);

} // namespace attngen
