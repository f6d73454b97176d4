// Packed (variable-length) batches, layout = packed: sequences of different lengths end to end,
// each checked against the double-precision reference run on that sequence alone; the generated
// code run once per sequence over exactly its tokens (no work across sequences); a paged cache
// whose steps bring the new tokens of many sequences packed; and bad offsets refused by name,
// nothing written.
#include "cached_batch.h"
#include "packed_problem.h"
#include "test_support.h"

#include "t_mods.h"
#include "t_packed.h"
#include "t_packed_cache.h"
#include "t_packed_cross.h"
#include "t_packed_proj.h"

#include "HalideRuntime.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

using namespace attngen_test;

namespace {

/** The (Lq, Lk) of each call a layer's generated code made, recorded by wrapped entries. */
std::vector<std::pair<int, int>> recorded_calls;
constexpr int max_variants = 4;
int (*wrapped_entries[max_variants])(void **) = {};
int query_index = -1, key_index = -1;

/** Variant `I`'s entry, recording the extents of its query and key buffers first. */
template <int I> int recording_entry(void **argv) {
    const auto *query = static_cast<const halide_buffer_t *>(argv[query_index]);
    const auto *key = static_cast<const halide_buffer_t *>(argv[key_index]);
    recorded_calls.emplace_back(query->dim[1].extent, key->dim[1].extent);
    return wrapped_entries[I](argv);
}
int (*const recording_entries[max_variants])(void **) = {recording_entry<0>, recording_entry<1>,
                                                         recording_entry<2>, recording_entry<3>};

} // namespace

TEST_CASE("packed sequences with their own key offsets (causal, rope, sinks, lse, GQA) match the "
          "reference of each sequence alone") {
    // Lengths across the flash tiles, Lq > Lk (the first queries see nothing), Lq = 1, an
    // empty sequence and a keyless one (zeros, lse -inf).
    check_packed(t_packed_layer(), {37, 1, 0, 70, 5, 9}, {37, 40, 3, 130, 2, 0}, 8101);
    check_packed(t_packed_layer(), {1}, {1}, 8102);
    check_packed(t_packed_layer(), {16, 16, 16}, {16, 16, 16}, 8103);
}

TEST_CASE("packed sequences through projections in self-attention (f16, window) match the "
          "reference of each sequence alone") {
    check_packed(t_packed_proj_layer(), {23, 0, 1, 64, 9}, {}, 8104);
}

TEST_CASE("packed cross-attention through projections with their own context offsets (causal, "
          "sinks, a keyless sequence: the output bias) matches the reference") {
    check_packed(t_packed_cross_layer(), {12, 3, 0, 20, 4}, {30, 3, 5, 9, 0}, 8109);
}

TEST_CASE("packed sequences with ALiBi and a mask predicate: q and k are each sequence's own") {
    const attngen::Layer &layer = packed_alibi_layer();
    check_packed(layer, {19, 1, 40, 7}, {25, 6, 40, 7}, 8110,
                 [](const Problem &problem, ReferenceProblem &reference) {
                     const std::vector<float> slope = problem.tensors.at("slope").values;
                     reference.score_mod = [slope](double score, int, int h, int q, int k) {
                         return score + slope[static_cast<size_t>(h)] * (k - q);
                     };
                     reference.visible = [](int, int, int q, int k) { return (q + k) % 5 != 2; };
                 });
}

