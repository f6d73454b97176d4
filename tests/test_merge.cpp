// merge_attention: partial results over disjoint key sets, merged, against the attention over
// their union written plainly in double precision; the edge cases of the log-sum-exp (parts
// that saw no key, NaN and infinities), merging in place and through strides, 16-bit outputs
// rounded once, and the arguments refused with caller memory untouched.
#include "storage_types.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace attngen_test;

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();

/** Random queries, keys and values of rows = B x H x Lq query rows over (B, H)'s keys. */
struct Inputs {
    int batch = 2, heads = 3, queries = 4, keys = 29, head_dim = 8;
    std::vector<double> q, k, v; // (B, H, Lq, D), (B, H, Lk, D), (B, H, Lk, D)
    explicit Inputs(uint32_t seed) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<double> uniform(-2.0, 2.0);
        auto fill = [&](std::vector<double> &values, int rows) {
            values.resize(static_cast<size_t>(batch) * heads * rows * head_dim);
            for (double &value : values)
                value = uniform(rng);
        };
        fill(q, queries);
        fill(k, keys);
        fill(v, keys);
    }
    int rows() const { return batch * heads * queries; }
};

/** Attention and log-sum-exp per query row, over the keys `use` marks, from the definitions. */
struct Attention {
    std::vector<double> out, lse; // (rows, D), (rows)
};

Attention attend(const Inputs &in, const std::vector<bool> &use) {
    const int D = in.head_dim;
    Attention result{std::vector<double>(static_cast<size_t>(in.rows()) * D, 0.0),
                     std::vector<double>(static_cast<size_t>(in.rows()), -infinity)};
    for (int row = 0; row < in.rows(); row++) {
        const int group = row / in.queries; // (b, h)
        std::vector<double> scores;
        std::vector<int> keys;
        for (int j = 0; j < in.keys; j++) {
            if (!use[static_cast<size_t>(j)])
                continue;
            double dot = 0.0;
            for (int d = 0; d < D; d++)
                dot += in.q[static_cast<size_t>(row) * D + d] *
                       in.k[(static_cast<size_t>(group) * in.keys + j) * D + d];
            scores.push_back(dot / std::sqrt(static_cast<double>(D)));
            keys.push_back(j);
        }
        if (scores.empty())
            continue;
        double top = -infinity, sum = 0.0;
        for (double score : scores)
            top = std::max(top, score);
        for (double score : scores)
            sum += std::exp(score - top);
        for (size_t n = 0; n < keys.size(); n++)
            for (int d = 0; d < D; d++)
                result.out[static_cast<size_t>(row) * D + d] +=
                    std::exp(scores[n] - top) / sum *
                    in.v[(static_cast<size_t>(group) * in.keys + keys[n]) * D + d];
        result.lse[static_cast<size_t>(row)] = top + std::log(sum);
    }
    return result;
}

/** Two disjoint sets of keys that cover them all: `in_first(j)` says which holds key j. */
template <typename InFirst>
std::pair<std::vector<bool>, std::vector<bool>> split_keys(const Inputs &in, InFirst in_first) {
    std::vector<bool> first(static_cast<size_t>(in.keys)), second(first.size());
    for (size_t j = 0; j < first.size(); j++)
        (in_first(j) ? first : second)[j] = true;
    return {first, second};
}

/** A part stored as a layer would give it: out in `dtype`, lse in f32. */
struct StoredPart {
    attngen::DType dtype;
    std::vector<float> out32, lse;
    std::vector<uint16_t> out16;
    StoredPart(const Attention &attention, attngen::DType type) : dtype(type) {
        for (double value : attention.out) {
            out32.push_back(static_cast<float>(value));
            if (dtype == attngen::DType::f16)
                out16.push_back(to_f16(out32.back()));
            else if (dtype == attngen::DType::bf16)
                out16.push_back(to_bf16(out32.back()));
        }
        for (double value : attention.lse)
            lse.push_back(static_cast<float>(value));
    }
    const void *out_data() const {
        return dtype == attngen::DType::f32 ? static_cast<const void *>(out32.data())
                                            : static_cast<const void *>(out16.data());
    }
};

