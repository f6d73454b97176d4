// KV caches: a layer with `cache` is called once per step with its new tokens, attends them over
// the keys its cache holds and appends their K and V. Each step of a ragged batch is checked
// against plain attention over each sequence's whole history (the double-precision reference),
// the cache rows it writes against the reference's rotated and rounded keys and values, and every
// other cache element against its bytes before the call; chunked prefill and token-by-token
// decode against one prefill of the same tokens; and every bad input is refused by name, with
// out and both caches left as they were.
#include "cached_batch.h"

#include "t_d32_cache.h"
#include "t_d32_cache_i8.h"
#include "t_d32_cache_table.h"
#include "t_d32_rope_neox.h"
#include "t_d64_cache_i8_decode.h"
#include "t_d64_cache_i8_paged_decode.h"
#include "t_d64_cache_paged_decode.h"
#include "t_mha_cache_decode.h"
#include "t_mha_cache_paged.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>

using namespace attngen_test;
using attngen::DType;

namespace {

/**
 * Whether `status` is an attngen error naming `argument` in backticks, whole (`cache_lengths`)
 * or at an element (`cache_lengths[1]`), as the key_lengths errors do.
 */
bool names(const attngen::Status &status, const std::string &argument) {
    const std::string &message = status.message();
    if (message.rfind("attngen: ", 0) != 0)
        return false;
    const std::string quoted = "`" + argument;
    for (size_t at = message.find(quoted); at != std::string::npos;
         at = message.find(quoted, at + 1)) {
        const size_t next = at + quoted.size();
        if (next < message.size() && (message[next] == '`' || message[next] == '['))
            return true;
    }
    return false;
}

/**
 * Prepares a valid step of `batch`, lets `spoil` break it, and expects run() to refuse it with a
 * message naming `argument`, leaving out and both caches as they were.
 */
void expect_refused(CachedBatch &batch, const std::vector<int> &query_lengths,
                    const std::function<void(attngen::Arguments &, CachedBatch::Step &)> &spoil,
                    const std::string &argument) {
    CachedBatch::Step call = batch.prepare(query_lengths);
    attngen::Arguments args = batch.arguments(call);
    const attngen::Status valid = attngen::validate(batch.layer, args);
    INFO("the unspoiled step: " << valid.message());
    REQUIRE(valid.ok());
    const OutputBuffer out_before = call.out, k_before = batch.k_cache, v_before = batch.v_cache;
    spoil(args, call);
    const attngen::Status status = attngen::run(batch.layer, args);
    INFO("expected a refusal naming `" << argument << "`, got \"" << status.message() << "\"");
    REQUIRE_FALSE(status.ok());
    CHECK(names(status, argument));
    CHECK(changed_elements(call.out, out_before) == 0);
    CHECK(changed_elements(batch.k_cache, k_before) == 0);
    CHECK(changed_elements(batch.v_cache, v_before) == 0);
}

} // namespace

TEST_CASE("a contiguous f32 cache with grouped heads and rotary embeddings matches attention "
          "over each sequence's whole history, step after step") {
    check_steps_against_reference(t_d32_cache_layer(), 5101);
}

TEST_CASE("a paged f16 cache in the split-KV decode form, its blocks shuffled, matches "
          "attention over each sequence's whole history") {
    check_steps_against_reference(t_d64_cache_paged_decode_layer(), 5102);
}

TEST_CASE("a paged f16 cache under an f32 layer with projections, a window and partial rotary "
          "embeddings matches attention over each sequence's whole history") {
    check_steps_against_reference(t_mha_cache_paged_layer(), 5103);
}

TEST_CASE("without a mask, new tokens see every key of their sequence, rotated by the caller's "
          "tables at their absolute positions") {
    check_steps_against_reference(t_d32_cache_table_layer(), 5104);
}

TEST_CASE("a contiguous cache after multi-query projections in the decode form matches attention "
          "over each sequence's whole history") {
    check_steps_against_reference(t_mha_cache_decode_layer(), 5105);
}

TEST_CASE("every CPU variant of the cached layers (f32, f16 and i8 caches, contiguous and paged, "
          "flash and split-KV decode forms) matches attention over each sequence's history") {
    // The other tests in this file run the variant this CPU dispatches to; the others have
    // vectors of their own width (on x86 AVX2's and the baseline's: the i8 scales' vectors,
    // the P·V register blocks).
    for (const attngen::Layer *layer :
         {&t_d32_cache_layer(), &t_d32_cache_i8_layer(), &t_d64_cache_paged_decode_layer(),
          &t_d64_cache_i8_decode_layer(), &t_d64_cache_i8_paged_decode_layer(),
          &t_mha_cache_decode_layer()})
        for_each_cpu_variant(*layer, [&] { check_steps_against_reference(*layer, 5141); });
}

