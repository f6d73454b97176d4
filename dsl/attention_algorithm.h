// The attention math of DESIGN.md as a Halide algorithm: named stages, no scheduling, no target.
#pragma once

#include "attention_spec.h"
#include "layer_interface.h"

#include "Halide.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace attngen {

/**
 * The caller's tensors as Halide Funcs in storage type, Halide order (dim 0 innermost).
 * Which ones must be defined follows from the spec:
 *   without projections: query (D, Lq, H, B), key and value (D, Lk, Hkv, B);
 *   with projections:    x (model_dim, Lq, B), context (model_dim, Lk, B) for cross-attention,
 *                        wq (model_dim, H*D), wk and wv (model_dim, Hkv*D), wo (H*D, model_dim)
 *                        as nn.Linear stores weight[out][in], biases bq, bk, bv, bo (out);
 *   key_lengths (B) int32 with key padding; attn_bias (Lk, Lq, H, B) with an additive mask;
 *   rope_cos and rope_sin (rotary_dim / 2, Lk) f32 with rope = table; sinks (H) f32 with sinks.
 * query_len and key_len are the run-time Lq and Lk.
 */
struct AttentionInputs {
    Halide::Func query, key, value;
    /** With kv_dtype = i8: key's and value's scales (Lk, Hkv, B) f32; element (k, h, b) times
     * key(d, k, h, b) is the key's element d. */
    Halide::Func key_scales, value_scales;
    Halide::Func x, context;
    Halide::Func wq, wk, wv, wo;
    Halide::Func bq, bk, bv, bo;
    Halide::Func key_lengths, attn_bias;
    Halide::Func rope_cos, rope_sin; ///< (rotary_dim / 2, Lk) f32 with rope = table
    Halide::Func sinks;              ///< (H) f32: each head's sink logit (spec.sinks)
    /**
     * A cached layer's (spec.cache): k_cache and v_cache in the cache's type, contiguous (D,
     * capacity, Hkv, B) or paged (D, block_size, Hkv, blocks) with block_table (max_blocks, B);
     * cache_lengths and query_lengths (B) int32. The new tokens are query/key/value or x, of
     * length Lq, and key_len is the longest sequence after the call (key_count).
     */
    Halide::Func k_cache, v_cache, block_table, cache_lengths, query_lengths;
    /** An i8 cache's scales, f32, the caches' dims without d: (capacity, Hkv, B) or paged
     * (block_size, Hkv, blocks); element (p, h, ...) = k_cache(d, p, h, ...) / its int value. */
    Halide::Func k_scales, v_scales;
    std::vector<Halide::Expr> cache_extents; ///< of k_cache (v_cache's are the same)
    Halide::Expr max_blocks;                 ///< block_table's extent per sequence
    /**
     * A cached layer's other outputs, which build_attention defines: the new tokens' keys
     * (rotated) and values (d, t, hkv, b) in the cache's type. A generator passes its Outputs.
     */
    Halide::Func k_new{"new_keys"}, v_new{"new_values"};
    /** An i8 cache's other outputs, which build_attention defines: the new rows' scales (t,
     * hkv, b) f32. A generator passes its Outputs. */
    Halide::Func k_new_scales{"new_key_scales"}, v_new_scales{"new_value_scales"};
    /** With spec.lse_output, the lse output (q, h, b) f32, which build_attention defines. */
    Halide::Func lse{"lse"};
    Halide::Expr query_len, key_len;
    /** The spec's declared run-time tensors (Halide order, with extents) and scalars. */
    std::map<std::string, Halide::Func> tensors;
    std::map<std::string, std::vector<Halide::Expr>> tensor_extents;
    std::map<std::string, Halide::Expr> scalars;
};

/**
 * How a row's softmax and P·V are reduced: the forms the algorithm can be written in. Every form
 * computes the same values (DESIGN.md's math); each exists for a schedule.
 */