/** Output buffers of a merge, in `dtype`, filled with a sentinel that no merge writes. */
struct Merged {
    attngen::DType dtype;
    std::vector<float> out32, lse;
    std::vector<uint16_t> out16;
    Merged(attngen::DType type, size_t elements, size_t rows)
        : dtype(type), out32(type == attngen::DType::f32 ? elements : 0, -1234.0f),
          lse(rows, -1234.0f), out16(type == attngen::DType::f32 ? 0 : elements, 0x1234) {}
    void *out_data() {
        return dtype == attngen::DType::f32 ? static_cast<void *>(out32.data())
                                            : static_cast<void *>(out16.data());
    }
    double out(size_t i) const {
        if (dtype == attngen::DType::f32)
            return out32[i];
        return dtype == attngen::DType::f16 ? from_f16(out16[i]) : from_bf16(out16[i]);
    }
};

attngen::Status merge(const Inputs &in, const std::vector<StoredPart> &stored, Merged &merged) {
    const int64_t B = in.batch, H = in.heads, Lq = in.queries, D = in.head_dim;
    std::vector<attngen::AttentionPart> parts;
    for (const StoredPart &part : stored)
        parts.push_back({attngen::view(part.out_data(), part.dtype, {B, H, Lq, D}),
                         attngen::view(part.lse.data(), {B, H, Lq})});
    return attngen::merge_attention(
        parts, attngen::mutable_view(merged.out_data(), merged.dtype, {B, H, Lq, D}),
        attngen::mutable_view(merged.lse.data(), {B, H, Lq}));
}

/** Tolerance of an output element relative to max(1, max |reference|). */
double out_tolerance(attngen::DType dtype) {
    return dtype == attngen::DType::f32 ? 1e-6 : dtype == attngen::DType::f16 ? 2e-3 : 1.6e-2;
}

} // namespace

TEST_CASE("merging attention over disjoint sets of keys gives the attention over their union") {
    const uint32_t seed = test_seed(8101);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const Inputs in(seed);
    const attngen::DType dtype =
        GENERATE(attngen::DType::f32, attngen::DType::f16, attngen::DType::bf16);
    const int part_count = GENERATE(1, 2, 3, 5);
    INFO(attngen::dtype_name(dtype) << " outputs, " << part_count << " parts");
    // Each key goes to a random part: the sets are disjoint and cover every key.
    std::mt19937 rng(seed + 1);
    std::vector<std::vector<bool>> sets(static_cast<size_t>(part_count),
                                        std::vector<bool>(static_cast<size_t>(in.keys), false));
    for (int j = 0; j < in.keys; j++)
        sets[rng() % static_cast<unsigned>(part_count)][static_cast<size_t>(j)] = true;
    std::vector<StoredPart> stored;
    for (const std::vector<bool> &set : sets)
        stored.emplace_back(attend(in, set), dtype);
    const Attention whole = attend(in, std::vector<bool>(static_cast<size_t>(in.keys), true));

    Merged merged(dtype, whole.out.size(), whole.lse.size());
    const attngen::Status status = merge(in, stored, merged);
    INFO(status.message());
    REQUIRE(status.ok());
    double scale = 1.0;
    for (double value : whole.out)
        scale = std::max(scale, std::abs(value));
    for (size_t i = 0; i < whole.out.size(); i++) {
        INFO("element " << i << ": got " << merged.out(i) << ", reference " << whole.out[i]);
        REQUIRE(std::abs(merged.out(i) - whole.out[i]) <= out_tolerance(dtype) * scale);
    }
    // The lse is f32 in every part: its error is the parts' rounding, about 1e-7 relative.
    for (size_t row = 0; row < whole.lse.size(); row++) {
        INFO("row " << row << ": lse " << merged.lse[row] << ", reference " << whole.lse[row]);
        REQUIRE(std::abs(merged.lse[row] - whole.lse[row]) <=
                1e-6 * (1.0 + std::abs(whole.lse[row])));
    }
}

