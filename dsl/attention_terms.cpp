// The terms the attention forms are built from (attention_terms.h), and the storage types and
// exponentials that attention_algorithm.h declares.
#include "attention_terms.h"

#include <cmath>
#include <cstring>

namespace attngen {

using Halide::Expr;

Halide::Type storage_type(DType dtype) {
    switch (dtype) {
    case DType::f32:
        return Halide::Float(32);
    case DType::f16:
        return Halide::Float(16);
    case DType::bf16:
        return Halide::BFloat(16);
    case DType::i8:
        return Halide::Int(8);
    }
    return Halide::Float(32);
}

Halide::Type argument_type(const AttentionSpec &spec, const EntryArgument &argument) {
    if (argument.is_int32)
        return Halide::Int(32);
    if (argument.is_cache)
        return storage_type(spec.resolved_cache_dtype());
    if (argument.is_kv)
        return storage_type(spec.resolved_kv_dtype());
    return argument.is_declared ? Halide::Float(32) : storage_type(spec.dtype);
}

Expr widen_f16(const Expr &half) {
    using Halide::cast;
    using Halide::reinterpret;
    auto u32 = [](uint32_t constant) {
        return Halide::Internal::make_const(Halide::UInt(32), constant);
    };
    // Sign-extended and shifted: the sign in bit 31 (and 30..28), the exponent in bits 27..23
    // and the mantissa in 22..13, where f32 keeps them. |half| < 2^15, so the shift cannot
    // overflow.
    Expr bits = reinterpret<uint32_t>(cast<int32_t>(reinterpret<int16_t>(half)) << 13);
    // With bits 30..28 cleared, an f32 whose exponent is 112 too small: the multiply rebases it
    // and makes subnormals exact, the sign riding along.
    Expr finite = reinterpret<float>(bits & u32(0x8fffe000)) * 5.192296858534828e33f; // 2^112
    // The largest exponent, 31, is inf or NaN: all exponent bits set, sign and mantissa kept.
    Expr special = (bits & u32(0x0f800000)) == u32(0x0f800000);
    return reinterpret<float>(reinterpret<uint32_t>(finite) |
                              Halide::select(special, u32(0x7f800000), u32(0)));
}

Expr f32(const Expr &value, bool native_f16) {
    if (value.type().is_float() && value.type().bits() == 16 && !value.type().is_bfloat() &&
        !native_f16)
        return widen_f16(value);
    return Halide::cast<float>(value);
}

Expr narrowed(const Halide::Type &type, const Expr &value) {
    Expr stored = Halide::cast(type, value);
    if (type.bits() == 32)
        return stored;
    using Halide::Internal::make_const;
    Expr magnitude = Halide::reinterpret<int32_t>(value) & 0x7fffffff;
    const uint16_t nan_bits = type.is_bfloat() ? 0x7fc0 : 0x7e00;
    Expr nan = Halide::reinterpret(type, make_const(Halide::UInt(16), nan_bits));
    return Halide::select(magnitude > 0x7f800000, nan, stored);
}

LoweringContext lowering_context(const AttentionInputs &in, const Expr &k, const Expr &q,
                                 const Expr &h, const Expr &b) {
    LoweringContext context;
    context.b = b;
    context.h = h;
    context.q = q;
    context.k = k;
    context.tensors = in.tensors;
    context.tensor_extents = in.tensor_extents;
    context.scalars = in.scalars;
    return context;
}

Expr query_position(const Expr &row, const AttentionInputs &in, const AlgorithmOptions &options) {
    return options.reverse_queries ? in.query_len - 1 - row : row;
}

Expr query_offset(const AttentionSpec &spec, const AttentionInputs &in, const Expr &b) {
    return spec.cache.any() ? in.cache_lengths(b) : in.key_len - in.query_len;
}

Expr key_limit(const AttentionSpec &spec, const AttentionInputs &in, const Expr &b) {
    if (spec.cache.any())
        return in.cache_lengths(b) + in.query_lengths(b);
    return spec.mask.key_padding ? in.key_lengths(b) : Expr();
}

Expr structured_visible(const AttentionSpec &spec, const AttentionInputs &in, const Expr &k,
                        const Expr &q, const Expr &b) {
    Expr visible = Halide::Internal::const_true();
    // Query q sits at key position q + offset: the last query sees the last key.
    Expr aligned_q = q + query_offset(spec, in, b);
    if (spec.mask.causal)
        visible = visible && k <= aligned_q;
    if (spec.mask.window > 0) // |k - aligned_q| < window, as two bounds the solver can use
        visible = visible && k > aligned_q - spec.mask.window && k < aligned_q + spec.mask.window;
    if (Expr limit = key_limit(spec, in, b); limit.defined())
        visible = visible && k < limit;
    return visible;
}

Expr predicates_visible(const AttentionSpec &spec, const AttentionInputs &in, const Expr &k,
                        const Expr &q, const Expr &h, const Expr &b) {
    Expr visible = Halide::Internal::const_true();
    for (const ModExprPtr &predicate : spec.mask_predicates)
        visible = visible && lower_expression(*predicate, lowering_context(in, k, q, h, b));
    return visible;
}

int32_t bits_of(float value) {
    int32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

Expr has_lowest_bits(const Expr &x) {
    return Halide::reinterpret<int32_t>(x) == bits_of(lowest);
}

Expr hide_score(const Expr &x, const Expr &keep_bits) {
    return Halide::reinterpret<float>((Halide::reinterpret<int32_t>(x) & keep_bits) |
                                      (bits_of(lowest) & ~keep_bits));
}

Expr bias_hides(const Expr &bias) {
    Expr bits = Halide::reinterpret<int32_t>(bias);
    return bits >= bits_of(masking_bias) &&
           bits <= bits_of(-std::numeric_limits<float>::infinity());
}

Expr inverse_sum(const Expr &sum) {
    return Halide::select(Halide::reinterpret<int32_t>(sum) == 0, 0.0f, 1.0f / sum);
}

Expr softmax_exp2(const Expr &x) {
    // 2^f on [-1/2, 1/2]: a near-minimax fit of the relative error (Lawson's iteration on 4001
    // Chebyshev points), 1.9e-9 in exact arithmetic and 1.1e-7 evaluated in f32.
    static constexpr float coefficients[] = {1.0f,
                                             0.6931471824645996f,
                                             0.24022647738456726f,
                                             0.05550328642129898f,
                                             0.009618470445275307f,
                                             0.001339997281320393f,
                                             0.00015350867761299014f};
    // The clamp is strict_float: under fast-math flags a max may return -126.5 for a NaN x,
    // and exp(NaN) must be NaN (see hide_score).
    Expr t = Halide::strict_float(Halide::select(x < -126.5f, -126.5f, x));
    // For t < 1/2, t - 1/2 < 0, so truncation rounds it up: n is t rounded to the nearest
    // integer, in [-127, 0], and (n + 127) << 23 is 2^n as a float's bits (0 for n = -127).
    Expr n = Halide::cast<int>(t - 0.5f);
    Expr f = t - Halide::cast<float>(n);
    Expr polynomial = coefficients[6];
    for (int i = 5; i >= 0; i--)
        polynomial = polynomial * f + coefficients[i];
    return polynomial * Halide::reinterpret<float>((n + 127) << 23);
}

Halide::Tuple turns_cos_sin(const Expr &turns) {
    // The nearest quarter turn (the top two bits after adding an eighth) and the rest, a signed
    // fraction of a turn in [-1/8, 1/8): an angle r in [-pi/4, pi/4], from its top 32 bits.
    Expr eighth = Halide::Internal::make_const(Halide::UInt(64), uint64_t(1) << 61);
    Expr quadrant = Halide::cast<int32_t>((turns + eighth) >> 62);
    Expr rest = Halide::cast<int64_t>(turns - (Halide::cast<uint64_t>(quadrant) << 62));
    constexpr double pi = 3.14159265358979323846;
    Expr r = Halide::cast<float>(Halide::cast<int32_t>(rest >> 32)) *
             static_cast<float>(2 * pi / 4294967296.0);
    // Cephes' single-precision sinf and cosf polynomials on [-pi/4, pi/4].
    Expr z = r * r;
    Expr sin = r + r * z * (-1.6666654611e-1f + z * (8.3321608736e-3f + z * -1.9515295891e-4f));
    Expr cos =
        1.0f - 0.5f * z +
        z * z * (4.166664568298827e-2f + z * (-1.388731625493765e-3f + z * 2.443315711809948e-5f));
    // A quarter turn more maps (cos, sin) to (-sin, cos).
    Expr cos_turned =
        Halide::select(quadrant == 0, cos, quadrant == 1, -sin, quadrant == 2, -cos, sin);
    Expr sin_turned =
        Halide::select(quadrant == 0, sin, quadrant == 1, cos, quadrant == 2, -sin, -cos);
    return Halide::Tuple(cos_turned, sin_turned);
}

Expr softmax_exp(const Expr &x) {
    Expr base2 = x * 1.44269504f;
    return softmax_exp2(Halide::strict_float(Halide::select(base2 > 0.0f, 0.0f, base2)));
}

Expr softmax_log(const Expr &x) {
    // x = 2^e m with m in [sqrt(1/2), sqrt(2)): subtracting sqrt(1/2)'s bits makes the exponent
    // field e (rounded down), and subtracting e from x's exponent field leaves m.
    constexpr int32_t sqrt_half_bits = 0x3f3504f3;
    Expr bits = Halide::reinterpret<int32_t>(x);
    Expr e = (bits - sqrt_half_bits) >> 23;
    Expr f = Halide::reinterpret<float>(bits - (e << 23)) - 1.0f;
    // Cephes' single-precision logf: log(1 + f) = f - f^2 / 2 + f^3 P(f), f in [-0.293, 0.414],
    // and e ln 2 in two parts (0.693359375 is exact in 10 bits).
    static constexpr float coefficients[] = {
        3.3333331174e-1f,  -2.4999993993e-1f, 2.0000714765e-1f,
        -1.6668057665e-1f, 1.4249322787e-1f,  -1.2420140846e-1f,
        1.1676998740e-1f,  -1.1514610310e-1f, 7.0376836292e-2f};
    Expr polynomial = coefficients[8];
    for (int i = 7; i >= 0; i--)
        polynomial = polynomial * f + coefficients[i];
    Expr z = f * f;
    Expr exponent = Halide::cast<float>(e);
    Expr small = polynomial * f * z + exponent * -2.12194440e-4f - 0.5f * z;
    return (f + small) + exponent * 0.693359375f;
}

double score_units(const AttentionSpec &spec, const AlgorithmOptions &options) {
    constexpr double log2_e = 1.4426950408889634;
    return options.polynomial_exp && !spec.score_mod ? log2_e : 1.0;
}

} // namespace attngen