enum class AttentionForm {
    /** The plain math: a query's whole row of scores, its max and sum, then P·V. */
    whole_rows,
    /**
     * Chunks of chunk_keys keys, each with its own max, sum and partial output, combined
     * exactly: scores stay in cache (the CPU's flash form, a query tile walking the chunks) and
     * chunks are independent work (the CPU's split-KV decode form, a task per chunk).
     */
    chunks,
    /**
     * One pass over steps of step_keys keys with a running max and sum (per chunk of chunk_keys
     * with chunk_keys > 0): K and V read once with the state in registers (the GPU's form).
     */
    online,
};

/** How the algorithm is written for a schedule; the values it computes do not depend on it. */
struct AlgorithmOptions {
    AttentionForm form = AttentionForm::whole_rows;
    /**
     * Aligned blocks of this many queries take their key ranges together: with a causal, window
     * or padding mask the softmax and P·V reductions of a query visit the union of its block's
     * ranges, so a schedule whose query tiles are these blocks gets loop bounds uniform over a
     * tile. Keys in the union outside a query's own range are masked as every other key is.
     * 1 gives each query its own range.
     */
    int query_tile = 1;
    /**
     * Aligned blocks of this many queries (a divisor of query_tile) take their key ranges
     * together in P·V alone, whose register blocks are smaller than the softmax's tiles: a
     * causal tile's P·V blocks then stop at their own diagonal rather than the tile's.
     * 0: query_tile.
     */
    int value_queries = 0;
    /**
     * The stages from q_heads to weighted_sum index the queries last to first (row r is query
     * Lq - 1 - r; AttentionStages::attn_reversed), so the aligned blocks of query_tile rows
     * end at the last query. Under a causal mask the cost of a query grows with its position: a
     * schedule's query tiles then run longest first, and the short tile left over where the
     * tile does not divide Lq holds the first queries, whose rows are shortest, not the last.
     */
    bool reverse_queries = false;
    /**
     * f16 values widen to f32 with a plain cast, which Halide's code generator turns into the
     * target's conversion instruction (Halide 21 on x86 with F16C:
     * halide_compat::converts_f16_in_hardware), rather than attngen's integer sequence
     * (widen_f16), which is faster than the emulation Halide falls back to elsewhere.
     */
    bool native_f16 = false;
    /** Keys per chunk of the chunks form, and of the online form's split-KV chunks (or 0). */
    int chunk_keys = 0;
    /**
     * The chunks form: the chunk's P·V walks its keys in blocks of this many (a divisor of
     * chunk_keys), r_values (y, x) = (block, key in block), so that a schedule can sum each
     * block in registers (rfactor over the blocks) and visit only the blocks with visible keys.
     * 0: one loop over the chunk's keys.
     */
    int kv_value_block = 0;
    /**
     * The chunks form without whole_chunk_statistics (the CPU's flash form): P·V reads V
     * through v_panels, a copy whose rows hold this many features of each key (a divisor of
     * value_dim), so that a register block of P·V's features walks its keys through memory in
     * order rather than a whole row a key. 0: it reads v_heads.
     */
    int value_panel = 0;
    /**
     * The chunks form without whole_chunk_statistics: the scores read K through k_panels, a copy
     * that holds each run of this many keys feature by feature (the keys of one feature side by
     * side), so that a register block of key_panel keys reads its keys' features in order rather
     * than one row apart each. 0: the scores read k_heads.
     */
    int key_panel = 0;
    /**
     * The chunks form: the chunk's max and sum visit all its keys, the masked ones (and those
     * past Lk) as masked scores, rather than the range the mask leaves visible. Their loops
     * then hold no condition, and the compiler keeps each row's running max and sum in
     * registers instead of reloading and storing them per key (split-KV decode: about a
     * tenth of a step). A chunk's few masked keys cost less than that; query tiles (prefill),
     * whose ranges skip most of a chunk under a causal mask, keep the range.
     */
    bool whole_chunk_statistics = false;
    /** The online form: keys per step. */
    int step_keys = 0;
    /** The online form: head_dim elements per state (a divisor of head_dim). */
    int d_per_lane = 1;
    /**
     * The chunks form: calls with Lk <= rows_up_to reduce each row whole instead
     * (AttentionStages::rows), a run-time choice inside one pipeline. 0: chunks at every Lk.
     */
    int rows_up_to = 0;
    /**
     * The softmax's exponentials as polynomials rather than Halide::exp: about half the
     * vector instructions on CPUs, where they are a tenth of a D=64 layer's time. The scores
     * are then in base 2 (score_units) and the exponentials softmax_exp2, or softmax_exp where
     * a score_mod must see natural scores.
     */
    bool polynomial_exp = false;
    /**
     * The split-KV form (the chunks with whole_chunk_statistics; effective_options clears it
     * elsewhere), with i8 keys (a cache's, or the inputs' without rotary embeddings, whose keys
     * rotate in f32): each score is an exact 32-bit integer dot product of
     * the key's bytes with the query rounded to 16 bits at a scale of its own (q_codes), then
     * times both rows' scales, rather than an f32 dot product of the widened bytes. x86 has it
     * in one instruction per pair of elements (pmaddwd). The rounding moves each query element
     * by at most max|q| / (2 query_code_limit); a query row holding a NaN or an infinity gets
     * NaN scores. Needs an even head_dim.
     */
    bool integer_scores = false;
};

