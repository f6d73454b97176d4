// Random problems and error measures for the tests.
#include "test_support.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>

namespace attngen_test {

uint32_t test_seed(uint32_t fallback) {
    const char *text = std::getenv("ATTNGEN_TEST_SEED");
    return text ? static_cast<uint32_t>(std::strtoul(text, nullptr, 10)) : fallback;
}

const void *HostTensor::data() const {
    switch (dtype) {
    case attngen::DType::f32:
        return values.data();
    case attngen::DType::i32:
        return ints.data();
    case attngen::DType::i8:
        return bytes.data();
    default:
        return half.data();
    }
}

attngen::Tensor HostTensor::view() const {
    attngen::Tensor tensor;
    if (shape.empty())
        return tensor;
    tensor.data = data();
    tensor.dtype = dtype;
    tensor.rank = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int i = tensor.rank - 1; i >= 0; i--) {
        tensor.shape[i] = shape[i];
        tensor.strides[i] = stride;
        stride *= shape[i];
    }
    return tensor;
}

namespace {

size_t count(const std::vector<int64_t> &shape) {
    size_t n = 1;
    for (int64_t extent : shape)
        n *= static_cast<size_t>(extent);
    return n;
}

/** Fills `tensor` with uniform values in [-range, range], rounded to its dtype. */
void fill(HostTensor &tensor, attngen::DType dtype, std::vector<int64_t> shape, double range,
          std::mt19937 &rng) {
    tensor.dtype = dtype;
    tensor.shape = std::move(shape);
    std::uniform_real_distribution<float> uniform(static_cast<float>(-range),
                                                  static_cast<float>(range));
    tensor.values.resize(count(tensor.shape));
    for (float &value : tensor.values)
        value = uniform(rng);
    if (dtype == attngen::DType::f32)
        return;
    tensor.half.resize(tensor.values.size());
    for (size_t i = 0; i < tensor.values.size(); i++) {
        tensor.half[i] =
            dtype == attngen::DType::f16 ? to_f16(tensor.values[i]) : to_bf16(tensor.values[i]);
        tensor.values[i] =
            dtype == attngen::DType::f16 ? from_f16(tensor.half[i]) : from_bf16(tensor.half[i]);
    }
}

/**
 * Fills `tensor` with uniform values in [-range, range] stored as `dtype`; i8 rows (the last
 * dimension) are quantized as quantize_i8 does, with their scales in `scales`, and `values` holds
 * each byte times its row's scale.
 */
void fill_stored(HostTensor &tensor, HostTensor &scales, attngen::DType dtype,
                 const std::vector<int64_t> &shape, double range, std::mt19937 &rng) {
    if (dtype != attngen::DType::i8) {
        fill(tensor, dtype, shape, range, rng);
        return;
    }
    fill(tensor, attngen::DType::f32, shape, range, rng);
    tensor.dtype = attngen::DType::i8;
    tensor.unquantized = tensor.values;
    const size_t row = static_cast<size_t>(shape.back());
    scales.dtype = attngen::DType::f32;
    scales.shape.assign(shape.begin(), shape.end() - 1);
    scales.values.resize(tensor.values.size() / row);
    tensor.bytes.resize(tensor.values.size());
    round_rows_to_i8(tensor.values.data(), tensor.values.size(), row, tensor.bytes.data(),
                     scales.values.data());
}

std::vector<double> widen(const HostTensor &tensor) {
    return std::vector<double>(tensor.values.begin(), tensor.values.end());
}

} // namespace

