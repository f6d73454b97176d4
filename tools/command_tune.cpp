// `attngen tune`: search a target family's schedule parameters by measuring real candidates,
// log every trial, compare with Halide's autoschedulers; `tune export` ships the winners to
// schedules/tuned/, `tune merge` joins the logs of shards.
#include "aot_measure.h"
#include "cli.h"
#include "jit_measure.h"
#include "layer_problem.h"
#include "targets.h"
#include "tuner.h"
#include "tuning_log.h"

#include "generators/layer_source.h"
#include "schedules/schedule.h"
#include "schedules/schedule_params.h"
#include "schedules/tuned_params.h"

#include "Halide.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

#ifndef ATTNGEN_HALIDE_VERSION
#define ATTNGEN_HALIDE_VERSION "unknown"
#endif

namespace attngen::cli {

namespace {

namespace fs = std::filesystem;

void print_usage(std::FILE *stream) {
    fmt::print(
        stream,
        "usage: attngen tune FILE --shapes B,Lq[,Lk];... [--layer NAME] [--target host]\n"
        "                    [--trials N | --budget 10m] [--log FILE] [--seed S] [--shard i/n]\n"
        "                    [--baselines all|none|Adams2019,Mullapudi2016,Li2018,Anderson2021]\n"
        "                    [--runs N] [--top N] [--threads N] [--timeout 120s]\n"
        "                    [--space name=a/b/c;...] [--plot FILE.svg] [--scalar NAME=V ...]\n"
        "                    [--aot] [--cc CC] [--runner CMD] [--work DIR]\n"
        "       attngen tune export LOG... [-o DIR]     best record per class -> DIR/*.json\n"
        "       attngen tune merge LOG... -o FILE       join the logs of shards\n"
        "\n"
        "Searches the schedule parameters of the target's family (an evolutionary search seeded\n"
        "with the hand-written defaults) by compiling and running real candidates, one child\n"
        "process each. Every candidate's output is checked against the double-precision\n"
        "reference before it is timed; invalid candidates (compile errors, wrong results,\n"
        "crashes, time-outs) are logged and never chosen. Timing: one warm-up run, then --runs\n"
        "(default 7, at least 5) runs, each on another of several input sets so the cache does\n"
        "not flatter; the median counts. The --top (default 3) candidates and the defaults are\n"
        "measured again, interleaved, before a winner is named.\n"
        "\n"
        "Every trial is appended to the log (default attngen-tune.jsonl) as it finishes; a\n"
        "search run again with the same log resumes: finished trials are not repeated.\n"
        "--trials counts resumed trials; --budget (s, m or h) is the search time of this run,\n"
        "shared by the shapes. --shard i/n searches the i-th of n disjoint parts of the space\n"
        "(run n of them anywhere, then `tune merge` their logs and `tune export`).\n"
        "Baselines: Halide's autoschedulers on the same pipeline, once per shape: Adams2019,\n"
        "Mullapudi2016 and Li2018 on JIT-compiled targets, Anderson2021 on GPU targets (with\n"
        "Halide 21); `all` (the default) is those the target offers. They get 5x --timeout;\n"
        "Adams2019 honours Halide's HL_BEAM_SIZE (1 = its greedy mode, much faster).\n"
        "\n"
        "Targets this machine runs (host, or its x86 variants) are JIT-compiled. Others, and any\n"
        "with --aot, are generated ahead of time, linked with a small harness by --cc, and run\n"
        "by --runner with the --work dir's paths (defaults for arm-64-linux on x86:\n"
        "aarch64-linux-gnu-gcc and 'qemu-aarch64 -L /usr/aarch64-linux-gnu'; for a device, a\n"
        "script that copies the work dir over and runs its arguments there).\n"
        "\n"
        "The space is the target family's schedule parameters that `attngen params` lists\n"
        "with a \"tune:\" line, for this layer and these shapes (decode shapes alone search\n"
        "the split-KV split_chunk); --space NAME=V1/V2;... narrows it.\n");
}

/** "90", "90s", "10m", "1h" in seconds; negative if malformed. */
double parse_duration(const std::string &text) {
    if (text.empty())
        return -1;
    char *end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    const std::string unit = end;
    const double scale = unit.empty() || unit == "s" ? 1
                         : unit == "m"               ? 60
                         : unit == "h"               ? 3600
                                                     : -1;
    if (scale < 0 || !(value > 0) || !std::isfinite(value))
        return -1;
    return value * scale;
}

/** The tuner's values of `param` for `spec`, with `default_value` among them, ascending. */
std::vector<int> search_values(const ScheduleParam &param, const AttentionSpec &spec,
                               int default_value) {
    std::vector<int> values = param.search;
    if (param.search_values == SearchValues::head_dim_lanes) {
        // 2 to 32 lanes per row of the online form's state, a row of value_dim.
        const int value_dim = spec.resolved_value_dim();
        for (int lanes = 2; lanes <= 32; lanes *= 2)
            if (value_dim % lanes == 0)
                values.push_back(value_dim / lanes);
    } else if (param.search_values == SearchValues::group_divisors) {
        for (int divisor = 1; divisor <= spec.group_size(); divisor++)
            if (spec.group_size() % divisor == 0)
                values.push_back(divisor);
    }
    if (std::find(values.begin(), values.end(), default_value) == values.end())
        values.push_back(default_value);
    std::sort(values.begin(), values.end());
    return values;
}

/**
 * The search space of the target family's schedule parameters around `defaults` (what compile
 * resolves for the shapes' class): the parameters schedule_param_table() says the tuner searches
 * for this layer and these shapes, with the values it lists (an axis of one value is left out).
 */
template <typename Params>
ParamSpace search_space(ScheduleFamily family, const Params &defaults, const AttentionSpec &spec,
                        bool decode) {
    ParamSpace space;
    for (const ScheduleParam &param : schedule_param_table()) {
        if (param.family != family || !searched(param, decode, spec.projections.any()))
            continue;
        const int default_value = param_value(param, defaults);
        std::vector<int> values = search_values(param, spec, default_value);
        if (values.size() > 1)
            space.axes.push_back({param.name, values, default_value});
    }
    return space;
}

/** "name=a/b;..." with each old parameter name replaced by its current one. */
std::string current_param_names(ScheduleFamily family, const std::string &space) {
    std::stringstream stream(space);
    std::string item, text;
    while (std::getline(stream, item, ';')) {
        const size_t equals = item.find('=');
        const ScheduleParam *param = find_schedule_param(family, item.substr(0, equals));
        if (param != nullptr && equals != std::string::npos)
            item = param->name + item.substr(equals);
        text += (text.empty() ? "" : ";") + item;
    }
    return text;
}

std::string format_duration(double seconds) {
    const long s = std::lround(std::max(seconds, 0.0));
    return s >= 60 ? fmt::format("{}m{:02d}s", s / 60, s % 60) : fmt::format("{}s", s);
}

/** A progress line on stderr: redrawn in place on a terminal, one line per trial otherwise. */
class ProgressBar {
  public:
    explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(isatty(2) != 0) {}