TEST_CASE("a packed layer runs its generated code once per sequence over exactly that "
          "sequence's tokens") {
    const attngen::Layer &layer = t_packed_layer();
    const halide_filter_metadata_t *metadata = layer.metadata();
    for (int i = 0; i < metadata->num_arguments; i++) {
        if (std::strcmp(metadata->arguments[i].name, "query") == 0)
            query_index = i;
        if (std::strcmp(metadata->arguments[i].name, "key") == 0)
            key_index = i;
    }
    REQUIRE(query_index >= 0);
    REQUIRE(key_index >= 0);
    REQUIRE(layer.variant_count <= max_variants);
    std::vector<attngen::LayerVariant> variants(layer.variants,
                                                layer.variants + layer.variant_count);
    for (size_t i = 0; i < variants.size(); i++) {
        wrapped_entries[i] = variants[i].entry;
        variants[i].entry = recording_entries[i];
    }
    attngen::Layer recording = layer;
    recording.variants = variants.data();
    recorded_calls.clear();
    const uint32_t seed = test_seed(8105);
    INFO("seed " << seed);
    PackedProblem packed(layer, {5, 0, 70, 3}, {9, 4, 100, 0}, seed);
    const attngen::Status status = attngen::run(recording, packed.args);
    INFO(status.message());
    REQUIRE(status.ok());
    // Sequences 1 (no queries) and 3 (no keys) need no generated code; 0 and 2 their own.
    const std::vector<std::pair<int, int>> expected = {{5, 9}, {70, 100}};
    CHECK(recorded_calls == expected);
}

TEST_CASE("a paged cache stepped with packed new tokens (prefill, decode, chunks, sequences "
          "sitting out) matches the reference") {
    check_steps_against_reference(t_packed_cache_layer(), 8106);
}

TEST_CASE("bad offsets and packed tensors are refused by name, nothing written") {
    const uint32_t seed = test_seed(8108);
    INFO("seed " << seed);
    const attngen::Layer &layer = t_packed_layer();
    PackedProblem packed(layer, {5, 7, 4}, {6, 7, 8}, seed);
    REQUIRE(attngen::validate(layer, packed.args).ok()); // the unspoiled call is valid
    const std::vector<float> before = packed.out.values();
    const std::vector<float> lse_before = packed.lse;
    auto refused = [&](std::vector<int32_t> offsets, bool keys, const std::string &expected) {
        attngen::Arguments spoiled = packed.args;
        (keys ? spoiled.key_offsets : spoiled.query_offsets) =
            attngen::view(offsets.data(), {static_cast<int64_t>(offsets.size())});
        check_refused(layer, spoiled, expected);
    };
    refused({0, 5, 3, 16}, false, "`query_offsets[2]` is 3 but the offset before it is 5");
    refused({1, 5, 12, 16}, false, "`query_offsets[0]` is 1 but must be 0");
    refused({0, 5, 12, 17}, false, "`query_offsets[3]` is 17 but `query` has 16 rows");
    refused({0, 5, 12, 15}, false, "`query_offsets[3]` is 15 but `query` has 16 rows");
    refused({0, 6, 13}, true, "`key_offsets` has 3 offsets but `query_offsets` has 4");
    refused({0}, false, "`query_offsets` has 1 offset");

    attngen::Arguments spoiled = packed.args;
    spoiled.query_offsets = attngen::Tensor();
    check_refused(layer, spoiled, "needs `query_offsets`");
    spoiled = packed.args;
    const std::vector<int32_t> lengths = {5, 7, 4};
    spoiled.query_lengths = attngen::view(lengths.data(), {3});
    check_refused(layer, spoiled, "`query_lengths` was given");
    spoiled = packed.args;
    std::vector<float> short_out(static_cast<size_t>(15 * 4 * 32));
    spoiled.out = attngen::mutable_view(short_out.data(), {15, 4, 32});
    check_refused(layer, spoiled, "`out` has 15 tokens but `query` has 16");
    spoiled = packed.args;
    spoiled.lse = spoiled.out; // an f32 output over another
    spoiled.lse.rank = 2;
    spoiled.lse.shape[1] = 4;
    spoiled.lse.strides[0] = 4;
    spoiled.lse.strides[1] = 1;
    check_refused(layer, spoiled, "overlaps");
    spoiled = packed.args;
    spoiled.x = spoiled.query;
    check_refused(layer, spoiled, "`x` was given but layer 't_packed' does not take it");
    spoiled = packed.args;
    spoiled.query.on_device = true;
    check_refused(layer, spoiled, "`query` is device memory");
    // A problem of one sequence is named with its rows: sinks of the wrong length.
    spoiled = packed.args;
    const std::vector<float> sinks(3, 0.5f);
    spoiled.sinks = attngen::view(sinks.data(), {3});
    check_refused(layer, spoiled, "sequence 0 (rows 0..4): `sinks` has heads 3");
    CHECK(packed.out.values() == before);
    CHECK(packed.lse == lse_before);

    // Self-attention with projections takes its keys from x: key_offsets is refused.
    const attngen::Layer &projected = t_packed_proj_layer();
    PackedProblem self(projected, {3, 4}, {}, seed);
    const std::vector<int32_t> key_offsets = {0, 3, 7};
    attngen::Arguments with_keys = self.args;
    with_keys.key_offsets = attngen::view(key_offsets.data(), {3});
    check_refused(projected, with_keys, "its keys are x's rows");
}

