// The description API refuses invalid layers with a message naming the field.
#include "dsl/attention_spec.h"

#include <catch2/catch.hpp>

#include <cmath>

using attngen::AttentionSpec;

namespace {

std::string problems(const AttentionSpec &spec) {
    return attngen::describe_errors(attngen::check_spec(spec));
}

AttentionSpec sdpa(int heads, int head_dim) {
    AttentionSpec spec;
    spec.heads = heads;
    spec.head_dim = head_dim;
    return spec;
}

} // namespace

TEST_CASE("a plain description is valid and derives its defaults") {
    AttentionSpec spec = sdpa(8, 64);
    CHECK(problems(spec).empty());
    CHECK(spec.resolved_kv_heads() == 8);
    CHECK(spec.resolved_model_dim() == 512);
    CHECK(spec.resolved_scale() == 1.0 / std::sqrt(64.0));
    spec.scale = 1.0;
    CHECK(spec.resolved_scale() == 1.0);

    AttentionSpec mha;
    mha.model_dim = 512;
    mha.heads = 8;
    mha.kv_heads = 2;
    mha.projections = {true, true, true, true, true};
    CHECK(problems(mha).empty());
    CHECK(mha.resolved_head_dim() == 64);
    CHECK(mha.group_size() == 4);
}

TEST_CASE("kv_heads must divide heads") {
    AttentionSpec spec = sdpa(8, 64);
    spec.kv_heads = 3;
    CHECK(problems(spec) == "kv_heads: must divide heads (8), got 3");
}

TEST_CASE("invalid sizes name their field") {
    CHECK(problems(sdpa(0, 64)) == "heads: must be in 1..4096, got 0");
    CHECK(problems(sdpa(2, 0)) == "head_dim: is required without projections (or give "
                                  "model_dim), got 0");
    AttentionSpec spec = sdpa(2, -4);
    CHECK(problems(spec) == "head_dim: must be in 1..65536 (or 0 to derive), got -4");
    AttentionSpec derived;
    derived.model_dim = 100;
    derived.heads = 3;
    derived.projections = {true, true, true, false, false};
    CHECK(problems(derived) ==
          "head_dim: cannot be derived: model_dim 100 is not divisible by heads 3");
}

TEST_CASE("projections must be all of q, k and v or none") {
    AttentionSpec spec = sdpa(2, 16);
    spec.model_dim = 32;
    spec.projections.q = true;
    CHECK(problems(spec) == "projections: must name all of q, k and v or none of them, got 'q'");
    AttentionSpec out_only = sdpa(2, 16);
    out_only.model_dim = 32;
    out_only.projections.out = true;
    CHECK(problems(out_only) == "projections: 'out' needs q, k and v as well, got 'out'");
}

TEST_CASE("bias and cross-attention need projections") {
    AttentionSpec spec = sdpa(2, 16);
    spec.projections.bias = true;
    spec.cross_attention = true;
    CHECK(problems(spec) == "bias: needs projections; the layer has none\n"
                            "cross_attention: needs projections; without them pass keys/values "
                            "directly");
}

TEST_CASE("projections need model_dim") {
    AttentionSpec spec = sdpa(2, 16);
    spec.projections = {true, true, true, false, false};
    CHECK(problems(spec) == "model_dim: is required with projections, got 0");
}

TEST_CASE("scale must be finite and non-zero") {
    AttentionSpec spec = sdpa(2, 16);
    spec.scale = 0.0;
    CHECK(problems(spec) == "scale: must be finite and non-zero, got 0");
    spec.scale = INFINITY;
    CHECK(problems(spec) == "scale: must be finite and non-zero, got inf");
}

TEST_CASE("masks parse, combine and print back") {
    auto mask = attngen::parse_mask("causal + padding+window(256)+additive");
    REQUIRE(mask);
    CHECK(mask->causal);
    CHECK(mask->key_padding);
    CHECK(mask->window == 256);
    CHECK(mask->additive);
    CHECK(attngen::to_string(*mask) == "causal+padding+window(256)+additive");
    CHECK(attngen::to_string(*attngen::parse_mask("none")) == "none");
    CHECK_FALSE(attngen::parse_mask("causal+causal"));
    CHECK_FALSE(attngen::parse_mask("window(0)"));
    CHECK_FALSE(attngen::parse_mask("window(x)"));
    CHECK_FALSE(attngen::parse_mask("sliding"));
    CHECK_FALSE(attngen::parse_mask(""));
    CHECK_FALSE(attngen::parse_projections("", false));
    CHECK_FALSE(attngen::parse_projections("q,k,v,o", false));
}

