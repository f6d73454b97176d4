// The sizes one call of a layer decides: batch, query length, key length.
#pragma once

#include <string>

namespace attngen::cli {

/** The sizes a call decides: batch, query length and key length. */
struct ProblemShape {
    int batch = 1;
    int queries = 1;
    int keys = 1;
};

/** "B,Lq" or "B,Lq,Lk" (Lk = Lq when omitted); empty string on success, else what is wrong. */
std::string parse_shape(const std::string &text, ProblemShape &shape);

/** "B,Lq,Lk". */
std::string to_string(const ProblemShape &shape);

} // namespace attngen::cli
