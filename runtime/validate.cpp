// Argument checking: every tensor against what the layer was generated for and against the
// other tensors of the call, before any generated code runs.
#include "attngen/runtime.h"
#include "internal.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace attngen {

namespace {

/** A run-time size shared by several tensors, bound by the first tensor that has it. */
enum class Symbol { none, batch, query_len, key_len, cache_size, max_blocks, table_rows };
constexpr int symbol_count = 7;

struct DimRule {
    const char *meaning; ///< "batch", "head_dim", ...
    Symbol symbol;       ///< a shared run-time size, or none
    int64_t fixed;       ///< the generated size when symbol is none
};

/** The dimensions of one tensor, outermost first (a fixed array: no allocation per call). */
struct DimList {
    DimRule items[Layout::max_rank] = {};
    int count = 0;
    DimList() = default;
    DimList(std::initializer_list<DimRule> dims) {
        for (const DimRule &dim : dims)
            items[count++] = dim;
    }
    size_t size() const { return static_cast<size_t>(count); }
    const DimRule &operator[](size_t i) const { return items[i]; }
};

struct ArgRule {
    const char *name;
    const Layout *layout;
    bool given;
    const void *data;
    bool wanted;         ///< the layer takes this argument
    const char *why_not; ///< when not wanted: what the layer lacks
    DType dtype;
    DimList dims;
    bool on_device = false;
    bool optional = false;  ///< wanted, but the layer has a default for it
    bool is_output = false; ///< written by the call (a cache): elements must not overlap
    /// Read in whole, and every element must be finite (i8 keys' and values' scales): checked
    /// on the host whatever set_finite_check says.
    bool must_be_finite = false;
};

struct Bound {
    int64_t value = -1;
    const char *by = nullptr;
};

std::string shape_text(const DimList &dims) {
    std::string text = "(";
    for (size_t i = 0; i < dims.size(); i++)
        text += (i ? ", " : "") + std::string(dims[i].meaning);
    return text + ")";
}

std::vector<ArgRule> rules_for(const LayerInfo &info, const Arguments &args) {
    const int64_t H = info.heads, Hkv = info.kv_heads, D = info.head_dim, M = info.model_dim;
    const int64_t Dv = info.value_dim;
    // value_dim is named as such only in layers that set it apart from head_dim.
    const bool own_value_dim = Dv != D;
    const DimRule value_dim{own_value_dim ? "value_dim" : "head_dim", Symbol::none, Dv};
    const char *h_dv = own_value_dim ? "H*value_dim" : "H*head_dim";
    const char *hkv_dv = own_value_dim ? "kv_heads*value_dim" : "kv_heads*head_dim";
    const DimRule batch{"batch", Symbol::batch, 0}, lq{"query length", Symbol::query_len, 0},
        lk{"key length", Symbol::key_len, 0}, heads{"heads", Symbol::none, H},
        kv_heads{"kv_heads", Symbol::none, Hkv}, head_dim{"head_dim", Symbol::none, D},
        model_dim{"model_dim", Symbol::none, M};
    auto feature = [](const char *meaning, int64_t n) { return DimRule{meaning, Symbol::none, n}; };
    const bool proj = info.projections, bias = info.bias && info.projections;
    const DType t = info.dtype;
    // A rope table has a row per key position; in self-attention the keys are x's rows. With
    // a cache, a row per position of the longest sequence at least (checked by check_cache).
    const bool cached = info.cache.kind != CacheKind::none;
    const DimRule positions =
        cached ? DimRule{"positions", Symbol::table_rows, 0}
               : DimRule{"key length",
                         proj && !info.cross_attention ? Symbol::query_len : Symbol::key_len, 0};
    // With a cache, the keys and values given are the new tokens': Lq of them.
    const DimRule new_keys = cached ? DimRule{"query length", Symbol::query_len, 0} : lk;
    const bool paged = info.cache.kind == CacheKind::paged;
    DimList cache_dims =
        paged ? DimList{{"blocks", Symbol::cache_size, 0},
                        kv_heads,
                        feature("block_size", info.cache.block_size),
                        head_dim}
              : DimList{batch, kv_heads, {"capacity", Symbol::cache_size, 0}, head_dim};
    DimList v_cache_dims = cache_dims;
    v_cache_dims.items[3] = value_dim;
    const DimRule pairs = feature("rotary_dim/2", info.rope.rotary_dim / 2);

    auto rule = [&](const char *name, const auto &tensor, bool wanted, const char *why_not,
                    DType dtype, DimList dims) {
        return ArgRule{name,    &tensor, tensor.given(), tensor.data,     wanted,
                       why_not, dtype,   dims,           tensor.on_device};
    };
    const char *no_cache = "has no KV cache";
    ArgRule k_cache = rule("k_cache", args.k_cache, cached, no_cache, info.cache.dtype, cache_dims);
    ArgRule v_cache =
        rule("v_cache", args.v_cache, cached, no_cache, info.cache.dtype, v_cache_dims);
    k_cache.is_output = v_cache.is_output = true;
    // An i8 cache's scales: the caches' dims without head_dim.
    const bool quantized = cached && info.cache.dtype == DType::i8;
    const DimList scale_dims{cache_dims[0], cache_dims[1], cache_dims[2]};
    const char *no_scales = cached ? "has no i8 cache (its cache_dtype is not i8)" : no_cache;
    ArgRule k_scales =
        rule("k_scales", args.k_scales, quantized, no_scales, DType::f32, scale_dims);
    ArgRule v_scales =
        rule("v_scales", args.v_scales, quantized, no_scales, DType::f32, scale_dims);
    k_scales.is_output = v_scales.is_output = true;
    ArgRule query_lengths =
        rule("query_lengths", args.query_lengths, cached, no_cache, DType::i32, {batch});
    query_lengths.optional = true;
    // i8 keys and values: a scale per key and kv head.
    const bool kv_i8 = !proj && info.kv_dtype == DType::i8;
    const char *no_kv_scales = "has no i8 keys and values (its kv_dtype is not i8)";
    ArgRule key_scales =
        rule("key_scales", args.key_scales, kv_i8, no_kv_scales, DType::f32, {batch, kv_heads, lk});
    ArgRule value_scales = rule("value_scales", args.value_scales, kv_i8, no_kv_scales, DType::f32,
                                {batch, kv_heads, lk});
    key_scales.must_be_finite = value_scales.must_be_finite = true;
    ArgRule lse = rule("lse", args.lse, info.lse, "writes no lse (it is not outputs = out, lse)",
                       DType::f32, {batch, heads, lq});
    lse.is_output = true;
    std::vector<ArgRule> rules = {
        rule("query", args.query, !proj, "has projections: pass `x`", t,
             {batch, heads, lq, head_dim}),
        rule("x", args.x, proj, "has no projections: pass `query`, `key` and `value`", t,
             {batch, lq, model_dim}),
        rule("key", args.key, !proj, "has projections: keys come from `x` or `context`",
             info.kv_dtype, {batch, kv_heads, new_keys, head_dim}),
        rule("value", args.value, !proj, "has projections: values come from `x` or `context`",
             info.kv_dtype, {batch, kv_heads, new_keys, value_dim}),
        key_scales,
        value_scales,
        rule("context", args.context, proj && info.cross_attention, "is not cross-attention", t,
             {batch, lk, model_dim}),
        rule("wq", args.wq, proj, "has no projections", t,
             {feature("H*head_dim", H * D), model_dim}),
        rule("wk", args.wk, proj, "has no projections", t,
             {feature("kv_heads*head_dim", Hkv * D), model_dim}),
        rule("wv", args.wv, proj, "has no projections", t, {feature(hkv_dv, Hkv * Dv), model_dim}),
        rule("bq", args.bq, bias, "has no projection biases", t, {feature("H*head_dim", H * D)}),
        rule("bk", args.bk, bias, "has no projection biases", t,
             {feature("kv_heads*head_dim", Hkv * D)}),
        rule("bv", args.bv, bias, "has no projection biases", t, {feature(hkv_dv, Hkv * Dv)}),
        rule("wo", args.wo, info.out_projection, "has no output projection", t,
             {model_dim, feature(h_dv, H * Dv)}),
        rule("bo", args.bo, info.out_projection && bias, "has no output projection bias", t,
             {model_dim}),
        rule("key_lengths", args.key_lengths, info.key_padding, "has no key padding mask",
             DType::i32, {batch}),
        rule("attn_bias", args.attn_bias, info.additive, "has no additive mask", t,
             {batch, heads, lq, lk}),
        rule("sinks", args.sinks, info.sinks, "has no sinks (it is not sinks = true)", DType::f32,
             {heads}),
        rule("rope_cos", args.rope_cos, info.rope.table,
             "takes no rope tables (it is not rope = table)", DType::f32, {positions, pairs}),
        rule("rope_sin", args.rope_sin, info.rope.table,
             "takes no rope tables (it is not rope = table)", DType::f32, {positions, pairs}),
        k_cache,
        v_cache,
        k_scales,
        v_scales,
        rule("block_table", args.block_table, paged,
             cached ? "has a contiguous cache, not a paged one" : no_cache, DType::i32,
             {batch, {"max_blocks", Symbol::max_blocks, 0}}),
        rule("cache_lengths", args.cache_lengths, cached, no_cache, DType::i32, {batch}),
        query_lengths,
        lse,
        // A packed layer's call is cut per sequence before these rules see it (run_packed).
        rule("query_offsets", args.query_offsets, false,
             info.packed ? "takes them as a whole call, not per sequence"
                         : "is not packed (layout = packed): its sequences are (B, ..., L, ...)",
             DType::i32, {batch}),
        rule("key_offsets", args.key_offsets, false,
             info.packed ? "takes them as a whole call, not per sequence"
                         : "is not packed (layout = packed): its sequences are (B, ..., L, ...)",
             DType::i32, {batch}),
    };
    return rules;
}

/** The declared tensors: given by name in args.tensors, shaped by their ExtraArgument. */
Status add_declared_tensor_rules(const LayerInfo &info, const Arguments &args,
                                 std::vector<ArgRule> &rules) {
    static const Tensor absent;
    static const char *const dimension_names[] = {"size[0]", "size[1]", "size[2]", "size[3]"};
    // In self-attention the keys are the queries: a keys-sized dimension has the query length.
    const Symbol keys =
        info.projections && !info.cross_attention ? Symbol::query_len : Symbol::key_len;
    for (const auto &entry : args.tensors) {
        if (internal::find_extra(info, entry.first, false) == nullptr)
            return Status::error("attngen: tensor `" + entry.first + "` was given but layer '" +
                                 info.name + "' declares no tensor of that name");
    }
    for (int i = 0; i < info.extra_count; i++) {
        const ExtraArgument &extra = info.extras[i];
        if (extra.is_scalar)
            continue;
        const Tensor *given = internal::find_named(args.tensors, extra.name);
        const Tensor *tensor = given != nullptr ? given : &absent;
        DimList dims{};
        for (int d = 0; d < extra.rank && d < Layout::max_rank; d++) {
            DimRule rule = extra.dims[d] == dim_batch ? DimRule{"batch", Symbol::batch, 0}
                           : extra.dims[d] == dim_queries
                               ? DimRule{"query length", Symbol::query_len, 0}
                           : extra.dims[d] == dim_keys
                               ? DimRule{"key length", keys, 0}
                               : DimRule{dimension_names[d], Symbol::none, extra.dims[d]};
            dims.items[dims.count++] = rule;
        }
        rules.push_back(ArgRule{extra.name, tensor, tensor->given(), tensor->data, true, "",
                                extra.dtype, dims, tensor->on_device});
    }
    return Status();
}

/** A scalar's value as people write numbers (1e+300, 2.5), not 300 digits of to_string. */
std::string number_text(double value) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.9g", value);
    return text;
}