/**
 * The largest magnitude of a query's 16-bit codes (AlgorithmOptions::integer_scores): 32767,
 * or less where head_dim products of it and 128 (an i8 key's largest magnitude) would pass
 * the 32-bit sum.
 */
int query_code_limit(int head_dim);

/**
 * The options build_attention writes a spec in: `requested` with what does not apply to its
 * form turned off (a kv_value_block that does not divide the chunks, rows_up_to and chunk
 * settings outside the chunks form). Schedules read these, kept with the stages, to know the
 * form they schedule.
 */
AlgorithmOptions effective_options(const AlgorithmOptions &requested);

/**
 * The pipeline's stages by the names DESIGN.md fixes; schedules and the tuner address them.
 * Stages a spec does not use are left undefined. Dimension order (innermost first):
 *   q_heads, q_proj (d, q, h, b); k_heads, v_heads, k_proj, v_proj (d, k, hkv, b);
 *   scores, masked, probs (k, q, h, b); row_max, row_sum (q, h, b);
 *   weighted_sum, attn_out (d, q, h, b); out_proj (c, q, b);
 *   q_weight, k_weight, v_weight, o_weight (in, out): the weights read as float32.
 * q_heads is the scaled query, scale * Q, so that scores are a plain dot product.
 * `probs` holds the unnormalized exp(masked - row_max); the 1/row_sum is folded into attn_out,
 * which is exact and saves a multiply per score.
 *
 * The chunks form (AttentionForm::chunks): the keys are walked in chunks j of chunk_keys
 * keys. Each chunk has its own part_max, part_sum (j, q, h, b) and part_out (d, j, q, h, b),
 * and `probs` is exp(masked - part_max) of the key's chunk. The combine is exact:
 * row_max = max_j part_max, part_scale = exp(part_max - row_max), row_sum = sum_j part_scale *
 * part_sum, weighted_sum = sum_j part_scale * part_out. No Lq x Lk matrix is needed, and the
 * chunks are independent work: the CPU decode schedule runs them as parallel tasks, the CPU
 * prefill schedule (flash form) walks them one after another inside each query tile.
 */
struct AttentionStages {
    Halide::Var d{"d"}, c{"c"}, q{"q"}, k{"k"}, h{"h"}, b{"b"};

