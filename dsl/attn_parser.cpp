// The .attn parser: recursive descent over the lexer's tokens, one LayerSyntax per layer,
// each handed to the checker. Errors recover at the next item, line or layer.
#include "attn_parser.h"

#include "attn_checker.h"
#include "attn_lexer.h"
#include "attn_syntax.h"
#include "spelling.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>

namespace attngen {

namespace {

constexpr size_t max_file_bytes = size_t(16) << 20;
// Parentheses, brackets, calls and prefix operators inside one another: bounds the parser's
// own recursion. The same as the depth of a tree, which to_string never exceeds.
constexpr int max_nesting = max_expression_depth;
// Per layer: far beyond any real layer, and they keep the checker's work linear in the input.
constexpr size_t max_declarations = 256; // tensors and scalars together
constexpr size_t max_predicates = 64;
constexpr size_t max_lets = 1024;

const std::vector<std::string> &field_names() {
    static const std::vector<std::string> names = {
        "model_dim",  "heads",      "kv_heads",     "head_dim", "dtype",       "projections",
        "bias",       "cross",      "mask",         "scale",    "score_mod",   "rope",
        "rope_theta", "rotary_dim", "rope_scaling", "cache",    "cache_dtype", "sinks",
        "outputs",    "kv_dtype",   "value_dim",    "layout"};
    return names;
}

bool is_comparison(const Token &token) {
    if (token.kind != Token::Kind::symbol)
        return false;
    return token.text == "<" || token.text == "<=" || token.text == ">" || token.text == ">=" ||
           token.text == "==" || token.text == "!=";
}

// The binary operators by level, loosest first; comparisons (level 2) do not chain.
const std::vector<std::vector<std::string_view>> &binary_levels() {
    static const std::vector<std::vector<std::string_view>> levels = {
        {"||"}, {"&&"}, {"<", "<=", ">", ">=", "==", "!="}, {"+", "-"}, {"*", "/", "%"}};
    return levels;
}
constexpr size_t comparison_level = 2;

// An expression under construction and the depth of its tree.
struct Parsed {
    ModExprPtr expr;
    int depth = 0;
};

ModExprPtr located(const ModExprPtr &node, SourceRange where) {
    auto copy = std::make_shared<ModExpr>(*node);
    copy->where = where;
    return copy;
}

std::string position(SourceRange where) {
    return std::to_string(where.line) + ":" + std::to_string(where.column);
}

class Parser {
  public:
    Parser(std::string_view text, DiagnosticList &diagnostics)
        : lexer_(text, diagnostics), diagnostics_(diagnostics) {}

    std::vector<AttentionSpec> parse_file() {
        std::vector<AttentionSpec> layers;
        for (;;) {
            skip_separators();
            const Token &token = peek();
            if (token.kind == Token::Kind::end)
                break;
            if (token.is_name("attention")) {
                parse_layer(layers);
                continue;
            }
            if (token.is_symbol("}"))
                error(token.where, "unexpected '}': no layer is open here");
            else
                expected("'attention' to begin a layer", token);
            // Skip to the next layer.
            do
                take();
            while (peek().kind != Token::Kind::end && !peek().is_name("attention"));
        }
        return layers;
    }

  private:
    // ---- Tokens ---------------------------------------------------------------------------

    // Whether `token`, first on its line, plainly starts an item (so the line before it
    // cannot go on into it). Not the sizes: scale may read them.
    static bool starts_item(const Token &token) {
        static const char *const starts[] = {
            "attention",  "tensor",     "scalar",       "let",   "dtype",       "projections",
            "bias",       "cross",      "mask",         "scale", "score_mod",   "rope",
            "rope_theta", "rotary_dim", "rope_scaling", "cache", "cache_dtype", "sinks",
            "outputs",    "kv_dtype",   "layout"};
        for (const char *start : starts)
            if (token.is_name(start))
                return true;
        return false;
    }

    // Buffers `count` tokens. Inside brackets, newlines do not end anything and are dropped,
    // unless the next line plainly starts an item: then a bracket was left open.
    void fill(size_t count) {
        for (size_t i = 0; i < count;) {
            while (buffer_.size() < i + 1)
                buffer_.push_back(lexer_.next());
            if (bracket_depth_ > 0 && buffer_[i].kind == Token::Kind::newline) {
                while (buffer_.size() < i + 2)
                    buffer_.push_back(lexer_.next());
                if (!starts_item(buffer_[i + 1])) {
                    buffer_.erase(buffer_.begin() + static_cast<std::ptrdiff_t>(i));
                    continue;
                }
            }
            ++i;
        }
    }
    const Token &peek() {
        fill(1);
        return buffer_[0];
    }
    const Token &peek_second() {
        fill(2);
        return buffer_[1];
    }
    Token take() {
        fill(1);
        Token token = buffer_.front();
        if (token.kind != Token::Kind::end)
            buffer_.pop_front();
        return token;
    }
    void skip_newlines() {
        while (peek().kind == Token::Kind::newline)
            take();
    }
    void skip_separators() {
        while (peek().kind == Token::Kind::newline || peek().is_symbol(";"))
            take();
    }
    bool at_item_end() {
        const Token &token = peek();
        return token.kind == Token::Kind::newline || token.kind == Token::Kind::end ||
               token.is_symbol(";") || token.is_symbol("}");
    }