/** The declared scalars: given by name, finite, and integral for i32 ones. */
Status check_declared_scalars(const LayerInfo &info, const Arguments &args) {
    for (const auto &entry : args.scalars) {
        const ExtraArgument *extra = internal::find_extra(info, entry.first, true);
        if (extra == nullptr)
            return Status::error("attngen: scalar `" + entry.first + "` was given but layer '" +
                                 info.name + "' declares no scalar of that name");
        const double value = entry.second;
        if (!std::isfinite(value))
            return Status::error("attngen: scalar `" + entry.first + "` is " + number_text(value) +
                                 "; it must be finite");
        if (extra->dtype != DType::i32 && std::abs(value) > FLT_MAX)
            return Status::error("attngen: scalar `" + entry.first + "` is " + number_text(value) +
                                 "; an f32 scalar must be within +-3.4e38 (FLT_MAX)");
        if (extra->dtype == DType::i32 &&
            (value != std::floor(value) || value < INT32_MIN || value > INT32_MAX))
            return Status::error("attngen: scalar `" + entry.first + "` is " + number_text(value) +
                                 " but must be an i32 integer");
    }
    for (int i = 0; i < info.extra_count; i++) {
        if (!info.extras[i].is_scalar)
            continue;
        if (internal::find_named(args.scalars, info.extras[i].name) == nullptr)
            return Status::error("attngen: layer '" + std::string(info.name) + "' needs scalar `" +
                                 info.extras[i].name + "` but it was not given");
    }
    return Status();
}

