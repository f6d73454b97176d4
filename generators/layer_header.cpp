// Writes the typed header of a generated layer (see layer_header.h).
#include "layer_header.h"

#include "dsl/layer_interface.h"

#include <fmt/format.h>
#include <iterator>

namespace attngen {

namespace {

const char *runtime_dtype(DType dtype) {
    switch (dtype) {
    case DType::f32:
        return "attngen::DType::f32";
    case DType::f16:
        return "attngen::DType::f16";
    case DType::bf16:
        return "attngen::DType::bf16";
    case DType::i8:
        return "attngen::DType::i8";
    }
    return "attngen::DType::f32";
}

/** The layer's attngen::RopeInfo as an initializer. */
std::string rope_info(const AttentionSpec &spec) {
    const RopeSpec &rope = spec.rope;
    const char *scaling = rope.scaling.kind == RopeScaling::Kind::linear   ? "linear"
                          : rope.scaling.kind == RopeScaling::Kind::llama3 ? "llama3"
                                                                           : "none";
    return fmt::format(
        "{{attngen::RopeKind::{}, {:.17g}, {}, attngen::RopeScalingKind::{}, {:.17g}, "
        "{:.17g}, {:.17g}, {}, {}}}",
        to_string(rope.kind), rope.theta, rope.any() ? spec.resolved_rotary_dim() : 0, scaling,
        rope.scaling.factor, rope.scaling.low_freq_factor, rope.scaling.high_freq_factor,
        rope.scaling.original_max_positions, rope.table ? "true" : "false");
}

/** The layer's attngen::CacheInfo as an initializer. */
std::string cache_info(const AttentionSpec &spec) {
    const char *kind = spec.cache.kind == CacheSpec::Kind::paged        ? "paged"
                       : spec.cache.kind == CacheSpec::Kind::contiguous ? "contiguous"
                                                                        : "none";
    return fmt::format("{{attngen::CacheKind::{}, {}, {}}}", kind, spec.cache.block_size,
                       runtime_dtype(spec.resolved_cache_dtype()));
}

const char *cpp_bool(bool value) {
    return value ? "true" : "false";
}

/**
 * LayerInfo's trailing fields (sinks, lse, kv_dtype, value_dim, packed), each written only up to
 * the last one that differs from its default, so that the headers of layers without them read as
 * before.
 */
std::string optional_info(const AttentionSpec &spec) {
    const std::string fields[] = {cpp_bool(spec.sinks), cpp_bool(spec.lse_output),
                                  runtime_dtype(spec.resolved_kv_dtype()),
                                  std::to_string(spec.resolved_value_dim()), cpp_bool(spec.packed)};
    const bool set[] = {spec.sinks, spec.lse_output, spec.kv_dtype.has_value(),
                        spec.resolved_value_dim() != spec.resolved_head_dim(), spec.packed};
    size_t count = 0;
    for (size_t i = 0; i < std::size(set); i++)
        if (set[i])
            count = i + 1;
    std::string text;
    for (size_t i = 0; i < count; i++)
        text += ", " + fields[i];
    return text;
}

/** A C++ string literal of `text`. */
std::string quote(const std::string &text) {
    std::string literal = "\"";
    for (char c : text) {
        if (c == '"' || c == '\\')
            literal += '\\';
        literal += c == '\n' ? ' ' : c;
    }
    return literal + "\"";
}

/** The score_mod and mask predicates as one line of text, for messages and documentation. */
std::string expressions_text(const AttentionSpec &spec) {
    std::string text;
    if (spec.score_mod)
        text = "score_mod = " + to_string(*spec.score_mod);
    for (const ModExprPtr &predicate : spec.mask_predicates)
        text += (text.empty() ? "" : "; ") + std::string("mask (") + to_string(*predicate) + ")";
    return text;
}

/** The ExtraArgument initializers of the declared tensors and scalars. */
std::string extras_table(const AttentionSpec &spec) {
    std::string rows;
    for (const RuntimeTensor &tensor : spec.tensors) {
        std::string dims;
        for (const TensorDim &dim : tensor.dims) {
            std::string code;
            switch (dim.symbol) {
            case TensorDim::Symbol::batch:
                code = "attngen::dim_batch";
                break;
            case TensorDim::Symbol::queries:
                code = "attngen::dim_queries";
                break;
            case TensorDim::Symbol::keys:
                code = "attngen::dim_keys";
                break;
            case TensorDim::Symbol::heads:
                code = std::to_string(spec.heads);
                break;
            case TensorDim::Symbol::kv_heads:
                code = std::to_string(spec.resolved_kv_heads());
                break;
            case TensorDim::Symbol::head_dim:
                code = std::to_string(spec.resolved_head_dim());
                break;
            case TensorDim::Symbol::fixed:
                code = std::to_string(dim.extent);
                break;
            }
            dims += (dims.empty() ? "" : ", ") + code;
        }
        rows += fmt::format("        {{\"{}\", false, attngen::DType::{}, {}, {{{}}}}},\n",
                            tensor.name, tensor.is_int32 ? "i32" : "f32", tensor.dims.size(), dims);
    }
    for (const RuntimeScalar &scalar : spec.scalars)
        rows += fmt::format("        {{\"{}\", true, attngen::DType::{}, 0, {{}}}},\n", scalar.name,
                            scalar.is_int32 ? "i32" : "f32");
    return rows;
}

/** The header's lines on a cached layer's caches, block table and lengths. */
std::string cache_docs(const AttentionSpec &spec) {
    std::string docs;
    auto line = [&](const std::string &text) { docs += " *   " + text + "\n"; };
    const std::string dv = spec.resolved_value_dim() != spec.resolved_head_dim() ? "Dv" : "D";
    const bool packed = spec.packed;
    const std::string dtype = to_string(spec.resolved_cache_dtype());
    if (spec.cache.kind == CacheSpec::Kind::paged) {
        line("k_cache, v_cache (blocks, Hkv, " + std::to_string(spec.cache.block_size) + ", D" +
             (dv == "D" ? "" : " and Dv") + ") " + dtype + ", appended to");
        line("block_table (B, max_blocks) int32");
    } else {
        line(std::string("k_cache, v_cache (B, Hkv, capacity, D") + (dv == "D" ? "" : " and Dv") +
             ") " + dtype + ", appended to");
    }
    if (spec.resolved_cache_dtype() == DType::i8)
        line(std::string("k_scales, v_scales ") +
             (spec.cache.kind == CacheSpec::Kind::paged
                  ? "(blocks, Hkv, " + std::to_string(spec.cache.block_size) + ")"
                  : "(B, Hkv, capacity)") +
             " f32: each cached row's scale, appended to");
    line(packed ? "cache_lengths (B) int32: tokens cached"
                : "cache_lengths (B) int32: tokens cached; query_lengths (B) int32, optional");
    return docs;
}

std::string argument_docs(const AttentionSpec &spec) {
    std::string docs;
    auto line = [&](const std::string &text) { docs += " *   " + text + "\n"; };
    const Projections &proj = spec.projections;
    // V's and the output's head size: Dv where the layer sets value_dim apart from D.
    const std::string dv = spec.resolved_value_dim() != spec.resolved_head_dim() ? "Dv" : "D";
    // A sequence tensor's shape: rows (B, L, width) and per head (B, heads, L, width), or
    // packed (T, width) and (T, heads, width), T the tokens of every sequence (Tq or Tk).
    const bool packed = spec.packed;
    auto shape = [&](const std::string &heads, char length, const std::string &width) {
        const std::string middle = heads.empty() ? "" : heads + ", ";
        return packed ? "(T" + std::string(1, length) + ", " + middle + width + ")"
                      : "(B, " + middle + "L" + std::string(1, length) + ", " + width + ")";
    };
    if (proj.any()) {
        line("x        " + shape("", 'q', "model_dim"));
        if (spec.cross_attention)
            line("context  " + shape("", 'k', "model_dim"));
        line("wq (H*D, model_dim), wk (Hkv*D, model_dim), wv (Hkv*" + dv + ", model_dim)");
        if (proj.bias)
            line("bq (H*D), bk (Hkv*D), bv (Hkv*" + dv + ")");
        if (proj.out)
            line("wo (model_dim, H*" + dv + (proj.bias ? "), bo (model_dim)" : ")"));
    } else if (spec.cache.any()) {
        line("query    " + shape("H", 'q', "D") + ": the new tokens");
        line("key      " + shape("Hkv", 'q', "D"));
        line("value    " + shape("Hkv", 'q', dv));
    } else {
        line("query    " + shape("H", 'q', "D"));
        const std::string kv_dtype =
            spec.kv_dtype ? " " + std::string(to_string(*spec.kv_dtype)) : "";
        line("key      " + shape("Hkv", 'k', "D") + kv_dtype);
        line("value    " + shape("Hkv", 'k', dv) + kv_dtype);
        if (spec.resolved_kv_dtype() == DType::i8)
            line("key_scales, value_scales (B, Hkv, Lk) f32: each key's and value's row scale");
    }
    if (packed) {
        line("query_offsets (B + 1) int32: sequence b's tokens are rows [offsets[b], "
             "offsets[b + 1])");
        if (!spec.cache.any() && !(proj.any() && !spec.cross_attention))
            line("key_offsets (B + 1) int32: the same for the keys (optional: query_offsets)");
    }
    if (spec.cache.any())
        docs += cache_docs(spec);
    if (spec.mask.key_padding)
        line("key_lengths (B) int32 in [0, Lk]");
    if (spec.mask.additive)
        line("attn_bias (B, H, Lq, Lk)");
    if (spec.sinks)
        line("sinks (H) f32: each head's sink logit, added to its softmax's denominator");
    if (spec.rope.table)
        line("rope_cos, rope_sin (Lk, " + std::to_string(spec.resolved_rotary_dim() / 2) +
             ") f32: cos and sin of each rotary pair's angle at key positions 0..Lk-1");
    for (const RuntimeTensor &tensor : spec.tensors) {
        std::string dims;
        for (const TensorDim &dim : tensor.dims)
            dims += (dims.empty() ? "" : ", ") + (dim.symbol == TensorDim::Symbol::fixed
                                                      ? std::to_string(dim.extent)
                                                      : symbol_name(dim.symbol));
        line("tensor " + tensor.name + " (" + dims + ") " + (tensor.is_int32 ? "i32" : "f32") +
             ", by args.set_tensor(\"" + tensor.name + "\", ...)");
    }
    for (const RuntimeScalar &scalar : spec.scalars)
        line("scalar " + scalar.name + " " + (scalar.is_int32 ? "i32" : "f32") +
             ", by args.set_scalar(\"" + scalar.name + "\", ...)");
    line("out      " + (proj.out ? shape("", 'q', "model_dim") : shape("H", 'q', dv)));
    if (spec.lse_output)
        line(std::string("lse      ") + (packed ? "(Tq, H)" : "(B, H, Lq)") +
             " f32: log-sum-exp of each row's scores (-inf: none visible)");
    return docs;
}

/** Declares variant `index` under its Halide symbol and wraps it in Halide's argv convention. */
std::string variant_thunk(const std::string &name, size_t index, const std::string &symbol,
                          const std::vector<EntryArgument> &arguments) {
    std::string params = "void const *", call = "*static_cast<void const **>(args[0])";
    for (size_t i = 0; i < arguments.size(); i++) {
        if (arguments[i].kind == EntryArgument::Kind::scalar) {
            // Halide's argv passes a pointer to each scalar.
            const char *type = arguments[i].is_int32 ? "int32_t" : "float";
            params += fmt::format(", {}", type);
            call += fmt::format(",\n        *static_cast<const {} *>(args[{}])", type, i + 1);
            continue;
        }
        params += ", struct halide_buffer_t *";
        call += fmt::format(",\n        static_cast<struct halide_buffer_t *>(args[{}])", i + 1);
    }
    // Halide's symbols contain '-': quoted, the assembler takes them as one name.
    return fmt::format(R"(extern "C" int {name}_variant_{index}({params}) __asm__("\"{symbol}\"");
inline int {name}_variant_{index}_argv(void **args) {{
    return {name}_variant_{index}({call});
}}
)",
                       fmt::arg("name", name), fmt::arg("index", index), fmt::arg("symbol", symbol),
                       fmt::arg("params", params), fmt::arg("call", call));
}

