// The buffer arguments of a generated layer's entry point, in order: the one description that
// the generator declares its inputs/outputs from and the typed header binds its calls to.
#pragma once

#include "attention_spec.h"

#include <string>
#include <vector>

namespace attngen {

/** One argument. Its dims are in Halide order (innermost first). */
struct EntryArgument {
    enum class Kind {
        buffer, ///< an input tensor
        scalar, ///< an input scalar (a declared run-time scalar)
        output, ///< after the inputs: `out`, `lse`, and a cached layer's k_new and v_new
    };
    std::string name;
    Kind kind = Kind::buffer;
    bool is_int32 = false;    ///< else float: the spec's storage type, or f32 for declared tensors
    bool is_declared = false; ///< f32 whatever the storage: a declared tensor or scalar, or a
                              ///< rope table
    /** Fixed extents (symbol fixed), or the call's batch, queries or keys (never the others). */
    std::vector<TensorDim> dims;
    bool is_cache = false; ///< in the cache's storage type: the caches and the new rows
    bool is_kv = false;    ///< in the key and value inputs' storage type (kv_dtype)
    /** Not the caller's: the runtime provides it (a cached layer's key_count, k_new, v_new). */
    bool is_internal = false;
};

/**
 * The entry point's arguments for a valid spec, in call order (after the user_context): the
 * inputs as DESIGN.md "Data layout" names them, the declared tensors and scalars, then `out`
 * and, with outputs = out, lse, `lse` (q, h, b) f32.
 * A layer with a cache takes the new tokens (their length is Lq, and the keys' too), k_cache
 * and v_cache (paged: with block_table), cache_lengths and query_lengths, and the internal
 * scalar key_count, the longest sequence after the call (the runtime's max over b of
 * cache_lengths + query_lengths: the extent of the keys); and besides `out` it outputs k_new
 * and v_new (B, Hkv, Lq, D), the new rows in the cache's type, which the runtime appends. An
 * i8 cache also takes k_scales and v_scales (the cache's shape without D, f32) and outputs the
 * new rows' k_new_scales and v_new_scales (B, Hkv, Lq). With kv_dtype = i8, key and value
 * come with key_scales and value_scales (B, Hkv, Lk) f32.
 */
std::vector<EntryArgument> layer_arguments(const AttentionSpec &spec);

/** A declared tensor's dims in Halide order, with heads, kv_heads and head_dim made fixed. */
std::vector<TensorDim> entry_dims(const AttentionSpec &spec, const RuntimeTensor &tensor);

} // namespace attngen
