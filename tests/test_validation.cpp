// Bad inputs are refused before any generated code runs, with a message that names the
// argument, the expected and the actual value, and the caller's output is left untouched.
// A valid call writes only the elements its output view names (guard bytes around it).
#include "test_support.h"

#include "t_d64_all_masks.h"
#include "t_mha_cross.h"
#include "t_mha_self.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <limits>

using namespace attngen_test;

namespace {

/** Runs a valid problem changed by `spoil` and expects exactly `message`, output untouched. */
void expect_refused(const attngen::Layer &layer, int lq, int lk,
                    const std::function<void(attngen::Arguments &, Problem &)> &spoil,
                    const std::string &message) {
    const uint32_t seed = test_seed(4242);
    INFO("seed " << seed);
    Problem problem(layer.info, 2, lq, lk, seed);
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    const std::vector<float> before = out.values();
    attngen::Arguments args = problem.arguments(out.data());
    REQUIRE(attngen::validate(layer, args).ok()); // the unspoiled call is valid
    spoil(args, problem);
    attngen::Status status = attngen::run(layer, args);
    REQUIRE_FALSE(status.ok());
    CHECK(status.message() == message);
    CHECK(out.values() == before);
}

const attngen::Layer &masks() {
    return t_d64_all_masks_layer();
}

} // namespace

TEST_CASE("a null data pointer is refused by name") {
    expect_refused(
        masks(), 5, 6, [](auto &args, auto &) { args.key.data = nullptr; },
        "attngen: `key` has a null data pointer");
    expect_refused(
        masks(), 5, 6, [](auto &args, auto &) { args.out.data = nullptr; },
        "attngen: `out` has a null data pointer");
}

TEST_CASE("a head_dim other than the generated one is refused") {
    std::vector<float> wide(2 * 4 * 5 * 80, 0.5f);
    expect_refused(
        masks(), 5, 6,
        [&](auto &args, auto &) {
            args.query = attngen::view(wide.data(), {2, 4, 5, 80});
        },
        "attngen: `query` has head_dim 80 but layer 't_d64_all_masks' was generated "
        "for 64");
}

TEST_CASE("heads and kv_heads other than the generated ones are refused") {
    std::vector<float> data(2 * 8 * 6 * 64, 0.5f);
    expect_refused(
        masks(), 6, 6,
        [&](auto &args, auto &) {
            args.query = attngen::view(data.data(), {2, 8, 6, 64});
        },
        "attngen: `query` has heads 8 but layer 't_d64_all_masks' was generated for 4");
    expect_refused(
        masks(), 6, 6,
        [&](auto &args, auto &) {
            args.key = attngen::view(data.data(), {2, 4, 6, 64});
        },
        "attngen: `key` has kv_heads 4 but layer 't_d64_all_masks' was generated for 2");
}

TEST_CASE("tensors that disagree on batch or length are refused") {
    std::vector<float> data(3 * 2 * 6 * 64, 0.5f);
    expect_refused(
        masks(), 5, 6,
        [&](auto &args, auto &) {
            args.key = attngen::view(data.data(), {3, 2, 6, 64});
        },
        "attngen: `key` has batch 3 but `query` has batch 2");
    expect_refused(
        masks(), 5, 6,
        [&](auto &args, auto &) {
            args.value = attngen::view(data.data(), {2, 2, 7, 64});
        },
        "attngen: `value` has key length 7 but `key` has key length 6");
    expect_refused(
        masks(), 5, 6,
        [&](auto &args, auto &p) {
            args.attn_bias = attngen::view(p.attn_bias.values.data(), {2, 4, 6, 5});
        },
        "attngen: `attn_bias` has query length 6 but `query` has query length 5");
}

TEST_CASE("an output of the wrong shape is refused") {
    std::vector<float> out(2 * 4 * 4 * 64, 0.5f);
    expect_refused(
        masks(), 5, 6,
        [&](auto &args, auto &) {
            args.out = attngen::mutable_view(out.data(), {2, 4, 4, 64});
        },
        "attngen: `out` has query length 4 but the inputs give 5");
    expect_refused(
        masks(), 5, 6,
        [&](auto &args, auto &) {
            args.out = attngen::mutable_view(out.data(), {2, 4, 320});
        },
        "attngen: `out` must have rank 4 (batch, heads, query length, head_dim), got "
        "rank 3");
}

