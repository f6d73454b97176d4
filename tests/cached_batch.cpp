// See cached_batch.h.
#include "cached_batch.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>

namespace attngen_test {

using attngen::DType;

/** How many elements of `now` differ in their bytes from `before`, outside those `skip` marks. */
size_t changed_elements(const OutputBuffer &now, const OutputBuffer &before,
                        const std::vector<bool> &skip) {
    const bool single = now.dtype == DType::f32, quantized = now.dtype == DType::i8;
    const size_t count = single ? now.f32.size() : quantized ? now.bytes.size() : now.half.size();
    size_t changed = 0;
    for (size_t i = 0; i < count; i++) {
        if (!skip.empty() && skip[i])
            continue;
        // An i8 element changes with its byte or its row's scale.
        const bool same = single ? std::memcmp(&now.f32[i], &before.f32[i], sizeof(float)) == 0
                          : quantized
                              ? now.bytes[i] == before.bytes[i] &&
                                    std::memcmp(&now.scales[i / now.row],
                                                &before.scales[i / before.row], sizeof(float)) == 0
                              : now.half[i] == before.half[i];
        changed += same ? 0 : 1;
    }
    return changed;
}

namespace {

/** `value` rounded to the storage of `dtype`, as the float it reads back as. */
float round_to(DType dtype, double value) {
    const float single = static_cast<float>(value);
    switch (dtype) {
    case DType::f16:
        return from_f16(to_f16(single));
    case DType::bf16:
        return from_bf16(to_bf16(single));
    default:
        return single;
    }
}

/** Writes `value`, which `buffer`'s dtype holds exactly, to element `index`. */
void store(OutputBuffer &buffer, size_t index, float value) {
    switch (buffer.dtype) {
    case DType::f32:
        buffer.f32[index] = value;
        break;
    case DType::f16:
        buffer.half[index] = to_f16(value);
        break;
    default:
        buffer.half[index] = to_bf16(value);
    }
}

/**
 * The tolerance of the cache rows a call writes against the reference's rounded rows. An f32
 * cache holds the f32 rotation, within 1e-6 of the double one. A narrower cache may round to the
 * neighbouring value: one step of 2^-10 (f16) or 2^-7 (bf16) of the value's binade, which
 * relative_error's max(|want|, 1) scale keeps under 1e-3 and 8e-3.
 */
double cache_tolerance(DType dtype) {
    switch (dtype) {
    case DType::f16:
        return 1e-3;
    case DType::bf16:
    case DType::i8: // one step of max |x| / 127, |x| <= 1 in these tests
        return 8e-3;
    default:
        return 1e-6;
    }
}

/**
 * The tolerance of a cached layer's output against the reference over unrounded K and V: the
 * layer's, or the cache's rounding (f16 2e-3, bf16 1.6e-2); an i8 cache's quantization (max |x|
 * / 254 per element, which moves the scores by up to scale |q|_1 max|k| / 254) is held to 3e-2
 * here, on values in [-1, 1] (test_kv_cache.cpp tests its worst-case bound).
 */
double output_tolerance(const attngen::LayerInfo &info) {
    if (info.cache.dtype == DType::i8)
        return 3e-2;
    return std::max(tolerance_for(info.dtype), tolerance_for(info.cache.dtype));
}

std::vector<double> widen(const std::vector<float> &values, size_t first, size_t count) {
    return std::vector<double>(values.begin() + static_cast<std::ptrdiff_t>(first),
                               values.begin() + static_cast<std::ptrdiff_t>(first + count));
}

std::vector<double> widen(const std::vector<float> &values) {
    return widen(values, 0, values.size());
}

/** (outer, middle, inner) to (middle, outer, inner): rows by token to rows by head, and back. */
std::vector<double> swap_outer(const std::vector<double> &x, int outer, int middle, int inner) {
    std::vector<double> swapped(x.size());
    for (int o = 0; o < outer; o++)
        for (int m = 0; m < middle; m++)
            for (int i = 0; i < inner; i++)
                swapped[(static_cast<size_t>(m) * outer + o) * inner + i] =
                    x[(static_cast<size_t>(o) * middle + m) * inner + i];
    return swapped;
}

/** A tensor of `dtype` holding `values`, which it represents exactly. */
HostTensor host_tensor(DType dtype, std::vector<int64_t> shape, std::vector<float> values) {
    HostTensor tensor;
    tensor.dtype = dtype;
    tensor.shape = std::move(shape);
    tensor.values = std::move(values);
    if (dtype != DType::f32)
        for (float value : tensor.values)
            tensor.half.push_back(dtype == DType::f16 ? to_f16(value) : to_bf16(value));
    return tensor;
}

std::string list(const std::vector<int32_t> &values) {
    std::ostringstream text;
    text << "[";
    for (size_t i = 0; i < values.size(); i++)
        text << (i ? ", " : "") << values[i];
    text << "]";
    return text.str();
}

} // namespace

CachedBatch::CachedBatch(const attngen::Layer &layer_, const std::vector<int> &cache_lengths,
                         int capacity, uint32_t seed)
    : layer(layer_), k_cache(layer_.info.cache.dtype, 0), v_cache(layer_.info.cache.dtype, 0),
      info_(layer_.info), batch_(static_cast<int>(cache_lengths.size())),
      cache_lengths_(cache_lengths.begin(), cache_lengths.end()), rng_(seed),
      weights_(layer_.info, 1, 1, 1, seed), reference_base_(weights_.reference()) {
    REQUIRE(info_.cache.kind != attngen::CacheKind::none);
    const int H = info_.heads, Hkv = info_.kv_heads, D = info_.head_dim, M = info_.model_dim;
    const int Dv = info_.value_dim;
    capacity_ = capacity;
    if (paged()) {
        block_size_ = info_.cache.block_size;
        max_blocks_ = (capacity + block_size_ - 1) / block_size_;
        capacity_ = max_blocks_ * block_size_;
        num_blocks_ = batch_ * max_blocks_ + spare_blocks;
        block_table_.assign(static_cast<size_t>(batch_) * max_blocks_, -1);
        free_blocks_.resize(static_cast<size_t>(num_blocks_));
        std::iota(free_blocks_.begin(), free_blocks_.end(), 0);
        std::shuffle(free_blocks_.begin(), free_blocks_.end(), rng_);
    }

    const size_t cache_rows = static_cast<size_t>(paged() ? num_blocks_ : batch_) * Hkv *
                              (paged() ? block_size_ : capacity_);
    k_cache = OutputBuffer(info_.cache.dtype, cache_rows * D, static_cast<size_t>(D));
    v_cache = OutputBuffer(info_.cache.dtype, cache_rows * Dv, static_cast<size_t>(Dv));
    // Sentinels: NaN, +inf and random values in turn, as unwritten memory may hold anything. A
    // layer that let one into an output (a hidden key's score, or 0 x V) would show it there.
    // An i8 cache: random bytes, and the sentinels in its rows' scales.
    const bool quantized = info_.cache.dtype == DType::i8;
    auto sentinel = [&](size_t i) {
        return i % 3 == 0   ? std::numeric_limits<float>::quiet_NaN()
               : i % 3 == 1 ? std::numeric_limits<float>::infinity()
                            : draw(quantized ? DType::f32 : info_.cache.dtype);
    };
    for (OutputBuffer *cache : {&k_cache, &v_cache}) {
        if (!quantized) {
            for (size_t i = 0; i < cache_rows * static_cast<size_t>(row_width(*cache)); i++)
                store(*cache, i, sentinel(i));
            continue;
        }
        for (int8_t &byte : cache->bytes)
            byte = static_cast<int8_t>(static_cast<int>(rng_() % 255) - 127);
        for (size_t i = 0; i < cache->scales.size(); i++)
            cache->scales[i] = sentinel(i);
    }

    auto draw_stream = [&](int width) {
        std::vector<float> stream(static_cast<size_t>(capacity_) * width);
        for (float &value : stream)
            value = draw(info_.dtype);
        return stream;
    };
    for (int b = 0; b < batch_; b++) {
        if (info_.projections) {
            inputs_.push_back(draw_stream(M));
        } else {
            queries_.push_back(draw_stream(H * D));
            keys_.push_back(draw_stream(Hkv * D));
            values_.push_back(draw_stream(Hkv * Dv));
        }
    }

    if (info_.rope.table) {
        std::uniform_real_distribution<double> angle(-3.14159, 3.14159);
        for (size_t i = 0; i < static_cast<size_t>(capacity_) * (info_.rope.rotary_dim / 2); i++) {
            const double a = angle(rng_);
            rope_cos_.push_back(static_cast<float>(std::cos(a)));
            rope_sin_.push_back(static_cast<float>(std::sin(a)));
        }
    }
    reference_base_.rope.cos_table = widen(rope_cos_);
    reference_base_.rope.sin_table = widen(rope_sin_);

    // The history already cached, as an earlier call would have written it.
    for (int b = 0; b < batch_; b++) {
        REQUIRE(cache_lengths_[b] <= capacity_);
        hand_out_blocks(b, cache_lengths_[b]);
        for (int p = 0; p < cache_lengths_[b]; p++) {
            store_rows(k_cache, b, p, raw_key(b, p));
            store_rows(v_cache, b, p, raw_value(b, p));
        }
    }
}

float CachedBatch::draw(DType dtype) {
    return round_to(dtype, std::uniform_real_distribution<double>(-1.0, 1.0)(rng_));
}

/** Gives sequence b a block for each of its first `positions` positions that has none. */
void CachedBatch::hand_out_blocks(int b, int positions) {
    if (!paged())
        return;
    for (int block = 0; block * block_size_ < positions; block++) {
        int32_t &entry = block_table_[static_cast<size_t>(b) * max_blocks_ + block];
        if (entry < 0) {
            entry = free_blocks_.back();
            free_blocks_.pop_back();
        }
    }
}

int CachedBatch::row_width(const OutputBuffer &cache) const {
    return &cache == &k_cache ? info_.head_dim : info_.value_dim;
}

/** Where element d of kv head `kv_head` at sequence b's `position` lives in a cache of rows of
 * `width`. */
size_t CachedBatch::cache_index(int b, int kv_head, int position, int d, int width) const {
    const size_t Hkv = info_.kv_heads, D = static_cast<size_t>(width);
    if (!paged())
        return ((b * Hkv + kv_head) * capacity_ + position) * D + d;
    const auto block = static_cast<size_t>(
        block_table_[static_cast<size_t>(b) * max_blocks_ + position / block_size_]);
    return ((block * Hkv + kv_head) * block_size_ + position % block_size_) * D + d;
}

/** Writes sequence b's K or V rows at `position` (Hkv * D, head by head) as the layer does. */
void CachedBatch::store_rows(OutputBuffer &cache, int b, int position,
                             const std::vector<double> &raw) {
    const int width = row_width(cache);
    const size_t D = static_cast<size_t>(width);
    for (int h = 0; h < info_.kv_heads; h++) {
        const size_t at = cache_index(b, h, position, 0, width);
        const auto first = raw.begin() + static_cast<std::ptrdiff_t>(h * D);
        if (cache.dtype == DType::i8) {
            std::vector<int8_t> bytes;
            cache.scales[at / D] = quantize_row(std::vector<double>(first, first + D), bytes);
            std::copy(bytes.begin(), bytes.end(), cache.bytes.begin() + at);
            continue;
        }
        for (size_t d = 0; d < D; d++)
            store(cache, at + d, round_to(cache.dtype, first[d]));
    }
}

attngen::MutableTensor CachedBatch::scales_view(OutputBuffer &cache) const {
    if (paged())
        return attngen::mutable_view(cache.scales.data(),
                                     {num_blocks_, info_.kv_heads, block_size_});
    return attngen::mutable_view(cache.scales.data(), {batch_, info_.kv_heads, capacity_});
}

attngen::MutableTensor CachedBatch::cache_view(OutputBuffer &cache) const {
    const int64_t width = row_width(cache);
    if (paged())
        return attngen::mutable_view(cache.data(), info_.cache.dtype,
                                     {num_blocks_, info_.kv_heads, block_size_, width});
    return attngen::mutable_view(cache.data(), info_.cache.dtype,
                                 {batch_, info_.kv_heads, capacity_, width});
}

CachedBatch::Step CachedBatch::prepare(const std::vector<int> &query_lengths, int query_len) {
    REQUIRE(static_cast<int>(query_lengths.size()) == batch_);
    Step call;
    call.query_len =
        query_len > 0 ? query_len : *std::max_element(query_lengths.begin(), query_lengths.end());
    REQUIRE(call.query_len > 0);
    call.query_lengths.assign(query_lengths.begin(), query_lengths.end());
    call.cache_lengths = cache_lengths_;
    for (int b = 0; b < batch_; b++) {
        REQUIRE(cache_lengths_[b] + query_lengths[b] <= capacity_);
        hand_out_blocks(b, cache_lengths_[b] + query_lengths[b]);
    }
    call.block_table = block_table_;
    std::replace(call.block_table.begin(), call.block_table.end(), -1, unused_block_entry);

    const int64_t B = batch_, Lq = call.query_len, H = info_.heads, Hkv = info_.kv_heads;
    const int64_t D = info_.head_dim, Dv = info_.value_dim, M = info_.model_dim;
    if (info_.projections) {
        call.x =
            host_tensor(info_.dtype, {B, Lq, M}, new_token_rows(inputs_, 1, info_.model_dim, call));
    } else {
        call.query = host_tensor(info_.dtype, {B, H, Lq, D},
                                 new_token_rows(queries_, info_.heads, info_.head_dim, call));
        call.key = host_tensor(info_.dtype, {B, Hkv, Lq, D},
                               new_token_rows(keys_, info_.kv_heads, info_.head_dim, call));
        call.value = host_tensor(info_.dtype, {B, Hkv, Lq, Dv},
                                 new_token_rows(values_, info_.kv_heads, info_.value_dim, call));
    }
    const int64_t out_row = info_.out_projection ? M : H * Dv;
    call.out = OutputBuffer(info_.dtype, static_cast<size_t>(B * Lq * out_row));
    if (info_.lse) // not 0: the layer must write every element
        call.lse.assign(static_cast<size_t>(B) * info_.heads * Lq, 12345.0f);
    return call;
}

/**
 * The (B, heads, Lq, dim) rows of a step's new tokens from each sequence's `stream`; rows past a
 * sequence's query length are random, for the layer to ignore.
 */
std::vector<float> CachedBatch::new_token_rows(const std::vector<std::vector<float>> &stream,
                                               int heads, int dim, const Step &call) {
    std::vector<float> rows;
    for (int b = 0; b < batch_; b++)
        for (int h = 0; h < heads; h++)
            for (int t = 0; t < call.query_len; t++) {
                const size_t token = static_cast<size_t>(cache_lengths_[b] + t);
                for (int d = 0; d < dim; d++)
                    rows.push_back(t < call.query_lengths[b]
                                       ? stream[b][(token * heads + h) * dim + d]
                                       : draw(info_.dtype));
            }
    return rows;
}

attngen::Arguments CachedBatch::arguments(Step &call) {
    attngen::Arguments args;
    args.query = call.query.view();
    args.key = call.key.view();
    args.value = call.value.view();
    args.x = call.x.view();
    args.wq = weights_.wq.view();
    args.wk = weights_.wk.view();
    args.wv = weights_.wv.view();
    args.wo = weights_.wo.view();
    args.bq = weights_.bq.view();
    args.bk = weights_.bk.view();
    args.bv = weights_.bv.view();
    args.bo = weights_.bo.view();
    if (info_.rope.table) {
        const int64_t pairs = info_.rope.rotary_dim / 2;
        args.rope_cos = attngen::view(rope_cos_.data(), {capacity_, pairs});
        args.rope_sin = attngen::view(rope_sin_.data(), {capacity_, pairs});
    }
    args.sinks = weights_.sinks.view();
    args.k_cache = cache_view(k_cache);
    args.v_cache = cache_view(v_cache);
    if (info_.cache.dtype == DType::i8) {
        args.k_scales = scales_view(k_cache);
        args.v_scales = scales_view(v_cache);
    }
    if (paged())
        args.block_table = attngen::view(call.block_table.data(), {batch_, max_blocks_});
    args.cache_lengths = attngen::view(call.cache_lengths.data(), {batch_});
    // query_lengths defaults to Lq for every sequence: give it only where one takes fewer.
    if (std::any_of(call.query_lengths.begin(), call.query_lengths.end(),
                    [&](int32_t length) { return length != call.query_len; }))
        args.query_lengths = attngen::view(call.query_lengths.data(), {batch_});
    const int64_t B = batch_, Lq = call.query_len;
    args.out = info_.out_projection
                   ? attngen::mutable_view(call.out.data(), info_.dtype, {B, Lq, info_.model_dim})
                   : attngen::mutable_view(call.out.data(), info_.dtype,
                                           {B, info_.heads, Lq, info_.value_dim});
    if (info_.lse)
        args.lse = attngen::mutable_view(call.lse.data(), {B, info_.heads, Lq});
    return args;
}

namespace {

/**
 * Runs a step's call on a packed layer (layout = packed): the new tokens end to end with
 * query_offsets in place of query_lengths, then the packed output and lse written back into the
 * step's batched buffers (rows past a sequence's new tokens 0, lse -inf), as a batched layer
 * writes them, for the same checks.
 */
attngen::Status run_packed_step(const attngen::Layer &layer, attngen::Arguments args,
                                CachedBatch::Step &call) {
    const attngen::LayerInfo &info = layer.info;
    const std::vector<int> lengths(call.query_lengths.begin(), call.query_lengths.end());
    const std::vector<int32_t> offsets = offsets_of(lengths);
    const int64_t batch = static_cast<int64_t>(lengths.size()), total = offsets.back();
    std::vector<PackedRows> packed;
    for (attngen::Tensor *tensor : {&args.query, &args.key, &args.value, &args.x})
        if (tensor->given()) {
            packed.push_back(pack_rows(*tensor, lengths));
            *tensor = packed.back().view;
        }
    args.query_lengths = attngen::Tensor();
    args.query_offsets = attngen::view(offsets.data(), {batch + 1});
    const int64_t width = info.out_projection ? info.model_dim : info.value_dim;
    const int64_t heads = info.out_projection ? 1 : info.heads;
    OutputBuffer out(info.dtype, static_cast<size_t>(total * heads * width));
    args.out = info.out_projection
                   ? attngen::mutable_view(out.data(), info.dtype, {total, width})
                   : attngen::mutable_view(out.data(), info.dtype, {total, heads, width});
    std::vector<float> lse(static_cast<size_t>(total * info.heads));
    if (info.lse)
        args.lse = attngen::mutable_view(lse.data(), {total, info.heads});
    const attngen::Status status = attngen::run(layer, args);
    const size_t element = attngen::dtype_size(info.dtype);
    auto *to = static_cast<uint8_t *>(call.out.data());
    const auto *from = static_cast<const uint8_t *>(out.data());
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < call.query_len; t++)
            for (int64_t h = 0; h < heads; h++) {
                const bool fresh = t < lengths[static_cast<size_t>(b)];
                const int64_t row = offsets[static_cast<size_t>(b)] + t;
                const int64_t at = info.out_projection
                                       ? (b * call.query_len + t) * width
                                       : ((b * heads + h) * call.query_len + t) * width;
                if (fresh)
                    std::memcpy(to + at * element, from + (row * heads + h) * width * element,
                                static_cast<size_t>(width) * element);
                else
                    std::memset(to + at * element, 0, static_cast<size_t>(width) * element);
                if (!info.lse)
                    continue;
                for (int64_t q_head = 0; q_head < info.heads && h == 0; q_head++)
                    call.lse[static_cast<size_t>((b * info.heads + q_head) * call.query_len + t)] =
                        fresh ? lse[static_cast<size_t>(row * info.heads + q_head)]
                              : -std::numeric_limits<float>::infinity();
            }
    return status;
}

} // namespace

