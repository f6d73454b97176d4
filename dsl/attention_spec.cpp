// Validation and text forms of AttentionSpec.
#include "attention_spec.h"

#include "expression_check.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace attngen {

namespace {

std::string trim(const std::string &text) {
    size_t begin = 0, end = text.size();
    while (begin < end && std::isspace(static_cast<unsigned char>(text[begin])))
        ++begin;
    while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1])))
        --end;
    return text.substr(begin, end - begin);
}

std::vector<std::string> split(const std::string &text, char separator) {
    std::vector<std::string> parts;
    std::string part;
    std::istringstream stream(text);
    while (std::getline(stream, part, separator))
        parts.push_back(trim(part));
    if (!text.empty() && text.back() == separator)
        parts.push_back("");
    return parts;
}

std::optional<long> parse_int(const std::string &text) {
    if (text.empty())
        return std::nullopt;
    char *end = nullptr;
    long value = std::strtol(text.c_str(), &end, 10);
    if (*end != '\0')
        return std::nullopt;
    return value;
}

std::optional<double> parse_number(const std::string &text) {
    if (text.empty())
        return std::nullopt;
    char *end = nullptr;
    double value = std::strtod(text.c_str(), &end);
    if (*end != '\0')
        return std::nullopt;
    return value;
}

std::optional<bool> parse_bool(const std::string &text) {
    if (text == "true" || text == "1")
        return true;
    if (text == "false" || text == "0")
        return false;
    return std::nullopt;
}

/** Why the generated header cannot use `name` for a function, or "". */
std::string why_reserved_layer_name(const std::string &name) {
    // The keywords of C and C++, between spaces.
    static const std::string keywords =
        " alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t "
        "char16_t char32_t class compl concept const consteval constexpr constinit const_cast "
        "continue co_await co_return co_yield decltype default delete do double dynamic_cast "
        "else enum explicit export extern false float for friend goto if inline int long "
        "mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected "
        "public register reinterpret_cast requires restrict return short signed sizeof static "
        "static_assert static_cast struct switch template this thread_local throw true try "
        "typedef typeid typename union unsigned using virtual void volatile wchar_t while xor "
        "xor_eq _Bool _Complex _Imaginary ";
    if (keywords.find(" " + name + " ") != std::string::npos)
        return "a C or C++ keyword";
    if (name == "attngen" || name == "main")
        return name == "main" ? "the program's entry point" : "the runtime's namespace";
    if (name.rfind("__", 0) == 0 ||
        (name.size() > 1 && name[0] == '_' && std::isupper(static_cast<unsigned char>(name[1]))))
        return "reserved to the C++ implementation (it starts with '__' or '_' and a capital)";
    return "";
}

} // namespace

std::string number_text(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.15g", value);
    if (std::strtod(text, nullptr) != value)
        std::snprintf(text, sizeof text, "%.17g", value);
    return text;
}

int AttentionSpec::resolved_head_dim() const {
    if (head_dim > 0)
        return head_dim;
    return heads > 0 ? model_dim / heads : 0;
}

int AttentionSpec::resolved_model_dim() const {
    return model_dim > 0 ? model_dim : heads * resolved_head_dim();
}

double AttentionSpec::resolved_scale() const {
    return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(resolved_head_dim()));
}

