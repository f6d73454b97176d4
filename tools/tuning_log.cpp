// Reading, writing and summarizing tuning logs (JSON lines).
#include "tuning_log.h"

#include "schedules/schedule_params.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

namespace attngen::cli {

using nlohmann::json;

bool TrialRecord::same_task(const TrialRecord &other) const {
    return spec_hash == other.spec_hash && target == other.target &&
           to_string(shape) == to_string(other.shape) && threads == other.threads;
}

json to_json(const TrialRecord &r) {
    json params = json::object();
    for (const auto &entry : r.params)
        params[entry.first] = entry.second;
    return json{{"spec_hash", r.spec_hash},
                {"layer", r.layer},
                {"spec_class", r.spec_class},
                {"target", r.target},
                {"target_class", r.target_class},
                {"shape", {r.shape.batch, r.shape.queries, r.shape.keys}},
                {"shape_class", r.shape_class},
                {"threads", r.threads},
                {"scheduler", r.scheduler},
                {"params", params},
                {"phase", r.phase},
                {"defaults", r.defaults},
                {"status", r.status},
                {"message", r.message},
                {"error", r.error},
                {"times_ms", r.times_ms},
                {"median_ms", r.median_ms},
                {"trial", r.trial},
                {"seed", r.seed},
                {"shard", r.shard},
                {"halide", r.halide},
                {"machine", r.machine},
                {"time", r.time}};
}

namespace {

/** A JSON integer in lo..hi; anything else (a real, a string, out of range) throws. */
long long bounded_integer(const json &value, const char *what, long long lo, long long hi) {
    if (!value.is_number_integer())
        throw std::invalid_argument(std::string(what) + " is not an integer");
    const long long number =
        value.is_number_unsigned()
            ? static_cast<long long>(std::min<uint64_t>(value.get<uint64_t>(), uint64_t(hi) + 1))
            : value.get<long long>();
    if (number < lo || number > hi)
        throw std::invalid_argument(std::string(what) + " is " + std::to_string(number) +
                                    ", not in " + std::to_string(lo) + ".." + std::to_string(hi));
    return number;
}

int bounded_int(const json &value, const char *what, int lo, int hi) {
    return static_cast<int>(bounded_integer(value, what, lo, hi));
}

/** A target class names a file of schedules/tuned: letters, digits, '_' and '-' only. */
bool is_file_name_word(const std::string &text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
}

} // namespace

std::optional<TrialRecord> record_from_json(const json &j, std::string &why) {
    if (!j.is_object()) {
        why = "not a JSON object";
        return std::nullopt;
    }
    TrialRecord r;
    try {
        for (const char *field : {"spec_hash", "target", "shape", "scheduler", "params", "status"})
            if (!j.contains(field)) {
                why = std::string("no \"") + field + "\" field";
                return std::nullopt;
            }
        r.spec_hash = j.at("spec_hash").get<std::string>();
        r.layer = j.value("layer", "");
        r.spec_class = j.value("spec_class", "");
        r.target = j.at("target").get<std::string>();
        r.target_class = j.value("target_class", "");
        if (!is_file_name_word(r.target_class)) {
            why = "\"target_class\" is '" + r.target_class +
                  "', not a name of letters, digits, '_' and '-'";
            return std::nullopt;
        }
        const json &shape = j.at("shape");
        if (!shape.is_array() || shape.size() != 3) {
            why = "\"shape\" is not [B, Lq, Lk]";
            return std::nullopt;
        }
        r.shape = {bounded_int(shape[0], "shape[0]", 1, 4096),
                   bounded_int(shape[1], "shape[1]", 1, 1 << 20),
                   bounded_int(shape[2], "shape[2]", 1, 1 << 20)};
        r.shape_class = j.value("shape_class", "");
        r.threads = j.contains("threads") ? bounded_int(j["threads"], "threads", 0, 1024) : 0;
        r.scheduler = j.at("scheduler").get<std::string>();
        // Old parameter names (a log written before a rename) are read as the current ones. A
        // removed parameter at the value that meant what attngen does now (or at any value, where
        // every value ran as fast) is dropped; at any other, the trial ran a schedule attngen no
        // longer has.
        const ScheduleFamily family =
            r.target_class == "opencl" || r.target_class.rfind("cuda", 0) == 0
                ? ScheduleFamily::gpu
                : ScheduleFamily::cpu;
        for (const auto &item : j.at("params").items()) {
            const int value = bounded_int(item.value(), ("params." + item.key()).c_str(), 0, 65536);
            if (const RemovedParam *removed = find_removed_param(family, item.key())) {
                if (removed->drops(value))
                    continue;
                why = "params." + item.key() + " is " + std::to_string(value) +
                      ", a schedule that was removed (" + removed->why + ")";
                return std::nullopt;
            }
            const ScheduleParam *param = find_schedule_param(family, item.key());
            r.params[param != nullptr ? param->name : item.key()] = value;
        }
        r.phase = j.value("phase", "search");
        r.defaults = j.value("defaults", false);
        r.status = j.at("status").get<std::string>();
        r.message = j.value("message", "");
        r.error = j.value("error", -1.0);
        r.times_ms = j.value("times_ms", std::vector<double>());
        r.median_ms = j.value("median_ms", -1.0);
        r.trial = j.contains("trial") ? bounded_int(j["trial"], "trial", 0, 1 << 30) : 0;
        r.seed = j.contains("seed")
                     ? static_cast<uint32_t>(bounded_integer(j["seed"], "seed", 0, UINT32_MAX))
                     : 0u;
        r.shard = j.value("shard", "0/1");
        r.halide = j.value("halide", "");
        r.machine = j.value("machine", "");
        r.time = j.value("time", "");
    } catch (const json::exception &e) {
        why = std::string("a field has the wrong type (") + e.what() + ")";
        return std::nullopt;
    } catch (const std::invalid_argument &e) {
        why = e.what();
        return std::nullopt;
    }
    if (r.ok() && !(r.median_ms > 0)) {
        why = "status ok without a positive median_ms";
        return std::nullopt;
    }
    return r;
}

LogContents read_log(const std::string &path) {
    LogContents contents;
    std::ifstream stream(path);
    std::string line;
    for (int number = 1; std::getline(stream, line); number++) {
        if (line.find_first_not_of(" \t\r") == std::string::npos)
            continue;
        std::string why;
        const json parsed = json::parse(line, nullptr, false);
        std::optional<TrialRecord> record;
        if (parsed.is_discarded())
            why = "not valid JSON (a truncated or corrupted line?)";
        else
            record = record_from_json(parsed, why);
        if (record)
            contents.records.push_back(*record);
        else
            contents.warnings.push_back(path + ":" + std::to_string(number) + ": " + why +
                                        "; line skipped");
    }
    return contents;
}

std::string append_record(const std::string &path, const TrialRecord &record) {
    std::ofstream stream(path, std::ios::app);
    stream << to_json(record).dump() << '\n';
    stream.flush();
    return stream ? "" : "cannot append to the tuning log '" + path + "'";
}

double median(std::vector<double> times) {
    if (times.empty())
        return -1;
    std::sort(times.begin(), times.end());
    const size_t n = times.size();
    return n % 2 == 1 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

std::string machine_description() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line, model = "unknown CPU";
    while (std::getline(cpuinfo, line))
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
            model = line.substr(line.find(':') + 2);
            break;
        }
    return model + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores";
}

