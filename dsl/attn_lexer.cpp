// The .attn lexer.
#include "attn_lexer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace attngen {

namespace {

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
    return is_name_start(c) || is_digit(c);
}

// A token's text for a message, shortened when it is very long.
std::string excerpt(std::string_view text) {
    constexpr size_t limit = 40;
    if (text.size() <= limit)
        return std::string(text);
    return std::string(text.substr(0, limit)) + "...";
}

// The code point of the valid UTF-8 sequence `bytes`.
unsigned code_point(std::string_view bytes) {
    unsigned lead = static_cast<unsigned char>(bytes[0]);
    unsigned value = bytes.size() == 2   ? lead & 0x1F
                     : bytes.size() == 3 ? lead & 0x0F
                                         : lead & 0x07;
    for (size_t i = 1; i < bytes.size(); ++i)
        value = (value << 6) | (static_cast<unsigned char>(bytes[i]) & 0x3F);
    return value;
}

} // namespace

SourceRange Lexer::here(size_t begin) const {
    return {line_, static_cast<int>(begin - line_start_) + 1, 1};
}

Token Lexer::make(Token::Kind kind, size_t begin, size_t end) {
    Token token;
    token.kind = kind;
    token.text = text_.substr(begin, end - begin);
    token.where = here(begin);
    token.where.length = static_cast<int>(std::max<size_t>(end - begin, 1));
    position_ = end;
    return token;
}

Token Lexer::invalid(size_t begin, size_t end, std::string message) {
    Token token = make(Token::Kind::invalid, begin, end);
    diagnostics_.error(token.where, std::move(message));
    return token;
}

Token Lexer::next() {
    while (!diagnostics_.full() && position_ < text_.size()) {
        const size_t begin = position_;
        const char c = text_[begin];
        if (c == ' ' || c == '\t' || c == '\v' || c == '\f' ||
            (c == '\r' && (begin + 1 >= text_.size() || text_[begin + 1] != '\n'))) {
            ++position_;
            continue;
        }
        if (c == '#') {
            size_t newline = text_.find('\n', begin);
            position_ = newline == std::string_view::npos ? text_.size() : newline;
            // A comment may end in "\r\n"; the '\r' belongs to the newline.
            if (position_ > begin && position_ < text_.size() && text_[position_ - 1] == '\r')
                --position_;
            continue;
        }
        if (c == '\n' || c == '\r') {
            Token token = make(Token::Kind::newline, begin, c == '\r' ? begin + 2 : begin + 1);
            token.where.length = 1;
            ++line_;
            line_start_ = position_;
            return token;
        }
        if (is_name_start(c)) {
            size_t end = begin + 1;
            while (end < text_.size() && is_name_char(text_[end]))
                ++end;
            if (end - begin > max_name_length)
                return invalid(begin, end,
                               "name '" + excerpt(text_.substr(begin, end - begin)) +
                                   "' is too long: " + std::to_string(end - begin) +
                                   " characters, the limit is " + std::to_string(max_name_length));
            return make(Token::Kind::name, begin, end);
        }
        if (is_digit(c) || (c == '.' && begin + 1 < text_.size() && is_digit(text_[begin + 1])))
            return number(begin);
        if (c == '"' || c == '\'')
            return quoted(begin);

        static const char *const pairs[] = {"==", "!=", "<=", ">=", "&&", "||"};
        for (const char *pair : pairs)
            if (text_.substr(begin, 2) == pair)
                return make(Token::Kind::symbol, begin, begin + 2);
        if (c == '&' || c == '|') {
            std::string doubled(2, c);
            Token token = make(Token::Kind::symbol, begin, begin + 1);
            token.text = c == '&' ? "&&" : "||";
            diagnostics_.error(token.where, "'" + std::string(1, c) +
                                                "' is not an operator; did you mean '" + doubled +
                                                "'?");
            return token;
        }
        if (std::string_view("{}()[],;:=+-*/%<>!").find(c) != std::string_view::npos)
            return make(Token::Kind::symbol, begin, begin + 1);
        return unknown_character(begin);
    }
    Token end;
    end.kind = Token::Kind::end;
    end.where = here(position_);
    return end;
}