TEST_CASE("parameters round-trip and malformed ones name their key") {
    std::vector<attngen::SpecError> errors;
    AttentionSpec spec = attngen::spec_from_params({{"model_dim", "96"},
                                                    {"heads", "6"},
                                                    {"kv_heads", "2"},
                                                    {"projections", "q, k, v, out"},
                                                    {"bias", "true"},
                                                    {"mask", "causal+window(8)"},
                                                    {"scale", "0.25"},
                                                    {"dtype", "bf16"}},
                                                   errors);
    REQUIRE(errors.empty());
    CHECK(problems(spec).empty());
    std::vector<attngen::SpecError> again;
    AttentionSpec round_trip = attngen::spec_from_params(attngen::spec_to_params(spec), again);
    REQUIRE(again.empty());
    CHECK(attngen::spec_to_params(round_trip) == attngen::spec_to_params(spec));
    CHECK(round_trip.resolved_scale() == 0.25);

    errors.clear();
    attngen::spec_from_params({{"heads", "eight"},
                               {"colour", "red"},
                               {"dtype", "f64"},
                               {"projections", "q,q"},
                               {"mask", "causal+"}},
                              errors);
    CHECK(attngen::describe_errors(errors) ==
          "colour: is not a field of an attention layer\n"
          "heads: expected a non-negative integer, got 'eight'\n"
          "dtype: expected f32, f16 or bf16, got 'f64'\n"
          "projections: expected 'none' or a list of q, k, v, out, got 'q,q'\n"
          "mask: expected 'none' or causal, padding, window(N), additive joined with '+', got "
          "'causal+'");
}