Problem::Problem(const attngen::LayerInfo &layer, int b, int lq, int lk, uint32_t seed)
    : info(layer), batch(b), query_len(lq),
      key_len(layer.projections && !layer.cross_attention ? lq : lk) {
    lk = key_len; // self-attention: keys are the queries' own positions
    std::mt19937 rng(seed);
    const attngen::DType t = info.dtype;
    const int64_t H = info.heads, Hkv = info.kv_heads, D = info.head_dim, M = info.model_dim;
    const int64_t Dv = info.value_dim;
    if (info.projections) {
        const double w_range = 1.0 / std::sqrt(static_cast<double>(M));
        fill(x, t, {b, lq, M}, 1.0, rng);
        if (info.cross_attention)
            fill(context, t, {b, lk, M}, 1.0, rng);
        fill(wq, t, {H * D, M}, w_range, rng);
        fill(wk, t, {Hkv * D, M}, w_range, rng);
        fill(wv, t, {Hkv * Dv, M}, w_range, rng);
        if (info.bias) {
            fill(bq, t, {H * D}, 0.5, rng);
            fill(bk, t, {Hkv * D}, 0.5, rng);
            fill(bv, t, {Hkv * Dv}, 0.5, rng);
        }
        if (info.out_projection) {
            fill(wo, t, {M, H * Dv}, 1.0 / std::sqrt(static_cast<double>(H * Dv)), rng);
            if (info.bias)
                fill(bo, t, {M}, 0.5, rng);
        }
    } else {
        fill(query, t, {b, H, lq, D}, 1.0, rng);
        fill_stored(key, key_scales, info.kv_dtype, {b, Hkv, lk, D}, 1.0, rng);
        fill_stored(value, value_scales, info.kv_dtype, {b, Hkv, lk, Dv}, 1.0, rng);
    }
    if (info.key_padding) {
        key_lengths.dtype = attngen::DType::i32;
        key_lengths.shape = {b};
        std::uniform_int_distribution<int32_t> length(0, lk);
        for (int i = 0; i < b; i++)
            key_lengths.ints.push_back(length(rng));
        key_lengths.values.assign(key_lengths.ints.begin(), key_lengths.ints.end());
    }
    for (int i = 0; i < info.extra_count; i++) {
        const attngen::ExtraArgument &extra = info.extras[i];
        if (extra.is_scalar) {
            scalars[extra.name] = 1.0;
            continue;
        }
        std::vector<int64_t> shape;
        for (int d = 0; d < extra.rank; d++)
            shape.push_back(extra.dims[d] == attngen::dim_batch     ? b
                            : extra.dims[d] == attngen::dim_queries ? lq
                            : extra.dims[d] == attngen::dim_keys    ? lk
                                                                    : extra.dims[d]);
        HostTensor &tensor = tensors[extra.name];
        if (extra.dtype == attngen::DType::i32) {
            tensor.dtype = attngen::DType::i32;
            tensor.shape = shape;
            std::uniform_int_distribution<int32_t> index(0, lk);
            for (size_t n = count(shape); n > 0; n--)
                tensor.ints.push_back(index(rng));
            tensor.values.assign(tensor.ints.begin(), tensor.ints.end());
        } else {
            fill(tensor, attngen::DType::f32, shape, 1.0, rng);
        }
    }
    if (info.rope.kind != attngen::RopeKind::none && info.rope.table) {
        const int64_t pairs = info.rope.rotary_dim / 2;
        std::uniform_real_distribution<double> angle(-3.14159, 3.14159);
        for (HostTensor *table : {&rope_cos, &rope_sin}) {
            table->shape = {lk, pairs};
            table->values.resize(static_cast<size_t>(lk * pairs));
        }
        for (size_t i = 0; i < rope_cos.values.size(); i++) {
            const double a = angle(rng);
            rope_cos.values[i] = static_cast<float>(std::cos(a));
            rope_sin.values[i] = static_cast<float>(std::sin(a));
        }
    }
    if (info.additive) {
        fill(attn_bias, t, {b, H, lq, lk}, 2.0, rng);
        // A few -inf entries: an additive mask can hide keys too.
        std::bernoulli_distribution hidden(0.05);
        for (size_t i = 0; i < attn_bias.values.size(); i++)
            if (hidden(rng)) {
                attn_bias.values[i] = -std::numeric_limits<float>::infinity();
                if (t == attngen::DType::f16)
                    attn_bias.half[i] = 0xfc00;
                else if (t == attngen::DType::bf16)
                    attn_bias.half[i] = 0xff80;
            }
    }
    // Last, so that the other inputs of a layer without sinks are drawn as before. Logits
    // about as large as the scores', so that the sink takes a real share of each row.
    if (info.sinks)
        fill(sinks, attngen::DType::f32, {H}, 3.0, rng);
}