    // After an operator, '+' or ',' at the end of a line, the item goes on on the next line,
    // unless that line plainly starts an item of its own: then the newline stays, to end this
    // item with an error without swallowing the next one.
    void continue_on_next_line() {
        if (bracket_depth_ > 0 || peek().kind != Token::Kind::newline)
            return;
        if (!starts_item(peek_second()))
            skip_newlines();
    }

    // ---- Errors ---------------------------------------------------------------------------

    // An error after which part of the layer is missing: the checker will not look at it.
    void error(SourceRange where, std::string message) {
        diagnostics_.error(where, std::move(message));
        if (layer_)
            layer_->complete = false;
    }
    // An error the parser repaired: the layer is still checked, but not returned.
    void repaired(SourceRange where, std::string message) {
        diagnostics_.error(where, std::move(message));
    }

    static std::string describe(const Token &token) {
        switch (token.kind) {
        case Token::Kind::end:
            return "the end of the file";
        case Token::Kind::newline:
            return "the end of the line";
        default: {
            std::string text(token.text.substr(0, 40));
            return "'" + text + (token.text.size() > 40 ? "...'" : "'");
        }
        }
    }

    // "expected X, got Y". Quiet for a token the lexer has already reported. After an
    // expression, a '=' is most likely a comparison written with one '='.
    void expected(const std::string &what, const Token &got, bool after_expression = false) {
        if (got.kind == Token::Kind::invalid) {
            if (layer_)
                layer_->complete = false;
            return;
        }
        std::string message = "expected " + what + ", got " + describe(got);
        if (after_expression && got.is_symbol("="))
            message += "; did you mean '=='?";
        error(got.where, message);
    }

    // Recovery: skip the rest of the item.
    void recover() {
        bracket_depth_ = 0;
        nesting_ = 0;
        while (!at_item_end())
            take();
    }

    // ---- Layers and items -----------------------------------------------------------------

    void parse_layer(std::vector<AttentionSpec> &layers) {
        const Token keyword = take();
        LayerSyntax layer;
        layer_ = &layer;
        const size_t errors_before = diagnostics_.count();

        layer.name_where = keyword.where;
        layer.spec.name.clear();
        if (peek().kind == Token::Kind::name) {
            Token name = take();
            layer.spec.name = std::string(name.text);
            layer.name_where = name.where;
        } else {
            expected("a layer name after 'attention'", peek());
            if (!peek().is_symbol("{")) {
                // Not a layer after all: on to the next one.
                while (peek().kind != Token::Kind::end && !peek().is_name("attention"))
                    take();
                layer_ = nullptr;
                return;
            }
        }
        skip_newlines();
        layer.open_brace = layer.name_where;
        if (peek().is_symbol("{")) {
            layer.open_brace = take().where;
        } else {
            expected("'{' to open layer '" + layer.spec.name + "'", peek());
            // Look for the brace later on the name's line; else read on as if it were there.
            while (peek().where.line == layer.name_where.line && !at_item_end() &&
                   !peek().is_symbol("{"))
                take();
            if (peek().is_symbol("{"))
                layer.open_brace = take().where;
        }

        for (;;) {
            skip_separators();
            const Token &token = peek();
            if (token.is_symbol("}")) {
                take();
                break;
            }
            if (token.kind == Token::Kind::end) {
                if (!diagnostics_.full())
                    error(layer.open_brace, "layer '" + layer.spec.name +
                                                "' is never closed: this '{' has no matching '}'");
                break;
            }
            if (token.is_name("attention")) {
                error(layer.open_brace, "layer '" + layer.spec.name +
                                            "' is never closed: expected '}' before the next "
                                            "layer at line " +
                                            std::to_string(token.where.line));
                break;
            }
            after_expression_ = false;
            if (!parse_item(layer)) {
                recover();
            } else if (!at_item_end()) {
                expected("a new line or ';' after " + item_, peek(), after_expression_);
                recover();
            }
        }
        layer_ = nullptr;

        if (!layer.spec.name.empty()) {
            auto first = layer_names_.find(layer.spec.name);
            if (first != layer_names_.end())
                repaired(layer.name_where, "duplicate layer name '" + layer.spec.name +
                                               "'; the first layer of that name is at line " +
                                               std::to_string(first->second.line));
            else
                layer_names_[layer.spec.name] = layer.name_where;
        }
        if (diagnostics_.full())
            return;
        std::optional<AttentionSpec> spec = check_layer(layer, diagnostics_);
        if (spec && diagnostics_.count() == errors_before)
            layers.push_back(std::move(*spec));
    }

