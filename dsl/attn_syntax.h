// One layer as the .attn parser read it, with where each part was written: what the parser
// hands the checker (attn_checker.h).
#pragma once

#include "attention_spec.h"
#include "expression.h"

#include <map>
#include <string>
#include <vector>

namespace attngen {

struct LayerSyntax {
    /** The name, the literal fields, the mask keywords, tensors and scalars, as written. */
    AttentionSpec spec;
    SourceRange name_where;
    SourceRange open_brace;
    /** Each field given, by its .attn name ("cross", "heads"...): where its value starts. */
    std::map<std::string, SourceRange> field_values;
    /** Where each tensor and scalar of `spec` is declared (its name), in the same order. */
    std::vector<SourceRange> tensor_names, scalar_names;

    /** `let name = body`. */
    struct Let {
        std::string name;
        SourceRange where; ///< the name in the definition
        ModExprPtr body;
    };
    std::vector<Let> lets;

    /**
     * The expressions as written: every name that is not score, b, h, q or k, or a tensor read,
     * is a Kind::scalar node (a let, a declared scalar, or in scale one of head_dim, model_dim,
     * heads, kv_heads), resolved by the checker.
     */
    ModExprPtr score_mod;
    ModExprPtr scale;
    std::vector<ModExprPtr> mask_predicates;

    /** False when a syntax error lost part of the layer; the checker then checks no meaning. */
    bool complete = true;
};

} // namespace attngen
