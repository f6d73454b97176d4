// The .attn front end: what the examples parse to, round trips through to_attn, every spec in
// tests/specs, and the exact diagnostics for the broken specs in tests/diagnostics.
#include "dsl/attn_parser.h"
#include "dsl/expression_check.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

using namespace attngen;
namespace fs = std::filesystem;

namespace {

const fs::path source_dir = ATTNGEN_SOURCE_DIR;

std::string read_bytes(const fs::path &path) {
    std::ifstream file(path, std::ios::binary);
    std::ostringstream text;
    text << file.rdbuf();
    return text.str();
}

std::vector<fs::path> files_in(const fs::path &dir, const std::string &extension) {
    std::vector<fs::path> files;
    for (const fs::directory_entry &entry : fs::directory_iterator(dir))
        if (entry.path().extension() == extension)
            files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    return files;
}

std::string rendered(const ParsedSpec &parsed) {
    std::string text;
    for (const Diagnostic &diagnostic : parsed.errors)
        text += render(diagnostic);
    return text;
}

// Everything a spec says, one line per fact, so that a difference shows where it is.
std::string facts(const AttentionSpec &spec) {
    std::string text;
    for (const auto &entry : spec_to_params(spec))
        text += entry.first + " = " + entry.second + "\n";
    text += "score_mod = " + (spec.score_mod ? to_string(*spec.score_mod) : "none") + "\n";
    for (const ModExprPtr &predicate : spec.mask_predicates)
        text += "predicate = " + to_string(*predicate) + "\n";
    for (const RuntimeTensor &tensor : spec.tensors) {
        text += "tensor " + tensor.name + (tensor.is_int32 ? " i32" : " f32");
        for (const TensorDim &dim : tensor.dims)
            text += " " + (dim.symbol == TensorDim::Symbol::fixed ? std::to_string(dim.extent)
                                                                  : symbol_name(dim.symbol));
        text += "\n";
    }
    for (const RuntimeScalar &scalar : spec.scalars)
        text += "scalar " + scalar.name + (scalar.is_int32 ? " i32" : " f32") + "\n";
    return text;
}

// Structural equality of two trees (kind, name, value, integer-ness, operands), ignoring where
// they were written.
bool same_tree(const ModExprPtr &a, const ModExprPtr &b) {
    if (!a || !b)
        return a == b;
    if (a->kind != b->kind || a->name != b->name || a->is_integer != b->is_integer ||
        a->operands.size() != b->operands.size())
        return false;
    if (a->number != b->number || std::signbit(a->number) != std::signbit(b->number))
        return false;
    for (size_t i = 0; i < a->operands.size(); ++i)
        if (!same_tree(a->operands[i], b->operands[i]))
            return false;
    return true;
}

// Parses text that must be valid.
std::vector<AttentionSpec> valid(const std::string &text) {
    ParsedSpec parsed = parse_attn(text, "test.attn");
    INFO(rendered(parsed));
    REQUIRE(parsed.errors.empty());
    return parsed.layers;
}

AttentionSpec one_layer(const std::string &text) {
    std::vector<AttentionSpec> layers = valid(text);
    REQUIRE(layers.size() == 1);
    return layers[0];
}

std::string errors_of(const std::string &text) {
    return rendered(parse_attn(text, "t.attn"));
}

void check_round_trip(const AttentionSpec &spec) {
    std::string text = to_attn(spec);
    INFO(text);
    AttentionSpec again = one_layer(text);
    CHECK(facts(again) == facts(spec));
    CHECK(same_tree(again.score_mod, spec.score_mod));
    REQUIRE(again.mask_predicates.size() == spec.mask_predicates.size());
    for (size_t i = 0; i < spec.mask_predicates.size(); ++i)
        CHECK(same_tree(again.mask_predicates[i], spec.mask_predicates[i]));
    CHECK(to_attn(again) == text);
}

const char *const examples = R"(# encoder.attn
attention encoder_self {
  model_dim = 512
  heads = 8              # head_dim = model_dim / heads unless given
  kv_heads = 2
  dtype = f32
  projections = q, k, v, out
  bias = true
  mask = causal
  scale = 1 / sqrt(head_dim)
  tensor slope[heads]
  score_mod = score + slope[h] * (k - q)
}
attention doc_packed { heads = 4; head_dim = 32; tensor doc[batch, keys]: i32; mask = padding + (doc[b, q] == doc[b, k]) }
attention prefix_lm { heads = 2; head_dim = 64; tensor prefix[batch]: i32; mask = (k < prefix[b] || k <= q) }
attention softcap { heads = 8; head_dim = 64; scalar cap; score_mod = cap * tanh(score / cap) }
attention relpos { heads = 4; head_dim = 32; tensor rel_bias[heads, 65]; score_mod = score + rel_bias[h, clamp(k - q + 32, 0, 64)] }
)";

} // namespace