TEST_CASE("a part that saw no key adds nothing, and a row that no part saw is 0 with lse -inf") {
    const uint32_t seed = test_seed(8102);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const Inputs in(seed);
    const Attention seen = attend(in, std::vector<bool>(static_cast<size_t>(in.keys), true));
    const Attention unseen = attend(in, std::vector<bool>(static_cast<size_t>(in.keys), false));
    StoredPart part(seen, attngen::DType::f32), empty(unseen, attngen::DType::f32);
    // What a part that saw no key holds in its out does not matter: NaN here.
    for (float &value : empty.out32)
        value = std::numeric_limits<float>::quiet_NaN();

    Merged merged(attngen::DType::f32, seen.out.size(), seen.lse.size());
    REQUIRE(merge(in, {empty, part, empty}, merged).ok());
    CHECK(merged.out32 == part.out32); // weight exactly 1: the part itself
    CHECK(merged.lse == part.lse);

    Merged nothing(attngen::DType::f32, seen.out.size(), seen.lse.size());
    REQUIRE(merge(in, {empty, empty}, nothing).ok());
    for (float value : nothing.out32)
        REQUIRE(value == 0.0f);
    for (float value : nothing.lse)
        REQUIRE(value == -std::numeric_limits<float>::infinity());
}

TEST_CASE(
    "an lse of NaN or +inf makes its row NaN, and a NaN in a part's out makes its element NaN") {
    const uint32_t seed = test_seed(8103);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const Inputs in(seed);
    const auto [first, second] = split_keys(in, [](size_t j) { return j % 2 == 1; });
    StoredPart a(attend(in, first), attngen::DType::f32),
        b(attend(in, second), attngen::DType::f32);
    const size_t D = static_cast<size_t>(in.head_dim);
    a.lse[1] = std::numeric_limits<float>::quiet_NaN();
    b.lse[2] = std::numeric_limits<float>::infinity();
    // Row 3: b's weight underflows to 0 beside a's (lse 1e30 apart), yet its NaN still counts.
    a.lse[3] = 1e30f;
    b.out32[3 * D + 5] = std::numeric_limits<float>::quiet_NaN();

    Merged merged(attngen::DType::f32, a.out32.size(), a.lse.size());
    REQUIRE(merge(in, {a, b}, merged).ok());
    for (size_t row : {size_t(1), size_t(2)}) {
        INFO("row " << row);
        CHECK(std::isnan(merged.lse[row]));
        for (size_t d = 0; d < D; d++)
            CHECK(std::isnan(merged.out32[row * D + d]));
    }
    for (size_t d = 0; d < D; d++) {
        INFO("row 3, element " << d);
        CHECK(std::isnan(merged.out32[3 * D + d]) == (d == 5));
    }
    CHECK(merged.lse[3] == 1e30f);
    for (size_t i = 4 * D; i < merged.out32.size(); i++)
        REQUIRE(std::isfinite(merged.out32[i]));
}

