// Shared by the tests: random problems for a generated layer, the matching double-precision
// reference problem, and error measures. Every random draw comes from a printed seed.
#pragma once

#include "attngen/runtime.h"
#include "reference_attention.h"
#include "storage_types.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace attngen_test {

/** The seed of a test: ATTNGEN_TEST_SEED if set, else `fallback`; printed by the caller. */
uint32_t test_seed(uint32_t fallback);

/** A tensor of the layer's storage type and the exact float values it holds. */
struct HostTensor {
    attngen::DType dtype = attngen::DType::f32;
    std::vector<int64_t> shape;
    std::vector<float> values;      ///< what the layer reads, after rounding to dtype
    std::vector<uint16_t> half;     ///< storage for f16/bf16
    std::vector<int32_t> ints;      ///< storage for i32
    std::vector<int8_t> bytes;      ///< storage for i8: values = bytes times the row's scale
    std::vector<float> unquantized; ///< i8: the values drawn, before quantization
    const void *data() const;
    attngen::Tensor view() const;
};

/** Random inputs for one call of a layer, with Lq, Lk and batch chosen by the caller. */
class Problem {
  public:
    Problem(const attngen::LayerInfo &info, int batch, int query_len, int key_len, uint32_t seed);

    /** Arguments over this problem's tensors, writing to `out` (out_shape(), layer dtype). */
    attngen::Arguments arguments(void *out) const;
    ReferenceProblem reference() const;

    std::vector<int64_t> out_shape() const;
    size_t out_elements() const;

    const attngen::LayerInfo &info;
    int batch, query_len, key_len;
    HostTensor query, key, value, x, context, wq, wk, wv, wo, bq, bk, bv, bo;
    /** kv_dtype = i8: key and value quantized per row (quantize_i8), and their rows' scales. */
    HostTensor key_scales, value_scales;
    HostTensor key_lengths, attn_bias;
    HostTensor rope_cos, rope_sin; ///< rope = table: cos and sin of random angles, (Lk, R / 2)
    HostTensor sinks;              ///< sinks = true: (H) f32 in [-3, 3]
    /** The layer's declared tensors (f32 in [-1, 1], i32 in [0, Lk]) and scalars (1.0). */
    std::map<std::string, HostTensor> tensors;
    std::map<std::string, double> scalars;
};

/**
 * An output buffer of the layer's dtype, read back as floats. i8 (a cache's storage) holds
 * `bytes` and a scale per row of `row` elements, and reads back as byte times scale.
 */
struct OutputBuffer {
    OutputBuffer(attngen::DType dtype, size_t elements, size_t row = 1);
    void *data();
    std::vector<float> values() const;
    attngen::DType dtype;
    std::vector<float> f32;
    std::vector<uint16_t> half;
    std::vector<int8_t> bytes;
    std::vector<float> scales; ///< i8: one per row of `row` elements
    size_t row = 1;
};

/**
 * An i8 cache row as attngen writes it: scale = max |x| / 127 (in f32, as the layer takes it
 * from f32 values) and each element round(x / scale), ties to even, in [-127, 127]. Returns the
 * scale; `bytes` gets the values.
 */
float quantize_row(const std::vector<double> &row, std::vector<int8_t> &bytes);

/** max |got - want| / max(max |want|, 1): the error measure the tolerances refer to. */
double relative_error(const std::vector<float> &got, const std::vector<double> &want);

/** The normwise tolerance for a storage type: f32 5e-6, f16 2e-3, bf16 1.6e-2 (the
 * f16/bf16 reference reads the same rounded inputs; the output rounding dominates). */
double tolerance_for(attngen::DType dtype);

/**
 * The error of a layer's lse against the reference's: max |got - want| / max(1, |want|) over
 * the finite elements; infinite where got is not exactly -inf where want is (a row that saw
 * nothing), or not NaN where want is, or of another size.
 */
double lse_error(const std::vector<float> &got, const std::vector<double> &want);

/**
 * The lse tolerance: 1e-5 (f32 scores of up to a few hundred dot products, max + log of a sum
 * of up to a few thousand exponentials), whatever the storage (the reference reads the same
 * rounded inputs and the lse is f32).
 */
constexpr double lse_tolerance = 1e-5;

/** Expects run(layer, args) to fail with a message containing `expected`. */
void check_refused(const attngen::Layer &layer, const attngen::Arguments &args,
                   const std::string &expected);