TEST_CASE("the example layers parse to the fields they state") {
    std::vector<AttentionSpec> layers = valid(examples);
    REQUIRE(layers.size() == 5);

    const AttentionSpec &encoder = layers[0];
    CHECK(encoder.name == "encoder_self");
    CHECK(encoder.model_dim == 512);
    CHECK(encoder.heads == 8);
    CHECK(encoder.kv_heads == 2);
    CHECK(encoder.head_dim == 0);
    CHECK(encoder.resolved_head_dim() == 64);
    CHECK(encoder.dtype == DType::f32);
    CHECK(to_string(encoder.projections) == "q,k,v,out");
    CHECK(encoder.projections.bias);
    CHECK_FALSE(encoder.cross_attention);
    CHECK(to_string(encoder.mask) == "causal");
    REQUIRE(encoder.scale);
    CHECK(*encoder.scale == 0.125);
    REQUIRE(encoder.tensors.size() == 1);
    CHECK(encoder.tensors[0].name == "slope");
    CHECK_FALSE(encoder.tensors[0].is_int32);
    REQUIRE(encoder.tensors[0].dims.size() == 1);
    CHECK(encoder.tensors[0].dims[0].symbol == TensorDim::Symbol::heads);
    REQUIRE(encoder.score_mod);
    CHECK(to_string(*encoder.score_mod) == "score + slope[h] * (k - q)");
    CHECK(encoder.mask_predicates.empty());

    const AttentionSpec &documents = layers[1];
    CHECK(documents.name == "doc_packed");
    CHECK(documents.heads == 4);
    CHECK(documents.head_dim == 32);
    CHECK_FALSE(documents.scale);
    CHECK(to_string(documents.mask) == "padding");
    REQUIRE(documents.mask_predicates.size() == 1);
    CHECK(to_string(*documents.mask_predicates[0]) == "doc[b, q] == doc[b, k]");
    REQUIRE(documents.tensors.size() == 1);
    CHECK(documents.tensors[0].is_int32);
    CHECK(documents.tensors[0].dims[0].symbol == TensorDim::Symbol::batch);
    CHECK(documents.tensors[0].dims[1].symbol == TensorDim::Symbol::keys);

    const AttentionSpec &prefix = layers[2];
    CHECK(prefix.name == "prefix_lm");
    CHECK_FALSE(prefix.mask.any());
    REQUIRE(prefix.mask_predicates.size() == 1);
    CHECK(to_string(*prefix.mask_predicates[0]) == "k < prefix[b] || k <= q");
    const ModExpr &either = *prefix.mask_predicates[0];
    CHECK(either.kind == ModExpr::Kind::binary);
    CHECK(either.name == "||");

    const AttentionSpec &softcap = layers[3];
    REQUIRE(softcap.scalars.size() == 1);
    CHECK(softcap.scalars[0].name == "cap");
    CHECK_FALSE(softcap.scalars[0].is_int32);
    CHECK(to_string(*softcap.score_mod) == "cap * tanh(score / cap)");

    const AttentionSpec &relpos = layers[4];
    REQUIRE(relpos.tensors.size() == 1);
    REQUIRE(relpos.tensors[0].dims.size() == 2);
    CHECK(relpos.tensors[0].dims[1].symbol == TensorDim::Symbol::fixed);
    CHECK(relpos.tensors[0].dims[1].extent == 65);
    CHECK(to_string(*relpos.score_mod) == "score + rel_bias[h, clamp(k - q + 32, 0, 64)]");

    for (const AttentionSpec &layer : layers)
        CHECK(check_spec(layer).empty());
}

TEST_CASE("parsed expressions remember where they were written") {
    AttentionSpec spec = one_layer("attention a {\n  heads = 2; head_dim = 16\n"
                                   "  score_mod = score + slope[h]\n  tensor slope[heads]\n}\n");
    const ModExpr &sum = *spec.score_mod;
    CHECK(sum.where.line == 3);
    CHECK(sum.where.column == 21);
    CHECK(sum.where.length == 1);
    const ModExpr &read = *sum.operands[1];
    CHECK(read.where.line == 3);
    CHECK(read.where.column == 23);
    CHECK(read.where.length == 5);
}

