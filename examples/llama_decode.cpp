// A small Llama-style decoder around one generated attention layer: token embeddings, then per
// transformer layer RMSNorm, attention (projections, rotary embeddings, grouped-query heads and
// a paged KV cache, all inside the generated code) and a SwiGLU MLP written plainly, then a final
// RMSNorm and the logits. Random weights from a printed seed. It prefills a batch of prompts of
// different lengths in one call per layer, then decodes tokens greedily, one call per layer and
// step for the whole batch. Every attention call is checked against the double-precision
// reference over each sequence's whole history; the decode rate is printed.
//
// The same description is generated twice, for prefill and for decode shapes (llama_prefill and
// llama_step): one cache layout, two schedules.
#include "llama_prefill.h"
#include "llama_step.h"

#include "reference_attention.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

namespace {

constexpr int vocab = 256, layers = 2, hidden = 512, block_size = 16, decode_steps = 24;
constexpr double tolerance = 1e-5; // relative to max(|want|, 1): f32 arithmetic and f32 cache

std::vector<float> random_values(size_t count, float range, std::mt19937 &rng) {
    std::uniform_real_distribution<float> uniform(-range, range);
    std::vector<float> values(count);
    for (float &value : values)
        value = uniform(rng);
    return values;
}

/** y (rows, out) = x (rows, in) · w^T, w stored (out, in) as nn.Linear stores it. */
std::vector<float> linear(const std::vector<float> &x, const std::vector<float> &w, int in,
                          int out) {
    const size_t rows = x.size() / in;
    std::vector<float> y(rows * out);
    for (size_t r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            float sum = 0.0f;
            for (int i = 0; i < in; i++)
                sum += x[r * in + i] * w[size_t(o) * in + i];
            y[r * out + o] = sum;
        }
    return y;
}

/** RMSNorm of each row of `x` (width `dim`), with a unit gain. */
std::vector<float> rms_norm(const std::vector<float> &x, int dim) {
    std::vector<float> y(x.size());
    for (size_t r = 0; r < x.size() / dim; r++) {
        double squares = 0;
        for (int i = 0; i < dim; i++)
            squares += double(x[r * dim + i]) * x[r * dim + i];
        const float scale = static_cast<float>(1.0 / std::sqrt(squares / dim + 1e-5));
        for (int i = 0; i < dim; i++)
            y[r * dim + i] = x[r * dim + i] * scale;
    }
    return y;
}

struct LayerWeights {
    std::vector<float> wq, wk, wv, wo, gate, up, down;
    // The paged caches of this layer, (blocks, Hkv, block_size, D).
    std::vector<float> k_cache, v_cache;
    // Each sequence's attention inputs so far (the normalized rows), for the reference.
    std::vector<std::vector<float>> history;
};

/** Where a step is: which sequences bring how many tokens at which positions. */
struct Step {
    int rows = 0; ///< Lq: the most new tokens of a sequence
    std::vector<int32_t> cache_lengths, query_lengths;
};

class Decoder {
  public:
    Decoder(unsigned seed, int batch, int capacity) : batch_(batch) {
        const attngen::LayerInfo &info = llama_step_layer().info;
        M_ = info.model_dim;
        H_ = info.heads;
        Hkv_ = info.kv_heads;
        D_ = info.head_dim;
        std::mt19937 rng(seed);
        embedding_ = random_values(size_t(vocab) * M_, 1.0f, rng);
        head_ = random_values(size_t(vocab) * M_, 1.0f / std::sqrt(float(M_)), rng);
        max_blocks_ = (capacity + block_size - 1) / block_size;
        const int blocks = batch * max_blocks_;
        for (int l = 0; l < layers; l++) {
            LayerWeights w;
            const float in_range = 1.0f / std::sqrt(float(M_));
            w.wq = random_values(size_t(H_) * D_ * M_, in_range, rng);
            w.wk = random_values(size_t(Hkv_) * D_ * M_, in_range, rng);
            w.wv = random_values(size_t(Hkv_) * D_ * M_, in_range, rng);
            w.wo = random_values(size_t(M_) * H_ * D_, 1.0f / std::sqrt(float(H_ * D_)), rng);
            w.gate = random_values(size_t(hidden) * M_, in_range, rng);
            w.up = random_values(size_t(hidden) * M_, in_range, rng);
            w.down = random_values(size_t(M_) * hidden, 1.0f / std::sqrt(float(hidden)), rng);
            w.k_cache.assign(size_t(blocks) * Hkv_ * block_size * D_, 0.0f);
            w.v_cache = w.k_cache;
            w.history.resize(batch);
            layers_.push_back(std::move(w));
        }
        // Blocks are handed out as sequences grow, from a shuffled free list: a sequence's
        // blocks are scattered through the cache, as a serving engine's are.
        free_blocks_.resize(blocks);
        std::iota(free_blocks_.begin(), free_blocks_.end(), 0);
        std::shuffle(free_blocks_.begin(), free_blocks_.end(), rng);
        block_table_.assign(size_t(batch) * max_blocks_, -1);
        lengths_.assign(batch, 0);
    }