/**
 * The worst-case error of attention over i8 keys and values (an i8 cache, kv_dtype = i8)
 * against the unquantized values, for |q|, |K|, |V| <= 1 (docs/cache.md derives it).
 */
double i8_error_bound(int head_dim, double scale);

/**
 * The worst-case error that rounding the queries to 16 bits adds (the x86 split-KV form's
 * integer scores over i8 keys, AlgorithmOptions::integer_scores), for |q|, |K|, |V| <= 1.
 */
double query_rounding_error(int head_dim, double scale);

/**
 * A batched sequence tensor's first lengths[b] rows of each batch entry, end to end, as a packed
 * layer takes them: (B, heads, L, W) becomes (T, heads, W) and (B, L, W) becomes (T, W), in the
 * tensor's dtype. `view` reads `bytes`.
 */
struct PackedRows {
    std::vector<uint8_t> bytes;
    attngen::Tensor view;
};
PackedRows pack_rows(const attngen::Tensor &batched, const std::vector<int> &lengths);

/** (B + 1) cumulative offsets of `lengths`, from 0. */
std::vector<int32_t> offsets_of(const std::vector<int> &lengths);

/** "B=2 Lq=17 Lk=33 seed=123" for messages. */
std::string describe(const Problem &problem, uint32_t seed);

/** A call's batch size and lengths. */
struct Shape {
    int batch, query_len, key_len;
};

/** Fixed corner shapes (Lq or Lk = 1, odd lengths, Lq != Lk, batch > 1) and random ones. */
std::vector<Shape> shapes_for(uint32_t seed);

/** Decode shapes: Lq of 1 to 16 against longer key lengths. */
std::vector<Shape> decode_shapes();

/**
 * Runs `layer` on random problems of every shape (shapes_for(seed) unless given) and checks each
 * against the double-precision reference within tolerance_for(dtype) + extra_tolerance, and a
 * layer's lse (outputs = out, lse) within lse_tolerance.
 */
void check_against_reference(const attngen::Layer &layer, uint32_t base_seed,
                             const std::vector<Shape> &extra_shapes = {},
                             double extra_tolerance = 0.0);

/**
 * A layer with sinks (and no projections) on sinks at the edges: 4, -inf (no sink), NaN, +inf,
 * 60, -60, 0.5, -4, rotated over the heads in eight calls, so that each head meets each value;
 * with key padding, batch 0's rows see no key. Heads whose
 * sink is NaN or +inf must be NaN in every element; every other element within
 * tolerance_for(dtype) of the reference (max(1, max |reference|) scaled), fully masked rows
 * exactly 0.
 */
void check_sink_edges(const attngen::Layer &layer, uint32_t base_seed);

/** Adjusts a random problem (its declared tensors and scalars) and sets the reference's
 * modification to match. */
using Prepare = std::function<void(Problem &, ReferenceProblem &)>;

/**
 * Plants NaN, +inf and -inf, one element at a time, at random positions of each input the layer
 * reads (query, key, value or x, context; attn_bias; declared f32 tensors), on random problems
 * of several shapes, and checks every output element against the double-precision reference
 * under the rules of docs/api.md ("Non-finite inputs"): a NaN or infinity where the
 * reference has one, and within `tolerance` (tolerance_for(dtype) if 0) of it elsewhere. The
 * reference skips keys of weight 0 (PyTorch's math path adds 0 x V); where the planted element
 * feeds V, an output element may also be NaN where 0 x V makes the math path's NaN, or where
 * the reference has an infinity (a weight that underflows to 0 in f32 times inf).
 */
void check_non_finite(const attngen::Layer &layer, uint32_t base_seed, const Prepare &prepare = {},
                      double tolerance = 0.0);

/** Restores automatic dispatch even when a check fails. */
struct AutomaticDispatchOnExit {
    ~AutomaticDispatchOnExit() { (void)attngen::force_cpu_variant(attngen::CpuVariant::automatic); }
};

/**
 * Runs `check` once for each CPU variant of `layer` (AVX-512, AVX2 and baseline on x86;
 * arm_fp16 and baseline on AArch64) with that variant forced, and checks that the calls inside
 * ran it; automatic dispatch is restored afterwards, even when a check fails. A variant this CPU
 * cannot run must be refused by name, and is skipped with a warning; a GPU variant is skipped.
 */
void for_each_cpu_variant(const attngen::Layer &layer, const std::function<void()> &check);

} // namespace attngen_test
