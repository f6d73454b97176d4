// Ahead-of-time candidates: generate, link with the harness, run through the runner.
#include "aot_measure.h"
#include "cli.h"
#include "targets.h"

#include "dsl/halide_compat.h"
#include "dsl/layer_interface.h"
#include "schedules/tuned_params.h"

#include "tune_harness_source.h"

#include "Halide.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

#ifndef ATTNGEN_HALIDE_RUNTIME_INCLUDE
#define ATTNGEN_HALIDE_RUNTIME_INCLUDE "/usr/include"
#endif

namespace attngen::cli {

namespace {

namespace fs = std::filesystem;

/** `text` as one shell word: in single quotes, each ' written as '\''. */
std::string shell_quote(const std::string &text) {
    std::string quoted = "'";
    for (char c : text)
        quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return quoted + "'";
}

/** Runs `command` under `timeout`; its stdout and stderr, and its exit status (124: timed out). */
std::pair<int, std::string> run_command(const std::string &command, double timeout_s) {
    const std::string line = fmt::format("timeout -k 5 {:.0f} sh -c {} 2>&1",
                                         std::max(timeout_s, 1.0), shell_quote(command));
    FILE *pipe = popen(line.c_str(), "r");
    if (!pipe)
        return {-1, "cannot run: " + line};
    std::string output;
    char chunk[4096];
    while (size_t n = std::fread(chunk, 1, sizeof(chunk), pipe))
        output.append(chunk, n);
    const int status = pclose(pipe);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, output};
}

bool write_bytes(const fs::path &path, const void *data, size_t size) {
    std::ofstream out(path, std::ios::binary);
    out.write(static_cast<const char *>(data), static_cast<std::streamsize>(size));
    return static_cast<bool>(out);
}

std::string tail(const std::string &text, size_t limit = 400) {
    return text.size() <= limit ? text : "..." + text.substr(text.size() - limit);
}

} // namespace

AotSetup default_aot_setup(const std::string &target) {
    AotSetup setup;
    const Halide::Target wanted(target), host = host_target();
    setup.cc = "cc";
    if (wanted.arch == Halide::Target::ARM && wanted.bits == 64 &&
        host.arch != Halide::Target::ARM) {
        setup.cc = "aarch64-linux-gnu-gcc";
        setup.runner = "qemu-aarch64 -L /usr/aarch64-linux-gnu";
    }
    return setup;
}

AotBench::AotBench(LayerProblem problem, AotSetup setup, int input_sets, uint32_t seed)
    : problem_(std::move(problem)), setup_(std::move(setup)), sets_(std::max(input_sets, 2)) {
    const fs::path data = fs::path(setup_.work_dir) / "data";
    std::error_code error;
    fs::create_directories(data, error);
    if (error) {
        setup_error_ = "cannot create '" + data.string() + "': " + error.message();
        return;
    }
    const std::vector<InputSet> sets = make_input_sets(problem_, sets_, seed);
    reference_ = reference_output(problem_, sets[0]);
    bool ok = true;
    for (const EntryArgument &entry : layer_arguments(problem_.spec)) {
        std::ofstream shape(data / (entry.name + ".shape"));
        if (entry.kind == EntryArgument::Kind::output)
            for (int extent : problem_.out_extents)
                shape << extent << ' ';
        else if (entry.kind == EntryArgument::Kind::buffer)
            for (int i = 0; i < sets[0].at(entry.name).buffer.dimensions(); i++)
                shape << sets[0].at(entry.name).buffer.dim(i).extent() << ' ';
        ok = ok && static_cast<bool>(shape);
        for (int s = 0; s < sets_ && entry.kind != EntryArgument::Kind::output; s++) {
            const fs::path dir = data / ("set-" + std::to_string(s));
            fs::create_directories(dir, error);
            const fs::path file = dir / (entry.name + ".bin");
            if (entry.kind == EntryArgument::Kind::scalar) {
                const double value = problem_.scalars.at(entry.name);
                const int32_t integer = static_cast<int32_t>(value);
                const float real = static_cast<float>(value);
                ok = ok && (entry.is_int32 ? write_bytes(file, &integer, 4)
                                           : write_bytes(file, &real, 4));
            } else {
                const Halide::Buffer<> &buffer = sets[s].at(entry.name).buffer;
                ok = ok && write_bytes(file, buffer.data(), buffer.size_in_bytes());
            }
        }
    }
    if (ok)
        ok = static_cast<bool>(std::ofstream(fs::path(setup_.work_dir) / "tune_harness.c")
                               << tune_harness_source);
    if (!ok)
        setup_error_ = "cannot write the harness's data into '" + data.string() + "'";
}

