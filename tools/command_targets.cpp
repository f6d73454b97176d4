// `attngen targets`: what this build can generate for.
#include "cli.h"
#include "targets.h"

#include <fmt/format.h>

namespace attngen::cli {

int command_targets(int argc, char **argv) {
    Arguments args = parse(argc, argv, 2, {}, {"help"});
    if (args.has("help")) {
        fmt::print("usage: attngen targets\n\nLists the target names `--target` accepts.\n");
        return exit_ok;
    }
    if (!args.error.empty() || !args.positional.empty()) {
        fmt::print(stderr, "attngen targets: {}\n",
                   args.error.empty() ? "takes no arguments" : args.error);
        return exit_user_error;
    }
    for (const TargetFamily &family : target_families()) {
        fmt::print("{}\n    {}\n", family.name, family.description);
        for (const std::string &target : family.halide_targets)
            fmt::print("    - {}\n", target);
    }
    fmt::print("any x86-64 or arm-64 Halide target string\n"
               "    e.g. x86-64-linux-avx2-fma: one variant, no run-time dispatch\n");
    return exit_ok;
}

} // namespace attngen::cli