    bool parse_item(LayerSyntax &layer) {
        const Token head = peek();
        if (head.kind != Token::Kind::name) {
            expected("a field, 'tensor', 'scalar' or 'let'", head);
            return false;
        }
        take();
        const std::string name(peek().kind == Token::Kind::name ? peek().text : "");
        const bool declares = head.text == "tensor" || head.text == "scalar";
        if (declares && layer.spec.tensors.size() + layer.spec.scalars.size() == max_declarations) {
            error(head.where, "too many tensors and scalars in one layer (the limit is " +
                                  std::to_string(max_declarations) + ")");
            return false;
        }
        if (head.text == "let" && layer.lets.size() == max_lets) {
            error(head.where,
                  "too many lets in one layer (the limit is " + std::to_string(max_lets) + ")");
            return false;
        }
        if (head.text == "tensor") {
            item_ = "the declaration of tensor '" + name + "'";
            return parse_tensor(layer);
        }
        if (head.text == "scalar") {
            item_ = "the declaration of scalar '" + name + "'";
            return parse_scalar(layer);
        }
        if (head.text == "let") {
            item_ = "let '" + name + "'";
            return parse_let(layer);
        }
        item_ = "the value of '" + std::string(head.text) + "'";
        return parse_field(layer, head);
    }

    bool parse_field(LayerSyntax &layer, const Token &head) {
        const std::string field(head.text);
        const std::vector<std::string> &fields = field_names();
        if (std::find(fields.begin(), fields.end(), field) == fields.end()) {
            std::vector<std::string> candidates = fields;
            candidates.insert(candidates.end(), {"tensor", "scalar", "let"});
            std::string suggestion = did_you_mean(field, candidates);
            if (suggestion.empty())
                suggestion = "; the fields are model_dim, heads, kv_heads, head_dim, dtype, "
                             "projections, bias, cross, mask, scale, score_mod, rope, "
                             "rope_theta, rotary_dim, rope_scaling, cache, cache_dtype, sinks, "
                             "outputs, kv_dtype, value_dim and layout";
            error(head.where, "unknown field '" + field + "'" + suggestion);
            return false;
        }
        auto first = layer.field_values.find(field);
        if (first != layer.field_values.end())
            repaired(head.where, "duplicate field '" + field + "'; it was first given at line " +
                                     std::to_string(first->second.line));

        if (peek().is_symbol("=")) {
            take();
        } else if (!at_item_end() && peek().kind != Token::Kind::invalid) {
            repaired(peek().where, "expected '=' after '" + field + "', got " + describe(peek()));
        } else {
            expected("'=' after '" + field + "'", peek());
            return false;
        }

        const SourceRange value_where = peek().where;
        // A repeated field is parsed for its errors, then dropped: the first one counts.
        LayerSyntax scratch;
        LayerSyntax &target = first == layer.field_values.end() ? layer : scratch;
        if (!parse_value(target, field))
            return false;
        if (&target == &layer)
            layer.field_values[field] = value_where;
        return true;
    }

    bool parse_value(LayerSyntax &layer, const std::string &field) {
        AttentionSpec &spec = layer.spec;
        if (field == "model_dim")
            return parse_int_value(field, spec.model_dim);
        if (field == "heads")
            return parse_int_value(field, spec.heads);
        if (field == "kv_heads")
            return parse_int_value(field, spec.kv_heads);
        if (field == "head_dim")
            return parse_int_value(field, spec.head_dim);
        if (field == "value_dim")
            return parse_int_value(field, spec.value_dim);
        if (field == "dtype")
            return parse_dtype_value(field, spec.dtype);
        if (field == "cache_dtype" || field == "kv_dtype") {
            DType dtype = DType::f32;
            if (!parse_dtype_value(field, dtype))
                return false;
            (field == "kv_dtype" ? spec.kv_dtype : spec.cache.dtype) = dtype;
            return true;
        }
        if (field == "cache")
            return parse_cache_value(spec.cache);
        if (field == "bias")
            return parse_bool_value(field, spec.projections.bias);
        if (field == "cross")
            return parse_bool_value(field, spec.cross_attention);
        if (field == "sinks")
            return parse_bool_value(field, spec.sinks);
        if (field == "projections")
            return parse_projections_value(spec.projections);
        if (field == "outputs")
            return parse_outputs_value(spec.lse_output);
        if (field == "layout")
            return parse_layout_value(spec.packed);
        if (field == "mask")
            return parse_mask_value(layer);
        if (field == "rope")
            return parse_rope_value(spec.rope);
        if (field == "rope_theta")
            return parse_number_value("a number for 'rope_theta'", spec.rope.theta);
        if (field == "rotary_dim")
            return parse_int_value(field, spec.rope.rotary_dim);
        if (field == "rope_scaling")
            return parse_rope_scaling_value(spec.rope.scaling);
        Parsed expr = parse_expression();
        if (!expr.expr)
            return false;
        (field == "scale" ? layer.scale : layer.score_mod) = expr.expr;
        return true;
    }