TEST_CASE("rotary embeddings: defaults, the rules on their fields, and their text forms") {
    AttentionSpec spec = sdpa(4, 64);
    spec.rope.kind = attngen::RopeKind::neox;
    CHECK(problems(spec).empty());
    CHECK(spec.resolved_rotary_dim() == 64);

    spec.rope.rotary_dim = 33;
    CHECK(problems(spec) == "rotary_dim: must be even and in 2..head_dim (64), got 33");
    spec.rope.rotary_dim = 66;
    CHECK(problems(spec) == "rotary_dim: must be even and in 2..head_dim (64), got 66");
    AttentionSpec odd = sdpa(2, 17);
    odd.rope.kind = attngen::RopeKind::interleaved;
    CHECK(problems(odd) == "rotary_dim: must be even and in 2..head_dim (17), as head_dim is by "
                           "default, got 17");
    spec.rope.rotary_dim = 32;
    spec.rope.theta = 1.0;
    CHECK(problems(spec) == "rope_theta: must be a finite number above 1, got 1");
    spec.rope.theta = 500000.0;
    spec.rope.scaling.kind = attngen::RopeScaling::Kind::llama3;
    spec.rope.scaling.factor = 8.0;
    spec.rope.scaling.low_freq_factor = 4.0;
    spec.rope.scaling.high_freq_factor = 4.0;
    CHECK(problems(spec) == "rope_scaling: llama3 needs 0 < low_freq_factor < high_freq_factor, "
                            "got 4 and 4");
    spec.rope.scaling.low_freq_factor = 1.0;
    spec.rope.scaling.factor = 0.0;
    CHECK(problems(spec) == "rope_scaling: factor must be a finite number above 0, got 0");
    spec.rope.scaling.factor = 8.0;
    CHECK(problems(spec).empty());

    AttentionSpec without = sdpa(4, 64);
    without.rope.rotary_dim = 32;
    without.rope.scaling.kind = attngen::RopeScaling::Kind::linear;
    CHECK(problems(without) ==
          "rotary_dim: needs rope (neox, interleaved or a table); the layer has none\n"
          "rope_scaling: needs rope = neox or interleaved; the layer has none");

    AttentionSpec table = sdpa(4, 64);
    REQUIRE(attngen::parse_rope("table(interleaved)", table.rope));
    CHECK(table.rope.table);
    CHECK(table.rope.kind == attngen::RopeKind::interleaved);
    CHECK(attngen::rope_text(table.rope) == "table(interleaved)");
    CHECK(problems(table).empty());
    table.rope.theta = 500000.0;
    table.rope.scaling.kind = attngen::RopeScaling::Kind::linear;
    table.rope.scaling.factor = 2.0;
    CHECK(problems(table) ==
          "rope_theta: has no effect with rope = table(interleaved): the tables rope_cos and "
          "rope_sin carry the angles\n"
          "rope_scaling: has no effect with rope = table(interleaved): the tables rope_cos and "
          "rope_sin carry the angles");
    REQUIRE(attngen::parse_rope("table", table.rope));
    CHECK(table.rope.kind == attngen::RopeKind::neox);
    CHECK(attngen::rope_text(table.rope) == "table");
    CHECK_FALSE(attngen::parse_rope("table(none)", table.rope));
    table.rope.scaling = attngen::RopeScaling();
    table.rope.kind = attngen::RopeKind::none; // only the C++ description can say this
    CHECK(problems(table) ==
          "rope: a table needs the pairs it turns, neox or interleaved, got none");

    std::vector<attngen::SpecError> errors;
    AttentionSpec parsed = attngen::spec_from_params({{"heads", "4"},
                                                      {"head_dim", "64"},
                                                      {"rope", "interleaved"},
                                                      {"rope_theta", "500000"},
                                                      {"rotary_dim", "32"},
                                                      {"rope_scaling", "llama3(8, 1, 4, 8192)"}},
                                                     errors);
    REQUIRE(errors.empty());
    CHECK(parsed.rope.kind == attngen::RopeKind::interleaved);
    CHECK(parsed.rope.scaling.original_max_positions == 8192);
    CHECK(attngen::spec_to_params(parsed).at("rope_scaling") == "llama3(8, 1, 4, 8192)");
    std::vector<attngen::SpecError> again;
    AttentionSpec round_trip = attngen::spec_from_params(attngen::spec_to_params(parsed), again);
    REQUIRE(again.empty());
    CHECK(attngen::spec_to_params(round_trip) == attngen::spec_to_params(parsed));

    attngen::spec_from_params(
        {{"rope", "yarn"}, {"rope_theta", "big"}, {"rope_scaling", "llama3(8, 1, 4)"}}, errors);
    CHECK(attngen::describe_errors(errors) ==
          "rope: expected none, neox, interleaved, table or table(interleaved), got 'yarn'\n"
          "rope_theta: expected a number, got 'big'\n"
          "rope_scaling: expected none, linear(F) or llama3(F, LOW, HIGH, ORIGINAL), got "
          "'llama3(8, 1, 4)'");
}

TEST_CASE("rotary frequencies follow theta, linear scaling and llama3's three bands") {
    attngen::RopeSpec rope;
    rope.kind = attngen::RopeKind::neox;
    rope.theta = 10000.0;
    std::vector<double> plain = attngen::rope_inverse_frequencies(rope, 8);
    REQUIRE(plain.size() == 4);
    for (int i = 0; i < 4; i++)
        CHECK(plain[i] == Approx(std::pow(10000.0, -i / 4.0)).epsilon(1e-15));

    rope.scaling.kind = attngen::RopeScaling::Kind::linear;
    rope.scaling.factor = 4.0;
    std::vector<double> linear = attngen::rope_inverse_frequencies(rope, 8);
    for (int i = 0; i < 4; i++)
        CHECK(linear[i] == Approx(plain[i] / 4.0).epsilon(1e-15));

    // Original context 100, bands at wavelengths 100 / 1 and 100 / 4 = 25: wavelengths 2 pi
    // (pair 0, kept), 62.8 (pair 1, blended) and 628 and 6283 (pairs 2 and 3, divided).
    rope.scaling = {attngen::RopeScaling::Kind::llama3, 8.0, 1.0, 4.0, 100};
    std::vector<double> llama3 = attngen::rope_inverse_frequencies(rope, 8);
    const double pi = std::acos(-1.0);
    CHECK(llama3[0] == plain[0]);
    const double smooth = (100.0 / (2 * pi / plain[1]) - 1.0) / (4.0 - 1.0);
    CHECK(llama3[1] == Approx((1 - smooth) * plain[1] / 8.0 + smooth * plain[1]).epsilon(1e-15));
    CHECK(llama3[2] == Approx(plain[2] / 8.0).epsilon(1e-15));
    CHECK(llama3[3] == Approx(plain[3] / 8.0).epsilon(1e-15));
}

