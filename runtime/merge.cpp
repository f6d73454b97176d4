// merge_attention: partial attention results over disjoint sets of keys, combined exactly by
// their log-sum-exp (cascade and shared-prefix attention, a context split across calls or
// devices, attngen's output merged with another kernel's).
#include "attngen/runtime.h"
#include "internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace attngen {

namespace {

/** Elements a merge may address: far beyond any real call, far below overflowing an offset. */
constexpr int64_t max_elements = int64_t(1) << 47;

/** A 16-bit float format: bits of the stored significand, exponent bias, quiet NaN. */
struct HalfFormat {
    int mantissa_bits;
    int bias;
    uint16_t quiet_nan;
};

constexpr HalfFormat f16_format{10, 15, 0x7e00};
constexpr HalfFormat bf16_format{7, 127, 0x7fc0};

const HalfFormat &format_of(DType dtype) {
    return dtype == DType::f16 ? f16_format : bf16_format;
}

/** The 16-bit value of `bits`, exactly. */
double decode_half(uint16_t bits, const HalfFormat &format) {
    const int exponent_bits = 15 - format.mantissa_bits;
    const int max_exponent = (1 << exponent_bits) - 1;
    const int exponent = (bits >> format.mantissa_bits) & max_exponent;
    const int mantissa = bits & ((1 << format.mantissa_bits) - 1);
    const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
    if (exponent == max_exponent)
        return mantissa ? std::numeric_limits<double>::quiet_NaN()
                        : sign * std::numeric_limits<double>::infinity();
    const int scale = 1 - format.bias - format.mantissa_bits; // of the subnormals' unit
    if (exponent == 0)
        return sign * std::ldexp(mantissa, scale);
    return sign * std::ldexp(mantissa + (1 << format.mantissa_bits), scale + exponent - 1);
}

/**
 * `value` rounded once, to nearest even, to the 16-bit format: the value is rounded to a
 * multiple of its binade's unit in double (exact: the unit is a power of two and the quotient
 * small), then encoded, so no intermediate float rounds it twice.
 */
uint16_t encode_half(double value, const HalfFormat &format) {
    const uint16_t sign = std::signbit(value) ? 0x8000u : 0;
    const int exponent_bits = 15 - format.mantissa_bits;
    const auto infinity = static_cast<uint16_t>(((1 << exponent_bits) - 1) << format.mantissa_bits);
    if (std::isnan(value))
        return static_cast<uint16_t>(sign | format.quiet_nan);
    const double magnitude = std::fabs(value);
    const int min_exponent = 1 - format.bias; // of the normals
    int exponent = min_exponent;
    if (magnitude >= std::ldexp(1.0, min_exponent))
        exponent = std::ilogb(magnitude);
    const double unit = std::ldexp(1.0, exponent - format.mantissa_bits);
    const double rounded = std::nearbyint(magnitude / unit) * unit; // ties to even by default
    const double limit = std::ldexp(2.0, format.bias); // the first power of two past the range
    if (std::isinf(value) || rounded >= limit)
        return static_cast<uint16_t>(sign | infinity);
    if (rounded < std::ldexp(1.0, min_exponent)) // subnormal or zero
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(rounded / unit));
    const int stored = std::ilogb(rounded); // may be one binade up after rounding
    const double significand = std::ldexp(rounded, format.mantissa_bits - stored);
    const auto mantissa = static_cast<uint16_t>(significand - (1 << format.mantissa_bits));
    return static_cast<uint16_t>(sign | ((stored + format.bias) << format.mantissa_bits) |
                                 mantissa);
}

/** Stores `value` into element `offset` of a host tensor of a float dtype, rounded once. */
void store(void *data, DType dtype, int64_t offset, double value) {
    if (dtype == DType::f32)
        static_cast<float *>(data)[offset] = static_cast<float>(value);
    else
        static_cast<uint16_t *>(data)[offset] = encode_half(value, format_of(dtype));
}

std::string shape_text(const Layout &layout) {
    std::string text = "(";
    for (int i = 0; i < layout.rank; i++)
        text += (i ? ", " : "") + std::to_string(layout.shape[i]);
    return text + ")";
}

/** A tensor of the merge, by name, as its checks and loops see it. */
struct Operand {
    std::string name; ///< "`out`", "`parts[2].lse`", ...
    const Layout *layout;
    const void *data;
    bool on_device;
};

/**
 * The checks of one tensor on its own: given, in host memory, a valid layout of `rank`
 * dimensions (0: 2 to max_rank, an attention output's (..., D)), each size in 1..INT32_MAX and
 * each stride in 0..INT32_MAX (any stride: the merge is plain loops).
 */