namespace {

template <typename Fail> void check_rope(const AttentionSpec &spec, const Fail &fail) {
    const RopeSpec &rope = spec.rope;
    const RopeScaling &scaling = rope.scaling;
    if (!rope.any()) {
        if (rope.table) // so that `table` alone says a layer takes tables
            fail("rope", "a table needs the pairs it turns, neox or interleaved, got none");
        if (rope.rotary_dim != 0)
            fail("rotary_dim", "needs rope (neox, interleaved or a table); the layer has none");
        if (scaling.kind != RopeScaling::Kind::none)
            fail("rope_scaling", "needs rope = neox or interleaved; the layer has none");
        return;
    }
    if (rope.table) {
        // The tables carry the angles: a frequency setting would be silently ignored.
        if (rope.theta != RopeSpec().theta)
            fail("rope_theta", "has no effect with rope = " + rope_text(rope) +
                                   ": the tables rope_cos and rope_sin carry the angles");
        if (scaling.kind != RopeScaling::Kind::none)
            fail("rope_scaling", "has no effect with rope = " + rope_text(rope) +
                                     ": the tables rope_cos and rope_sin carry the angles");
    }
    if (!std::isfinite(rope.theta) || rope.theta <= 1.0)
        fail("rope_theta", "must be a finite number above 1, got " + number_text(rope.theta));
    const int head_dim = spec.resolved_head_dim();
    const int rotary_dim = spec.resolved_rotary_dim();
    if (rope.rotary_dim < 0 || rotary_dim % 2 != 0 || (head_dim > 0 && rotary_dim > head_dim))
        fail("rotary_dim", "must be even and in 2..head_dim (" + std::to_string(head_dim) + ")" +
                               (rope.rotary_dim == 0 ? ", as head_dim is by default" : "") +
                               ", got " + std::to_string(rotary_dim));
    if (scaling.kind == RopeScaling::Kind::none)
        return;
    if (!std::isfinite(scaling.factor) || scaling.factor <= 0.0)
        fail("rope_scaling",
             "factor must be a finite number above 0, got " + number_text(scaling.factor));
    if (scaling.kind != RopeScaling::Kind::llama3)
        return;
    if (!(std::isfinite(scaling.low_freq_factor) && std::isfinite(scaling.high_freq_factor) &&
          scaling.low_freq_factor > 0.0 && scaling.low_freq_factor < scaling.high_freq_factor))
        fail("rope_scaling", "llama3 needs 0 < low_freq_factor < high_freq_factor, got " +
                                 number_text(scaling.low_freq_factor) + " and " +
                                 number_text(scaling.high_freq_factor));
    if (scaling.original_max_positions < 1)
        fail("rope_scaling", "llama3 needs original_max_positions of at least 1, got " +
                                 std::to_string(scaling.original_max_positions));
}

} // namespace

/**
 * value_dim's range, and kv_dtype, which stores the caller's per-head keys and values: not with
 * projections or a cache.
 */
template <typename Fail> void check_keys_and_values(const AttentionSpec &spec, const Fail &fail) {
    constexpr int max_dim = 1 << 16;
    if (spec.value_dim < 0 || spec.value_dim > max_dim)
        fail("value_dim", "must be in 1.." + std::to_string(max_dim) +
                              " (or 0 for = head_dim), got " + std::to_string(spec.value_dim));
    if (spec.kv_dtype && spec.projections.any())
        fail("kv_dtype", "needs per-head key and value inputs; with projections the keys and "
                         "values are computed (in dtype)");
    else if (spec.kv_dtype && spec.cache.any())
        fail("kv_dtype", "cannot be combined with a cache: the new tokens' keys and values are "
                         "in dtype and the cache's storage is cache_dtype");
}

/**
 * A packed layer runs once per sequence on views of its tokens: what needs a padded batch (an
 * additive bias, key lengths, i8 keys' scales) has no meaning there.
 */
template <typename Fail> void check_packed(const AttentionSpec &spec, const Fail &fail) {
    if (!spec.packed)
        return;
    if (spec.mask.additive)
        fail("mask", "additive does not combine with layout = packed: attn_bias is (B, H, Lq, "
                     "Lk); use a score_mod or a mask predicate of q and k");
    if (spec.mask.key_padding)
        fail("mask", "padding does not combine with layout = packed: key_offsets already give "
                     "each sequence its keys");
    if (spec.resolved_kv_dtype() == DType::i8)
        fail("kv_dtype", "i8 does not combine with layout = packed yet: key_scales and "
                         "value_scales have no packed form");
    // The expressions' b and the declared tensors' batch-sized dimensions: check_layer_expressions.
}

template <typename Fail> void check_cache(const AttentionSpec &spec, const Fail &fail) {
    check_packed(spec, fail);
    const CacheSpec &cache = spec.cache;
    if (!cache.any()) {
        if (cache.dtype)
            fail("cache_dtype",
                 "needs a cache (cache = contiguous or paged(N)); the layer has none");
        return;
    }
    const std::string why = " (cache = " + cache_text(cache) + ")";
    if (cache.kind == CacheSpec::Kind::paged && (cache.block_size < 1 || cache.block_size > 65536))
        fail("cache", "paged(N) needs 1 to 65536 positions per block, got " +
                          std::to_string(cache.block_size));
    if (spec.cross_attention)
        fail("cross", "cannot be combined with a cache" + why +
                          ": the keys and values are the cached tokens and the new ones");
    if (spec.mask.key_padding)
        fail("mask", "padding does not combine with a cache" + why +
                         ": cache_lengths and query_lengths already bound each sequence's keys");
    if (spec.mask.additive)
        fail("mask", "additive does not combine with a cache" + why +
                         ": attn_bias would need a column per position; use a score_mod of the "
                         "positions q and k");
}

