// The attngen command-line tool. For now: `attngen header`, which writes the typed header of a
// layer from the same key=value parameters its generator takes.
#include "dsl/attention_spec.h"
#include "generators/layer_header.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr int exit_ok = 0, exit_user_error = 1, exit_internal_error = 2;

void print_usage(std::FILE *stream) {
    fmt::print(stream,
               "usage: attngen header --name NAME --targets T1,T2,... -o FILE [key=value ...]\n"
               "\n"
               "Writes the typed C++ header of a generated attention layer whose Halide library\n"
               "was generated for the targets T1,T2,... (best first, as given to the generator).\n"
               "Keys: model_dim, heads, kv_heads, head_dim, scale, dtype, projections, bias,\n"
               "cross, mask (the generator's parameters; schedule is ignored).\n");
}

int write_header(int argc, char **argv) {
    std::map<std::string, std::string> params;
    std::string output, target_list;
    for (int i = 2; i < argc; i++) {
        std::string arg = argv[i];
        if ((arg == "--name" || arg == "-o" || arg == "--targets") && i + 1 < argc) {
            (arg == "--name" ? params["name"] : arg == "-o" ? output : target_list) = argv[++i];
            continue;
        }
        if (arg == "--help" || arg == "-h") {
            print_usage(stdout);
            return exit_ok;
        }
        size_t equals = arg.find('=');
        if (equals == std::string::npos || equals == 0) {
            fmt::print(stderr, "attngen header: expected key=value, got '{}'\n", arg);
            return exit_user_error;
        }
        std::string key = arg.substr(0, equals);
        if (key == "schedule")
            continue;
        params[key] = arg.substr(equals + 1);
    }
    if (output.empty() || target_list.empty()) {
        fmt::print(stderr, "attngen header: -o FILE and --targets T1,T2,... are required\n");
        return exit_user_error;
    }
    std::vector<std::string> targets;
    for (size_t start = 0; start <= target_list.size();) {
        size_t comma = std::min(target_list.find(',', start), target_list.size());
        std::string target = target_list.substr(start, comma - start);
        if (target.empty()) {
            fmt::print(stderr, "attngen header: empty target in '{}'\n", target_list);
            return exit_user_error;
        }
        targets.push_back(target);
        start = comma + 1;
    }
    std::vector<attngen::SpecError> errors;
    attngen::AttentionSpec spec = attngen::spec_from_params(params, errors);
    if (errors.empty())
        errors = attngen::check_spec(spec);
    if (!errors.empty()) {
        fmt::print(stderr, "attngen header: invalid attention layer:\n{}\n",
                   attngen::describe_errors(errors));
        return exit_user_error;
    }
    std::ofstream file(output);
    file << attngen::layer_header(spec, targets);
    if (!file) {
        fmt::print(stderr, "attngen header: cannot write '{}'\n", output);
        return exit_internal_error;
    }
    return exit_ok;
}

} // namespace

int main(int argc, char **argv) {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
        print_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? exit_user_error : exit_ok;
    }
    if (std::string(argv[1]) == "header")
        return write_header(argc, argv);
    fmt::print(stderr, "attngen: unknown command '{}'\n", argv[1]);
    print_usage(stderr);
    return exit_user_error;
}