TEST_CASE("merging in place and through strided views") {
    const uint32_t seed = test_seed(8104);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const Inputs in(seed);
    const auto [first, second] = split_keys(in, [](size_t j) { return j < 11; });
    StoredPart a(attend(in, first), attngen::DType::f32),
        b(attend(in, second), attngen::DType::f32);
    Merged dense(attngen::DType::f32, a.out32.size(), a.lse.size());
    REQUIRE(merge(in, {a, b}, dense).ok());

    const int64_t B = in.batch, H = in.heads, Lq = in.queries, D = in.head_dim;
    // In place: the output is part a's own tensors.
    StoredPart in_place = a;
    std::vector<attngen::AttentionPart> parts = {
        {attngen::view(in_place.out32.data(), {B, H, Lq, D}),
         attngen::view(in_place.lse.data(), {B, H, Lq})},
        {attngen::view(b.out32.data(), {B, H, Lq, D}), attngen::view(b.lse.data(), {B, H, Lq})}};
    REQUIRE(attngen::merge_attention(parts,
                                     attngen::mutable_view(in_place.out32.data(), {B, H, Lq, D}),
                                     attngen::mutable_view(in_place.lse.data(), {B, H, Lq}))
                .ok());
    CHECK(in_place.out32 == dense.out32);
    CHECK(in_place.lse == dense.lse);

    // Strided: rows padded by 3 elements, lse every other element, part b's out every other
    // element; the padding is untouched.
    const int64_t row_stride = D + 3;
    std::vector<float> out(static_cast<size_t>(B * H * Lq * row_stride), 77.0f);
    std::vector<float> lse(static_cast<size_t>(B * H * Lq * 2), 77.0f);
    std::vector<float> b_spread(2 * b.out32.size(), std::numeric_limits<float>::quiet_NaN());
    for (size_t i = 0; i < b.out32.size(); i++)
        b_spread[2 * i] = b.out32[i]; // the NaNs between must never be read
    const attngen::Status status = attngen::merge_attention(
        {{attngen::view(a.out32.data(), {B, H, Lq, D}), attngen::view(a.lse.data(), {B, H, Lq})},
         {attngen::strided_view(b_spread.data(), attngen::DType::f32, {B, H, Lq, D},
                                {2 * H * Lq * D, 2 * Lq * D, 2 * D, 2}),
          attngen::view(b.lse.data(), {B, H, Lq})}},
        attngen::strided_mutable_view(out.data(), attngen::DType::f32, {B, H, Lq, D},
                                      {H * Lq * row_stride, Lq * row_stride, row_stride, 1}),
        attngen::strided_mutable_view(lse.data(), attngen::DType::f32, {B, H, Lq},
                                      {H * Lq * 2, Lq * 2, 2}));
    INFO(status.message());
    REQUIRE(status.ok());
    for (size_t row = 0; row < static_cast<size_t>(B * H * Lq); row++) {
        for (size_t d = 0; d < static_cast<size_t>(row_stride); d++) {
            const float got = out[row * static_cast<size_t>(row_stride) + d];
            CHECK(got == (d < static_cast<size_t>(D) ? dense.out32[row * D + d] : 77.0f));
        }
        CHECK(lse[2 * row] == dense.lse[row]);
        CHECK(lse[2 * row + 1] == 77.0f);
    }
}