TEST_CASE("to_attn writes text that parses back to an equal layer") {
    for (const AttentionSpec &layer : valid(examples))
        check_round_trip(layer);
    CHECK(to_attn(valid(examples)[0]) == "attention encoder_self {\n"
                                         "    model_dim = 512\n"
                                         "    heads = 8\n"
                                         "    kv_heads = 2\n"
                                         "    projections = q, k, v, out\n"
                                         "    bias = true\n"
                                         "    tensor slope[heads]\n"
                                         "    mask = causal\n"
                                         "    scale = 0.125\n"
                                         "    score_mod = score + slope[h] * (k - q)\n"
                                         "}\n");

    // A layer built in C++ that uses every field.
    AttentionSpec spec;
    spec.name = "everything";
    spec.model_dim = 96;
    spec.heads = 6;
    spec.kv_heads = 3;
    spec.head_dim = 16;
    spec.scale = 1.0 / 3.0;
    spec.dtype = DType::f16;
    spec.projections = {true, true, true, true, true};
    spec.cross_attention = true;
    spec.lse_output = true;
    spec.mask.causal = true;
    spec.mask.key_padding = true;
    spec.mask.window = 32;
    spec.mask.additive = true;
    spec.tensors = {{"t",
                     true,
                     {{TensorDim::Symbol::batch, 0},
                      {TensorDim::Symbol::kv_heads, 0},
                      {TensorDim::Symbol::queries, 0},
                      {TensorDim::Symbol::head_dim, 0}}}};
    spec.scalars = {{"s", true}, {"r", false}};
    spec.score_mod = binary("-", unary("-", variable("score")),
                            binary("*", number(-0.5),
                                   call("float", {tensor("t", {variable("b"), variable("h"),
                                                               variable("q"), integer(-1)})})));
    spec.mask_predicates = {
        unary("!", binary("==", binary("%", variable("k"), scalar("s")), integer(0))),
        binary("||", boolean(true),
               binary("&&", boolean(false), binary(">", scalar("r"), number(1e-7))))};
    REQUIRE(check_spec(spec).empty());
    check_round_trip(spec);
}

TEST_CASE("every spec in tests/specs parses without errors and round-trips") {
    std::vector<fs::path> specs = files_in(source_dir / "tests" / "specs", ".attn");
    REQUIRE(specs.size() >= 4);
    for (const fs::path &path : specs) {
        ParsedSpec parsed = parse_attn_file(path.string());
        INFO(path.string() << "\n" << rendered(parsed));
        CHECK(parsed.errors.empty());
        CHECK_FALSE(parsed.layers.empty());
        for (const AttentionSpec &layer : parsed.layers)
            check_round_trip(layer);
    }
}

TEST_CASE("broken specs give exactly the diagnostics in their .expected files") {
    // ATTNGEN_UPDATE_GOLDEN=1 rewrites the .expected files from the current output; review the
    // difference before committing it.
    const bool update = std::getenv("ATTNGEN_UPDATE_GOLDEN") != nullptr;
    std::vector<fs::path> broken = files_in(source_dir / "tests" / "diagnostics", ".attn");
    REQUIRE(broken.size() >= 12);
    for (const fs::path &path : broken) {
        std::string actual = rendered(parse_attn(read_bytes(path), path.filename().string()));
        fs::path expected_path = path;
        expected_path.replace_extension(".expected");
        if (update)
            std::ofstream(expected_path, std::ios::binary) << actual;
        INFO(path.filename().string());
        REQUIRE(fs::exists(expected_path));
        CHECK(actual == read_bytes(expected_path));
        CHECK_FALSE(actual.empty());
    }
}

TEST_CASE("errors in several layers are all reported, and the valid layers are kept") {
    ParsedSpec parsed = parse_attn("attention a { heads = 2; head_dim = 16; mask = casual }\n"
                                   "attention b { heads = 2; head_dim = 16 }\n"
                                   "attention c { heads = 4; kv_heads = 3; head_dim = 8 }\n"
                                   "attention d { heads = 2; head_dim = 16; score_mod = score }\n",
                                   "several.attn");
    CHECK(rendered(parsed) ==
          "several.attn:1:48: error: unknown mask 'casual' (did you mean 'causal'?)\n"
          "attention a { heads = 2; head_dim = 16; mask = casual }\n"
          "                                               ^~~~~~\n"
          "several.attn:3:37: error: kv_heads must divide heads (4), got 3\n"
          "attention c { heads = 4; kv_heads = 3; head_dim = 8 }\n"
          "                                    ^\n");
    REQUIRE(parsed.layers.size() == 2);
    CHECK(parsed.layers[0].name == "b");
    CHECK(parsed.layers[1].name == "d");
}

TEST_CASE("empty input and comments alone are a file with no layers") {
    for (const char *text : {"", "\n\n", "# only a comment", "  # two\n# comments\n", ";;\n"}) {
        ParsedSpec parsed = parse_attn(text, "empty.attn");
        CHECK(parsed.errors.empty());
        CHECK(parsed.layers.empty());
    }
}

TEST_CASE("fields may come in any order and scale reads the others") {
    AttentionSpec spec = one_layer("attention late {\n  scale = 2.0 / sqrt(head_dim) / heads\n"
                                   "  heads = 4\n  head_dim = 16\n}\n");
    REQUIRE(spec.scale);
    CHECK(*spec.scale == 0.125);
    spec = one_layer("attention derived { scale = 1.0 / model_dim * kv_heads; heads = 4; "
                     "kv_heads = 2; model_dim = 64; projections = q, k, v }");
    CHECK(*spec.scale == 2.0 / 64);
    spec = one_layer("attention integer { scale = head_dim / 8; heads = 1; head_dim = 64 }");
    CHECK(*spec.scale == 8.0);
}