    /**
     * Runs every layer over the new tokens (`tokens[b]` for sequence b) and returns the next
     * token of each sequence that brought any. Adds the time of the pass (without the reference
     * checks) to `forward_ms`, and the worst error against the reference to `worst`.
     */
    std::vector<int> forward(const std::vector<std::vector<int>> &tokens, double &forward_ms,
                             double &worst) {
        Step step;
        step.cache_lengths = lengths_;
        for (const std::vector<int> &sequence : tokens) {
            step.query_lengths.push_back(static_cast<int32_t>(sequence.size()));
            step.rows = std::max(step.rows, static_cast<int>(sequence.size()));
        }
        for (int b = 0; b < batch_; b++)
            grow(b, lengths_[b] + step.query_lengths[b]);
        const auto start = std::chrono::steady_clock::now();
        double checking_ms = 0;
        // The residual stream (B, rows, M); padding rows stay zero.
        std::vector<float> x(size_t(batch_) * step.rows * M_, 0.0f);
        for (int b = 0; b < batch_; b++)
            for (size_t t = 0; t < tokens[b].size(); t++)
                std::copy_n(&embedding_[size_t(tokens[b][t]) * M_], M_,
                            &x[(size_t(b) * step.rows + t) * M_]);
        for (LayerWeights &w : layers_) {
            std::vector<float> normed = rms_norm(x, M_);
            std::vector<float> attended(x.size());
            const attngen::Status status = attention(w, step, normed, attended);
            if (!status) {
                std::fprintf(stderr, "llama_decode: %s\n", status.message().c_str());
                std::exit(1);
            }
            const auto check_start = std::chrono::steady_clock::now();
            worst = std::max(worst, check(w, step, normed, attended));
            checking_ms += std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - check_start)
                               .count();
            for (size_t i = 0; i < x.size(); i++)
                x[i] += attended[i];
            // SwiGLU: down(silu(gate(x)) * up(x)).
            normed = rms_norm(x, M_);
            std::vector<float> gate = linear(normed, w.gate, M_, hidden);
            const std::vector<float> up = linear(normed, w.up, M_, hidden);
            for (size_t i = 0; i < gate.size(); i++)
                gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
            const std::vector<float> mlp = linear(gate, w.down, hidden, M_);
            for (size_t i = 0; i < x.size(); i++)
                x[i] += mlp[i];
        }
        // The logits of each sequence's last new token, and the greedy choice.
        std::vector<int> next(batch_, -1);
        for (int b = 0; b < batch_; b++) {
            if (tokens[b].empty())
                continue;
            const size_t last = size_t(b) * step.rows + tokens[b].size() - 1;
            const std::vector<float> row(x.begin() + last * M_, x.begin() + (last + 1) * M_);
            const std::vector<float> logits = linear(rms_norm(row, M_), head_, M_, vocab);
            next[b] =
                static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
            lengths_[b] += static_cast<int32_t>(tokens[b].size());
        }
        forward_ms +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count() -
            checking_ms;
        return next;
    }

  private:
    /** Gives sequence b the blocks for positions below `length`. */
    void grow(int b, int length) {
        for (int i = 0; i * block_size < length; i++) {
            int32_t &entry = block_table_[size_t(b) * max_blocks_ + i];
            if (entry < 0) {
                entry = free_blocks_.back();
                free_blocks_.pop_back();
            }
        }
    }

    /** One attention call of layer `w`: prefill shapes with many rows, decode shapes with one. */
    attngen::Status attention(LayerWeights &w, const Step &step, const std::vector<float> &normed,
                              std::vector<float> &out) {
        const int blocks = static_cast<int>(w.k_cache.size() / (size_t(Hkv_) * block_size * D_));
        attngen::Arguments args;
        args.x = attngen::view(normed.data(), {batch_, step.rows, M_});
        args.wq = attngen::view(w.wq.data(), {H_ * D_, M_});
        args.wk = attngen::view(w.wk.data(), {Hkv_ * D_, M_});
        args.wv = attngen::view(w.wv.data(), {Hkv_ * D_, M_});
        args.wo = attngen::view(w.wo.data(), {M_, H_ * D_});
        args.k_cache = attngen::mutable_view(w.k_cache.data(), {blocks, Hkv_, block_size, D_});
        args.v_cache = attngen::mutable_view(w.v_cache.data(), {blocks, Hkv_, block_size, D_});
        args.block_table = attngen::view(block_table_.data(), {batch_, max_blocks_});
        args.cache_lengths = attngen::view(step.cache_lengths.data(), {batch_});
        args.query_lengths = attngen::view(step.query_lengths.data(), {batch_});
        args.out = attngen::mutable_view(out.data(), {batch_, step.rows, M_});
        return step.rows == 1 ? llama_step(args) : llama_prefill(args);
    }