    void update(const TuneProgress &p) {
        double fraction = 0;
        std::string left = "?";
        if (p.max_trials > 0)
            fraction = double(p.trials) / p.max_trials;
        if (p.budget_s > 0) {
            fraction = std::max(fraction, p.elapsed_s / p.budget_s);
            left = format_duration(p.budget_s - p.elapsed_s);
        } else if (p.max_trials > 0 && p.trials > 0 && p.elapsed_s > 0) {
            left = format_duration(p.elapsed_s / std::max(1, p.trials) * (p.max_trials - p.trials));
        }
        fraction = std::clamp(fraction, 0.0, 1.0);
        const int width = 24, filled = static_cast<int>(fraction * width + 0.5);
        std::string best = p.best_ms > 0 ? fmt::format("{:.3f} ms", p.best_ms) : "-";
        if (p.best_ms > 0 && p.defaults_ms > 0)
            best += fmt::format(" ({:.2f}x defaults)", p.defaults_ms / p.best_ms);
        const std::string line = fmt::format(
            "{} [{}{}] {} trial{}{}  best {}  {} left  {}", label_, std::string(filled, '#'),
            std::string(width - filled, '.'), p.trials, p.trials == 1 ? "" : "s",
            p.max_trials > 0 ? fmt::format("/{}", p.max_trials) : "", best, left, p.phase);
        if (tty_)
            fmt::print(stderr, "\r{:<110}", line);
        else if (line != last_)
            fmt::print(stderr, "{}\n", line);
        last_ = line;
    }
    void finish() {
        if (tty_)
            fmt::print(stderr, "\n");
    }

