// JIT measurement of one candidate per child process.
#include "jit_measure.h"
#include "cli.h"

#include "dsl/attention_algorithm.h"
#include "dsl/halide_compat.h"
#include "generators/bind_inputs.h"
#include "schedules/schedule.h"
#include "schedules/tuned_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace attngen::cli {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/** The last-level cache in bytes (sysfs), or 16 MiB if it cannot be read. */
uint64_t last_level_cache_bytes() {
    for (int index = 4; index >= 0; index--) {
        std::ifstream file("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) +
                           "/size");
        std::string text;
        if (!(file >> text) || text.empty())
            continue;
        const uint64_t number = std::strtoull(text.c_str(), nullptr, 10);
        const char unit = text.back();
        return number * (unit == 'K' ? 1024ull : unit == 'M' ? 1024ull * 1024 : 1ull);
    }
    return 16ull << 20;
}

/** One child's result over a pipe: status, error, times, then the message. */
std::string serialize(const Measurement &m) {
    std::ostringstream out;
    out.precision(17);
    out << m.status << '\n' << m.error << '\n';
    for (double t : m.times_ms)
        out << t << ' ';
    out << '\n' << m.message;
    return out.str();
}

Measurement deserialize(const std::string &text) {
    Measurement m;
    std::istringstream in(text);
    std::string times;
    std::getline(in, m.status);
    in >> m.error;
    in.ignore(1);
    std::getline(in, times);
    std::istringstream list(times);
    for (double t; list >> t;)
        m.times_ms.push_back(t);
    std::ostringstream rest;
    rest << in.rdbuf();
    m.message = rest.str();
    return m;
}

} // namespace

const std::vector<std::string> &autoscheduler_names() {
    static const std::vector<std::string> names = {"Adams2019", "Mullapudi2016", "Li2018"};
    return names;
}

size_t JitBench::input_bytes(const InputSet &inputs) {
    size_t bytes = 0;
    for (const auto &entry : inputs)
        bytes += entry.second.buffer.size_in_bytes();
    return bytes;
}

JitBench::JitBench(LayerProblem problem, const Halide::Target &target, int input_sets,
                   uint32_t seed, int threads, double timeout_s)
    : problem_(std::move(problem)), target_(target), threads_(threads), timeout_s_(timeout_s) {
    input_sets_ = make_input_sets(problem_, std::max(input_sets, 2), seed);
    reference_ = reference_output(problem_, input_sets_[0]);
}

Measurement JitBench::run_candidate(const std::string &scheduler, const ParamPoint &params,
                                    int runs, double slow_ms) {
    Measurement m;
    Halide::Func out("out");
    Halide::Pipeline pipeline;
    try {
        // Halide's autoschedulers get each query's own key range; attngen's schedule its tiles.
        const std::string schedule_params = to_string(params);
        const std::string shape_class_name = shape_class(problem_.shape.queries);
        const AlgorithmOptions options = scheduler == "attngen"
                                             ? algorithm_options(problem_.spec, target_, "auto",
                                                                 schedule_params, shape_class_name)
                                             : AlgorithmOptions{};
        AttentionStages stages = build_attention(
            problem_.spec, bind_inputs(problem_.spec, problem_.bound), out, options);
        constrain_output(problem_, out);
        pipeline = Halide::Pipeline(out);
        if (scheduler == "attngen") {
            if (std::string problem =
                    apply_schedule(stages, target_, "auto", schedule_params, shape_class_name);
                !problem.empty())
                return {"compile_error", problem, -1, {}};
            add_lowering_passes(pipeline, stages);
        } else {
            for (auto &entry : problem_.images) {
                Halide::Region region;
                for (int i = 0; i < entry.second.dimensions(); i++)
                    region.emplace_back(0, input_sets_[0].at(entry.first).buffer.dim(i).extent());
                entry.second.set_estimates(region);
            }
            for (halide_compat::Parameter &parameter : problem_.scalar_params)
                parameter.set_estimate(parameter.type().is_int()
                                           ? Halide::Expr(parameter.scalar<int32_t>())
                                           : Halide::Expr(parameter.scalar<float>()));
            Halide::Region region;
            for (int extent : problem_.out_extents)
                region.emplace_back(0, extent);
            out.set_estimates(region);
            Halide::load_plugin(autoscheduler_plugin(scheduler));
            halide_compat::apply_autoscheduler(pipeline, scheduler, target_, threads_,
                                               last_level_cache_bytes());
        }
        use_scratch_pool(pipeline.jit_handlers());
        pipeline.compile_jit(target_);
    } catch (const std::exception &e) {
        return {"compile_error", e.what(), -1, {}};
    }

    try {
        Halide::Buffer<> result(problem_.out_type, problem_.out_extents);
        bind(problem_, input_sets_[0]);
        pipeline.realize(result, target_);
        const OutputCheck check = check_output(problem_, result, reference_);
        m.error = check.error;
        if (!check.ok())
            return {"wrong_result", check.describe(), check.error, {}};
        // One warm-up run (thread pool, page faults of the scratch), then the timed runs, each
        // on the next input set.
        const size_t sets = input_sets_.size();
        bind(problem_, input_sets_[1 % sets]);
        Clock::time_point start = Clock::now();
        pipeline.realize(result, target_);
        const double warm_ms = ms_since(start);
        if (warm_ms > slow_ms) {
            m.status = "too_slow";
            m.message = "warm-up run took " + std::to_string(warm_ms) + " ms, the limit was " +
                        std::to_string(slow_ms) + " ms";
            m.times_ms = {warm_ms};
            return m;
        }
        for (int run = 0; run < runs; run++) {
            bind(problem_, input_sets_[(run + 2) % sets]);
            start = Clock::now();
            pipeline.realize(result, target_);
            m.times_ms.push_back(ms_since(start));
        }
        m.status = "ok";
    } catch (const std::exception &e) {
        m.status = "crashed";
        m.message = std::string("run failed: ") + e.what();
    }
    return m;
}