std::vector<double> rope_inverse_frequencies(const RopeSpec &rope, int rotary_dim) {
    constexpr double pi = 3.14159265358979323846;
    const RopeScaling &scaling = rope.scaling;
    std::vector<double> frequencies;
    for (int i = 0; 2 * i < rotary_dim; i++) {
        double frequency = std::pow(rope.theta, -2.0 * i / rotary_dim);
        if (scaling.kind == RopeScaling::Kind::linear) {
            frequency /= scaling.factor;
        } else if (scaling.kind == RopeScaling::Kind::llama3) {
            // Wavelengths longer than original / low_freq_factor are divided by the factor,
            // those shorter than original / high_freq_factor kept, and those between blended.
            const double original = scaling.original_max_positions;
            const double wavelength = 2.0 * pi / frequency;
            if (wavelength > original / scaling.low_freq_factor) {
                frequency /= scaling.factor;
            } else if (wavelength >= original / scaling.high_freq_factor) {
                const double smooth = (original / wavelength - scaling.low_freq_factor) /
                                      (scaling.high_freq_factor - scaling.low_freq_factor);
                frequency = (1.0 - smooth) * frequency / scaling.factor + smooth * frequency;
            }
        }
        frequencies.push_back(frequency);
    }
    return frequencies;
}

const char *to_string(RopeKind kind) {
    switch (kind) {
    case RopeKind::none:
        return "none";
    case RopeKind::neox:
        return "neox";
    case RopeKind::interleaved:
        return "interleaved";
    }
    return "none";
}

std::string rope_text(const RopeSpec &rope) {
    if (!rope.table)
        return to_string(rope.kind);
    return rope.kind == RopeKind::interleaved ? "table(interleaved)" : "table";
}

bool parse_rope(const std::string &text, RopeSpec &rope) {
    std::string body = trim(text);
    bool table = false;
    if (body == "table") {
        body = "neox";
        table = true;
    } else if (body.rfind("table(", 0) == 0 && body.back() == ')') {
        body = trim(body.substr(6, body.size() - 7));
        table = true;
    }
    for (RopeKind kind : {RopeKind::none, RopeKind::neox, RopeKind::interleaved})
        if (body == to_string(kind) && !(table && kind == RopeKind::none)) {
            rope.kind = kind;
            rope.table = table;
            return true;
        }
    return false;
}

std::string cache_text(const CacheSpec &cache) {
    switch (cache.kind) {
    case CacheSpec::Kind::none:
        return "none";
    case CacheSpec::Kind::contiguous:
        return "contiguous";
    case CacheSpec::Kind::paged:
        return "paged(" + std::to_string(cache.block_size) + ")";
    }
    return "none";
}

bool parse_cache(const std::string &text, CacheSpec &cache) {
    const std::string body = trim(text);
    if (body == "none" || body == "contiguous") {
        cache.kind = body == "none" ? CacheSpec::Kind::none : CacheSpec::Kind::contiguous;
        cache.block_size = 0;
        return true;
    }
    if (body.rfind("paged(", 0) != 0 || body.back() != ')')
        return false;
    std::optional<long> size = parse_int(trim(body.substr(6, body.size() - 7)));
    if (!size || *size < 0 || *size > (1L << 30))
        return false;
    cache.kind = CacheSpec::Kind::paged;
    cache.block_size = static_cast<int>(*size);
    return true;
}

std::optional<RopeScaling> parse_rope_scaling(const std::string &text) {
    RopeScaling scaling;
    const std::string body = trim(text);
    if (body == "none")
        return scaling;
    const size_t open = body.find('(');
    if (open == std::string::npos || body.back() != ')')
        return std::nullopt;
    const std::string kind = trim(body.substr(0, open));
    std::vector<double> values;
    for (const std::string &part : split(body.substr(open + 1, body.size() - open - 2), ',')) {
        std::optional<double> value = parse_number(part);
        if (!value)
            return std::nullopt;
        values.push_back(*value);
    }
    if (kind == "linear" && values.size() == 1) {
        scaling.kind = RopeScaling::Kind::linear;
    } else if (kind == "llama3" && values.size() == 4 && values[3] == std::floor(values[3]) &&
               std::fabs(values[3]) <= (1 << 30)) {
        scaling.kind = RopeScaling::Kind::llama3;
        scaling.low_freq_factor = values[1];
        scaling.high_freq_factor = values[2];
        scaling.original_max_positions = static_cast<int>(values[3]);
    } else {
        return std::nullopt;
    }
    scaling.factor = values[0];
    return scaling;
}