TEST_CASE("chunked prefill and token-by-token decode match one prefill in the flash form") {
    check_chunks_match_one_prefill(t_d32_cache_layer(), 5111);
}

TEST_CASE("chunked prefill and token-by-token decode match one prefill after projections in the "
          "decode form") {
    check_chunks_match_one_prefill(t_mha_cache_decode_layer(), 5112);
}

TEST_CASE("a paged i8 cache with rotary embeddings, its blocks shuffled, matches attention over "
          "the unquantized keys and values within 3e-2") {
    check_steps_against_reference(t_d32_cache_i8_layer(), 5131);
}

TEST_CASE("chunked prefill and token-by-token decode match one prefill with an i8 cache in the "
          "split-KV decode form") {
    check_chunks_match_one_prefill(t_d64_cache_i8_decode_layer(), 5132);
}

TEST_CASE("a paged i8 cache in the split-KV decode form, in shuffled blocks of 8 keys (half an "
          "AVX-512 vector), matches attention over the unquantized keys and values within 3e-2") {
    check_steps_against_reference(t_d64_cache_i8_paged_decode_layer(), 5135);
}

TEST_CASE("an i8 cache in the split-KV decode form stays within its quantization's worst-case "
          "error bound") {
    // |q|, |K|, |V| <= 1, D = 64, scale = 1/8: the bound is 0.069 (i8_error_bound).
    const uint32_t seed = test_seed(5133);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const attngen::Layer &layer = t_d64_cache_i8_decode_layer();
    const double bound = i8_error_bound(layer.info.head_dim, layer.info.scale);
    CachedBatch batch(layer, {0, 17, 300}, 400, seed);
    double worst = 0.0;
    for (const std::vector<int> &lengths :
         {std::vector<int>{40, 3, 1}, std::vector<int>{1, 1, 1}, std::vector<int>{1, 0, 60}}) {
        std::vector<std::vector<double>> want;
        for (int b = 0; b < 3; b++)
            want.push_back(batch.reference_rows(b, lengths[static_cast<size_t>(b)]));
        const std::vector<std::vector<float>> got = batch.step(lengths);
        for (size_t b = 0; b < got.size(); b++)
            for (size_t i = 0; i < got[b].size(); i++)
                worst = std::max(worst, std::abs(static_cast<double>(got[b][i]) - want[b][i]));
    }
    INFO("largest error " << worst << ", bound " << bound);
    CHECK(worst <= bound);
    CHECK(worst > 0.0); // the cache did quantize
}

TEST_CASE("i8 cache scales that are missing, misshapen, not f32, non-finite where read, "
          "overlapping, or given to another cache are refused by name, nothing written") {
    const uint32_t seed = test_seed(5134);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    CachedBatch batch(t_d64_cache_i8_decode_layer(), {3, 20}, 24, seed);
    const std::vector<int> lengths = {2, 4};
    expect_refused(
        batch, lengths, [](auto &args, auto &) { args.k_scales = attngen::MutableTensor(); },
        "k_scales");
    std::vector<float> short_scales(2 * 2 * 23, 1.0f);
    std::vector<uint16_t> half_scales(2 * 2 * 24, 0x3c00);
    expect_refused(
        batch, lengths,
        [&](auto &args, auto &) {
            args.v_scales = attngen::mutable_view(short_scales.data(), {2, 2, 23});
        },
        "v_scales");
    expect_refused(
        batch, lengths,
        [&](auto &args, auto &) {
            args.k_scales = attngen::mutable_view(half_scales.data(), DType::f16, {2, 2, 24});
        },
        "k_scales");
    // Sequence 1, kv head 1, position 19: cached, so read. The NaN scales the batch keeps at
    // positions no call reads (20 and on) were never refused.
    std::vector<float> poisoned = batch.v_cache.scales;
    poisoned[(1 * 2 + 1) * 24 + 19] = std::numeric_limits<float>::infinity();
    expect_refused(
        batch, lengths,
        [&](auto &args, auto &) {
            args.v_scales = attngen::mutable_view(poisoned.data(), {2, 2, 24});
        },
        "v_scales[1][1][19]");
    expect_refused(
        batch, lengths,
        [&](auto &args, auto &) {
            args.k_scales = attngen::mutable_view(
                reinterpret_cast<float *>(batch.k_cache.bytes.data()), {2, 2, 24});
        },
        "k_scales");

    CachedBatch f32_cache(t_d32_cache_layer(), {3, 20}, 24, seed);
    std::vector<float> stray(2 * 2 * 24, 1.0f);
    expect_refused(
        f32_cache, lengths,
        [&](auto &args, auto &) {
            args.k_scales = attngen::mutable_view(stray.data(), {2, 2, 24});
        },
        "k_scales");
}

