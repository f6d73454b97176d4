// The typed C++ header of a generated layer: its LayerInfo and a named entry point over the
// Halide function that add_halide_library generates as <name>_halide.
#pragma once

#include "dsl/attention_spec.h"

#include <string>

namespace attngen {

/** The suffix of the Halide function behind a layer's typed entry point. */
inline const char *halide_function_suffix() { return "_halide"; }

/** The text of <spec.name>.h for a valid spec. */
std::string layer_header(const AttentionSpec &spec);

} // namespace attngen
