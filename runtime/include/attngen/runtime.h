// attngen runtime: what an application calls to run a generated attention layer on its own
// memory. It checks every argument against what the layer was generated for, reports problems
// as values (never aborts), and owns the process-wide hooks (threads, allocator, CPU dispatch).
// It depends only on the Halide runtime that the generated libraries share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

struct halide_filter_metadata_t;

namespace attngen {

/** Element types of tensors. Layers store f32, f16 or bf16; key lengths are i32. */
/**
 * i8: 8-bit storage of a KV cache (cache_dtype = i8) or of the key and value inputs (kv_dtype =
 * i8), with an f32 scale per row beside it: element d of a row is values[d] * scale.
 */
enum class DType { f32, f16, bf16, i32, i8 };

/** The size of one element in bytes. */
size_t dtype_size(DType dtype);
const char *dtype_name(DType dtype);

/** The outcome of a call: ok, or a message that names the argument, expected and actual. */
class Status {
  public:
    Status() = default;
    static Status error(std::string message);
    bool ok() const { return !failed_; }
    explicit operator bool() const { return ok(); }
    const std::string &message() const { return message_; }

  private:
    bool failed_ = false;
    std::string message_;
};

/** Shape and strides of a tensor, row-major like NumPy and PyTorch: shape[0] is outermost. */
struct Layout {
    static constexpr int max_rank = 4;
    DType dtype = DType::f32;
    int rank = 0; ///< 0 means "not given"
    int64_t shape[max_rank] = {};
    int64_t strides[max_rank] = {}; ///< in elements; the innermost must be 1
};

/**
 * A read-only tensor in caller memory. attngen never copies host memory for a CPU variant.
 * `on_device` marks `data` as GPU memory of the API the layer's GPU variant runs on: a
 * CUdeviceptr for CUDA, a cl_mem for OpenCL. Device tensors are wrapped, never copied, and need
 * a GPU variant to run; host tensors given to a GPU variant are copied to the device and back.
 */
struct Tensor : Layout {
    const void *data = nullptr;
    bool on_device = false;
    bool given() const { return rank != 0 || data != nullptr; }
};

/** A tensor attngen writes. Only the elements its shape and strides name are written. */
struct MutableTensor : Layout {
    void *data = nullptr;
    bool on_device = false; ///< as for Tensor
    bool given() const { return rank != 0 || data != nullptr; }
};

/** Row-major dense views; `strided` variants take explicit strides (in elements). */
Tensor view(const float *data, std::initializer_list<int64_t> shape);
Tensor view(const int32_t *data, std::initializer_list<int64_t> shape);
Tensor view(const void *data, DType dtype, std::initializer_list<int64_t> shape);
Tensor strided_view(const void *data, DType dtype, std::initializer_list<int64_t> shape,
                    std::initializer_list<int64_t> strides);
MutableTensor mutable_view(float *data, std::initializer_list<int64_t> shape);
MutableTensor mutable_view(void *data, DType dtype, std::initializer_list<int64_t> shape);
MutableTensor strided_mutable_view(void *data, DType dtype, std::initializer_list<int64_t> shape,
                                   std::initializer_list<int64_t> strides);

/**
 * The arguments of one call. Which ones a layer takes follows from its description; giving one
 * it does not take is an error. B = batch, Lq/Lk = query/key lengths, H/Hkv = query/kv heads,
 * D = head_dim, Dv = value_dim (D unless the layer sets it), M = model_dim. Weights are stored as
 * nn.Linear stores them: (out, in).
 */
struct Arguments {
    // Layers without projections: per-head tensors.
    Tensor query; ///< (B, H, Lq, D)
    Tensor key;   ///< (B, Hkv, Lk, D)
    Tensor value; ///< (B, Hkv, Lk, Dv)
    // Layers with kv_dtype = i8: key and value hold round(x / scale) in [-127, 127] per row,
    // with one f32 scale per key and kv head, max |x| / 127 of the row. Must be finite.
    Tensor key_scales, value_scales; ///< (B, Hkv, Lk) f32
    // Layers with projections.
    Tensor x;              ///< (B, Lq, M); keys and values too in self-attention
    Tensor context;        ///< (B, Lk, M); cross-attention only
    Tensor wq, wk, wv, wo; ///< (H*D, M), (Hkv*D, M), (Hkv*Dv, M), (M, H*Dv)
    Tensor bq, bk, bv, bo; ///< (H*D), (Hkv*D), (Hkv*Dv), (M); layers with bias only
    // Masks.
    Tensor key_lengths; ///< (B) int32 in [0, Lk]: keys at or past it are masked
    Tensor attn_bias;   ///< (B, H, Lq, Lk), added to the scores; -inf masks
    // Rotary embeddings from tables (rope = table): f32 cos and sin of each rotary pair's angle
    // at each key position 0..Lk-1 (a query q sits at q + Lk - Lq, so Lq <= Lk).
    Tensor rope_cos, rope_sin; ///< (Lk, rotary_dim / 2) f32
    // Attention sinks (sinks = true): a logit per query head that joins each row's softmax
    // denominator as exp(sinks[h] - max) and adds no value. -inf is no sink; NaN and +inf make
    // the head's rows NaN.
    Tensor sinks; ///< (H) f32
    // KV cache (layers with `cache`). The new tokens are query, key and value (B, H or Hkv,
    // Lq, D), or x (B, Lq, M); new token t of sequence b sits at position cache_lengths[b] + t.
    // The call writes the new tokens' K (rotated) and V at positions [cache_lengths[b],
    // cache_lengths[b] + query_lengths[b]) of sequence b's cache, after the attention has run
    // and only when it succeeded; nothing else in the caches is written.
    MutableTensor k_cache, v_cache; ///< in the cache dtype: contiguous (B, Hkv, capacity, D);
                                    ///< paged (blocks, Hkv, block_size, D); V's rows are Dv
    // An i8 cache (cache_dtype = i8): one f32 scale per position and kv head, the caches' shape
    // without D; element (.., d) of a cached row holds round(x / scale) in [-127, 127], scale =
    // max |x| / 127 over the row. Appended to with the rows; the positions read must be finite.
    MutableTensor k_scales, v_scales; ///< contiguous (B, Hkv, capacity); paged (blocks, Hkv,
                                      ///< block_size)
    Tensor block_table;   ///< (B, max_blocks) int32, paged caches: sequence b's position p is
                          ///< slot p % block_size of block block_table[b][p / block_size]
    Tensor cache_lengths; ///< (B) int32 >= 0: tokens already cached per sequence
    Tensor query_lengths; ///< (B) int32 in [0, Lq]: new tokens per sequence (optional: Lq each);
                          ///< output rows at or past a sequence's length are written as zeros
    // Packed layers (layout = packed; docs/api.md, "Packed batches"): the sequences lie end to end,
    // query (Tq, H, D), key (Tk, Hkv, D), value (Tk, Hkv, Dv), x (Tq, M), context (Tk, M), out
    // (Tq, H, Dv) or (Tq, M), lse (Tq, H); sequence b's queries are rows [query_offsets[b],
    // query_offsets[b + 1]) and its keys rows [key_offsets[b], key_offsets[b + 1]). Offsets start
    // at 0, never decrease and end at the tensor's rows. key_offsets defaults to query_offsets and
    // is not taken where the keys are x's rows or a cache's. Masks, rope positions and the
    // expressions' q and k are each sequence's own; with a cache, query_offsets says how many new
    // tokens each sequence brings (in place of query_lengths). Host memory only.
    Tensor query_offsets, key_offsets; ///< (B + 1) int32
    // Result: (B, H, Lq, Dv), or (B, Lq, M) with an output projection.
    MutableTensor out;
    // Layers with `outputs = out, lse`: each row's log-sum-exp, the natural log of its softmax
    // denominator (sum over visible keys of exp(scaled score), plus exp(sink)), -inf for a row
    // that sees no key and no sink (its output is 0). merge_attention takes (out, lse) pairs.
    MutableTensor lse; ///< (B, H, Lq) f32

