// The typed C++ header of a generated layer: its LayerInfo, one thunk per compiled variant,
// and a named entry point over them.
#pragma once

#include "dsl/attention_spec.h"

#include <string>
#include <vector>

namespace attngen {

/** The suffix of the Halide function behind a layer's typed entry point. */
inline const char *halide_function_suffix() {
    return "_halide";
}

/**
 * The text of <spec.name>.h for a valid spec whose Halide library was generated for `targets`
 * (the full target strings handed to the generator, best first; a single target means a
 * library without a multi-target wrapper).
 */
std::string layer_header(const AttentionSpec &spec, const std::vector<std::string> &targets);

/** One header for several layers of one library, generated for the same targets. */
std::string library_header(const std::vector<AttentionSpec> &layers,
                           const std::vector<std::string> &targets);

/** A layer's declarations without the header's preamble. */
std::string layer_definitions(const AttentionSpec &spec, const std::vector<std::string> &targets);

/** The runtime's CpuVariant (as C++ source) a Halide target string needs. */
const char *cpu_variant_of(const std::string &target);

/** The attngen::Device a Halide target string runs on (cuda, opencl or cpu). */
const char *device_of(const std::string &target);

} // namespace attngen