std::vector<std::vector<float>> CachedBatch::step(const std::vector<int> &query_lengths,
                                                  int query_len) {
    Step call = prepare(query_lengths, query_len);
    INFO("step: " << describe(call));
    const OutputBuffer k_before = k_cache, v_before = v_cache;
    const attngen::Status status = info_.packed ? run_packed_step(layer, arguments(call), call)
                                                : attngen::run(layer, arguments(call));
    INFO(status.message());
    REQUIRE(status.ok());
    std::vector<std::vector<float>> new_rows = check_output(call);
    check_caches(call, k_before, v_before);
    for (int b = 0; b < batch_; b++)
        cache_lengths_[b] += call.query_lengths[b];
    return new_rows;
}

/**
 * The raw K or V features of sequence b's token at `position`, (Hkv * D) head by head: the
 * token's own row, or x·W^T + bias where the layer projects.
 */
std::vector<double> CachedBatch::kv_features(const std::vector<std::vector<float>> &stream,
                                             const HostTensor &weight, const HostTensor &bias,
                                             int b, int position, int dim) const {
    const size_t width = static_cast<size_t>(info_.kv_heads) * dim;
    if (!info_.projections)
        return widen(stream[b], position * width, width);
    const size_t M = info_.model_dim;
    const float *x = &inputs_[b][position * M];
    std::vector<double> features(width);
    for (size_t o = 0; o < width; o++) {
        double sum = bias.values.empty() ? 0.0 : bias.values[o];
        for (size_t i = 0; i < M; i++)
            sum += static_cast<double>(x[i]) * weight.values[o * M + i];
        features[o] = sum;
    }
    return features;
}