using internal::overlapping;
using internal::quoted;
using internal::Span;
using internal::span_of;

/** Shape, dtype and stride checks of one tensor on its own. */
Status check_layout(const char *name, const Layout &layout, const void *data, DType dtype,
                    const DimList &dims, const LayerInfo &info, bool is_output) {
    const std::string arg = quoted(name);
    const int rank = static_cast<int>(dims.size());
    if (data == nullptr)
        return Status::error("attngen: " + arg + " has a null data pointer");
    if (layout.rank == -1)
        return Status::error("attngen: " + arg +
                             " was given different numbers of sizes and strides");
    if (layout.rank != rank)
        return Status::error("attngen: " + arg + " must have rank " + std::to_string(rank) + " " +
                             shape_text(dims) + ", got rank " + std::to_string(layout.rank));
    if (layout.dtype != dtype && dtype == DType::i32)
        return Status::error("attngen: " + arg + " has dtype " + dtype_name(layout.dtype) +
                             " but must be i32");
    if (layout.dtype != dtype)
        return Status::error("attngen: " + arg + " has dtype " + dtype_name(layout.dtype) +
                             " but layer '" + info.name + "' was generated for " +
                             dtype_name(dtype));
    for (int i = 0; i < rank; i++)
        if (Status status =
                internal::check_dimension("attngen: " + arg, layout, i, dims[i].meaning);
            !status)
            return status;
    if (layout.strides[rank - 1] != 1 && layout.shape[rank - 1] > 1)
        return Status::error("attngen: " + arg + " must have innermost stride 1, got " +
                             std::to_string(layout.strides[rank - 1]));
    Span span = span_of(layout, data);
    if (span.last - span.first >= static_cast<uint64_t>(INT32_MAX))
        return Status::error("attngen: " + arg + " spans " +
                             std::to_string(span.last - span.first + 1) +
                             " bytes; a generated layer addresses at most " +
                             std::to_string(INT32_MAX) + " bytes per tensor");
    if (!is_output)
        return Status();
    // Writing through overlapping elements would race: require distinct addresses.
    return internal::check_distinct_elements("attngen: " + arg, layout);
}