attngen::Arguments Problem::arguments(void *out) const {
    attngen::Arguments args;
    args.query = query.view();
    args.key = key.view();
    args.value = value.view();
    args.key_scales = key_scales.view();
    args.value_scales = value_scales.view();
    args.x = x.view();
    args.context = context.view();
    args.wq = wq.view();
    args.wk = wk.view();
    args.wv = wv.view();
    args.wo = wo.view();
    args.bq = bq.view();
    args.bk = bk.view();
    args.bv = bv.view();
    args.bo = bo.view();
    args.key_lengths = key_lengths.view();
    args.attn_bias = attn_bias.view();
    args.rope_cos = rope_cos.view();
    args.rope_sin = rope_sin.view();
    args.sinks = sinks.view();
    for (const auto &entry : tensors)
        args.set_tensor(entry.first, entry.second.view());
    for (const auto &entry : scalars)
        args.set_scalar(entry.first, entry.second);
    HostTensor shape_only;
    shape_only.shape = out_shape();
    attngen::Tensor layout = shape_only.view();
    static_cast<attngen::Layout &>(args.out) = layout;
    args.out.dtype = info.dtype;
    args.out.data = out;
    return args;
}

std::vector<int64_t> Problem::out_shape() const {
    if (info.out_projection)
        return {batch, query_len, info.model_dim};
    return {batch, info.heads, query_len, info.value_dim};
}

size_t Problem::out_elements() const {
    return count(out_shape());
}

PackedRows pack_rows(const attngen::Tensor &batched, const std::vector<int> &lengths) {
    PackedRows packed;
    const size_t element = attngen::dtype_size(batched.dtype);
    const bool per_head = batched.rank == 4;
    const int64_t heads = per_head ? batched.shape[1] : 1;
    const int64_t width = batched.shape[batched.rank - 1];
    const int64_t row_stride = batched.strides[per_head ? 2 : 1];
    int64_t total = 0;
    for (int length : lengths)
        total += length;
    packed.bytes.resize(static_cast<size_t>(total * heads * width) * element);
    uint8_t *to = packed.bytes.data();
    for (size_t b = 0; b < lengths.size(); b++)
        for (int64_t t = 0; t < lengths[b]; t++)
            for (int64_t h = 0; h < heads; h++) {
                const int64_t from = static_cast<int64_t>(b) * batched.strides[0] +
                                     (per_head ? h * batched.strides[1] : 0) + t * row_stride;
                const size_t bytes = static_cast<size_t>(width) * element;
                std::memcpy(to, static_cast<const uint8_t *>(batched.data) + from * element, bytes);
                to += bytes;
            }
    packed.view = per_head
                      ? attngen::view(packed.bytes.data(), batched.dtype, {total, heads, width})
                      : attngen::view(packed.bytes.data(), batched.dtype, {total, width});
    return packed;
}

std::vector<int32_t> offsets_of(const std::vector<int> &lengths) {
    std::vector<int32_t> offsets = {0};
    for (int length : lengths)
        offsets.push_back(offsets.back() + length);
    return offsets;
}