TEST_CASE("lets are substituted by value wherever they are used, in any order") {
    AttentionSpec spec = one_layer("attention lets {\n"
                                   "  heads = 2; head_dim = 16\n"
                                   "  score_mod = score + penalty\n"
                                   "  let penalty = -distance * 0.5\n"
                                   "  let distance = float(abs(q - k))\n"
                                   "  mask = (distance < 8.0)\n"
                                   "}\n");
    CHECK(to_string(*spec.score_mod) == "score + -float(abs(q - k)) * 0.5");
    REQUIRE(spec.mask_predicates.size() == 1);
    CHECK(to_string(*spec.mask_predicates[0]) == "float(abs(q - k)) < 8.0");
    // The substituted body keeps the location of its definition.
    CHECK(spec.mask_predicates[0]->operands[0]->where.line == 5);
}

TEST_CASE("lets that would grow without bound are refused") {
    std::string text = "attention grow {\n  heads = 2; head_dim = 16\n  let a0 = score\n";
    for (int i = 1; i <= 40; ++i)
        text += "  let a" + std::to_string(i) + " = a" + std::to_string(i - 1) + " + a" +
                std::to_string(i - 1) + "\n";
    text += "  score_mod = a40\n}\n";
    CHECK(errors_of(text) ==
          "t.attn:44:15: error: expression is too large once its lets are substituted (more "
          "than 100000 nodes)\n"
          "  score_mod = a40\n"
          "              ^~~\n");

    // Unused, it is still checked, and still refused.
    text.replace(text.find("score_mod = a40"), 15, "score_mod = a1");
    CHECK(errors_of(text) ==
          "t.attn:43:7: error: expression is too large once its lets are substituted (more than "
          "100000 nodes)\n"
          "  let a40 = a39 + a39\n"
          "      ^~~\n");

    std::string deep = "attention deep {\n  heads = 2; head_dim = 16\n  let d0 = score\n";
    for (int i = 1; i <= 600; ++i)
        deep += "  let d" + std::to_string(i) + " = -(-d" + std::to_string(i - 1) + ")\n";
    deep += "  score_mod = d600\n}\n";
    CHECK(errors_of(deep) == "t.attn:604:15: error: expression is too deep once its lets are "
                             "substituted (more than 200 levels)\n"
                             "  score_mod = d600\n"
                             "              ^~~~\n");
}

TEST_CASE("nesting deeper than 200 levels is an error, not a crash") {
    auto nested = [](int depth) {
        return "attention n { heads = 2; head_dim = 16; score_mod = " + std::string(depth, '(') +
               "score" + std::string(depth, ')') + " }";
    };
    CHECK(errors_of(nested(200)).empty());
    CHECK(errors_of(nested(201)) ==
          "t.attn:1:253: error: expression is nested too deeply (more than 200 levels of "
          "parentheses, brackets and prefix operators)\n" +
              nested(201) + "\n" + std::string(252, ' ') + "^\n");
    std::string minus =
        "attention n { heads = 2; head_dim = 16; score_mod = " + std::string(300, '-') + "score }";
    CHECK(errors_of(minus).find("t.attn:1:253: error: expression is nested too deeply") == 0);
    // A long flat sum is not nested, but its tree is 200 levels deep at most.
    std::string sum = "attention n { heads = 2; head_dim = 16; score_mod = score";
    for (int i = 0; i < 199; ++i)
        sum += " + 1.0";
    CHECK(errors_of(sum + " }").empty());
    CHECK(errors_of(sum + " + 1.0 }")
              .find("error: expression is too deep (more than 200 "
                    "levels)") != std::string::npos);
    // The parentheses around a mask predicate are the mask's, not the predicate's.
    std::string mask = "attention n { heads = 2; head_dim = 16; mask = (" + std::string(200, '(') +
                       "q < k" + std::string(201, ')') + " }";
    CHECK(errors_of(mask).empty());
}

TEST_CASE("a negative literal is one number, down to the smallest 32-bit integer") {
    AttentionSpec spec = one_layer("attention n { heads = 2; head_dim = 16; "
                                   "score_mod = score * -2147483648 - -1.5 + -(2) }");
    const ModExpr &sum = *spec.score_mod;
    const ModExpr &difference = *sum.operands[0];
    CHECK(difference.operands[0]->operands[1]->kind == ModExpr::Kind::number);
    CHECK(difference.operands[0]->operands[1]->number == -2147483648.0);
    CHECK(difference.operands[1]->number == -1.5);
    CHECK(sum.operands[1]->kind == ModExpr::Kind::unary);
    CHECK(to_string(sum) == "score * -2147483648 - -1.5 + -(2)");
}

