// Builds the attention algorithm from a spec. The math, as DESIGN.md writes it, for batch b,
// query head h (which reads kv head h / group), query q, key k and feature d:
//
//   scores(k, q)  = Σ_d q_heads(d, q) k_heads(d, k)           q_heads carries the scale
//   masked(k, q)  = visible(k, q) ? score_mod(scores + bias) : hidden
//   row_max(q)    = max_k masked(k, q)
//   probs(k, q)   = exp(masked(k, q) - row_max(q))             0 for a hidden key
//   row_sum(q)    = Σ_k probs(k, q)
//   output(d, q)  = Σ_k probs(k, q) v_heads(d, k) / row_sum(q)
//
// (With sinks, row_sum gains exp(sinks(h) - row_max): see normalized. With outputs = out, lse,
// lse(q) = row_max + log(row_sum) in natural units, -inf where row_sum is 0: see log_sum_exp.)
// define_masked_scores and define_whole_rows, first below, define exactly this (with
// AlgorithmOptions::integer_scores, i8 keys' scores use queries rounded to 16 bits). The other
// forms compute the same output in another order (AttentionForm), each in a function of its own:
// define_chunks and define_online, with define_combine. Then the heads (projections, rotary
// embeddings, a cache) and the output, and build_attention, which puts them together.
//
// Reads of sequence positions that a schedule may round a tile past are clamped to the valid
// range, so over-computed tiles never read outside the caller's buffers; clamped positions only
// feed values no reduction consumes. The terms the forms share are in attention_terms.h.
#include "attention_algorithm.h"
#include "attention_terms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

