// The canonical .attn text of a layer: the inverse of parse_attn.
#pragma once

#include "attention_spec.h"

#include <string>

namespace attngen {

/**
 * The text of one `attention NAME { ... }` block that parse_attn reads back as an equal spec
 * (for a spec check_spec accepts): fields that differ from their defaults, declarations, then
 * the mask, scale and score_mod. The scale is written as a number that reads back exactly.
 */
std::string to_attn(const AttentionSpec &spec);

} // namespace attngen