/**
 * The header comment's fields past the mask that only some layers have: sinks, value_dim,
 * kv_dtype, outputs, layout, rope, cache.
 */
std::string feature_comment(const AttentionSpec &spec) {
    std::string text = spec.sinks ? " sinks=true" : "";
    if (spec.packed)
        text += " layout=packed";
    if (spec.value_dim > 0)
        text += " value_dim=" + std::to_string(spec.resolved_value_dim());
    if (spec.kv_dtype)
        text += " kv_dtype=" + std::string(to_string(*spec.kv_dtype));
    if (spec.lse_output)
        text += " outputs=out,lse";
    if (spec.rope.any())
        text += "\n// rope=" + rope_text(spec.rope) +
                " rope_theta=" + number_text(spec.rope.theta) +
                " rotary_dim=" + std::to_string(spec.resolved_rotary_dim()) +
                " rope_scaling=" + to_string(spec.rope.scaling);
    if (spec.cache.any())
        text += "\n// cache=" + cache_text(spec.cache) +
                " cache_dtype=" + to_string(spec.resolved_cache_dtype());
    return text;
}

} // namespace

const char *cpu_variant_of(const std::string &target) {
    if (target.find("arm_fp16") != std::string::npos)
        return "attngen::CpuVariant::arm_fp16";
    if (target.find("avx512") != std::string::npos)
        return "attngen::CpuVariant::avx512";
    if (target.find("avx2") != std::string::npos)
        return "attngen::CpuVariant::avx2";
    return "attngen::CpuVariant::baseline";
}

