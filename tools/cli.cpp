// Argument parsing shared by the attngen commands.
#include "cli.h"
#include "dsl/halide_compat.h"

#include "Halide.h"
#include "scratch_pool.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#ifndef ATTNGEN_AUTOSCHEDULER_DIR
#define ATTNGEN_AUTOSCHEDULER_DIR ""
#endif

namespace attngen::cli {

std::optional<long> parse_integer(const std::string &text, long low, long high) {
    char *end = nullptr;
    const long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < low || value > high)
        return std::nullopt;
    return value;
}

int run_attention_generator(std::vector<std::string> words, std::string &errors) {
    words.insert(words.begin(), "attngen");
    std::vector<char *> argv;
    for (std::string &word : words)
        argv.push_back(word.data());
    argv.push_back(nullptr);
    return halide_compat::generate_filter_main(static_cast<int>(words.size()), argv.data(), errors);
}

std::string autoscheduler_plugin(const std::string &name) {
    std::string file = name;
    std::transform(file.begin(), file.end(), file.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return std::string(ATTNGEN_AUTOSCHEDULER_DIR) + "/libautoschedule_" + file + ".so";
}

std::string schedule_params_word(std::string params) {
    std::replace(params.begin(), params.end(), '=', ':');
    return "schedule_params=" + params;
}

std::string Arguments::value(const std::string &option, const std::string &fallback) const {
    auto range = options.equal_range(option);
    std::string found = fallback;
    for (auto it = range.first; it != range.second; ++it)
        found = it->second;
    return found;
}

std::vector<std::string> Arguments::values(const std::string &option) const {
    std::vector<std::string> found;
    auto range = options.equal_range(option);
    for (auto it = range.first; it != range.second; ++it)
        found.push_back(it->second);
    return found;
}

Arguments parse(int argc, char **argv, int first, const std::set<std::string> &value_options,
                const std::set<std::string> &flags) {
    Arguments args;
    for (int i = first; i < argc; i++) {
        std::string word = argv[i];
        if (word.empty() || word[0] != '-' || word == "-") {
            args.positional.push_back(word);
            continue;
        }
        if (word == "-o")
            word = "--output";
        if (word == "-h")
            word = "--help";
        std::string value;
        bool inline_value = false;
        if (size_t equals = word.find('='); equals != std::string::npos) {
            value = word.substr(equals + 1);
            word = word.substr(0, equals);
            inline_value = true;
        }
        if (word.rfind("--", 0) != 0) {
            args.error = "unknown option '" + word + "'";
            return args;
        }
        std::string name = word.substr(2);
        if (flags.count(name) && !inline_value) {
            args.flags.insert(name);
            continue;
        }
        if (!value_options.count(name)) {
            args.error = "unknown option '" + word + "'";
            return args;
        }
        if (!inline_value) {
            if (i + 1 >= argc) {
                args.error = "option '" + word + "' needs a value";
                return args;
            }
            value = argv[++i];
        }
        args.options.emplace(name, value);
    }
    return args;
}

std::vector<std::string> split_list(const std::string &text) {
    std::vector<std::string> parts;
    std::stringstream stream(text);
    std::string part;
    while (std::getline(stream, part, ','))
        if (!part.empty())
            parts.push_back(part);
    return parts;
}

void use_scratch_pool(Halide::JITHandlers &handlers) {
    handlers.custom_malloc = [](Halide::JITUserContext *, size_t bytes) {
        return scratch::allocate(bytes);
    };
    handlers.custom_free = [](Halide::JITUserContext *, void *memory) { scratch::release(memory); };
}

} // namespace attngen::cli