Token Lexer::number(size_t begin) {
    size_t end = begin;
    bool is_real = false;
    const char *problem = nullptr; // the first thing wrong with the number
    auto digits_follow = [&] { return end < text_.size() && is_digit(text_[end]); };
    while (digits_follow())
        ++end;
    if (end < text_.size() && text_[end] == '.') {
        ++end;
        is_real = true;
        if (!digits_follow())
            problem = "expected a digit after '.'";
        while (digits_follow())
            ++end;
    }
    if (!problem && end < text_.size() && (text_[end] == 'e' || text_[end] == 'E')) {
        ++end;
        is_real = true;
        if (end < text_.size() && (text_[end] == '+' || text_[end] == '-'))
            ++end;
        if (!digits_follow())
            problem = "expected digits after the exponent";
        while (digits_follow())
            ++end;
    }
    // "12abc", "1.5.3": one bad number rather than a number followed by something else.
    if (end < text_.size() && (is_name_char(text_[end]) || text_[end] == '.')) {
        if (!problem)
            problem = text_[end] == '.' ? "a number has at most one '.'"
                                        : "a name cannot start with a digit";
        while (end < text_.size() && (is_name_char(text_[end]) || text_[end] == '.'))
            ++end;
    }
    std::string_view spelling = text_.substr(begin, end - begin);
    if (problem)
        return invalid(begin, end, "invalid number '" + excerpt(spelling) + "': " + problem);

    if (!is_real) {
        constexpr double limit = 2147483648.0; // 2^31: allowed only right after a '-'
        double value = 0;
        for (char digit : spelling) {
            value = value * 10 + (digit - '0');
            if (value > limit)
                return invalid(begin, end,
                               "integer " + excerpt(spelling) +
                                   " is too large (the largest is 2147483647)");
        }
        Token token = make(Token::Kind::integer, begin, end);
        token.number = value;
        return token;
    }

    std::string digits = (spelling[0] == '.' ? "0" : "") + std::string(spelling);
    double value = 0;
    std::from_chars_result parsed =
        std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (parsed.ec != std::errc() || parsed.ptr != digits.data() + digits.size() ||
        !std::isfinite(value))
        return invalid(begin, end,
                       "number " + excerpt(spelling) + " is out of range for a 64-bit real");
    Token token = make(Token::Kind::real, begin, end);
    token.number = value;
    return token;
}

Token Lexer::quoted(size_t begin) {
    const char quote = text_[begin];
    size_t end = begin + 1;
    while (end < text_.size() && text_[end] != quote && text_[end] != '\n')
        ++end;
    if (end < text_.size() && text_[end] == quote)
        return invalid(begin, end + 1,
                       "quoted text is not part of the language; write names and values "
                       "without quotes");
    if (end > begin && end < text_.size() && text_[end - 1] == '\r')
        --end;
    return invalid(begin, end,
                   "unterminated quoted text (and quotes are not part of the "
                   "language; write names and values without them)");
}

Token Lexer::unknown_character(size_t begin) {
    const unsigned char byte = static_cast<unsigned char>(text_[begin]);
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", byte);
    if (byte == 0)
        return invalid(begin, begin + 1, "invalid character: a NUL byte");
    if (byte < 0x20 || byte == 0x7F)
        return invalid(begin, begin + 1,
                       std::string("invalid control character (byte ") + hex + ")");
    if (byte < 0x80)
        return invalid(begin, begin + 1,
                       "invalid character '" + std::string(1, static_cast<char>(byte)) + "'");
    size_t length = utf8_sequence_length(text_, begin);
    if (length == 0)
        return invalid(begin, begin + 1,
                       std::string("invalid byte ") + hex + ": the file is not UTF-8 text");
    std::string_view character = text_.substr(begin, length);
    char code[16];
    std::snprintf(code, sizeof code, "U+%04X", code_point(character));
    return invalid(begin, begin + length,
                   "invalid character '" + std::string(character) + "' (" + code + ")");
}

} // namespace attngen
