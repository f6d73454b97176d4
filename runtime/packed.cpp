// Packed (variable-length) batches, layout = packed: the sequences of a call lie end to end in
// its sequence tensors, and query_offsets and key_offsets say where each begins. The generated
// pipeline is the batched one; the runtime checks the offsets and the whole tensors, cuts each
// sequence's tokens out as views of batch 1 (no copies but the lse's rows), checks every
// sequence's views as a batched call's, and only then runs the pipeline once per sequence. No
// block of work crosses two sequences, and a sequence costs what a batched call of its own
// lengths costs: O(sum of Lq * Lk) over the sequences, not O(Tq * Tk).
#include "attngen/runtime.h"
#include "internal.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace attngen::internal {

namespace {

/** Where each sequence's rows lie: [at[b], at[b + 1]). */
struct Offsets {
    std::vector<int64_t> at;
    int64_t sequences() const { return static_cast<int64_t>(at.size()) - 1; }
    int64_t first(int64_t b) const { return at[static_cast<size_t>(b)]; }
    int64_t length(int64_t b) const { return at[static_cast<size_t>(b) + 1] - first(b); }
};

/**
 * Reads offsets (B + 1) int32 that must start at 0, never decrease and end at `rows`, the rows
 * of `tensor`, into `offsets`.
 */
Status read_offsets(const LayerInfo &info, const char *name, const Tensor &given, int64_t rows,
                    const char *tensor, Offsets &offsets, const Offsets *queries = nullptr) {
    if (Status status = check_whole(name, given, given.data, DType::i32,
                                    {{"batch + 1 offsets", -1}}, info, false);
        !status)
        return status;
    if (queries != nullptr && given.shape[0] != static_cast<int64_t>(queries->at.size()))
        return Status::error("attngen: " + quoted(name) + " has " + std::to_string(given.shape[0]) +
                             " offsets but `query_offsets` has " +
                             std::to_string(queries->at.size()));
    if (given.shape[0] < 2)
        return Status::error("attngen: " + quoted(name) +
                             " has 1 offset; a packed call needs B + 1 of them, B >= 1");
    offsets.at.resize(static_cast<size_t>(given.shape[0]));
    for (int64_t i = 0; i < given.shape[0]; i++) {
        const int64_t value = int_element(given, i);
        const std::string at = quoted(std::string(name) + "[" + std::to_string(i) + "]");
        if (i == 0 && value != 0)
            return Status::error("attngen: " + at + " is " + std::to_string(value) +
                                 " but must be 0: the first sequence starts at row 0");
        if (i > 0 && value < offsets.at[static_cast<size_t>(i) - 1])
            return Status::error("attngen: " + at + " is " + std::to_string(value) +
                                 " but the offset before it is " +
                                 std::to_string(offsets.at[static_cast<size_t>(i) - 1]) +
                                 ": offsets must not decrease");
        if (value > rows)
            return Status::error("attngen: " + at + " is " + std::to_string(value) + " but " +
                                 quoted(tensor) + " has " + std::to_string(rows) +
                                 " rows: an offset past the tensor");
        offsets.at[static_cast<size_t>(i)] = value;
    }
    if (offsets.at.back() != rows)
        return Status::error(
            "attngen: " +
            quoted(std::string(name) + "[" + std::to_string(given.shape[0] - 1) + "]") + " is " +
            std::to_string(offsets.at.back()) + " but " + quoted(tensor) + " has " +
            std::to_string(rows) + " rows: the last offset must be the tensor's rows");
    return Status();
}

/** The whole sequence tensors of a packed call, as the layer takes them. */
struct PackedShapes {
    const char *queries;        ///< the tensor whose rows are the queries: query or x
    const char *keys = nullptr; ///< the tensor whose rows are the keys, when not the queries'
    const Layout *query_tensor; ///< its layout
    const Layout *key_tensor;   ///< null when the keys are the queries' rows or a cache's
    bool takes_key_offsets;     ///< whether key_offsets may be given
};

PackedShapes packed_shapes(const LayerInfo &info, const Arguments &args) {
    const bool cached = info.cache.kind != CacheKind::none;
    if (info.projections) {
        const bool cross = info.cross_attention;
        return {"x", cross ? "context" : nullptr, &args.x, cross ? &args.context : nullptr, cross};
    }
    return {"query", cached ? nullptr : "key", &args.query, cached ? nullptr : &args.key, !cached};
}

/** A sequence tensor of a packed call, whole. */
struct Whole {
    const char *name;
    const Layout *layout;
    const void *data;
    bool wanted; ///< the layer takes it
    DType dtype;
    std::vector<WholeDim> dims;
    bool is_output;
};

/** The sequence tensors, indexed: key [1], value [2], out [5], lse [6]. */
std::vector<Whole> sequence_tensors(const LayerInfo &info, const Arguments &args) {
    const int64_t H = info.heads, Hkv = info.kv_heads, D = info.head_dim, Dv = info.value_dim;
    const int64_t M = info.model_dim;
    const DType t = info.dtype;
    const char *dv = Dv != D ? "value_dim" : "head_dim";
    const bool proj = info.projections;
    auto whole = [](const char *name, const auto &tensor, bool wanted, DType dtype,
                    std::vector<WholeDim> dims, bool is_output) {
        return Whole{name, &tensor, tensor.data, wanted, dtype, std::move(dims), is_output};
    };
    const WholeDim tokens{"tokens", -1};
    return {
        whole("query", args.query, !proj, t, {tokens, {"heads", H}, {"head_dim", D}}, false),
        whole("key", args.key, !proj, info.kv_dtype, {tokens, {"kv_heads", Hkv}, {"head_dim", D}},
              false),
        whole("value", args.value, !proj, info.kv_dtype, {tokens, {"kv_heads", Hkv}, {dv, Dv}},
              false),
        whole("x", args.x, proj, t, {tokens, {"model_dim", M}}, false),
        whole("context", args.context, proj && info.cross_attention, t, {tokens, {"model_dim", M}},
              false),
        whole("out", args.out, true, t,
              info.out_projection ? std::vector<WholeDim>{tokens, {"model_dim", M}}
                                  : std::vector<WholeDim>{tokens, {"heads", H}, {dv, Dv}},
              true),
        whole("lse", args.lse, info.lse, DType::f32, {tokens, {"heads", H}}, true),
    };
}

/** Checks every sequence tensor of the call whole: shapes, dtypes, strides, their row counts. */
Status check_sequence_tensors(const LayerInfo &info, const Arguments &args) {
    const bool proj = info.projections, cached = info.cache.kind != CacheKind::none;
    const std::vector<Whole> wholes = sequence_tensors(info, args);
    for (const Whole &whole : wholes) {
        const bool given = whole.layout->rank != 0 || whole.data != nullptr;
        if (!whole.wanted && given)
            return Status::error("attngen: " + quoted(whole.name) + " was given but layer '" +
                                 info.name + "' does not take it");
        if (!whole.wanted)
            continue;
        if (!given)
            return Status::error("attngen: layer '" + std::string(info.name) + "' needs " +
                                 quoted(whole.name) + " but it was not given");
        if (Status status = check_whole(whole.name, *whole.layout, whole.data, whole.dtype,
                                        whole.dims, info, whole.is_output);
            !status)
            return status;
    }
    // Tensors whose rows are the same tokens: the queries' (out, lse, a cache's new keys and
    // values) or the keys'.
    const char *queries = proj ? "x" : "query";
    const Layout &query_rows = proj ? args.x : args.query;
    const std::pair<const Whole *, const char *> same_rows[] = {
        {&wholes[5], queries},
        {&wholes[6], queries},
        {&wholes[1], cached ? queries : nullptr},
        {&wholes[2], cached ? queries : "key"},
    };
    for (const auto &[whole, against] : same_rows) {
        if (!whole->wanted || against == nullptr)
            continue;
        const Layout &rows = std::strcmp(against, "key") == 0 ? args.key : query_rows;
        if (whole->layout->shape[0] != rows.shape[0])
            return Status::error("attngen: " + quoted(whole->name) + " has " +
                                 std::to_string(whole->layout->shape[0]) + " tokens but " +
                                 quoted(against) + " has " + std::to_string(rows.shape[0]));
    }
    // Written rows must not share memory with what the call reads or with each other.
    for (const Whole &written : wholes) {
        if (!written.wanted || !written.is_output)
            continue;
        const Span span = span_of(*written.layout, written.data);
        for (const Whole &read : wholes)
            if (read.wanted && read.layout != written.layout &&
                overlapping(span, span_of(*read.layout, read.data)))
                return Status::error("attngen: " + quoted(written.name) + " overlaps " +
                                     quoted(read.name) +
                                     "; the output must not share memory with " +
                                     (read.is_output ? "another output" : "an input"));
    }
    return Status();
}

/** Every tensor a packed call takes lives in host memory: the views are cut by address. */
Status check_host(const Arguments &args) {
    const std::pair<const char *, bool> tensors[] = {
        {"query", args.query.on_device},
        {"key", args.key.on_device},
        {"value", args.value.on_device},
        {"x", args.x.on_device},
        {"context", args.context.on_device},
        {"out", args.out.on_device},
        {"lse", args.lse.on_device},
        {"query_offsets", args.query_offsets.on_device},
        {"key_offsets", args.key_offsets.on_device},
        {"k_cache", args.k_cache.on_device},
        {"v_cache", args.v_cache.on_device},
        {"k_scales", args.k_scales.on_device},
        {"v_scales", args.v_scales.on_device},
        {"block_table", args.block_table.on_device},
        {"cache_lengths", args.cache_lengths.on_device},
    };
    for (const auto &[name, on_device] : tensors)
        if (on_device)
            return Status::error("attngen: " + quoted(name) +
                                 " is device memory, but a packed layer cuts its sequences out "
                                 "of host tensors");
    return Status();
}

/** Rows [first, first + count) of a packed (T, ...) tensor as a batch of one. */
template <typename View> View rows_of(const View &whole, int64_t first, int64_t count) {
    View view = whole;
    const auto *base = static_cast<const uint8_t *>(whole.data);
    view.data = const_cast<uint8_t *>(base) + first * whole.strides[0] * dtype_size(whole.dtype);
    if (whole.rank == 2) { // (T, width) -> (1, count, width)
        view.rank = 3;
        view.shape[0] = 1, view.shape[1] = count, view.shape[2] = whole.shape[1];
        view.strides[0] = 0, view.strides[1] = whole.strides[0], view.strides[2] = whole.strides[1];
        return view;
    }
    // (T, heads, width) -> (1, heads, count, width)
    view.rank = 4;
    view.shape[0] = 1, view.shape[1] = whole.shape[1], view.shape[2] = count;
    view.shape[3] = whole.shape[2];
    view.strides[0] = 0, view.strides[1] = whole.strides[1], view.strides[2] = whole.strides[0];
    view.strides[3] = whole.strides[2];
    return view;
}

/** Batch entry b of a (B, ...) tensor as a batch of one. */
template <typename View> View batch_entry(const View &whole, int64_t b) {
    View view = whole;
    const auto *base = static_cast<const uint8_t *>(whole.data);
    view.data = const_cast<uint8_t *>(base) + b * whole.strides[0] * dtype_size(whole.dtype);
    view.shape[0] = 1;
    return view;
}

/** The first `rows` rows of a (P, ...) tensor that has that many; else the tensor as given,
 * which the per-sequence check then refuses. */
Tensor first_rows(const Tensor &whole, int64_t rows) {
    Tensor view = whole;
    if (whole.rank >= 1 && whole.shape[0] >= rows)
        view.shape[0] = rows;
    return view;
}

/** One sequence's call: its views, its sizes, and its lse rows when the layer writes them. */
struct SequenceCall {
    int64_t sequence = 0, first_query = 0, queries = 0;
    Arguments args;
    CallShape shape;
    std::vector<float> lse;
    bool attends = true; ///< false: no key to attend (a keyless sequence), written directly
};

/** The cache tensors of a packed cached call, checked whole before they are cut per sequence. */
Status check_cache_tensors(const LayerInfo &info, const Arguments &args, int64_t batch) {
    const bool paged = info.cache.kind == CacheKind::paged;
    const DType cached = info.cache.dtype;
    const int64_t Hkv = info.kv_heads;
    const int64_t first = paged ? -1 : batch;
    const char *outer = paged ? "blocks" : "batch";
    const std::pair<const char *, const MutableTensor *> caches[] = {{"k_cache", &args.k_cache},
                                                                     {"v_cache", &args.v_cache}};
    for (const auto &[name, cache] : caches) {
        const int64_t row = name[0] == 'k' ? info.head_dim : info.value_dim;
        const int64_t slots = paged ? info.cache.block_size : -1;
        if (Status status = check_whole(name, *cache, cache->data, cached,
                                        {{outer, first},
                                         {"kv_heads", Hkv},
                                         {"positions", slots},
                                         {name[0] == 'k' ? "head_dim" : "value_dim", row}},
                                        info, true);
            !status)
            return status;
    }
    if (cached == DType::i8)
        for (const auto &[name, scales] : {std::make_pair("k_scales", &args.k_scales),
                                           std::make_pair("v_scales", &args.v_scales)})
            if (Status status = check_whole(name, *scales, scales->data, DType::f32,
                                            {{outer, first},
                                             {"kv_heads", Hkv},
                                             {"positions", paged ? info.cache.block_size : -1}},
                                            info, true);
                !status)
                return status;
    if (paged)
        if (Status status =
                check_whole("block_table", args.block_table, args.block_table.data, DType::i32,
                            {{"batch", batch}, {"max_blocks", -1}}, info, false);
            !status)
            return status;
    return check_whole("cache_lengths", args.cache_lengths, args.cache_lengths.data, DType::i32,
                       {{"batch", batch}}, info, false);
}

/**
 * The across-batch checks of a cached call (internal::check_cache): each sequence's new tokens
 * from the offsets, the caches whole.
 */
Status check_cache_batch(const LayerInfo &info, const Arguments &args, const Offsets &queries) {
    if (args.query_lengths.given())
        return Status::error("attngen: `query_lengths` was given but layer '" +
                             std::string(info.name) +
                             "' is packed: query_offsets give each sequence's new tokens");
    const int64_t batch = queries.sequences();
    if (Status status = check_cache_tensors(info, args, batch); !status)
        return status;
    std::vector<int32_t> lengths(static_cast<size_t>(batch));
    int64_t longest = 0;
    for (int64_t b = 0; b < batch; b++) {
        lengths[static_cast<size_t>(b)] = static_cast<int32_t>(queries.length(b));
        longest = std::max(longest, queries.length(b));
    }
    Arguments batched = args;
    batched.query_lengths = view(lengths.data(), {batch});
    CallShape shape;
    shape.batch = batch;
    shape.query_len = longest;
    return check_cache(info, batched, shape);
}

/** Sequence b's arguments: the whole call's with its rows, its cache entry and lse rows. */
SequenceCall sequence_call(const LayerInfo &info, const Arguments &args, const Offsets &queries,
                           const Offsets &keys, int64_t b) {
    SequenceCall call;
    call.sequence = b;
    call.first_query = queries.first(b);
    call.queries = queries.length(b);
    Arguments &a = call.args;
    a = args;
    a.query_offsets = Tensor();
    a.key_offsets = Tensor();
    const int64_t q0 = queries.first(b), lq = queries.length(b);
    const bool cached = info.cache.kind != CacheKind::none;
    // The keys: their own rows, the queries' (self-attention with projections, a cache's new
    // tokens), and with a cache what it holds besides.
    const int64_t k0 = cached ? q0 : keys.first(b), lk = cached ? lq : keys.length(b);
    call.attends = cached || lk > 0;
    for (Tensor *tensor : {&a.query, &a.x})
        if (tensor->given())
            *tensor = rows_of(*tensor, q0, lq);
    for (Tensor *tensor : {&a.key, &a.value, &a.context})
        if (tensor->given())
            *tensor = rows_of(*tensor, k0, lk);
    a.out = rows_of(args.out, q0, lq);
    if (info.lse) {
        call.lse.assign(static_cast<size_t>(info.heads * lq), 0.0f);
        a.lse = mutable_view(call.lse.data(), {1, info.heads, lq});
    }
    if (info.rope.table && !cached) { // a row per key position of this sequence
        a.rope_cos = first_rows(args.rope_cos, lk);
        a.rope_sin = first_rows(args.rope_sin, lk);
    }
    if (cached) {
        if (info.cache.kind == CacheKind::contiguous) {
            // Only what check_cache_tensors checked whole; anything else is refused by the
            // sequence's own check, uncut.
            a.k_cache = batch_entry(args.k_cache, b);
            a.v_cache = batch_entry(args.v_cache, b);
            if (info.cache.dtype == DType::i8) {
                a.k_scales = batch_entry(args.k_scales, b);
                a.v_scales = batch_entry(args.v_scales, b);
            }
        } else {
            a.block_table = batch_entry(args.block_table, b);
        }
        a.cache_lengths = batch_entry(args.cache_lengths, b);
    }
    return call;
}

/** An f32 NaN, +inf or finite value in a storage type's bits (f32, f16 or bf16). */
void store_float(uint8_t *to, DType dtype, float value) {
    if (dtype == DType::f32) {
        std::memcpy(to, &value, sizeof value);
        return;
    }
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    // Only 0 and NaN are stored here: bf16 keeps the top half; f16's NaN is 0x7e00.
    const uint16_t half = dtype == DType::bf16 ? static_cast<uint16_t>(bits >> 16)
                          : value != value     ? uint16_t{0x7e00}
                                               : uint16_t{0};
    std::memcpy(to, &half, sizeof half);
}

/**
 * A sequence with queries and no keys: what attention over nothing gives, as the generated
 * code gives it for a row that sees no key. The output rows are zeros (the output projection's
 * bias with one), the lse rows -inf, or with sinks each head's sink (whose mass takes no value);
 * a NaN or +inf sink makes its head's rows NaN (all of a projected row).
 */
void write_keyless(const LayerInfo &info, const Arguments &args, const SequenceCall &call) {
    const size_t element = dtype_size(args.out.dtype);
    const bool rows = args.out.rank == 2; // (T, model_dim) after an output projection
    const int64_t heads = rows ? 1 : args.out.shape[1];
    const int64_t width = rows ? args.out.shape[1] : args.out.shape[2];
    const bool bias = info.out_projection && info.bias && args.bo.given();
    auto sink = [&](int64_t h) {
        return info.sinks ? static_cast<const float *>(args.sinks.data)[h * args.sinks.strides[0]]
                          : -std::numeric_limits<float>::infinity();
    };
    auto poisoned = [&](int64_t h) {
        return std::isnan(sink(h)) || (std::isinf(sink(h)) && sink(h) > 0);
    };
    bool any_poisoned = false;
    for (int64_t h = 0; h < info.heads; h++)
        any_poisoned = any_poisoned || poisoned(h);
    for (int64_t t = call.first_query; t < call.first_query + call.queries; t++) {
        auto *row = static_cast<uint8_t *>(args.out.data) + t * args.out.strides[0] * element;
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < width; i++) {
                const int64_t at = rows ? i * args.out.strides[1]
                                        : h * args.out.strides[1] + i * args.out.strides[2];
                uint8_t *to = row + at * element;
                if (rows ? any_poisoned : poisoned(h))
                    store_float(to, args.out.dtype, std::numeric_limits<float>::quiet_NaN());
                else if (bias)
                    std::memcpy(to,
                                static_cast<const uint8_t *>(args.bo.data) +
                                    i * args.bo.strides[0] * element,
                                element);
                else
                    store_float(to, args.out.dtype, 0.0f);
            }
        if (info.lse)
            for (int64_t h = 0; h < info.heads; h++)
                static_cast<float *>(
                    args.lse.data)[t * args.lse.strides[0] + h * args.lse.strides[1]] =
                    poisoned(h) ? std::numeric_limits<float>::quiet_NaN() : sink(h);
    }
}

