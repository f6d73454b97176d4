// The checker of the .attn front end: from one parsed layer to an AttentionSpec, with every
// problem reported at the place in the source it concerns.
#pragma once

#include "attention_spec.h"
#include "attn_diagnostics.h"
#include "attn_syntax.h"

#include <optional>

namespace attngen {

/**
 * Substitutes the layer's lets (refusing cycles, and results deeper than max_expression_depth
 * or larger than max_expression_nodes), evaluates its scale over the other fields, then applies
 * check_spec's rules to the fields, declarations and expressions. Each problem goes to
 * `diagnostics` at the source location of the field value, declaration or expression node it
 * concerns. Returns the layer when there were none. A layer that is not `complete` is not
 * checked at all (its problems would follow from the syntax error already reported).
 */
std::optional<AttentionSpec> check_layer(const LayerSyntax &layer, DiagnosticList &diagnostics);

/**
 * The largest depth and size of an expression tree the front end accepts. The depth is also
 * the parser's limit on nesting (parentheses, brackets, calls, prefix operators), which bounds
 * its recursion; to_string never nests deeper than a tree is deep, so every accepted tree
 * prints as text the parser accepts again.
 */
constexpr int max_expression_depth = 200;
constexpr size_t max_expression_nodes = 100000;

} // namespace attngen