std::string to_string(const RopeScaling &scaling) {
    switch (scaling.kind) {
    case RopeScaling::Kind::none:
        return "none";
    case RopeScaling::Kind::linear:
        return "linear(" + number_text(scaling.factor) + ")";
    case RopeScaling::Kind::llama3:
        return "llama3(" + number_text(scaling.factor) + ", " +
               number_text(scaling.low_freq_factor) + ", " + number_text(scaling.high_freq_factor) +
               ", " + std::to_string(scaling.original_max_positions) + ")";
    }
    return "none";
}

std::vector<SpecError> check_spec(const AttentionSpec &spec) {
    std::vector<SpecError> errors;
    auto fail = [&](const std::string &field, const std::string &message) {
        errors.push_back({field, message});
    };
    constexpr int max_dim = 1 << 16;

    if (spec.name.empty() ||
        !(std::isalpha(static_cast<unsigned char>(spec.name[0])) || spec.name[0] == '_'))
        fail("name", "must start with a letter or '_', got '" + spec.name + "'");
    for (char c : spec.name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
            fail("name", "may contain only letters, digits and '_', got '" + spec.name + "'");
            break;
        }
    if (std::string reserved = why_reserved_layer_name(spec.name); !reserved.empty())
        fail("name", "'" + spec.name + "' is " + reserved +
                         "; a layer's name becomes the C++ function of its entry point");
    if (spec.dtype == DType::i8)
        fail("dtype", "i8 is the storage of a KV cache (cache_dtype = i8) or of the key and value "
                      "inputs (kv_dtype = i8) only; the queries and the output are f32, f16 or "
                      "bf16");
    if (spec.heads < 1 || spec.heads > 4096)
        fail("heads", "must be in 1..4096, got " + std::to_string(spec.heads));
    if (spec.kv_heads < 0 || spec.kv_heads > 4096)
        fail("kv_heads",
             "must be in 1..4096 (or 0 for = heads), got " + std::to_string(spec.kv_heads));
    else if (spec.heads >= 1 && spec.heads % spec.resolved_kv_heads() != 0)
        fail("kv_heads", "must divide heads (" + std::to_string(spec.heads) + "), got " +
                             std::to_string(spec.resolved_kv_heads()));
    if (spec.head_dim < 0 || spec.head_dim > max_dim)
        fail("head_dim", "must be in 1.." + std::to_string(max_dim) + " (or 0 to derive), got " +
                             std::to_string(spec.head_dim));
    if (spec.model_dim < 0 || spec.model_dim > max_dim)
        fail("model_dim", "must be in 1.." + std::to_string(max_dim) + ", got " +
                              std::to_string(spec.model_dim));

    const Projections &proj = spec.projections;
    bool in_projections = proj.q || proj.k || proj.v;
    if (in_projections && !(proj.q && proj.k && proj.v))
        fail("projections",
             "must name all of q, k and v or none of them, got '" + to_string(proj) + "'");
    if (proj.out && !in_projections)
        fail("projections", "'out' needs q, k and v as well, got '" + to_string(proj) + "'");
    if (proj.bias && !proj.any())
        fail("bias", "needs projections; the layer has none");
    if (spec.cross_attention && !proj.any())
        fail("cross_attention", "needs projections; without them pass keys/values directly");

    if (proj.any()) {
        if (spec.model_dim <= 0)
            fail("model_dim",
                 "is required with projections, got " + std::to_string(spec.model_dim));
    } else if (spec.head_dim == 0 && spec.model_dim <= 0) {
        fail("head_dim", "is required without projections (or give model_dim), got 0");
    }
    if (spec.head_dim == 0 && spec.model_dim > 0 && spec.heads >= 1 &&
        spec.model_dim % spec.heads != 0)
        fail("head_dim", "cannot be derived: model_dim " + std::to_string(spec.model_dim) +
                             " is not divisible by heads " + std::to_string(spec.heads));
    if (!proj.any() && spec.model_dim > 0 && spec.heads >= 1 &&
        spec.model_dim != spec.heads * spec.resolved_head_dim())
        fail("model_dim", "without projections must equal heads * head_dim = " +
                              std::to_string(spec.heads * spec.resolved_head_dim()) + ", got " +
                              std::to_string(spec.model_dim));

    if (spec.scale && (!std::isfinite(*spec.scale) || *spec.scale == 0.0)) {
        std::ostringstream value;
        value << *spec.scale;
        fail("scale", "must be finite and non-zero, got " + value.str());
    }
    if (spec.mask.window < 0)
        fail("mask", "window must be positive, got " + std::to_string(spec.mask.window));
    check_rope(spec, fail);
    check_cache(spec, fail);
    check_keys_and_values(spec, fail);
    // The declared run-time inputs, score_mod and the mask predicates.
    for (const LayerExprError &error : check_layer_expressions(spec))
        fail(error.field, error.message);
    return errors;
}

