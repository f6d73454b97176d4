// The buffer arguments of a generated layer's entry point, in order: the one description that
// the generator declares its inputs/outputs from and the typed header binds its calls to.
#pragma once

#include "attention_spec.h"

#include <string>
#include <vector>

namespace attngen {

/** One buffer argument. Extents are in Halide order (innermost first); -1 is a run-time size. */
struct BufferArgument {
    std::string name;
    bool is_int32 = false;  ///< else the spec's storage type
    bool is_output = false; ///< the last argument, and the only output
    std::vector<int> extents;
};

/**
 * The entry point's buffer arguments for a valid spec, in call order (after the user_context):
 * the inputs as DESIGN.md "Data layout" names them, then `out`.
 */
std::vector<BufferArgument> layer_arguments(const AttentionSpec &spec);

} // namespace attngen