  private:
    std::string label_, last_;
    bool tty_;
};

/** A plot of best time against trials, one line per shape, relative to its defaults. */
std::string svg_plot(const std::vector<std::pair<std::string, std::vector<double>>> &series) {
    const double width = 640, height = 400, left = 60, right = 20, top = 40, bottom = 50;
    size_t max_trials = 1;
    double low = 1, high = 1;
    std::vector<std::pair<std::string, std::vector<double>>> relative;
    for (const auto &entry : series) {
        std::vector<double> values;
        double first = -1;
        for (double ms : entry.second) {
            if (first < 0 && ms > 0)
                first = ms;
            values.push_back(ms > 0 && first > 0 ? ms / first : -1);
        }
        for (double v : values)
            if (v > 0) {
                low = std::min(low, v);
                high = std::max(high, v);
            }
        max_trials = std::max(max_trials, values.size());
        relative.emplace_back(entry.first, values);
    }
    low = std::floor(low * 20) / 20;
    high = std::max(low + 0.05, std::ceil(high * 20) / 20);
    auto x = [&](size_t i) {
        return left + (width - left - right) * double(i) / double(max_trials);
    };
    auto y = [&](double v) { return top + (height - top - bottom) * (high - v) / (high - low); };
    const char *colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                            "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
    std::string svg = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
        "font-family=\"sans-serif\" font-size=\"12\">\n"
        "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
        "<text x=\"{2}\" y=\"20\" font-size=\"14\">attngen tune: best time against trials "
        "(relative to the first trial, the hand-written defaults)</text>\n",
        width, height, left);
    for (int tick = 0; tick <= 4; tick++) {
        const double v = low + (high - low) * tick / 4;
        svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                           "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.2f}</text>\n",
                           left, width - right, y(v), y(v), left - 6, y(v) + 4, v);
    }
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">trial (1..{})</text>\n",
                       (left + width - right) / 2, height - 15, max_trials);
    for (size_t s = 0; s < relative.size(); s++) {
        std::string points;
        for (size_t i = 0; i < relative[s].second.size(); i++)
            if (relative[s].second[i] > 0)
                points += fmt::format("{:.1f},{:.1f} ", x(i + 1), y(relative[s].second[i]));
        const char *color = colors[s % 8];
        svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" "
                           "points=\"{}\"/>\n<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n",
                           color, points, left + 10, top + 16 + 16 * double(s), color,
                           relative[s].first);
    }
    return svg + "</svg>\n";
}

std::string describe(const TrialRecord &r) {
    return r.scheduler == "attngen" ? to_string(r.params) : "(Halide autoscheduler)";
}

/**
 * The records of the LOG arguments of `tune export` or `tune merge` (`command`), each damaged
 * line reported; false (and a message) if a log does not exist.
 */
bool read_logs(const Arguments &args, const char *command, std::vector<TrialRecord> &records,
               int &skipped) {
    for (size_t i = 1; i < args.positional.size(); i++) {
        if (!fs::exists(args.positional[i])) {
            fmt::print(stderr, "attngen tune {}: no log '{}'\n", command, args.positional[i]);
            return false;
        }
        LogContents log = read_log(args.positional[i]);
        for (const std::string &warning : log.warnings)
            fmt::print(stderr, "attngen tune {}: {}\n", command, warning);
        skipped += static_cast<int>(log.warnings.size());
        records.insert(records.end(), log.records.begin(), log.records.end());
    }
    return true;
}

