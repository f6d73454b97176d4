// Diagnostics of the .attn front end: an error at a line and column of a file, shown the way
// compilers show them, and the list a parse collects them in.
#pragma once

#include "expression.h"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace attngen {

/** Lines longer than this are shown cut, ending in "...". */
constexpr size_t max_shown_line = 4096;

/**
 * One error in a .attn file. `line` and `column` are 1-based (the column and `length` count
 * bytes); line 0 means the error concerns the whole file (for example, it cannot be read).
 * `source_line` is the text of that line, with bytes that would garble a terminal (control
 * characters other than tab, invalid UTF-8) replaced by '?', byte for byte; a line longer
 * than max_shown_line is cut there and ends in "...".
 */
struct Diagnostic {
    std::string file;
    int line = 0, column = 0, length = 1;
    std::string message;
    std::string source_line;
};

/**
 * "file:3:11: error: message", then the source line and a caret under the column with '~'
 * under the rest of `length` (tabs copied from the source so the caret lines up), each line
 * ending in '\n'. A file-level diagnostic is the first line alone. Never throws for odd
 * positions: a column past the end of the line puts the caret just after it.
 */
std::string render(const Diagnostic &diagnostic);

/** The length (1 to 4) of the valid UTF-8 sequence starting at `text[at]`, or 0. */
size_t utf8_sequence_length(std::string_view text, size_t at);

/** `line` with control characters (except tab) and invalid UTF-8 bytes replaced by '?'. */
std::string printable_line(std::string_view line);

/**
 * The errors of one file as the front end finds them. Identical reports are kept once; after
 * `max_errors` + 1 the list is full and ignores the rest, and the parse should stop.
 */
class DiagnosticList {
  public:
    explicit DiagnosticList(size_t max_errors = 50) : max_errors_(max_errors) {}

    /** An error at `where` (line 0: the whole file). */
    void error(SourceRange where, std::string message);
    bool full() const { return entries_.size() > max_errors_; }
    size_t count() const { return entries_.size(); }

    /**
     * The final list: file-level errors first, then in source order, at most `max_errors`,
     * followed by a file-level "too many errors" note when the list filled up; each with
     * `file` and its source line from `text`.
     */
    std::vector<Diagnostic> finish(const std::string &file, std::string_view text) const;

  private:
    struct Entry {
        SourceRange where;
        std::string message;
    };
    size_t max_errors_;
    std::vector<Entry> entries_;
};

} // namespace attngen
