// A plain double-precision attention, written from the math of DESIGN.md and independent of
// dsl/: the oracle every generated layer is tested against.
#pragma once

#include <functional>
#include <vector>

namespace attngen_test {

/**
 * Rotary position embeddings, as Hugging Face's and GPT-J's code define them: pair i of the
 * first rotary_dim features turns by position * inv_freq(i), inv_freq(i) = theta^(-2i /
 * rotary_dim), divided by `factor` (linear) or by Llama 3.1's rule (llama3).
 */
struct ReferenceRope {
    enum class Layout { none, neox, interleaved } layout = Layout::none;
    double theta = 10000.0;
    int rotary_dim = 0;
    enum class Scaling { none, linear, llama3 } scaling = Scaling::none;
    double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
    int original_max_positions = 8192;
    /** rope = table: cos and sin of pair i at position p at [p * rotary_dim / 2 + i]. */
    std::vector<double> cos_table, sin_table;
};

/** One problem, tensors row-major as the runtime's users hold them, widened to double. */
struct ReferenceProblem {
    int batch = 1, heads = 1, kv_heads = 1, head_dim = 1, model_dim = 0;
    int value_dim = 0; ///< V's and the output's head size Dv; 0 means head_dim
    int query_len = 1, key_len = 1;
    double scale = 1.0;
    bool causal = false, key_padding = false, additive = false;
    int window = 0;
    bool projections = false, out_projection = false, bias = false, cross = false;

    std::vector<double> query, key, value; // (B,H,Lq,D), (B,Hkv,Lk,D), (B,Hkv,Lk,Dv)
    std::vector<double> x, context;        // (B,Lq,M), (B,Lk,M)
    std::vector<double> wq, wk, wv, wo;    // (out, in)
    std::vector<double> bq, bk, bv, bo;    // (out)
    std::vector<int> key_lengths;          // (B)
    std::vector<double> attn_bias;         // (B,H,Lq,Lk)
    /** Attention sinks, (H), none if empty: head h's softmax denominator gains exp(sinks[h]
     * - max), max taken over the row's scores and the sink; NaN and +inf make the rows NaN. */
    std::vector<double> sinks;

    /** A score modification, applied to scale * q.k (plus the additive bias); none if empty. */
    std::function<double(double score, int b, int h, int q, int k)> score_mod;
    /** A custom mask: key k is visible to query q only where it returns true; none if empty. */
    std::function<bool(int b, int h, int q, int k)> visible;
    /** Applied to Q and K after the projections; a query's position is q + Lk - Lq. */
    ReferenceRope rope;
    /** Whether a key of weight 0 (hidden, or a score of -inf) still adds 0 x V, as PyTorch's
     * math path does (a NaN or inf in that V row makes the row NaN), or is skipped. */
    bool zero_weight_values = true;
};

/** `x` (B, heads, L, D) rotated in place, row l at position l + offset. */
void reference_rope(const ReferenceRope &rope, std::vector<double> &x, int batch, int heads,
                    int len, int dim, int offset);

/**
 * The layer's output: (B, H, Lq, Dv), or (B, Lq, M) with an output projection. With `lse`, also
 * each row's log-sum-exp (B, H, Lq): the natural log of its softmax denominator, sum over the
 * visible keys of exp(score) plus exp(sink); -inf for a row with no visible key and no sink.
 */
std::vector<double> reference_attention(const ReferenceProblem &problem,
                                        std::vector<double> *lse = nullptr);

} // namespace attngen_test