TEST_CASE("KV caches: the rules on their fields, and their text forms") {
    AttentionSpec spec = sdpa(4, 64);
    CHECK(!spec.cache.any());
    CHECK(spec.resolved_cache_dtype() == attngen::DType::f32);

    REQUIRE(attngen::parse_cache(" paged( 16 ) ", spec.cache));
    CHECK(spec.cache.kind == attngen::CacheSpec::Kind::paged);
    CHECK(spec.cache.block_size == 16);
    CHECK(attngen::cache_text(spec.cache) == "paged(16)");
    spec.cache.dtype = attngen::DType::f16;
    spec.mask.causal = true;
    CHECK(problems(spec).empty());
    CHECK(spec.resolved_cache_dtype() == attngen::DType::f16);
    for (const char *bad : {"paged", "paged()", "paged(x)", "paged(-1)", "pages(16)", "flat"})
        CHECK_FALSE(attngen::parse_cache(bad, spec.cache));
    spec.cache.block_size = 0;
    CHECK(problems(spec) == "cache: paged(N) needs 1 to 65536 positions per block, got 0");
    REQUIRE(attngen::parse_cache("contiguous", spec.cache));
    CHECK(spec.cache.block_size == 0);
    CHECK(problems(spec).empty());

    spec.mask.key_padding = spec.mask.additive = true;
    CHECK(problems(spec) ==
          "mask: padding does not combine with a cache (cache = contiguous): cache_lengths and "
          "query_lengths already bound each sequence's keys\n"
          "mask: additive does not combine with a cache (cache = contiguous): attn_bias would "
          "need a column per position; use a score_mod of the positions q and k");

    AttentionSpec cross;
    cross.model_dim = 64;
    cross.heads = 4;
    cross.projections = {true, true, true, false, false};
    cross.cross_attention = true;
    cross.cache.kind = attngen::CacheSpec::Kind::contiguous;
    CHECK(problems(cross) == "cross: cannot be combined with a cache (cache = contiguous): the "
                             "keys and values are the cached tokens and the new ones");

    AttentionSpec uncached = sdpa(4, 64);
    uncached.cache.dtype = attngen::DType::bf16;
    CHECK(problems(uncached) ==
          "cache_dtype: needs a cache (cache = contiguous or paged(N)); the layer has none");

    std::vector<attngen::SpecError> errors;
    AttentionSpec parsed = attngen::spec_from_params(
        {{"heads", "4"}, {"head_dim", "64"}, {"cache", "paged(32)"}, {"cache_dtype", "bf16"}},
        errors);
    REQUIRE(errors.empty());
    CHECK(attngen::spec_to_params(parsed).at("cache") == "paged(32)");
    CHECK(attngen::spec_to_params(parsed).at("cache_dtype") == "bf16");
    std::vector<attngen::SpecError> again;
    AttentionSpec round_trip = attngen::spec_from_params(attngen::spec_to_params(parsed), again);
    REQUIRE(again.empty());
    CHECK(attngen::spec_to_params(round_trip) == attngen::spec_to_params(parsed));
    CHECK(attngen::spec_to_params(sdpa(4, 64)).at("cache_dtype") == "default");

    attngen::spec_from_params({{"cache", "paged(sixteen)"}, {"cache_dtype", "f64"}}, errors);
    CHECK(attngen::describe_errors(errors) ==
          "cache: expected none, contiguous or paged(N), got 'paged(sixteen)'\n"
          "cache_dtype: expected f32, f16, bf16, i8 or 'default', got 'f64'");
}