TEST_CASE("random expressions read back as the same tree") {
    const uint32_t seed = 20240611;
    INFO("seed " << seed);
    std::mt19937 random(seed);
    auto pick = [&](int n) { return static_cast<int>(random() % static_cast<uint32_t>(n)); };
    bool allow_score = true; // not in a mask predicate

    // A random well-typed expression of the given type, at most `depth` deep.
    std::function<ModExprPtr(ExprType, int)> make = [&](ExprType type, int depth) -> ModExprPtr {
        const bool leaf = depth <= 1 || pick(4) == 0;
        if (type == ExprType::boolean) {
            if (leaf)
                return boolean(pick(2) == 0);
            switch (pick(4)) {
            case 0:
                return unary("!", make(ExprType::boolean, depth - 1));
            case 1:
                return binary(pick(2) ? "&&" : "||", make(ExprType::boolean, depth - 1),
                              make(ExprType::boolean, depth - 1));
            default: {
                static const char *const ops[] = {"<", "<=", ">", ">=", "==", "!="};
                ExprType side = pick(2) ? ExprType::integer : ExprType::real;
                return binary(ops[pick(6)], make(side, depth - 1),
                              make(ExprType::integer, depth - 1));
            }
            }
        }
        if (type == ExprType::integer) {
            if (leaf) {
                switch (pick(4)) {
                case 0:
                    return integer(static_cast<long>(pick(2001)) - 1000);
                case 1:
                    return scalar("n");
                case 2:
                    return tensor("idx", {make(ExprType::integer, 1)});
                default:
                    return variable(std::string(1, "bhqk"[pick(4)]));
                }
            }
            switch (pick(5)) {
            case 0:
                return unary("-", make(ExprType::integer, depth - 1));
            case 1:
                return call(pick(2) ? "min" : "max", {make(ExprType::integer, depth - 1),
                                                      make(ExprType::integer, depth - 1)});
            case 2:
                return call("int", {make(ExprType::real, depth - 1)});
            default: {
                static const char *const ops[] = {"+", "-", "*", "/", "%"};
                return binary(ops[pick(5)], make(ExprType::integer, depth - 1),
                              make(ExprType::integer, depth - 1));
            }
            }
        }
        if (leaf) {
            switch (pick(4)) {
            case 0:
                return number((static_cast<double>(random()) - 2147483648.0) / 65536.0);
            case 1:
                return allow_score ? variable("score") : scalar("y");
            case 2:
                return scalar("y");
            default:
                return tensor("table", {make(ExprType::integer, 1), make(ExprType::integer, 1)});
            }
        }
        switch (pick(6)) {
        case 0:
            return unary("-", make(ExprType::real, depth - 1));
        case 1: {
            static const char *const functions[] = {"exp",   "log",  "sqrt", "tanh",
                                                    "floor", "ceil", "abs",  "float"};
            return call(functions[pick(8)], {make(ExprType::real, depth - 1)});
        }
        case 2:
            return call("select",
                        {make(ExprType::boolean, depth - 1), make(ExprType::real, depth - 1),
                         make(ExprType::integer, depth - 1)});
        case 3:
            return call("clamp",
                        {make(ExprType::real, depth - 1), make(ExprType::integer, depth - 1),
                         make(ExprType::real, depth - 1)});
        default: {
            static const char *const ops[] = {"+", "-", "*", "/"};
            return binary(ops[pick(4)], make(ExprType::real, depth - 1),
                          make(pick(2) ? ExprType::real : ExprType::integer, depth - 1));
        }
        }
    };

    const std::string declarations = "heads = 2; head_dim = 16; scalar n: i32; scalar y\n"
                                     "tensor idx[64]: i32; tensor table[heads, 64]\n";
    int drawn_again = 0;
    for (int i = 0; i < 300; ++i) {
        allow_score = true;
        ModExprPtr score_mod = make(ExprType::real, 7);
        allow_score = false;
        ModExprPtr predicate = make(ExprType::boolean, 6);
        std::string text = "attention random {\n" + declarations +
                           "score_mod = " + to_string(*score_mod) + "\nmask = (" +
                           to_string(*predicate) + ")\n}\n";
        INFO(text);
        // The printer and the parser are under test, not the constants' ranges: a draw whose
        // integer constants the checker refuses (Halide's folding could carry them out of 32
        // bits) is drawn again.
        const ParsedSpec parsed = parse_attn(text, "test.attn");
        const bool only_folding =
            !parsed.errors.empty() &&
            std::all_of(parsed.errors.begin(), parsed.errors.end(), [](const Diagnostic &d) {
                return d.message.find("Halide folds integer constants") != std::string::npos;
            });
        if (only_folding) {
            REQUIRE(++drawn_again < 3000);
            --i;
            continue;
        }
        AttentionSpec spec = one_layer(text);
        CHECK(same_tree(spec.score_mod, score_mod));
        REQUIRE(spec.mask_predicates.size() == 1);
        CHECK(same_tree(spec.mask_predicates[0], predicate));
    }
    INFO("drawn again: " << drawn_again);
    CHECK(drawn_again < 300);
}