/** Sequence b's key at `position`, rotated there, before the cache's rounding. */
std::vector<double> CachedBatch::raw_key(int b, int position) const {
    std::vector<double> key =
        kv_features(keys_, weights_.wk, weights_.bk, b, position, info_.head_dim);
    reference_rope(reference_base_.rope, key, 1, info_.kv_heads, 1, info_.head_dim, position);
    return key;
}

std::vector<double> CachedBatch::raw_value(int b, int position) const {
    return kv_features(values_, weights_.wv, weights_.bv, b, position, info_.value_dim);
}

/** Rows (Hkv * D) as the cache reads them back: rounded to its dtype, or quantized per row. */
std::vector<double> CachedBatch::rounded_rows(std::vector<double> rows, int dim) const {
    const size_t D = static_cast<size_t>(dim);
    if (info_.cache.dtype != DType::i8) {
        for (double &feature : rows)
            feature = round_to(info_.cache.dtype, feature);
        return rows;
    }
    std::vector<float> values(rows.begin(), rows.end()), scales(rows.size() / D);
    std::vector<int8_t> bytes(rows.size());
    round_rows_to_i8(values.data(), values.size(), D, bytes.data(), scales.data());
    for (size_t i = 0; i < rows.size(); i++) // byte times scale exactly, as the reference reads it
        rows[i] = static_cast<double>(bytes[i]) * scales[i / D];
    return rows;
}

