// Element types, Status and the tensor views applications build over their own memory.
#include "attngen/runtime.h"
#include "internal.h"

#include <algorithm>

namespace attngen {

size_t dtype_size(DType dtype) {
    switch (dtype) {
    case DType::f32:
    case DType::i32:
        return 4;
    case DType::f16:
    case DType::bf16:
        return 2;
    case DType::i8:
        return 1;
    }
    return 4;
}

const char *dtype_name(DType dtype) {
    switch (dtype) {
    case DType::f32:
        return "f32";
    case DType::f16:
        return "f16";
    case DType::bf16:
        return "bf16";
    case DType::i32:
        return "i32";
    case DType::i8:
        return "i8";
    }
    return "?";
}

Status Status::error(std::string message) {
    Status status;
    status.failed_ = true;
    status.message_ = std::move(message);
    return status;
}

namespace {

/** Fills shape and strides; a rank above max_rank is kept so that validation reports it. */
void set_layout(Layout &layout, DType dtype, std::initializer_list<int64_t> shape,
                std::initializer_list<int64_t> strides) {
    layout.dtype = dtype;
    layout.rank = static_cast<int>(shape.size());
    int n = std::min<int>(layout.rank, Layout::max_rank);
    std::copy_n(shape.begin(), n, layout.shape);
    if (strides.size() == shape.size()) {
        std::copy_n(strides.begin(), n, layout.strides);
        return;
    }
    // Saturates where the product would overflow: validation then reports the shape.
    int64_t stride = 1;
    for (int i = n - 1; i >= 0; i--) {
        layout.strides[i] = stride;
        if (__builtin_mul_overflow(stride, layout.shape[i], &stride))
            stride = INT64_MAX;
    }
}

} // namespace

Tensor view(const float *data, std::initializer_list<int64_t> shape) {
    return view(data, DType::f32, shape);
}

Tensor view(const int32_t *data, std::initializer_list<int64_t> shape) {
    return view(data, DType::i32, shape);
}

Tensor view(const void *data, DType dtype, std::initializer_list<int64_t> shape) {
    Tensor tensor;
    tensor.data = data;
    set_layout(tensor, dtype, shape, {});
    return tensor;
}

Tensor strided_view(const void *data, DType dtype, std::initializer_list<int64_t> shape,
                    std::initializer_list<int64_t> strides) {
    Tensor tensor = view(data, dtype, shape);
    if (strides.size() != shape.size())
        tensor.rank = -1; // reported by validation: shape and strides disagree
    else
        set_layout(tensor, dtype, shape, strides);
    return tensor;
}

MutableTensor mutable_view(float *data, std::initializer_list<int64_t> shape) {
    return mutable_view(data, DType::f32, shape);
}

MutableTensor mutable_view(void *data, DType dtype, std::initializer_list<int64_t> shape) {
    MutableTensor tensor;
    tensor.data = data;
    set_layout(tensor, dtype, shape, {});
    return tensor;
}

MutableTensor strided_mutable_view(void *data, DType dtype, std::initializer_list<int64_t> shape,
                                   std::initializer_list<int64_t> strides) {
    MutableTensor tensor = mutable_view(data, dtype, shape);
    if (strides.size() != shape.size())
        tensor.rank = -1;
    else
        set_layout(tensor, dtype, shape, strides);
    return tensor;
}

Arguments &Arguments::set_tensor(const std::string &name, const Tensor &tensor) {
    if (Tensor *given = internal::find_named(tensors, name))
        *given = tensor;
    else
        tensors.emplace_back(name, tensor);
    return *this;
}

Arguments &Arguments::set_scalar(const std::string &name, double value) {
    if (double *given = internal::find_named(scalars, name))
        *given = value;
    else
        scalars.emplace_back(name, value);
    return *this;
}

} // namespace attngen