std::string describe_errors(const std::vector<SpecError> &errors) {
    std::string text;
    for (const SpecError &error : errors) {
        if (!text.empty())
            text += "\n";
        text += error.field + ": " + error.message;
    }
    return text;
}

const char *to_string(DType dtype) {
    switch (dtype) {
    case DType::f32:
        return "f32";
    case DType::f16:
        return "f16";
    case DType::bf16:
        return "bf16";
    case DType::i8:
        return "i8";
    }
    return "f32";
}

std::optional<DType> parse_dtype(const std::string &text) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::i8})
        if (text == to_string(dtype))
            return dtype;
    return std::nullopt;
}

std::optional<Projections> parse_projections(const std::string &text, bool bias) {
    Projections proj;
    proj.bias = bias;
    std::string body = trim(text);
    if (body == "none")
        return proj;
    if (body.empty())
        return std::nullopt;
    for (const std::string &name : split(body, ',')) {
        bool *slot = name == "q"     ? &proj.q
                     : name == "k"   ? &proj.k
                     : name == "v"   ? &proj.v
                     : name == "out" ? &proj.out
                                     : nullptr;
        if (!slot || *slot)
            return std::nullopt;
        *slot = true;
    }
    return proj;
}

std::optional<bool> parse_outputs(const std::string &text) {
    std::vector<std::string> names = split(trim(text), ',');
    if (names.empty() || names[0] != "out" || names.size() > 2)
        return std::nullopt;
    if (names.size() == 2 && names[1] != "lse")
        return std::nullopt;
    return names.size() == 2;
}

const char *outputs_text(bool lse_output) {
    return lse_output ? "out, lse" : "out";
}

std::optional<bool> parse_layout(const std::string &text) {
    const std::string name = trim(text);
    if (name == "batched" || name == "packed")
        return name == "packed";
    return std::nullopt;
}

const char *layout_text(bool packed) {
    return packed ? "packed" : "batched";
}

std::string to_string(const Projections &proj) {
    std::string text;
    auto add = [&](bool present, const char *name) {
        if (!present)
            return;
        if (!text.empty())
            text += ",";
        text += name;
    };
    add(proj.q, "q");
    add(proj.k, "k");
    add(proj.v, "v");
    add(proj.out, "out");
    return text.empty() ? "none" : text;
}

std::optional<MaskSpec> parse_mask(const std::string &text) {
    MaskSpec mask;
    std::string body = trim(text);
    if (body == "none")
        return mask;
    if (body.empty())
        return std::nullopt;
    for (const std::string &term : split(body, '+')) {
        if (term == "causal" && !mask.causal) {
            mask.causal = true;
        } else if (term == "padding" && !mask.key_padding) {
            mask.key_padding = true;
        } else if (term == "additive" && !mask.additive) {
            mask.additive = true;
        } else if (term.rfind("window(", 0) == 0 && term.back() == ')' && mask.window == 0) {
            std::optional<long> size = parse_int(trim(term.substr(7, term.size() - 8)));
            if (!size || *size < 1 || *size > (1L << 30))
                return std::nullopt;
            mask.window = static_cast<int>(*size);
        } else {
            return std::nullopt;
        }
    }
    return mask;
}