TEST_CASE("a wrong rank, dtype or missing argument is refused") {
    expect_refused(
        masks(), 5, 6, [](auto &args, auto &) { args.query.rank = 3; },
        "attngen: `query` must have rank 4 (batch, heads, query length, head_dim), "
        "got rank 3");
    expect_refused(
        masks(), 5, 6, [](auto &args, auto &) { args.value.dtype = attngen::DType::f16; },
        "attngen: `value` has dtype f16 but layer 't_d64_all_masks' was generated for f32");
    expect_refused(
        masks(), 5, 6, [](auto &args, auto &) { args.key_lengths = attngen::Tensor(); },
        "attngen: layer 't_d64_all_masks' needs `key_lengths` (batch) but it was not "
        "given");
    expect_refused(
        masks(), 5, 6, [](auto &args, auto &) { args.key_lengths.dtype = attngen::DType::f32; },
        "attngen: `key_lengths` has dtype f32 but must be i32");
    expect_refused(
        masks(), 5, 6, [](auto &args, auto &) { args.out = attngen::MutableTensor(); },
        "attngen: layer 't_d64_all_masks' needs `out` (batch, heads, query length, "
        "head_dim) but it was not given");
}

TEST_CASE("an argument the layer does not take is refused") {
    std::vector<float> data(2 * 6 * 64, 0.5f);
    expect_refused(
        masks(), 5, 6,
        [&](auto &args, auto &) {
            args.x = attngen::view(data.data(), {2, 6, 64});
        },
        "attngen: `x` was given but layer 't_d64_all_masks' has no projections: pass "
        "`query`, `key` and `value`");
    expect_refused(
        t_mha_self_layer(), 5, 5,
        [&](auto &args, auto &) {
            args.context = attngen::view(data.data(), {2, 6, 64});
        },
        "attngen: `context` was given but layer 't_mha_self' is not cross-attention");
}

TEST_CASE("strides are checked") {
    expect_refused(
        masks(), 5, 6, [](auto &args, auto &) { args.query.strides[3] = 2; },
        "attngen: `query` must have innermost stride 1, got 2");
    expect_refused(
        masks(), 5, 6, [](auto &args, auto &) { args.key.strides[1] = -64; },
        "attngen: `key` has stride -64 in dimension 1; strides must be in 0..2147483647");
    expect_refused(
        masks(), 5, 6, [](auto &args, auto &) { args.out.strides[2] = 32; },
        "attngen: `out` has overlapping elements: stride 32 in dimension 2 must be at "
        "least 64");
    std::vector<float> data(2 * 4 * 5 * 64, 0.5f);
    expect_refused(
        masks(), 5, 6,
        [&](auto &args, auto &) {
            args.query = attngen::strided_view(data.data(), attngen::DType::f32, {2, 4, 5, 64},
                                               {1280, 320, 64});
        },
        "attngen: `query` was given different numbers of sizes and strides");
}

TEST_CASE("a shape whose row-major strides overflow 64 bits is refused, not wrapped") {
    std::vector<float> data(16, 0.5f);
    expect_refused(
        masks(), 5, 6,
        [&](auto &args, auto &) {
            args.query = attngen::view(data.data(), {65536, 65536, 65536, 65536});
        },
        "attngen: `query` has stride 281474976710656 in dimension 0; strides must be "
        "in 0..2147483647");
}

TEST_CASE("a tensor too large for 32-bit addressing is refused") {
    expect_refused(
        masks(), 5, 6, [](auto &args, auto &) { args.attn_bias.strides[0] = 1 << 30; },
        "attngen: `attn_bias` spans 4294967776 bytes; a generated layer addresses at "
        "most 2147483647 bytes per tensor");
}

TEST_CASE("key lengths outside [0, Lk] are refused") {
    expect_refused(
        masks(), 5, 6, [](auto &, auto &p) { p.key_lengths.ints[1] = 7; },
        "attngen: `key_lengths[1]` is 7 but must be in [0, 6] (the key length)");
    expect_refused(
        masks(), 5, 6, [](auto &, auto &p) { p.key_lengths.ints[0] = -1; },
        "attngen: `key_lengths[0]` is -1 but must be in [0, 6] (the key length)");
}

TEST_CASE("an output that overlaps an input is refused") {
    expect_refused(
        masks(), 5, 6,
        [](auto &args, auto &p) { args.out.data = const_cast<float *>(p.query.values.data()); },
        "attngen: `out` overlaps `query`; the output must not share memory with an "
        "input");
}

TEST_CASE("projection weights of the wrong shape are refused") {
    std::vector<float> weight(48 * 40, 0.1f);
    expect_refused(
        t_mha_cross_layer(), 5, 7,
        [&](auto &args, auto &) {
            args.wk = attngen::view(weight.data(), {48, 40});
        },
        "attngen: `wk` has model_dim 40 but layer 't_mha_cross' was generated for 48");
    expect_refused(
        t_mha_self_layer(), 5, 5, [](auto &args, auto &) { args.bo = attngen::Tensor(); },
        "attngen: layer 't_mha_self' needs `bo` (model_dim) but it was not given");
}

TEST_CASE("a layer without entry points is refused") {
    attngen::Layer empty{t_d64_all_masks_layer().info, nullptr, nullptr, 0};
    attngen::Arguments args;
    attngen::Status status = attngen::run(empty, args);
    REQUIRE_FALSE(status.ok());
    CHECK(status.message() ==
          "attngen: the layer has no entry point; use the Layer from its generated header");
}

