// Parsing and printing problem shapes.
#include "problem_shape.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace attngen::cli {

std::string parse_shape(const std::string &text, ProblemShape &shape) {
    std::vector<long> sizes;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = std::min(text.find(',', start), text.size());
        const std::string word = text.substr(start, comma - start);
        char *end = nullptr;
        const long value = std::strtol(word.c_str(), &end, 10);
        if (word.empty() || *end != '\0' || value < 1 || value > (1 << 20))
            return "a shape is B,Lq or B,Lq,Lk with sizes in 1..1048576, got '" + text + "'";
        sizes.push_back(value);
        start = comma + 1;
    }
    if (sizes.size() < 2 || sizes.size() > 3 || sizes[0] > 4096)
        return "a shape is B,Lq or B,Lq,Lk with B in 1..4096, got '" + text + "'";
    shape.batch = static_cast<int>(sizes[0]);
    shape.queries = static_cast<int>(sizes[1]);
    shape.keys = static_cast<int>(sizes.back());
    return "";
}

std::string to_string(const ProblemShape &shape) {
    return std::to_string(shape.batch) + "," + std::to_string(shape.queries) + "," +
           std::to_string(shape.keys);
}

} // namespace attngen::cli