TEST_CASE("a step without new tokens writes zeros to out and nothing to the caches") {
    const uint32_t seed = test_seed(5113);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    for (const attngen::Layer *layer : {&t_d32_cache_layer(), &t_mha_cache_paged_layer()}) {
        INFO("layer " << layer->info.name);
        // The first sequence has no history either: a paged cache reads none of its table.
        CachedBatch batch(*layer, {0, 9, 17}, 32, seed);
        CachedBatch::Step call = batch.prepare({0, 0, 0}, 3);
        const OutputBuffer k_before = batch.k_cache, v_before = batch.v_cache;
        const attngen::Status status = attngen::run(batch.layer, batch.arguments(call));
        INFO(status.message());
        REQUIRE(status.ok());
        const std::vector<float> out = call.out.values();
        CHECK(std::count_if(out.begin(), out.end(), [](float v) { return v != 0.0f; }) == 0);
        CHECK(changed_elements(batch.k_cache, k_before) == 0);
        CHECK(changed_elements(batch.v_cache, v_before) == 0);
        batch.step({2, 1, 3}); // and the batch goes on from where it was
    }
}

TEST_CASE("block table entries past a sequence's blocks are never read") {
    const uint32_t seed = test_seed(5114);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    CachedBatch batch(t_mha_cache_paged_layer(), {5, 0, 40}, 64, seed);
    batch.unused_block_entry = 1 << 30; // far outside the cache
    batch.step({3, 0, 17});             // the second sequence has no block at all
    batch.step({1, 2, 1});
}

TEST_CASE("a cache that is missing, of the wrong dtype or of the wrong shape is refused by name, "
          "and nothing is written") {
    const uint32_t seed = test_seed(5121);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    // Two sequences, kv_heads 2, head_dim 32, 24 positions; the step fills the second exactly.
    CachedBatch batch(t_d32_cache_layer(), {3, 20}, 24, seed);
    const std::vector<int> lengths = {2, 4};
    expect_refused(
        batch, lengths, [](auto &args, auto &) { args.k_cache = attngen::MutableTensor(); },
        "k_cache");
    expect_refused(
        batch, lengths, [](auto &args, auto &) { args.v_cache = attngen::MutableTensor(); },
        "v_cache");
    std::vector<float> narrow(2 * 2 * 24 * 16, 0.5f), more_heads(2 * 4 * 24 * 32, 0.5f),
        more_sequences(3 * 2 * 24 * 32, 0.5f);
    expect_refused(
        batch, lengths,
        [&](auto &args, auto &) {
            args.k_cache = attngen::mutable_view(narrow.data(), {2, 2, 24, 16});
        },
        "k_cache");
    expect_refused(
        batch, lengths,
        [&](auto &args, auto &) {
            args.v_cache = attngen::mutable_view(more_heads.data(), {2, 4, 24, 32});
        },
        "v_cache");
    expect_refused(
        batch, lengths,
        [&](auto &args, auto &) {
            args.k_cache = attngen::mutable_view(more_sequences.data(), {3, 2, 24, 32});
        },
        "k_cache");

    // The layer's dtype (f32) where its cache_dtype (f16) is asked for.
    CachedBatch half(t_mha_cache_paged_layer(), {4, 11}, 32, seed);
    std::vector<float> single(half.k_cache.half.size(), 0.5f);
    expect_refused(
        half, {3, 2},
        [&](auto &args, auto &) {
            args.k_cache.data = single.data();
            args.k_cache.dtype = DType::f32;
        },
        "k_cache");
}

TEST_CASE("cache lengths that are missing, negative or past the cache's capacity are refused") {
    const uint32_t seed = test_seed(5122);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    CachedBatch contiguous(t_d32_cache_layer(), {3, 20}, 24, seed);
    expect_refused(
        contiguous, {2, 4}, [](auto &args, auto &) { args.cache_lengths = attngen::Tensor(); },
        "cache_lengths");
    expect_refused(
        contiguous, {2, 4}, [](auto &, auto &call) { call.cache_lengths[0] = -1; },
        "cache_lengths");
    // 21 cached and 4 new tokens need 25 positions of the 24.
    expect_refused(
        contiguous, {2, 4}, [](auto &, auto &call) { call.cache_lengths[1] = 21; },
        "cache_lengths");

    // A paged cache holds max_blocks * block_size positions per sequence: 4 blocks of 16 here,
    // and 61 cached and 4 new tokens need 65.
    CachedBatch paged(t_d64_cache_paged_decode_layer(), {5, 60}, 64, seed);
    expect_refused(
        paged, {2, 4}, [](auto &, auto &call) { call.cache_lengths[1] = 61; }, "block_table");
}

