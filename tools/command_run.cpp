// `attngen run FILE --layer NAME --shape B,Lq[,Lk]`: generates the layer for this machine (JIT),
// runs it on random input from a printed seed, checks it against the double-precision reference
// and prints the time.
#include "cli.h"

#include "dsl/attention_algorithm.h"
#include "dsl/layer_interface.h"
#include "generators/bind_inputs.h"
#include "generators/layer_source.h"
#include "schedules/schedule.h"

#include "reference_attention.h"
#include "reference_expression.h"

#include "Halide.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>

namespace attngen::cli {

namespace {

using Clock = std::chrono::steady_clock;

void print_usage(std::FILE *stream) {
    fmt::print(stream,
               "usage: attngen run FILE --shape B,Lq[,Lk] [--layer NAME] [--scalar NAME=V ...]\n"
               "                   [--threads N] [--runs N] [--seed S] [--schedule S] [--no-check]\n"
               "                   [--schedule-params query_vectors=N,key_block=N,...]\n"
               "\n"
               "Generates the layer for this machine, runs it on random input, prints its error\n"
               "against the double-precision reference and the median time of --runs runs.\n"
               "Inputs: activations in [-1, 1], weights in [-1, 1]/sqrt(fan-in), key lengths and\n"
               "i32 tensors in [0, Lk], attn_bias and f32 tensors in [-2, 2] and [-1, 1];\n"
               "scalars not given with --scalar are 1.\n");
}

std::optional<long> parse_long(const std::string &text, long low, long high) {
    char *end = nullptr;
    long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < low || value > high)
        return std::nullopt;
    return value;
}

/** One argument's buffer, its values as the layer reads them, and its row-major shape. */
struct HostArgument {
    Halide::Buffer<> buffer;
    std::vector<double> values;
    std::vector<int64_t> shape;
};

/** Fills `arg` with uniform values in [low, high] (integers for i32), rounded to its type. */
void fill(HostArgument &arg, double low, double high, std::mt19937 &rng) {
    const Halide::Type type = arg.buffer.type();
    const size_t count = arg.buffer.number_of_elements();
    arg.values.resize(count);
    std::uniform_real_distribution<double> uniform(low, high);
    for (size_t i = 0; i < count; i++) {
        double value = uniform(rng);
        if (type.is_int()) {
            int32_t integer = static_cast<int32_t>(std::floor(value + 0.5));
            static_cast<int32_t *>(arg.buffer.data())[i] = integer;
            arg.values[i] = integer;
        } else if (type.is_bfloat()) {
            Halide::bfloat16_t stored(static_cast<float>(value));
            static_cast<Halide::bfloat16_t *>(arg.buffer.data())[i] = stored;
            arg.values[i] = static_cast<float>(stored);
        } else if (type.bits() == 16) {
            Halide::float16_t stored(static_cast<float>(value));
            static_cast<Halide::float16_t *>(arg.buffer.data())[i] = stored;
            arg.values[i] = static_cast<float>(stored);
        } else {
            static_cast<float *>(arg.buffer.data())[i] = static_cast<float>(value);
            arg.values[i] = static_cast<float>(value);
        }
    }
}

double read_as_double(const Halide::Buffer<> &buffer, size_t i) {
    const Halide::Type type = buffer.type();
    if (type.is_bfloat())
        return static_cast<float>(static_cast<const Halide::bfloat16_t *>(buffer.data())[i]);
    if (type.bits() == 16)
        return static_cast<float>(static_cast<const Halide::float16_t *>(buffer.data())[i]);
    return static_cast<const float *>(buffer.data())[i];
}

} // namespace

