// Lowers the language's expressions (score_mod, mask predicates) to Halide Exprs inside the
// attention pipeline, so schedules see them as ordinary arithmetic of the stages they live in.
#pragma once

#include "expression.h"

#include "Halide.h"

#include <map>
#include <string>
#include <vector>

namespace attngen {

/** What an expression's names mean at the point it is lowered. */
struct LoweringContext {
    Halide::Expr score; ///< undefined where score is not allowed (mask predicates)
    Halide::Expr b, h, q, k;
    /** Declared tensors: their Funcs in Halide order, and the extents reads are clamped to. */
    std::map<std::string, Halide::Func> tensors;
    std::map<std::string, std::vector<Halide::Expr>> tensor_extents;
    std::map<std::string, Halide::Expr> scalars;
};

/** The Halide Expr of a checked expression (check_spec returned no errors for its layer). */
Halide::Expr lower_expression(const ModExpr &expr, const LoweringContext &context);

} // namespace attngen