/** Sequence b's key at `position` as its cache holds it: rotated there, in the cache dtype. */
std::vector<double> CachedBatch::cached_key(int b, int position) const {
    return rounded_rows(raw_key(b, position), info_.head_dim);
}

/** Sequence b's value at `position` as its cache holds it, in the cache dtype. */
std::vector<double> CachedBatch::cached_value(int b, int position) const {
    return rounded_rows(raw_value(b, position), info_.value_dim);
}

/** Sequence b's rows first..first+count-1 of `out`, token by token: (count, H, D) or (count, M). */
std::vector<float> CachedBatch::output_rows(const std::vector<float> &out, int query_len, int b,
                                            int first, int count) const {
    const size_t Lq = query_len, H = info_.heads, D = info_.value_dim, M = info_.model_dim;
    std::vector<float> rows;
    for (size_t t = first; t < static_cast<size_t>(first + count); t++) {
        if (info_.out_projection) {
            const auto row = out.begin() + static_cast<std::ptrdiff_t>((b * Lq + t) * M);
            rows.insert(rows.end(), row, row + static_cast<std::ptrdiff_t>(M));
            continue;
        }
        for (size_t h = 0; h < H; h++) {
            const auto row = out.begin() + static_cast<std::ptrdiff_t>(((b * H + h) * Lq + t) * D);
            rows.insert(rows.end(), row, row + static_cast<std::ptrdiff_t>(D));
        }
    }
    return rows;
}

