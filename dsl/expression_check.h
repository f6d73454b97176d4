// Type checking of the attention language's expressions, alone and in the context of a layer:
// what check_spec and the .attn front end both report. No Halide here.
#pragma once

#include "attention_spec.h"
#include "expression.h"

#include <string>
#include <vector>

namespace attngen {

/** The type of an expression. Integers are 32-bit, reals are float32 once lowered. */
enum class ExprType { boolean, integer, real };

/** "boolean", "integer" or "real". */
const char *to_string(ExprType type);

/** One problem in an expression: the node it concerns and a sentence a user can act on. */
struct ExprError {
    SourceRange where; ///< of the offending node (line 0 when the tree was built in C++)
    std::string message;
};

/** What an expression may refer to besides numbers, b, h, q, k and the functions. */
struct ExprContext {
    bool score_allowed = false; ///< score_mod may read `score`; a mask predicate may not
    const std::vector<RuntimeTensor> *tensors = nullptr; ///< null: none declared
    const std::vector<RuntimeScalar> *scalars = nullptr; ///< null: none declared
    /** The expression goes into a Halide pipeline: refuse integer constants that Halide's
     * folding could carry out of 32 bits (evaluate_constant checks its own arithmetic). */
    bool folded_by_halide = true;
};

/**
 * The type of `expr`, appending every problem found to `errors` (all of them, not just the
 * first, up to max_errors_reported). The result is meaningful only when no error was added.
 *
 * Rules: score is real, b h q k are integers, scalars and tensor reads have their declared
 * element type. + - * / on numbers: integer when both operands are (/ then divides integers),
 * real otherwise. % needs integers. Comparisons take numbers and give a boolean; ! && || take
 * booleans. abs, min, max, clamp and select(condition, a, b) give the promoted type of their
 * number arguments; exp, log, sqrt, tanh give reals; floor and ceil give reals (as Halide's do:
 * wrap them in int(...) for an index); float(x) is real and int(x) truncates to an integer.
 * Tensors are indexed with exactly one integer per dimension.
 */
ExprType check_expression(const ModExpr &expr, const ExprContext &context,
                          std::vector<ExprError> &errors);

/** How many errors check_expression reports for one expression at most. */
constexpr size_t max_errors_reported = 100;

/**
 * Why `name` cannot name a tensor, scalar or let ("an index variable", "a function", ...), or
 * "" when it can.
 */
std::string why_reserved(const std::string &name);

/** One problem with a layer's expressions or the run-time inputs it declares. */
struct LayerExprError {
    std::string field; ///< "score_mod", "mask", "tensor NAME" or "scalar NAME"
    size_t index = 0;  ///< the mask predicate, tensor or scalar concerned (its position)
    SourceRange where; ///< the node concerned; line 0 for a declaration or a C++-built tree
    /**
     * Reads after the field ("score_mod: " + message) when `about_field`; otherwise it is a
     * sentence about the node at `where` that also reads on its own.
     */
    std::string message;
    bool about_field = false;
};

/**
 * Checks the declared tensors and scalars (names are identifiers, unique, and neither score,
 * b, h, q, k, true, false nor a function; 1 to 4 dimensions; fixed extents at least 1), the
 * score_mod (a number) and each mask predicate (a boolean, without score). check_spec reports
 * these as SpecErrors; the .attn front end maps them to source locations.
 */
std::vector<LayerExprError> check_layer_expressions(const AttentionSpec &spec);

} // namespace attngen