TEST_CASE("NUL bytes, invalid UTF-8 and carriage returns are reported where they are") {
    std::string nul = std::string("attention a {\n  heads = 2\0;\n}\n", 30);
    CHECK(errors_of(nul) == "t.attn:2:12: error: invalid character: a NUL byte\n"
                            "  heads = 2?;\n"
                            "           ^\n");
    CHECK(errors_of("attention a { heads = \xff\xfe }") ==
          "t.attn:1:23: error: invalid byte 0xff: the file is not UTF-8 text\n"
          "attention a { heads = ?? }\n"
          "                      ^\n"
          "t.attn:1:24: error: invalid byte 0xfe: the file is not UTF-8 text\n"
          "attention a { heads = ?? }\n"
          "                       ^\n");
    // A caret after multi-byte characters still lines up under the right one.
    CHECK(errors_of(
              "attention a { # caf\xc3\xa9\n heads = 2; head_dim = 16; mask = (\xc3\xa9 < q) }") ==
          "t.attn:2:36: error: invalid character '\xc3\xa9' (U+00E9)\n"
          " heads = 2; head_dim = 16; mask = (\xc3\xa9 < q) }\n"
          "                                   ^\n");
    CHECK(
        errors_of(
            "attention a { heads = 2; head_dim = 16; mask = (q < k) + (\xc3\xa9\xc3\xa9 + x) }") ==
        "t.attn:1:59: error: invalid character '\xc3\xa9' (U+00E9)\n"
        "attention a { heads = 2; head_dim = 16; mask = (q < k) + (\xc3\xa9\xc3\xa9 + x) }\n"
        "                                                          ^\n"
        "t.attn:1:61: error: invalid character '\xc3\xa9' (U+00E9)\n"
        "attention a { heads = 2; head_dim = 16; mask = (q < k) + (\xc3\xa9\xc3\xa9 + x) }\n"
        "                                                           ^\n");
    std::string crlf = "attention a {\r\n  heads = 2\r\n  head_dim = x\r\n}\r\n";
    CHECK(errors_of(crlf) == "t.attn:3:14: error: expected an integer for 'head_dim', got 'x'\n"
                             "  head_dim = x\n"
                             "             ^\n");
    CHECK(errors_of("attention a {\r\n  heads = 2\r\n  head_dim = 16\r\n}\r\n").empty());
}

TEST_CASE("after 50 errors the parse stops with a note") {
    std::string text = "attention many {\n";
    for (int i = 0; i < 80; ++i)
        text += "  bogus" + std::to_string(i) + " = 1\n";
    text += "}\n";
    ParsedSpec parsed = parse_attn(text, "many.attn");
    REQUIRE(parsed.errors.size() == 51);
    CHECK(parsed.errors[49].line == 51);
    CHECK(parsed.errors[50].line == 0);
    CHECK(render(parsed.errors[50]) ==
          "many.attn: error: too many errors; stopping after the first 50\n");
}

TEST_CASE("a file that cannot be read is one file-level error") {
    ParsedSpec parsed = parse_attn_file("/nonexistent/dir/missing.attn");
    REQUIRE(parsed.errors.size() == 1);
    CHECK(parsed.errors[0].line == 0);
    CHECK(render(parsed.errors[0]) == "/nonexistent/dir/missing.attn: error: cannot read the "
                                      "file: No such file or directory\n");
    ParsedSpec directory = parse_attn_file(source_dir.string());
    REQUIRE(directory.errors.size() == 1);
    CHECK(directory.errors[0].message == "cannot read the file: Is a directory");

    ParsedSpec huge = parse_attn(std::string((16 << 20) + 1, ' '), "huge.attn");
    CHECK(rendered(huge) ==
          "huge.attn: error: file is too large: 16777217 bytes, the limit is 16777216\n");
}

TEST_CASE("render puts the caret under the column, with tildes for the length") {
    Diagnostic diagnostic;
    diagnostic.file = "x.attn";
    diagnostic.line = 3;
    diagnostic.column = 10;
    diagnostic.length = 4;
    diagnostic.message = "unknown name 'slop'";
    diagnostic.source_line = "\tscore = slop + 1";
    CHECK(render(diagnostic) == "x.attn:3:10: error: unknown name 'slop'\n"
                                "\tscore = slop + 1\n"
                                "\t        ^~~~\n");
    diagnostic.column = 40; // past the end: just after the last character
    diagnostic.length = 3;
    CHECK(render(diagnostic) == "x.attn:3:40: error: unknown name 'slop'\n"
                                "\tscore = slop + 1\n"
                                "\t                ^\n");
    diagnostic.column = 15;
    diagnostic.length = 10; // clipped to the line
    CHECK(render(diagnostic).substr(render(diagnostic).rfind('\t')) == "\t             ^~~\n");
    diagnostic.line = 0;
    CHECK(render(diagnostic) == "x.attn: error: unknown name 'slop'\n");
}