std::string utc_now() {
    std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char text[32];
    std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
    return text;
}

std::vector<TrialRecord> best_per_class(const std::vector<TrialRecord> &records) {
    // A task is one (spec, target, shape, threads); a figure is a candidate's time on a task.
    auto task_key = [](const TrialRecord &r) {
        return r.spec_hash + "|" + r.target + "|" + to_string(r.shape) + "|" +
               std::to_string(r.threads);
    };
    auto class_key = [](const TrialRecord &r) {
        return r.target_class + "|" + r.spec_class + "|" + r.shape_class;
    };
    struct Figures {
        std::map<ParamPoint, std::vector<double>> remeasured, searched;
        std::map<ParamPoint, const TrialRecord *> record;
        const TrialRecord *defaults = nullptr;
        std::map<ParamPoint, double> best() const {
            std::map<ParamPoint, double> figure;
            for (const auto &entry : searched)
                figure[entry.first] = *std::min_element(entry.second.begin(), entry.second.end());
            for (const auto &entry : remeasured)
                figure[entry.first] = median(entry.second);
            return figure;
        }
    };
    std::map<std::string, std::map<std::string, Figures>> classes; // class -> task -> figures
    for (const TrialRecord &r : records) {
        if (!r.ok() || r.scheduler != "attngen")
            continue;
        Figures &figures = classes[class_key(r)][task_key(r)];
        (r.phase == "remeasure" ? figures.remeasured : figures.searched)[r.params].push_back(
            r.median_ms);
        figures.record[r.params] = &r;
        if (r.defaults)
            figures.defaults = &r;
    }
    std::vector<TrialRecord> winners;
    for (const auto &cls : classes) {
        std::map<std::string, std::map<ParamPoint, double>> figures;
        std::set<ParamPoint> candidates;
        for (const auto &task : cls.second) {
            figures[task.first] = task.second.best();
            for (const auto &entry : figures[task.first])
                candidates.insert(entry.first);
        }
        double best_score = INFINITY;
        const TrialRecord *best_record = nullptr;
        for (const ParamPoint &candidate : candidates) {
            double log_sum = 0;
            const TrialRecord *example = nullptr;
            for (const auto &task : cls.second) {
                const std::map<ParamPoint, double> &figure = figures[task.first];
                double best = INFINITY;
                for (const auto &entry : figure)
                    best = std::min(best, entry.second);
                auto found = figure.find(candidate);
                double ratio = 2.0; // unmeasured here, and no defaults to stand in for it
                if (found != figure.end()) {
                    ratio = found->second / best;
                    example = task.second.record.at(candidate);
                } else if (task.second.defaults != nullptr &&
                           figure.count(task.second.defaults->params)) {
                    ratio = figure.at(task.second.defaults->params) / best;
                }
                log_sum += std::log(ratio);
            }
            if (log_sum < best_score) {
                best_score = log_sum;
                best_record = example;
            }
        }
        if (best_record == nullptr)
            continue;
        TrialRecord winner = *best_record;
        winner.message =
            "geometric mean " + std::to_string(std::exp(best_score / double(cls.second.size()))) +
            "x the best per shape over " + std::to_string(cls.second.size()) + " shape(s)";
        winners.push_back(winner);
    }
    return winners;
}

} // namespace attngen::cli
