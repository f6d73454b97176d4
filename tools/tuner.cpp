// The tuning protocol: resume, search, baselines, re-measure the top few, pick the winner.
#include "tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

namespace attngen::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

} // namespace

TuneOutcome tune(const TrialRecord &identity, const ParamSpace &space, const MeasureFn &measure,
                 const TuneOptions &options, const std::vector<TrialRecord> &log) {
    TuneOutcome outcome;
    ParamSearch search(space, options.seed, options.shard_index, options.shard_count);
    const ParamPoint defaults = space.defaults();
    TuneProgress progress;
    progress.max_trials = options.max_trials;
    progress.budget_s = options.budget_s;
    int next_trial = 1;
    auto note_best = [&](const TrialRecord &r) {
        if (r.scheduler != "attngen" || !r.ok())
            return;
        if (progress.best_ms < 0 || r.median_ms < progress.best_ms)
            progress.best_ms = r.median_ms;
        if (r.params == defaults && progress.defaults_ms < 0)
            progress.defaults_ms = r.median_ms;
    };

    std::set<std::string> baselines_done;
    for (const TrialRecord &r : log) {
        if (!r.same_task(identity))
            continue;
        outcome.records.push_back(r);
        next_trial = std::max(next_trial, r.trial + 1);
        if (r.scheduler != "attngen") {
            baselines_done.insert(r.scheduler);
            continue;
        }
        if (r.phase != "search" || !space.contains(r.params))
            continue;
        if (!search.tried(r.params))
            outcome.resumed++;
        search.observe(r.params, r.ok() ? r.median_ms : INFINITY);
        note_best(r);
    }
    progress.trials = outcome.resumed;

    auto record = [&](const std::string &scheduler, const ParamPoint &params,
                      const std::string &phase, const Measurement &m) {
        TrialRecord r = identity;
        r.scheduler = scheduler;
        r.params = params;
        r.phase = phase;
        r.defaults = scheduler == "attngen" && params == defaults;
        r.status = m.status;
        r.message = m.message;
        r.error = m.error;
        r.times_ms = m.times_ms;
        r.median_ms = m.status == "ok" ? median(m.times_ms) : -1;
        r.trial = next_trial++;
        r.seed = options.seed;
        r.shard = std::to_string(options.shard_index) + "/" + std::to_string(options.shard_count);
        r.time = utc_now();
        if (!options.log_path.empty())
            if (std::string problem = append_record(options.log_path, r); !problem.empty())
                outcome.problems.push_back(problem);
        outcome.records.push_back(r);
        return r;
    };
    auto report = [&](const std::string &phase) {
        progress.phase = phase;
        if (options.on_progress)
            options.on_progress(progress);
    };

    // The search.
    const Clock::time_point start = Clock::now();
    report("search");
    while ((options.max_trials == 0 || progress.trials < options.max_trials) &&
           (options.budget_s == 0 || seconds_since(start) < options.budget_s)) {
        std::optional<ParamPoint> point = search.next();
        if (!point)
            break;
        const double slow_ms =
            progress.best_ms > 0 ? options.slow_factor * progress.best_ms : INFINITY;
        const TrialRecord r =
            record("attngen", *point, "search", measure("attngen", *point, options.runs, slow_ms));
        search.observe(*point, r.ok() ? r.median_ms : INFINITY);
        note_best(r);
        outcome.new_trials++;
        progress.trials++;
        progress.elapsed_s = seconds_since(start);
        report("search");
    }

    // Halide's autoschedulers, once per task (a resumed log keeps its measurement).
    for (const std::string &baseline : options.baselines) {
        if (baselines_done.count(baseline))
            continue;
        report("baseline " + baseline);
        record(baseline, {}, "search", measure(baseline, {}, options.runs, INFINITY));
    }

    // Re-measure the best few and the defaults, interleaved round by round so that drift of
    // the machine hits them alike; the winner is the best re-measured median.
    std::map<ParamPoint, double> best_search;
    for (const TrialRecord &r : outcome.records)
        if (r.scheduler == "attngen" && r.ok() && r.phase == "search" && space.contains(r.params))
            if (!best_search.count(r.params) || r.median_ms < best_search[r.params])
                best_search[r.params] = r.median_ms;
    std::vector<std::pair<double, ParamPoint>> ranked;
    for (const auto &entry : best_search)
        ranked.emplace_back(entry.second, entry.first);
    std::sort(ranked.begin(), ranked.end());
    std::vector<ParamPoint> finalists;
    for (const auto &entry : ranked)
        if (static_cast<int>(finalists.size()) < options.remeasure_top)
            finalists.push_back(entry.second);
    if (best_search.count(defaults) &&
        std::find(finalists.begin(), finalists.end(), defaults) == finalists.end())
        finalists.push_back(defaults);
    std::map<ParamPoint, std::vector<double>> remeasured;
    for (int round = 0; round < options.remeasure_rounds && !finalists.empty(); round++)
        for (const ParamPoint &point : finalists) {
            report("remeasure");
            const TrialRecord r = record("attngen", point, "remeasure",
                                         measure("attngen", point, options.runs, INFINITY));
            if (r.ok())
                remeasured[point].insert(remeasured[point].end(), r.times_ms.begin(),
                                         r.times_ms.end());
        }
    double winner_ms = INFINITY;
    for (const auto &entry : remeasured) {
        const double ms = median(entry.second);
        if (entry.first == defaults)
            outcome.defaults_ms = ms;
        if (ms < winner_ms) {
            winner_ms = ms;
            for (auto r = outcome.records.rbegin(); r != outcome.records.rend(); ++r)
                if (r->phase == "remeasure" && r->params == entry.first && r->ok()) {
                    outcome.winner = *r;
                    break;
                }
            outcome.winner->times_ms = entry.second;
            outcome.winner->median_ms = ms;
        }
    }
    if (remeasured.empty() && !ranked.empty()) // no re-measurement asked for: the search's best
        for (const TrialRecord &r : outcome.records)
            if (r.scheduler == "attngen" && r.ok() && r.params == ranked.front().second &&
                r.median_ms == ranked.front().first)
                outcome.winner = r;
    // Best time against trials over the task's whole history, resumed trials first.
    double best = -1;
    for (const TrialRecord &r : outcome.records) {
        if (r.scheduler != "attngen" || r.phase != "search")
            continue;
        if (r.ok() && (best < 0 || r.median_ms < best))
            best = r.median_ms;
        outcome.best_by_trial.push_back(best);
    }
    report("done");
    return outcome;
}

} // namespace attngen::cli