/**
 * An i8 cache's scales at the positions the call reads (each sequence's cached ones) are finite:
 * a NaN or an infinity there is refused, naming the element.
 */
Status check_scales(const LayerInfo &info, const Arguments &args, int64_t batch) {
    const bool paged = info.cache.kind == CacheKind::paged;
    const int64_t block_size = info.cache.block_size;
    for (const auto &[name, scales] :
         {std::make_pair("k_scales", &args.k_scales), std::make_pair("v_scales", &args.v_scales)})
        for (int64_t b = 0; b < batch; b++) {
            const int64_t cached = internal::int_element(args.cache_lengths, b);
            for (int64_t p = 0; p < cached; p++) {
                const int64_t outer =
                    paged ? internal::int_element(args.block_table, b, p / block_size) : b;
                const int64_t slot = paged ? p % block_size : p;
                for (int64_t h = 0; h < info.kv_heads; h++) {
                    const float value = static_cast<const float *>(
                        scales->data)[outer * scales->strides[0] + h * scales->strides[1] +
                                      slot * scales->strides[2]];
                    if (std::isfinite(value))
                        continue;
                    return Status::error(
                        std::string("attngen: `") + name + "[" + std::to_string(outer) + "][" +
                        std::to_string(h) + "][" + std::to_string(slot) + "]` is " +
                        (std::isnan(value) ? "nan"
                         : value > 0       ? "inf"
                                           : "-inf") +
                        ", but the scales of cached positions must be finite (sequence " +
                        std::to_string(b) + ", position " + std::to_string(p) + ")");
                }
            }
        }
    return Status();
}