    /**
     * The call's output against the reference: for each sequence, its new rows attending over
     * every attention input it has had (cross-attention over its history puts query t at
     * position cache length + t). Records the new inputs. Returns the worst relative error.
     */
    double check(LayerWeights &w, const Step &step, const std::vector<float> &normed,
                 const std::vector<float> &out) {
        const attngen::LayerInfo &info = llama_step_layer().info;
        double worst = 0;
        for (int b = 0; b < batch_; b++) {
            const int fresh = step.query_lengths[b];
            const float *rows = &normed[size_t(b) * step.rows * M_];
            w.history[b].insert(w.history[b].end(), rows, rows + size_t(fresh) * M_);
            if (fresh == 0)
                continue;
            attngen_test::ReferenceProblem p;
            p.heads = H_;
            p.kv_heads = Hkv_;
            p.head_dim = D_;
            p.model_dim = M_;
            p.query_len = fresh;
            p.key_len = static_cast<int>(w.history[b].size() / M_);
            p.scale = info.scale;
            p.causal = true;
            p.projections = p.out_projection = p.cross = true;
            p.x.assign(rows, rows + size_t(fresh) * M_);
            p.context.assign(w.history[b].begin(), w.history[b].end());
            p.wq.assign(w.wq.begin(), w.wq.end());
            p.wk.assign(w.wk.begin(), w.wk.end());
            p.wv.assign(w.wv.begin(), w.wv.end());
            p.wo.assign(w.wo.begin(), w.wo.end());
            p.rope.layout = attngen_test::ReferenceRope::Layout::neox;
            p.rope.theta = info.rope.theta;
            p.rope.rotary_dim = info.rope.rotary_dim;
            const std::vector<double> want = attngen_test::reference_attention(p);
            double error = 0, largest = 1.0;
            for (size_t i = 0; i < want.size(); i++) {
                error = std::max(error, std::abs(out[size_t(b) * step.rows * M_ + i] - want[i]));
                largest = std::max(largest, std::abs(want[i]));
            }
            worst = std::max(worst, error / largest);
        }
        return worst;
    }

    int batch_, M_ = 0, H_ = 0, Hkv_ = 0, D_ = 0, max_blocks_ = 0;
    std::vector<float> embedding_, head_;
    std::vector<LayerWeights> layers_;
    std::vector<int32_t> free_blocks_, block_table_, lengths_;
};

} // namespace

int main() {
    const unsigned seed = 20261127;
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> token(0, vocab - 1);
    const std::vector<int> prompt_lengths = {5, 19, 11};
    const int batch = static_cast<int>(prompt_lengths.size());
    std::vector<std::vector<int>> sequences;
    for (int length : prompt_lengths) {
        sequences.emplace_back();
        for (int i = 0; i < length; i++)
            sequences.back().push_back(token(rng));
    }
    const int longest = *std::max_element(prompt_lengths.begin(), prompt_lengths.end());
    Decoder decoder(seed, batch, longest + decode_steps);
    const attngen::LayerInfo &info = llama_step_layer().info;
    std::printf("llama-style decoder: %d layers, model_dim %d, %d heads of %d (%d kv heads), "
                "SwiGLU %d, vocab %d, paged cache of %d-token blocks; seed %u\n",
                layers, info.model_dim, info.heads, info.head_dim, info.kv_heads, hidden, vocab,
                block_size, seed);

    double prefill_ms = 0, decode_ms = 0, worst = 0;
    std::vector<int> next = decoder.forward(sequences, prefill_ms, worst);
    std::vector<std::vector<int>> generated(batch);
    for (int step = 0; step < decode_steps; step++) {
        std::vector<std::vector<int>> tokens(batch);
        for (int b = 0; b < batch; b++) {
            generated[b].push_back(next[b]);
            tokens[b] = {next[b]};
        }
        next = decoder.forward(tokens, decode_ms, worst);
    }
    for (int b = 0; b < batch; b++) {
        std::printf("sequence %d: prompt of %d tokens, generated:", b, prompt_lengths[b]);
        for (int t : generated[b])
            std::printf(" %d", t);
        std::printf("\n");
    }
    std::printf("prefill: %.2f ms for %d tokens; decode: %d steps of %d tokens in %.2f ms, %.0f "
                "tokens/s (the forward pass, reference checks excluded)\n",
                prefill_ms, std::accumulate(prompt_lengths.begin(), prompt_lengths.end(), 0),
                decode_steps, batch, decode_ms, decode_steps * batch / (decode_ms / 1000.0));
    std::printf("attention against the double-precision reference, every call: max relative error "
                "%.3g (tolerance %.0e)\n",
                worst, tolerance);
    return worst <= tolerance ? 0 : 1;
}