TEST_CASE("16-bit outputs are rounded once, to nearest even") {
    const attngen::DType dtype = GENERATE(attngen::DType::f16, attngen::DType::bf16);
    INFO(attngen::dtype_name(dtype));
    auto to_bits = [&](float value) {
        return dtype == attngen::DType::f16 ? to_f16(value) : to_bf16(value);
    };
    auto from_bits = [&](uint16_t bits) {
        return dtype == attngen::DType::f16 ? from_f16(bits) : from_bf16(bits);
    };
    // One part of weight 1 gives back its out: every one of the 65536 patterns survives
    // (NaNs as NaN).
    std::vector<uint16_t> patterns(65536);
    for (size_t i = 0; i < patterns.size(); i++)
        patterns[i] = static_cast<uint16_t>(i);
    std::vector<float> zeros(256, 0.0f), lse(256, -1.0f);
    std::vector<uint16_t> out(65536, 0);
    REQUIRE(attngen::merge_attention({{attngen::view(patterns.data(), dtype, {256, 256}),
                                       attngen::view(zeros.data(), {256})}},
                                     attngen::mutable_view(out.data(), dtype, {256, 256}),
                                     attngen::mutable_view(lse.data(), {256}))
                .ok());
    for (size_t i = 0; i < patterns.size(); i++) {
        INFO("pattern " << i);
        if (std::isnan(from_bits(patterns[i])))
            REQUIRE(std::isnan(from_bits(out[i])));
        else
            REQUIRE(out[i] == patterns[i]);
    }
    CHECK(lse == zeros);

    // Two parts of equal weight give the mean, (a + b) / 2: of two values within 8 binades of
    // each other that is exact in float, so rounding it to 16 bits once is the reference. The
    // first 256 pairs are neighbours, whose mean is a tie.
    const uint32_t seed = test_seed(8105);
    INFO("seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> magnitude(0.01f, 2.0f);
    std::vector<uint16_t> a(4096), b(4096), merged(4096, 0);
    for (size_t i = 0; i < a.size(); i++) {
        const float value = (rng() % 2 ? -1.0f : 1.0f) * magnitude(rng);
        a[i] = to_bits(value);
        b[i] = i < 256 ? static_cast<uint16_t>(a[i] + 1) : to_bits(value * magnitude(rng));
    }
    std::vector<float> equal(16, 0.5f), merged_lse(16, 0.0f);
    REQUIRE(attngen::merge_attention(
                {{attngen::view(a.data(), dtype, {16, 256}), attngen::view(equal.data(), {16})},
                 {attngen::view(b.data(), dtype, {16, 256}), attngen::view(equal.data(), {16})}},
                attngen::mutable_view(merged.data(), dtype, {16, 256}),
                attngen::mutable_view(merged_lse.data(), {16}))
                .ok());
    for (size_t i = 0; i < a.size(); i++) {
        const float mean = (from_bits(a[i]) + from_bits(b[i])) / 2.0f;
        INFO("element " << i << ": " << from_bits(a[i]) << " and " << from_bits(b[i]));
        REQUIRE(merged[i] == to_bits(mean));
    }
    for (float value : merged_lse)
        CHECK(value == Approx(0.5 + std::log(2.0)).epsilon(1e-7));
}

TEST_CASE("merge_attention refuses bad arguments by name and writes nothing") {
    const int64_t B = 1, H = 2, Lq = 3, D = 4;
    std::vector<float> a_out(24, 0.25f), a_lse(6, 0.5f), b_out(24, -0.25f), b_lse(6, 1.5f);
    std::vector<float> out(24, 9.0f), lse(6, 9.0f), wide(48, 9.0f);
    std::vector<uint16_t> half(24, 0x3c00);
    std::vector<int32_t> ints(24, 1);
    const attngen::AttentionPart a{attngen::view(a_out.data(), {B, H, Lq, D}),
                                   attngen::view(a_lse.data(), {B, H, Lq})};
    const attngen::AttentionPart b{attngen::view(b_out.data(), {B, H, Lq, D}),
                                   attngen::view(b_lse.data(), {B, H, Lq})};
    const attngen::MutableTensor good_out = attngen::mutable_view(out.data(), {B, H, Lq, D});
    const attngen::MutableTensor good_lse = attngen::mutable_view(lse.data(), {B, H, Lq});
    struct Case {
        const char *what;
        std::vector<attngen::AttentionPart> parts;
        attngen::MutableTensor out, lse;
        std::string expected;
    };
    attngen::AttentionPart device = b, null_lse = b, short_part = b, half_part = b, int_lse = b;
    device.out.on_device = true;
    null_lse.lse.data = nullptr;
    short_part.out = attngen::view(b_out.data(), {B, H, Lq - 1, D});
    half_part.out = attngen::view(half.data(), attngen::DType::f16, {B, H, Lq, D});
    int_lse.lse = attngen::view(ints.data(), {B, H, Lq});
    attngen::MutableTensor null_out = good_out, device_out = good_out, repeated = good_out;
    null_out.data = nullptr;
    device_out.on_device = true;
    repeated.strides[2] = 0; // every query row writes the same elements
    // A part whose out `out` overlaps by all but one element.
    std::vector<float> shared(25, 0.125f);
    const attngen::AttentionPart shifted{attngen::view(shared.data(), {B, H, Lq, D}), a.lse};
    const Case cases[] = {
        {"no parts", {}, good_out, good_lse, "`parts` is empty"},
        {"null out", {a, b}, null_out, good_lse, "`out` has a null data pointer"},
        {"device out", {a, b}, device_out, good_lse, "`out` is device memory"},
        {"out of rank 1",
         {a, b},
         attngen::mutable_view(out.data(), {24}),
         good_lse,
         "`out` must have rank 2 to 4"},
        {"i32 out",
         {a, b},
         attngen::mutable_view(ints.data(), attngen::DType::i32, {B, H, Lq, D}),
         good_lse,
         "`out` has dtype i32"},
        {"f16 lse",
         {a, b},
         good_out,
         attngen::mutable_view(half.data(), attngen::DType::f16, {B, H, Lq}),
         "`lse` has dtype f16"},
        {"lse of the wrong shape",
         {a, b},
         good_out,
         attngen::mutable_view(lse.data(), {B, H, 2}),
         "`lse` has shape (1, 2, 2)"},
        {"sizes without strides",
         {a, b},
         attngen::strided_mutable_view(out.data(), attngen::DType::f32, {B, H, Lq, D}, {1, 2}),
         good_lse,
         "different numbers of sizes and strides"},
        {"a negative stride",
         {a, b},
         attngen::strided_mutable_view(wide.data() + 47, attngen::DType::f32, {B, H, Lq, D},
                                       {48, 24, 8, -2}),
         good_lse,
         "`out` has stride -2 in dimension 3"},
        {"repeated out elements", {a, b}, repeated, good_lse, "`out` has overlapping elements"},
        {"a part on the device",
         {a, device},
         good_out,
         good_lse,
         "`parts[1].out` is device memory"},
        {"a part's null lse",
         {a, null_lse},
         good_out,
         good_lse,
         "`parts[1].lse` has a null data pointer"},
        {"a part of the wrong shape",
         {a, short_part},
         good_out,
         good_lse,
         "`parts[1].out` has shape (1, 2, 2, 4) but `out` has (1, 2, 3, 4)"},
        {"a part of another dtype",
         {half_part, b},
         good_out,
         good_lse,
         "`parts[0].out` has dtype f16 but `out` has f32"},
        {"a part's i32 lse", {a, int_lse}, good_out, good_lse, "`parts[1].lse` has dtype i32"},
        {"out overlapping a part",
         {shifted, b},
         attngen::mutable_view(shared.data() + 1, {B, H, Lq, D}),
         good_lse,
         "`out` overlaps `parts[0].out`"},
        {"out overlapping lse",
         {a, b},
         good_out,
         attngen::mutable_view(out.data() + 4, {B, H, Lq}),
         "`out` overlaps `lse`"},
        {"lse that is a part's out",
         {a, b},
         good_out,
         attngen::mutable_view(b_out.data(), {B, H, Lq}),
         "`lse` overlaps `parts[1].out`"},
        {"over 2^47 elements",
         {a, b},
         attngen::mutable_view(out.data(), {1 << 24, 1 << 24}),
         attngen::mutable_view(lse.data(), {1 << 24}),
         "at most 2^47 elements"},
    };
    const std::vector<float> a_before = a_out, b_before = b_out, out_before = out, lse_before = lse;
    for (const Case &c : cases) {
        INFO(c.what);
        const attngen::Status status = attngen::merge_attention(c.parts, c.out, c.lse);
        INFO(status.message());
        CHECK_FALSE(status.ok());
        CHECK(status.message().find(c.expected) != std::string::npos);
        CHECK(out == out_before);
        CHECK(lse == lse_before);
        CHECK(a_out == a_before);
        CHECK(b_out == b_before);
        CHECK(wide == std::vector<float>(48, 9.0f));
        CHECK(shared == std::vector<float>(25, 0.125f));
    }
}