/**
 * A cached layer's lengths and block table, once every tensor's shape is checked: the sequences
 * fit their caches, the blocks they use exist, no block is written by two sequences, and the
 * rope tables cover the positions. Sets shape.key_count.
 */
Status check_batch_cache(const LayerInfo &info, const Arguments &args, internal::CallShape &shape) {
    for (const auto &[name, cache] :
         {std::make_pair("k_cache", &args.k_cache), std::make_pair("v_cache", &args.v_cache),
          std::make_pair("k_scales", &args.k_scales), std::make_pair("v_scales", &args.v_scales)})
        if (cache->on_device)
            return Status::error(std::string("attngen: `") + name +
                                 "` is device memory, but a cached layer runs on the CPU and "
                                 "appends to host caches");
    for (const Tensor *lengths : {&args.cache_lengths, &args.query_lengths})
        if (lengths->on_device)
            return Status::error(
                std::string("attngen: `") +
                (lengths == &args.cache_lengths ? "cache_lengths" : "query_lengths") +
                "` is device memory; a cached layer reads its lengths on the host");
    const Span k_span = span_of(args.k_cache, args.k_cache.data);
    const Span v_span = span_of(args.v_cache, args.v_cache.data);
    if (overlapping(k_span, v_span))
        return Status::error("attngen: `v_cache` overlaps `k_cache`; the call appends to both, so "
                             "they must not share memory");

    const bool paged = info.cache.kind == CacheKind::paged;
    const int64_t block_size = info.cache.block_size;
    const int64_t capacity = paged ? args.block_table.shape[1] * block_size : args.k_cache.shape[2];
    const int64_t blocks = paged ? args.k_cache.shape[0] : 0;
    const bool given_lengths = args.query_lengths.given();
    // The blocks each sequence writes, as (block, sequence, logical block), to find the shared.
    struct Written {
        int64_t block, sequence, logical;
    };
    std::vector<Written> written;
    int64_t longest = 1; // at least one key, so that every clamp in the pipeline has a range
    for (int64_t b = 0; b < shape.batch; b++) {
        const std::string at = "[" + std::to_string(b) + "]";
        const int64_t cached = internal::int_element(args.cache_lengths, b);
        const int64_t fresh =
            given_lengths ? internal::int_element(args.query_lengths, b) : shape.query_len;
        if (cached < 0)
            return Status::error("attngen: `cache_lengths" + at + "` is " + std::to_string(cached) +
                                 " but must be at least 0");
        if (fresh < 0 || fresh > shape.query_len)
            return Status::error("attngen: `query_lengths" + at + "` is " + std::to_string(fresh) +
                                 " but must be in [0, " + std::to_string(shape.query_len) +
                                 "] (the query length)");
        const int64_t end = cached + fresh;
        if (end > capacity)
            return Status::error(
                "attngen: `" + std::string(paged ? "block_table" : "cache_lengths") + at +
                "` leaves no room: sequence " + std::to_string(b) + " holds " +
                std::to_string(cached) + " tokens and brings " + std::to_string(fresh) +
                ", past its " +
                (paged ? std::to_string(args.block_table.shape[1]) + " blocks of " +
                             std::to_string(block_size) + " positions"
                       : "cache's capacity of " + std::to_string(capacity) + " positions"));
        longest = std::max(longest, end);
        if (!paged)
            continue;
        for (int64_t logical = 0; logical * block_size < end; logical++) {
            const int64_t block = internal::int_element(args.block_table, b, logical);
            if (block < 0 || block >= blocks)
                return Status::error(
                    "attngen: `block_table" + at + "[" + std::to_string(logical) + "]` is " +
                    std::to_string(block) + " but must be a block of the cache, in [0, " +
                    std::to_string(blocks - 1) + "]: sequence " + std::to_string(b) +
                    " uses positions up to " + std::to_string(end - 1));
            if (fresh > 0 && (logical + 1) * block_size > cached)
                written.push_back({block, b, logical});
        }
    }
    std::sort(written.begin(), written.end(),
              [](const Written &x, const Written &y) { return x.block < y.block; });
    for (size_t i = 1; i < written.size(); i++)
        if (written[i].block == written[i - 1].block) {
            const Written &x = written[i - 1], &y = written[i];
            return Status::error("attngen: `block_table[" + std::to_string(x.sequence) + "][" +
                                 std::to_string(x.logical) + "]` and `block_table[" +
                                 std::to_string(y.sequence) + "][" + std::to_string(y.logical) +
                                 "]` are both block " + std::to_string(x.block) +
                                 ", and the call writes new tokens into each");
        }
    if (info.cache.dtype == DType::i8)
        if (Status status = check_scales(info, args, shape.batch); !status)
            return status;
    if (info.rope.table && args.rope_cos.shape[0] < longest)
        return Status::error("attngen: `rope_cos` and `rope_sin` have " +
                             std::to_string(args.rope_cos.shape[0]) +
                             " positions, but the call reaches position " +
                             std::to_string(longest - 1) + ": they need a row per position");
    shape.key_count = static_cast<int32_t>(longest);
    return Status();
}

