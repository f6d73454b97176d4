// Running a generated layer: caller tensors become halide_buffer_t views (no copies), matched to
// the entry point's arguments by name through its metadata; errors raised inside the generated
// code are routed back to the call that caused them through Halide's user_context.
#include "attngen/runtime.h"
#include "internal.h"

#include "HalideRuntime.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace attngen {

namespace {

/** What one call carries through the generated code; its address is the user_context. */
struct CallContext {
    std::string halide_error;
};

void route_error(void *user_context, const char *message) {
    if (user_context == nullptr)
        return; // not one of ours: nothing to attribute it to, and never abort
    auto *context = static_cast<CallContext *>(user_context);
    if (!context->halide_error.empty())
        context->halide_error += "; ";
    context->halide_error += message;
    while (!context->halide_error.empty() && context->halide_error.back() == '\n')
        context->halide_error.pop_back();
}

halide_type_t halide_type_of(DType dtype) {
    switch (dtype) {
    case DType::f32:
        return halide_type_t(halide_type_float, 32);
    case DType::f16:
        return halide_type_t(halide_type_float, 16);
    case DType::bf16:
        return halide_type_t(halide_type_bfloat, 16);
    case DType::i32:
        return halide_type_t(halide_type_int, 32);
    case DType::i8:
        return halide_type_t(halide_type_int, 8);
    }
    return halide_type_t(halide_type_float, 32);
}

/** A Halide view of a validated tensor: dimension 0 innermost, mins at 0. */
struct HalideView {
    halide_buffer_t buffer{};
    halide_dimension_t dims[Layout::max_rank]{};

    HalideView(const Layout &layout, const void *data) {
        for (int i = 0; i < layout.rank; i++) {
            int from = layout.rank - 1 - i;
            dims[i] = halide_dimension_t(0, static_cast<int32_t>(layout.shape[from]),
                                         static_cast<int32_t>(layout.strides[from]));
        }
        buffer.host = static_cast<uint8_t *>(const_cast<void *>(data));
        buffer.type = halide_type_of(layout.dtype);
        buffer.dimensions = layout.rank;
        buffer.dim = dims;
    }
    bool on_device = false;
    bool is_output = false;

    HalideView(const HalideView &) = delete;
    HalideView &operator=(const HalideView &) = delete;
};

/** The storage of a declared scalar, converted to its Halide type, for Halide's argv. */
union ScalarValue {
    float f32;
    int32_t i32;
};

const Layout *find_argument(const Arguments &args, const char *name, const void **data,
                            bool *on_device) {
    struct Named {
        const char *name;
        const Tensor *tensor;
    };
    const Named inputs[] = {{"query", &args.query},
                            {"key", &args.key},
                            {"value", &args.value},
                            {"x", &args.x},
                            {"context", &args.context},
                            {"wq", &args.wq},
                            {"wk", &args.wk},
                            {"wv", &args.wv},
                            {"wo", &args.wo},
                            {"bq", &args.bq},
                            {"bk", &args.bk},
                            {"bv", &args.bv},
                            {"bo", &args.bo},
                            {"key_lengths", &args.key_lengths},
                            {"attn_bias", &args.attn_bias},
                            {"rope_cos", &args.rope_cos},
                            {"rope_sin", &args.rope_sin},
                            {"sinks", &args.sinks},
                            {"key_scales", &args.key_scales},
                            {"value_scales", &args.value_scales},
                            {"block_table", &args.block_table},
                            {"cache_lengths", &args.cache_lengths},
                            {"query_lengths", &args.query_lengths}};
    const Tensor *declared = internal::find_named(args.tensors, name);
    for (const Named &input : inputs)
        // A layer generated before a built-in argument took its name may declare a tensor of
        // that name (sinks): the declared tensor serves it when the built-in is not given.
        if (std::strcmp(name, input.name) == 0 && (input.tensor->given() || declared == nullptr)) {
            *data = input.tensor->data;
            *on_device = input.tensor->on_device;
            return input.tensor;
        }
    const struct {
        const char *name;
        const MutableTensor *tensor;
    } written[] = {{"k_cache", &args.k_cache},
                   {"v_cache", &args.v_cache},
                   {"k_scales", &args.k_scales},
                   {"v_scales", &args.v_scales}};
    for (const auto &cache : written)
        if (std::strcmp(name, cache.name) == 0) {
            *data = cache.tensor->data;
            *on_device = cache.tensor->on_device;
            return cache.tensor;
        }
    if (declared != nullptr) {
        *data = declared->data;
        *on_device = declared->on_device;
    }
    return declared;
}

/** Whether Halide's name for an output buffer is `name` (Halide may add "$N" to it). */
bool output_named(const char *halide_name, const char *name) {
    const size_t length = std::strlen(name);
    return std::strncmp(halide_name, name, length) == 0 &&
           (halide_name[length] == '\0' || halide_name[length] == '$');
}

/**
 * A cached layer's part of a call: the query lengths when the caller gave none, the new rows the
 * pipeline outputs (B, Hkv, Lq, D), V's of value_dim, in the cache's type (with an i8 cache, their
 * scales (B, Hkv, Lq) f32), and their append to the caches.
 */
struct CacheCall {
    std::vector<int32_t> default_lengths;
    Tensor query_lengths;
    MutableTensor k_new, v_new, k_new_scales, v_new_scales;
    std::vector<uint8_t> k_rows, v_rows;
    std::vector<float> k_row_scales, v_row_scales;

