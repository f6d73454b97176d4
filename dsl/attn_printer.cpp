// The canonical .attn text of a layer.
#include "attn_printer.h"

#include <algorithm>
#include <vector>

namespace attngen {

namespace {

std::string dims_text(const RuntimeTensor &tensor) {
    std::string text;
    for (const TensorDim &dim : tensor.dims) {
        if (!text.empty())
            text += ", ";
        text += dim.symbol == TensorDim::Symbol::fixed ? std::to_string(dim.extent)
                                                       : symbol_name(dim.symbol);
    }
    return text;
}

std::string projections_text(const Projections &projections) {
    std::string text;
    auto add = [&](bool present, const char *name) {
        if (present)
            text += (text.empty() ? "" : ", ") + std::string(name);
    };
    add(projections.q, "q");
    add(projections.k, "k");
    add(projections.v, "v");
    add(projections.out, "out");
    return text.empty() ? "none" : text;
}

std::string mask_text(const AttentionSpec &spec) {
    std::vector<std::string> terms;
    if (spec.mask.any()) {
        // The kinds as check_spec's text form writes them, "causal+window(8)", spaced out.
        std::string kinds = to_string(spec.mask);
        for (size_t begin = 0, end; begin <= kinds.size(); begin = end + 1) {
            end = std::min(kinds.find('+', begin), kinds.size());
            terms.push_back(kinds.substr(begin, end - begin));
        }
    }
    for (const ModExprPtr &predicate : spec.mask_predicates)
        terms.push_back("(" + (predicate ? to_string(*predicate) : std::string("?")) + ")");
    std::string text;
    for (const std::string &term : terms)
        text += (text.empty() ? "" : " + ") + term;
    return text.empty() ? "none" : text;
}

} // namespace

std::string to_attn(const AttentionSpec &spec) {
    std::string text = "attention " + spec.name + " {\n";
    auto line = [&](const std::string &item) { text += "    " + item + "\n"; };
    if (spec.model_dim != 0)
        line("model_dim = " + std::to_string(spec.model_dim));
    line("heads = " + std::to_string(spec.heads));
    if (spec.kv_heads != 0)
        line("kv_heads = " + std::to_string(spec.kv_heads));
    if (spec.head_dim != 0)
        line("head_dim = " + std::to_string(spec.head_dim));
    if (spec.value_dim != 0)
        line("value_dim = " + std::to_string(spec.value_dim));
    if (spec.dtype != DType::f32)
        line("dtype = " + std::string(to_string(spec.dtype)));
    if (spec.kv_dtype)
        line("kv_dtype = " + std::string(to_string(*spec.kv_dtype)));
    if (spec.projections.any())
        line("projections = " + projections_text(spec.projections));
    if (spec.projections.bias)
        line("bias = true");
    if (spec.cross_attention)
        line("cross = true");
    if (spec.sinks)
        line("sinks = true");
    if (spec.lse_output)
        line("outputs = out, lse");
    if (spec.packed)
        line("layout = packed");
    for (const RuntimeTensor &tensor : spec.tensors)
        line("tensor " + tensor.name + "[" + dims_text(tensor) + "]" +
             (tensor.is_int32 ? ": i32" : ""));
    for (const RuntimeScalar &scalar : spec.scalars)
        line("scalar " + scalar.name + (scalar.is_int32 ? ": i32" : ""));
    if (spec.mask.any() || !spec.mask_predicates.empty())
        line("mask = " + mask_text(spec));
    if (spec.scale)
        line("scale = " + to_string(*number(*spec.scale)));
    if (spec.rope.any()) {
        line("rope = " + rope_text(spec.rope));
        if (spec.rope.theta != RopeSpec().theta)
            line("rope_theta = " + number_text(spec.rope.theta));
    }
    if (spec.rope.rotary_dim != 0)
        line("rotary_dim = " + std::to_string(spec.rope.rotary_dim));
    if (spec.rope.scaling.kind != RopeScaling::Kind::none)
        line("rope_scaling = " + to_string(spec.rope.scaling));
    if (spec.cache.any())
        line("cache = " + cache_text(spec.cache));
    if (spec.cache.dtype)
        line("cache_dtype = " + std::string(to_string(*spec.cache.dtype)));

    if (spec.score_mod)
        line("score_mod = " + to_string(*spec.score_mod));
    return text + "}\n";
}

} // namespace attngen