    // An INTEGER token in 0..2^31-1 (check_spec judges the range that makes sense).
    bool parse_int(const std::string &what, int &value) {
        const Token token = peek();
        if (token.kind != Token::Kind::integer) {
            expected(what, token);
            return false;
        }
        take();
        if (token.number > INT_MAX) {
            error(token.where, "integer " + std::string(token.text) +
                                   " is too large (the largest is 2147483647)");
            return false;
        }
        value = static_cast<int>(token.number);
        return true;
    }

    bool parse_int_value(const std::string &field, int &value) {
        return parse_int("an integer for '" + field + "'", value);
    }

    // An INTEGER or REAL token (check_spec judges the range).
    bool parse_number_value(const std::string &what, double &value) {
        const Token token = peek();
        if (token.kind != Token::Kind::integer && token.kind != Token::Kind::real) {
            expected(what, token);
            return false;
        }
        take();
        value = token.number;
        return true;
    }

    // f32 | f16 | bf16, and i8 for cache_dtype and kv_dtype
    bool parse_dtype_value(const std::string &field, DType &value) {
        const Token token = peek();
        const bool storage = field == "cache_dtype" || field == "kv_dtype";
        const std::string choices = storage ? "f32, f16, bf16 or i8" : "f32, f16 or bf16";
        if (token.kind != Token::Kind::name) {
            expected(choices + " for '" + field + "'", token);
            return false;
        }
        take();
        std::optional<DType> dtype = parse_dtype(std::string(token.text));
        if (!dtype || (*dtype == DType::i8 && !storage)) {
            error(token.where,
                  "unknown " + field + " '" + std::string(token.text) + "'; expected " + choices);
            return false;
        }
        value = *dtype;
        return true;
    }

    // none | contiguous | paged '(' INTEGER ')'
    bool parse_cache_value(CacheSpec &cache) {
        const char *const expected_text = "none, contiguous or paged(N) for 'cache'";
        const Token token = peek();
        if (token.kind != Token::Kind::name) {
            expected(expected_text, token);
            return false;
        }
        take();
        const std::string text(token.text);
        if (text == "paged") {
            if (!expect_symbol("(", "'(' after 'paged', then the positions per block"))
                return false;
            int block_size = 0;
            if (!parse_int("the positions per block of 'paged'", block_size) ||
                !expect_symbol(")", "')' after the positions per block"))
                return false;
            cache.kind = CacheSpec::Kind::paged;
            cache.block_size = block_size;
            return true;
        }
        if (!parse_cache(text, cache)) {
            error(token.where, "unknown cache '" + text + "'" +
                                   did_you_mean(text, {"none", "contiguous", "paged"}) +
                                   "; expected none, contiguous or paged(N)");
            return false;
        }
        return true;
    }

    // none | neox | interleaved | table [ '(' neox | interleaved ')' ]
    bool parse_rope_value(RopeSpec &rope) {
        const char *const expected_text =
            "none, neox, interleaved, table or table(interleaved) for 'rope'";
        const Token token = peek();
        if (token.kind != Token::Kind::name) {
            expected(expected_text, token);
            return false;
        }
        take();
        std::string text(token.text);
        if (text == "table" && peek().is_symbol("(")) {
            take();
            const Token layout = peek();
            if (!layout.is_name("neox") && !layout.is_name("interleaved")) {
                expected("neox or interleaved, the pairs the table turns", layout);
                return false;
            }
            take();
            if (!expect_symbol(")", "')' after the table's pairs"))
                return false;
            text += "(" + std::string(layout.text) + ")";
        }
        if (!parse_rope(text, rope)) {
            error(token.where,
                  "unknown rope '" + text + "'" +
                      did_you_mean(text, {"none", "neox", "interleaved", "table"}) +
                      "; expected none, neox, interleaved, table or table(interleaved)");
            return false;
        }
        return true;
    }

