// The lexer of the .attn language: bytes to tokens, reporting what is not a token.
#pragma once

#include "attn_diagnostics.h"
#include "expression.h"

#include <string_view>

namespace attngen {

/** One token. Newlines are tokens: they end items. Comments and other white space are not. */
struct Token {
    enum class Kind {
        name,    ///< letters, digits and '_', not starting with a digit; max_name_length at most
        integer, ///< digits; `number` holds the value (at most 2^31, the parser checks the sign)
        real,    ///< digits with a '.' or an exponent (1.5, .5, 2e-3); `number` holds the value
        symbol,  ///< punctuation or an operator, in `text`
        newline,
        end,     ///< the end of the input (or of the parse, once the error list is full)
        invalid, ///< something already reported by the lexer; the parser skips it quietly
    };
    Kind kind = Kind::end;
    std::string_view text; ///< as the grammar reads it (the source bytes, except for a repair)
    SourceRange where;
    double number = 0;

    bool is(Kind expected, std::string_view expected_text) const {
        return kind == expected && text == expected_text;
    }
    bool is_symbol(std::string_view symbol) const { return is(Kind::symbol, symbol); }
    bool is_name(std::string_view name) const { return is(Kind::name, name); }
};

/** The longest name the language accepts. */
constexpr size_t max_name_length = 256;

/**
 * Reads tokens from `text` (which must outlive the lexer) on demand. Invalid characters,
 * quoted text and malformed or out-of-range numbers are reported to `diagnostics` and come
 * back as Kind::invalid; a lone '&' or '|' is reported and read as '&&' or '||'.
 */
class Lexer {
  public:
    Lexer(std::string_view text, DiagnosticList &diagnostics)
        : text_(text), diagnostics_(diagnostics) {}

    Token next();

  private:
    SourceRange here(size_t begin) const;
    Token make(Token::Kind kind, size_t begin, size_t end);
    Token invalid(size_t begin, size_t end, std::string message);
    Token number(size_t begin);
    Token quoted(size_t begin);
    Token unknown_character(size_t begin);

    std::string_view text_;
    DiagnosticList &diagnostics_;
    size_t position_ = 0;
    size_t line_start_ = 0;
    int line_ = 1;
};

} // namespace attngen
