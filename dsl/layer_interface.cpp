// The argument list of a layer's entry point (see layer_interface.h).
#include "layer_interface.h"

namespace attngen {

std::vector<BufferArgument> layer_arguments(const AttentionSpec &spec) {
    const int dim = spec.resolved_head_dim();
    const int heads = spec.heads;
    const int kv = spec.resolved_kv_heads();
    const int width = spec.resolved_model_dim();
    const Projections &proj = spec.projections;

    std::vector<BufferArgument> args;
    auto add = [&](const char *name, std::vector<int> extents) {
        args.push_back({name, false, false, std::move(extents)});
    };
    if (proj.any()) {
        add("x", {width, -1, -1});
        if (spec.cross_attention)
            add("context", {width, -1, -1});
        add("wq", {width, heads * dim});
        add("wk", {width, kv * dim});
        add("wv", {width, kv * dim});
        if (proj.bias) {
            add("bq", {heads * dim});
            add("bk", {kv * dim});
            add("bv", {kv * dim});
        }
        if (proj.out) {
            add("wo", {heads * dim, width});
            if (proj.bias)
                add("bo", {width});
        }
    } else {
        add("query", {dim, -1, heads, -1});
        add("key", {dim, -1, kv, -1});
        add("value", {dim, -1, kv, -1});
    }
    if (spec.mask.key_padding)
        args.push_back({"key_lengths", true, false, {-1}});
    if (spec.mask.additive)
        add("attn_bias", {-1, -1, heads, -1});
    if (proj.out)
        args.push_back({"out", false, true, {width, -1, -1}});
    else
        args.push_back({"out", false, true, {dim, -1, heads, -1}});
    return args;
}

} // namespace attngen