Status check_operand(const Operand &operand, int rank) {
    const Layout &layout = *operand.layout;
    const std::string &name = operand.name;
    if (operand.data == nullptr)
        return Status::error("attngen: merge_attention: " + name + " has a null data pointer");
    if (operand.on_device)
        return Status::error("attngen: merge_attention: " + name +
                             " is device memory; merge_attention reads and writes host memory");
    if (layout.rank == -1)
        return Status::error("attngen: merge_attention: " + name +
                             " was given different numbers of sizes and strides");
    if (rank == 0 && (layout.rank < 2 || layout.rank > Layout::max_rank))
        return Status::error("attngen: merge_attention: " + name + " must have rank 2 to " +
                             std::to_string(Layout::max_rank) + " (..., D), got rank " +
                             std::to_string(layout.rank));
    if (rank != 0 && layout.rank != rank)
        return Status::error("attngen: merge_attention: " + name + " must have rank " +
                             std::to_string(rank) + ", got rank " + std::to_string(layout.rank));
    rank = layout.rank;
    for (int i = 0; i < rank; i++)
        if (Status status =
                internal::check_dimension("attngen: merge_attention: " + name, layout, i, nullptr);
            !status)
            return status;
    return Status();
}

/** The checks of a part's tensor against the output it merges into: dtype and shape. */
Status check_like(const Operand &part, const Operand &output) {
    const Layout &got = *part.layout, &want = *output.layout;
    if (got.dtype != want.dtype)
        return Status::error("attngen: merge_attention: " + part.name + " has dtype " +
                             dtype_name(got.dtype) + " but " + output.name + " has " +
                             dtype_name(want.dtype));
    if (!std::equal(got.shape, got.shape + got.rank, want.shape))
        return Status::error("attngen: merge_attention: " + part.name + " has shape " +
                             shape_text(got) + " but " + output.name + " has " + shape_text(want));
    return Status();
}

/** Whether two tensors are the same elements: one data pointer, dtype and layout. */
bool same_tensor(const Operand &a, const Operand &b) {
    return a.data == b.data && a.layout->dtype == b.layout->dtype &&
           std::equal(a.layout->strides, a.layout->strides + a.layout->rank, b.layout->strides);
}

/** Refuses an output that shares memory with `other` unless it is the same tensor. */
Status check_apart(const Operand &output, const Operand &other, bool may_be_same) {
    if (may_be_same && same_tensor(output, other))
        return Status();
    if (internal::overlapping(internal::span_of(*output.layout, output.data),
                              internal::span_of(*other.layout, other.data)))
        return Status::error(
            "attngen: merge_attention: " + output.name + " overlaps " + other.name +
            (may_be_same ? "; it may be that very tensor (the same data, dtype and strides: "
                           "merging in place) but must not otherwise share memory with it"
                         : "; they must not share memory"));
    return Status();
}

/** The output tensors' checks: dtypes, ranks, a bounded size, distinct elements, apart. */
Status check_outputs(const Operand &out, const Operand &lse) {
    const Layout &layout = *out.layout;
    if (Status status = check_operand(out, 0); !status)
        return status;
    if (layout.dtype != DType::f32 && layout.dtype != DType::f16 && layout.dtype != DType::bf16)
        return Status::error("attngen: merge_attention: `out` has dtype " +
                             std::string(dtype_name(layout.dtype)) +
                             "; it must be f32, f16 or bf16");
    if (Status status = check_operand(lse, layout.rank - 1); !status)
        return status;
    if (lse.layout->dtype != DType::f32)
        return Status::error("attngen: merge_attention: `lse` has dtype " +
                             std::string(dtype_name(lse.layout->dtype)) + "; it must be f32");
    if (!std::equal(lse.layout->shape, lse.layout->shape + lse.layout->rank, layout.shape))
        return Status::error("attngen: merge_attention: `lse` has shape " +
                             shape_text(*lse.layout) + " but must be `out`'s " +
                             shape_text(layout) + " without its last dimension");
    int64_t elements = 1;
    for (int i = 0; i < layout.rank; i++)
        if (__builtin_mul_overflow(elements, layout.shape[i], &elements) || elements > max_elements)
            return Status::error("attngen: merge_attention: `out` has shape " + shape_text(layout) +
                                 "; at most 2^47 elements are merged");
    for (const Operand *output : {&out, &lse})
        if (Status status = internal::check_distinct_elements(
                "attngen: merge_attention: " + output->name, *output->layout);
            !status)
            return status;
    return check_apart(out, lse, false);
}