TEST_CASE("a valid call writes only the elements its output view names") {
    const uint32_t seed = test_seed(99);
    INFO("seed " << seed);
    const attngen::Layer &layer = masks();
    const int B = 2, H = 4, Lq = 9, Lk = 11, D = 64;
    Problem problem(layer.info, B, Lq, Lk, seed);

    // The output lives inside a larger block: rows padded by 3 floats, gaps between heads,
    // and guard regions before and after.
    const int64_t row = D + 3, head = Lq * row + 5, batch = H * head + 7, guard = 64;
    std::vector<float> block(guard + B * batch + guard);
    for (size_t i = 0; i < block.size(); i++)
        block[i] = -1000.0f - static_cast<float>(i);
    const std::vector<float> before = block;

    attngen::Arguments args = problem.arguments(nullptr);
    args.out = attngen::strided_mutable_view(block.data() + guard, attngen::DType::f32,
                                             {B, H, Lq, D}, {batch, head, row, 1});
    attngen::Status status = attngen::run(layer, args);
    INFO(status.message());
    REQUIRE(status.ok());

    std::vector<double> want = reference_attention(problem.reference());
    std::vector<bool> inside(block.size(), false);
    std::vector<float> got;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int q = 0; q < Lq; q++)
                for (int d = 0; d < D; d++) {
                    size_t at = guard + b * batch + h * head + q * row + d;
                    inside[at] = true;
                    got.push_back(block[at]);
                }
    CHECK(relative_error(got, want) <= tolerance_for(layer.info.dtype));
    size_t touched = 0;
    for (size_t i = 0; i < block.size(); i++)
        if (!inside[i] && std::memcmp(&block[i], &before[i], sizeof(float)) != 0)
            touched++;
    CHECK(touched == 0);
}

TEST_CASE("the finite check, when on, refuses a NaN or an infinity by tensor and index") {
    struct Off {
        ~Off() { attngen::set_finite_check(false); }
    } off;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    CHECK_FALSE(attngen::finite_check()); // off by default
    auto element = [](const HostTensor &t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
        return static_cast<size_t>(((i0 * t.shape[1] + i1) * t.shape[2] + i2) * t.shape[3] + i3);
    };
    {
        // Off: a NaN runs under the IEEE rules.
        Problem problem(masks().info, 2, 5, 6, test_seed(4243));
        problem.key.values[element(problem.key, 1, 0, 3, 5)] = nan;
        OutputBuffer out(masks().info.dtype, problem.out_elements());
        CHECK(attngen::run(masks(), problem.arguments(out.data())).ok());
    }
    attngen::set_finite_check(true);
    CHECK(attngen::finite_check());
    // The random problem's attn_bias holds -infs (they mask): expect_refused's valid call runs.
    expect_refused(
        masks(), 5, 6, [&](auto &, Problem &p) { p.key.values[element(p.key, 1, 0, 3, 5)] = nan; },
        "attngen: `key` holds NaN at [1, 0, 3, 5] (the finite check is on)");
    expect_refused(
        masks(), 5, 6,
        [&](auto &, Problem &p) { p.query.values[element(p.query, 0, 2, 4, 63)] = -inf; },
        "attngen: `query` holds -inf at [0, 2, 4, 63] (the finite check is on)");
    expect_refused(
        masks(), 5, 6,
        [&](auto &, Problem &p) { p.attn_bias.values[element(p.attn_bias, 1, 3, 0, 2)] = inf; },
        "attngen: `attn_bias` holds +inf at [1, 3, 0, 2] (the finite check is on)");
    // Strided: the gaps between rows hold NaN and are not read; an element the view names is.
    std::vector<float> padded(2 * 2 * 6 * 128, nan);
    for (size_t row = 0; row < 2 * 2 * 6; row++)
        for (size_t d = 0; d < 64; d++)
            padded[row * 128 + d] = 0.25f;
    auto strided_value = [&](attngen::Arguments &args, Problem &) {
        args.value = attngen::strided_view(padded.data(), attngen::DType::f32, {2, 2, 6, 64},
                                           {1536, 768, 128, 1});
    };
    Problem problem(masks().info, 2, 5, 6, test_seed(4244));
    OutputBuffer out(masks().info.dtype, problem.out_elements());
    attngen::Arguments args = problem.arguments(out.data());
    strided_value(args, problem);
    CHECK(attngen::validate(masks(), args).ok());
    padded[1536 + 2 * 128 + 7] = nan; // [1, 0, 2, 7]
    expect_refused(masks(), 5, 6, strided_value,
                   "attngen: `value` holds NaN at [1, 0, 2, 7] (the finite check is on)");
}