/**
 * The reference for sequence b's `count` new tokens, token by token: plain attention over its
 * whole raw history, with query t at position cache_length + t.
 */
std::vector<double> CachedBatch::reference_rows(int b, int count, std::vector<double> *lse) const {
    const int H = info_.heads, Hkv = info_.kv_heads, D = info_.head_dim, Dv = info_.value_dim;
    const size_t first = cache_lengths_[b], total = first + count;
    ReferenceProblem problem = reference_base_;
    problem.batch = 1;
    problem.query_len = count;
    problem.key_len = static_cast<int>(total);
    if (info_.projections) {
        // Self-attention over the history is cross-attention of the new rows to all of it: the
        // reference projects the new queries only, and aligns query t at total - count + t.
        const size_t M = info_.model_dim;
        problem.cross = true;
        problem.x = widen(inputs_[b], first * M, count * M);
        problem.context = widen(inputs_[b], 0, total * M);
    } else {
        const size_t q_width = static_cast<size_t>(H) * D, k_width = static_cast<size_t>(Hkv) * D;
        const size_t v_width = static_cast<size_t>(Hkv) * Dv;
        problem.query =
            swap_outer(widen(queries_[b], first * q_width, count * q_width), count, H, D);
        problem.key = swap_outer(widen(keys_[b], 0, total * k_width), problem.key_len, Hkv, D);
        problem.value = swap_outer(widen(values_[b], 0, total * v_width), problem.key_len, Hkv, Dv);
    }
    const std::vector<double> out = reference_attention(problem, lse);
    return info_.out_projection ? out : swap_outer(out, H, count, Dv);
}