    // none | linear '(' factor ')' | llama3 '(' factor, low, high, original ')'
    bool parse_rope_scaling_value(RopeScaling &scaling) {
        const Token token = peek();
        if (token.kind != Token::Kind::name) {
            expected("none, linear(F) or llama3(F, LOW, HIGH, ORIGINAL) for 'rope_scaling'", token);
            return false;
        }
        take();
        const std::string name(token.text);
        if (name == "none") {
            scaling = RopeScaling();
            return true;
        }
        if (name != "linear" && name != "llama3") {
            error(token.where, "unknown rope_scaling '" + name + "'" +
                                   did_you_mean(name, {"none", "linear", "llama3"}) +
                                   "; expected none, linear(F) or llama3(F, LOW, HIGH, ORIGINAL)");
            return false;
        }
        const bool llama3 = name == "llama3";
        if (!expect_symbol("(", "'(' after '" + name + "'"))
            return false;
        scaling.kind = llama3 ? RopeScaling::Kind::llama3 : RopeScaling::Kind::linear;
        if (!parse_number_value("the factor of " + name, scaling.factor))
            return false;
        if (llama3 &&
            !(expect_symbol(",", "',' after the factor") &&
              parse_number_value("low_freq_factor", scaling.low_freq_factor) &&
              expect_symbol(",", "',' after low_freq_factor") &&
              parse_number_value("high_freq_factor", scaling.high_freq_factor) &&
              expect_symbol(",", "',' after high_freq_factor") &&
              parse_int("original_max_positions (an integer)", scaling.original_max_positions)))
            return false;
        return expect_symbol(")", llama3 ? "')' after original_max_positions"
                                         : "')' after the factor (linear takes one value)");
    }

    bool expect_symbol(const char *symbol, const std::string &what) {
        if (!peek().is_symbol(symbol)) {
            expected(what, peek());
            return false;
        }
        take();
        return true;
    }

    bool parse_bool_value(const std::string &field, bool &value) {
        const Token token = peek();
        if (token.is_name("true") || token.is_name("false")) {
            take();
            value = token.text == "true";
            return true;
        }
        expected("true or false for '" + field + "'", token);
        return false;
    }

    bool parse_projections_value(Projections &projections) {
        if (peek().is_name("none")) {
            take();
            return true;
        }
        for (;;) {
            const Token token = peek();
            if (token.kind != Token::Kind::name) {
                expected("q, k, v or out (or none) for 'projections'", token);
                return false;
            }
            take();
            bool *slot = token.text == "q"     ? &projections.q
                         : token.text == "k"   ? &projections.k
                         : token.text == "v"   ? &projections.v
                         : token.text == "out" ? &projections.out
                                               : nullptr;
            std::string name(token.text);
            if (!slot) {
                error(token.where, "unknown projection '" + name + "'" +
                                       did_you_mean(name, {"q", "k", "v", "out", "none"}) +
                                       "; expected q, k, v or out");
                return false;
            }
            if (*slot)
                repaired(token.where, "projection '" + name + "' is listed twice");
            *slot = true;
            if (!peek().is_symbol(","))
                return true;
            take();
            continue_on_next_line();
        }
    }

    // batched | packed
    bool parse_layout_value(bool &packed) {
        const Token token = peek();
        if (token.kind != Token::Kind::name) {
            expected("batched or packed for 'layout'", token);
            return false;
        }
        take();
        const std::string text(token.text);
        std::optional<bool> value = parse_layout(text);
        if (!value) {
            error(token.where, "unknown layout '" + text + "'" +
                                   did_you_mean(text, {"batched", "packed"}) +
                                   "; expected batched or packed");
            return false;
        }
        packed = *value;
        return true;
    }

    // 'out', optionally followed by ', lse'.
    bool parse_outputs_value(bool &lse_output) {
        const char *what = "out or out, lse for 'outputs'";
        Token token = peek();
        if (!token.is_name("out")) {
            expected(what, token);
            return false;
        }
        take();
        lse_output = false;
        if (!peek().is_symbol(","))
            return true;
        take();
        continue_on_next_line();
        token = peek();
        if (!token.is_name("lse")) {
            expected("lse after 'out,' for 'outputs'", token);
            return false;
        }
        take();
        lse_output = true;
        return true;
    }