    /// The projections' activations in f32, (feature, position, batch), positions clamped;
    /// in self-attention kv_rows is q_rows.
    Halide::Func q_rows{"q_rows"}, kv_rows{"kv_rows"};
    Halide::Func q_proj{"q_proj"}, k_proj{"k_proj"}, v_proj{"v_proj"};
    Halide::Func q_weight{"q_weight"}, k_weight{"k_weight"}, v_weight{"v_weight"};
    Halide::Func o_weight{"o_weight"};
    /**
     * Rotary embeddings (spec.rope), undefined without them: rope_table (pair, position) is
     * Tuple(cos, sin) of the pair's angle at a position; q_rope (d, q, h, b) and k_rope (d, k,
     * hkv, b) are the queries (in query order) and keys rotated, in f32, before the scale.
     * q_heads and k_heads read them.
     */
    Halide::Func rope_table{"rope_table"}, q_rope{"q_rope"}, k_rope{"k_rope"};
    /**
     * A cached layer's new rows (d, t, hkv, b) in the cache's type, outputs of the pipeline
     * (AttentionInputs::k_new): keys rotated. k_heads and v_heads read key k of sequence b from
     * k_cache and v_cache below the sequence's cache length and from these above it; undefined
     * without a cache. With rope, q_rope and k_rope are then in the new tokens' order.
     */
    Halide::Func k_new{"new_keys"}, v_new{"new_values"};
    /**
     * An i8 cache's new rows' scales (t, hkv, b) f32, outputs too: max |x| / 127 over the row's
     * d, with k_new and v_new round(x / scale) (ties to even) in [-127, 127]; undefined
     * otherwise.
     */
    Halide::Func k_new_scales{"new_key_scales"}, v_new_scales{"new_value_scales"};
    /**
     * An i8 cache's scale of key k's K and V rows (k, hkv, b), from k_scales/v_scales or the new
     * rows'; k_heads and v_heads are then the rows' integers, and the scores and P·V multiply by
     * these once per key. Undefined otherwise.
     */
    Halide::Func k_scale{"key_scale"}, v_scale{"value_scale"};
    /**
     * i8 keys' bytes (d, k, hkv, b) as stored, which k_heads widens; undefined for other
     * dtypes and for i8 key inputs with rotary embeddings (their keys rotate in f32). With
     * AlgorithmOptions::integer_scores, the scores read these, and q_codes (d, q, h, b) int16 =
     * round(q_heads / q_code_scale), q_code_scale (q, h, b) = max |q_heads| / query_code_limit over
     * the row (0 codes where it is 0 or not finite).
     */
    Halide::Func k_codes{"key_codes"}, q_codes{"query_codes"}, q_code_scale{"query_code_scale"};
    Halide::Var pair{"pair"}, position{"position"};
    Halide::Func q_heads{"q_heads"}, k_heads{"k_heads"}, v_heads{"v_heads"};
    /**
     * (d, k, j, h, b) = v_heads(j * AlgorithmOptions::value_panel + d, k, h, b): V in panels
     * of value_panel features, which the flash form's P·V reads where the option is set.
     */
    Halide::Func v_panels{"v_heads_panels"};
    /**
     * (i, d, j, h, b) = k_heads(d, j * AlgorithmOptions::key_panel + i, h, b): K in panels of
     * key_panel keys, which the flash form's scores read where the option is set.
     */
    Halide::Func k_panels{"k_heads_panels"};
    Halide::Func scores{"scores"}, masked{"masked"}, row_max{"row_max"};
    Halide::Func probs{"probs"}, row_sum{"row_sum"};
    /**
     * (k, q, h, b): P·V's weight of key k's V row in the chunks form, probs times the row's
     * scale, where V is i8 (v_scale is defined); a stage of its own so that a schedule can
     * compute it once per key and head rather than in each pass over the row. Undefined
     * otherwise: without scales P·V reads probs, and the whole-rows and online forms weigh
     * inline.
     */
    Halide::Func value_weights{"value_weights"};
    Halide::Func weighted_sum{"weighted_sum"}, attn_out{"attn_out"}, out_proj{"out_proj"};
    /**
     * With AlgorithmOptions::reverse_queries, the stages from q_heads to weighted_sum index
     * query rows r = Lq - 1 - query, and attn_reversed (d, r, h, b) is their result, which
     * attn_out reads back in query order. Undefined otherwise.
     */
    Halide::Func attn_reversed{"attn_reversed"};
    /** The chunks' partials and their weights in the combine (the chunks form only). */
    Halide::Func part_max{"part_max"}, part_sum{"part_sum"}, part_out{"part_out"};
    Halide::Func part_scale{"part_scale"};
    /**
     * (d, j, q, h, b): Tuple(part_out, part_max, part_sum), the chunk's results as the combine
     * reads them. The statistics are repeated along d; the combine reads them at d = 0.
     */
    Halide::Func partials{"partials"};
    /**
     * The online (one-pass) form (AttentionForm::online): the keys are walked in steps of
     * step_keys, each step's max computed once (part_max, (j, q, h, b) for step j) and its
     * probabilities relative to it (probs), and every step is folded into `running`,
     * (d_group, q, q_tile, h, b) for query q_tile * query_tile + q, or (d_group, j, q, q_tile,
     * h, b) for chunk j of the split-KV chunks: a Tuple of d_per_lane output elements (head_dim
     * elements d_group * d_per_lane + i), the running max m, the running sum l, and the
     * step's weight exp(part_max - m), the output elements and l relative to m. Its update, over
     * r_online (key in step, a unit dimension, step), moves the state to max(m, part_max) on a
     * step's first key, rescaling by exp(m - m_new), and adds each key's weighted probability times
     * its value. So K and V are read once, and the row's statistics sit beside its output elements,
     * not repeated along head_dim: a schedule computes each step's exponentials once per row. The
     * state's query tile is a pure dimension, so that its loop over steps can be bounded by the
     * keys the tile sees.
     */
    Halide::Func running{"running"};
    Halide::Var d_group{"d_group"};
    /**
     * The online fold's reduction domain: (key in step, a unit dimension, step). Its test of
     * the steps a tile sees depends on the step alone; a schedule that computes each step's
     * stages at the unit's loop computes them inside that test, skipping the steps a causal
     * or window mask hides from the tile.
     */
    Halide::RDom r_online;
    /** The chunk (or step) index of the split-KV partials, and their tile index. */
    Halide::Var j{"j"}, q_tile{"q_tile"};

