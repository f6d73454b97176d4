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

/** The inverse frequency of rotary pair i, from the definitions. */
double inverse_frequency(const ReferenceRope &rope, int i) {
    const double pi = std::acos(-1.0);
    const double base = 1.0 / std::pow(rope.theta, 2.0 * i / rope.rotary_dim);
    if (rope.scaling == ReferenceRope::Scaling::linear)
        return base / rope.factor;
    if (rope.scaling != ReferenceRope::Scaling::llama3)
        return base;
    // Llama 3.1 (Hugging Face's _compute_llama3_parameters): wavelengths above
    // original / low_freq_factor are scaled down, those below original / high_freq_factor
    // kept, and those between interpolated.
    const double wavelength = 2 * pi / base;
    const double low_wavelength = rope.original_max_positions / rope.low_freq_factor;
    const double high_wavelength = rope.original_max_positions / rope.high_freq_factor;
    if (wavelength < high_wavelength)
        return base;
    if (wavelength > low_wavelength)
        return base / rope.factor;
    const double smooth = (rope.original_max_positions / wavelength - rope.low_freq_factor) /
                          (rope.high_freq_factor - rope.low_freq_factor);
    return (1 - smooth) * base / rope.factor + smooth * base;
}

} // namespace

void reference_rope(const ReferenceRope &rope, std::vector<double> &x, int batch, int heads,
                    int len, int dim, int offset) {
    if (rope.layout == ReferenceRope::Layout::none)
        return;
    const int half = rope.rotary_dim / 2;
    for (int b = 0; b < batch; b++)
        for (int h = 0; h < heads; h++)
            for (int l = 0; l < len; l++) {
                double *row = &x[((static_cast<size_t>(b) * heads + h) * len + l) * dim];
                const int position = l + offset;
                for (int i = 0; i < half; i++) {
                    const double angle = position * inverse_frequency(rope, i);
                    const bool table = !rope.cos_table.empty();
                    const size_t at = static_cast<size_t>(position) * half + i;
                    const double cos = table ? rope.cos_table.at(at) : std::cos(angle);
                    const double sin = table ? rope.sin_table.at(at) : std::sin(angle);
                    // The pair (x1, x2) turns to (x1 cos - x2 sin, x2 cos + x1 sin).
                    const bool neox = rope.layout == ReferenceRope::Layout::neox;
                    double &x1 = row[neox ? i : 2 * i];
                    double &x2 = row[neox ? i + half : 2 * i + 1];
                    const double a = x1, c = x2;
                    x1 = a * cos - c * sin;
                    x2 = c * cos + a * sin;
                }
            }
}

std::vector<double> reference_attention(const ReferenceProblem &p, std::vector<double> *lse) {
    const int B = p.batch, H = p.heads, Hkv = p.kv_heads, D = p.head_dim;
    const int Dv = p.value_dim > 0 ? p.value_dim : D; // V's and the output's head size
    const int Lq = p.query_len, Lk = p.key_len, M = p.model_dim;

    std::vector<double> Q = p.query, K = p.key, V = p.value;
    if (p.projections) {
        const std::vector<double> &kv_in = p.cross ? p.context : p.x;
        Q = split_heads(linear(p.x, B * Lq, M, p.wq, p.bq, H * D), B, Lq, H, D);
        K = split_heads(linear(kv_in, B * Lk, M, p.wk, p.bk, Hkv * D), B, Lk, Hkv, D);
        V = split_heads(linear(kv_in, B * Lk, M, p.wv, p.bv, Hkv * Dv), B, Lk, Hkv, Dv);
    }
    reference_rope(p.rope, Q, B, H, Lq, D, Lk - Lq);
    reference_rope(p.rope, K, B, Hkv, Lk, D, 0);

    std::vector<double> O(static_cast<size_t>(B) * H * Lq * Dv, 0.0);
    std::vector<double> weights(Lk);
    if (lse != nullptr)
        lse->assign(static_cast<size_t>(B) * H * Lq, -std::numeric_limits<double>::infinity());
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / (H / Hkv); // the kv head this query head shares
            for (int i = 0; i < Lq; i++) {
                const int aligned = i + Lk - Lq; // the key position of query i
                double row_max = -std::numeric_limits<double>::infinity();
                bool any_nan = false;
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
                    any_nan = any_nan || std::isnan(score);
                }
                // A sink joins the row like a key of score sinks[h] and no value.
                const double sink =
                    p.sinks.empty() ? -std::numeric_limits<double>::infinity() : p.sinks[h];
                row_max = std::max(row_max, sink);
                any_nan = any_nan || std::isnan(sink); // a NaN sink makes the row NaN below
                // Every key masked (or of score -inf): every weight is 0 and the row is zero,
                // or 0 x V. A NaN score, which std::max passes over, makes the row NaN below.
                if (row_max == -std::numeric_limits<double>::infinity() && !any_nan) {
                    for (int j = 0; j < Lk && p.zero_weight_values; j++)
                        for (int d = 0; d < Dv; d++)
                            O[((static_cast<size_t>(b) * H + h) * Lq + i) * Dv + d] +=
                                0.0 * V[((static_cast<size_t>(b) * Hkv + g) * Lk + j) * Dv + d];
                    continue;
                }
                double total = std::exp(sink - row_max);
                for (int j = 0; j < Lk; j++) {
                    weights[j] = std::exp(weights[j] - row_max);
                    total += weights[j];
                }
                // log(sum_j exp(score_j) + exp(sink)), taken relative to the row's max.
                if (lse != nullptr)
                    (*lse)[(static_cast<size_t>(b) * H + h) * Lq + i] = row_max + std::log(total);
                for (int d = 0; d < Dv; d++) {
                    double sum = 0.0;
                    for (int j = 0; j < Lk; j++)
                        if (p.zero_weight_values || weights[j] != 0.0)
                            sum += weights[j] *
                                   V[((static_cast<size_t>(b) * Hkv + g) * Lk + j) * Dv + d];
                    O[((static_cast<size_t>(b) * H + h) * Lq + i) * Dv + d] = sum / total;
                }
            }
        }
    if (!p.out_projection)
        return O;

    // Concatenate heads: (B, H, Lq, Dv) -> (B, Lq, H*Dv), then Y = concat Wo^T + bo.
    std::vector<double> concat(O.size());
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Lq; i++)
                for (int d = 0; d < Dv; d++)
                    concat[((static_cast<size_t>(b) * Lq + i) * H + h) * Dv + d] =
                        O[((static_cast<size_t>(b) * H + h) * Lq + i) * Dv + d];
    return linear(concat, B * Lq, H * Dv, p.wo, p.bo, M);
}

} // namespace attngen_test
