// Running a generated layer: caller tensors become halide_buffer_t views (no copies), matched to
// the entry point's arguments by name through its metadata; errors raised inside the generated
// code are routed back to the call that caused them through Halide's user_context.
#include "attngen/runtime.h"
#include "internal.h"

#include "HalideRuntime.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
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
                            {"rope_sin", &args.rope_sin}};
    for (const Named &input : inputs)
        if (std::strcmp(name, input.name) == 0) {
            *data = input.tensor->data;
            *on_device = input.tensor->on_device;
            return input.tensor;
        }
    const Tensor *declared = internal::find_named(args.tensors, name);
    if (declared != nullptr) {
        *data = declared->data;
        *on_device = declared->on_device;
    }
    return declared;
}

} // namespace

namespace internal {

void install_error_routing() {
    halide_set_error_handler(route_error);
}

} // namespace internal

Status run(const Layer &layer, const Arguments &args) {
    Status status = validate(layer, args);
    if (!status)
        return status;
    internal::install_halide_hooks();

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
        const Layout *layout = &args.out; // the one output, whatever Halide named it
        bool on_device = args.out.on_device;
        const bool is_output = arg.kind == halide_argument_kind_output_buffer;
        if (!is_output)
            layout = find_argument(args, arg.name, &data, &on_device);
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
    if (result == 0)
        return Status();
    std::string message = context.halide_error.empty()
                              ? "Halide error code " + std::to_string(result)
                              : context.halide_error;
    return Status::error("attngen: layer '" + std::string(layer.info.name) +
                         "' failed in generated code: " + message);
}

} // namespace attngen