TEST_CASE("i8: a cache's storage, which round-trips, and never the layer's dtype") {
    std::vector<attngen::SpecError> errors;
    AttentionSpec parsed = attngen::spec_from_params(
        {{"heads", "4"}, {"head_dim", "64"}, {"cache", "contiguous"}, {"cache_dtype", "i8"}},
        errors);
    REQUIRE(errors.empty());
    CHECK(parsed.resolved_cache_dtype() == attngen::DType::i8);
    CHECK(problems(parsed).empty());
    CHECK(attngen::spec_to_params(parsed).at("cache_dtype") == "i8");

    AttentionSpec layer = sdpa(4, 64);
    layer.dtype = attngen::DType::i8;
    CHECK(problems(layer) ==
          "dtype: i8 is the storage of a KV cache (cache_dtype = i8) or of the key and value "
          "inputs (kv_dtype = i8) only; the queries and the output are f32, f16 or bf16");
}

TEST_CASE("value_dim: V's head size, head_dim by default, which round-trips") {
    std::vector<attngen::SpecError> errors;
    AttentionSpec parsed = attngen::spec_from_params(
        {{"heads", "4"}, {"head_dim", "192"}, {"value_dim", "128"}}, errors);
    REQUIRE(errors.empty());
    CHECK(parsed.resolved_value_dim() == 128);
    CHECK(parsed.resolved_head_dim() == 192);
    CHECK(problems(parsed).empty());
    CHECK(attngen::spec_to_params(parsed).at("value_dim") == "128");
    std::vector<attngen::SpecError> again;
    AttentionSpec round_trip = attngen::spec_from_params(attngen::spec_to_params(parsed), again);
    REQUIRE(again.empty());
    CHECK(round_trip.resolved_value_dim() == 128);
    AttentionSpec plain = sdpa(4, 64);
    CHECK(plain.resolved_value_dim() == 64);
    CHECK(attngen::spec_to_params(plain).at("value_dim") == "0");

    AttentionSpec wide = sdpa(4, 64);
    wide.value_dim = 70000;
    CHECK(problems(wide) == "value_dim: must be in 1..65536 (or 0 for = head_dim), got 70000");
    wide.value_dim = -1;
    CHECK(problems(wide) == "value_dim: must be in 1..65536 (or 0 for = head_dim), got -1");
}

TEST_CASE("kv_dtype: the key and value inputs' storage, which round-trips, without projections "
          "or a cache") {
    std::vector<attngen::SpecError> errors;
    AttentionSpec parsed = attngen::spec_from_params(
        {{"heads", "4"}, {"head_dim", "64"}, {"dtype", "f16"}, {"kv_dtype", "i8"}}, errors);
    REQUIRE(errors.empty());
    CHECK(parsed.resolved_kv_dtype() == attngen::DType::i8);
    CHECK(problems(parsed).empty());
    CHECK(attngen::spec_to_params(parsed).at("kv_dtype") == "i8");
    std::vector<attngen::SpecError> again;
    AttentionSpec round_trip = attngen::spec_from_params(attngen::spec_to_params(parsed), again);
    REQUIRE(again.empty());
    CHECK(round_trip.resolved_kv_dtype() == attngen::DType::i8);
    // By default the layer's dtype, and the tuned records' hash of a layer without it.
    AttentionSpec plain = sdpa(4, 64);
    CHECK(attngen::spec_to_params(plain).at("kv_dtype") == "default");
    CHECK(plain.resolved_kv_dtype() == attngen::DType::f32);

    attngen::spec_from_params({{"kv_dtype", "int8"}}, errors);
    CHECK(attngen::describe_errors(errors) ==
          "kv_dtype: expected f32, f16, bf16, i8 or 'default', got 'int8'");
    AttentionSpec projected = sdpa(4, 64);
    projected.model_dim = 256;
    projected.projections = {true, true, true, false, false};
    projected.kv_dtype = attngen::DType::i8;
    CHECK(problems(projected) == "kv_dtype: needs per-head key and value inputs; with projections "
                                 "the keys and values are computed (in dtype)");
    AttentionSpec cached = sdpa(4, 64);
    cached.cache.kind = attngen::CacheSpec::Kind::contiguous;
    cached.kv_dtype = attngen::DType::f16;
    CHECK(problems(cached) == "kv_dtype: cannot be combined with a cache: the new tokens' keys "
                              "and values are in dtype and the cache's storage is cache_dtype");
}

