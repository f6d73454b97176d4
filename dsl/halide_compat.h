// The few places where the Halide versions attngen builds with (14 and 21, ATTNGEN_HALIDE in
// CMake) differ in API, behind one interface. Everything else is written once against both.
#pragma once

#include "Halide.h"

#include <cstdint>
#include <optional>
#include <string>

// Halide 21's Halide.h defines HALIDE_VERSION_MAJOR; Halide 14's defines no version.
#ifdef HALIDE_VERSION_MAJOR
#define ATTNGEN_HALIDE_MAJOR HALIDE_VERSION_MAJOR
#else
#define ATTNGEN_HALIDE_MAJOR 14
#endif
#if ATTNGEN_HALIDE_MAJOR != 14 && ATTNGEN_HALIDE_MAJOR < 21
#error "attngen builds with Halide 14 or Halide 21 and later; the versions between are untested"
#endif

/** In a Generator's member functions: whether GenGen was asked for one of Halide's
 *  autoschedulers (`autoscheduler=NAME` in Halide 21, `auto_schedule=true` in 14). */
#if ATTNGEN_HALIDE_MAJOR >= 21
#define ATTNGEN_GENERATOR_AUTOSCHEDULED() (this->using_autoscheduler())
#else
#define ATTNGEN_GENERATOR_AUTOSCHEDULED() (this->get_auto_schedule())
#endif

namespace attngen::halide_compat {

/** Halide's GPU autoscheduler (Anderson2021), which `attngen tune` offers as a baseline on GPU
 *  targets; Halide 14 has none. */
#if ATTNGEN_HALIDE_MAJOR >= 21
inline constexpr const char *gpu_autoscheduler = "Anderson2021";
#else
inline constexpr const char *gpu_autoscheduler = "";
#endif

/** A scalar pipeline parameter (Halide 21: Halide::Parameter; 14: in Halide::Internal). */
#if ATTNGEN_HALIDE_MAJOR >= 21
using Parameter = Halide::Parameter;
#else
using Parameter = Halide::Internal::Parameter;
#endif

/** The value of a constant integer expression, or nothing (Halide 14 returned a pointer). */
inline std::optional<int64_t> constant_int(const Halide::Expr &e) {
#if ATTNGEN_HALIDE_MAJOR >= 21
    return Halide::Internal::as_const_int(e);
#else
    const int64_t *value = Halide::Internal::as_const_int(e);
    return value ? std::optional<int64_t>(*value) : std::nullopt;
#endif
}

/**
 * Whether Halide's code generator widens f16 to f32 with a conversion instruction on `target`:
 * Halide 21 on x86 with F16C (which every AVX2 and AVX-512 target has); Halide 14 emulates the
 * conversion in integer arithmetic everywhere.
 */
inline bool converts_f16_in_hardware(const Halide::Target &target) {
#if ATTNGEN_HALIDE_MAJOR >= 21
    using T = Halide::Target;
    return target.arch == T::X86 &&
           target.features_any_of({T::F16C, T::AVX2, T::AVX512, T::AVX512_Skylake,
                                   T::AVX512_Cannonlake, T::AVX512_Zen4, T::AVX512_Zen5,
                                   T::AVX512_SapphireRapids});
#else
    (void)target;
    return false;
#endif
}

/** Runs GenGen's command line in-process (`attngen compile`); returns its exit status and puts
 *  what it reported in `errors`. */
int generate_filter_main(int argc, char **argv, std::string &errors);

/** Applies one of Halide's autoschedulers, whose plugin is already loaded, to `pipeline`, for
 *  `threads` cores and a last-level cache of `cache_bytes`. */
void apply_autoscheduler(Halide::Pipeline &pipeline, const std::string &name,
                         const Halide::Target &target, int threads, int64_t cache_bytes);

} // namespace attngen::halide_compat