Measurement JitBench::measure(const std::string &scheduler, const ParamPoint &params, int runs,
                              double slow_ms) {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0)
        return {"crashed", std::string("pipe: ") + std::strerror(errno), -1, {}};
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t child = fork();
    if (child < 0) {
        close(pipe_fds[0]);
        close(pipe_fds[1]);
        return {"crashed", std::string("fork: ") + std::strerror(errno), -1, {}};
    }
    if (child == 0) {
        close(pipe_fds[0]);
        // The autoschedulers and Halide's warnings talk on stdout/stderr; the result goes
        // through the pipe and errors come back in its message.
        if (FILE *null = std::fopen("/dev/null", "w")) {
            dup2(fileno(null), 1);
            dup2(fileno(null), 2);
        }
        const std::string text = serialize(run_candidate(scheduler, params, runs, slow_ms));
        size_t written = 0;
        while (written < text.size()) {
            const ssize_t n = write(pipe_fds[1], text.data() + written, text.size() - written);
            if (n <= 0)
                break;
            written += static_cast<size_t>(n);
        }
        close(pipe_fds[1]);
        _exit(0);
    }
    close(pipe_fds[1]);
    std::string text;
    bool timed_out = false;
    const Clock::time_point start = Clock::now();
    // An autoscheduler's search can take minutes on its own: it gets five times as long.
    const double timeout_s = scheduler == "attngen" ? timeout_s_ : 5 * timeout_s_;
    while (true) {
        const double left_ms = timeout_s * 1000 - ms_since(start);
        if (left_ms <= 0) {
            timed_out = true;
            break;
        }
        pollfd fd{pipe_fds[0], POLLIN, 0};
        const int ready = poll(&fd, 1, static_cast<int>(std::min(left_ms, 1000.0)) + 1);
        if (ready < 0 && errno != EINTR)
            break;
        if (ready <= 0)
            continue;
        char chunk[4096];
        const ssize_t n = read(pipe_fds[0], chunk, sizeof(chunk));
        if (n <= 0)
            break;
        text.append(chunk, static_cast<size_t>(n));
    }
    close(pipe_fds[0]);
    if (timed_out)
        kill(child, SIGKILL);
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out)
        return {"timeout", fmt::format("no result within {:g} s", timeout_s), -1, {}};
    if (WIFSIGNALED(status))
        return {"crashed", std::string("killed by signal ") + strsignal(WTERMSIG(status)), -1, {}};
    if (text.empty())
        return {"crashed", "the candidate's process ended without a result", -1, {}};
    return deserialize(text);
}

} // namespace attngen::cli