/** Every check of a merge, in the order the arguments are given; nothing is written. */
Status check_merge(const std::vector<AttentionPart> &parts, const Operand &out,
                   const Operand &lse) {
    if (parts.empty())
        return Status::error("attngen: merge_attention: `parts` is empty; give at least one");
    if (Status status = check_outputs(out, lse); !status)
        return status;
    for (size_t i = 0; i < parts.size(); i++) {
        const std::string prefix = "`parts[" + std::to_string(i) + "].";
        const Operand part_out{prefix + "out`", &parts[i].out, parts[i].out.data,
                               parts[i].out.on_device};
        const Operand part_lse{prefix + "lse`", &parts[i].lse, parts[i].lse.data,
                               parts[i].lse.on_device};
        for (const auto &[part, output] :
             {std::make_pair(&part_out, &out), std::make_pair(&part_lse, &lse)}) {
            if (Status status = check_operand(*part, output->layout->rank); !status)
                return status;
            if (Status status = check_like(*part, *output); !status)
                return status;
        }
        // In place: `out` may be a part's out and `lse` a part's lse, nothing else.
        for (const auto &[output, part, may_be_same] :
             {std::make_tuple(&out, &part_out, true), std::make_tuple(&out, &part_lse, false),
              std::make_tuple(&lse, &part_lse, true), std::make_tuple(&lse, &part_out, false)})
            if (Status status = check_apart(*output, *part, may_be_same); !status)
                return status;
    }
    return Status();
}

/** The element offset of one row (an index over all of lse's dimensions) in `layout`. */
int64_t row_offset(const Layout &layout, const int64_t *index, int rows_rank) {
    int64_t offset = 0;
    for (int i = 0; i < rows_rank; i++)
        offset += index[i] * layout.strides[i];
    return offset;
}

/**
 * Merges one row: reads every part's lse, then each element of every part's out before
 * writing that element, so that an output that is one of the parts is merged in place.
 * `weights` holds a weight per part, -1 for a part that saw no key (lse -inf), which adds
 * nothing whatever its out holds.
 */
void merge_row(const std::vector<AttentionPart> &parts, const MutableTensor &out,
               const MutableTensor &lse, const int64_t *index, std::vector<double> &weights) {
    const int rows_rank = lse.rank;
    constexpr double infinity = std::numeric_limits<double>::infinity();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    double top = -infinity;
    bool poisoned = false;
    for (size_t i = 0; i < parts.size(); i++) {
        const Tensor &part = parts[i].lse;
        weights[i] =
            internal::load_float(part.data, DType::f32, row_offset(part, index, rows_rank));
        poisoned = poisoned || std::isnan(weights[i]) || weights[i] == infinity;
        top = std::max(top, weights[i]);
    }
    double total = 0.0;
    for (double &weight : weights) {
        weight = weight == -infinity ? -1.0 : std::exp(weight - top);
        total += std::max(weight, 0.0);
    }
    const int64_t out_row = row_offset(out, index, rows_rank);
    for (int64_t d = 0; d < out.shape[out.rank - 1]; d++) {
        double sum = -0.0; // so that a single part's -0 stays -0
        for (size_t i = 0; i < parts.size() && !poisoned; i++)
            if (weights[i] >= 0.0)
                sum +=
                    weights[i] * internal::load_float(parts[i].out.data, parts[i].out.dtype,
                                                      row_offset(parts[i].out, index, rows_rank) +
                                                          d * parts[i].out.strides[rows_rank]);
        const double value = poisoned ? nan : top == -infinity ? 0.0 : sum / total;
        store(out.data, out.dtype, out_row + d * out.strides[rows_rank], value);
    }
    const double merged = poisoned ? nan : top == -infinity ? -infinity : top + std::log(total);
    store(lse.data, DType::f32, row_offset(lse, index, rows_rank), merged);
}

} // namespace

namespace internal {

double load_float(const void *data, DType dtype, int64_t offset) {
    if (dtype == DType::f32)
        return static_cast<const float *>(data)[offset];
    return decode_half(static_cast<const uint16_t *>(data)[offset], format_of(dtype));
}

} // namespace internal

Status merge_attention(const std::vector<AttentionPart> &parts, const MutableTensor &out,
                       const MutableTensor &lse) {
    const Operand out_operand{"`out`", &out, out.data, out.on_device};
    const Operand lse_operand{"`lse`", &lse, lse.data, lse.on_device};
    if (Status status = check_merge(parts, out_operand, lse_operand); !status)
        return status;
    std::vector<double> weights(parts.size());
    int64_t index[Layout::max_rank] = {};
    for (;;) {
        merge_row(parts, out, lse, index, weights);
        int i = lse.rank - 1;
        for (; i >= 0 && ++index[i] == lse.shape[i]; i--)
            index[i] = 0;
        if (i < 0)
            return Status();
    }
}

} // namespace attngen