std::string to_string(const MaskSpec &mask) {
    std::string text;
    auto add = [&](const std::string &term) { text += (text.empty() ? "" : "+") + term; };
    if (mask.causal)
        add("causal");
    if (mask.key_padding)
        add("padding");
    if (mask.window > 0)
        add("window(" + std::to_string(mask.window) + ")");
    if (mask.additive)
        add("additive");
    return text.empty() ? "none" : text;
}

namespace {

/**
 * Reads the fields of a layer's params, each trimmed, and records a SpecError for each value it
 * cannot parse, in the order it reads them.
 */
struct ParamReader {
    const std::map<std::string, std::string> &params;
    std::vector<SpecError> &errors;

    /** The field's text, trimmed, or nullopt where params lack it. */
    std::optional<std::string> get(const char *key) const {
        auto found = params.find(key);
        if (found == params.end())
            return std::nullopt;
        return trim(found->second);
    }
    /** Records that `field` holds `value` where it should hold `expected`. */
    void bad(const std::string &field, const std::string &expected,
             const std::string &value) const {
        errors.push_back({field, "expected " + expected + ", got '" + value + "'"});
    }
    /** Sets `field` to the integer `key` holds, in [0, 2^30], where params have it. */
    void read_int(const char *key, int &field) const {
        if (auto text = get(key)) {
            std::optional<long> value = parse_int(*text);
            if (!value || *value < 0 || *value > (1L << 30))
                bad(key, "a non-negative integer", *text);
            else
                field = static_cast<int>(*value);
        }
    }
};

/** Records an error for each field of params that an attention layer does not have. */
void check_known_fields(const std::map<std::string, std::string> &params,
                        std::vector<SpecError> &errors) {
    static const char *known[] = {
        "name",       "model_dim",   "heads",        "kv_heads", "head_dim",    "scale",
        "dtype",      "projections", "bias",         "cross",    "mask",        "rope",
        "rope_theta", "rotary_dim",  "rope_scaling", "cache",    "cache_dtype", "sinks",
        "outputs",    "kv_dtype",    "value_dim",    "layout"};
    for (const auto &entry : params) {
        bool is_known = false;
        for (const char *key : known)
            is_known = is_known || entry.first == key;
        if (!is_known)
            errors.push_back({entry.first, "is not a field of an attention layer"});
    }
}

/** The name, the shape (model_dim, heads, kv_heads, head_dim), the scale and the dtype. */
void read_shape(const ParamReader &reader, AttentionSpec &spec) {
    if (auto name = reader.get("name"))
        spec.name = *name;
    reader.read_int("model_dim", spec.model_dim);
    reader.read_int("heads", spec.heads);
    reader.read_int("kv_heads", spec.kv_heads);
    reader.read_int("head_dim", spec.head_dim);
    reader.read_int("value_dim", spec.value_dim);
    if (auto text = reader.get("scale"); text && *text != "default") {
        if (std::optional<double> value = parse_number(*text))
            spec.scale = *value;
        else
            reader.bad("scale", "a number or 'default'", *text);
    }
    if (auto text = reader.get("dtype")) {
        if (std::optional<DType> dtype = parse_dtype(*text))
            spec.dtype = *dtype;
        else
            reader.bad("dtype", "f32, f16 or bf16", *text);
    }
    if (auto text = reader.get("kv_dtype"); text && *text != "default") {
        if (std::optional<DType> dtype = parse_dtype(*text))
            spec.kv_dtype = *dtype;
        else
            reader.bad("kv_dtype", "f32, f16, bf16, i8 or 'default'", *text);
    }
}

/** The projections and their bias, cross-attention, the sinks and the mask. */
void read_projections_and_mask(const ParamReader &reader, AttentionSpec &spec) {
    bool bias = false;
    if (auto text = reader.get("bias")) {
        if (std::optional<bool> value = parse_bool(*text))
            bias = *value;
        else
            reader.bad("bias", "true or false", *text);
    }
    spec.projections.bias = bias;
    if (auto text = reader.get("projections")) {
        if (std::optional<Projections> proj = parse_projections(*text, bias))
            spec.projections = *proj;
        else
            reader.bad("projections", "'none' or a list of q, k, v, out", *text);
    }
    if (auto text = reader.get("cross")) {
        if (std::optional<bool> value = parse_bool(*text))
            spec.cross_attention = *value;
        else
            reader.bad("cross", "true or false", *text);
    }
    if (auto text = reader.get("sinks")) {
        if (std::optional<bool> value = parse_bool(*text))
            spec.sinks = *value;
        else
            reader.bad("sinks", "true or false", *text);
    }
    if (auto text = reader.get("outputs")) {
        if (std::optional<bool> lse = parse_outputs(*text))
            spec.lse_output = *lse;
        else
            reader.bad("outputs", "'out' or 'out, lse'", *text);
    }
    if (auto text = reader.get("mask")) {
        if (std::optional<MaskSpec> mask = parse_mask(*text))
            spec.mask = *mask;
        else
            reader.bad("mask", "'none' or causal, padding, window(N), additive joined with '+'",
                       *text);
    }
}

/** The rotary embeddings (rope, rope_theta, rotary_dim, rope_scaling) and the cache. */
void read_rope_and_cache(const ParamReader &reader, AttentionSpec &spec) {
    if (auto text = reader.get("rope"); text && !parse_rope(*text, spec.rope))
        reader.bad("rope", "none, neox, interleaved, table or table(interleaved)", *text);
    if (auto text = reader.get("rope_theta")) {
        if (std::optional<double> value = parse_number(*text))
            spec.rope.theta = *value;
        else
            reader.bad("rope_theta", "a number", *text);
    }
    reader.read_int("rotary_dim", spec.rope.rotary_dim);
    if (auto text = reader.get("rope_scaling")) {
        if (std::optional<RopeScaling> scaling = parse_rope_scaling(*text))
            spec.rope.scaling = *scaling;
        else
            reader.bad("rope_scaling", "none, linear(F) or llama3(F, LOW, HIGH, ORIGINAL)", *text);
    }
    if (auto text = reader.get("layout")) {
        if (std::optional<bool> packed = parse_layout(*text))
            spec.packed = *packed;
        else
            reader.bad("layout", "batched or packed", *text);
    }
    if (auto text = reader.get("cache"); text && !parse_cache(*text, spec.cache))
        reader.bad("cache", "none, contiguous or paged(N)", *text);
    if (auto text = reader.get("cache_dtype"); text && *text != "default") {
        if (std::optional<DType> dtype = parse_dtype(*text))
            spec.cache.dtype = *dtype;
        else
            reader.bad("cache_dtype", "f32, f16, bf16, i8 or 'default'", *text);
    }
}

} // namespace