std::atomic<bool> finite_check_enabled{false};

/**
 * The finite check of one host input (set_finite_check): the first element, in row-major order,
 * that is NaN or an infinity (-inf allowed where it masks), as an error naming it.
 */
Status check_finite(const char *name, const Layout &layout, const void *data,
                    bool negative_infinity_masks, const char *why = "the finite check is on") {
    int64_t count = 1;
    for (int i = 0; i < layout.rank; i++)
        count *= layout.shape[i];
    int64_t index[Layout::max_rank] = {};
    for (int64_t n = 0; n < count; n++) {
        int64_t offset = 0;
        for (int i = 0; i < layout.rank; i++)
            offset += index[i] * layout.strides[i];
        const double value = internal::load_float(data, layout.dtype, offset);
        const bool bad =
            std::isnan(value) || (std::isinf(value) && !(negative_infinity_masks && value < 0.0));
        if (bad) {
            std::string at;
            for (int i = 0; i < layout.rank; i++)
                at += (i ? ", " : "") + std::to_string(index[i]);
            return Status::error("attngen: " + quoted(name) + " holds " +
                                 (std::isnan(value) ? "NaN"
                                  : value > 0       ? "+inf"
                                                    : "-inf") +
                                 " at [" + at + "] (" + why + ")");
        }
        for (int i = layout.rank - 1; i >= 0 && ++index[i] == layout.shape[i]; i--)
            index[i] = 0;
    }
    return Status();
}

/**
 * Whether `output` shares memory with a given argument other than itself. Host and device memory
 * never overlap; device handles (a cl_mem is not an address) are compared for identity only.
 */
Status check_apart(const ArgRule &output, const std::vector<ArgRule> &rules) {
    const Span span = span_of(*output.layout, output.data);
    for (const ArgRule &rule : rules) {
        if (!rule.given || rule.layout == output.layout || rule.on_device != output.on_device)
            continue;
        const bool overlaps = rule.on_device ? rule.data == output.data
                                             : overlapping(span_of(*rule.layout, rule.data), span);
        if (overlaps)
            return Status::error("attngen: " + quoted(output.name) + " overlaps " +
                                 quoted(rule.name) + "; the output must not share memory with " +
                                 (rule.is_output ? "another output" : "an input"));
    }
    return Status();
}

} // namespace

namespace internal {

Status check_dimension(const std::string &subject, const Layout &layout, int i,
                       const char *meaning) {
    if (layout.shape[i] < 1 || layout.shape[i] > INT32_MAX)
        return Status::error(subject + " has " +
                             (meaning ? std::string(meaning) + " " : std::string("size ")) +
                             std::to_string(layout.shape[i]) +
                             (meaning ? "" : " in dimension " + std::to_string(i)) +
                             "; it must be in 1.." + std::to_string(INT32_MAX));
    if (layout.strides[i] < 0 || layout.strides[i] > INT32_MAX)
        return Status::error(subject + " has stride " + std::to_string(layout.strides[i]) +
                             " in dimension " + std::to_string(i) + "; strides must be in 0.." +
                             std::to_string(INT32_MAX));
    return Status();
}

Status check_distinct_elements(const std::string &subject, const Layout &layout) {
    std::vector<int> order;
    for (int i = 0; i < layout.rank; i++)
        if (layout.shape[i] > 1)
            order.push_back(i);
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return layout.strides[a] < layout.strides[b]; });
    int64_t needed = 1;
    for (int i : order) {
        if (layout.strides[i] < needed)
            return Status::error(subject + " has overlapping elements: stride " +
                                 std::to_string(layout.strides[i]) + " in dimension " +
                                 std::to_string(i) + " must be at least " + std::to_string(needed));
        needed = layout.strides[i] * layout.shape[i];
    }
    return Status();
}

