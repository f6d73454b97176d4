// "Did you mean ...?": the closest known name to a misspelled one, for error messages.
#pragma once

#include <string>
#include <vector>

namespace attngen {

/**
 * The candidate closest to `word` by edit distance (insertions, deletions, substitutions and
 * swaps of neighbouring letters), or "" when none is close enough to be a likely misspelling:
 * at most 2 edits, and fewer edits than `word` has characters.
 */
std::string closest_spelling(const std::string &word, const std::vector<std::string> &candidates);

/** " (did you mean 'x'?)" for the closest candidate, or "" when there is none. */
std::string did_you_mean(const std::string &word, const std::vector<std::string> &candidates);

} // namespace attngen