std::vector<std::vector<float>> CachedBatch::check_output(const Step &call) const {
    // K and V read back from a cache narrower than the layer carry its rounding: an f16 cache
    // under an f32 layer is held to f16's tolerance, 2e-3.
    const double tolerance = output_tolerance(info_);
    const std::vector<float> out = call.out.values();
    std::vector<std::vector<float>> new_rows(batch_);
    for (int b = 0; b < batch_; b++) {
        const int count = call.query_lengths[b];
        INFO("sequence " << b << ": " << cache_lengths_[b] << " cached and " << count
                         << " new tokens");
        new_rows[b] = output_rows(out, call.query_len, b, 0, count);
        std::vector<double> want_lse;
        if (count > 0) {
            const double error = relative_error(
                new_rows[b], reference_rows(b, count, info_.lse ? &want_lse : nullptr));
            CHECK(error <= tolerance);
        }
        if (info_.lse) {
            // Rows past the sequence's new tokens saw nothing: -inf.
            std::vector<float> got;
            for (int h = 0; h < info_.heads; h++) {
                const size_t row = (static_cast<size_t>(b) * info_.heads + h) * call.query_len;
                got.insert(got.end(), call.lse.begin() + row,
                           call.lse.begin() + row + call.query_len);
                want_lse.insert(want_lse.begin() + (h + 1) * call.query_len -
                                    (call.query_len - count),
                                call.query_len - count, -std::numeric_limits<double>::infinity());
            }
            const double lse_diff = lse_error(got, want_lse);
            INFO("lse error " << lse_diff);
            CHECK(lse_diff <= lse_tolerance);
        }
        const std::vector<float> padding =
            output_rows(out, call.query_len, b, count, call.query_len - count);
        CHECK(std::count_if(padding.begin(), padding.end(), [](float v) { return v != 0.0f; }) ==
              0);
    }
    return new_rows;
}