ReferenceProblem Problem::reference() const {
    ReferenceProblem p;
    p.batch = batch;
    p.heads = info.heads;
    p.kv_heads = info.kv_heads;
    p.head_dim = info.head_dim;
    p.value_dim = info.value_dim;
    p.model_dim = info.model_dim;
    p.query_len = query_len;
    p.key_len = key_len;
    p.scale = info.scale;
    p.causal = info.causal;
    p.key_padding = info.key_padding;
    p.window = info.window;
    p.additive = info.additive;
    p.projections = info.projections;
    p.out_projection = info.out_projection;
    p.bias = info.bias;
    p.cross = info.cross_attention;
    p.query = widen(query);
    p.key = widen(key);
    p.value = widen(value);
    p.x = widen(x);
    p.context = widen(context);
    p.wq = widen(wq);
    p.wk = widen(wk);
    p.wv = widen(wv);
    p.wo = widen(wo);
    p.bq = widen(bq);
    p.bk = widen(bk);
    p.bv = widen(bv);
    p.bo = widen(bo);
    p.key_lengths.assign(key_lengths.ints.begin(), key_lengths.ints.end());
    p.attn_bias = widen(attn_bias);
    p.sinks = widen(sinks);
    const attngen::RopeInfo &rope = info.rope;
    using Layout = ReferenceRope::Layout;
    using Scaling = ReferenceRope::Scaling;
    p.rope.layout = rope.kind == attngen::RopeKind::neox          ? Layout::neox
                    : rope.kind == attngen::RopeKind::interleaved ? Layout::interleaved
                                                                  : Layout::none;
    p.rope.theta = rope.theta;
    p.rope.rotary_dim = rope.rotary_dim;
    p.rope.scaling = rope.scaling == attngen::RopeScalingKind::linear   ? Scaling::linear
                     : rope.scaling == attngen::RopeScalingKind::llama3 ? Scaling::llama3
                                                                        : Scaling::none;
    p.rope.factor = rope.factor;
    p.rope.low_freq_factor = rope.low_freq_factor;
    p.rope.high_freq_factor = rope.high_freq_factor;
    p.rope.original_max_positions = rope.original_max_positions;
    p.rope.cos_table = widen(rope_cos);
    p.rope.sin_table = widen(rope_sin);
    return p;
}

OutputBuffer::OutputBuffer(attngen::DType type, size_t elements, size_t row_elements)
    : dtype(type), row(row_elements) {
    // A recognizable non-zero pattern, so a result that was never written cannot pass.
    if (dtype == attngen::DType::f32) {
        f32.assign(elements, -12345.0f);
    } else if (dtype == attngen::DType::i8) {
        bytes.assign(elements, -77);
        scales.assign(elements / row, -123.0f);
    } else {
        half.assign(elements, dtype == attngen::DType::f16 ? to_f16(-1234.0f) : to_bf16(-1234.0f));
    }
}

void *OutputBuffer::data() {
    return dtype == attngen::DType::f32  ? static_cast<void *>(f32.data())
           : dtype == attngen::DType::i8 ? static_cast<void *>(bytes.data())
                                         : static_cast<void *>(half.data());
}

void check_refused(const attngen::Layer &layer, const attngen::Arguments &args,
                   const std::string &expected) {
    const attngen::Status status = attngen::run(layer, args);
    INFO("expected \"" << expected << "\", got \"" << status.message() << "\"");
    CHECK_FALSE(status.ok());
    CHECK(status.message().find(expected) != std::string::npos);
}

double i8_error_bound(int head_dim, double scale) {
    // Quantizing a row to round(x / s), s = max |x| / 127, moves each element by at most
    // max|x| / 254. A key's score moves by at most e = scale * |q|_1 * max|K| / 254, plus
    // scale * max|q| * |K|_1 / 65534 where the x86 split-KV form rounds the query to 16 bits
    // (query_rounding_error; head_dim <= 512); each softmax weight by a factor within e^(+-2e), so
    // the output moves by at most max|V| / 254 + (e^(2e) - 1) max|V|; plus 1e-5 for the f32
    // arithmetic.
    const double e = head_dim * scale * (1.0 / 254.0 + 1.0 / 65534.0);
    return 1.0 / 254.0 + std::expm1(2.0 * e) + 1e-5;
}

