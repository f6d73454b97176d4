// One tuning task (a layer, a target, a shape): resume from the log, search, measure the
// Halide autoscheduler baselines, re-measure the best few, and name a winner. Measuring is a
// function the caller supplies (a JIT run in a child process, a runner command, or a test's
// synthetic cost), so this file holds the protocol and nothing target-specific.
#pragma once

#include "tuning_log.h"
#include "tuning_search.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace attngen::cli {

/** What measuring one candidate gave. */
struct Measurement {
    std::string status; ///< ok, wrong_result, compile_error, too_slow, timeout, crashed
    std::string message;
    double error = -1;
    std::vector<double> times_ms;
};

/**
 * Measures `params` (scheduler "attngen") or a Halide autoscheduler (params empty): checks the
 * output against the reference, then one warm-up run and `runs` timed runs on rotated inputs.
 * `slow_ms`: stop after the warm-up with too_slow if it took longer.
 */
using MeasureFn = std::function<Measurement(const std::string &scheduler, const ParamPoint &params,
                                            int runs, double slow_ms)>;

/** Where the search stands, for a progress bar. */
struct TuneProgress {
    int trials = 0;       ///< search trials done, resumed ones included
    int max_trials = 0;   ///< 0: bounded by the budget (or the space) only
    double elapsed_s = 0; ///< this run's search time
    double budget_s = 0;  ///< 0: no time budget
    double best_ms = -1;  ///< best median so far, -1 before any ok trial
    double defaults_ms = -1;
    std::string phase; ///< search, baselines, remeasure
};

struct TuneOptions {
    int max_trials = 0;    ///< search trials (resumed ones count); 0 = no limit
    double budget_s = 0;   ///< search time of this run; 0 = no limit
    int runs = 7;          ///< timed runs per candidate (at least 5)
    int remeasure_top = 3; ///< the best few measured again, with the defaults, before a winner
    int remeasure_rounds = 2;
    double slow_factor = 10; ///< a candidate slower than this x the best so far stops early
    uint32_t seed = 1;
    int shard_index = 0, shard_count = 1;
    std::vector<std::string> baselines; ///< Halide autoschedulers to measure too
    std::string log_path;               ///< empty: records are not written
    std::function<void(const TuneProgress &)> on_progress;
};

struct TuneOutcome {
    std::vector<TrialRecord> records; ///< this task's records: resumed, then new
    int resumed = 0, new_trials = 0;
    std::optional<TrialRecord> winner; ///< the best attngen candidate after re-measurement
    std::optional<double> defaults_ms; ///< the defaults' re-measured median
    /** Best median after each search trial, resumed ones first (-1: none ok yet). */
    std::vector<double> best_by_trial;
    std::vector<std::string> problems; ///< log write failures
};

/**
 * Runs one task. `identity` names the task and provenance (spec, target, shape, threads,
 * Halide, machine); `log` holds the records read from the log (any task; the task's own are
 * resumed: their points are not measured again).
 */
TuneOutcome tune(const TrialRecord &identity, const ParamSpace &space, const MeasureFn &measure,
                 const TuneOptions &options, const std::vector<TrialRecord> &log);

} // namespace attngen::cli