TEST_CASE("a let that refers to itself is an error even when nothing uses it") {
    CHECK(errors_of("attention a { heads = 2; head_dim = 16; let x = x + 1 }") ==
          "t.attn:1:45: error: let 'x' refers to itself: x -> x\n"
          "attention a { heads = 2; head_dim = 16; let x = x + 1 }\n"
          "                                            ^\n");
    CHECK(errors_of("attention a {\n heads = 2; head_dim = 16\n let x = y\n let y = 2 * x\n}") ==
          "t.attn:3:6: error: let 'x' refers to itself: x -> y -> x\n"
          " let x = y\n"
          "     ^\n");
}

TEST_CASE("a layer without a name or braces is reported once") {
    CHECK(errors_of("attention") ==
          "t.attn:1:10: error: expected a layer name after 'attention', got the end of the file\n"
          "attention\n"
          "         ^\n");
    CHECK(errors_of("attention { heads = 2; head_dim = 16 }") ==
          "t.attn:1:11: error: expected a layer name after 'attention', got '{'\n"
          "attention { heads = 2; head_dim = 16 }\n"
          "          ^\n");
    CHECK(errors_of("attention 3d { heads = 2 }\nattention b { heads = 2; head_dim = 4 }") ==
          "t.attn:1:11: error: invalid number '3d': a name cannot start with a digit\n"
          "attention 3d { heads = 2 }\n"
          "          ^~\n");
    ParsedSpec parsed = parse_attn("attention a\n  heads = 2\n  head_dim = 16\n}\n", "t.attn");
    CHECK(rendered(parsed) == "t.attn:2:3: error: expected '{' to open layer 'a', got 'heads'\n"
                              "  heads = 2\n"
                              "  ^~~~~\n");
    CHECK(parsed.layers.empty());
}

TEST_CASE("a layer's declarations, predicates and lets are bounded in number") {
    std::string tensors = "attention a { heads = 2; head_dim = 16\n";
    for (int i = 0; i < 257; ++i)
        tensors += "tensor t" + std::to_string(i) + "[heads]\n";
    CHECK(errors_of(tensors + "}") ==
          "t.attn:258:1: error: too many tensors and scalars in one layer (the limit is 256)\n"
          "tensor t256[heads]\n"
          "^~~~~~\n");
    std::string masks = "attention a { heads = 2; head_dim = 16; mask = causal";
    for (int i = 0; i < 65; ++i)
        masks += " + (k != " + std::to_string(i) + ")";
    CHECK(errors_of(masks + " }")
              .find("error: too many mask predicates in one layer (the limit "
                    "is 64); combine them with &&") != std::string::npos);
    std::string lets = "attention a { heads = 2; head_dim = 16\n";
    for (int i = 0; i < 1025; ++i)
        lets += "let x" + std::to_string(i) + " = 1\n";
    CHECK(errors_of(lets + "}")
              .find("t.attn:1026:1: error: too many lets in one layer (the limit "
                    "is 1024)") == 0);
}

TEST_CASE("very long lines are shown cut, and very long names are refused") {
    std::string line = "attention a { heads = 2; head_dim = 16; score_mod = score" +
                       std::string(9000, ' ') + "@ }";
    ParsedSpec parsed = parse_attn(line, "long.attn");
    REQUIRE(parsed.errors.size() == 1);
    const Diagnostic &error = parsed.errors[0];
    CHECK(error.column == 9058);
    CHECK(error.source_line == line.substr(0, 4096) + "...");
    std::string shown = render(error);
    CHECK(shown.substr(shown.size() - 3) == " ^\n"); // under the "..."
    CHECK(shown.size() < 2 * 4096 + 200);

    std::string name(300, 'n');
    CHECK(errors_of("attention " + name + " { }")
              .find("t.attn:1:11: error: name 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...' is too "
                    "long: 300 characters, the limit is 256\n") == 0);
    CHECK(errors_of("attention " + std::string(256, 'n') + " { heads = 1; head_dim = 8 }").empty());
}