Status validate_call(const Layer &layer, const Arguments &args, CallShape &shape) {
    const LayerInfo &info = layer.info;
    if (layer.variants == nullptr || layer.variant_count < 1 || layer.metadata == nullptr ||
        info.name == nullptr)
        return Status::error("attngen: the layer has no entry point; use the Layer from its "
                             "generated header");

    std::vector<ArgRule> rules = rules_for(info, args);
    if (Status status = add_declared_tensor_rules(info, args, rules); !status)
        return status;
    if (Status status = check_declared_scalars(info, args); !status)
        return status;
    Bound bound[symbol_count];
    for (const ArgRule &rule : rules) {
        if (!rule.wanted) {
            if (rule.given)
                return Status::error("attngen: " + quoted(rule.name) + " was given but layer '" +
                                     info.name + "' " + rule.why_not);
            continue;
        }
        if (!rule.given && rule.optional)
            continue;
        if (!rule.given)
            return Status::error("attngen: layer '" + std::string(info.name) + "' needs " +
                                 quoted(rule.name) + " " + shape_text(rule.dims) +
                                 " but it was not given");
        Status status = check_layout(rule.name, *rule.layout, rule.data, rule.dtype, rule.dims,
                                     info, rule.is_output);
        if (!status)
            return status;
        for (size_t i = 0; i < rule.dims.size(); i++) {
            const DimRule &dim = rule.dims[i];
            int64_t actual = rule.layout->shape[i];
            if (dim.symbol == Symbol::none) {
                if (actual != dim.fixed)
                    return Status::error("attngen: " + quoted(rule.name) + " has " + dim.meaning +
                                         " " + std::to_string(actual) + " but layer '" + info.name +
                                         "' was generated for " + std::to_string(dim.fixed));
                continue;
            }
            Bound &b = bound[static_cast<int>(dim.symbol)];
            if (b.by == nullptr) {
                b = {actual, rule.name};
            } else if (b.value != actual) {
                return Status::error("attngen: " + quoted(rule.name) + " has " + dim.meaning + " " +
                                     std::to_string(actual) + " but " + quoted(b.by) + " has " +
                                     dim.meaning + " " + std::to_string(b.value));
            }
        }
    }

    const int64_t batch = bound[static_cast<int>(Symbol::batch)].value;
    const int64_t query_len = bound[static_cast<int>(Symbol::query_len)].value;
    int64_t key_len = bound[static_cast<int>(Symbol::key_len)].value;
    if (key_len < 0)
        key_len = query_len; // self-attention with projections: keys come from x
    shape.batch = batch;
    shape.query_len = query_len;
    const bool cached = info.cache.kind != CacheKind::none;
    if (info.rope.table && !cached && query_len > key_len)
        return Status::error("attngen: `rope_cos` and `rope_sin` hold key positions 0.." +
                             std::to_string(key_len - 1) + ", and query q sits at q + Lk - Lq: " +
                             "rope = table needs Lq <= Lk, got Lq " + std::to_string(query_len) +
                             " and Lk " + std::to_string(key_len));

    // The output.
    const bool projected_out = info.out_projection;
    const DimList out_dims =
        projected_out ? DimList{{"batch", Symbol::batch, 0},
                                {"query length", Symbol::query_len, 0},
                                {"model_dim", Symbol::none, info.model_dim}}
                      : DimList{{"batch", Symbol::batch, 0},
                                {"heads", Symbol::none, info.heads},
                                {"query length", Symbol::query_len, 0},
                                {info.value_dim != info.head_dim ? "value_dim" : "head_dim",
                                 Symbol::none, info.value_dim}};
    if (!args.out.given())
        return Status::error("attngen: layer '" + std::string(info.name) + "' needs `out` " +
                             shape_text(out_dims) + " but it was not given");
    Status status = check_layout("out", args.out, args.out.data, info.dtype, out_dims, info, true);
    if (!status)
        return status;
    for (size_t i = 0; i < out_dims.size(); i++) {
        const DimRule &dim = out_dims[i];
        int64_t expected = dim.symbol == Symbol::batch       ? batch
                           : dim.symbol == Symbol::query_len ? query_len
                                                             : dim.fixed;
        if (args.out.shape[i] == expected)
            continue;
        std::string source = dim.symbol == Symbol::none
                                 ? "layer '" + std::string(info.name) + "' was generated for"
                                 : "the inputs give";
        return Status::error("attngen: `out` has " + std::string(dim.meaning) + " " +
                             std::to_string(args.out.shape[i]) + " but " + source + " " +
                             std::to_string(expected));
    }

    // The outputs must not share memory with any other argument.
    const ArgRule out_rule{"out", &args.out,  true,     args.out.data,     true,
                           "",    info.dtype, out_dims, args.out.on_device};
    if (Status status = check_apart(out_rule, rules); !status)
        return status;
    for (const ArgRule &rule : rules)
        for (const char *written : {"lse", "k_scales", "v_scales"})
            if (rule.given && std::strcmp(rule.name, written) == 0)
                if (Status status = check_apart(rule, rules); !status)
                    return status;

    // Device key lengths are not read back to check: the kernels compare them with key
    // positions only, so any value is safe (out-of-range values mask nothing or everything).
    if (info.key_padding && !args.key_lengths.on_device) {
        const auto *lengths = static_cast<const int32_t *>(args.key_lengths.data);
        for (int64_t b = 0; b < batch; b++) {
            int32_t length = lengths[b * args.key_lengths.strides[0]];
            if (length < 0 || length > key_len)
                return Status::error("attngen: `key_lengths[" + std::to_string(b) + "]` is " +
                                     std::to_string(length) + " but must be in [0, " +
                                     std::to_string(key_len) + "] (the key length)");
        }
    }
    if (cached)
        if (Status cache = check_batch_cache(info, args, shape); !cache)
            return cache;
    // i8 keys' and values' scales are read in whole: each must be finite (on the host; device
    // scales are not read back, and a non-finite one makes its key's rows NaN).
    for (const ArgRule &rule : rules)
        if (rule.wanted && rule.given && !rule.on_device && rule.must_be_finite)
            if (Status finite = check_finite(rule.name, *rule.layout, rule.data, false,
                                             "the scales of i8 keys and values must be finite");
                !finite)
                return finite;

    // The opt-in finite check: every host float input the call reads in whole (the caches'
    // unwritten slots may hold anything, and are not scanned). Declared scalars are always
    // checked finite (check_declared_scalars).
    if (finite_check_enabled.load(std::memory_order_relaxed)) {
        for (const ArgRule &rule : rules) {
            const bool is_float = rule.dtype != DType::i32 && rule.dtype != DType::i8;
            if (!rule.wanted || !rule.given || rule.is_output || rule.on_device || !is_float)
                continue;
            const bool masks = std::strcmp(rule.name, "attn_bias") == 0;
            if (Status finite = check_finite(rule.name, *rule.layout, rule.data, masks); !finite)
                return finite;
        }
    }
    return Status();
}

