// The description of one attention layer: what a user says once, and what every later stage
// (algorithm, schedules, generators, the typed header) reads. No Halide here.
#pragma once

#include "expression.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace attngen {

/** Storage type of inputs and outputs. Arithmetic is always float32. */
enum class DType {
    f32,
    f16,
    bf16,
    /// Signed 8-bit values with one f32 scale per (token, kv head): a KV cache's storage only
    /// (cache_dtype = i8; docs/cache.md, "8-bit caches") or of the key and value inputs
    /// (kv_dtype = i8).
    i8,
};

/** Which linear layers surround the attention core. All of q, k and v, or none of them. */
struct Projections {
    bool q = false, k = false, v = false, out = false;
    bool bias = false; ///< every present projection has a bias vector
    bool any() const { return q || k || v || out; }
};

/** Masks combine: a key is visible to a query only if every enabled mask allows it. */
struct MaskSpec {
    bool causal = false;      ///< key k visible to query q iff k <= q + (Lk - Lq) (bottom-right)
    bool key_padding = false; ///< key k visible iff k < key_lengths[b], lengths given at run time
    int window = 0;           ///< 0 = off; else |k - (q + Lk - Lq)| < window
    bool additive = false;    ///< a (B, H, Lq, Lk) float bias tensor is added to the scores
    bool any() const { return causal || key_padding || window > 0 || additive; }
    /** Whether the mask hides ranges of keys (causal, window, padding), not single scores. */
    bool bounds_keys() const { return causal || key_padding || window > 0; }
};

/**
 * Rotary position embeddings (RoPE): q and k are rotated, in f32 inside the pipeline, before
 * their dot product. Pair i of the first rotary_dim features of a token at position p turns by
 * the angle p * inv_freq(i), inv_freq(i) = theta^(-2i / rotary_dim) adjusted by `scaling`.
 * `neox` pairs feature i with i + rotary_dim / 2 (rotate-half: GPT-NeoX, Hugging Face's Llama);
 * `interleaved` pairs features 2i and 2i + 1 (GPT-J, Meta's original Llama). A key's position
 * is its index; a query's is aligned as the causal mask aligns it, q + (Lk - Lq).
 * With `table`, the angles' cos and sin come from the caller's tables instead (rope_cos and
 * rope_sin, a row per key position): any frequencies and scaling.
 */
enum class RopeKind { none, neox, interleaved };

/** How the frequencies are stretched for contexts longer than a model was trained on. */
struct RopeScaling {
    enum class Kind {
        none,
        linear, ///< every inv_freq divided by factor (positions interpolated)
        llama3, ///< Llama 3.1's: long wavelengths divided by factor, short kept, blended between
    };
    Kind kind = Kind::none;
    double factor = 1.0;
    double low_freq_factor = 1.0;      ///< llama3 only
    double high_freq_factor = 4.0;     ///< llama3 only
    int original_max_positions = 8192; ///< llama3 only
};

struct RopeSpec {
    RopeKind kind = RopeKind::none;
    double theta = 10000.0;
    int rotary_dim = 0; ///< features rotated from the first; 0 means head_dim
    RopeScaling scaling;
    bool table = false; ///< cos and sin from run-time tables (needs a kind); theta, scaling unused
    bool any() const { return kind != RopeKind::none; }
};

/**
 * A KV cache the layer appends to (Arguments in runtime.h): each call takes new tokens, which sit
 * after the tokens its sequence has cached, reads the earlier steps' keys and values from the
 * caller's k_cache and v_cache, and attends over both, each sequence of the batch at its own
 * length; the runtime then writes the new tokens' keys (rotated) and values into the caches.
 * contiguous: (B, Hkv, capacity, D) per cache; paged: (blocks, Hkv, block_size, D) shared by
 * the batch, and a block table mapping each sequence's positions to blocks.
 */
struct CacheSpec {
    enum class Kind { none, contiguous, paged };
    Kind kind = Kind::none;
    int block_size = 0;         ///< paged: positions per block
    std::optional<DType> dtype; ///< the caches' storage; the layer's dtype by default
    bool any() const { return kind != Kind::none; }
};

/** One attention layer. Zero means "derive" for kv_heads and head_dim. */
struct AttentionSpec {
    std::string name = "attention";
    int model_dim = 0;           ///< required with projections; otherwise heads * head_dim
    int heads = 1;               ///< query heads H
    int kv_heads = 0;            ///< key/value heads; divides heads; 0 means = heads
    int head_dim = 0;            ///< D; 0 means model_dim / heads
    int value_dim = 0;           ///< Dv, V's and the output's head size; 0 means head_dim
    std::optional<double> scale; ///< default 1 / sqrt(head_dim)
    DType dtype = DType::f32;
    /// The per-head key and value inputs' storage; the layer's dtype by default. i8 inputs come
    /// with an f32 scale per (key, kv head): `key_scales` and `value_scales`, (B, Hkv, Lk).
    std::optional<DType> kv_dtype;
    Projections projections;
    bool cross_attention = false; ///< with projections: keys/values come from a second input
    /// A run-time f32 sink logit per query head (`sinks`, (H)): each row's softmax denominator
    /// gains exp(sinks[h] - max), mass that takes no value (gpt-oss; ggml's add_sinks).
    bool sinks = false;
    /// `outputs = out, lse`: the layer also writes each row's log-sum-exp (`lse`, (B, H, Lq) f32,
    /// natural log of the softmax's denominator; -inf for a row that sees no key), which
    /// merge_attention combines (FlashAttention's return_softmax_lse).
    bool lse_output = false;
    MaskSpec mask;
    RopeSpec rope;
    CacheSpec cache;
    /**
     * `layout = packed`: the sequences of a call lie end to end in one tensor (FlashAttention's
     * varlen form), query (total, H, D) or x (total, model_dim), with query_offsets and
     * key_offsets (B + 1) int32 saying where each begins; masks apply within each sequence. The
     * runtime runs the generated pipeline once per sequence on views of its tokens (docs/api.md,
     * "Packed batches"), so no work crosses sequences. `batched` (false): (B, H, L, D).
     */
    bool packed = false;

