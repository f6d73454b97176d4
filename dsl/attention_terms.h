// The terms the attention forms (attention_algorithm.cpp) are built from: loads widened to f32,
// the masks' tests, the rules for non-finite values and the softmax's pieces. Internal to dsl/.
#pragma once

#include "attention_algorithm.h"
#include "expression_lowering.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <utility>

namespace attngen {

/**
 * An f16 value widened to f32 exactly, in integer and f32 vector arithmetic: the sign, exponent
 * and mantissa bits moved to their f32 places and the exponent rebased by a multiply by 2^112
 * (which also makes subnormals exact), infinities and NaNs rebuilt apart. Halide 14 widens f16
 * through a longer emulation on x86, even with F16C: decode steps over an f16 KV cache were
 * bound by it rather than by memory.
 */
Halide::Expr widen_f16(const Halide::Expr &half);

/**
 * A stored value (f32, f16 or bf16) in f32, exactly. An f16 value is widened by widen_f16, or
 * with `native_f16` by a plain cast (AlgorithmOptions::native_f16).
 */
Halide::Expr f32(const Halide::Expr &value, bool native_f16);

/** An f32 value in a storage type. NaN stays NaN: Halide 14's conversion to f16, under its
 * fast-math flags, makes it an infinity. */
Halide::Expr narrowed(const Halide::Type &type, const Halide::Expr &value);

/** The spec's expressions see the indices and the run-time tensors and scalars. */
LoweringContext lowering_context(const AttentionInputs &in, const Halide::Expr &k,
                                 const Halide::Expr &q, const Halide::Expr &h,
                                 const Halide::Expr &b);

/**
 * The query position of row `row` of the attention stages: the row itself, or, with
 * AlgorithmOptions::reverse_queries, counted from the last query (a mapping that is its own
 * inverse).
 */
Halide::Expr query_position(const Halide::Expr &row, const AttentionInputs &in,
                            const AlgorithmOptions &options);

/**
 * The key position of query 0 of sequence b: Lk - Lq, so that the last query sits at the last
 * key, or with a cache the tokens the sequence has cached.
 */
Halide::Expr query_offset(const AttentionSpec &spec, const AttentionInputs &in,
                          const Halide::Expr &b);

/** The keys sequence b has, where fewer than Lk: its key length, or its cached and new tokens;
 * undefined where every sequence has Lk. */
Halide::Expr key_limit(const AttentionSpec &spec, const AttentionInputs &in, const Halide::Expr &b);

/** Which keys the structured masks (causal, window, key padding, a cache's lengths) show query
 * q of batch b. Each is a bound linear in k, so Halide's loop partitioning can solve it for a
 * block's keys. */
Halide::Expr structured_visible(const AttentionSpec &spec, const AttentionInputs &in,
                                const Halide::Expr &k, const Halide::Expr &q,
                                const Halide::Expr &b);

/** The spec's mask predicates as one: is key k visible to query q of head h, batch b? */
Halide::Expr predicates_visible(const AttentionSpec &spec, const AttentionInputs &in,
                                const Halide::Expr &k, const Halide::Expr &q, const Halide::Expr &h,
                                const Halide::Expr &b);

// Non-finite values. Halide compiles float code with LLVM's no-NaNs/no-infs flags, under which a
// float comparison, min or max may treat a NaN or an infinity as anything. So no decision below
// that must see a NaN is a float comparison:
// - a hidden key's score becomes `lowest` (the lowest finite float) by a select on its bits, so
//   that nothing it holds (NaN, +inf) reaches a max, a sum or an output (hide_score);
// - a score whose bits are `lowest` has probability exactly 0 (has_lowest_bits): hidden keys,
//   visible scores of -inf (which a max from `lowest` leaves at `lowest`) and all-hidden chunks;
// - every other score's probability is the softmax's exponential, which keeps a NaN (its clamps
//   are strict_float, see softmax_exp2): a visible NaN or +inf score (+inf - +inf is NaN) makes
//   its probability, and so the row's sums and output, NaN, as in IEEE arithmetic;
// - the normalization divides by the row's sum unless the sum's bits are zero (every key hidden).
// A hidden key's V row is multiplied by probability 0 wherever a tile reads it: 0 x NaN and
// 0 x inf are NaN there, so a non-finite V at a hidden key can turn a row NaN but never into a
// wrong finite value (PyTorch's math path does the same; docs/api.md, "Non-finite inputs").
constexpr float lowest = std::numeric_limits<float>::lowest();
/// An additive bias at or below this (-inf included) hides its key, as -inf would.
constexpr float masking_bias = lowest / 2;

/** The bits of an f32 as a signed integer. */
int32_t bits_of(float value);

/** Whether `x` (f32) is exactly `lowest`: an integer comparison, blind to fast-math flags. */
Halide::Expr has_lowest_bits(const Halide::Expr &x);

/** x, or `lowest` where `keep` is false: a select on the bits, blind to what x holds. Unlike a
 * select on x, it leaves bounds inference free to require x wherever keep's condition is false
 * too, so a tile's region depends on the tile and not on the mask. */
Halide::Expr hide_score(const Halide::Expr &x, const Halide::Expr &keep_bits);

/** Whether an f32 bias hides its key: at most masking_bias, NaN excluded, on its bits (a negative
 * float's bits, as a signed integer, grow with its magnitude, up to -inf's). */
Halide::Expr bias_hides(const Halide::Expr &bias);

/** 1 / sum, or 0 where sum is exactly +0 (no visible key): NaN stays NaN. */
Halide::Expr inverse_sum(const Halide::Expr &sum);

/** The keys [begin, end) visible to some query of a query's aligned block. */
using KeyRange = std::pair<Halide::Expr, Halide::Expr>;
/** probs' value at (key, q, h, b) given the maximum it is taken relative to. */
using Probability = std::function<Halide::Expr(const Halide::Expr &key, const Halide::Expr &max)>;
/** The softmax's exponential, in the units of the scores (score_units). */
using Exponential = std::function<Halide::Expr(const Halide::Expr &)>;

} // namespace attngen