    CacheCall(const LayerInfo &info, const Arguments &args, const internal::CallShape &shape) {
        if (!args.query_lengths.given()) {
            default_lengths.assign(static_cast<size_t>(shape.batch),
                                   static_cast<int32_t>(shape.query_len));
            query_lengths = view(default_lengths.data(), {shape.batch});
        }
        const DType dtype = info.cache.dtype;
        const size_t rows = static_cast<size_t>(shape.batch * info.kv_heads * shape.query_len);
        k_rows.resize(rows * static_cast<size_t>(info.head_dim) * dtype_size(dtype));
        v_rows.resize(rows * static_cast<size_t>(info.value_dim) * dtype_size(dtype));
        k_new = mutable_view(k_rows.data(), dtype,
                             {shape.batch, info.kv_heads, shape.query_len, info.head_dim});
        v_new = mutable_view(v_rows.data(), dtype,
                             {shape.batch, info.kv_heads, shape.query_len, info.value_dim});
        if (dtype != DType::i8)
            return;
        const size_t scales = static_cast<size_t>(shape.batch * info.kv_heads * shape.query_len);
        k_row_scales.resize(scales);
        v_row_scales.resize(scales);
        k_new_scales =
            mutable_view(k_row_scales.data(), {shape.batch, info.kv_heads, shape.query_len});
        v_new_scales =
            mutable_view(v_row_scales.data(), {shape.batch, info.kv_heads, shape.query_len});
    }

    /** The buffer of the pipeline's output `name`, or null if it is not one of the new rows. */
    const MutableTensor *new_rows(const char *name) const {
        const struct {
            const char *name;
            const MutableTensor *tensor;
        } outputs[] = {{"k_new_scales", &k_new_scales},
                       {"v_new_scales", &v_new_scales},
                       {"k_new", &k_new},
                       {"v_new", &v_new}};
        for (const auto &output : outputs)
            if (output_named(name, output.name))
                return output.tensor;
        return nullptr;
    }

    /**
     * Copies each sequence's new rows (and an i8 cache's scales) to positions [cache length, +
     * query length).
     */
    void append(const LayerInfo &info, const Arguments &args) const {
        const Tensor &lengths = args.query_lengths.given() ? args.query_lengths : query_lengths;
        const size_t element = dtype_size(info.cache.dtype);
        const size_t k_row_bytes = static_cast<size_t>(info.head_dim) * element;
        const size_t v_row_bytes = static_cast<size_t>(info.value_dim) * element;
        // What is appended: a row's bytes into each cache, a float into each scales tensor.
        struct Appended {
            const MutableTensor &to;
            const uint8_t *rows;
            size_t element, row_bytes;
        };
        std::vector<Appended> parts = {{args.k_cache, k_rows.data(), element, k_row_bytes},
                                       {args.v_cache, v_rows.data(), element, v_row_bytes}};
        if (!k_row_scales.empty())
            for (const auto &[to, rows] : {std::make_pair(&args.k_scales, &k_row_scales),
                                           std::make_pair(&args.v_scales, &v_row_scales)})
                parts.push_back({*to, reinterpret_cast<const uint8_t *>(rows->data()),
                                 sizeof(float), sizeof(float)});
        const int64_t block_size = info.cache.block_size;
        const bool paged = info.cache.kind == CacheKind::paged;
        for (int64_t b = 0; b < k_new.shape[0]; b++) {
            const int64_t cached = internal::int_element(args.cache_lengths, b);
            const int64_t fresh = internal::int_element(lengths, b);
            for (int64_t t = 0; t < fresh; t++) {
                const int64_t position = cached + t;
                // (sequence or block, slot) of the position in the caches and scales.
                int64_t outer = b, slot = position;
                if (paged) {
                    outer = internal::int_element(args.block_table, b, position / block_size);
                    slot = position % block_size;
                }
                for (int64_t h = 0; h < k_new.shape[1]; h++) {
                    const int64_t row = ((b * k_new.shape[1] + h) * k_new.shape[2] + t);
                    for (const Appended &part : parts) {
                        const int64_t offset = outer * part.to.strides[0] + h * part.to.strides[1] +
                                               slot * part.to.strides[2];
                        std::memcpy(static_cast<uint8_t *>(part.to.data) + offset * part.element,
                                    part.rows + row * part.row_bytes, part.row_bytes);
                    }
                }
            }
        }
    }
};

} // namespace

namespace internal {

void install_error_routing() {
    halide_set_error_handler(route_error);
}

} // namespace internal