void CachedBatch::check_caches(const Step &call, const OutputBuffer &k_before,
                               const OutputBuffer &v_before) const {
    const double tolerance = cache_tolerance(info_.cache.dtype);
    for (const auto &[cache, before] :
         {std::make_pair(&k_cache, &k_before), std::make_pair(&v_cache, &v_before)}) {
        const bool keys = cache == &k_cache;
        const int width = row_width(*cache);
        const std::vector<float> now = cache->values();
        std::vector<bool> written(now.size(), false);
        std::vector<float> got;
        std::vector<double> want;
        for (int b = 0; b < batch_; b++)
            for (int p = cache_lengths_[b]; p < cache_lengths_[b] + call.query_lengths[b]; p++) {
                const std::vector<double> rows = keys ? cached_key(b, p) : cached_value(b, p);
                for (int h = 0; h < info_.kv_heads; h++)
                    for (int d = 0; d < width; d++) {
                        const size_t at = cache_index(b, h, p, d, width);
                        written[at] = true;
                        got.push_back(now[at]);
                        want.push_back(rows[static_cast<size_t>(h) * width + d]);
                    }
            }
        INFO((keys ? "k_cache" : "v_cache"));
        CHECK(relative_error(got, want) <= tolerance);
        // Everything else, sentinels, spare blocks and earlier tokens alike, keeps its bytes.
        CHECK(changed_elements(*cache, *before, written) == 0);
    }
}