    /**
     * Applied to each scaled score (after an additive mask's bias, before the other masks):
     * an expression of score, b, h, q, k and the declared tensors and scalars. Null = none.
     */
    ModExprPtr score_mod;
    /** Custom masks: key k is visible to query q only where every predicate holds. */
    std::vector<ModExprPtr> mask_predicates;
    /** Run-time inputs the expressions read, passed by name at run time. */
    std::vector<RuntimeTensor> tensors;
    std::vector<RuntimeScalar> scalars;

    int resolved_kv_heads() const { return kv_heads > 0 ? kv_heads : heads; }
    int resolved_head_dim() const;
    int resolved_value_dim() const { return value_dim > 0 ? value_dim : resolved_head_dim(); }
    int resolved_model_dim() const;
    double resolved_scale() const;
    int resolved_rotary_dim() const {
        return rope.rotary_dim > 0 ? rope.rotary_dim : resolved_head_dim();
    }
    int group_size() const { return heads / resolved_kv_heads(); }
    DType resolved_cache_dtype() const { return cache.dtype ? *cache.dtype : dtype; }
    DType resolved_kv_dtype() const { return kv_dtype ? *kv_dtype : dtype; }
};

/** One problem with a description: the field it concerns and a sentence a user can act on. */
struct SpecError {
    std::string field;
    std::string message;
};

/** Every problem with `spec` (empty when it is valid). */
std::vector<SpecError> check_spec(const AttentionSpec &spec);

/** The problems joined into one message, each prefixed with its field. */
std::string describe_errors(const std::vector<SpecError> &errors);

// Text forms, shared by the generator parameters, the CLI and the typed header.
const char *to_string(DType dtype);
std::optional<DType> parse_dtype(const std::string &text);

/** "none" or a comma-separated subset of q,k,v,out (spaces allowed). */
std::optional<Projections> parse_projections(const std::string &text, bool bias);
std::string to_string(const Projections &projections);

/** The `layout` field: "batched" or "packed"; nullopt for anything else (packed: true). */
std::optional<bool> parse_layout(const std::string &text);
const char *layout_text(bool packed);

/** The `outputs` field: "out" or "out,lse" (spaces allowed); nullopt for anything else. */
std::optional<bool> parse_outputs(const std::string &text);
/** "out" or "out, lse". */
const char *outputs_text(bool lse_output);

/** "none" or masks joined with '+': causal, padding, window(N), additive. */
std::optional<MaskSpec> parse_mask(const std::string &text);
std::string to_string(const MaskSpec &mask);

/**
 * The inverse frequency of each rotary pair i < rotary_dim / 2, in double: theta^(-2i /
 * rotary_dim), then the scaling. The generated pipeline rounds them to f32 constants.
 */
std::vector<double> rope_inverse_frequencies(const RopeSpec &rope, int rotary_dim);

/** A number as the text forms write it: the shorter of %.15g and %.17g that reads back exactly. */
std::string number_text(double value);

/** "none", "neox" or "interleaved". */
const char *to_string(RopeKind kind);
/** The `rope` field: none, neox, interleaved, table (neox pairs) or table(interleaved). */
std::string rope_text(const RopeSpec &rope);
/** Sets rope's kind and table from rope_text's forms; false if `text` is none of them. */
bool parse_rope(const std::string &text, RopeSpec &rope);

/** "none", "linear(F)" or "llama3(F, LOW, HIGH, ORIGINAL)" (spaces allowed). */
std::optional<RopeScaling> parse_rope_scaling(const std::string &text);
std::string to_string(const RopeScaling &scaling);

/** The `cache` field: "none", "contiguous" or "paged(N)" (spaces allowed). */
std::string cache_text(const CacheSpec &cache);
/** Sets cache's kind and block size from cache_text's forms; false if `text` is none of them. */
bool parse_cache(const std::string &text, CacheSpec &cache);

/**
 * Builds a description from key=value parameters, the form GeneratorParams and the CLI share.
 * Unknown keys and malformed values become SpecErrors; semantic checks are check_spec's.
 */
AttentionSpec spec_from_params(const std::map<std::string, std::string> &params,
                               std::vector<SpecError> &errors);

/** The inverse of spec_from_params, with every field spelled out. */
std::map<std::string, std::string> spec_to_params(const AttentionSpec &spec);

} // namespace attngen