    /**
     * Reduction domains: over head_dim, keys, model_dim (projections), and H*D (out). In the
     * chunks form r_keys runs over the keys of one chunk (key j * chunk_keys + r_keys.x) and
     * r_chunks over the chunks.
     */
    Halide::RDom r_head_dim, r_keys, r_model, r_concat, r_chunks;
    /**
     * The keys of P·V's reduction (weighted_sum or part_out): r_keys, or, with a structured
     * mask and AlgorithmOptions::value_queries, the same keys bounded per block of
     * value_queries queries rather than query_tile.
     */
    Halide::RDom r_values;
    /** The form these stages were written in (effective_options), which schedules read. */
    AlgorithmOptions options;
    /** A stored value read as f32, f16 widened as options.native_f16 says (attention_terms.h). */
    Halide::Expr widened(const Halide::Expr &stored) const;
    /**
     * The buffers whose rows the loops over keys stream through, by name: a cached layer's
     * k_cache and v_cache, or the per-head key and value inputs; empty with projections.
     */
    std::set<std::string> kv_buffers;
    /**
     * Set by a schedule: prefetch the rows of kv_buffers this many keys ahead of the loops over
     * keys that read them (add_lowering_passes); 0 for none.
     */
    int kv_prefetch_keys = 0;
    /**
     * With AlgorithmOptions::rows_up_to, the whole-row form beside this (chunks) form: its own
     * stages from scores to weighted_sum, sharing q_heads, k_heads and (with projections)
     * v_heads; without projections its v_heads is its own Func of the same input. attn_out
     * takes its value where `use_rows` (Lk <= rows_up_to) holds, for a schedule to specialize
     * on. Null and undefined otherwise.
     */
    std::shared_ptr<AttentionStages> rows;
    Halide::Expr use_rows;

