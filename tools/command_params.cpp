// `attngen params`: the schedule parameters, from the one table that defines them.
#include "cli.h"

#include "schedules/schedule_params.h"

#include <fmt/format.h>

#include <sstream>

namespace attngen::cli {

namespace {

/** `text` wrapped at `width` columns, each line indented by `indent`. */
std::string wrapped(const std::string &text, const std::string &indent, size_t width) {
    std::istringstream words(text);
    std::string out, line, word;
    while (words >> word) {
        if (!line.empty() && indent.size() + line.size() + 1 + word.size() > width) {
            out += indent + line + "\n";
            line.clear();
        }
        line += (line.empty() ? "" : " ") + word;
    }
    return line.empty() ? out : out + indent + line + "\n";
}

} // namespace

int command_params(int argc, char **argv) {
    Arguments args = parse(argc, argv, 2, {}, {"help", "markdown"});
    if (args.has("help")) {
        fmt::print("usage: attngen params [--markdown]\n\n"
                   "Lists every schedule parameter that --schedule-params (compile, run),\n"
                   "SCHEDULE_PARAMS (attngen_add_library) and `attngen tune` know: its values,\n"
                   "defaults and meaning. --markdown prints docs/schedule-params.md.\n");
        return exit_ok;
    }
    if (!args.error.empty() || !args.positional.empty()) {
        fmt::print(stderr, "attngen params: {}\n",
                   args.error.empty() ? "takes no arguments but --markdown" : args.error);
        return exit_user_error;
    }
    if (args.has("markdown")) {
        fmt::print("{}", schedule_params_markdown());
        return exit_ok;
    }
    for (const ScheduleFamily family : {ScheduleFamily::cpu, ScheduleFamily::gpu}) {
        fmt::print("{} schedule (--schedule-params NAME=VALUE,...)\n",
                   family == ScheduleFamily::cpu ? "CPU" : "GPU");
        for (const ScheduleParam &param : schedule_param_table()) {
            if (param.family != family)
                continue;
            fmt::print("  {}={}\n", param.name, param.values_text());
            fmt::print("{}", wrapped(param.meaning, "      ", 80));
            fmt::print("{}", wrapped("default: " + param.defaults_text(), "      ", 80));
            fmt::print("{}", wrapped("tune: " + param.search_text(), "      ", 80));
        }
        fmt::print("\n");
    }
    return exit_ok;
}

} // namespace attngen::cli