int tune_export(const Arguments &args) {
    if (args.positional.size() < 2) {
        fmt::print(stderr, "attngen tune export: expected LOG...\n");
        return exit_user_error;
    }
    std::vector<TrialRecord> records;
    int skipped = 0;
    if (!read_logs(args, "export", records, skipped))
        return exit_user_error;
    const std::vector<TrialRecord> winners = best_per_class(records);
    if (winners.empty()) {
        fmt::print(stderr, "attngen tune export: the logs hold no successful attngen trial\n");
        return exit_user_error;
    }
    const fs::path dir = args.value("output", "schedules/tuned");
    std::error_code error;
    fs::create_directories(dir, error);
    std::map<std::string, std::vector<TrialRecord>> by_file;
    for (const TrialRecord &winner : winners)
        by_file[winner.target_class].push_back(winner);
    for (const auto &file : by_file) {
        const fs::path path = dir / (file.first + ".json");
        nlohmann::json table = {{"records", nlohmann::json::array()}};
        if (std::ifstream in(path); in) {
            nlohmann::json old = nlohmann::json::parse(in, nullptr, false);
            if (!old.is_discarded() && old.contains("records") && old["records"].is_array())
                table = old;
        }
        for (const TrialRecord &winner : file.second) {
            // The winning record itself, and where it came from in words.
            nlohmann::json entry = to_json(winner);
            entry["source"] =
                fmt::format("tuned on {} layer {} B,Lq,Lk={}, {} threads: {}", winner.machine,
                            winner.layer, to_string(winner.shape), winner.threads, winner.message);
            nlohmann::json &list = table["records"];
            list.erase(std::remove_if(list.begin(), list.end(),
                                      [&](const nlohmann::json &old) {
                                          return old.value("spec_class", "") == winner.spec_class &&
                                                 old.value("shape_class", "") == winner.shape_class;
                                      }),
                       list.end());
            list.push_back(entry);
            fmt::print("{} {} {}: {} ({})\n", winner.target_class, winner.spec_class,
                       winner.shape_class, to_string(winner.params), winner.message);
        }
        std::ofstream out(path);
        out << table.dump(2) << '\n';
        if (!out) {
            fmt::print(stderr, "attngen tune export: cannot write '{}'\n", path.string());
            return exit_user_error;
        }
        fmt::print("wrote {}\n", path.string());
    }
    return exit_ok;
}

int tune_merge(const Arguments &args) {
    if (args.positional.size() < 2 || args.value("output").empty()) {
        fmt::print(stderr, "attngen tune merge: expected LOG... -o FILE\n");
        return exit_user_error;
    }
    std::vector<TrialRecord> records;
    int skipped = 0;
    if (!read_logs(args, "merge", records, skipped))
        return exit_user_error;
    std::set<std::string> seen;
    std::vector<std::string> lines;
    for (const TrialRecord &record : records) {
        std::string line = to_json(record).dump();
        if (seen.insert(line).second)
            lines.push_back(line);
    }
    std::ofstream out(args.value("output"));
    for (const std::string &line : lines)
        out << line << '\n';
    if (!out) {
        fmt::print(stderr, "attngen tune merge: cannot write '{}'\n", args.value("output"));
        return exit_user_error;
    }
    fmt::print("attngen tune merge: {} records from {} logs -> {} ({} bad lines skipped)\n",
               lines.size(), args.positional.size() - 1, args.value("output"), skipped);
    return exit_ok;
}

} // namespace

