// See bind_inputs.h.
#include "bind_inputs.h"

namespace attngen {

AttentionInputs bind_inputs(const AttentionSpec &spec, const BoundArguments &arguments) {
    auto buffer = [&](const char *name) {
        auto found = arguments.buffers.find(name);
        return found == arguments.buffers.end() ? Halide::Func() : found->second;
    };
    AttentionInputs in;
    in.query = buffer("query");
    in.key = buffer("key");
    in.value = buffer("value");
    in.key_scales = buffer("key_scales");
    in.value_scales = buffer("value_scales");
    in.x = buffer("x");
    in.context = buffer("context");
    in.wq = buffer("wq");
    in.wk = buffer("wk");
    in.wv = buffer("wv");
    in.wo = buffer("wo");
    in.bq = buffer("bq");
    in.bk = buffer("bk");
    in.bv = buffer("bv");
    in.bo = buffer("bo");
    in.key_lengths = buffer("key_lengths");
    in.attn_bias = buffer("attn_bias");
    in.rope_cos = buffer("rope_cos");
    in.rope_sin = buffer("rope_sin");
    in.sinks = buffer("sinks");
    in.k_cache = buffer("k_cache");
    in.v_cache = buffer("v_cache");
    in.k_scales = buffer("k_scales");
    in.v_scales = buffer("v_scales");
    in.block_table = buffer("block_table");
    in.cache_lengths = buffer("cache_lengths");
    in.query_lengths = buffer("query_lengths");

    // Lq and Lk are the sequence extents (dimension 1) of the query and key inputs.
    const bool projected = spec.projections.any();
    const char *queries = projected ? "x" : "query";
    const char *keys = projected ? (spec.cross_attention ? "context" : "x") : "key";
    in.query_len = arguments.extents.at(queries).at(1);
    if (spec.cache.any()) {
        // The keys are the cached tokens and the new ones, up to the longest sequence.
        in.key_len = arguments.scalars.at("key_count");
        in.cache_extents = arguments.extents.at("k_cache");
        if (spec.cache.kind == CacheSpec::Kind::paged)
            in.max_blocks = arguments.extents.at("block_table").at(0);
    } else {
        in.key_len = arguments.extents.at(keys).at(1);
    }

    for (const RuntimeTensor &tensor : spec.tensors) {
        in.tensors[tensor.name] = arguments.buffers.at(tensor.name);
        in.tensor_extents[tensor.name] = arguments.extents.at(tensor.name);
    }
    for (const RuntimeScalar &scalar : spec.scalars)
        in.scalars[scalar.name] = arguments.scalars.at(scalar.name);
    return in;
}

Halide::ImageParam bind_image_param(const AttentionSpec &spec, const EntryArgument &entry,
                                    BoundArguments &bound) {
    Halide::ImageParam image(argument_type(spec, entry), static_cast<int>(entry.dims.size()),
                             entry.name);
    constrain_argument(image, entry.dims);
    for (int i = 0; i < image.dimensions(); i++)
        bound.extents[entry.name].push_back(image.dim(i).extent());
    bound.buffers[entry.name] = image;
    return image;
}

} // namespace attngen
