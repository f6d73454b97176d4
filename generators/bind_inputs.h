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

/**
 * An ImageParam for the buffer argument `entry` (JIT pipelines and lowering), constrained as
 * every generated layer is (constrain_argument) and entered in `bound` with its extents.
 */
Halide::ImageParam bind_image_param(const AttentionSpec &spec, const EntryArgument &entry,
                                    BoundArguments &bound);

/**
 * Constrains a buffer argument (a Generator Input/Output or an ImageParam) as every generated
 * layer is: mins 0, and the extents that are fixed at generation time.
 */
template <typename Argument>
void constrain_argument(Argument &argument, const std::vector<TensorDim> &dims) {
    for (size_t i = 0; i < dims.size(); i++) {
        argument.dim(static_cast<int>(i)).set_min(0);
        if (dims[i].symbol == TensorDim::Symbol::fixed)
            argument.dim(static_cast<int>(i)).set_extent(dims[i].extent);
    }
}

} // namespace attngen
