// The .attn front end never crashes, hangs or points outside its input: a seeded mutation loop
// over the specs in tests/specs and tests/diagnostics, and a few pathological inputs.
#include "dsl/attn_parser.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

using namespace attngen;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> corpus() {
    std::vector<std::string> texts;
    const fs::path source_dir = ATTNGEN_SOURCE_DIR;
    for (const char *folder : {"specs", "diagnostics"})
        for (const fs::directory_entry &entry :
             fs::directory_iterator(source_dir / "tests" / folder))
            if (entry.path().extension() == ".attn") {
                std::ifstream file(entry.path(), std::ios::binary);
                std::ostringstream text;
                text << file.rdbuf();
                texts.push_back(text.str());
            }
    std::sort(texts.begin(), texts.end()); // directory order differs between machines
    return texts;
}

// What must hold for any input; "" when it does, else the first thing that does not.
// `valid` tells whether the input was a valid file.
std::string violated_promise(const std::string &text, bool *valid = nullptr) {
    ParsedSpec parsed = parse_attn(text, "fuzz.attn");
    if (valid)
        *valid = parsed.errors.empty();
    std::vector<size_t> line_lengths;
    for (size_t begin = 0;;) {
        size_t newline = text.find('\n', begin);
        line_lengths.push_back((newline == std::string::npos ? text.size() : newline) - begin);
        if (newline == std::string::npos)
            break;
        begin = newline + 1;
    }
    if (parsed.errors.size() > 51)
        return "more than 50 errors and a note: " + std::to_string(parsed.errors.size());
    for (const Diagnostic &diagnostic : parsed.errors) {
        std::string shown;
        try {
            shown = render(diagnostic);
        } catch (...) {
            return "render threw for: " + diagnostic.message;
        }
        if (shown.empty() || shown.back() != '\n')
            return "render gave no line for: " + diagnostic.message;
        if (diagnostic.line == 0) {
            if (diagnostic.message.rfind("too many errors", 0) != 0 &&
                diagnostic.message.rfind("file is too large", 0) != 0)
                return "line 0 for an error that is not about the file: " + shown;
            continue;
        }
        if (diagnostic.line < 1 || static_cast<size_t>(diagnostic.line) > line_lengths.size())
            return "line out of range: " + shown;
        size_t length = line_lengths[diagnostic.line - 1];
        if (diagnostic.column < 1 || static_cast<size_t>(diagnostic.column) > length + 1)
            return "column out of range (line has " + std::to_string(length) + " bytes): " + shown;
        if (diagnostic.length < 1)
            return "length below 1: " + shown;
        if (diagnostic.message.empty())
            return "empty message at " + std::to_string(diagnostic.line);
    }
    if (!parsed.errors.empty())
        return "";
    // A valid file: every layer is valid and reads back from its canonical text.
    for (const AttentionSpec &layer : parsed.layers) {
        if (!check_spec(layer).empty())
            return "accepted a layer check_spec refuses: " + describe_errors(check_spec(layer));
        std::string canonical = to_attn(layer);
        ParsedSpec again = parse_attn(canonical, "again.attn");
        if (!again.errors.empty())
            return "to_attn text does not parse:\n" + canonical + render(again.errors[0]);
        if (again.layers.size() != 1 || to_attn(again.layers[0]) != canonical)
            return "to_attn text reads back differently:\n" + canonical;
    }
    return "";
}

// The input, printable, for a failure message.
std::string escaped(const std::string &text) {
    std::string shown;
    for (unsigned char c : text.substr(0, 4000)) {
        if (c == '\n' || (c >= 0x20 && c < 0x7F)) {
            shown += static_cast<char>(c);
        } else {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", c);
            shown += hex;
        }
    }
    return shown + (text.size() > 4000 ? "..." : "");
}

void check_promises(const std::string &text) {
    std::string problem = violated_promise(text);
    INFO("input (" << text.size() << " bytes): " << escaped(text));
    CHECK(problem == "");
}

const char *const grammar_tokens[] = {"attention",
                                      "{",
                                      "}",
                                      "(",
                                      ")",
                                      "[",
                                      "]",
                                      "=",
                                      "==",
                                      "!=",
                                      "<",
                                      "<=",
                                      ">",
                                      ">=",
                                      "&&",
                                      "||",
                                      "!",
                                      "+",
                                      "-",
                                      "*",
                                      "/",
                                      "%",
                                      ",",
                                      ";",
                                      ":",
                                      "\n",
                                      "#",
                                      "let",
                                      "tensor",
                                      "scalar",
                                      "score",
                                      "b",
                                      "h",
                                      "q",
                                      "k",
                                      "mask",
                                      "causal",
                                      "padding",
                                      "window(",
                                      "additive",
                                      "none",
                                      "score_mod",
                                      "scale",
                                      "heads",
                                      "head_dim",
                                      "kv_heads",
                                      "model_dim",
                                      "projections",
                                      "bias",
                                      "cross",
                                      "dtype",
                                      "f32",
                                      "i32",
                                      "true",
                                      "false",
                                      "select(",
                                      "clamp(",
                                      "tanh(",
                                      "int(",
                                      "0",
                                      "1",
                                      "64",
                                      "2147483647",
                                      "2147483648",
                                      "-2147483648",
                                      "99999999999",
                                      "1.5",
                                      ".5",
                                      "1e-3",
                                      "1e999",
                                      "1.",
                                      "\"",
                                      "'",
                                      "&",
                                      "|",
                                      "@",
                                      "\t",
                                      "\r\n",
                                      "" /* a NUL byte */,
                                      "\xc3\xa9",
                                      "\xff",
                                      "\xe2\x9c"};