TEST_CASE("rotary embedding fields parse, print back, and name their errors where written") {
    AttentionSpec layer = one_layer("attention llama {\n"
                                    "    model_dim = 256; heads = 8; kv_heads = 2\n"
                                    "    projections = q, k, v, out; mask = causal\n"
                                    "    rope = neox; rope_theta = 500000.0; rotary_dim = 16\n"
                                    "    rope_scaling = llama3(8, 1.0, 4, 8192)\n"
                                    "}\n");
    CHECK(layer.rope.kind == attngen::RopeKind::neox);
    CHECK(layer.rope.theta == 500000.0);
    CHECK(layer.rope.rotary_dim == 16);
    CHECK(layer.rope.scaling.kind == attngen::RopeScaling::Kind::llama3);
    CHECK(layer.rope.scaling.factor == 8.0);
    CHECK(layer.rope.scaling.high_freq_factor == 4.0);
    CHECK(layer.rope.scaling.original_max_positions == 8192);
    check_round_trip(layer);
    CHECK(to_attn(layer).find("    rope = neox\n    rope_theta = 500000\n    rotary_dim = 16\n"
                              "    rope_scaling = llama3(8, 1, 4, 8192)\n") != std::string::npos);

    AttentionSpec linear = one_layer("attention gptj { heads = 4; head_dim = 64\n"
                                     "  rope = interleaved; rope_scaling = linear(2.5) }");
    CHECK(linear.rope.kind == attngen::RopeKind::interleaved);
    CHECK(linear.rope.scaling.kind == attngen::RopeScaling::Kind::linear);
    CHECK(linear.rope.scaling.factor == 2.5);
    check_round_trip(linear);

    AttentionSpec table = one_layer("attention tables { heads = 4; head_dim = 64\n"
                                    "  rope = table(interleaved); rotary_dim = 32 }");
    CHECK(table.rope.table);
    CHECK(table.rope.kind == attngen::RopeKind::interleaved);
    check_round_trip(table);
}

TEST_CASE("KV cache fields parse and print back") {
    AttentionSpec paged = one_layer("attention decode {\n"
                                    "    model_dim = 256; heads = 8; kv_heads = 2\n"
                                    "    projections = q, k, v, out; mask = causal; rope = neox\n"
                                    "    cache = paged(16); cache_dtype = f16\n"
                                    "}\n");
    CHECK(paged.cache.kind == attngen::CacheSpec::Kind::paged);
    CHECK(paged.cache.block_size == 16);
    CHECK(paged.resolved_cache_dtype() == attngen::DType::f16);
    check_round_trip(paged);
    CHECK(to_attn(paged).find("    cache = paged(16)\n    cache_dtype = f16\n") !=
          std::string::npos);

    AttentionSpec contiguous =
        one_layer("attention steps { heads = 4; head_dim = 32; cache = contiguous }");
    CHECK(contiguous.cache.kind == attngen::CacheSpec::Kind::contiguous);
    CHECK(!contiguous.cache.dtype);
    check_round_trip(contiguous);
}

TEST_CASE("layout parses and prints back") {
    AttentionSpec packed = one_layer("attention varlen {\n"
                                     "    heads = 4; head_dim = 32; mask = causal\n"
                                     "    layout = packed\n"
                                     "}\n");
    CHECK(packed.packed);
    check_round_trip(packed);
    CHECK(to_attn(packed).find("    layout = packed\n") != std::string::npos);
    AttentionSpec plain =
        one_layer("attention plain { heads = 4; head_dim = 32; layout = batched }");
    CHECK_FALSE(plain.packed);
    CHECK(to_attn(plain).find("layout") == std::string::npos);
}

TEST_CASE("value_dim parses and prints back") {
    AttentionSpec deepseek = one_layer("attention mla {\n"
                                       "    model_dim = 512; heads = 4; head_dim = 192\n"
                                       "    value_dim = 128; projections = q, k, v, out\n"
                                       "}\n");
    CHECK(deepseek.resolved_value_dim() == 128);
    check_round_trip(deepseek);
    CHECK(to_attn(deepseek).find("    head_dim = 192\n    value_dim = 128\n") != std::string::npos);
    AttentionSpec plain = one_layer("attention plain { heads = 4; head_dim = 32 }");
    CHECK(plain.resolved_value_dim() == 32);
    CHECK(to_attn(plain).find("value_dim") == std::string::npos);
}

TEST_CASE("kv_dtype parses and prints back") {
    AttentionSpec quantized = one_layer("attention q8 {\n"
                                        "    heads = 8; kv_heads = 2; head_dim = 64\n"
                                        "    dtype = f16; kv_dtype = i8\n"
                                        "}\n");
    CHECK(quantized.resolved_kv_dtype() == attngen::DType::i8);
    CHECK(quantized.dtype == attngen::DType::f16);
    check_round_trip(quantized);
    CHECK(to_attn(quantized).find("    dtype = f16\n    kv_dtype = i8\n") != std::string::npos);

    AttentionSpec plain = one_layer("attention plain { heads = 4; head_dim = 32; dtype = bf16 }");
    CHECK(!plain.kv_dtype);
    CHECK(plain.resolved_kv_dtype() == attngen::DType::bf16);
    CHECK(to_attn(plain).find("kv_dtype") == std::string::npos);
}