Measurement AotBench::measure(const std::string &scheduler, const ParamPoint &params, int runs,
                              double slow_ms) {
    // Ahead of time, the one autoscheduler baseline is Halide's GPU autoscheduler, on GPU
    // targets (command_tune.cpp offers nothing else); the CPU ones are measured JIT.
    const bool autoscheduled = scheduler != "attngen";
    if (autoscheduled && scheduler != halide_compat::gpu_autoscheduler)
        return {
            "compile_error",
            "ahead of time, the only autoscheduler baseline is Halide 21's Anderson2021, on GPU "
            "targets",
            -1,
            {}};
    const fs::path work = setup_.work_dir, data = work / "data";
    const fs::path dir = work / ("candidate-" + std::to_string(++candidates_));
    std::error_code error;
    fs::create_directories(dir, error);

    // Generate, as `attngen compile` does.
    const std::string schedule_params = to_string(params);
    std::vector<std::string> words = {"-g",
                                      "attention",
                                      "-f",
                                      "attngen_candidate",
                                      "-e",
                                      "static_library",
                                      "-o",
                                      dir.string(),
                                      "target=" + setup_.target,
                                      "spec=" + setup_.spec_file,
                                      "layer=" + setup_.layer,
                                      "schedule=auto",
                                      "shape_class=" + shape_class(problem_.shape.queries)};
    if (!schedule_params.empty())
        words.push_back(schedule_params_word(schedule_params));
    if (autoscheduled) {
        const ProblemShape &shape = problem_.shape;
        words.insert(words.end(),
                     {"-p", autoscheduler_plugin(scheduler), "autoscheduler=" + scheduler,
                      fmt::format("estimates={},{},{}", shape.batch, shape.queries, shape.keys)});
    }
    std::string errors;
    try {
        if (run_attention_generator(words, errors) != 0)
            return {"compile_error", tail(errors), -1, {}};
    } catch (const std::exception &e) {
        return {"compile_error", tail(e.what()), -1, {}};
    }

    // Link with the harness.
    const fs::path harness = dir / "harness";
    auto [cc_status, cc_output] =
        run_command(fmt::format("{} -O2 -I{} {} {} -o {} -lpthread -ldl -lm", setup_.cc,
                                shell_quote(ATTNGEN_HALIDE_RUNTIME_INCLUDE),
                                shell_quote((work / "tune_harness.c").string()),
                                shell_quote((dir / "attngen_candidate.a").string()),
                                shell_quote(harness.string())),
                    setup_.timeout_s);
    if (cc_status != 0)
        return {"compile_error", "linking the harness failed: " + tail(cc_output), -1, {}};
    const std::string prefix = (setup_.runner.empty() ? "" : setup_.runner + " ") +
                               shell_quote(harness.string()) + " " + shell_quote(data.string());

    // Check the output before any timing.
    auto [probe_status, probe_output] = run_command(prefix + " check", setup_.timeout_s);
    if (probe_status == 124)
        return {"timeout", fmt::format("no result within {:g} s", setup_.timeout_s), -1, {}};
    if (probe_status != 0 || probe_output.rfind("ok", 0) != 0)
        return {"crashed", tail(probe_output), -1, {}};
    Halide::Buffer<> out(problem_.out_type, problem_.out_extents);
    std::ifstream produced(data / "output.bin", std::ios::binary);
    produced.read(static_cast<char *>(out.data()),
                  static_cast<std::streamsize>(out.size_in_bytes()));
    if (!produced)
        return {"crashed", "the harness wrote no complete output.bin", -1, {}};
    const OutputCheck check = check_output(problem_, out, reference_);
    if (!check.ok())
        return {"wrong_result", check.describe(), check.error, {}};
    Measurement m;
    m.error = check.error;

    auto [time_status, time_output] =
        run_command(fmt::format("{} time {} {} {:.3f}", prefix, runs, sets_,
                                std::isfinite(slow_ms) ? slow_ms : 1e12),
                    setup_.timeout_s);
    if (time_status == 124)
        return {"timeout", fmt::format("no result within {:g} s", setup_.timeout_s), m.error, {}};
    std::istringstream words_out(time_output);
    std::string status;
    words_out >> status;
    for (double t; words_out >> t;)
        m.times_ms.push_back(t);
    if (time_status != 0 || (status != "ok" && status != "too_slow") ||
        (status == "ok" && static_cast<int>(m.times_ms.size()) != runs)) {
        m.status = "crashed";
        m.message = tail(time_output);
        return m;
    }
    m.status = status;
    if (status == "too_slow")
        m.message = "warm-up run slower than " + fmt::format("{:.3f}", slow_ms) + " ms";
    fs::remove_all(dir, error);
    return m;
}

} // namespace attngen::cli