std::string mutate(std::string text, const std::vector<std::string> &texts, std::mt19937 &random) {
    auto pick = [&](size_t n) { return n == 0 ? size_t(0) : random() % n; };
    auto position = [&] { return pick(text.size() + 1); };
    const int mutations = 1 + static_cast<int>(pick(6));
    for (int m = 0; m < mutations; ++m) {
        switch (pick(11)) {
        case 0: // change a byte
            if (!text.empty())
                text[pick(text.size())] = static_cast<char>(random());
            break;
        case 1: { // insert random bytes
            std::string bytes(1 + pick(16), '\0');
            for (char &c : bytes)
                c = static_cast<char>(random());
            text.insert(position(), bytes);
            break;
        }
        case 2:
        case 3: { // insert a token of the grammar
            std::string token = grammar_tokens[pick(std::size(grammar_tokens))];
            if (token.empty())
                token.assign(1, '\0');
            text.insert(position(), pick(2) ? " " + token + " " : token);
            break;
        }
        case 4: { // delete a slice
            size_t at = position();
            text.erase(at, 1 + pick(32));
            break;
        }
        case 5: { // duplicate a slice
            if (text.empty())
                break;
            size_t at = pick(text.size());
            std::string slice = text.substr(at, 1 + pick(64));
            text.insert(position(), slice);
            break;
        }
        case 6: { // splice with another file
            const std::string &other = texts[pick(texts.size())];
            text = text.substr(0, position()) + other.substr(pick(other.size() + 1));
            break;
        }
        case 7: { // deep nesting
            static const char *const openers[] = {"(", "-", "!", "[", "f(", "t[", "{", ")"};
            std::string opener = openers[pick(std::size(openers))];
            size_t count = 1 + pick(400);
            std::string run;
            for (size_t i = 0; i < count; ++i)
                run += opener;
            text.insert(position(), run);
            break;
        }
        case 9: { // change a digit: often still valid, so the round trip gets exercised
            size_t at = text.find_first_of("0123456789", pick(text.size() + 1));
            if (at != std::string::npos)
                text[at] = static_cast<char>('0' + pick(10));
            break;
        }
        case 10: { // insert white space or a comment
            static const char *const spaces[] = {" ", "\t", "\n", "  # note\n", "\r\n"};
            text.insert(position(), spaces[pick(std::size(spaces))]);
            break;
        }
        default: { // move a line
            size_t at = text.find('\n', pick(text.size() + 1));
            if (at != std::string::npos) {
                size_t end = text.find('\n', at + 1);
                std::string line =
                    text.substr(at, end == std::string::npos ? std::string::npos : end - at);
                text.erase(at, line.size());
                text.insert(position(), line);
            }
            break;
        }
        }
    }
    return text;
}

uint32_t fuzz_seed() {
    if (const char *text = std::getenv("ATTNGEN_FUZZ_SEED"))
        return static_cast<uint32_t>(std::strtoul(text, nullptr, 10));
    return std::random_device{}();
}

} // namespace