/** Copies a sequence's lse rows (1, H, Lq) into the packed lse (Tq, H). */
void write_lse(const Arguments &args, const SequenceCall &call, int64_t heads) {
    auto *lse = static_cast<float *>(args.lse.data);
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < call.queries; i++)
            lse[(call.first_query + i) * args.lse.strides[0] + h * args.lse.strides[1]] =
                call.lse[static_cast<size_t>(h * call.queries + i)];
}

/** What write_keyless reads, which no per-sequence check sees when no sequence attends. */
Status check_keyless(const LayerInfo &info, const Arguments &args) {
    if (info.sinks)
        if (Status status = check_whole("sinks", args.sinks, args.sinks.data, DType::f32,
                                        {{"heads", info.heads}}, info, false);
            !status)
            return status;
    if (info.out_projection && info.bias)
        return check_whole("bo", args.bo, args.bo.data, info.dtype, {{"model_dim", info.model_dim}},
                           info, false);
    return Status();
}

/** The whole call checked, and each sequence's call made and checked as a batched call. */
Status plan_packed(const Layer &layer, const Arguments &args, std::vector<SequenceCall> &calls) {
    const LayerInfo &info = layer.info;
    if (Status status = check_host(args); !status)
        return status;
    if (Status status = check_sequence_tensors(info, args); !status)
        return status;
    const PackedShapes shapes = packed_shapes(info, args);
    if (!args.query_offsets.given())
        return Status::error("attngen: layer '" + std::string(info.name) +
                             "' is packed and needs `query_offsets` (B + 1) int32");
    Offsets queries, keys;
    if (Status status = read_offsets(info, "query_offsets", args.query_offsets,
                                     shapes.query_tensor->shape[0], shapes.queries, queries);
        !status)
        return status;
    if (args.key_offsets.given() && !shapes.takes_key_offsets)
        return Status::error("attngen: `key_offsets` was given but layer '" +
                             std::string(info.name) + "' " +
                             (info.cache.kind != CacheKind::none
                                  ? "has a cache: its keys are the cached tokens and the new ones"
                                  : "is self-attention with projections: its keys are x's rows"));
    if (shapes.key_tensor != nullptr) {
        const bool own = args.key_offsets.given();
        if (Status status = read_offsets(info, own ? "key_offsets" : "query_offsets",
                                         own ? args.key_offsets : args.query_offsets,
                                         shapes.key_tensor->shape[0], shapes.keys, keys, &queries);
            !status)
            return status;
    } else {
        keys = queries;
    }
    if (info.cache.kind != CacheKind::none)
        if (Status status = check_cache_batch(info, args, queries); !status)
            return status;
    for (int64_t b = 0; b < queries.sequences(); b++) {
        if (queries.length(b) == 0)
            continue; // nothing to compute and nothing to write
        SequenceCall call = sequence_call(info, args, queries, keys, b);
        if (!call.attends)
            if (Status status = check_keyless(info, args); !status)
                return status;
        if (call.attends) {
            Status status = validate_call(layer, call.args, call.shape);
            if (!status)
                return Status::error("attngen: sequence " + std::to_string(b) + " (rows " +
                                     std::to_string(call.first_query) + ".." +
                                     std::to_string(call.first_query + call.queries - 1) +
                                     "): " + status.message().substr(9));
        }
        calls.push_back(std::move(call));
    }
    return Status();
}

} // namespace

Status run_packed(const Layer &layer, const Arguments &args, bool validate_only) {
    if (layer.variants == nullptr || layer.variant_count < 1 || layer.metadata == nullptr ||
        layer.info.name == nullptr)
        return Status::error("attngen: the layer has no entry point; use the Layer from its "
                             "generated header");
    std::vector<SequenceCall> calls;
    if (Status status = plan_packed(layer, args, calls); !status || validate_only)
        return status;
    for (const SequenceCall &call : calls) {
        if (!call.attends) {
            write_keyless(layer.info, args, call);
            continue;
        }
        if (Status status = call_layer(layer, call.args, call.shape); !status)
            return status;
        if (layer.info.lse)
            write_lse(args, call, layer.info.heads);
    }
    return Status();
}

} // namespace attngen::internal