std::string CachedBatch::describe(const Step &call) const {
    std::ostringstream text;
    text << "cache lengths " << list(cache_lengths_) << ", query lengths "
         << list(call.query_lengths) << " in " << call.query_len << " rows";
    if (paged())
        text << ", block table " << list(call.block_table);
    return text.str();
}

/**
 * A batch of three sequences with ragged histories (0, 5 and 37 tokens cached) through a first
 * chunk that one sequence sits out, decode steps, odd chunks, rows past every sequence's tokens,
 * and a chunk that takes the third sequence past 300 positions: across many flash chunks,
 * split-KV chunks and cache blocks. CachedBatch::step checks each against the reference.
 */
void check_steps_against_reference(const attngen::Layer &layer, uint32_t base_seed) {
    const uint32_t seed = test_seed(base_seed);
    INFO("layer " << layer.info.name << ", seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    CachedBatch batch(layer, {0, 5, 37}, 320, seed);
    batch.step({13, 0, 7});
    batch.step({1, 1, 1});
    batch.step({1, 1, 1});
    batch.step({9, 24, 5});
    batch.step({2, 1, 0}, 4);
    batch.step({0, 3, 250});
    batch.step({1, 1, 1});
}

/**
 * Feeds the same tokens to two batches of one seed: all in one prefill, and in two ragged
 * chunks followed by one token a step. Each token's output agrees within 1e-5 (f32 sums in
 * another order) and the final caches within 1e-6 (the same rotation and projection).
 */
void check_chunks_match_one_prefill(const attngen::Layer &layer, uint32_t base_seed) {
    const uint32_t seed = test_seed(base_seed);
    INFO("layer " << layer.info.name << ", seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const std::vector<int> lengths = {45, 70};
    CachedBatch whole(layer, {0, 0}, 80, seed);
    const std::vector<std::vector<float>> prefill = whole.step(lengths);

    CachedBatch pieces(layer, {0, 0}, 80, seed);
    const std::vector<std::vector<int>> chunks = {{17, 5}, {3, 30}};
    std::vector<std::vector<float>> outputs(lengths.size());
    std::vector<int> fed(lengths.size(), 0);
    for (size_t step = 0; fed != lengths; step++) {
        std::vector<int> query_lengths;
        for (size_t b = 0; b < lengths.size(); b++)
            query_lengths.push_back(
                std::min(step < chunks.size() ? chunks[step][b] : 1, lengths[b] - fed[b]));
        const std::vector<std::vector<float>> rows = pieces.step(query_lengths);
        for (size_t b = 0; b < lengths.size(); b++) {
            outputs[b].insert(outputs[b].end(), rows[b].begin(), rows[b].end());
            fed[b] += query_lengths[b];
        }
    }
    for (size_t b = 0; b < lengths.size(); b++) {
        INFO("sequence " << b);
        CHECK(relative_error(outputs[b], widen(prefill[b])) <= 1e-5);
    }
    // The caches' NaN and inf sentinels, where both runs left them, compare equal.
    auto cache_error = [](const OutputBuffer &got, const OutputBuffer &want) {
        std::vector<float> g = got.values(), w = want.values();
        for (size_t i = 0; i < g.size() && i < w.size(); i++)
            if (!std::isfinite(w[i]) && (std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i]))
                g[i] = w[i] = 0.0f;
        return relative_error(g, widen(w));
    };
    CHECK(cache_error(pieces.k_cache, whole.k_cache) <= 1e-6);
    CHECK(cache_error(pieces.v_cache, whole.v_cache) <= 1e-6);
}

} // namespace attngen_test
