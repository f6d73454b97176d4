// Evaluates the language's expressions in double precision, as the language defines them, for
// the reference of layers with score_mod or mask predicates (attngen run). Independent of the
// Halide lowering.
#pragma once

#include "dsl/expression.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attngen_test {

/** A declared tensor's values, row-major, with its shape (outermost first) and type. */
struct ReferenceTensor {
    std::vector<double> values;
    std::vector<int64_t> shape;
    bool is_int32 = false;
};

struct ReferenceBindings {
    std::map<std::string, ReferenceTensor> tensors;
    std::map<std::string, std::pair<double, bool>> scalars; ///< value, is_int32
};

/** The value of `expr` (booleans as 1 or 0) at one score and position. */
double evaluate(const attngen::ModExpr &expr, const ReferenceBindings &bindings, double score,
                int b, int h, int q, int k);

} // namespace attngen_test
