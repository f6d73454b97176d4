// `attngen run FILE --layer NAME --shape B,Lq[,Lk]`: generates the layer for this machine (JIT),
// runs it on random input from a printed seed, checks it against the double-precision reference
// and prints the time.
#include "cli.h"
#include "layer_problem.h"
#include "targets.h"

#include "dsl/attention_algorithm.h"
#include "dsl/layer_interface.h"
#include "generators/bind_inputs.h"
#include "generators/layer_source.h"
#include "schedules/schedule.h"
#include "schedules/tuned_params.h"

#include "Halide.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace attngen::cli {

namespace {

using Clock = std::chrono::steady_clock;

void print_usage(std::FILE *stream) {
    fmt::print(
        stream,
        "usage: attngen run FILE --shape B,Lq[,Lk] [--layer NAME] [--scalar NAME=V ...]\n"
        "                   [--threads N] [--runs N] [--seed S] [--schedule S] [--no-check]\n"
        "                   [--schedule-params NAME=VALUE,...]   (`attngen params` lists them)\n"
        "\n"
        "Generates the layer for this machine, runs it on random input, prints its error\n"
        "against the double-precision reference and the median time of --runs runs.\n"
        "Inputs: activations in [-1, 1], weights in [-1, 1]/sqrt(fan-in), key lengths and\n"
        "i32 tensors in [0, Lk], attn_bias and f32 tensors in [-2, 2] and [-1, 1];\n"
        "scalars not given with --scalar are 1.\n");
}

} // namespace

int command_run(int argc, char **argv) {
    Arguments args = parse(
        argc, argv, 2,
        {"layer", "shape", "scalar", "threads", "runs", "seed", "schedule", "schedule-params"},
        {"help", "no-check"});
    if (args.has("help")) {
        print_usage(stdout);
        return exit_ok;
    }
    auto usage_error = [&](const std::string &message) {
        fmt::print(stderr, "attngen run: {}\n", message);
        print_usage(stderr);
        return exit_user_error;
    };
    if (!args.error.empty())
        return usage_error(args.error);
    if (args.positional.size() != 1)
        return usage_error("expected one FILE");

    std::map<std::string, std::string> params = {{"spec", args.positional[0]}};
    if (!args.value("layer").empty())
        params["layer"] = args.value("layer");
    LayerSource source = load_layer(params);
    if (!source.spec) {
        fmt::print(stderr, "attngen run: {}\n", source.errors);
        return exit_user_error;
    }
    const AttentionSpec spec = *source.spec;

    ProblemShape shape;
    if (std::string problem = parse_shape(args.value("shape"), shape); !problem.empty())
        return usage_error("--shape: " + problem);
    if (std::string problem = check_problem(spec, shape); !problem.empty())
        return usage_error("--shape: " + problem);
    const std::optional<long> runs = parse_integer(args.value("runs", "5"), 1, 1000);
    const std::optional<long> threads = parse_integer(args.value("threads", "0"), 0, 1024);
    const std::optional<long> seed_value =
        parse_integer(args.value("seed", "20261121"), 0, 0xffffffffL);
    if (!runs || !threads || !seed_value)
        return usage_error("--runs must be in 1..1000, --threads in 0..1024, --seed in 0..2^32-1");
    const std::string schedule = args.value("schedule", "auto");
    if (!is_schedule_name(schedule))
        return usage_error("--schedule must be auto, x86, arm, cuda or reference, got '" +
                           schedule + "'");

    std::map<std::string, double> scalar_values;
    if (std::string problem = parse_scalars(args.values("scalar"), spec, scalar_values);
        !problem.empty())
        return usage_error(problem);
    if (*threads > 0)
        setenv("HL_NUM_THREADS", std::to_string(*threads).c_str(), 1);

    // The pipeline, from the same description and algorithm the generator uses.
    const Halide::Target target = jit_target();
    LayerProblem problem =
        make_layer_problem(spec, shape, scalar_values, static_cast<uint32_t>(*seed_value));

    Halide::Func out("out");
    const std::string schedule_params = args.value("schedule-params");
    const std::string shape_class_name = shape_class(shape.queries);
    AttentionStages stages = build_attention(
        spec, bind_inputs(spec, problem.bound), out,
        algorithm_options(spec, target, schedule, schedule_params, shape_class_name));
    constrain_output(problem, out);
    if (std::string problem =
            apply_schedule(stages, target, schedule, schedule_params, shape_class_name);
        !problem.empty()) {
        fmt::print(stderr, "attngen run: {}\n", problem);
        return exit_user_error;
    }
    // With outputs = out, lse the lse is realized and checked beside the output.
    std::vector<Halide::Func> outputs = {out};
    if (spec.lse_output)
        outputs.push_back(stages.lse);
    Halide::Pipeline pipeline(outputs);
    add_lowering_passes(pipeline, stages);
    auto started = Clock::now();
    use_scratch_pool(pipeline.jit_handlers());
    pipeline.compile_jit(target);
    const double compile_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - started).count();

    Halide::Buffer<> result(problem.out_type, problem.out_extents);
    Halide::Buffer<float> lse(shape.queries, spec.heads, shape.batch);
    std::vector<Halide::Buffer<>> buffers = {result};
    if (spec.lse_output)
        buffers.push_back(lse);
    Halide::Realization realization(buffers);
    std::vector<double> times;
    for (long run = 0; run <= *runs; run++) {
        started = Clock::now();
        pipeline.realize(realization, target);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
        if (run > 0) // the first run warms caches and the thread pool
            times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    const double median_ms = times[times.size() / 2];
    const double flops = attention_flops(spec, shape);

    fmt::print("layer {} ({}), B={} Lq={} Lk={}, target {}, seed {}\n", spec.name,
               args.positional[0], shape.batch, shape.queries, shape.keys, target.to_string(),
               *seed_value);
    if (spec.packed) // the runtime runs a packed call's sequences through this same pipeline
        fmt::print("layout = packed: B sequences of Lq queries and Lk keys each, the pipeline the "
                   "runtime runs once per sequence\n");
    fmt::print("generated in {:.0f} ms; median of {} runs: {:.3f} ms ({:.1f} GFLOP/s of "
               "attention, 2*B*H*Lq*Lk*(D+Dv))\n",
               compile_ms, times.size(), median_ms, flops / median_ms * 1e-6);

    if (args.has("no-check")) {
        fmt::print("reference check skipped (--no-check)\n");
        return exit_ok;
    }
    std::vector<double> want_lse;
    const OutputCheck check = check_output(
        problem, result,
        reference_output(problem, problem.inputs, spec.lse_output ? &want_lse : nullptr));
    fmt::print("max |out - reference| / max(max |reference|, 1) = {:.3g} (tolerance {:g}): {}\n",
               check.error, check.tolerance, check.ok() ? "ok" : "MISMATCH");
    if (!spec.lse_output)
        return check.ok() ? exit_ok : exit_internal_error;
    const OutputCheck lse_check = check_lse(lse, want_lse);
    fmt::print("max |lse - reference| / max(|reference|, 1) = {:.3g} (tolerance {:g}): {}\n",
               lse_check.error, lse_check.tolerance, lse_check.ok() ? "ok" : "MISMATCH");
    return check.ok() && lse_check.ok() ? exit_ok : exit_internal_error;
}

} // namespace attngen::cli