    bool parse_mask_value(LayerSyntax &layer) {
        MaskSpec &mask = layer.spec.mask;
        if (peek().is_name("none")) {
            take();
            if (peek().is_symbol("+")) {
                error(peek().where, "'none' cannot be combined with other masks");
                return false;
            }
            return true;
        }
        for (;;) {
            const Token token = peek();
            if (token.is_symbol("(")) {
                // The parentheses of a predicate belong to the mask's syntax, not to the
                // expression: they do not count towards its nesting.
                take();
                Parsed predicate = parse_group(token, false);
                if (!predicate.expr)
                    return false;
                if (layer.mask_predicates.size() == max_predicates) {
                    error(token.where, "too many mask predicates in one layer (the limit is " +
                                           std::to_string(max_predicates) +
                                           "); combine them with &&");
                    return false;
                }
                layer.mask_predicates.push_back(predicate.expr);
            } else if (token.is_name("window")) {
                take();
                if (mask.window != 0)
                    repaired(token.where, "mask 'window' is given twice");
                if (!parse_window(mask.window))
                    return false;
            } else if (token.is_name("causal") || token.is_name("padding") ||
                       token.is_name("additive")) {
                take();
                bool &flag = token.text == "causal"    ? mask.causal
                             : token.text == "padding" ? mask.key_padding
                                                       : mask.additive;
                if (flag)
                    repaired(token.where, "mask '" + std::string(token.text) + "' is given twice");
                flag = true;
            } else if (token.kind == Token::Kind::name) {
                std::string name(token.text);
                std::string suggestion =
                    did_you_mean(name, {"causal", "padding", "window", "additive", "none"});
                error(token.where,
                      "unknown mask '" + name + "'" +
                          (suggestion.empty() ? "; expected causal, padding, window(N), additive "
                                                "or a predicate in parentheses, such as (k <= q)"
                                              : suggestion));
                return false;
            } else {
                expected("a mask: causal, padding, window(N), additive or a predicate in "
                         "parentheses",
                         token);
                return false;
            }
            if (!peek().is_symbol("+"))
                break;
            take();
            continue_on_next_line();
        }
        if (!at_item_end()) {
            const Token &next = peek();
            std::string hint = next.is_symbol("&&") || next.is_symbol("||")
                                   ? " (a predicate goes in one pair of parentheses)"
                                   : "";
            expected("'+' or the end of the mask" + hint, next);
            return false;
        }
        return true;
    }

    bool parse_window(int &window) {
        if (!peek().is_symbol("(")) {
            expected("'(' and a size after 'window', as in window(256)", peek());
            return false;
        }
        take();
        const Token size = peek();
        int value = 0;
        if (!parse_int("the window size, an integer", value))
            return false;
        if (value < 1) {
            error(size.where, "window size must be at least 1, got " + std::to_string(value));
            return false;
        }
        if (!peek().is_symbol(")")) {
            expected("')' after the window size", peek());
            return false;
        }
        take();
        window = value;
        return true;
    }

    bool parse_element_type(const std::string &what, bool &is_int32) {
        if (!peek().is_symbol(":"))
            return true;
        take();
        const Token token = peek();
        if (token.is_name("f32") || token.is_name("i32")) {
            take();
            is_int32 = token.text == "i32";
            return true;
        }
        if (token.kind == Token::Kind::name) {
            error(token.where, "unknown element type '" + std::string(token.text) + "' for " +
                                   what + "; expected f32 or i32");
            return false;
        }
        expected("f32 or i32 after ':'", token);
        return false;
    }

    bool parse_tensor(LayerSyntax &layer) {
        const Token name = peek();
        if (name.kind != Token::Kind::name) {
            expected("a tensor name after 'tensor'", name);
            return false;
        }
        take();
        RuntimeTensor tensor;
        tensor.name = std::string(name.text);
        if (!peek().is_symbol("[")) {
            expected("'[' and the dimensions of tensor '" + tensor.name + "', as in " +
                         tensor.name + "[heads]",
                     peek());
            return false;
        }
        take();
        ++bracket_depth_;
        for (;;) {
            const Token token = peek();
            TensorDim dim;
            if (token.kind == Token::Kind::integer) {
                if (!parse_int("a dimension", dim.extent))
                    return false;
            } else if (token.kind == Token::Kind::name) {
                take();
                bool known = false;
                for (auto symbol : {TensorDim::Symbol::batch, TensorDim::Symbol::heads,
                                    TensorDim::Symbol::kv_heads, TensorDim::Symbol::queries,
                                    TensorDim::Symbol::keys, TensorDim::Symbol::head_dim})
                    if (token.text == symbol_name(symbol)) {
                        dim.symbol = symbol;
                        known = true;
                    }
                if (!known) {
                    std::string text(token.text);
                    std::string suggestion = did_you_mean(
                        text, {"batch", "heads", "kv_heads", "queries", "keys", "head_dim"});
                    error(token.where,
                          "unknown dimension '" + text + "'" +
                              (suggestion.empty() ? "; expected batch, heads, kv_heads, queries, "
                                                    "keys, head_dim or an integer"
                                                  : suggestion));
                    return false;
                }
            } else {
                expected("a dimension (batch, heads, kv_heads, queries, keys, head_dim or an "
                         "integer)",
                         token);
                return false;
            }
            tensor.dims.push_back(dim);
            if (peek().is_symbol(",")) {
                take();
                continue;
            }
            if (peek().is_symbol("]"))
                break;
            expected("',' or ']' in the dimensions of tensor '" + tensor.name + "'", peek());
            return false;
        }
        --bracket_depth_;
        take();
        if (!parse_element_type("tensor '" + tensor.name + "'", tensor.is_int32))
            return false;
        layer.spec.tensors.push_back(std::move(tensor));
        layer.tensor_names.push_back(name.where);
        return true;
    }