int command_tune(int argc, char **argv) {
    Arguments args = parse(
        argc, argv, 2, {"layer", "target", "shapes",    "shape",  "trials", "budget",  "log",
                        "seed",  "shard",  "baselines", "runs",   "top",    "threads", "timeout",
                        "space", "plot",   "scalar",    "output", "runner", "cc",      "work"},
        {"help", "aot"});
    if (args.has("help")) {
        print_usage(stdout);
        return exit_ok;
    }
    auto usage_error = [&](const std::string &message) {
        fmt::print(stderr, "attngen tune: {}\n", message);
        print_usage(stderr);
        return exit_user_error;
    };
    if (!args.error.empty())
        return usage_error(args.error);
    if (!args.positional.empty() && args.positional[0] == "export")
        return tune_export(args);
    if (!args.positional.empty() && args.positional[0] == "merge")
        return tune_merge(args);
    if (args.positional.size() != 1)
        return usage_error("expected one FILE (or export LOG..., merge LOG... -o FILE)");

    std::map<std::string, std::string> params = {{"spec", args.positional[0]}};
    if (!args.value("layer").empty())
        params["layer"] = args.value("layer");
    LayerSource source = load_layer(params);
    if (!source.spec) {
        fmt::print(stderr, "attngen tune: {}\n", source.errors);
        return exit_user_error;
    }
    const AttentionSpec spec = *source.spec;

    std::vector<std::string> shape_words;
    for (const std::string &option : {std::string("shapes"), std::string("shape")})
        for (const std::string &value : args.values(option)) {
            size_t start = 0;
            while (start <= value.size()) {
                const size_t end = std::min(value.find(';', start), value.size());
                if (end > start)
                    shape_words.push_back(value.substr(start, end - start));
                start = end + 1;
            }
        }
    if (shape_words.empty())
        return usage_error("--shapes is required, e.g. --shapes '1,2048;1,1,4096'");
    std::vector<ProblemShape> shapes;
    for (const std::string &word : shape_words) {
        ProblemShape shape;
        if (std::string problem = parse_shape(word, shape); !problem.empty())
            return usage_error("--shapes: " + problem);
        if (std::string problem = check_problem(spec, shape); !problem.empty())
            return usage_error("--shapes: " + problem);
        shapes.push_back(shape);
    }

    TuneOptions options;
    const std::optional<long> trials = parse_integer(args.value("trials", "0"), 0, 1000000);
    const std::optional<long> runs = parse_integer(args.value("runs", "7"), 5, 1000);
    const std::optional<long> top = parse_integer(args.value("top", "3"), 1, 100);
    const std::optional<long> seed = parse_integer(args.value("seed", "1"), 0, 0xffffffffL);
    const std::optional<long> threads = parse_integer(
        args.value("threads", std::to_string(std::thread::hardware_concurrency())), 1, 1024);
    const double timeout_s = parse_duration(args.value("timeout", "120"));
    if (!trials)
        return usage_error("--trials must be in 0..1000000, got '" + args.value("trials") + "'");
    if (!runs)
        return usage_error("--runs must be in 5..1000, got '" + args.value("runs") + "'");
    if (!top || !seed || !threads)
        return usage_error("--top must be in 1..100, --seed in 0..2^32-1, --threads in 1..1024");
    if (timeout_s <= 0)
        return usage_error("--timeout must be a duration like 90s or 2m, got '" +
                           args.value("timeout") + "'");
    double budget_s = 0;
    if (!args.value("budget").empty()) {
        budget_s = parse_duration(args.value("budget"));
        if (budget_s <= 0)
            return usage_error("--budget must be a duration like 600, 90s, 10m or 1h, got '" +
                               args.value("budget") + "'");
    }
    if (*trials == 0 && budget_s == 0)
        return usage_error("give --trials N or --budget DURATION (or both)");
    options.max_trials = static_cast<int>(*trials);
    options.budget_s = budget_s / double(shapes.size());
    options.runs = static_cast<int>(*runs);
    options.remeasure_top = static_cast<int>(*top);
    options.seed = static_cast<uint32_t>(*seed);
    const std::string shard = args.value("shard", "0/1");
    {
        const size_t slash = shard.find('/');
        const std::optional<long> index = slash == std::string::npos
                                              ? std::nullopt
                                              : parse_integer(shard.substr(0, slash), 0, 1 << 20);
        const std::optional<long> count = slash == std::string::npos
                                              ? std::nullopt
                                              : parse_integer(shard.substr(slash + 1), 1, 1 << 20);
        if (!index || !count || *index >= *count)
            return usage_error("--shard must be i/n with 0 <= i < n, got '" + shard + "'");
        options.shard_index = static_cast<int>(*index);
        options.shard_count = static_cast<int>(*count);
    }
    const std::string baselines = args.value("baselines", "all");
    if (baselines != "all" && baselines != "none")
        for (const std::string &name : split_list(baselines)) {
            const std::vector<std::string> known = {"Adams2019", "Mullapudi2016", "Li2018",
                                                    "Anderson2021"};
            if (std::find(known.begin(), known.end(), name) == known.end())
                return usage_error("--baselines takes all, none or a list of Adams2019, "
                                   "Mullapudi2016, Li2018, Anderson2021; got '" +
                                   name + "'");
            options.baselines.push_back(name);
        }
    options.log_path = args.value("log", "attngen-tune.jsonl");

    // Targets this machine can run are JIT-compiled in a child process per candidate; others
    // (and any with --aot) are generated ahead of time and run by the runner command.
    const std::string target_name = args.value("target", "host");
    const Halide::Target host = jit_target();
    Halide::Target target = host.without_feature(Halide::Target::JIT);
    if (target_name != "host") {
        if (!Halide::Target::validate_target_string(target_name))
            return usage_error("--target: '" + target_name + "' is not a Halide target");
        target = Halide::Target(target_name);
    }
    bool jit = !args.has("aot") && target.arch == host.arch && target.bits == host.bits &&
               target.os == host.os && !target.has_gpu_feature();
    for (int f = 0; f < Halide::Target::FeatureEnd; f++) {
        const auto feature = static_cast<Halide::Target::Feature>(f);
        jit = jit && (!target.has_feature(feature) || host.has_feature(feature));
    }
    AotSetup aot = default_aot_setup(target.to_string());
    aot.spec_file = fs::absolute(args.positional[0]).string();
    aot.layer = spec.name;
    aot.target = target.to_string();
    aot.timeout_s = timeout_s;
    aot.cc = args.value("cc", aot.cc);
    aot.runner = args.value("runner", aot.runner);
    aot.work_dir = args.value(
        "work",
        (fs::temp_directory_path() / ("attngen-tune-" + std::to_string(getpid()))).string());
    // The baselines this target offers: Halide's CPU autoschedulers where candidates are JIT
    // compiled; its GPU autoscheduler (Halide 21) on GPU targets; nothing else ahead of time.
    std::vector<std::string> offered;
    if (jit)
        offered = autoscheduler_names();
    else if (target.has_gpu_feature() && *halide_compat::gpu_autoscheduler != '\0')
        offered = {halide_compat::gpu_autoscheduler};
    if (baselines == "all")
        options.baselines = offered;
    for (const std::string &name : options.baselines)
        if (std::find(offered.begin(), offered.end(), name) == offered.end())
            return usage_error(fmt::format(
                "--baselines: {} is not offered for {} ({}); offered here: {}", name, aot.target,
                jit ? "JIT-compiled: Halide's CPU autoschedulers"
                : target.has_gpu_feature()
                    ? "a GPU target: Anderson2021, with Halide 21 (attngen was built with "
                      "Halide " ATTNGEN_HALIDE_VERSION ")"
                    : "tuned ahead of time: none",
                offered.empty() ? std::string("none")
                                : fmt::format("{}", fmt::join(offered, ", "))));
    ParamSpace space;
    const bool decode = std::all_of(shapes.begin(), shapes.end(), [](const ProblemShape &s) {
        return shape_class(s.queries) == "decode";
    });
    const std::string shapes_class = decode ? "decode" : "prefill";
    if (target.has_gpu_feature())
        space = search_space(ScheduleFamily::gpu, gpu_schedule_params(spec, shapes_class), spec,
                             decode);
    else
        space = search_space(ScheduleFamily::cpu, cpu_schedule_params(spec, target, shapes_class),
                             spec, decode);
    const ScheduleFamily family =
        target.has_gpu_feature() ? ScheduleFamily::gpu : ScheduleFamily::cpu;
    if (std::string problem =
            restrict_space(space, current_param_names(family, args.value("space")));
        !problem.empty())
        return usage_error(problem);

    std::map<std::string, double> scalar_values;
    if (std::string problem = parse_scalars(args.values("scalar"), spec, scalar_values);
        !problem.empty())
        return usage_error(problem);
    setenv("HL_NUM_THREADS", std::to_string(*threads).c_str(), 1);

    LogContents log = read_log(options.log_path);
    for (const std::string &warning : log.warnings)
        fmt::print(stderr, "attngen tune: {}\n", warning);

    TrialRecord identity;
    identity.spec_hash = spec_hash(spec);
    identity.layer = spec.name;
    identity.spec_class = spec_class(spec);
    identity.target = target.to_string();
    identity.target_class = target_class(target);
    identity.threads = static_cast<int>(*threads);
    identity.halide = ATTNGEN_HALIDE_VERSION;
    identity.machine = machine_description();

    if (!jit)
        fmt::print("ahead of time: cc {}, runner '{}', work dir {}\n", aot.cc, aot.runner,
                   aot.work_dir);
    fmt::print("attngen tune: layer {} ({}), target {} ({}), {} threads, {} shape{}\n", spec.name,
               identity.spec_class, identity.target, identity.target_class, *threads, shapes.size(),
               shapes.size() == 1 ? "" : "s");
    fmt::print(
        "space: {} points ({}); search seed {}, shard {}\n", space.size(),
        [&] {
            std::string axes;
            for (const ParamAxis &axis : space.axes)
                axes += (axes.empty() ? "" : "; ") + axis.name + " " +
                        fmt::format("{}", fmt::join(axis.values, "/"));
            return axes;
        }(),
        options.seed, shard);
    fmt::print("protocol: output checked against the float64 reference, 1 warm-up run, {} timed "
               "runs on rotated inputs, median; top {} and the defaults re-measured {} rounds, "
               "interleaved\nlog: {} ({} records read)\n\n",
               options.runs, options.remeasure_top, options.remeasure_rounds, options.log_path,
               log.records.size());

    struct ShapeResult {
        ProblemShape shape;
        TuneOutcome outcome;
    };
    std::vector<ShapeResult> results;
    for (const ProblemShape &shape : shapes) {
        TrialRecord task = identity;
        task.shape = shape;
        task.shape_class = shape_class(shape.queries);
        LayerProblem problem =
            make_layer_problem(spec, shape, scalar_values, options.seed * 7919u + 1u);
        // Enough input sets that together they overflow a 32 MiB cache, 2 to 8 of them.
        const size_t bytes = std::max<size_t>(JitBench::input_bytes(problem.inputs), 1);
        const int sets = static_cast<int>(std::clamp<size_t>((64u << 20) / bytes + 1, 2, 8));
        fmt::print("shape B,Lq,Lk = {} ({}): computing the reference, {} input sets\n",
                   to_string(shape), task.shape_class, sets);
        std::fflush(stdout);
        MeasureFn measure;
        std::unique_ptr<JitBench> jit_bench;
        std::unique_ptr<AotBench> aot_bench;
        if (jit) {
            jit_bench = std::make_unique<JitBench>(
                std::move(problem), target.with_feature(Halide::Target::JIT), sets, options.seed,
                static_cast<int>(*threads), timeout_s);
            measure = [&](const std::string &scheduler, const ParamPoint &point, int n,
                          double slow_ms) {
                return jit_bench->measure(scheduler, point, n, slow_ms);
            };
        } else {
            AotSetup shape_setup = aot;
            shape_setup.work_dir = (fs::path(aot.work_dir) / to_string(shape)).string();
            aot_bench =
                std::make_unique<AotBench>(std::move(problem), shape_setup, sets, options.seed);
            if (!aot_bench->setup_error().empty()) {
                fmt::print(stderr, "attngen tune: {}\n", aot_bench->setup_error());
                return exit_user_error;
            }
            measure = [&](const std::string &scheduler, const ParamPoint &point, int n,
                          double slow_ms) {
                return aot_bench->measure(scheduler, point, n, slow_ms);
            };
        }
        ProgressBar bar(fmt::format("  {:<14}", to_string(shape)));
        options.on_progress = [&](const TuneProgress &p) { bar.update(p); };
        TuneOutcome outcome = tune(task, space, measure, options, log.records);
        bar.finish();
        for (const std::string &problem : outcome.problems)
            fmt::print(stderr, "attngen tune: {}\n", problem);
        results.push_back({shape, std::move(outcome)});
    }

    // Per shape: the best few, the defaults and the baselines.
    const double gflop_scale = 1e-6;
    for (const ShapeResult &result : results) {
        const TuneOutcome &o = result.outcome;
        const double flops =
            attention_flops(spec, result.shape) *
            (spec.mask.causal && result.shape.queries == result.shape.keys ? 0.5 : 1);
        fmt::print("\nshape B,Lq,Lk = {}: {} trials ({} resumed, {} new), {} invalid\n",
                   to_string(result.shape), o.resumed + o.new_trials, o.resumed, o.new_trials,
                   std::count_if(o.records.begin(), o.records.end(),
                                 [](const TrialRecord &r) { return !r.ok(); }));
        std::map<std::string, const TrialRecord *> best; // by candidate, best search median
        for (const TrialRecord &r : o.records) {
            if (!r.ok() || r.phase != "search")
                continue;
            const std::string key = r.scheduler + " " + describe(r);
            if (!best.count(key) || r.median_ms < best[key]->median_ms)
                best[key] = &r;
        }
        std::vector<const TrialRecord *> ranked;
        for (const auto &entry : best)
            ranked.push_back(entry.second);
        std::sort(ranked.begin(), ranked.end(), [](const TrialRecord *a, const TrialRecord *b) {
            return a->median_ms < b->median_ms;
        });
        fmt::print("  {:<4} {:<13} {:<58} {:>10} {:>9} {:>8}\n", "rank", "scheduler", "parameters",
                   "median ms", "GFLOP/s", "vs dflt");
        double defaults_ms = -1; // in the same (search) phase as the rows
        for (const TrialRecord *r : ranked)
            if (r->defaults)
                defaults_ms = r->median_ms;
        int rank = 0;
        for (const TrialRecord *r : ranked) {
            rank++;
            if (rank > 5 && r->scheduler == "attngen" && !r->defaults)
                continue;
            fmt::print("  {:<4} {:<13} {:<58} {:>10.3f} {:>9.1f} {:>8}\n", rank,
                       r->defaults ? "defaults" : r->scheduler, describe(*r), r->median_ms,
                       flops / r->median_ms * gflop_scale,
                       defaults_ms > 0 ? fmt::format("{:.2f}x", defaults_ms / r->median_ms) : "-");
        }
        for (const TrialRecord &r : o.records)
            if (r.scheduler != "attngen" && !r.ok())
                fmt::print("       {:<13} {}: {}\n", r.scheduler, r.status,
                           r.message.substr(0, 160));
        if (o.winner)
            fmt::print(
                "  winner after re-measurement: {}  {:.3f} ms (defaults re-measured: {:.3f} ms)\n",
                to_string(o.winner->params), o.winner->median_ms, o.defaults_ms.value_or(-1));
    }

    // Across shapes: tuned against the defaults and the best autoscheduler.
    fmt::print("\n{:<16} {:>11} {:>11} {:>11} {:>15} {:>10} {:>10}\n", "shape B,Lq,Lk",
               "defaults ms", "tuned ms", "tuned/dflt", "best autosched", "ms", "tuned/AS");
    double log_vs_defaults = 0, log_vs_autosched = 0;
    int with_defaults = 0, with_autosched = 0;
    for (const ShapeResult &result : results) {
        const TuneOutcome &o = result.outcome;
        const TrialRecord *best_as = nullptr;
        for (const TrialRecord &r : o.records)
            if (r.scheduler != "attngen" && r.ok() &&
                (!best_as || r.median_ms < best_as->median_ms))
                best_as = &r;
        const double tuned = o.winner ? o.winner->median_ms : -1;
        const double defaults = o.defaults_ms.value_or(-1);
        std::string vs_defaults = "-", vs_as = "-";
        if (tuned > 0 && defaults > 0) {
            vs_defaults = fmt::format("{:.2f}x", defaults / tuned);
            log_vs_defaults += std::log(defaults / tuned);
            with_defaults++;
        }
        if (tuned > 0 && best_as) {
            vs_as = fmt::format("{:.2f}x", best_as->median_ms / tuned);
            log_vs_autosched += std::log(best_as->median_ms / tuned);
            with_autosched++;
        }
        fmt::print("{:<16} {:>11.3f} {:>11.3f} {:>11} {:>15} {:>10} {:>10}\n",
                   to_string(result.shape), defaults, tuned, vs_defaults,
                   best_as ? best_as->scheduler : "-",
                   best_as ? fmt::format("{:.3f}", best_as->median_ms) : "-", vs_as);
    }
    fmt::print(
        "{:<16} {:>11} {:>11} {:>11} {:>15} {:>10} {:>10}\n", "geometric mean", "", "",
        with_defaults ? fmt::format("{:.2f}x", std::exp(log_vs_defaults / with_defaults)) : "-", "",
        "",
        with_autosched ? fmt::format("{:.2f}x", std::exp(log_vs_autosched / with_autosched)) : "-");

    const std::string plot =
        args.value("plot", fs::path(options.log_path).replace_extension(".svg").string());
    std::vector<std::pair<std::string, std::vector<double>>> series;
    for (const ShapeResult &result : results)
        series.emplace_back(to_string(result.shape), result.outcome.best_by_trial);
    std::ofstream svg(plot);
    svg << svg_plot(series);
    fmt::print("\nplot: {}\nlog: {}\nship the winners: attngen tune export {} -o schedules/tuned\n",
               plot, options.log_path, options.log_path);
    return exit_ok;
}

} // namespace attngen::cli
