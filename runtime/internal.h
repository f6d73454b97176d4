// Pieces of the runtime shared between its files; not part of the public API.
#pragma once

#include "attngen/runtime.h"

#include <cstdint>
#include <string>
#include <vector>

struct halide_buffer_t;

namespace attngen::internal {

/** An argument's name as error messages quote it: `name`. */
inline std::string quoted(const std::string &name) {
    return "`" + name + "`";
}

/** The value called `name` in a list of (name, value) pairs, or nullptr. */
template <typename List>
auto find_named(List &list, const std::string &name) -> decltype(&list.front().second) {
    for (auto &entry : list)
        if (entry.first == name)
            return &entry.second;
    return nullptr;
}

/** The tensor (is_scalar false) or scalar that `info` declares under `name`, or nullptr. */
inline const ExtraArgument *find_extra(const LayerInfo &info, const std::string &name,
                                       bool is_scalar) {
    for (int i = 0; i < info.extra_count; i++)
        if (info.extras[i].is_scalar == is_scalar && name == info.extras[i].name)
            return &info.extras[i];
    return nullptr;
}

/** The byte range [first, last] a tensor's elements occupy (its data pointer is non-null). */
struct Span {
    uintptr_t first = 0, last = 0;
};

/** The Span of a tensor whose shape (each size >= 1) and strides (each >= 0) are checked. */
inline Span span_of(const Layout &layout, const void *data) {
    uint64_t last = 0;
    for (int i = 0; i < layout.rank; i++)
        last +=
            static_cast<uint64_t>(layout.shape[i] - 1) * static_cast<uint64_t>(layout.strides[i]);
    auto first = reinterpret_cast<uintptr_t>(data);
    return {first, first + (last + 1) * dtype_size(layout.dtype) - 1};
}

/** Whether two spans share a byte. */
inline bool overlapping(const Span &a, const Span &b) {
    return a.first <= b.last && b.first <= a.last;
}

/**
 * Refuses dimension `i` of a tensor whose size is outside 1..INT32_MAX ("SUBJECT has MEANING
 * N", or "has size N in dimension i" without a meaning) or whose stride is outside 0..INT32_MAX.
 */
Status check_dimension(const std::string &subject, const Layout &layout, int i,
                       const char *meaning);

/**
 * Refuses a tensor to be written whose elements share addresses (writing through them would
 * race): "SUBJECT has overlapping elements: ...".
 */
Status check_distinct_elements(const std::string &subject, const Layout &layout);

/**
 * Element `offset` (in elements) of a host tensor of a float dtype (f32, f16, bf16), exactly,
 * widened to double (merge.cpp).
 */
double load_float(const void *data, DType dtype, int64_t offset);

/** What validation learns of a call's sizes, for run(). */
struct CallShape {
    int64_t batch = 0, query_len = 0;
    /** A cached layer's longest sequence after the call, at least 1: the pipeline's key_count. */
    int32_t key_count = 0;
};

/** Element (i, j) of a validated rank-1 or rank-2 i32 tensor in host memory. */
inline int32_t int_element(const Tensor &tensor, int64_t i, int64_t j = 0) {
    const auto *values = static_cast<const int32_t *>(tensor.data);
    return values[i * tensor.strides[0] + (tensor.rank > 1 ? j * tensor.strides[1] : 0)];
}

/** validate(), also giving the call's sizes: a batched layer's checks (a packed layer's per
 * sequence, on the views run_packed makes). */
Status validate_call(const Layer &layer, const Arguments &args, CallShape &shape);

/** Runs a batched layer's generated code on arguments validate_call accepted (run.cpp). */
Status call_layer(const Layer &layer, const Arguments &args, const CallShape &shape);

/**
 * A packed layer's run() or, with `validate_only`, validate(): the offsets and the whole tensors
 * checked, then each sequence's views checked by validate_call, then each run by call_layer
 * (packed.cpp).
 */
Status run_packed(const Layer &layer, const Arguments &args, bool validate_only);

/** One dimension of a tensor check_whole checks: its meaning and size, -1 for any size. */
struct WholeDim {
    const char *meaning;
    int64_t size;
};

/**
 * A tensor of a packed call as the caller gave it, before run_packed cuts it per sequence:
 * non-null, rank and dtype, sizes (where not -1), strides, and distinct elements when written.
 */
Status check_whole(const char *name, const Layout &layout, const void *data, DType dtype,
                   const std::vector<WholeDim> &dims, const LayerInfo &info, bool is_output);

/**
 * A cached layer's lengths, block table and rope tables across the batch (validate.cpp), with
 * the new tokens of sequence b given by `query_lengths`: every sequence fits, and no block is
 * written by two sequences. Sets shape.key_count.
 */
Status check_cache(const LayerInfo &info, const Arguments &args, CallShape &shape);

/** Installs the Halide hooks (error routing, scratch allocator) once. */
void install_halide_hooks();

/** Routes Halide errors to the call whose user_context raised them (run.cpp). */
void install_error_routing();

/** Installs the caching scratch allocator (scratch_allocator.cpp). */
void install_scratch_allocator();

/**
 * The variant of `layer` this call should run: a GPU variant when the GPU policy and the
 * machine allow (always, when `device_tensors`), else the first the CPU supports and the forced
 * variant allows. Records it for last_cpu_variant(); nullptr with `why` set when there is none.
 */
const LayerVariant *choose_variant(const Layer &layer, bool device_tensors, std::string &why);

/** Whether this machine can run a GPU variant (driver, device, CUDA compute capability). */
bool gpu_variant_runs(const LayerVariant &variant);

/** Records the device of the chosen variant for last_device() (gpu.cpp). */
void record_device(Device device);

/** Installs attngen's CUDA context and stream hooks into Halide's runtime (gpu.cpp). */
void install_cuda_hooks();

/**
 * Prepares a tensor's buffer for a GPU variant: wraps a device pointer (no copy), or marks host
 * input dirty so that Halide copies it in. detach_from_device undoes it after the call, copying
 * a host output back first.
 */
Status attach_to_device(Device device, void *user_context, halide_buffer_t *buffer, bool on_device,
                        bool is_output);
Status detach_from_device(Device device, void *user_context, halide_buffer_t *buffer,
                          bool on_device, bool is_output);

/** The variant force_cpu_variant set (automatic by default). */
CpuVariant forced_cpu_variant();

} // namespace attngen::internal
