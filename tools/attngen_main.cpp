// The attngen command-line tool: check, compile, targets, run, tune, params (and header, for
// the build).
#include "cli.h"

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>

namespace {

void print_usage(std::FILE *stream) {
    fmt::print(stream,
               "usage: attngen COMMAND [options]   (attngen COMMAND --help for each)\n"
               "\n"
               "  check FILE                       report the errors of a .attn file\n"
               "  compile FILE --target T -o DIR   generate a static library, header and manifest\n"
               "  targets                          list the targets this build can generate for\n"
               "  run FILE --layer NAME --shape B,Lq[,Lk]\n"
               "                                   generate, run on random input, check, time\n"
               "  tune FILE --shapes S;... --trials N | --budget 10m\n"
               "                                   search schedule parameters by measurement;\n"
               "                                   tune export / tune merge handle the logs\n"
               "  params [--markdown]              the schedule parameters: values, defaults\n"
               "  header ...                       the typed header of one generated layer\n"
               "  --version                        attngen's and Halide's versions\n"
               "\n"
               "Exit status: 0 ok, 1 a problem with the input, 2 an internal error.\n");
}

} // namespace

int main(int argc, char **argv) {
    using namespace attngen::cli;
    if (argc < 2) {
        print_usage(stderr);
        return exit_user_error;
    }
    const std::string command = argv[1];
    try {
        if (command == "--help" || command == "-h" || command == "help") {
            print_usage(stdout);
            return exit_ok;
        }
        if (command == "--version") {
            fmt::print("attngen {} (Halide {})\n", ATTNGEN_VERSION, ATTNGEN_HALIDE_VERSION);
            return exit_ok;
        }
        if (command == "check")
            return command_check(argc, argv);
        if (command == "compile")
            return command_compile(argc, argv);
        if (command == "targets")
            return command_targets(argc, argv);
        if (command == "run")
            return command_run(argc, argv);
        if (command == "tune")
            return command_tune(argc, argv);
        if (command == "params")
            return command_params(argc, argv);
        if (command == "header")
            return command_header(argc, argv);
    } catch (const std::exception &e) {
        fmt::print(stderr, "attngen {}: internal error: {}\n", command, e.what());
        return exit_internal_error;
    }
    fmt::print(stderr, "attngen: unknown command '{}'\n", command);
    print_usage(stderr);
    return exit_user_error;
}