namespace attngen {

using Halide::Expr;
using Halide::Func;
using Halide::RDom;
using Halide::RVar;
using Halide::Var;

namespace {

/**
 * Rows of `width` elements from `rows` (d, t, h, b) rounded to integers (8 bits up to a limit of
 * 127, else 16) at a scale per row: `scales` (t, h, b) = max |x| / limit over the row, and
 * `values` = round(x / scale) (ties to even), in [-limit, limit]; 0 where the scale is 0 or not
 * finite (a NaN or an infinity in the row, which the scale then holds). An i8 cache's new rows
 * (limit 127), and the queries of AlgorithmOptions::integer_scores.
 */
void define_quantized(const AttentionStages &s, Func rows, Func values, Func scales, int width,
                      int limit = 127) {
    const Halide::Type type = limit <= 127 ? Halide::Int(8) : Halide::Int(16);
    Var d = s.d, k = s.k, h = s.h, b = s.b;
    RDom r(0, width, "r_row");
    // The largest magnitude by its bits: for magnitudes, integer order is float order, and NaN
    // and the infinities lie above every finite value (a float max under fast-math flags may
    // drop a NaN).
    Expr magnitude = Halide::reinterpret<int32_t>(rows(r, k, h, b)) & 0x7fffffff;
    const float top = static_cast<float>(limit);
    scales(k, h, b) = Halide::reinterpret<float>(Halide::maximum(magnitude)) / top;
    Expr scale = scales(k, h, b);
    Expr scale_bits = Halide::reinterpret<int32_t>(scale);
    Expr usable = scale_bits > 0 && scale_bits < bits_of(std::numeric_limits<float>::infinity());
    Expr rounded = Halide::clamp(Halide::round(rows(d, k, h, b) / scale), -top, top);
    values(d, k, h, b) = Halide::cast(type, Halide::select(usable, rounded, 0.0f));
}

/**
 * Defines scores and masked in `t`, whose q_heads and k_heads are defined: S = (scale * Q) K^T,
 * the bias, the score_mod, and every key a mask hides replaced by `lowest` on its bits. With
 * integer_scores and i8 keys' bytes (k_codes), the scores are integer dot products of those with
 * the queries' 16-bit codes (q_codes, defined here), times both rows' scales.
 */
void define_masked_scores(AttentionStages &t, const AttentionInputs &in) {
    const AttentionSpec &spec = t.spec;
    const AlgorithmOptions &options = t.options;
    Var q = t.q, k = t.k, h = t.h, b = t.b;
    Expr last_query = in.query_len - 1, last_key = in.key_len - 1;
    Expr position = query_position(q, in, options);
    // q_heads carries the scale. Query head h reads kv head h / group.
    Expr kv_head = h / spec.group_size();
    Expr score;
    if (options.integer_scores && t.k_codes.defined()) {
        // The key's bytes against the query's 16-bit codes, summed exactly in 32 bits; both
        // rows' scales multiply the sum once.
        const int head_dim = spec.resolved_head_dim();
        define_quantized(t, t.q_heads, t.q_codes, t.q_code_scale, head_dim,
                         query_code_limit(head_dim));
        t.scores(k, q, h, b) = 0;
        t.scores(k, q, h, b) +=
            Halide::cast<int32_t>(t.q_codes(t.r_head_dim, q, h, b)) *
            Halide::cast<int32_t>(Halide::cast<int16_t>(t.k_codes(t.r_head_dim, k, kv_head, b)));
        score = Halide::cast<float>(t.scores(k, q, h, b)) *
                (t.q_code_scale(q, h, b) * t.k_scale(k, kv_head, b));
    } else {
        Expr key = t.k_heads(t.r_head_dim, k, kv_head, b);
        if (options.key_panel > 0) {
            const int panel = options.key_panel;
            Var i{"i"}, d = t.d, j = t.j;
            t.k_panels(i, d, j, h, b) = t.k_heads(d, j * panel + i, h, b);
            key = t.k_panels(k % panel, t.r_head_dim, k / panel, kv_head, b);
        }
        t.scores(k, q, h, b) = 0.0f;
        t.scores(k, q, h, b) += t.q_heads(t.r_head_dim, q, h, b) * key;
        // An i8 cache's keys are integers: the row's scale multiplies the dot product once.
        score = t.k_scale.defined() ? t.scores(k, q, h, b) * t.k_scale(k, kv_head, b)
                                    : Expr(t.scores(k, q, h, b));
    }
    // The expressions see a cached layer's queries at their positions in the sequence.
    Expr expression_q = spec.cache.any() ? position + in.cache_lengths(b) : position;
    Expr visible = predicates_visible(spec, in, k, expression_q, h, b);
    const double units = score_units(spec, options);
    if (spec.mask.additive) {
        Expr bias = t.widened(in.attn_bias(Halide::clamp(k, 0, last_key),
                                           Halide::clamp(position, 0, last_query), h, b));
        // In base 2 the bias is scaled too.
        score += units == 1.0 ? bias : bias * static_cast<float>(units);
        // A -inf bias masks even when a score_mod would make something finite of it; a NaN bias
        // of a visible key makes its score NaN.
        visible = visible && !bias_hides(bias);
    }
    if (spec.score_mod) {
        LoweringContext context = lowering_context(in, k, expression_q, h, b);
        context.score = score;
        score = Halide::cast<float>(lower_expression(*spec.score_mod, context));
    }
    // A hidden key's score is replaced by `lowest` on its bits (hide_score). The structured
    // masks' test is marked likely: Halide then partitions each loop over keys into the blocks
    // that every query of the tile sees, where the test is gone, and the diagonal (or window
    // edge, or padding) blocks, where it stays. Their tests are bounds on k, which Halide's
    // solver handles; the predicates and the bias keep their test everywhere.
    Expr keep = Halide::select(visible, -1, 0);
    Expr structured = structured_visible(spec, in, k, position, b);
    // The online form's steps cover whole steps of keys, the last past Lk, and so do chunks
    // with whole_chunk_statistics: those keys are masked here, so that a step's (or chunk's)
    // max and probabilities need no bounds of their own.
    if (options.form == AttentionForm::online || options.whole_chunk_statistics)
        structured = structured && k < in.key_len;
    if (!Halide::Internal::is_const_one(structured))
        keep = Halide::select(structured, Halide::likely(keep), 0);
    t.masked(k, q, h, b) = hide_score(score, keep);
}

/**
 * What every form's reductions share: the keys each query's block visits, and the softmax's
 * exponential and probabilities.
 */
struct SoftmaxParts {
    /**
     * Whether a structured mask (or a cache) bounds each query's keys: the reductions then
     * visit only the keys of the query's block (AlgorithmOptions::query_tile), so the keys a
     * causal, window or padding mask hides from a whole tile are skipped rather than computed
     * and zeroed. The elementwise mask still decides every key inside the range.
     */
    bool bounded = false;
    /** [begin, end) of the keys visible to some query of the aligned block of `block` rows. */
    std::function<KeyRange(int block, const Expr &row)> key_range;
    /** The key range of row q's query tile. */
    KeyRange tile_keys;
    /**
     * P·V takes finer blocks (AlgorithmOptions::value_queries) than the softmax, so that the
     * register blocks of a causal tile stop at their own diagonal.
     */
    bool own_values = false;
    Exponential exponential;
    Probability probability;
};

SoftmaxParts softmax_parts(AttentionStages &t, const AttentionInputs &in) {
    const AttentionSpec &spec = t.spec;
    const AlgorithmOptions options = t.options;
    Var q = t.q, h = t.h, b = t.b;
    SoftmaxParts parts;
    const bool bounded = spec.mask.bounds_keys() || spec.cache.any();
    parts.bounded = bounded;
    parts.key_range = [&spec, in, options, bounded, b](int block, const Expr &row) -> KeyRange {
        Expr begin = 0, end = in.key_len;
        if (!bounded)
            return {begin, end};
        block = std::max(block, 1);
        Expr offset = query_offset(spec, in, b); // query q sits at key position q + offset
        // The block's first and last row, and its first and last query position (reversed
        // rows count down, so the last row holds the first query).
        Expr first_row = block == 1 ? row : (row / block) * block;
        Expr last_row = first_row + (block - 1);
        Expr first_q = query_position(first_row, in, options);
        Expr last_q = query_position(last_row, in, options);
        if (options.reverse_queries)
            std::swap(first_q, last_q);
        if (spec.mask.causal)
            end = Halide::min(end, last_q + offset + 1);
        if (spec.mask.window > 0) {
            begin = Halide::max(begin, first_q + offset - (spec.mask.window - 1));
            end = Halide::min(end, last_q + offset + spec.mask.window);
        }
        if (Expr limit = key_limit(spec, in, b); limit.defined())
            end = Halide::min(end, limit);
        return {begin, end};
    };
    parts.tile_keys = parts.key_range(options.query_tile, q);
    parts.own_values =
        bounded && options.value_queries > 0 && options.value_queries < options.query_tile;
    // Numerically stable softmax. A row with every key masked has row_max = lowest, probs = 0,
    // row_sum = 0 and an all-zero output row instead of NaN (as PyTorch's SDPA since 2.5).
    const double units = score_units(spec, options);
    parts.exponential = [units, options](const Expr &x) {
        if (units != 1.0)
            return softmax_exp2(x);
        if (options.polynomial_exp)
            return softmax_exp(x);
        // Halide's exp clamps its argument with a max, which may drop a NaN: kept on its bits.
        Expr is_nan = (Halide::reinterpret<int32_t>(x) & 0x7fffffff) > 0x7f800000;
        return Halide::select(is_nan, x, Halide::exp(x));
    };
    Func masked = t.masked;
    parts.probability = [masked, q, h, b, exponential = parts.exponential](const Expr &key,
                                                                           const Expr &max) {
        Expr score = masked(key, q, h, b);
        return Halide::select(has_lowest_bits(score), 0.0f, exponential(score - max));
    };
    return parts;
}

/**
 * The reduction over the keys of P·V: r_keys, or with own_values its own domain of `extent`
 * keys from `first`, bounded per block of value_queries queries.
 */
RDom value_keys(const AttentionStages &t, const SoftmaxParts &parts, const Expr &extent,
                const Expr &first) {
    if (!parts.own_values)
        return t.r_keys;
    RDom r(0, extent, "r_values");
    const auto [begin, end] = parts.key_range(t.options.value_queries, t.q);
    r.where(first + r.x >= begin && first + r.x < end);
    return r;
}

/**
 * Probability `p` of key `key` as P·V weighs its V row: times the row's scale where V is an i8
 * cache's (v_heads then holds its integers), once per key rather than per element.
 */
Expr value_weight(const AttentionStages &t, const Expr &p, const Expr &key, const Expr &kv_head,
                  const Expr &b) {
    return t.v_scale.defined() ? p * t.v_scale(key, kv_head, b) : p;
}

/** The plain form: each query's whole row of keys, its max, sum and P·V (unnormalized). */
void define_whole_rows(AttentionStages &t, const AttentionInputs &in, const SoftmaxParts &parts) {
    Var d = t.d, q = t.q, k = t.k, h = t.h, b = t.b;
    Expr kv_head = h / t.spec.group_size();
    const auto [key_begin, key_end] = parts.tile_keys;
    t.r_keys = RDom(0, in.key_len, "r_keys");
    if (parts.bounded)
        t.r_keys.where(t.r_keys.x >= key_begin && t.r_keys.x < key_end);
    t.row_max(q, h, b) = lowest;
    t.row_max(q, h, b) = Halide::max(t.row_max(q, h, b), t.masked(t.r_keys, q, h, b));
    t.probs(k, q, h, b) = parts.probability(k, t.row_max(q, h, b));
    t.row_sum(q, h, b) = 0.0f;
    t.row_sum(q, h, b) += t.probs(t.r_keys, q, h, b);
    // O = P V, normalized once per output element.
    t.r_values = value_keys(t, parts, in.key_len, 0);
    t.weighted_sum(d, q, h, b) = 0.0f;
    t.weighted_sum(d, q, h, b) +=
        value_weight(t, t.probs(t.r_values, q, h, b), t.r_values, kv_head, b) *
        t.v_heads(d, t.r_values, kv_head, b);
}

/**
 * The exact combine of chunk results that `t.partials` (d, j, q, h, b) holds as Tuple(out, max,
 * sum), each relative to its own max: row_max, part_scale, row_sum and weighted_sum over the
 * chunks of chunk_keys keys that hold visible keys.
 */
void define_combine(AttentionStages &t, const AttentionInputs &in, const KeyRange &range,
                    const Exponential &exponential) {
    Var d = t.d, j = t.j, q = t.q, h = t.h, b = t.b;
    const int chunk = t.options.chunk_keys;
    // Chunks wholly outside the visible range are not visited.
    Expr chunks = (in.key_len + (chunk - 1)) / chunk;
    t.r_chunks = RDom(0, chunks, "r_chunks");
    Expr c_first = t.r_chunks.x * chunk;
    t.r_chunks.where(c_first < range.second && c_first + chunk > range.first);
    auto partial = [&](const Expr &at, const Expr &chunk) {
        return t.partials(at, chunk, q, h, b);
    };
    auto chunk_max = [&](const Expr &chunk) { return partial(0, chunk)[1]; };
    auto chunk_sum = [&](const Expr &chunk) { return partial(0, chunk)[2]; };
    t.row_max(q, h, b) = lowest;
    t.row_max(q, h, b) = Halide::max(t.row_max(q, h, b), chunk_max(t.r_chunks));
    // A chunk with every key masked has part_max = lowest and contributes nothing.
    t.part_scale(j, q, h, b) = Halide::select(has_lowest_bits(chunk_max(j)), 0.0f,
                                              exponential(chunk_max(j) - t.row_max(q, h, b)));
    t.row_sum(q, h, b) = 0.0f;
    t.row_sum(q, h, b) += t.part_scale(t.r_chunks, q, h, b) * chunk_sum(t.r_chunks);
    t.weighted_sum(d, q, h, b) = 0.0f;
    t.weighted_sum(d, q, h, b) += t.part_scale(t.r_chunks, q, h, b) * partial(d, t.r_chunks)[0];
}

/**
 * The chunks form: partial statistics and output per chunk of keys (`partials`), then their
 * exact combine, so that a chunk's scores stay in cache and chunks are independent work.
 */
void define_chunks(AttentionStages &t, const AttentionInputs &in, const SoftmaxParts &parts) {
    const AlgorithmOptions &options = t.options;
    Var d = t.d, q = t.q, k = t.k, h = t.h, b = t.b, j = t.j;
    Expr kv_head = h / t.spec.group_size();
    Expr last_key = in.key_len - 1;
    const auto [key_begin, key_end] = parts.tile_keys;
    const int chunk = options.chunk_keys;
    t.r_keys = RDom(0, chunk, "r_keys");
    Expr key = j * chunk + t.r_keys.x;
    if (!options.whole_chunk_statistics)
        t.r_keys.where(key >= key_begin && key < key_end);
    t.part_max(j, q, h, b) = lowest;
    t.part_max(j, q, h, b) = Halide::max(t.part_max(j, q, h, b), t.masked(key, q, h, b));
    t.probs(k, q, h, b) = parts.probability(k, t.part_max(k / chunk, q, h, b));
    t.part_sum(j, q, h, b) = 0.0f;
    t.part_sum(j, q, h, b) += t.probs(key, q, h, b);
    Expr value_key;
    if (options.kv_value_block > 0) {
        const int block = options.kv_value_block;
        t.r_values = RDom({{0, block}, {0, chunk / block}}, "r_values");
        Expr block_first = j * chunk + t.r_values.y * block;
        value_key = block_first + t.r_values.x;
        const auto [begin, end] =
            parts.key_range(parts.own_values ? options.value_queries : options.query_tile, q);
        // A condition on the block alone, so that the sum over blocks (after an rfactor
        // of the keys within one) visits only blocks with visible keys.
        t.r_values.where(block_first < end && block_first + block > begin && value_key >= begin &&
                         value_key < end);
    } else {
        t.r_values = value_keys(t, parts, chunk, j * chunk);
        value_key = j * chunk + t.r_values.x;
    }
    t.part_out(d, j, q, h, b) = 0.0f;
    // The last chunk may run past Lk: its extra keys are never visited, but bounds
    // inference does not see the `where`, so the reads of V (and its scales) are clamped.
    Expr read_key = Halide::min(value_key, last_key);
    Expr weight = t.probs(value_key, q, h, b);
    if (t.v_scale.defined()) {
        t.value_weights(k, q, h, b) =
            value_weight(t, t.probs(k, q, h, b), Halide::min(k, last_key), kv_head, b);
        weight = t.value_weights(value_key, q, h, b);
    }
    Expr value = t.v_heads(d, read_key, kv_head, b);
    if (options.value_panel > 0 && t.spec.resolved_value_dim() % options.value_panel == 0) {
        const int panel = options.value_panel;
        t.v_panels(d, k, j, h, b) = t.v_heads(j * panel + d, k, h, b);
        value = t.v_panels(d % panel, read_key, d / panel, kv_head, b);
    }
    t.part_out(d, j, q, h, b) += weight * value;

    // The combine reads the chunk results only through `partials`, so a schedule may
    // compute a chunk's statistics inside its loop over chunks.
    t.partials(d, j, q, h, b) =
        Halide::Tuple(t.part_out(d, j, q, h, b), t.part_max(j, q, h, b), t.part_sum(j, q, h, b));
    define_combine(t, in, parts.tile_keys, parts.exponential);
}

/**
 * The layout of the online form's state (AttentionStages::running): `width` output elements,
 * then m (the running max), l (the running sum) and the step's weight exp(part_max - m), all
 * relative to m.
 */
struct RunningLayout {
    int width;
    int max_at() const { return width; }
    int sum_at() const { return width + 1; }
    int weight_at() const { return width + 2; }
};

/**
 * The running state's pure arguments, `at` for (d_group, q, q_tile, h, b), with split-KV
 * chunks the chunk j second.
 */
std::vector<Expr> running_args(std::vector<Expr> at, const Expr &chunk, bool has_split) {
    if (has_split)
        at.insert(at.begin() + 1, chunk);
    return at;
}

/**
 * Each step's max (part_max) and the probabilities relative to it (probs), over all of its
 * keys: `masked` masks those past Lk (and every key a mask hides).
 */
void define_step_probabilities(AttentionStages &t, const Probability &probability) {
    const int step = t.options.step_keys;
    Var j = t.j, q = t.q, k = t.k, h = t.h, b = t.b;
    t.r_keys = RDom(0, step, "r_keys");
    t.part_max(j, q, h, b) = lowest;
    t.part_max(j, q, h, b) =
        Halide::max(t.part_max(j, q, h, b), t.masked(j * step + t.r_keys.x, q, h, b));
    t.probs(k, q, h, b) = probability(k, t.part_max(k / step, q, h, b));
}

/**
 * The fold, for row q of tile q_tile, over r_online (key in step, a unit, step): `running`'s
 * initial state and its update. `tile_range` bounds the steps.
 */
void define_fold(AttentionStages &t, const AttentionInputs &in, const KeyRange &tile_range,
                 const Exponential &exponential) {
    const AlgorithmOptions &options = t.options;
    const int step = options.step_keys;
    const int split = options.chunk_keys;
    const int tile = std::max(options.query_tile, 1);
    const RunningLayout layout{options.d_per_lane};
    const int width = layout.width;
    Var j = t.j, q = t.q, h = t.h, b = t.b, dg = t.d_group, q_tile = t.q_tile;
    Expr kv_head = h / t.spec.group_size();

    // Steps past the last key visible to the tile are not visited. The test depends on the step
    // alone, so Halide puts it right inside the loop over steps; a schedule that computes each
    // step's stages at the unit's loop computes them inside the test too, and such a step costs
    // the test alone. (Testing a window's first key as well made Halide 14 slide the step's
    // buffers along the steps and size them by the sequence: steps before a window are
    // computed, their keys masked.)
    const bool has_split = split > 0;
    Expr steps = has_split ? Expr(split / step) : (in.key_len + (step - 1)) / step;
    t.r_online = RDom({{0, step}, {0, 1}, {0, steps}}, "r_online");
    RVar key_in_step = t.r_online.x;
    Expr step_index = has_split ? j * (split / step) + t.r_online.z : Expr(t.r_online.z);
    Expr first_key = step_index * step;
    t.r_online.where(first_key < tile_range.second);
    Expr key = first_key + key_in_step;
    Expr query = q_tile * tile + q;

    const std::vector<Expr> args = running_args({dg, q, q_tile, h, b}, j, has_split);
    const int max_at = layout.max_at(), sum_at = layout.sum_at(), weight_at = layout.weight_at();
    // The initial state (RunningLayout): no output, m = lowest, l = 0 and weight 0.
    std::vector<Expr> initial(width, Expr(0.0f));
    initial.push_back(lowest);
    initial.push_back(0.0f);
    initial.push_back(0.0f);
    t.running(args) = Halide::Tuple(initial);

    // On a step's first key the state moves to the new max, max(m, part_max): o and l are
    // rescaled by exp(m - m_new), and the step's probabilities (relative to part_max) weigh
    // exp(part_max - m_new) from then on. Both exponentials depend on the row alone. Every key
    // then adds its weighted probability times its value. A schedule that unrolls the keys of
    // a step leaves the move in the first key's code alone; the other keys are marked likely.
    Halide::FuncRef state = t.running(args);
    Expr later = Halide::likely(key_in_step != 0);
    Expr step_max = t.part_max(step_index, query, h, b);
    Expr m = state[max_at];
    Expr m_new = Halide::max(m, step_max);
    Expr rescale = exponential(m - m_new);
    Expr weight = Halide::select(later, state[weight_at], exponential(step_max - m_new));
    Expr p = t.probs(key, query, h, b) * weight;
    Expr p_value = value_weight(t, p, key, kv_head, b);
    std::vector<Expr> updated;
    for (int i = 0; i < width; i++) {
        Expr o = Halide::select(later, state[i], state[i] * rescale);
        updated.push_back(o + p_value * t.v_heads(dg * width + i, key, kv_head, b));
    }
    updated.push_back(Halide::select(later, m, m_new));
    updated.push_back(Halide::select(later, state[sum_at], state[sum_at] * rescale) + p);
    updated.push_back(weight);
    t.running(args) = Halide::Tuple(updated);
}

/** What normalized takes: a row's unnormalized P·V, max and sum, and the softmax's exp. */
struct NormalizeTerms {
    Expr out, max, sum;
    Exponential exponential;
};

/**
 * A row's result: the attention, and where the layer writes it (spec.lse_output) the natural
 * log of the softmax's denominator, else undefined.
 */
struct RowResult {
    Expr attention, lse;
};

/**
 * The natural log of a row's softmax denominator `sum` relative to `max` (in score units): max
 * in natural units plus log(sum); -inf where sum's bits are zero (no visible key, no sink), and
 * the sum itself where it is NaN. Decided on the bits (attention_terms.h).
 */
Expr log_sum_exp(const AttentionStages &t, const Expr &max, const Expr &sum) {
    constexpr float infinity = std::numeric_limits<float>::infinity();
    Expr bits = Halide::reinterpret<int32_t>(sum);
    Expr natural_max = max * static_cast<float>(1.0 / score_units(t.spec, t.options));
    return Halide::select(bits == 0, -infinity, (bits & 0x7fffffff) > bits_of(infinity), sum,
                          natural_max + softmax_log(sum));
}

/**
 * The attention from its unnormalized P·V `out`, row max and row sum: out / sum. With sinks
 * (spec.sinks) the denominator gains the head's sink, exp(sink - max), which takes its share of
 * the probability mass and adds no value; both are taken relative to m = max(max, sink), so
 * that every exponent is at most 0: out e^(max - m) / (sum e^(max - m) + e^(sink - m)).
 * Decided on the sink's bits, as attention_terms.h asks of every non-finite value: -inf is no
 * sink; NaN and +inf make the head's rows NaN (+inf - +inf, as PyTorch's softmax over the
 * scores and the sink gives); finite sinks are clamped to +-1e30, so that neither the scaling
 * to base 2 nor max - m overflows. The lse is that denominator's, the sink's term included.
 */
RowResult normalized(const AttentionStages &t, const AttentionInputs &in,
                     const NormalizeTerms &terms) {
    const bool lse = t.spec.lse_output;
    if (!t.spec.sinks)
        return {terms.out * inverse_sum(terms.sum),
                lse ? log_sum_exp(t, terms.max, terms.sum) : Expr()};
    constexpr float infinity = std::numeric_limits<float>::infinity(), limit = 1e30f;
    Expr given = in.sinks(t.h);
    Expr bits = Halide::reinterpret<int32_t>(given);
    Expr poisoned = (bits & 0x7fffffff) > bits_of(infinity) || bits == bits_of(infinity);
    Expr absent = bits == bits_of(-infinity);
    Expr finite =
        Halide::select(poisoned, 0.0f, absent, -limit, Halide::clamp(given, -limit, limit));
    Expr sink = finite * static_cast<float>(score_units(t.spec, t.options));
    // An absent sink leaves the max alone: its stand-in -1e30 must not become the max of a row
    // whose scores all lie below it (an additive bias near -f32 max), which would scale the
    // whole row to 0.
    Expr top = Halide::select(absent, terms.max, Halide::max(terms.max, sink));
    Expr scale = terms.exponential(terms.max - top);
    Expr mass = Halide::select(absent, 0.0f, terms.exponential(sink - top));
    Expr denominator = terms.sum * scale + mass;
    Expr result = terms.out * scale * inverse_sum(denominator);
    // A quiet NaN made from the sink's own bits (a NaN constant would be folded away).
    Expr nan = Halide::reinterpret<float>(bits | 0x7fc00000);
    return {Halide::select(poisoned, nan, result),
            lse ? Halide::select(poisoned, nan, log_sum_exp(t, top, denominator)) : Expr()};
}

/**
 * The fold's result: the normalized row without split-KV chunks; with them, `partials`
 * defined from the chunk's state for the caller to combine, and an undefined result.
 */
RowResult online_result(AttentionStages &t, const AttentionInputs &in,
                        const Exponential &exponential) {
    const AlgorithmOptions &options = t.options;
    const RunningLayout layout{options.d_per_lane};
    const int width = layout.width;
    const int tile = std::max(options.query_tile, 1);
    const bool has_split = options.chunk_keys > 0;
    Var d = t.d, j = t.j, q = t.q, h = t.h, b = t.b;
    // Head_dim element d of query q is element d % width of the state at (d / width, q).
    Halide::FuncRef result =
        t.running(running_args({d / width, q % tile, q / tile, h, b}, j, has_split));
    std::vector<Expr> elements;
    for (int i = 0; i < width; i++)
        elements.push_back(result[i]);
    Expr out = width == 1 ? elements[0] : Halide::mux(d % width, elements);
    Expr max = result[layout.max_at()], sum = result[layout.sum_at()];
    if (has_split) {
        t.partials(d, j, q, h, b) = Halide::Tuple(out, max, sum);
        return {};
    }
    return normalized(t, in, {out, max, sum, exponential});
}

/**
 * The online (one-pass) form: the keys in steps of step_keys, each step's max (part_max) and
 * probabilities relative to it (probs) computed once, and folded into `running` (see
 * AttentionStages::running). `tile_range` is the keys a whole tile of query_tile rows sees,
 * which bounds the steps. Returns the normalized attention where the fold walks every key
 * (chunk_keys 0); with split-KV chunks (chunk_keys, a multiple of step_keys) the fold walks the
 * steps of one chunk, `partials` holds its results for the caller to combine, and the result is
 * undefined. The GPU's form: K and V are read once and a step's state stays in registers.
 */
RowResult define_online(AttentionStages &t, const AttentionInputs &in, const KeyRange &tile_range,
                        const Probability &probability, const Exponential &exponential) {
    define_step_probabilities(t, probability);
    define_fold(t, in, tile_range, exponential);
    return online_result(t, in, exponential);
}

/**
 * Defines the stages from the scores to weighted_sum in `t`, whose q_heads, k_heads and v_heads
 * are defined, in the form `options` names (effective_options), and returns the normalized
 * attention, attn_out's value.
 */
RowResult define_softmax(AttentionStages &t, const AttentionInputs &in,
                         const AlgorithmOptions &options) {
    t.options = options;
    define_masked_scores(t, in);
    const SoftmaxParts parts = softmax_parts(t, in);
    switch (options.form) {
    case AttentionForm::whole_rows:
        define_whole_rows(t, in, parts);
        break;
    case AttentionForm::chunks:
        define_chunks(t, in, parts);
        break;
    case AttentionForm::online: {
        // The fold's steps are bounded by the key range of a whole tile of query_tile rows,
        // so that a loop over them inside the tile skips the steps the mask hides from it.
        const int tile = std::max(options.query_tile, 1);
        RowResult row = define_online(t, in, parts.key_range(tile, t.q_tile * tile),
                                      parts.probability, parts.exponential);
        if (options.chunk_keys <= 0)
            return row;
        define_combine(t, in, parts.tile_keys, parts.exponential);
        break;
    }
    }
    Var q = t.q, h = t.h, b = t.b;
    return normalized(
        t, in,
        {t.weighted_sum(t.d, q, h, b), t.row_max(q, h, b), t.row_sum(q, h, b), parts.exponential});
}

} // namespace

int query_code_limit(int head_dim) {
    // head_dim products of at most limit * 128 each, summed in an int32.
    const int64_t fits = std::numeric_limits<int32_t>::max() / (int64_t{128} * head_dim);
    return static_cast<int>(std::min<int64_t>(std::numeric_limits<int16_t>::max(), fits));
}

AlgorithmOptions effective_options(const AlgorithmOptions &requested) {
    AlgorithmOptions options = requested;
    if ((options.form == AttentionForm::chunks && options.chunk_keys <= 0) ||
        (options.form == AttentionForm::online && options.step_keys <= 0))
        options.form = AttentionForm::whole_rows;
    if (options.form == AttentionForm::whole_rows)
        options.chunk_keys = 0;
    if (options.form != AttentionForm::online) {
        options.step_keys = 0;
        options.d_per_lane = 1;
    }
    if (options.form != AttentionForm::chunks) {
        options.kv_value_block = 0;
        options.rows_up_to = 0;
        options.whole_chunk_statistics = false;
    }
    if (options.kv_value_block > 0 && options.chunk_keys % options.kv_value_block != 0)
        options.kv_value_block = 0;
    if (options.form != AttentionForm::chunks || options.whole_chunk_statistics ||
        options.kv_value_block > 0)
        options.value_panel = 0;
    if (options.form != AttentionForm::chunks || options.whole_chunk_statistics)
        options.key_panel = 0;
    // Integer scores are the split-KV form's (the chunks with whole-chunk statistics), whose
    // schedule computes the query codes once per task; inlined, each score would recompute its
    // row's scale.
    if (!(options.form == AttentionForm::chunks && options.whole_chunk_statistics))
        options.integer_scores = false;
    return options;
}

namespace {

/**
 * rope_table (pair, position): the cos and sin of each rotary pair's angle, position times its
 * inverse frequency. Only the angle modulo a turn matters, and in f32 a product of a position
 * and a frequency loses it (at position 4096 by up to 2.4e-4 radians), so the angle is reduced
 * exactly in integers: the pair's frequency in turns per position, frac(frequency / 2 pi), is
 * a 64-bit fixed-point constant (computed in double when the pipeline is built), and the
 * position times it, modulo 2^64, is the angle's turns (turns_cos_sin). With rope = table the
 * caller's rope_cos and rope_sin are the table.
 */
void define_rope_table(AttentionStages &s, const AttentionSpec &spec, const AttentionInputs &in) {
    if (spec.rope.table) {
        // The caller's tables, a row per key position; clamped, for the rows a schedule rounds
        // a tile past (queries sit at key positions: the runtime refuses Lq > Lk).
        Expr row = Halide::clamp(s.position, 0, in.key_len - 1);
        s.rope_table(s.pair, s.position) =
            Halide::Tuple(in.rope_cos(s.pair, row), in.rope_sin(s.pair, row));
        return;
    }
    constexpr double pi = 3.14159265358979323846;
    std::vector<Expr> turns_per_position;
    for (double frequency : rope_inverse_frequencies(spec.rope, spec.resolved_rotary_dim())) {
        const double turns = frequency / (2 * pi);
        const double fixed = std::ldexp(turns - std::floor(turns), 64);
        const uint64_t bits = fixed >= std::ldexp(1.0, 64) ? 0 : static_cast<uint64_t>(fixed);
        turns_per_position.push_back(Halide::Internal::make_const(Halide::UInt(64), bits));
    }
    Expr step = turns_per_position.size() == 1 ? turns_per_position[0]
                                               : Halide::mux(s.pair, turns_per_position);
    // Two's complement: a negative position (a query before the first key) turns backwards.
    Expr turns = Halide::cast<uint64_t>(Halide::cast<int64_t>(s.position)) * step;
    s.rope_table(s.pair, s.position) = turns_cos_sin(turns);
}

/** Feature d of `rows` (d, pos, h, b), in f32, to be rotated at key position `position`. */
struct RotaryFeature {
    const Func &rows;
    Expr d, pos, h, b;
    Expr position;
};

/**
 * `feature` rotated at its position: pairs (d, d + rotary_dim / 2) with neox, (2i, 2i + 1)
 * interleaved; features from rotary_dim on pass unchanged.
 */
Expr rotated(const AttentionStages &s, const AttentionSpec &spec, const RotaryFeature &feature) {
    const Expr &d = feature.d, &pos = feature.pos, &h = feature.h, &b = feature.b;
    const Expr &position = feature.position;
    const Func &rows = feature.rows;
    const int rotary_dim = spec.resolved_rotary_dim(), half = rotary_dim / 2;
    Expr pair, partner, first;
    if (spec.rope.kind == RopeKind::neox) {
        first = d < half;
        pair = Halide::select(first, d, d - half);
        partner = Halide::select(first, d + half, d - half);
    } else {
        first = d % 2 == 0;
        pair = d / 2;
        partner = Halide::select(first, d + 1, d - 1);
    }
    // Clamped for bounds inference: the features past rotary_dim read neither.
    pair = Halide::clamp(pair, 0, half - 1);
    partner = Halide::clamp(partner, 0, spec.resolved_head_dim() - 1);
    Expr cos = s.rope_table(pair, position)[0], sin = s.rope_table(pair, position)[1];
    Expr x = rows(d, pos, h, b), other = rows(partner, pos, h, b);
    // (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
    Expr turned = x * cos + Halide::select(first, -other, other) * sin;
    return rotary_dim < spec.resolved_head_dim() ? Halide::select(d < rotary_dim, turned, x)
                                                 : turned;
}

/**
 * Per-head rows in f32 that q_heads, k_heads and v_heads are made from: (d, row, h, b), and the
 * row `q_at` of `queries` that row q of the attention stages reads.
 */
struct HeadRows {
    Func queries, keys, values;
    Expr q_at;
};

/**
 * Rotary embeddings: q_rope and k_rope rotate the f32 queries (query order) and keys at their
 * positions, a query's aligned among the keys as the causal mask aligns it; q_heads (scaled)
 * and k_heads read them. v_heads is the caller's.
 */
void define_rotated_heads(AttentionStages &s, const AttentionInputs &in, const HeadRows &rows,
                          float scale) {
    Var d = s.d, q = s.q, k = s.k, h = s.h, b = s.b;
    define_rope_table(s, s.spec, in);
    s.q_rope(d, q, h, b) =
        rotated(s, s.spec, {rows.queries, d, q, h, b, q + (in.key_len - in.query_len)});
    s.k_rope(d, k, h, b) = rotated(s, s.spec, {rows.keys, d, k, h, b, k});
    s.q_heads(d, q, h, b) = s.q_rope(d, rows.q_at, h, b) * scale;
    s.k_heads(d, k, h, b) = s.k_rope(d, k, h, b);
}

/** The name of the buffer that `input` (an input's Func, which wraps it) reads. */
std::string buffer_name(const Func &input) {
    const auto *call = input.value().as<Halide::Internal::Call>();
    return call != nullptr && call->call_type == Halide::Internal::Call::Image ? call->name
                                                                               : input.name();
}

/**
 * A cached layer: `rows` are the new tokens' (d, t, h, b), t in query order. The new keys
 * (rotated) and values become k_new and v_new in the cache's type; a key k of sequence b is then
 * read from the cache below its cache length, and from k_new above it, so that new tokens see
 * their own keys as every later call will. An i8 cache's k_heads and v_heads are its integers,
 * and k_scale and v_scale their rows' scales.
 */
void define_cached_heads(AttentionStages &s, const AttentionInputs &in, const HeadRows &rows,
                         float scale) {
    const AttentionSpec &spec = s.spec;
    Var d = s.d, q = s.q, k = s.k, h = s.h, b = s.b;
    Expr last_query = in.query_len - 1, last_key = in.key_len - 1;
    Func q_rows = rows.queries, k_rows = rows.keys;
    if (spec.rope.any()) {
        define_rope_table(s, spec, in);
        // Positions clamped for bounds inference: only rows past a sequence's new tokens
        // (computed, never used) can pass the longest sequence.
        auto position = [&](const Expr &t) {
            return Halide::clamp(in.cache_lengths(b) + t, 0, last_key);
        };
        s.q_rope(d, q, h, b) = rotated(s, spec, {rows.queries, d, q, h, b, position(q)});
        s.k_rope(d, k, h, b) = rotated(s, spec, {rows.keys, d, k, h, b, position(k)});
        q_rows = s.q_rope;
        k_rows = s.k_rope;
    }
    s.kv_buffers = {buffer_name(in.k_cache), buffer_name(in.v_cache)};
    const bool quantized = spec.resolved_cache_dtype() == DType::i8;
    const Halide::Type cached = storage_type(spec.resolved_cache_dtype());
    s.k_new = in.k_new;
    s.v_new = in.v_new;
    if (quantized) {
        s.k_new_scales = in.k_new_scales;
        s.v_new_scales = in.v_new_scales;
        define_quantized(s, k_rows, s.k_new, s.k_new_scales, spec.resolved_head_dim());
        define_quantized(s, rows.values, s.v_new, s.v_new_scales, spec.resolved_value_dim());
    } else {
        s.k_new(d, k, h, b) = narrowed(cached, k_rows(d, k, h, b));
        s.v_new(d, k, h, b) = narrowed(cached, rows.values(d, k, h, b));
    }
    s.q_heads(d, q, h, b) = q_rows(d, rows.q_at, h, b) * scale;
    Expr cache_length = in.cache_lengths(b);
    Expr new_row = Halide::clamp(k - cache_length, 0, last_query);
    // A cache's element d of key k, and the key's scale (i8), at its position.
    auto from_cache = [&](const Func &cache, const Expr &at) {
        if (spec.cache.kind == CacheSpec::Kind::contiguous) {
            Expr position = Halide::clamp(k, 0, in.cache_extents[1] - 1);
            return at.defined() ? cache(at, position, h, b) : cache(position, h, b);
        }
        // Clamped for bounds inference; the runtime checked the blocks a sequence uses.
        const int block_size = spec.cache.block_size;
        Expr logical = Halide::clamp(k / block_size, 0, in.max_blocks - 1);
        Expr block = Halide::clamp(in.block_table(logical, b), 0, in.cache_extents[3] - 1);
        return at.defined() ? cache(at, k % block_size, h, block) : cache(k % block_size, h, block);
    };
    // Most keys are the cache's: its value marked likely, Halide splits each loop over keys
    // into the keys that read the cache alone and the new ones.
    auto cache_or_new = [&](const Func &cache, const Expr &at, const Expr &new_value) {
        return Halide::select(k < cache_length, Halide::likely(from_cache(cache, at)), new_value);
    };
    Expr key = cache_or_new(in.k_cache, d, s.k_new(d, new_row, h, b));
    if (quantized) {
        s.k_codes(d, k, h, b) = key;
        key = s.k_codes(d, k, h, b);
    }
    s.k_heads(d, k, h, b) = s.widened(key);
    s.v_heads(d, k, h, b) = s.widened(cache_or_new(in.v_cache, d, s.v_new(d, new_row, h, b)));
    if (quantized) {
        s.k_scale(k, h, b) = cache_or_new(in.k_scales, Expr(), s.k_new_scales(new_row, h, b));
        s.v_scale(k, h, b) = cache_or_new(in.v_scales, Expr(), s.v_new_scales(new_row, h, b));
    }
}

/**
 * Q = X Wq^T + bq, K = Xkv Wk^T + bk, V = Xkv Wv^T + bv, split into heads (q_proj, k_proj,
 * v_proj).
 */
void define_projections(AttentionStages &s, const AttentionInputs &in) {
    const AttentionSpec &spec = s.spec;
    const Projections &proj = spec.projections;
    Var d = s.d, q = s.q, k = s.k, h = s.h, b = s.b;
    Var in_feature = s.c, out_feature{"o"}; // of the weights, as nn.Linear names them
    s.r_model = RDom(0, spec.resolved_model_dim(), "r_model");
    s.q_rows(in_feature, q, b) =
        s.widened(in.x(in_feature, Halide::clamp(q, 0, in.query_len - 1), b));
    // Self-attention's keys are its queries (Lk = Lq): one Func, so that a schedule can
    // prepare x once for all three projections.
    if (spec.cross_attention)
        s.kv_rows(in_feature, k, b) =
            s.widened(in.context(in_feature, Halide::clamp(k, 0, in.key_len - 1), b));
    else
        s.kv_rows = s.q_rows;
    // Head h's rows of a weight: h * width + d, width head_dim for Q and K, value_dim for V.
    auto project = [&](Func &stage, Func &weight, const Var &pos, const Func &rows,
                       const Func &raw_weight, const Func &bias, int width) {
        Expr row = h * width + d;
        weight(in_feature, out_feature) = s.widened(raw_weight(in_feature, out_feature));
        stage(d, pos, h, b) = proj.bias ? s.widened(bias(row)) : Expr(0.0f);
        stage(d, pos, h, b) += rows(s.r_model, pos, b) * weight(s.r_model, row);
    };
    const int head_dim = spec.resolved_head_dim();
    project(s.q_proj, s.q_weight, q, s.q_rows, in.wq, in.bq, head_dim);
    project(s.k_proj, s.k_weight, k, s.kv_rows, in.wk, in.bk, head_dim);
    project(s.v_proj, s.v_weight, k, s.kv_rows, in.wv, in.bv, spec.resolved_value_dim());
}

/**
 * q_heads (scaled), k_heads and v_heads in f32, from the projections or the caller's per-head
 * tensors, through rotary embeddings and the cache where the spec has them.
 */
void define_heads(AttentionStages &s, const AttentionInputs &in, float scale) {
    const AttentionSpec &spec = s.spec;
    Var d = s.d, q = s.q, k = s.k, h = s.h, b = s.b;
    Expr last_query = in.query_len - 1, last_key = in.key_len - 1;
    // The query that row q of the attention stages reads (AlgorithmOptions::reverse_queries),
    // clamped: a schedule may round a tile of rows past either end.
    Expr query_row = Halide::clamp(query_position(q, in, s.options), 0, last_query);
    if (spec.projections.any()) {
        define_projections(s, in);
        // q_proj's rows follow the tiles in query order (a schedule sizes its GEMM by them).
        Expr q_at = s.options.reverse_queries ? query_row : Expr(q);
        const HeadRows rows{s.q_proj, s.k_proj, s.v_proj, q_at};
        if (spec.cache.any()) {
            define_cached_heads(s, in, rows, scale);
            return;
        }
        if (spec.rope.any()) {
            define_rotated_heads(s, in, rows, scale);
        } else {
            s.q_heads(d, q, h, b) = s.q_proj(d, q_at, h, b) * scale;
            s.k_heads(d, k, h, b) = s.k_proj(d, k, h, b);
        }
        s.v_heads(d, k, h, b) = s.v_proj(d, k, h, b);
        return;
    }
    if (spec.cache.any()) {
        // The new tokens' keys and values have Lq rows, as the queries do.
        Func query("query_f32"), key("key_f32"), value("value_f32");
        Expr row = Halide::clamp(q, 0, last_query);
        query(d, q, h, b) = s.widened(in.query(d, row, h, b));
        key(d, q, h, b) = s.widened(in.key(d, row, h, b));
        value(d, q, h, b) = s.widened(in.value(d, row, h, b));
        define_cached_heads(s, in, {query, key, value, query_row}, scale);
        return;
    }
    if (spec.rope.any()) {
        Func query("query_f32"), key("key_f32");
        query(d, q, h, b) = s.widened(in.query(d, Halide::clamp(q, 0, last_query), h, b));
        key(d, k, h, b) = s.widened(in.key(d, Halide::clamp(k, 0, last_key), h, b));
        define_rotated_heads(s, in, {query, key, Func(), query_row}, scale);
    } else {
        s.q_heads(d, q, h, b) = s.widened(in.query(d, query_row, h, b)) * scale;
        Expr key = in.key(d, Halide::clamp(k, 0, last_key), h, b);
        if (spec.resolved_kv_dtype() == DType::i8) {
            s.k_codes(d, k, h, b) = key;
            key = s.k_codes(d, k, h, b);
        }
        s.k_heads(d, k, h, b) = s.widened(key);
    }
    // The inputs a decode step streams through (AttentionStages::kv_prefetch_keys).
    s.kv_buffers = {buffer_name(in.key), buffer_name(in.value)};
    // The whole-row and chunks forms read values only at visible keys: no clamp needed.
    // The online form's last step runs past Lk, with probability 0: clamped there.
    const bool online = s.options.form == AttentionForm::online;
    Expr value_row = online ? Halide::clamp(k, 0, last_key) : Expr(k);
    s.v_heads(d, k, h, b) = s.widened(in.value(d, value_row, h, b));
    // i8 keys and values are integers, as an i8 cache's are: their rows' scales multiply each
    // score and each probability once.
    if (spec.resolved_kv_dtype() == DType::i8) {
        s.k_scale(k, h, b) = in.key_scales(Halide::clamp(k, 0, last_key), h, b);
        s.v_scale(k, h, b) = in.value_scales(value_row, h, b);
    }
}

/**
 * The chunks form for long rows and the whole-row form for calls with Lk <= rows_up_to, in one
 * pipeline: a schedule specializes on the condition, and each call runs one of them. Returns
 * attn_out's value given the chunks form's, `chunks`.
 */
RowResult with_whole_rows(AttentionStages &s, const AttentionInputs &in, const RowResult &chunks) {
    auto rows = std::make_shared<AttentionStages>();
    rows->spec = s.spec;
    rows->q_heads = s.q_heads;
    rows->k_heads = s.k_heads;
    rows->v_heads = s.v_heads;
    if (!s.spec.projections.any()) {
        // V of its own, the same definition, so that a schedule can copy V for one form
        // and not the other: a root copy is made only by the calls that run its form.
        rows->v_heads = Func("v_heads_rows");
        rows->v_heads(s.v_heads.args()) = s.v_heads.value();
    }
    rows->k_scale = s.k_scale;
    rows->v_scale = s.v_scale;
    rows->r_head_dim = s.r_head_dim;
    s.use_rows = in.key_len <= s.options.rows_up_to;
    AlgorithmOptions rows_options = s.options;
    rows_options.form = AttentionForm::whole_rows;
    const RowResult whole = define_softmax(*rows, in, effective_options(rows_options));
    s.rows = rows;
    auto chosen = [&](const Expr &a, const Expr &b) {
        return a.defined() ? Halide::select(s.use_rows, a, b) : Expr();
    };
    return {chosen(whole.attention, chunks.attention), chosen(whole.lse, chunks.lse)};
}

/**
 * attn_out (in query order; with an lse, Tuple(attention, lse), the lse repeated along d), the
 * output projection Y = concat_h(O) Wo^T + bo where the layer has one, the output as stored,
 * and the lse output.
 */
void define_output(AttentionStages &s, const AttentionInputs &in, const RowResult &row) {
    const AttentionSpec &spec = s.spec;
    Var d = s.d, c = s.c, q = s.q, h = s.h, b = s.b;
    Var in_feature = c, out_feature{"o"};
    const Halide::Tuple value =
        spec.lse_output ? Halide::Tuple(row.attention, row.lse) : Halide::Tuple(row.attention);
    if (s.options.reverse_queries) {
        s.attn_reversed(d, q, h, b) = value;
        s.attn_out(d, q, h, b) = s.attn_reversed(d, query_position(q, in, s.options), h, b);
    } else {
        s.attn_out(d, q, h, b) = value;
    }
    auto attention = [&](const Expr &at, const Expr &query, const Expr &head) -> Expr {
        Halide::FuncRef ref = s.attn_out(at, query, head, b);
        return spec.lse_output ? ref[0] : Expr(ref);
    };
    const int value_dim = spec.resolved_value_dim();
    const bool has_out = spec.projections.out;
    if (has_out) {
        s.r_concat = RDom(0, value_dim, 0, spec.heads, "r_concat");
        Expr concat_row = s.r_concat.y * value_dim + s.r_concat.x;
        s.out_proj(c, q, b) = spec.projections.bias ? s.widened(in.bo(c)) : Expr(0.0f);
        s.o_weight(in_feature, out_feature) = s.widened(in.wo(in_feature, out_feature));
        s.out_proj(c, q, b) += attention(s.r_concat.x, q, s.r_concat.y) * s.o_weight(concat_row, c);
        s.result = s.out_proj;
    } else {
        s.result = s.attn_out;
    }
    // With a cache, rows past a sequence's new tokens are zeros (lse -inf), whatever their
    // padding held.
    auto new_row = [&](const Expr &value, float otherwise) {
        return spec.cache.any() ? Halide::select(q < in.query_lengths(b), value, otherwise) : value;
    };
    const Halide::Type stored = storage_type(spec.dtype);
    if (has_out)
        s.output(c, q, b) = narrowed(stored, new_row(s.out_proj(c, q, b), 0.0f));
    else
        s.output(d, q, h, b) = narrowed(stored, new_row(attention(d, q, h), 0.0f));
    if (spec.lse_output) {
        s.lse = in.lse;
        s.lse(q, h, b) =
            new_row(s.attn_out(0, q, h, b)[1], -std::numeric_limits<float>::infinity());
    }
}

} // namespace

Expr AttentionStages::widened(const Expr &stored) const {
    return f32(stored, options.native_f16);
}

AttentionStages build_attention(const AttentionSpec &spec, const AttentionInputs &in, Func output,
                                const AlgorithmOptions &requested) {
    AttentionStages s;
    s.spec = spec;
    s.output = output;
    s.options = effective_options(requested);
    s.r_head_dim = RDom(0, spec.resolved_head_dim(), "r_head_dim");
    // In base 2 (score_units), log2(e) rides on the scale: the scores come out in the units
    // the softmax's exponential takes, at no cost per score.
    const float scale = static_cast<float>(spec.resolved_scale() * score_units(spec, s.options));
    define_heads(s, in, scale);
    RowResult row = define_softmax(s, in, s.options);
    if (s.options.rows_up_to > 0)
        row = with_whole_rows(s, in, row);
    define_output(s, in, row);
    return s;
}

} // namespace attngen