Status run(const Layer &layer, const Arguments &args) {
    if (layer.info.packed)
        return internal::run_packed(layer, args, false);
    internal::CallShape shape;
    if (Status status = internal::validate_call(layer, args, shape); !status)
        return status;
    return internal::call_layer(layer, args, shape);
}

namespace internal {

Status call_layer(const Layer &layer, const Arguments &args, const CallShape &shape) {
    Status status;
    install_halide_hooks();
    std::unique_ptr<CacheCall> cache;
    if (layer.info.cache.kind != CacheKind::none)
        cache = std::make_unique<CacheCall>(layer.info, args, shape);

    const halide_filter_metadata_t *metadata = layer.metadata();
    CallContext context;
    void *user_context = &context;
    std::vector<void *> argv(metadata->num_arguments, nullptr);
    std::vector<std::unique_ptr<HalideView>> views;
    std::vector<ScalarValue> scalars(metadata->num_arguments);
    bool has_user_context = false;
    bool device_tensors = false;
    for (int i = 0; i < metadata->num_arguments; i++) {
        const halide_filter_argument_t &arg = metadata->arguments[i];
        if (std::strcmp(arg.name, "__user_context") == 0) {
            argv[i] = &user_context;
            has_user_context = true;
            continue;
        }
        if (cache && std::strcmp(arg.name, "key_count") == 0) {
            scalars[i].i32 = shape.key_count;
            argv[i] = &scalars[i];
            continue;
        }
        if (arg.kind == halide_argument_kind_input_scalar) {
            const double *given = internal::find_named(args.scalars, arg.name);
            if (given == nullptr)
                return Status::error("attngen: layer '" + std::string(layer.info.name) +
                                     "' needs scalar `" + arg.name + "` but it was not given");
            if (arg.type.code == halide_type_int)
                scalars[i].i32 = static_cast<int32_t>(*given);
            else
                scalars[i].f32 = static_cast<float>(*given);
            argv[i] = &scalars[i];
            continue;
        }
        const void *data = args.out.data;
        const Layout *layout = &args.out; // the output, whatever Halide named it
        bool on_device = args.out.on_device;
        const bool is_output = arg.kind == halide_argument_kind_output_buffer;
        const MutableTensor *new_rows = cache && is_output ? cache->new_rows(arg.name) : nullptr;
        if (is_output && output_named(arg.name, "lse")) {
            layout = &args.lse;
            data = args.lse.data;
            on_device = args.lse.on_device;
        } else if (new_rows != nullptr) {
            layout = new_rows;
            data = new_rows->data;
            on_device = false;
        } else if (cache && !args.query_lengths.given() &&
                   std::strcmp(arg.name, "query_lengths") == 0) {
            layout = &cache->query_lengths;
            data = cache->query_lengths.data;
            on_device = false;
        } else if (!is_output) {
            layout = find_argument(args, arg.name, &data, &on_device);
        }
        if (layout == nullptr)
            return Status::error("attngen: layer '" + std::string(layer.info.name) +
                                 "' has an argument `" + arg.name +
                                 "` this runtime does not know; regenerate it with this attngen");
        views.push_back(std::make_unique<HalideView>(*layout, data));
        views.back()->on_device = on_device;
        views.back()->is_output = is_output;
        device_tensors = device_tensors || on_device;
        argv[i] = &views.back()->buffer;
    }
    if (!has_user_context)
        return Status::error("attngen: layer '" + std::string(layer.info.name) +
                             "' was generated without the user_context feature");

    std::string why;
    const LayerVariant *variant = internal::choose_variant(layer, device_tensors, why);
    if (variant == nullptr) {
        std::string targets;
        for (int i = 0; i < layer.variant_count; i++)
            targets += std::string(i ? ", " : "") + layer.variants[i].target;
        return Status::error("attngen: layer '" + std::string(layer.info.name) +
                             "' cannot run: " + why + "; it has " + targets);
    }
    const Device device = variant->device;
    size_t attached = 0;
    if (device != Device::cpu) {
        for (; attached < views.size(); attached++) {
            HalideView &view = *views[attached];
            status = internal::attach_to_device(device, user_context, &view.buffer, view.on_device,
                                                view.is_output);
            if (!status)
                break;
        }
    }
    int result = status ? variant->entry(argv.data()) : 0;
    // Undo every attach, copying a host output back, even when the call failed.
    for (size_t i = 0; i < attached; i++) {
        HalideView &view = *views[i];
        Status detached = internal::detach_from_device(
            device, user_context, &view.buffer, view.on_device, view.is_output && result == 0);
        if (status && result == 0 && !detached)
            status = detached;
    }
    if (!status)
        return status;
    if (result == 0) {
        if (cache)
            cache->append(layer.info, args);
        return Status();
    }
    std::string message = context.halide_error.empty()
                              ? "Halide error code " + std::to_string(result)
                              : context.halide_error;
    return Status::error("attngen: layer '" + std::string(layer.info.name) +
                         "' failed in generated code: " + message);
}

} // namespace internal

} // namespace attngen