Status check_cache(const LayerInfo &info, const Arguments &args, CallShape &shape) {
    return check_batch_cache(info, args, shape);
}

Status check_whole(const char *name, const Layout &layout, const void *data, DType dtype,
                   const std::vector<WholeDim> &dims, const LayerInfo &info, bool is_output) {
    DimList list;
    for (const WholeDim &dim : dims)
        list.items[list.count++] = {dim.meaning, Symbol::none, dim.size};
    if (Status status = check_layout(name, layout, data, dtype, list, info, is_output); !status)
        return status;
    for (size_t i = 0; i < list.size(); i++)
        if (list[i].fixed >= 0 && layout.shape[i] != list[i].fixed)
            return Status::error("attngen: " + quoted(name) + " has " + list[i].meaning + " " +
                                 std::to_string(layout.shape[i]) + " but layer '" + info.name +
                                 "' was generated for " + std::to_string(list[i].fixed));
    return Status();
}

} // namespace internal

void set_finite_check(bool enabled) {
    finite_check_enabled.store(enabled, std::memory_order_relaxed);
}

bool finite_check() {
    return finite_check_enabled.load(std::memory_order_relaxed);
}

Status validate(const Layer &layer, const Arguments &args) {
    if (layer.info.packed)
        return internal::run_packed(layer, args, true);
    internal::CallShape shape;
    return internal::validate_call(layer, args, shape);
}

} // namespace attngen