    bool parse_scalar(LayerSyntax &layer) {
        const Token name = peek();
        if (name.kind != Token::Kind::name) {
            expected("a scalar name after 'scalar'", name);
            return false;
        }
        take();
        RuntimeScalar scalar;
        scalar.name = std::string(name.text);
        if (!parse_element_type("scalar '" + scalar.name + "'", scalar.is_int32))
            return false;
        layer.spec.scalars.push_back(std::move(scalar));
        layer.scalar_names.push_back(name.where);
        return true;
    }

    bool parse_let(LayerSyntax &layer) {
        const Token name = peek();
        if (name.kind != Token::Kind::name) {
            expected("a name after 'let'", name);
            return false;
        }
        take();
        if (!peek().is_symbol("=")) {
            expected("'=' after 'let " + std::string(name.text) + "'", peek());
            return false;
        }
        take();
        Parsed body = parse_expression();
        if (!body.expr)
            return false;
        layer.lets.push_back({std::string(name.text), name.where, body.expr});
        return true;
    }

    // ---- Expressions ----------------------------------------------------------------------

    // Counts one level of nesting for as long as it lives.
    class Nested {
      public:
        explicit Nested(int &nesting, bool counts = true)
            : nesting_(nesting), step_(counts ? 1 : 0) {
            nesting_ += step_;
        }
        ~Nested() { nesting_ -= step_; }
        Nested(const Nested &) = delete;
        Nested &operator=(const Nested &) = delete;

      private:
        int &nesting_;
        int step_;
    };

    bool too_deep(const Token &at) {
        if (nesting_ <= max_nesting)
            return false;
        error(at.where, "expression is nested too deeply (more than " +
                            std::to_string(max_nesting) +
                            " levels of parentheses, brackets and prefix operators)");
        return true;
    }

    Parsed node(ModExprPtr expr, SourceRange where, int depth, const Token &at) {
        if (depth > max_expression_depth) {
            error(at.where, "expression is too deep (more than " +
                                std::to_string(max_expression_depth) + " levels)");
            return {};
        }
        return {located(std::move(expr), where), depth};
    }

    Parsed parse_expression() {
        Parsed parsed = parse_level(0);
        after_expression_ = parsed.expr != nullptr;
        return parsed;
    }

    Parsed parse_level(size_t level) {
        const auto &levels = binary_levels();
        if (level == levels.size())
            return parse_unary();
        Parsed left = parse_level(level + 1);
        while (left.expr) {
            const Token &next = peek();
            const auto &ops = levels[level];
            if (next.kind != Token::Kind::symbol ||
                std::find(ops.begin(), ops.end(), next.text) == ops.end())
                break;
            const Token op = take();
            continue_on_next_line();
            Parsed right = parse_level(level + 1);
            if (!right.expr)
                return {};
            left = node(binary(std::string(op.text), left.expr, right.expr), op.where,
                        1 + std::max(left.depth, right.depth), op);
            if (left.expr && level == comparison_level && is_comparison(peek())) {
                error(peek().where, "comparisons do not chain: write (a < b) && (b < c) "
                                    "rather than a < b < c");
                return {};
            }
        }
        return left;
    }

    Parsed parse_unary() {
        const Token op = peek();
        if (!op.is_symbol("-") && !op.is_symbol("!"))
            return parse_postfix();
        take();
        Nested nested(nesting_);
        if (too_deep(op))
            return {};
        const Token &next = peek();
        // A '-' right before a number makes a negative literal (so -2147483648 can be written).
        if (op.text == "-" &&
            (next.kind == Token::Kind::integer || next.kind == Token::Kind::real)) {
            const Token literal = take();
            SourceRange where = op.where;
            if (literal.where.line == op.where.line)
                where.length = literal.where.column + literal.where.length - op.where.column;
            ModExprPtr value = literal.kind == Token::Kind::integer
                                   ? integer(-static_cast<long>(literal.number))
                                   : number(-literal.number);
            return node(value, where, 1, op);
        }
        Parsed operand = parse_unary();
        if (!operand.expr)
            return {};
        return node(unary(std::string(op.text), operand.expr), op.where, operand.depth + 1, op);
    }

    Parsed parse_postfix() {
        const Token name = peek();
        if (name.kind != Token::Kind::name || name.is_name("true") || name.is_name("false"))
            return parse_primary();
        const bool is_call = peek_second().is_symbol("(");
        if (!is_call && !peek_second().is_symbol("["))
            return parse_primary();
        take();
        std::vector<ModExprPtr> operands;
        int depth = 0;
        if (!parse_list(is_call ? ")" : "]", operands, depth))
            return {};
        std::string text(name.text);
        ModExprPtr expr =
            is_call ? call(text, std::move(operands)) : tensor(text, std::move(operands));
        Parsed result = node(expr, name.where, depth + 1, name);
        if (result.expr && (peek().is_symbol("(") || peek().is_symbol("["))) {
            error(peek().where, "only a function can be called and only a tensor indexed; '" +
                                    text + (is_call ? "(...)" : "[...]") + "' is neither");
            return {};
        }
        return result;
    }