    // The run-time tensors and scalars a layer's score_mod or mask predicates declared, by name.
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::vector<std::pair<std::string, double>> scalars;
    /** Gives the declared tensor `name` (replacing an earlier one of that name). */
    Arguments &set_tensor(const std::string &name, const Tensor &tensor);
    /** Gives the declared scalar `name`; i32 scalars must hold an integer. */
    Arguments &set_scalar(const std::string &name, double value);
};

/** Sizes a declared tensor's dimension may take from the call rather than being fixed. */
constexpr int dim_batch = -1, dim_queries = -2, dim_keys = -3;

/** A run-time tensor or scalar that a layer's expressions read. */
struct ExtraArgument {
    const char *name;
    bool is_scalar;
    DType dtype; ///< f32 or i32
    int rank;    ///< 0 for scalars
    int dims[4]; ///< outermost first: a fixed extent, or dim_batch, dim_queries, dim_keys
};

/** A layer's rotary embeddings (its `rope` fields; the language reference defines them). */
enum class RopeKind { none, neox, interleaved };
enum class RopeScalingKind { none, linear, llama3 };
struct RopeInfo {
    RopeKind kind = RopeKind::none;
    double theta = 10000.0;
    int rotary_dim = 0; ///< the resolved value: head_dim unless partial
    RopeScalingKind scaling = RopeScalingKind::none;
    double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
    int original_max_positions = 8192;
    bool table = false; ///< cos and sin from the call's rope_cos and rope_sin
};

/** A layer's KV cache (its `cache` and `cache_dtype` fields). */
enum class CacheKind { none, contiguous, paged };
struct CacheInfo {
    CacheKind kind = CacheKind::none;
    int block_size = 0; ///< positions per block of a paged cache
    DType dtype = DType::f32;
};

/** What a layer was generated for. Written into each generated header. */
struct LayerInfo {
    const char *name;
    int model_dim;
    int heads;
    int kv_heads;
    int head_dim;
    double scale;
    DType dtype;
    bool projections;     ///< q, k and v projections inside the layer
    bool out_projection;  ///< an output projection inside the layer
    bool bias;            ///< projections have biases
    bool cross_attention; ///< keys/values from `context` rather than `x`
    bool causal;
    bool key_padding;
    int window; ///< 0 = no sliding window
    bool additive;
    const char *expressions;     ///< score_mod and mask predicates as text, "" if none
    const ExtraArgument *extras; ///< the declared tensors and scalars
    int extra_count;
    RopeInfo rope;
    CacheInfo cache;
    bool sinks = false; ///< takes `sinks`, a logit per query head
    bool lse = false;   ///< also writes `lse` (outputs = out, lse)
    /// The storage of `key` and `value` (kv_dtype); i8 comes with key_scales and value_scales.
    DType kv_dtype = dtype;
    int value_dim = head_dim; ///< Dv: V's and the output's head size (value_dim)
    /// layout = packed: the sequences lie end to end in the sequence tensors (Arguments).
    bool packed = false;
};

/** Where a layer variant runs. */
enum class Device { cpu, cuda, opencl };

/**
 * Which CPU features a layer variant needs: x86 AVX-512 or AVX2+FMA, AArch64 half-precision
 * arithmetic (arm_fp16), or nothing beyond its target's baseline.
 */
enum class CpuVariant { automatic, avx512, avx2, baseline, arm_fp16 };

/** One compiled variant of a layer: the Halide target, what it needs, and its entry point. */
struct LayerVariant {
    const char *target;
    CpuVariant cpu;
    int (*entry)(void **args); ///< arguments in metadata order, Halide's argv convention
    Device device = Device::cpu;
};

/**
 * A generated layer: its description, its argument metadata, and its variants, best first.
 * The runtime picks the first variant the CPU supports (and force_cpu_variant allows) on every
 * call; Halide's own multi-target wrapper caches its first choice, so it is not used.
 */
struct Layer {
    LayerInfo info;
    const halide_filter_metadata_t *(*metadata)();
    const LayerVariant *variants;
    int variant_count;
};

/**
 * Runs `layer` on `args`. Every argument is checked first (null data, rank, shape against the
 * layer and against each other, dtype, strides, key lengths, output overlapping an input); on a
 * problem nothing is written and the Status names the argument, the expected and the actual
 * value. Errors raised by the generated code arrive as a Status with Halide's message.
 * Safe to call from several threads at once.
 */
Status run(const Layer &layer, const Arguments &args);

/** Checks `args` against `layer` without running it: the checks run() makes first. */
Status validate(const Layer &layer, const Arguments &args);

/**
 * One partial attention result over a subset of the keys: `out`, the attention of each query
 * row over that subset, and `lse`, the natural-log sum of the row's exponentiated scores
 * (log-sum-exp; -inf where the row saw no key). `out` is (..., D) of f32, f16 or bf16; `lse` is
 * f32, out's shape without its last dimension: (B, H, Lq, D) and (B, H, Lq), say.
 */
struct AttentionPart {
    Tensor out;
    Tensor lse;
};

/**
 * Merges partial results over disjoint sets of keys into the attention over their union,
 * exactly: with L = log(sum_i exp(lse_i)), out = sum_i exp(lse_i - L) out_i and lse = L, in
 * double precision, rounded once to out's dtype. A part whose lse is -inf adds nothing; a row
 * that no part saw is 0 with lse -inf. An lse that is NaN or +inf makes the row's outputs and
 * its lse NaN; a NaN in a part's out makes that element NaN. Host memory only. `out` and `lse`
 * may be exactly one part's tensors (the same data and layout: merging in place), and must not
 * otherwise overlap any part or each other. Every part's tensors must have `out`'s and `lse`'s
 * shapes and dtypes; on any problem nothing is written and the Status names the part, the
 * argument, the expected and the actual value.
 */
Status merge_attention(const std::vector<AttentionPart> &parts, const MutableTensor &out,
                       const MutableTensor &lse);

/** Worker threads for all layers (Halide's thread pool); 0 = one per core (1..1024 else). */
Status set_num_threads(int threads);

/**
 * Restricts the CPU dispatch of every layer to `variant` or below (automatic = the best the CPU
 * supports), from the next call on. For testing each path and for working around a CPU
 * problem. A variant the CPU lacks is refused.
 */
Status force_cpu_variant(CpuVariant variant);

/** The variant the last successful dispatch on this thread chose (automatic before any). */
CpuVariant last_cpu_variant();

/** The Halide target of that variant ("" before any call). */
const char *last_target();

const char *cpu_variant_name(CpuVariant variant);

/**
 * What run() does with a layer that has GPU variants:
 *   prefer:  the GPU when a driver and a device are present, else the CPU variants (default);
 *   require: the GPU, or an error naming what is missing;
 *   never:   the CPU variants only.
 * Device tensors need a GPU under every policy.
 */
enum class GpuPolicy { prefer, require, never };
void set_gpu_policy(GpuPolicy policy);
GpuPolicy gpu_policy();

/** Whether a driver and at least one device of `device`'s API are present (checked once). */
bool gpu_available(Device device);

const char *device_name(Device device);

/** The device the last successful dispatch on this thread chose (cpu before any). */
Device last_device();

/**
 * Makes CUDA layers run in the app's own context and stream (a CUcontext and a CUstream, given
 * as pointers so that this header needs no CUDA headers), so that they order with the app's
 * other work and read memory it allocated there. With no context given attngen uses device 0's
 * primary context (the one the CUDA runtime API and PyTorch use) and the stream given, or the
 * default stream. Kernels are launched asynchronously on that stream when all tensors are on
 * the device; host tensors are copied back before run() returns. Pass nullptr, nullptr to go
 * back to the defaults.
 */
void set_cuda_context(void *context, void *stream);

/**
 * Caps the scratch memory the generated code may hold at once (0 = no cap). A call that
 * needs more fails with Halide's out-of-memory message instead of exhausting the machine.
 * attngen caches freed scratch blocks between calls; this releases the cache too (the few
 * blocks each worker thread keeps for itself are released when that thread next allocates or
 * frees scratch).
 */
void set_scratch_limit(size_t bytes);

/** Bytes of scratch currently held by the generated code and by the cache. */
size_t scratch_bytes_in_use();

/**
 * The finite check (off by default): run() and validate() also scan every float input in host
 * memory (query, key, value, x, context, weights, biases, attn_bias, rope tables, declared
 * tensors) and refuse a call whose input holds a NaN or an infinity (-inf in attn_bias masks, and
 * is allowed), with a Status naming the tensor and the first such element's index. It costs a
 * pass over the inputs. Device tensors and the caches (whose unwritten slots may hold anything)
 * are not scanned. Without it, non-finite inputs follow IEEE rules (docs/api.md).
 */
void set_finite_check(bool enabled);
bool finite_check();

} // namespace attngen