    /** The stage whose value is the layer's result (attn_out or out_proj). */
    Halide::Func result;
    /** The result as stored: cast to the storage type. */
    Halide::Func output;
    /**
     * With spec.lse_output: (q, h, b) f32, the natural log of each row's softmax denominator
     * (sinks included), -inf for a row that sees nothing; attn_out is then Tuple(attention, lse)
     * and this reads its second element. Undefined otherwise.
     */
    Halide::Func lse;

    AttentionSpec spec;
};

/**
 * 2^x for the softmax's arguments in base 2, x <= 0 (a score minus its row's maximum, both
 * natural scores times log2(e): see score_units), in plain arithmetic that vectorizes: x clamped
 * below at -126.5 is n + f with n an integer, |f| <= 1/2, and 2^x is 2^n (built in the float's
 * exponent bits) times a degree-6 polynomial in f. The base-2 form saves the CPU softmax a multiply
 * and a clamp per score over softmax_exp. Valid for x < 1/2. Against 2^x in double
 * (tests/test_softmax_exp.cpp): relative error under 1.5e-7 (1.05e-7 measured) for x >= -125.5;
 * below that, results of at most 2^-125.5 (0 from x = -126.5).
 */
Halide::Expr softmax_exp2(const Halide::Expr &x);

/**
 * exp(x) for x <= 0, as softmax_exp2(x log2(e)) clamped above at 0. Against exp in double
 * (tests/test_softmax_exp.cpp): absolute error under 1e-7 (Halide::exp: 1.04e-7), and
 * relative error under 1e-7 (1 + |x|) for x >= -87; below that, results of at most exp(-87)
 * (0 from x = -87.7). Positive x gives 1.
 */
Halide::Expr softmax_exp(const Halide::Expr &x);

/**
 * The natural log of x for positive normal floats (a softmax's denominator, at least 1 where it
 * is not 0), in plain arithmetic that vectorizes, as Cephes' logf does it. Against log in double
 * (tests/test_softmax_exp.cpp): absolute error under 1.5e-7 (1 + |log x|).
 */
Halide::Expr softmax_log(const Halide::Expr &x);

/**
 * (cos, sin) of the angle `turns` / 2^64 turns (a UInt(64) Expr: a fraction of a turn in fixed
 * point, as rotary embeddings' rope_table reduces an angle exactly), in f32 arithmetic that
 * vectorizes: the nearest quarter turn is taken from the top bits, and the rest, within pi/4,
 * goes through Cephes' sinf and cosf polynomials. Against cos and sin in double
 * (tests/test_rotary_math.cpp): absolute error under 2e-7 (8.9e-8 measured).
 */
Halide::Tuple turns_cos_sin(const Halide::Expr &turns);

/**
 * The units of the scores that build_attention's softmax works in: log2(e) per natural unit
 * where the exponentials are polynomial (softmax_exp2; the factor is folded into the query
 * scale and any bias) and no score_mod must see natural scores; else 1.
 */
double score_units(const AttentionSpec &spec, const AlgorithmOptions &options);

/**
 * Builds the algorithm for a valid spec (check_spec must have returned no errors) and defines
 * `output` (undefined on entry; a generator passes its Output) as the stored result.
 */
AttentionStages build_attention(const AttentionSpec &spec, const AttentionInputs &inputs,
                                Halide::Func output = Halide::Func("output"),
                                const AlgorithmOptions &options = {});

/** The Halide type of the spec's storage. */
Halide::Type storage_type(DType dtype);

/** The Halide type of an entry argument: i32, f32 for declared tensors/scalars, else storage. */
Halide::Type argument_type(const AttentionSpec &spec, const EntryArgument &argument);

} // namespace attngen