double query_rounding_error(int head_dim, double scale) {
    // The codes' largest magnitude: 32767, less where head_dim products of it and 128 would pass
    // an int32. Each query element moves by at most scale * max|q| / (2 limit), a score by
    // e = scale * max|q| * |K|_1 / (2 limit), the output by (e^(2e) - 1) max|V|.
    const double limit = std::min(32767.0, std::floor(2147483647.0 / (128.0 * head_dim)));
    return std::expm1(2.0 * head_dim * scale / (2.0 * limit));
}

float quantize_row(const std::vector<double> &row, std::vector<int8_t> &bytes) {
    const std::vector<float> single(row.begin(), row.end());
    bytes.assign(row.size(), 0);
    return quantize_i8(single.data(), single.size(), bytes.data());
}

std::vector<float> OutputBuffer::values() const {
    if (dtype == attngen::DType::f32)
        return f32;
    if (dtype == attngen::DType::i8) {
        std::vector<float> dequantized(bytes.size());
        for (size_t i = 0; i < bytes.size(); i++)
            dequantized[i] = static_cast<float>(bytes[i]) * scales[i / row];
        return dequantized;
    }
    std::vector<float> widened(half.size());
    for (size_t i = 0; i < half.size(); i++)
        widened[i] = dtype == attngen::DType::f16 ? from_f16(half[i]) : from_bf16(half[i]);
    return widened;
}

double relative_error(const std::vector<float> &got, const std::vector<double> &want) {
    if (got.size() != want.size())
        return std::numeric_limits<double>::infinity();
    double scale = 1.0, error = 0.0;
    for (double value : want)
        scale = std::max(scale, std::abs(value));
    for (size_t i = 0; i < got.size(); i++) {
        double diff = std::abs(static_cast<double>(got[i]) - want[i]);
        if (!(diff <= error)) // NaN counts as infinite error
            error = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
    }
    return error / scale;
}

double lse_error(const std::vector<float> &got, const std::vector<double> &want) {
    constexpr double infinity = std::numeric_limits<double>::infinity();
    if (got.size() != want.size())
        return infinity;
    double error = 0.0;
    for (size_t i = 0; i < got.size(); i++) {
        const double g = got[i], w = want[i];
        if (std::isnan(w) || std::isinf(w)) {
            if (!(std::isnan(w) ? std::isnan(g) : g == w))
                return infinity;
            continue;
        }
        const double diff = std::abs(g - w) / std::max(1.0, std::abs(w));
        if (!(diff <= error)) // NaN counts as infinite error
            error = std::isnan(diff) ? infinity : diff;
    }
    return error;
}

double tolerance_for(attngen::DType dtype) {
    switch (dtype) {
    case attngen::DType::f16:
        return 2e-3;
    case attngen::DType::bf16:
        return 1.6e-2;
    default:
        return 5e-6;
    }
}

std::string describe(const Problem &problem, uint32_t seed) {
    return std::string("layer=") + problem.info.name + " B=" + std::to_string(problem.batch) +
           " Lq=" + std::to_string(problem.query_len) + " Lk=" + std::to_string(problem.key_len) +
           " seed=" + std::to_string(seed);
}

std::vector<Shape> shapes_for(uint32_t seed) {
    std::vector<Shape> shapes = {{1, 1, 1},   {1, 1, 37},  {1, 37, 1},  {2, 7, 7},
                                 {3, 17, 23}, {1, 33, 16}, {2, 64, 64}, {1, 45, 130}};
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> batch(1, 3), length(1, 100);
    for (int i = 0; i < 4; i++)
        shapes.push_back({batch(rng), length(rng), length(rng)});
    return shapes;
}

std::vector<Shape> decode_shapes() {
    return {{1, 1, 300}, {2, 4, 129}, {1, 16, 517}, {3, 9, 64}};
}

