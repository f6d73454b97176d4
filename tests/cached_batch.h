// A batch of sequences stepped through a layer with a KV cache, as a serving loop holds it,
// each step checked against the double-precision reference over each sequence's whole history:
// shared by the CPU tests (test_kv_cache.cpp) and the GPU schedule's (test_gpu.cpp).
#pragma once

#include "test_support.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace attngen_test {

/** How many elements of `now` differ in their bytes from `before`, outside those `skip` marks. */
size_t changed_elements(const OutputBuffer &now, const OutputBuffer &before,
                        const std::vector<bool> &skip = {});

/** A paged cache holds this many blocks that no sequence is given: sentinels throughout. */
constexpr int spare_blocks = 3;

/**
 * A batch of sequences that a cache layer steps through, held as a serving loop holds it: the K
 * and V caches (every element first a sentinel: NaN, +inf or random), a paged cache's block table
 * (physical blocks handed out in random order as the sequences grow), the cache lengths, and each
 * sequence's token stream. The streams are drawn up front from the seed, so two batches of one
 * seed see the same tokens however the steps cut them; the reference recomputes every step from
 * the raw tokens of the whole history.
 */
class CachedBatch {
  public:
    /** The host data of one call: the new tokens, the lengths and table, the output. */
    struct Step {
        int query_len = 0;
        std::vector<int32_t> query_lengths, cache_lengths, block_table;
        /// Row t of sequence b is its token cache_length + t; past its query length, junk.
        HostTensor query, key, value, x;
        OutputBuffer out{attngen::DType::f32, 0};
        std::vector<float> lse; ///< (B, H, Lq) with outputs = out, lse
    };

    /**
     * `cache_lengths` tokens already cached per sequence, written as an earlier call would have
     * left them; room for `capacity` positions per sequence (a paged cache rounds it up to
     * whole blocks).
     */
    CachedBatch(const attngen::Layer &layer, const std::vector<int> &cache_lengths, int capacity,
                uint32_t seed);

    /**
     * A step of query_lengths[b] new tokens per sequence in tensors of `query_len` rows (0: the
     * longest); hands out the blocks a paged cache needs for them.
     */
    Step prepare(const std::vector<int> &query_lengths, int query_len = 0);

    /** The call's arguments: the step's data, the weights, rope tables and caches. */
    attngen::Arguments arguments(Step &call);

    /**
     * Runs a step and checks it: each sequence's output rows against the reference, the rows
     * past its query length zero, the cache rows written against the rotated and rounded K and
     * V, every other cache element unchanged. Then advances the cache lengths, and returns each
     * sequence's output rows for its new tokens, token by token.
     */
    std::vector<std::vector<float>> step(const std::vector<int> &query_lengths, int query_len = 0);

    /**
     * The reference for sequence b's next `count` tokens, token by token, over its unrounded K
     * and V (and its lse, (1, H, count), if asked).
     */
    std::vector<double> reference_rows(int b, int count, std::vector<double> *lse = nullptr) const;

    int num_blocks() const { return num_blocks_; }
    int max_blocks() const { return max_blocks_; }

    const attngen::Layer &layer;
    OutputBuffer k_cache, v_cache;
    /** What the block table holds where no block was handed out (blocks past a sequence's). */
    int32_t unused_block_entry = -1;

  private:
    bool paged() const { return info_.cache.kind == attngen::CacheKind::paged; }
    float draw(attngen::DType dtype);
    void hand_out_blocks(int b, int positions);
    /** Rows of K are head_dim wide, of V value_dim: the width of `cache`'s rows. */
    int row_width(const OutputBuffer &cache) const;
    size_t cache_index(int b, int kv_head, int position, int d, int width) const;
    attngen::MutableTensor cache_view(OutputBuffer &cache) const;
    attngen::MutableTensor scales_view(OutputBuffer &cache) const;
    std::vector<float> new_token_rows(const std::vector<std::vector<float>> &stream, int heads,
                                      int dim, const Step &call);
    std::vector<double> kv_features(const std::vector<std::vector<float>> &stream,
                                    const HostTensor &weight, const HostTensor &bias, int b,
                                    int position, int dim) const;
    std::vector<double> raw_key(int b, int position) const;
    std::vector<double> raw_value(int b, int position) const;
    std::vector<double> rounded_rows(std::vector<double> rows, int dim) const;
    void store_rows(OutputBuffer &cache, int b, int position, const std::vector<double> &raw);
    std::vector<double> cached_key(int b, int position) const;
    std::vector<double> cached_value(int b, int position) const;
    std::vector<float> output_rows(const std::vector<float> &out, int query_len, int b, int first,
                                   int count) const;
    std::vector<std::vector<float>> check_output(const Step &call) const;
    void check_caches(const Step &call, const OutputBuffer &k_before,
                      const OutputBuffer &v_before) const;
    std::string describe(const Step &call) const;

    const attngen::LayerInfo &info_;
    const int batch_;
    int capacity_ = 0; ///< positions per sequence
    int block_size_ = 0, max_blocks_ = 0, num_blocks_ = 0;
    std::vector<int32_t> cache_lengths_;
    std::vector<int32_t> block_table_; ///< (batch, max_blocks); -1 where none was handed out
    std::vector<int32_t> free_blocks_; ///< blocks not handed out, in random order
    std::mt19937 rng_;
    Problem weights_;                        ///< the projection weights (a one-token problem)
    ReferenceProblem reference_base_;        ///< the layer's fields, weights and rope
    std::vector<float> rope_cos_, rope_sin_; ///< rope = table: (capacity, rotary_dim / 2)
    /// Each sequence's tokens, (capacity, heads, D) or (capacity, M) by position, in the
    /// layer's dtype: queries, keys and values without projections, x with them.
    std::vector<std::vector<float>> queries_, keys_, values_, inputs_;
};

/**
 * Steps a ragged batch of three sequences through `layer` (prefill chunks, decode steps, a
 * sequence sitting out, a long chunk) and checks every step (CachedBatch::step).
 */
void check_steps_against_reference(const attngen::Layer &layer, uint32_t base_seed);

/** Chunked prefill and token-by-token decode against one prefill of the same tokens. */
void check_chunks_match_one_prefill(const attngen::Layer &layer, uint32_t base_seed);

} // namespace attngen_test