const char *device_of(const std::string &target) {
    if (target.find("cuda") != std::string::npos)
        return "attngen::Device::cuda";
    if (target.find("opencl") != std::string::npos)
        return "attngen::Device::opencl";
    return "attngen::Device::cpu";
}

std::string layer_header(const AttentionSpec &spec, const std::vector<std::string> &targets) {
    return library_header({spec}, targets);
}

std::string library_header(const std::vector<AttentionSpec> &layers,
                           const std::vector<std::string> &targets) {
    std::string text =
        "// Generated by attngen " ATTNGEN_VERSION ". Do not edit.\n#pragma once\n\n"
        "#include \"attngen/runtime.h\"\n\n#include \"HalideRuntime.h\"\n\n"
        "#ifndef ATTNGEN_GENERATED_BY\n"
        "#define ATTNGEN_GENERATED_BY \"" ATTNGEN_VERSION "\" // the attngen version\n"
        "#endif\n";
    for (const AttentionSpec &spec : layers)
        text += "\n" + layer_definitions(spec, targets);
    return text;
}

std::string layer_definitions(const AttentionSpec &spec, const std::vector<std::string> &targets) {
    const std::string name = spec.name;
    const std::string halide = name + halide_function_suffix();
    const std::vector<EntryArgument> arguments = layer_arguments(spec);
    const std::string extras = extras_table(spec);
    std::string thunks, variants;
    for (size_t i = 0; i < targets.size(); i++) {
        // add_halide_library names each target's function <fn>-<target>; one target, <fn>.
        std::string symbol = targets.size() == 1 ? halide : halide + "-" + targets[i];
        thunks += variant_thunk(name, i, symbol, arguments);
        variants += fmt::format("        {{\"{}\", {}, {}_variant_{}_argv, {}}},\n", targets[i],
                                cpu_variant_of(targets[i]), name, i, device_of(targets[i]));
    }
    const Projections &proj = spec.projections;
    return fmt::format(
        R"(// The attention layer '{name}':
// heads={heads} kv_heads={kv_heads} head_dim={head_dim} model_dim={model_dim} scale={scale:.17g}
// dtype={dtype} projections={projections} bias={bias} cross={cross} mask={mask}{feature_comment}
{expression_comment}
extern "C" const struct halide_filter_metadata_t *{halide}_metadata();

// One thunk per compiled variant; the runtime dispatches over them on every call.
{thunks}
/** What '{name}' was generated for, and its variants, best first. */
inline const attngen::Layer &{name}_layer() {{
    static const attngen::LayerVariant variants[] = {{
{variants}    }};
{extras_decl}    static const attngen::Layer layer{{
        {{"{name}", {model_dim}, {heads}, {kv_heads}, {head_dim}, {scale:.17g}, {rt_dtype},
         {has_proj}, {has_out}, {bias}, {cross}, {causal}, {padding}, {window}, {additive},
         {expressions}, {extras_ptr}, {extra_count}, {rope}, {cache}{optional}}},
        {halide}_metadata,
        variants,
        {variant_count}}};
    return layer;
}}

/**
 * Runs '{name}' (attngen::run): arguments, row-major, {sizes},
 * H = {heads}, Hkv = {kv_heads}, D = {head_dim}{value_dim}:
{docs} */
inline attngen::Status {name}(const attngen::Arguments &args) {{
    return attngen::run({name}_layer(), args);
}}
)",
        fmt::arg("name", name), fmt::arg("halide", halide), fmt::arg("heads", spec.heads),
        fmt::arg("kv_heads", spec.resolved_kv_heads()),
        fmt::arg("head_dim", spec.resolved_head_dim()),
        fmt::arg("sizes", spec.packed ? "B = sequences, Tq/Tk = their query/key tokens end to end"
                                      : "B = batch, Lq/Lk = query/key lengths"),
        fmt::arg("value_dim", spec.resolved_value_dim() != spec.resolved_head_dim()
                                  ? ", Dv = " + std::to_string(spec.resolved_value_dim())
                                  : std::string()),
        fmt::arg("model_dim", spec.resolved_model_dim()), fmt::arg("scale", spec.resolved_scale()),
        fmt::arg("dtype", to_string(spec.dtype)), fmt::arg("rt_dtype", runtime_dtype(spec.dtype)),
        fmt::arg("projections", to_string(proj)), fmt::arg("bias", cpp_bool(proj.bias)),
        fmt::arg("cross", cpp_bool(spec.cross_attention)), fmt::arg("mask", to_string(spec.mask)),
        fmt::arg("has_proj", cpp_bool(proj.q)), fmt::arg("has_out", cpp_bool(proj.out)),
        fmt::arg("causal", cpp_bool(spec.mask.causal)),
        fmt::arg("padding", cpp_bool(spec.mask.key_padding)), fmt::arg("window", spec.mask.window),
        fmt::arg("additive", cpp_bool(spec.mask.additive)), fmt::arg("docs", argument_docs(spec)),
        fmt::arg("thunks", thunks), fmt::arg("variants", variants),
        fmt::arg("variant_count", targets.size()),
        fmt::arg("expressions", quote(expressions_text(spec))),
        fmt::arg("expression_comment", spec.score_mod || !spec.mask_predicates.empty()
                                           ? "// " + expressions_text(spec) + "\n"
                                           : std::string()),
        fmt::arg("extras_decl", extras.empty() ? std::string()
                                               : "    static const attngen::ExtraArgument extras[] "
                                                 "= {\n" +
                                                     extras + "    };\n"),
        fmt::arg("extras_ptr", extras.empty() ? "nullptr" : "extras"),
        fmt::arg("extra_count", spec.tensors.size() + spec.scalars.size()),
        fmt::arg("rope", rope_info(spec)), fmt::arg("cache", cache_info(spec)),
        fmt::arg("optional", optional_info(spec)),
        fmt::arg("feature_comment", feature_comment(spec)));
}

} // namespace attngen