TEST_CASE("a packed cached call is checked across its sequences: a block two sequences write, "
          "a sequence past its blocks; nothing written, caches included") {
    const attngen::Layer &layer = t_packed_cache_layer();
    const attngen::LayerInfo &info = layer.info;
    REQUIRE(info.cache.kind == attngen::CacheKind::paged);
    const int64_t H = info.heads, Hkv = info.kv_heads, D = info.head_dim;
    const int64_t block = info.cache.block_size, blocks = 4, total = 5;
    std::vector<float> query(static_cast<size_t>(total * H * D), 0.25f);
    std::vector<float> key(static_cast<size_t>(total * Hkv * D), -0.5f);
    std::vector<float> value(static_cast<size_t>(total * Hkv * D), 0.75f);
    std::vector<float> k_cache(static_cast<size_t>(blocks * Hkv * block * D), 3.0f);
    std::vector<float> v_cache = k_cache;
    std::vector<float> out(static_cast<size_t>(total * H * D), -9.0f);
    std::vector<float> lse(static_cast<size_t>(total * H), -9.0f);
    const std::vector<int32_t> offsets = {0, 3, 5}, cached = {0, 0};
    std::vector<int32_t> table = {1, 2, 3, 0};
    attngen::Arguments args;
    args.query = attngen::view(query.data(), {total, H, D});
    args.key = attngen::view(key.data(), {total, Hkv, D});
    args.value = attngen::view(value.data(), {total, Hkv, D});
    args.query_offsets = attngen::view(offsets.data(), {3});
    args.k_cache = attngen::mutable_view(k_cache.data(), {blocks, Hkv, block, D});
    args.v_cache = attngen::mutable_view(v_cache.data(), {blocks, Hkv, block, D});
    args.block_table = attngen::view(table.data(), {2, 2});
    args.cache_lengths = attngen::view(cached.data(), {2});
    args.out = attngen::mutable_view(out.data(), {total, H, D});
    args.lse = attngen::mutable_view(lse.data(), {total, H});
    REQUIRE(attngen::validate(layer, args).ok()); // the unspoiled call is valid
    const std::vector<float> caches_before = k_cache, out_before = out, lse_before = lse;

    table = {1, 2, 1, 0}; // both sequences' first block is block 1
    check_refused(layer, args, "`block_table[0][0]` and `block_table[1][0]` are both block 1");
    table = {1, 2, 3, 0};
    const std::vector<int32_t> full = {14, 0}; // 14 cached + 3 new past 2 blocks of 8
    args.cache_lengths = attngen::view(full.data(), {2});
    check_refused(layer, args, "`block_table[0]` leaves no room: sequence 0 holds 14 tokens");
    args.cache_lengths = attngen::view(cached.data(), {2});
    const std::vector<int32_t> key_offsets = {0, 3, 5};
    args.key_offsets = attngen::view(key_offsets.data(), {3});
    check_refused(layer, args, "`key_offsets` was given but layer 't_packed_cache' has a cache");
    CHECK(k_cache == caches_before);
    CHECK(v_cache == caches_before);
    CHECK(out == out_before);
    CHECK(lse == lse_before);
}
