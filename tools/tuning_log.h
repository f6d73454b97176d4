// The tuning log: one JSON object per line per trial (spec hash, layer, target, shape,
// parameters, timings, status, Halide version, machine), appended as trials finish, so that a
// search resumes from it, shards merge into it, and export picks winners from it.
#pragma once

#include "problem_shape.h"
#include "tuning_search.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace attngen::cli {

/** One measured candidate (or one re-measurement of it). */
struct TrialRecord {
    // What was tuned: together these say which trials a resumed search may reuse.
    std::string spec_hash, layer, spec_class;
    std::string target, target_class;
    ProblemShape shape;
    std::string shape_class;
    int threads = 0;
    // The candidate.
    std::string scheduler = "attngen"; ///< attngen (its parameters) or a Halide autoscheduler
    ParamPoint params;
    std::string phase = "search"; ///< search, or remeasure (the top few, measured again)
    bool defaults = false;        ///< the parameters are the target's hand-written defaults
    // The outcome.
    std::string status; ///< ok, wrong_result, compile_error, too_slow, timeout, crashed
    std::string message;
    double error = -1; ///< relative error against the reference; -1 when not checked
    std::vector<double> times_ms;
    double median_ms = -1; ///< -1 unless status is ok
    // Provenance.
    int trial = 0;
    uint32_t seed = 0;
    std::string shard = "0/1";
    std::string halide, machine, time;

    bool ok() const { return status == "ok"; }
    /** True if `other` tuned the same layer, target, shape and thread count. */
    bool same_task(const TrialRecord &other) const;
};

nlohmann::json to_json(const TrialRecord &record);

/** A record from a log line's JSON, or an empty optional and why not in `why`. */
std::optional<TrialRecord> record_from_json(const nlohmann::json &json, std::string &why);

struct LogContents {
    std::vector<TrialRecord> records;
    std::vector<std::string> warnings; ///< "FILE:LINE: why" for each line skipped
};

/** Every record of the log at `path` (none if it does not exist); bad lines are skipped. */
LogContents read_log(const std::string &path);

/** Appends one line; returns an empty string, or why it could not. */
std::string append_record(const std::string &path, const TrialRecord &record);

/** The median of `times` (the mean of the middle two for an even count). */
double median(std::vector<double> times);

/** "CPU model name, N cores" from /proc/cpuinfo, or "unknown". */
std::string machine_description();

/** UTC now, ISO 8601. */
std::string utc_now();

/**
 * The record `attngen tune export` keeps per (target class, spec class, shape class): among
 * attngen-scheduled ok records, the parameters (any measured) with the best geometric mean, over
 * the shapes of the class, of time relative to that shape's best time (re-measurements preferred
 * where they exist; a shape a candidate was not measured on counts as that shape's defaults' time).
 */
std::vector<TrialRecord> best_per_class(const std::vector<TrialRecord> &records);

} // namespace attngen::cli