AttentionSpec spec_from_params(const std::map<std::string, std::string> &params,
                               std::vector<SpecError> &errors) {
    // Unknown fields first, then each field's errors in the order below.
    check_known_fields(params, errors);
    const ParamReader reader{params, errors};
    AttentionSpec spec;
    read_shape(reader, spec);
    read_projections_and_mask(reader, spec);
    read_rope_and_cache(reader, spec);
    return spec;
}

std::map<std::string, std::string> spec_to_params(const AttentionSpec &spec) {
    std::ostringstream scale;
    scale.precision(17);
    if (spec.scale)
        scale << *spec.scale;
    else
        scale << "default";
    return {{"name", spec.name},
            {"model_dim", std::to_string(spec.model_dim)},
            {"heads", std::to_string(spec.heads)},
            {"kv_heads", std::to_string(spec.kv_heads)},
            {"head_dim", std::to_string(spec.head_dim)},
            {"value_dim", std::to_string(spec.value_dim)},
            {"scale", scale.str()},
            {"dtype", to_string(spec.dtype)},
            {"kv_dtype", spec.kv_dtype ? to_string(*spec.kv_dtype) : "default"},
            {"projections", to_string(spec.projections)},
            {"bias", spec.projections.bias ? "true" : "false"},
            {"cross", spec.cross_attention ? "true" : "false"},
            {"mask", to_string(spec.mask)},
            {"rope", rope_text(spec.rope)},
            {"rope_theta", number_text(spec.rope.theta)},
            {"rotary_dim", std::to_string(spec.rope.rotary_dim)},
            {"rope_scaling", to_string(spec.rope.scaling)},
            {"cache", cache_text(spec.cache)},
            {"cache_dtype", spec.cache.dtype ? to_string(*spec.cache.dtype) : "default"},
            {"sinks", spec.sinks ? "true" : "false"},
            {"outputs", outputs_text(spec.lse_output)},
            {"layout", layout_text(spec.packed)}};
}

} // namespace attngen