    // '(' or '[' then expressions separated by ',' up to `close`.
    bool parse_list(const char *close, std::vector<ModExprPtr> &items, int &depth) {
        const Token open = take();
        Nested nested(nesting_);
        if (too_deep(open))
            return false;
        ++bracket_depth_;
        if (!peek().is_symbol(close)) {
            for (;;) {
                Parsed item = parse_expression();
                if (!item.expr)
                    return false;
                items.push_back(item.expr);
                depth = std::max(depth, item.depth);
                if (peek().is_symbol(",")) {
                    take();
                    continue;
                }
                if (peek().is_symbol(close))
                    break;
                expected("',' or '" + std::string(close) + "' to close the '" +
                             std::string(open.text) + "' at " + position(open.where),
                         peek(), true);
                return false;
            }
        }
        --bracket_depth_;
        take();
        return true;
    }

    Parsed parse_primary() {
        const Token token = peek();
        switch (token.kind) {
        case Token::Kind::integer:
            take();
            if (token.number > INT_MAX) {
                error(token.where, "integer " + std::string(token.text) +
                                       " is too large (the largest is 2147483647)");
                return {};
            }
            return node(integer(static_cast<long>(token.number)), token.where, 1, token);
        case Token::Kind::real:
            take();
            return node(number(token.number), token.where, 1, token);
        case Token::Kind::name: {
            take();
            std::string name(token.text);
            if (name == "true" || name == "false")
                return node(boolean(name == "true"), token.where, 1, token);
            if (name == "score" || is_index_variable(name))
                return node(variable(name), token.where, 1, token);
            return node(scalar(name), token.where, 1, token);
        }
        default:
            break;
        }
        if (!token.is_symbol("(")) {
            expected("an expression", token);
            return {};
        }
        take();
        return parse_group(token, true);
    }

    // The rest of '(' expr ')', after `open`.
    Parsed parse_group(const Token &open, bool counts_as_nesting) {
        Nested nested(nesting_, counts_as_nesting);
        if (too_deep(open))
            return {};
        ++bracket_depth_;
        Parsed inner = parse_expression();
        if (!inner.expr)
            return {};
        if (!peek().is_symbol(")")) {
            expected("')' to close the '(' at " + position(open.where), peek(), true);
            return {};
        }
        --bracket_depth_;
        take();
        return inner;
    }

    Lexer lexer_;
    DiagnosticList &diagnostics_;
    std::deque<Token> buffer_;
    int bracket_depth_ = 0;
    int nesting_ = 0;
    bool after_expression_ = false; // the item just parsed ended in an expression
    std::string item_;              // the item being parsed, for messages
    LayerSyntax *layer_ = nullptr;
    std::map<std::string, SourceRange> layer_names_;
};

} // namespace

ParsedSpec parse_attn(const std::string &text, const std::string &file_name) {
    DiagnosticList diagnostics;
    ParsedSpec parsed;
    if (text.size() > max_file_bytes) {
        diagnostics.error({}, "file is too large: " + std::to_string(text.size()) +
                                  " bytes, the limit is " + std::to_string(max_file_bytes));
    } else {
        parsed.layers = Parser(text, diagnostics).parse_file();
    }
    parsed.errors = diagnostics.finish(file_name, text);
    return parsed;
}

ParsedSpec parse_attn_file(const std::string &path) {
    auto unreadable = [&](const std::string &why) {
        ParsedSpec parsed;
        Diagnostic diagnostic;
        diagnostic.file = path;
        diagnostic.message = "cannot read the file: " + why;
        parsed.errors.push_back(diagnostic);
        return parsed;
    };
    std::FILE *file = std::fopen(path.c_str(), "rb");
    if (!file)
        return unreadable(std::strerror(errno));
    std::string text;
    char chunk[65536];
    bool too_large = false;
    for (;;) {
        size_t count = std::fread(chunk, 1, sizeof chunk, file);
        text.append(chunk, count);
        if (text.size() > max_file_bytes) {
            too_large = true;
            break;
        }
        if (count < sizeof chunk)
            break;
    }
    bool failed = std::ferror(file) != 0;
    int saved_errno = errno;
    std::fclose(file);
    if (failed)
        return unreadable(std::strerror(saved_errno));
    if (too_large)
        return unreadable("it is larger than the limit of " + std::to_string(max_file_bytes) +
                          " bytes");
    return parse_attn(text, path);
}

} // namespace attngen
