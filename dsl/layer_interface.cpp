// The argument list of a layer's entry point (see layer_interface.h).
#include "layer_interface.h"

namespace attngen {

std::vector<TensorDim> entry_dims(const AttentionSpec &spec, const RuntimeTensor &tensor) {
    std::vector<TensorDim> dims;
    for (auto dim = tensor.dims.rbegin(); dim != tensor.dims.rend(); ++dim) {
        int fixed = dim->symbol == TensorDim::Symbol::heads      ? spec.heads
                    : dim->symbol == TensorDim::Symbol::kv_heads ? spec.resolved_kv_heads()
                    : dim->symbol == TensorDim::Symbol::head_dim ? spec.resolved_head_dim()
                                                                 : 0;
        dims.push_back(fixed > 0 ? TensorDim{TensorDim::Symbol::fixed, fixed} : *dim);
    }
    return dims;
}

namespace {

using Kind = EntryArgument::Kind;
using Symbol = TensorDim::Symbol;

/** The call's sizes: dims that are not fixed at generation time. */
constexpr TensorDim batch{Symbol::batch, 0}, queries{Symbol::queries, 0}, keys{Symbol::keys, 0};

TensorDim fixed(int extent) {
    return TensorDim{Symbol::fixed, extent};
}

/** Appends an input buffer in the layer's storage type. */
void add(std::vector<EntryArgument> &args, const char *name, std::vector<TensorDim> dims) {
    args.push_back({name, Kind::buffer, false, false, std::move(dims)});
}

/** The layer's own inputs: x (and context) with the weights and biases, or Q, K and V. */
void add_layer_inputs(const AttentionSpec &spec, std::vector<EntryArgument> &args) {
    const int dim = spec.resolved_head_dim();
    const int value_dim = spec.resolved_value_dim();
    const int heads = spec.heads;
    const int kv = spec.resolved_kv_heads();
    const int width = spec.resolved_model_dim();
    const Projections &proj = spec.projections;
    if (proj.any()) {
        // In self-attention the keys are x's own positions: x's length is both Lq and Lk.
        add(args, "x", {fixed(width), queries, batch});
        if (spec.cross_attention)
            add(args, "context", {fixed(width), keys, batch});
        add(args, "wq", {fixed(width), fixed(heads * dim)});
        add(args, "wk", {fixed(width), fixed(kv * dim)});
        add(args, "wv", {fixed(width), fixed(kv * value_dim)});
        if (proj.bias) {
            add(args, "bq", {fixed(heads * dim)});
            add(args, "bk", {fixed(kv * dim)});
            add(args, "bv", {fixed(kv * value_dim)});
        }
        if (proj.out) {
            add(args, "wo", {fixed(heads * value_dim), fixed(width)});
            if (proj.bias)
                add(args, "bo", {fixed(width)});
        }
    } else {
        // With a cache, the keys and values given are the new tokens'.
        const TensorDim new_keys = spec.cache.any() ? queries : keys;
        add(args, "query", {fixed(dim), queries, fixed(heads), batch});
        for (const char *name : {"key", "value"}) {
            add(args, name, {fixed(name[0] == 'k' ? dim : value_dim), new_keys, fixed(kv), batch});
            args.back().is_kv = true;
        }
        if (spec.resolved_kv_dtype() == DType::i8)
            // One f32 scale per (key, kv head): the inputs' dims without head_dim.
            for (const char *name : {"key_scales", "value_scales"})
                args.push_back({name, Kind::buffer, false, true, {keys, fixed(kv), batch}});
    }
}

/** A cached layer's inputs: k_cache and v_cache, block_table when paged, and the lengths. */
void add_cache_inputs(const AttentionSpec &spec, std::vector<EntryArgument> &args) {
    const int kv = spec.resolved_kv_heads();
    const CacheSpec &cache = spec.cache;
    // Capacity, blocks and max_blocks are the call's: `keys` stands for a size of its own.
    std::vector<TensorDim> cache_dims =
        cache.kind == CacheSpec::Kind::paged
            ? std::vector<TensorDim>{fixed(0), fixed(cache.block_size), fixed(kv), keys}
            : std::vector<TensorDim>{fixed(0), keys, fixed(kv), batch};
    for (const char *name : {"k_cache", "v_cache"}) {
        // K rows of head_dim, V rows of value_dim.
        cache_dims[0] =
            fixed(name[0] == 'k' ? spec.resolved_head_dim() : spec.resolved_value_dim());
        add(args, name, cache_dims);
        args.back().is_cache = true;
    }
    if (spec.resolved_cache_dtype() == DType::i8) {
        // One f32 scale per (position, kv head): the cache's dims without head_dim.
        const std::vector<TensorDim> scale_dims(cache_dims.begin() + 1, cache_dims.end());
        for (const char *name : {"k_scales", "v_scales"})
            args.push_back({name, Kind::buffer, false, true, scale_dims});
    }
    if (cache.kind == CacheSpec::Kind::paged)
        args.push_back({"block_table", Kind::buffer, true, false, {keys, batch}});
    for (const char *name : {"cache_lengths", "query_lengths"})
        args.push_back({name, Kind::buffer, true, false, {batch}});
}

/** The outputs: `out`, the lse if the layer has it, and a cached layer's k_new and v_new. */
void add_outputs(const AttentionSpec &spec, std::vector<EntryArgument> &args) {
    const int value_dim = spec.resolved_value_dim();
    const int heads = spec.heads;
    const int kv = spec.resolved_kv_heads();
    const int width = spec.resolved_model_dim();
    if (spec.projections.out)
        args.push_back({"out", Kind::output, false, false, {fixed(width), queries, batch}});
    else
        args.push_back(
            {"out", Kind::output, false, false, {fixed(value_dim), queries, fixed(heads), batch}});
    if (spec.lse_output) // f32 whatever the layer stores
        args.push_back({"lse", Kind::output, false, true, {queries, fixed(heads), batch}});
    if (spec.cache.any())
        for (const char *name : {"k_new", "v_new"}) {
            const int row = name[0] == 'k' ? spec.resolved_head_dim() : value_dim;
            args.push_back(
                {name, Kind::output, false, false, {fixed(row), queries, fixed(kv), batch}});
            args.back().is_cache = true;
            args.back().is_internal = true;
        }
    if (spec.cache.any() && spec.resolved_cache_dtype() == DType::i8)
        for (const char *name : {"k_new_scales", "v_new_scales"}) {
            args.push_back({name, Kind::output, false, true, {queries, fixed(kv), batch}});
            args.back().is_internal = true;
        }
}

} // namespace

std::vector<EntryArgument> layer_arguments(const AttentionSpec &spec) {
    std::vector<EntryArgument> args;
    add_layer_inputs(spec, args);
    if (spec.cache.any())
        add_cache_inputs(spec, args);
    if (spec.mask.key_padding)
        args.push_back({"key_lengths", Kind::buffer, true, false, {batch}});
    if (spec.mask.additive)
        add(args, "attn_bias", {keys, queries, fixed(spec.heads), batch});
    if (spec.sinks) // f32 whatever the layer stores
        args.push_back({"sinks", Kind::buffer, false, true, {fixed(spec.heads)}});
    if (spec.rope.table)
        for (const char *name : {"rope_cos", "rope_sin"}) // f32 whatever the layer stores
            args.push_back(
                {name, Kind::buffer, false, true, {fixed(spec.resolved_rotary_dim() / 2), keys}});
    for (const RuntimeTensor &tensor : spec.tensors)
        args.push_back(
            {tensor.name, Kind::buffer, tensor.is_int32, true, entry_dims(spec, tensor)});
    for (const RuntimeScalar &scalar : spec.scalars)
        args.push_back({scalar.name, Kind::scalar, scalar.is_int32, true, {}});
    if (spec.cache.any()) {
        args.push_back({"key_count", Kind::scalar, true, false, {}});
        args.back().is_internal = true;
    }
    add_outputs(spec, args);
    return args;
}

} // namespace attngen
