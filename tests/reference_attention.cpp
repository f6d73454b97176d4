// The reference: loops that read like the formulas, in double precision.
#include "reference_attention.h"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace attngen_test {

namespace {

/** y[row][o] = sum_i x[row][i] * w[o][i] + b[o], for rows x of width `in`. */
std::vector<double> linear(const std::vector<double> &x, int rows, int in,
                           const std::vector<double> &w, const std::vector<double> &b, int out) {
    std::vector<double> y(static_cast<size_t>(rows) * out);
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            double sum = b.empty() ? 0.0 : b[o];
            for (int i = 0; i < in; i++)
                sum += x[static_cast<size_t>(r) * in + i] * w[static_cast<size_t>(o) * in + i];
            y[static_cast<size_t>(r) * out + o] = sum;
        }
    return y;
}

/** (B, L, heads*D) -> (B, heads, L, D). */
std::vector<double> split_heads(const std::vector<double> &y, int batch, int len, int heads,
                                int dim) {
    std::vector<double> out(y.size());
    for (int b = 0; b < batch; b++)
        for (int l = 0; l < len; l++)
            for (int h = 0; h < heads; h++)
                for (int d = 0; d < dim; d++)
                    out[((static_cast<size_t>(b) * heads + h) * len + l) * dim + d] =
                        y[((static_cast<size_t>(b) * len + l) * heads + h) * dim + d];
    return out;
}

} // namespace

std::vector<double> reference_attention(const ReferenceProblem &p) {
    const int B = p.batch, H = p.heads, Hkv = p.kv_heads, D = p.head_dim;
    const int Lq = p.query_len, Lk = p.key_len, M = p.model_dim;

    std::vector<double> Q = p.query, K = p.key, V = p.value;
    if (p.projections) {
        const std::vector<double> &kv_in = p.cross ? p.context : p.x;
        Q = split_heads(linear(p.x, B * Lq, M, p.wq, p.bq, H * D), B, Lq, H, D);
        K = split_heads(linear(kv_in, B * Lk, M, p.wk, p.bk, Hkv * D), B, Lk, Hkv, D);
        V = split_heads(linear(kv_in, B * Lk, M, p.wv, p.bv, Hkv * D), B, Lk, Hkv, D);
    }

    std::vector<double> O(static_cast<size_t>(B) * H * Lq * D, 0.0);
    std::vector<double> weights(Lk);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / (H / Hkv); // the kv head this query head shares
            for (int i = 0; i < Lq; i++) {
                const int aligned = i + Lk - Lq; // the key position of query i
                double row_max = -std::numeric_limits<double>::infinity();
                for (int j = 0; j < Lk; j++) {
                    bool visible = true;
                    if (p.causal && j > aligned)
                        visible = false;
                    if (p.window > 0 && std::abs(j - aligned) >= p.window)
                        visible = false;
                    if (p.key_padding && j >= p.key_lengths[b])
                        visible = false;
                    if (p.visible && !p.visible(b, h, i, j))
                        visible = false;
                    // -inf in the additive bias masks, whatever a score_mod would make of it.
                    if (p.additive &&
                        p.attn_bias[((static_cast<size_t>(b) * H + h) * Lq + i) * Lk + j] ==
                            -std::numeric_limits<double>::infinity())
                        visible = false;
                    double score = -std::numeric_limits<double>::infinity();
                    if (visible) {
                        double dot = 0.0;
                        for (int d = 0; d < D; d++)
                            dot += Q[((static_cast<size_t>(b) * H + h) * Lq + i) * D + d] *
                                   K[((static_cast<size_t>(b) * Hkv + g) * Lk + j) * D + d];
                        score = p.scale * dot;
                        if (p.additive)
                            score +=
                                p.attn_bias[((static_cast<size_t>(b) * H + h) * Lq + i) * Lk + j];
                        if (p.score_mod)
                            score = p.score_mod(score, b, h, i, j);
                    }
                    weights[j] = score;
                    row_max = std::max(row_max, score);
                }
                if (row_max == -std::numeric_limits<double>::infinity())
                    continue; // every key masked: the row stays zero
                double total = 0.0;
                for (int j = 0; j < Lk; j++) {
                    weights[j] = std::exp(weights[j] - row_max);
                    total += weights[j];
                }
                for (int d = 0; d < D; d++) {
                    double sum = 0.0;
                    for (int j = 0; j < Lk; j++)
                        sum +=
                            weights[j] * V[((static_cast<size_t>(b) * Hkv + g) * Lk + j) * D + d];
                    O[((static_cast<size_t>(b) * H + h) * Lq + i) * D + d] = sum / total;
                }
            }
        }
    if (!p.out_projection)
        return O;

    // Concatenate heads: (B, H, Lq, D) -> (B, Lq, H*D), then Y = concat Wo^T + bo.
    std::vector<double> concat(O.size());
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Lq; i++)
                for (int d = 0; d < D; d++)
                    concat[((static_cast<size_t>(b) * Lq + i) * H + h) * D + d] =
                        O[((static_cast<size_t>(b) * H + h) * Lq + i) * D + d];
    return linear(concat, B * Lq, H * D, p.wo, p.bo, M);
}

} // namespace attngen_test