TEST_CASE("query lengths outside [0, Lq] are refused") {
    const uint32_t seed = test_seed(5123);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    // Ragged lengths in 4 rows: the step gives query_lengths.
    CachedBatch batch(t_d32_cache_layer(), {3, 20}, 24, seed);
    expect_refused(
        batch, {2, 4}, [](auto &, auto &call) { call.query_lengths[0] = 5; }, "query_lengths");
    expect_refused(
        batch, {2, 4}, [](auto &, auto &call) { call.query_lengths[1] = -1; }, "query_lengths");
}

TEST_CASE("a block table that is missing, names a block outside the cache among the used ones, or "
          "gives two sequences one block to write is refused") {
    const uint32_t seed = test_seed(5124);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    // 2 sequences of 4 blocks of 16, and 3 spare blocks. The step writes the first sequence's
    // positions 5 and 6 (its block 0) and the second's 60 to 63 (its block 3, after reading
    // blocks 0 to 2).
    CachedBatch batch(t_d64_cache_paged_decode_layer(), {5, 60}, 64, seed);
    const int second = batch.max_blocks(); // where the second sequence's row starts
    expect_refused(
        batch, {2, 4}, [](auto &args, auto &) { args.block_table = attngen::Tensor(); },
        "block_table");
    expect_refused(
        batch, {2, 4}, [&](auto &, auto &call) { call.block_table[0] = batch.num_blocks(); },
        "block_table");
    expect_refused(
        batch, {2, 4}, [&](auto &, auto &call) { call.block_table[second + 1] = -1; },
        "block_table");
    expect_refused(
        batch, {2, 4},
        [&](auto &, auto &call) { call.block_table[second + 3] = call.block_table[0]; },
        "block_table");
}

TEST_CASE("caches and outputs that share memory are refused") {
    const uint32_t seed = test_seed(5125);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    CachedBatch batch(t_d32_cache_layer(), {3, 20}, 24, seed);
    expect_refused(
        batch, {2, 4}, [](auto &args, auto &) { args.v_cache = args.k_cache; }, "v_cache");
    // out (2, 4, 4, 32) over the first 1024 of k_cache's 3072 floats.
    expect_refused(
        batch, {2, 4}, [&](auto &args, auto &) { args.out.data = batch.k_cache.data(); }, "out");
}

TEST_CASE("a rope table shorter than a step's positions is refused") {
    const uint32_t seed = test_seed(5126);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    // The step's last position is 30 + 5 - 1 = 34: a table of 34 rows is one short.
    CachedBatch batch(t_d32_cache_table_layer(), {10, 30}, 48, seed);
    expect_refused(
        batch, {3, 5},
        [](auto &args, auto &) {
            args.rope_cos.shape[0] = 34;
            args.rope_sin.shape[0] = 34;
        },
        "rope_cos");

    CachedBatch::Step call = batch.prepare({3, 5});
    attngen::Arguments args = batch.arguments(call);
    args.rope_cos.shape[0] = 35;
    args.rope_sin.shape[0] = 35;
    const attngen::Status status = attngen::validate(batch.layer, args);
    INFO(status.message());
    CHECK(status.ok()); // 35 rows are enough
}

TEST_CASE("cache arguments given to a layer without a cache, or a block table given to a "
          "contiguous cache, are refused") {
    const uint32_t seed = test_seed(5127);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const attngen::Layer &plain = t_d32_rope_neox_layer();
    Problem problem(plain.info, 2, 5, 9, seed);
    std::vector<float> stray(2 * 2 * 16 * 32, 0.5f);
    const std::vector<int32_t> lengths = {3, 4};
    auto refused = [&](const std::function<void(attngen::Arguments &)> &spoil,
                       const std::string &argument) {
        OutputBuffer out(plain.info.dtype, problem.out_elements());
        const OutputBuffer out_before = out;
        const std::vector<float> stray_before = stray;
        attngen::Arguments args = problem.arguments(out.data());
        spoil(args);
        const attngen::Status status = attngen::run(plain, args);
        INFO("expected a refusal naming `" << argument << "`, got \"" << status.message() << "\"");
        REQUIRE_FALSE(status.ok());
        CHECK(names(status, argument));
        CHECK(changed_elements(out, out_before) == 0);
        CHECK(stray == stray_before);
    };
    refused(
        [&](auto &args) {
            args.k_cache = attngen::mutable_view(stray.data(), {2, 2, 16, 32});
        },
        "k_cache");
    refused([&](auto &args) { args.cache_lengths = attngen::view(lengths.data(), {2}); },
            "cache_lengths");

    CachedBatch contiguous(t_d32_cache_layer(), {3, 20}, 24, seed);
    const std::vector<int32_t> table = {0, 1, 2, 3};
    expect_refused(
        contiguous, {2, 4},
        [&](auto &args, auto &) {
            args.block_table = attngen::view(table.data(), {2, 2});
        },
        "block_table");
}