void check_against_reference(const attngen::Layer &layer, uint32_t base_seed,
                             const std::vector<Shape> &extra_shapes, double extra_tolerance) {
    const uint32_t seed = test_seed(base_seed);
    INFO("layer " << layer.info.name << ", seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    const double tolerance = tolerance_for(layer.info.dtype) + extra_tolerance;
    uint32_t problem_seed = seed;
    std::vector<Shape> shapes = shapes_for(seed);
    shapes.insert(shapes.end(), extra_shapes.begin(), extra_shapes.end());
    for (const Shape &shape : shapes) {
        // A rope table's rows are key positions, and queries sit at q + Lk - Lq: such a layer
        // refuses Lq > Lk (test_rope.cpp checks the refusal).
        const bool own_keys = layer.info.projections && !layer.info.cross_attention;
        if (layer.info.rope.table && !own_keys && shape.query_len > shape.key_len)
            continue;
        Problem problem(layer.info, shape.batch, shape.query_len, shape.key_len, ++problem_seed);
        OutputBuffer out(layer.info.dtype, problem.out_elements());
        attngen::Arguments args = problem.arguments(out.data());
        // Not 0: the layer must write every element.
        std::vector<float> lse(
            static_cast<size_t>(shape.batch) * layer.info.heads * shape.query_len, 12345.0f);
        if (layer.info.lse)
            args.lse =
                attngen::mutable_view(lse.data(), {shape.batch, layer.info.heads, shape.query_len});
        attngen::Status status = attngen::run(layer, args);
        INFO(describe(problem, problem_seed) << ": " << status.message());
        REQUIRE(status.ok());
        std::vector<double> want_lse;
        double error =
            relative_error(out.values(), reference_attention(problem.reference(),
                                                             layer.info.lse ? &want_lse : nullptr));
        INFO("relative error " << error << ", tolerance " << tolerance);
        CHECK(error <= tolerance);
        if (layer.info.lse) {
            const double lse_diff = lse_error(lse, want_lse);
            INFO("lse error " << lse_diff << ", tolerance " << lse_tolerance);
            CHECK(lse_diff <= lse_tolerance);
        }
    }
}

namespace {

/**
 * One call of check_sink_edges: head h's sink is edges[(h + rotation) % 8]. The reference's
 * double precision is the judge; rows of a batch whose key length is 0 must be exactly 0.
 */
void check_sink_edge_call(const attngen::Layer &layer, uint32_t seed, int rotation) {
    const attngen::LayerInfo &info = layer.info;
    constexpr float inf = std::numeric_limits<float>::infinity();
    const float edges[] = {4.0f, -inf, std::numeric_limits<float>::quiet_NaN(), inf, 60.0f, -60.0f,
                           0.5f, -4.0f};
    const int batch = 2, query_len = 5, key_len = 40;
    Problem problem(info, batch, query_len, key_len, seed + static_cast<uint32_t>(rotation));
    if (info.key_padding)
        problem.key_lengths.ints = {0, 17};
    for (size_t h = 0; h < problem.sinks.values.size(); h++)
        problem.sinks.values[h] = edges[(h + static_cast<size_t>(rotation)) % 8];
    OutputBuffer out(info.dtype, problem.out_elements());
    const attngen::Status status = attngen::run(layer, problem.arguments(out.data()));
    INFO(describe(problem, seed) << ", rotation " << rotation << ": " << status.message());
    REQUIRE(status.ok());
    const std::vector<float> got = out.values();
    const std::vector<double> want = reference_attention(problem.reference());
    REQUIRE(got.size() == want.size());
    const size_t per_head = static_cast<size_t>(query_len) * info.value_dim;
    double scale = 1.0;
    for (double value : want)
        if (std::isfinite(value))
            scale = std::max(scale, std::abs(value));
    for (size_t i = 0; i < got.size(); i++) {
        const size_t head = (i / per_head) % static_cast<size_t>(info.heads);
        const bool masked_row = info.key_padding && i < got.size() / batch;
        const float sink = problem.sinks.values[head];
        INFO("element " << i << " of head " << head << " (sink " << sink << "): got " << got[i]
                        << ", reference " << want[i]);
        if (std::isnan(sink) || sink == inf) {
            REQUIRE(std::isnan(got[i]));
            REQUIRE(std::isnan(want[i]));
        } else if (masked_row) {
            REQUIRE(got[i] == 0.0f);
        } else {
            REQUIRE(std::abs(got[i] - want[i]) <= tolerance_for(info.dtype) * scale);
        }
    }
}

} // namespace

void check_sink_edges(const attngen::Layer &layer, uint32_t base_seed) {
    const uint32_t seed = test_seed(base_seed);
    INFO("layer " << layer.info.name << ", seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    REQUIRE(layer.info.sinks);
    REQUIRE_FALSE(layer.info.projections);
    // Eight calls, the edge values rotated over the heads: every head meets every edge, however
    // few heads the layer has.
    for (int rotation = 0; rotation < 8; rotation++)
        check_sink_edge_call(layer, seed, rotation);
}

namespace {

/** Sets element `index` of `tensor` to `value`, in its storage too. */
void plant(HostTensor &tensor, size_t index, float value) {
    tensor.values[index] = value;
    if (tensor.dtype == attngen::DType::f16)
        tensor.half[index] = to_f16(value);
    else if (tensor.dtype == attngen::DType::bf16)
        tensor.half[index] = to_bf16(value);
}

/** The class of a value: "NaN", "+inf", "-inf" or "finite". */
const char *value_class(double value) {
    if (std::isnan(value))
        return "NaN";
    if (std::isinf(value))
        return value > 0 ? "+inf" : "-inf";
    return "finite";
}

/**
 * The first output element that breaks the rules (see check_non_finite), described, or "" if
 * none does. `math` is the reference that adds 0 x V for keys of weight 0.
 */
std::string non_finite_mismatch(const std::vector<float> &got, const std::vector<double> &want,
                                const std::vector<double> &math, bool feeds_values,
                                double tolerance) {
    if (got.size() != want.size())
        return "the output has " + std::to_string(got.size()) + " elements, expected " +
               std::to_string(want.size());
    double scale = 1.0;
    for (double value : want)
        if (std::isfinite(value))
            scale = std::max(scale, std::abs(value));
    for (size_t i = 0; i < got.size(); i++) {
        const double g = got[i], w = want[i];
        bool ok = false;
        if (std::isnan(w))
            ok = std::isnan(g);
        else if (std::isinf(w)) // or 0 x inf, where an f32 weight underflows to 0
            ok = g == w || (feeds_values && std::isnan(g));
        else
            ok = std::abs(g - w) <= tolerance * scale ||
                 (feeds_values && std::isnan(g) && std::isnan(math[i]));
        if (!ok) {
            std::ostringstream message;
            message << "output element " << i << " is " << g << " (" << value_class(g)
                    << "), the reference " << w << " (" << value_class(w) << ")";
            return message.str();
        }
    }
    return "";
}

/**
 * The inputs check_non_finite plants in, by name, and whether each feeds V: the token tensors,
 * the additive bias and every declared f32 tensor.
 */
std::vector<std::pair<std::string, bool>> plantable_inputs(const attngen::LayerInfo &info) {
    std::vector<std::pair<std::string, bool>> inputs;
    if (info.projections) {
        inputs.emplace_back("x", !info.cross_attention);
        if (info.cross_attention)
            inputs.emplace_back("context", true);
    } else {
        inputs.emplace_back("query", false);
        inputs.emplace_back("key", false);
        inputs.emplace_back("value", true);
    }
    if (info.additive)
        inputs.emplace_back("attn_bias", false);
    for (int i = 0; i < info.extra_count; i++)
        if (!info.extras[i].is_scalar && info.extras[i].dtype == attngen::DType::f32)
            inputs.emplace_back(info.extras[i].name, false);
    return inputs;
}

} // namespace

void check_non_finite(const attngen::Layer &layer, uint32_t base_seed, const Prepare &prepare,
                      double tolerance) {
    const uint32_t seed = test_seed(base_seed);
    INFO("layer " << layer.info.name << ", seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    if (tolerance <= 0.0)
        tolerance = tolerance_for(layer.info.dtype);
    const float planted[] = {std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity()};
    // Prefill with Lq = Lk, decode (Lq < Lk) and a longer one that spans several blocks.
    const Shape shapes[] = {{2, 19, 19}, {2, 3, 45}, {1, 40, 130}};
    const std::vector<std::pair<std::string, bool>> inputs = plantable_inputs(layer.info);
    std::mt19937 rng(seed);
    uint32_t problem_seed = seed;
    for (const Shape &shape : shapes) {
        if (layer.info.rope.table && shape.query_len > shape.key_len)
            continue;
        for (float value : planted) {
            for (const auto &[input, feeds_values] : inputs)
                for (int trial = 0; trial < 2; trial++) {
                    Problem problem(layer.info, shape.batch, shape.query_len, shape.key_len,
                                    ++problem_seed);
                    ReferenceProblem unused;
                    if (prepare)
                        prepare(problem, unused);
                    HostTensor &tensor = input == "x"           ? problem.x
                                         : input == "context"   ? problem.context
                                         : input == "query"     ? problem.query
                                         : input == "key"       ? problem.key
                                         : input == "value"     ? problem.value
                                         : input == "attn_bias" ? problem.attn_bias
                                                                : problem.tensors.at(input);
                    std::uniform_int_distribution<size_t> element(0, tensor.values.size() - 1);
                    const size_t index = element(rng);
                    plant(tensor, index, value);
                    // prepare runs twice: before planting, so that the element is planted
                    // in the values the layer will read (a prepare may set a tensor), and
                    // after, so that the reference's modification copies the tensors with the
                    // planted element. A prepare sets fixed values and copies what it reads,
                    // so the second run leaves the planted element where it is.
                    ReferenceProblem math = problem.reference();
                    if (prepare)
                        prepare(problem, math);
                    ReferenceProblem skipped = math;
                    skipped.zero_weight_values = false;
                    OutputBuffer out(layer.info.dtype, problem.out_elements());
                    attngen::Status status = attngen::run(layer, problem.arguments(out.data()));
                    INFO(describe(problem, problem_seed)
                         << ": " << value_class(value) << " at element " << index << " of " << input
                         << "; " << status.message());
                    REQUIRE(status.ok());
                    const std::string mismatch =
                        non_finite_mismatch(out.values(), reference_attention(skipped),
                                            reference_attention(math), feeds_values, tolerance);
                    INFO(mismatch << " (tolerance " << tolerance << ")");
                    CHECK(mismatch.empty());
                }
        }
    }
}

void for_each_cpu_variant(const attngen::Layer &layer, const std::function<void()> &check) {
    AutomaticDispatchOnExit restore;
    for (int i = 0; i < layer.variant_count; i++) {
        const attngen::LayerVariant &variant = layer.variants[i];
        if (variant.device != attngen::Device::cpu)
            continue;
        const std::string name = attngen::cpu_variant_name(variant.cpu);
        INFO("layer " << layer.info.name << ", variant " << variant.target);
        const attngen::Status forced = attngen::force_cpu_variant(variant.cpu);
        if (!forced.ok()) {
            // e.g. avx512 is compile-only on machines without it.
            CHECK(forced.message() ==
                  "attngen: cannot force CPU variant " + name + ": this CPU does not support it");
            WARN("skipping " << variant.target << ": " << forced.message());
            continue;
        }
        check();
        CHECK(attngen::last_cpu_variant() == variant.cpu);
        CHECK(std::string(attngen::last_target()) == variant.target);
    }
}

} // namespace attngen_test
