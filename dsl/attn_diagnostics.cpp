// Rendering and collecting .attn diagnostics.
#include "attn_diagnostics.h"

#include <algorithm>

namespace attngen {

namespace {

bool is_continuation(unsigned char byte) {
    return (byte & 0xC0) == 0x80;
}

// A line as a diagnostic shows it: printable, and cut at max_shown_line bytes (at a character
// boundary, marked with "...") so that fifty errors on a megabyte-long line stay small.
std::string shown_line(std::string_view line) {
    if (line.size() <= max_shown_line)
        return printable_line(line);
    size_t cut = max_shown_line;
    while (cut > 0 && is_continuation(static_cast<unsigned char>(line[cut])))
        --cut;
    return printable_line(line.substr(0, cut)) + "...";
}

} // namespace

size_t utf8_sequence_length(std::string_view text, size_t at) {
    auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
    unsigned char lead = byte(at);
    if (lead < 0x80)
        return 1;
    size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 0;
    if (length == 0 || lead > 0xF4 || at + length > text.size())
        return 0;
    for (size_t i = 1; i < length; ++i)
        if (!is_continuation(byte(at + i)))
            return 0;
    unsigned char second = byte(at + 1);
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF.
    if ((lead == 0xE0 && second < 0xA0) || (lead == 0xED && second > 0x9F) ||
        (lead == 0xF0 && second < 0x90) || (lead == 0xF4 && second > 0x8F))
        return 0;
    return length;
}

std::string printable_line(std::string_view line) {
    std::string text;
    text.reserve(line.size());
    for (size_t i = 0; i < line.size();) {
        unsigned char byte = static_cast<unsigned char>(line[i]);
        if (byte >= 0x80) {
            size_t length = utf8_sequence_length(line, i);
            if (length == 0) {
                text += '?';
                ++i;
            } else {
                text.append(line.substr(i, length));
                i += length;
            }
            continue;
        }
        text += (byte < 0x20 && byte != '\t') || byte == 0x7F ? '?' : static_cast<char>(byte);
        ++i;
    }
    return text;
}

std::string render(const Diagnostic &diagnostic) {
    std::string text = diagnostic.file.empty() ? "<input>" : diagnostic.file;
    if (diagnostic.line <= 0)
        return text + ": error: " + diagnostic.message + "\n";
    text += ":" + std::to_string(diagnostic.line) + ":" + std::to_string(diagnostic.column) +
            ": error: " + diagnostic.message + "\n" + diagnostic.source_line + "\n";

    const std::string &line = diagnostic.source_line;
    size_t start = std::min(static_cast<size_t>(std::max(diagnostic.column, 1) - 1), line.size());
    size_t end = std::min(line.size(), start + static_cast<size_t>(std::max(diagnostic.length, 1)));
    // One mark per character rather than per byte, so that UTF-8 text before or under the
    // caret does not shift it.
    for (size_t i = 0; i < start; ++i) {
        unsigned char byte = static_cast<unsigned char>(line[i]);
        if (!is_continuation(byte))
            text += byte == '\t' ? '\t' : ' ';
    }
    text += '^';
    bool first = true;
    for (size_t i = start; i < end; ++i) {
        if (is_continuation(static_cast<unsigned char>(line[i])))
            continue;
        if (!first)
            text += '~';
        first = false;
    }
    return text + "\n";
}

void DiagnosticList::error(SourceRange where, std::string message) {
    if (full())
        return;
    for (const Entry &entry : entries_)
        if (entry.where.line == where.line && entry.where.column == where.column &&
            entry.message == message)
            return;
    entries_.push_back({where, std::move(message)});
}

std::vector<Diagnostic> DiagnosticList::finish(const std::string &file,
                                               std::string_view text) const {
    std::vector<Entry> sorted = entries_;
    std::stable_sort(sorted.begin(), sorted.end(), [](const Entry &a, const Entry &b) {
        if (a.where.line != b.where.line)
            return a.where.line < b.where.line;
        return a.where.column < b.where.column;
    });
    if (sorted.size() > max_errors_)
        sorted.resize(max_errors_);

    // The start of each line that a diagnostic needs, found in one pass.
    std::vector<std::string_view> lines;
    for (size_t begin = 0;;) {
        size_t newline = text.find('\n', begin);
        lines.push_back(text.substr(
            begin, newline == std::string_view::npos ? std::string_view::npos : newline - begin));
        if (newline == std::string_view::npos)
            break;
        begin = newline + 1;
    }

    std::vector<Diagnostic> diagnostics;
    for (const Entry &entry : sorted) {
        Diagnostic diagnostic;
        diagnostic.file = file;
        diagnostic.line = entry.where.line;
        diagnostic.column = entry.where.column;
        diagnostic.length = std::max(entry.where.length, 1);
        diagnostic.message = entry.message;
        if (entry.where.line >= 1 && static_cast<size_t>(entry.where.line) <= lines.size()) {
            std::string_view line = lines[entry.where.line - 1];
            if (!line.empty() && line.back() == '\r')
                line.remove_suffix(1);
            diagnostic.source_line = shown_line(line);
        }
        diagnostics.push_back(std::move(diagnostic));
    }
    if (full()) {
        Diagnostic note;
        note.file = file;
        note.message = "too many errors; stopping after the first " + std::to_string(max_errors_);
        diagnostics.push_back(std::move(note));
    }
    return diagnostics;
}

} // namespace attngen
