// What the attngen commands share: exit codes, argument parsing, and printing diagnostics.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace Halide {
struct JITHandlers;
}

namespace attngen::cli {

/** ok, a problem with what the user gave (file, options, spec), or a failure of attngen. */
constexpr int exit_ok = 0, exit_user_error = 1, exit_internal_error = 2;

/** A command line after the command name: positional arguments and --options. */
struct Arguments {
    std::vector<std::string> positional;
    std::multimap<std::string, std::string> options; ///< --key value (repeatable)
    std::set<std::string> flags;                     ///< --key without value
    std::string error;                               ///< empty when parsing succeeded

    bool has(const std::string &flag) const { return flags.count(flag) != 0; }
    /** The last value of `option`, or `fallback`. */
    std::string value(const std::string &option, const std::string &fallback = "") const;
    std::vector<std::string> values(const std::string &option) const;
};

/**
 * Parses argv[first...]: `value_options` take the next word (or --opt=value), `flags` none,
 * -o is --output, -h is --help. Anything else starting with '-' is an error.
 */
Arguments parse(int argc, char **argv, int first, const std::set<std::string> &value_options,
                const std::set<std::string> &flags);

/** A decimal integer in [low, high], or nothing if `text` is not one. */
std::optional<long> parse_integer(const std::string &text, long low, long high);

/** The shared library of Halide's autoscheduler `name` (Adams2019, Anderson2021, ...), from the
 *  Halide attngen was built with. */
std::string autoscheduler_plugin(const std::string &name);

/**
 * Runs the attention Generator (GenGen) in this process with `words` (its command line without
 * the program name). Returns its exit status; what it reports goes to `errors`.
 */
int run_attention_generator(std::vector<std::string> words, std::string &errors);

/**
 * The Generator's `schedule_params=...` word for "key=value,..." (or "key:value,...")
 * parameters. GenGen refuses a value that holds '=', so they are passed as "key:value,...",
 * which the schedules read alike.
 */
std::string schedule_params_word(std::string params);

/** Splits "a,b,c" (empty parts are dropped). */
std::vector<std::string> split_list(const std::string &text);

int command_check(int argc, char **argv);
int command_compile(int argc, char **argv);
int command_targets(int argc, char **argv);
int command_run(int argc, char **argv);
int command_header(int argc, char **argv);
int command_tune(int argc, char **argv);
int command_params(int argc, char **argv);

/**
 * Makes a JIT pipeline take its scratch from the runtime's caching pool, as generated libraries
 * do: timings then match what an app linking the library sees (Halide's default malloc gives
 * large blocks back to the OS and faults them in again on every call).
 */
void use_scratch_pool(Halide::JITHandlers &handlers);

} // namespace attngen::cli
