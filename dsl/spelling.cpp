// Suggestions for misspelled names.
#include "spelling.h"

#include <algorithm>

namespace attngen {

namespace {

// Optimal string alignment distance (Damerau-Levenshtein without repeated edits of a substring).
size_t edit_distance(const std::string &a, const std::string &b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i)
        d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j)
        d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i)
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t substitution = d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, substitution});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    return d[a.size()][b.size()];
}

} // namespace

std::string closest_spelling(const std::string &word, const std::vector<std::string> &candidates) {
    constexpr size_t max_edits = 2;
    // Names this long are not typed by hand; comparing them would cost a quadratic table.
    constexpr size_t max_length = 64;
    if (word.size() > max_length)
        return "";
    // Names longer than any candidate by more than max_edits cannot be close; skipping them
    // keeps a pathological megabyte-long name from costing a quadratic table.
    std::string best;
    size_t best_distance = max_edits + 1;
    for (const std::string &candidate : candidates) {
        size_t longer = std::max(word.size(), candidate.size());
        size_t shorter = std::min(word.size(), candidate.size());
        if (candidate == word || longer - shorter > max_edits)
            continue;
        size_t distance = edit_distance(word, candidate);
        if (distance < best_distance && distance < word.size()) {
            best = candidate;
            best_distance = distance;
        }
    }
    return best;
}

std::string did_you_mean(const std::string &word, const std::vector<std::string> &candidates) {
    std::string best = closest_spelling(word, candidates);
    return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

} // namespace attngen
