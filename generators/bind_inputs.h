// Binds a layer's entry arguments, held as Halide Funcs and Exprs by whoever declared them (a
// Generator's Inputs, or ImageParams and Params for JIT), to the algorithm's inputs.
#pragma once

#include "dsl/attention_algorithm.h"

#include "Halide.h"

#include <map>
#include <string>
#include <vector>

namespace attngen {

/** The declared arguments of one pipeline, by the names layer_arguments() gives them. */
struct BoundArguments {
    std::map<std::string, Halide::Func> buffers;
    std::map<std::string, std::vector<Halide::Expr>> extents; ///< Halide order, per buffer
    std::map<std::string, Halide::Expr> scalars;
};

/** The algorithm's inputs for `spec` from its declared arguments. */
AttentionInputs bind_inputs(const AttentionSpec &spec, const BoundArguments &arguments);

} // namespace attngen