TEST_CASE("sinks: a boolean field that round-trips, false by default") {
    std::vector<attngen::SpecError> errors;
    AttentionSpec parsed =
        attngen::spec_from_params({{"heads", "4"}, {"head_dim", "64"}, {"sinks", "true"}}, errors);
    REQUIRE(errors.empty());
    CHECK(parsed.sinks);
    CHECK(attngen::spec_to_params(parsed).at("sinks") == "true");
    std::vector<attngen::SpecError> again;
    AttentionSpec round_trip = attngen::spec_from_params(attngen::spec_to_params(parsed), again);
    REQUIRE(again.empty());
    CHECK(round_trip.sinks);
    CHECK(attngen::spec_to_params(sdpa(4, 64)).at("sinks") == "false");

    attngen::spec_from_params({{"sinks", "maybe"}}, errors);
    CHECK(attngen::describe_errors(errors) == "sinks: expected true or false, got 'maybe'");
}

TEST_CASE("outputs: out or out, lse, round-tripping") {
    std::vector<attngen::SpecError> errors;
    AttentionSpec parsed = attngen::spec_from_params(
        {{"heads", "4"}, {"head_dim", "64"}, {"outputs", "out, lse"}}, errors);
    REQUIRE(errors.empty());
    CHECK(parsed.lse_output);
    CHECK(attngen::spec_to_params(parsed).at("outputs") == "out, lse");
    std::vector<attngen::SpecError> again;
    AttentionSpec round_trip = attngen::spec_from_params(attngen::spec_to_params(parsed), again);
    REQUIRE(again.empty());
    CHECK(round_trip.lse_output);
    CHECK(attngen::spec_to_params(sdpa(4, 64)).at("outputs") == "out");

    for (const char *bad : {"lse", "out,", "out, lse, lse", "out, k", ""}) {
        std::vector<attngen::SpecError> refused;
        attngen::spec_from_params({{"outputs", bad}}, refused);
        CHECK(attngen::describe_errors(refused) ==
              std::string("outputs: expected 'out' or 'out, lse', got '") + bad + "'");
    }
}

TEST_CASE("layout = packed: round-trips, and refuses what needs a padded batch or the batch "
          "index") {
    std::vector<attngen::SpecError> errors;
    AttentionSpec parsed = attngen::spec_from_params(
        {{"heads", "4"}, {"head_dim", "32"}, {"layout", "packed"}}, errors);
    REQUIRE(errors.empty());
    CHECK(parsed.packed);
    CHECK(problems(parsed).empty());
    CHECK(attngen::spec_to_params(parsed).at("layout") == "packed");
    CHECK(attngen::spec_to_params(sdpa(4, 64)).at("layout") == "batched");
    std::vector<attngen::SpecError> bad;
    attngen::spec_from_params({{"heads", "4"}, {"head_dim", "32"}, {"layout", "ragged"}}, bad);
    REQUIRE(bad.size() == 1);
    CHECK(bad[0].message == "expected batched or packed, got 'ragged'");

    AttentionSpec padded = sdpa(4, 32);
    padded.packed = true;
    padded.mask.key_padding = true;
    CHECK(problems(padded) == "mask: padding does not combine with layout = packed: key_offsets "
                              "already give each sequence its keys");
    AttentionSpec biased = sdpa(4, 32);
    biased.packed = true;
    biased.mask.additive = true;
    CHECK(problems(biased).find("additive does not combine with layout = packed") !=
          std::string::npos);
    AttentionSpec quantized = sdpa(4, 32);
    quantized.packed = true;
    quantized.kv_dtype = attngen::DType::i8;
    CHECK(problems(quantized).find("kv_dtype: i8 does not combine with layout = packed") !=
          std::string::npos);
}
