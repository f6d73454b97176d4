// Evaluation of constant expressions, such as a .attn layer's `scale = 1 / sqrt(head_dim)`.
#pragma once

#include "expression.h"
#include "expression_check.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attngen {

/** The value of a constant expression and its type (a boolean is 0 or 1). */
struct ConstantValue {
    ExprType type = ExprType::real;
    double value = 0;
};

/** Named integer constants an expression may use, written like scalars (e.g. head_dim). */
using Constants = std::vector<std::pair<std::string, long>>;

/**
 * The value of `expr`, or nothing with the reasons appended to `errors`: a node that is not
 * constant (score, b, h, q, k, a tensor read), a type error (check_expression's rules, with the
 * constants as integer scalars), division by zero, or an integer result outside 32 bits.
 * Integer / and % are Halide's: the remainder is never negative. Reals are evaluated in double.
 */
std::optional<ConstantValue> evaluate_constant(const ModExpr &expr, const Constants &constants,
                                               std::vector<ExprError> &errors);

} // namespace attngen