TEST_CASE("mutated specs never crash the front end or point outside the input") {
    const uint32_t seed = fuzz_seed();
    const std::vector<std::string> texts = corpus();
    REQUIRE(texts.size() >= 16);
    std::mt19937 random(seed);

    // Bounded by time and by count, whichever comes first.
    const auto budget = std::chrono::seconds(3);
    const int max_iterations = 200000;
    const Clock::time_point start = Clock::now();
    int iterations = 0, valid_inputs = 0;
    bool failed = false;
    while (iterations < max_iterations && Clock::now() - start < budget && !failed) {
        std::string text = mutate(texts[random() % texts.size()], texts, random);
        bool valid = false;
        std::string problem = violated_promise(text, &valid);
        valid_inputs += valid;
        if (!problem.empty()) {
            failed = true;
            INFO("seed " << seed << " (ATTNGEN_FUZZ_SEED), iteration " << iterations);
            INFO("input (" << text.size() << " bytes): " << escaped(text));
            CHECK(problem == "");
        }
        ++iterations;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    WARN("fuzz seed " << seed << " (set ATTNGEN_FUZZ_SEED to repeat): " << iterations
                      << " inputs in " << seconds << " s, "
                      << static_cast<long>(iterations / seconds) << " per second, " << valid_inputs
                      << " of them valid and round-tripped");
    CHECK(iterations > 100);
}

// "(u1 + u2) + (u3 + u4)"... with 2^levels different unknown names, balanced to stay shallow.
std::string balanced_sum(int levels) {
    int next = 0;
    std::function<std::string(int)> sum = [&](int level) -> std::string {
        if (level == 0)
            return "u" + std::to_string(next++);
        return "(" + sum(level - 1) + " + " + sum(level - 1) + ")";
    };
    return sum(levels);
}

TEST_CASE("pathological inputs return with errors in range") {
    const std::string layer = "attention a { heads = 2; head_dim = 16; score_mod = ";
    auto repeat = [](const std::string &piece, size_t times) {
        std::string text;
        text.reserve(piece.size() * times);
        for (size_t i = 0; i < times; ++i)
            text += piece;
        return text;
    };
    std::mt19937 random(7);
    std::string garbage(1000000, '\0');
    for (char &c : garbage)
        c = static_cast<char>(random());
    std::string printable(1000000, ' ');
    for (char &c : printable)
        c = static_cast<char>(0x20 + random() % 95);

    std::string many_lets;
    for (int i = 0; i < 1000; ++i)
        many_lets += "let l" + std::to_string(i) + " = " + balanced_sum(10) + "\n";

    const std::vector<std::pair<std::string, std::string>> inputs = {
        {"1e5 '(' in a score_mod", layer + std::string(100000, '(') + "score }"},
        {"1e5 '(' at the top level", std::string(100000, '(')},
        {"1e5 '-' in a score_mod", layer + std::string(100000, '-') + "score }"},
        {"1e5 '[' after a name", layer + repeat("t[", 100000)},
        {"1e5 calls deep", layer + repeat("abs(", 100000)},
        {"1e6 random bytes", garbage},
        {"1e6 random printable bytes", printable},
        {"1e6 random bytes in a layer", "attention a {\n" + garbage + "\n}\n"},
        {"NUL bytes", std::string(1000, '\0')},
        {"NUL bytes in a layer", "attention a {\n  heads = 2" + std::string(3, '\0') + "\n}\n"},
        {"1e5 unclosed layers", repeat("attention a {\n", 100000)},
        {"1e5 closing braces", std::string(100000, '}')},
        {"1e5 newlines", std::string(100000, '\n')},
        {"a 1e6-letter name", "attention " + std::string(1000000, 'a') + " { heads = 2 }"},
        {"a 1e6-digit integer", layer + std::string(1000000, '9') + " }"},
        {"a 1e6-digit real", layer + "0." + std::string(1000000, '1') + " }"},
        {"1e5 items on one line", "attention a { " + repeat("heads = 2; ", 100000) + "}"},
        {"1e4 masks", "attention a { heads = 2; head_dim = 16; mask = " +
                          repeat("causal + ", 10000) + "causal }"},
        {"1e5 lets", "attention a { heads = 2; head_dim = 16\n" +
                         repeat("let x = x + 1\n", 100000) + "score_mod = x }"},
        {"a long flat sum", layer + "score" + repeat(" + score", 100000) + " }"},
        {"an unterminated quote", layer + "\"" + std::string(100000, 'x')},
        {"only invalid UTF-8", std::string(100000, '\xff')},
        {"lone carriage returns", repeat("attention a {\r heads = 2\r", 1000)},
        {"1e5 tensor declarations",
         "attention a { heads = 2; head_dim = 16\n" + repeat("tensor t[heads]\n", 100000) + "}"},
        {"1e4 mask predicates", "attention a { heads = 2; head_dim = 16; mask = (q < k)" +
                                    repeat(" + (q < k)", 10000) + " }"},
        {"1e5 unknown names in a balanced tree", layer + balanced_sum(17) + " }"},
        {"two 1e5-letter names a letter apart",
         "attention a { heads = 2; head_dim = 16; scalar " + std::string(100000, 'n') +
             "; score_mod = " + std::string(99999, 'n') + "m }"},
        {"1e3 unused lets of 1e3 nodes",
         "attention a { heads = 2; head_dim = 16\n" + many_lets + "}"},
    };
    for (const auto &input : inputs) {
        INFO(input.first);
        const Clock::time_point start = Clock::now();
        check_promises(input.second);
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        INFO("took " << seconds << " s");
        // A hang would be far longer; this is not a benchmark. The bound leaves room for
        // qemu-aarch64 on a busy 2-core machine, where the slowest input took 37 s.
        CHECK(seconds < 120.0);
    }
}