int command_run(int argc, char **argv) {
    Arguments args = parse(argc, argv, 2,
                           {"layer", "shape", "scalar", "threads", "runs", "seed", "schedule",
                            "schedule-params"},
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

    const std::vector<std::string> sizes = split_list(args.value("shape"));
    if (sizes.size() < 2 || sizes.size() > 3)
        return usage_error("--shape must be B,Lq or B,Lq,Lk, got '" + args.value("shape") + "'");
    std::optional<long> batch = parse_long(sizes[0], 1, 4096);
    std::optional<long> queries = parse_long(sizes[1], 1, 1 << 20);
    std::optional<long> keys = parse_long(sizes.size() == 3 ? sizes[2] : sizes[1], 1, 1 << 20);
    if (!batch || !queries || !keys)
        return usage_error("--shape needs B in 1..4096 and lengths in 1..1048576, got '" +
                           args.value("shape") + "'");
    if (spec.projections.any() && !spec.cross_attention && *keys != *queries)
        return usage_error("layer '" + spec.name +
                           "' is self-attention: its keys are its queries, so Lk must be Lq");
    const std::optional<long> runs = parse_long(args.value("runs", "5"), 1, 1000);
    const std::optional<long> threads = parse_long(args.value("threads", "0"), 0, 1024);
    const std::optional<long> seed_value =
        parse_long(args.value("seed", "20261121"), 0, 0xffffffffL);
    if (!runs || !threads || !seed_value)
        return usage_error("--runs must be in 1..1000, --threads in 0..1024, --seed in 0..2^32-1");
    const std::string schedule = args.value("schedule", "auto");
    if (!is_schedule_name(schedule))
        return usage_error("--schedule must be auto, x86, arm, cuda or reference, got '" + schedule + "'");

    std::map<std::string, double> scalar_values;
    for (const std::string &word : args.values("scalar")) {
        size_t equals = word.find('=');
        char *end = nullptr;
        double value = equals == std::string::npos ? 0 : std::strtod(word.c_str() + equals + 1, &end);
        if (equals == std::string::npos || end == nullptr || *end != '\0' || !std::isfinite(value))
            return usage_error("--scalar must be NAME=NUMBER, got '" + word + "'");
        scalar_values[word.substr(0, equals)] = value;
    }
    for (const RuntimeScalar &scalar : spec.scalars)
        if (!scalar_values.count(scalar.name)) {
            fmt::print("scalar {} not given (--scalar {}=VALUE): using 1\n", scalar.name,
                       scalar.name);
            scalar_values[scalar.name] = 1.0;
        }
    for (const auto &entry : scalar_values) {
        bool declared = false;
        for (const RuntimeScalar &scalar : spec.scalars)
            declared = declared || scalar.name == entry.first;
        if (!declared)
            return usage_error("layer '" + spec.name + "' declares no scalar '" + entry.first + "'");
    }
    if (*threads > 0)
        setenv("HL_NUM_THREADS", std::to_string(*threads).c_str(), 1);

    // The pipeline, from the same description and algorithm the generator uses.
    const Halide::Target target = Halide::get_jit_target_from_environment();
    const std::vector<EntryArgument> entries = layer_arguments(spec);
    auto extent_of = [&](const TensorDim &dim) -> int {
        switch (dim.symbol) {
        case TensorDim::Symbol::batch:
            return static_cast<int>(*batch);
        case TensorDim::Symbol::queries:
            return static_cast<int>(*queries);
        case TensorDim::Symbol::keys:
            return static_cast<int>(*keys);
        default:
            return dim.extent;
        }
    };
    std::mt19937 rng(static_cast<uint32_t>(*seed_value));
    BoundArguments bound;
    std::map<std::string, HostArgument> host;
    std::vector<Halide::ImageParam> images;
    std::vector<Halide::Internal::Parameter> scalars;
    std::vector<int> out_sizes;
    Halide::Type out_type;
    const double fan_in = spec.resolved_model_dim();
    for (const EntryArgument &entry : entries) {
        const Halide::Type type = argument_type(spec, entry);
        std::vector<int> extents;
        for (const TensorDim &dim : entry.dims)
            extents.push_back(extent_of(dim));
        if (entry.kind == EntryArgument::Kind::output) {
            out_sizes = extents;
            out_type = type;
            continue;
        }
        if (entry.kind == EntryArgument::Kind::scalar) {
            Halide::Internal::Parameter parameter(type, false, 0, entry.name);
            double value = scalar_values.at(entry.name);
            if (type.is_int())
                parameter.set_scalar<int32_t>(static_cast<int32_t>(value));
            else
                parameter.set_scalar<float>(static_cast<float>(value));
            bound.scalars[entry.name] = Halide::Internal::Variable::make(type, entry.name, parameter);
            scalars.push_back(parameter);
            continue;
        }
        Halide::ImageParam image(type, static_cast<int>(extents.size()), entry.name);
        HostArgument &arg = host[entry.name];
        arg.buffer = Halide::Buffer<>(type, extents);
        arg.shape.assign(extents.rbegin(), extents.rend());
        const std::string &name = entry.name;
        if (name == "key_lengths" || (entry.is_declared && entry.is_int32))
            fill(arg, 0, static_cast<double>(*keys), rng);
        else if (name == "wq" || name == "wk" || name == "wv")
            fill(arg, -1 / std::sqrt(fan_in), 1 / std::sqrt(fan_in), rng);
        else if (name == "wo")
            fill(arg, -1 / std::sqrt(double(spec.heads) * spec.resolved_head_dim()),
                 1 / std::sqrt(double(spec.heads) * spec.resolved_head_dim()), rng);
        else if (name == "bq" || name == "bk" || name == "bv" || name == "bo")
            fill(arg, -0.5, 0.5, rng);
        else if (name == "attn_bias")
            fill(arg, -2, 2, rng);
        else
            fill(arg, -1, 1, rng);
        constrain_argument(image, entry.dims);
        for (int i = 0; i < image.dimensions(); i++)
            bound.extents[name].push_back(image.dim(i).extent());
        image.set(arg.buffer);
        bound.buffers[name] = image;
        images.push_back(image);
    }

    Halide::Func out("out");
    AttentionStages stages = build_attention(spec, bind_inputs(spec, bound), out);
    if (std::string problem =
            apply_schedule(stages, target, schedule, args.value("schedule-params"));
        !problem.empty()) {
        fmt::print(stderr, "attngen run: {}\n", problem);
        return exit_user_error;
    }
    auto started = Clock::now();
    out.compile_jit(target);
    const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();

    Halide::Buffer<> result(out_type, out_sizes);
    std::vector<double> times;
    for (long run = 0; run <= *runs; run++) {
        started = Clock::now();
        out.realize(result, target);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
        if (run > 0) // the first run warms caches and the thread pool
            times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    const double median_ms = times[times.size() / 2];
    const double flops = 4.0 * double(*batch) * spec.heads * double(*queries) * double(*keys) *
                         spec.resolved_head_dim();

    fmt::print("layer {} ({}), B={} Lq={} Lk={}, target {}, seed {}\n", spec.name,
               args.positional[0], *batch, *queries, *keys, target.to_string(), *seed_value);
    fmt::print("generated in {:.0f} ms; median of {} runs: {:.3f} ms ({:.1f} GFLOP/s of "
               "attention, 4*B*H*Lq*Lk*D)\n",
               compile_ms, times.size(), median_ms, flops / median_ms * 1e-6);

    if (args.has("no-check")) {
        fmt::print("reference check skipped (--no-check)\n");
        return exit_ok;
    }
    attngen_test::ReferenceProblem problem;
    problem.batch = static_cast<int>(*batch);
    problem.heads = spec.heads;
    problem.kv_heads = spec.resolved_kv_heads();
    problem.head_dim = spec.resolved_head_dim();
    problem.model_dim = spec.resolved_model_dim();
    problem.query_len = static_cast<int>(*queries);
    problem.key_len = static_cast<int>(*keys);
    problem.scale = spec.resolved_scale();
    problem.causal = spec.mask.causal;
    problem.key_padding = spec.mask.key_padding;
    problem.window = spec.mask.window;
    problem.additive = spec.mask.additive;
    problem.projections = spec.projections.any();
    problem.out_projection = spec.projections.out;
    problem.bias = spec.projections.bias;
    problem.cross = spec.cross_attention;
    auto values = [&](const char *name) {
        auto found = host.find(name);
        return found == host.end() ? std::vector<double>() : found->second.values;
    };
    problem.query = values("query");
    problem.key = values("key");
    problem.value = values("value");
    problem.x = values("x");
    problem.context = values("context");
    problem.wq = values("wq");
    problem.wk = values("wk");
    problem.wv = values("wv");
    problem.wo = values("wo");
    problem.bq = values("bq");
    problem.bk = values("bk");
    problem.bv = values("bv");
    problem.bo = values("bo");
    problem.attn_bias = values("attn_bias");
    for (double length : values("key_lengths"))
        problem.key_lengths.push_back(static_cast<int>(length));
    attngen_test::ReferenceBindings bindings;
    for (const RuntimeTensor &tensor : spec.tensors)
        bindings.tensors[tensor.name] = {host.at(tensor.name).values, host.at(tensor.name).shape,
                                         tensor.is_int32};
    for (const RuntimeScalar &scalar : spec.scalars)
        bindings.scalars[scalar.name] = {scalar_values.at(scalar.name), scalar.is_int32};
    if (spec.score_mod)
        problem.score_mod = [&](double score, int b, int h, int q, int k) {
            return attngen_test::evaluate(*spec.score_mod, bindings, score, b, h, q, k);
        };
    if (!spec.mask_predicates.empty())
        problem.visible = [&](int b, int h, int q, int k) {
            for (const ModExprPtr &predicate : spec.mask_predicates)
                if (attngen_test::evaluate(*predicate, bindings, 0, b, h, q, k) == 0)
                    return false;
            return true;
        };
    const std::vector<double> want = attngen_test::reference_attention(problem);

    double error = 0, scale = 1;
    for (size_t i = 0; i < want.size(); i++) {
        scale = std::max(scale, std::abs(want[i]));
        double diff = std::abs(read_as_double(result, i) - want[i]);
        error = std::isnan(diff) ? INFINITY : std::max(error, diff);
    }
    const double tolerance = spec.dtype == DType::bf16  ? 1.6e-2
                             : spec.dtype == DType::f16 ? 2e-3
                                                        : 1e-5;
    const bool ok = error / scale <= tolerance;
    fmt::print("max |out - reference| / max(max |reference|, 1) = {:.3g} (tolerance {:g}): {}\n",
               error / scale, tolerance, ok ? "ok" : "MISMATCH");
    return ok ? exit_ok : exit_internal_error;
}

} // namespace attngen::cli
