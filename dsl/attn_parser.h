// The .attn front end: parses a file of attention layers into AttentionSpecs, with compiler-style
// diagnostics. The grammar (newlines or ';' end items, '#' starts a comment):
//
//   file   := { layer }
//   layer  := 'attention' NAME '{' { item } '}'
//   item   := FIELD '=' value
//           | 'tensor' NAME '[' dim { ',' dim } ']' [ ':' ( 'f32' | 'i32' ) ]
//           | 'scalar' NAME [ ':' ( 'f32' | 'i32' ) ]
//           | 'let' NAME '=' expr             (substituted where used; any order, no cycles)
//   dim    := batch | heads | kv_heads | queries | keys | head_dim | INTEGER
//   fields := model_dim, heads, kv_heads, head_dim, value_dim = INTEGER;
//             dtype = f32 | f16 | bf16;
//             kv_dtype = f32 | f16 | bf16 | i8;
//             projections = none | q, k, v, out (a comma list);
//             bias, cross, sinks = true | false;  outputs = out | out, lse;
//             layout = batched | packed;
//             mask = none | term { '+' term },
//               term := causal | padding | window '(' INTEGER ')' | additive | '(' expr ')';
//             scale = a constant expr over numbers, head_dim, model_dim, heads, kv_heads;
//             score_mod = expr;
//             rope = none | neox | interleaved | table [ '(' neox | interleaved ')' ];  rope_theta
//             = NUMBER;  rotary_dim = INTEGER; rope_scaling = none | linear '(' NUMBER ')'
//                          | llama3 '(' NUMBER ',' NUMBER ',' NUMBER ',' INTEGER ')';
//             cache = none | contiguous | paged '(' INTEGER ')';  cache_dtype = f32 | f16 | bf16
//               | i8
//   expr   := from loosest to tightest: || ; && ; == != < <= > >= (not chained) ; + - ;
//             * / % ; prefix - ! ; f(args) and t[indices] ; INTEGER, REAL, true, false,
//             NAME, '(' expr ')'. Newlines are ignored inside brackets and after an operator.
#pragma once

#include "attention_spec.h"
#include "attn_diagnostics.h"
#include "attn_printer.h"

#include <string>
#include <vector>

namespace attngen {

/** The layers of a file, in order, and every error found in it. */
struct ParsedSpec {
    std::vector<AttentionSpec> layers; ///< the layers without errors (all of them when none)
    std::vector<Diagnostic> errors;    ///< in source order; empty when the file is valid
};

/**
 * Parses `text` as .attn source; `file_name` is used in the diagnostics only. Any input is
 * accepted without crashing or hanging, within limits that no real spec comes near: at most
 * 50 errors are reported (then a final file-level "too many errors" note); expressions nest
 * and their trees (lets substituted) reach at most 200 levels, and 100000 nodes; names have at
 * most 256 characters; a layer has at most 256 tensors and scalars, 64 mask predicates and
 * 1024 lets; inputs over 16 MiB are refused with one file-level error. Empty input yields no
 * layers and no errors. A layer with an error in it is left out of `layers`.
 */
ParsedSpec parse_attn(const std::string &text, const std::string &file_name);

/** parse_attn on the contents of `path`; a file that cannot be read is one line-0 error. */
ParsedSpec parse_attn_file(const std::string &path);

} // namespace attngen
