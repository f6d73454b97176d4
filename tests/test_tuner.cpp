// The tuner's search, protocol and records, driven with costs the tests know: the search finds
// a known best, beats random search, never picks an invalid candidate, resumes without
// repeating a trial, splits into disjoint shards, and survives a damaged log.
#include "tuner.h"
#include "tuning_log.h"
#include "tuning_search.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

using namespace attngen::cli;

namespace {

/** A space shaped like the CPU schedule's (1134 points), defaults away from the best. */
ParamSpace cpu_like_space() {
    return {{{"query_vectors", {1, 2, 3, 4, 5, 6}, 3},
             {"key_block", {1, 2, 3, 4, 5, 6, 8}, 4},
             {"value_queries", {1, 2, 3, 4, 5, 6, 8, 10, 12}, 6},
             {"d_vectors", {1, 2, 4}, 2}}};
}

/** A smooth bowl with its single minimum at `best`, plus a ridge, like register pressure. */
double bowl(const ParamPoint &p, const ParamPoint &best) {
    double cost = 10;
    for (const auto &entry : best) {
        const double d = std::log2(double(p.at(entry.first))) - std::log2(double(entry.second));
        cost += 3 * d * d;
    }
    if (p.at("query_vectors") * p.at("key_block") > 16) // spills
        cost += 20;
    return cost;
}

const ParamPoint known_best = {
    {"query_vectors", 2}, {"key_block", 6}, {"value_queries", 8}, {"d_vectors", 1}};

/** A measurement whose median is the cost, in ms. */
Measurement measured(double cost, int runs) {
    Measurement m;
    m.status = "ok";
    m.error = 1e-7;
    m.times_ms.assign(static_cast<size_t>(runs), cost);
    return m;
}

TrialRecord task_identity() {
    TrialRecord identity;
    identity.spec_hash = "0123456789abcdef";
    identity.layer = "plain";
    identity.spec_class = "d64-g1-none-f32";
    identity.target = "x86-64-linux-avx-avx2-f16c-fma-sse41";
    identity.target_class = "x86-64-linux-avx2";
    identity.shape = {1, 512, 512};
    identity.shape_class = "prefill";
    identity.threads = 2;
    identity.halide = "14.0.0";
    identity.machine = "test machine";
    return identity;
}

std::string temp_path(const std::string &name) {
    return (std::filesystem::temp_directory_path() / ("attngen_test_" + name)).string();
}

/** Trials until the search (or random sampling) first proposes `best`, at most `limit`. */
int trials_to_find(ParamSearch &search, const ParamPoint &best, int limit) {
    for (int trial = 1; trial <= limit; trial++) {
        std::optional<ParamPoint> point = search.next();
        if (!point)
            return limit + 1;
        if (*point == best)
            return trial;
        search.observe(*point, bowl(*point, best));
    }
    return limit + 1;
}

} // namespace

TEST_CASE("the search starts from the defaults and finds the known best of a 1134-point space") {
    for (uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
        INFO("seed " << seed);
        ParamSearch search(cpu_like_space(), seed);
        REQUIRE(search.next() == cpu_like_space().defaults());
        ParamSearch fresh(cpu_like_space(), seed);
        CHECK(trials_to_find(fresh, known_best, 120) <= 120);
    }
}

TEST_CASE("the search needs far fewer trials than random sampling to reach the best") {
    // Random sampling needs 1134/2 trials on average; the search must do much better.
    double search_log = 0;
    for (uint32_t seed = 1; seed <= 10; seed++) {
        ParamSearch search(cpu_like_space(), seed);
        search_log += std::log(double(trials_to_find(search, known_best, 1134)));
    }
    const double search_mean = std::exp(search_log / 10);
    std::printf("trials to the best, geometric mean over seeds 1..10: %.1f (random: ~567)\n",
                search_mean);
    CHECK(search_mean < 150);
}

TEST_CASE("the search is reproducible from its seed") {
    ParamSearch a(cpu_like_space(), 42), b(cpu_like_space(), 42);
    for (int i = 0; i < 30; i++) {
        std::optional<ParamPoint> pa = a.next(), pb = b.next();
        REQUIRE(pa == pb);
        a.observe(*pa, bowl(*pa, known_best));
        b.observe(*pb, bowl(*pb, known_best));
    }
}

TEST_CASE("a small space is searched exhaustively, each point once") {
    ParamSpace space{{{"a", {1, 2, 3}, 2}, {"b", {1, 2}, 1}}};
    ParamSearch search(space, 7);
    std::set<ParamPoint> seen;
    while (std::optional<ParamPoint> point = search.next()) {
        REQUIRE(seen.insert(*point).second);
        search.observe(*point, 1.0);
    }
    CHECK(seen.size() == 6);
}

TEST_CASE("shards split the space into disjoint parts that cover it, defaults in each") {
    ParamSpace space{{{"a", {1, 2, 3, 4}, 2}, {"b", {1, 2, 4}, 1}}};
    std::set<ParamPoint> all;
    size_t total = 0;
    for (int shard = 0; shard < 3; shard++) {
        ParamSearch search(space, 5, shard, 3);
        std::set<ParamPoint> part;
        while (std::optional<ParamPoint> point = search.next()) {
            part.insert(*point);
            search.observe(*point, 1.0);
        }
        CHECK(part.count(space.defaults()) == 1);
        total += part.size() - 1;
        all.insert(part.begin(), part.end());
    }
    CHECK(all.size() == 12);
    CHECK(total + 1 == 12); // disjoint apart from the defaults
}

TEST_CASE("restricting the space checks names and values") {
    ParamSpace space = cpu_like_space();
    CHECK(restrict_space(space, "key_block=2/4;d_vectors=1") == "");
    CHECK(space.axes[1].values == std::vector<int>{2, 4});
    CHECK(space.axes[1].default_value == 4);
    CHECK(space.axes[3].default_value == 1); // 2 is no longer allowed: the first value
    CHECK(restrict_space(space, "tile=4").find("unknown parameter in 'tile=4'") !=
          std::string::npos);
    CHECK(restrict_space(space, "key_block=0").find("1..64") != std::string::npos);
    CHECK(restrict_space(space, "key_block=2/x").find("1..64") != std::string::npos);
}

TEST_CASE("tune finds the known best, logs every trial and re-measures the top few") {
    const std::string log = temp_path("tune_best.jsonl");
    std::remove(log.c_str());
    TuneOptions options;
    options.max_trials = 150;
    options.runs = 5;
    options.seed = 3;
    options.log_path = log;
    int measured_count = 0;
    MeasureFn measure = [&](const std::string &, const ParamPoint &p, int runs, double) {
        measured_count++;
        return measured(bowl(p, known_best), runs);
    };
    TuneOutcome outcome = tune(task_identity(), cpu_like_space(), measure, options, {});
    REQUIRE(outcome.winner);
    CHECK(outcome.winner->params == known_best);
    CHECK(outcome.winner->median_ms == Approx(10));
    CHECK(outcome.defaults_ms);
    CHECK(outcome.new_trials == 150);
    // 150 search trials, then the top 3 and the defaults, 2 rounds each.
    LogContents contents = read_log(log);
    CHECK(contents.warnings.empty());
    CHECK(contents.records.size() == 150 + 8);
    CHECK(measured_count == 158);
    std::remove(log.c_str());
}

TEST_CASE("invalid candidates are logged with their status and never chosen") {
    // The cheapest point gives a wrong result: the winner must be the best valid one.
    ParamSpace space{{{"a", {1, 2, 3}, 2}, {"b", {1, 2}, 1}}};
    const ParamPoint wrong = {{"a", 3}, {"b", 2}}, crash = {{"a", 1}, {"b", 2}};
    MeasureFn measure = [&](const std::string &, const ParamPoint &p, int runs, double) {
        if (p == wrong)
            return Measurement{"wrong_result", "relative error 0.5", 0.5, {}};
        if (p == crash)
            return Measurement{"crashed", "killed by signal Segmentation fault", -1, {}};
        return measured(10 - 2 * p.at("a") - p.at("b"), runs);
    };
    TuneOptions options;
    options.max_trials = 6;
    TuneOutcome outcome = tune(task_identity(), space, measure, options, {});
    REQUIRE(outcome.winner);
    CHECK(outcome.winner->params == ParamPoint{{"a", 3}, {"b", 1}});
    int wrong_records = 0, crash_records = 0;
    for (const TrialRecord &r : outcome.records) {
        wrong_records += r.status == "wrong_result";
        crash_records += r.status == "crashed";
        if (!r.ok())
            CHECK(r.phase == "search"); // never re-measured
    }
    CHECK(wrong_records == 1);
    CHECK(crash_records == 1);
}

TEST_CASE("a resumed search does not repeat finished trials") {
    const std::string log = temp_path("tune_resume.jsonl");
    std::remove(log.c_str());
    std::multiset<ParamPoint> measured_points;
    MeasureFn measure = [&](const std::string &, const ParamPoint &p, int runs, double) {
        measured_points.insert(p);
        return measured(bowl(p, known_best), runs);
    };
    TuneOptions options;
    options.max_trials = 12;
    options.remeasure_rounds = 0;
    options.log_path = log;
    tune(task_identity(), cpu_like_space(), measure, options, read_log(log).records);
    CHECK(measured_points.size() == 12);

    options.max_trials = 20;
    const std::multiset<ParamPoint> first_run = measured_points;
    measured_points.clear();
    TuneOutcome second =
        tune(task_identity(), cpu_like_space(), measure, options, read_log(log).records);
    CHECK(second.resumed == 12);
    CHECK(second.new_trials == 8);
    CHECK(measured_points.size() == 8);
    for (const ParamPoint &point : measured_points)
        CHECK(first_run.count(point) == 0);
    // Another task (another shape) in the same log resumes nothing.
    TrialRecord other = task_identity();
    other.shape = {1, 1, 4096};
    TuneOutcome third = tune(other, cpu_like_space(), measure, options, read_log(log).records);
    CHECK(third.resumed == 0);
    std::remove(log.c_str());
}

TEST_CASE("a corrupted or truncated log line is reported and skipped") {
    const std::string log = temp_path("tune_corrupt.jsonl");
    TrialRecord good = task_identity();
    good.params = {{"a", 1}};
    good.status = "ok";
    good.times_ms = {2, 1, 3};
    good.median_ms = 2;
    const std::string line = to_json(good).dump();
    {
        std::ofstream out(log);
        out << line << '\n'
            << line.substr(0, line.size() / 2) << '\n' // truncated by a crash
            << "\n"                                    // blank lines are fine
            << "[1, 2, 3]\n"                           // JSON, not a record
            << R"({"spec_hash": "x", "target": "t", "shape": [1, 2], "scheduler": "attngen",
                   "params": {}, "status": "ok", "median_ms": 1})"
            << '\n' // the line break splits this record
            << R"({"spec_hash": 7, "target": "t", "shape": [1,2,2], "scheduler": "attngen",)"
               R"( "params": {}, "status": "ok", "median_ms": 1})"
            << '\n'
            << line << '\n';
    }
    LogContents contents = read_log(log);
    CHECK(contents.records.size() == 2);
    for (const std::string &w : contents.warnings)
        std::printf("%s\n", w.c_str());
    REQUIRE(contents.warnings.size() == 5);
    CHECK(contents.warnings[0].find(":2: not valid JSON") != std::string::npos);
    CHECK(contents.warnings[1].find(":4: not a JSON object") != std::string::npos);
    CHECK(contents.warnings[2].find(":5: not valid JSON") != std::string::npos);
    CHECK(contents.warnings[3].find(":6: not valid JSON") != std::string::npos);
    CHECK(contents.warnings[4].find(":7: a field has the wrong type") != std::string::npos);
    CHECK(contents.records[0].median_ms == 2);
    std::remove(log.c_str());
}

TEST_CASE("log fields out of range or naming a path are reported and skipped") {
    const std::string log = temp_path("tune_fields.jsonl");
    TrialRecord good = task_identity();
    good.params = {{"a", 1}};
    good.status = "ok";
    good.times_ms = {2};
    good.median_ms = 2;
    const nlohmann::json base = to_json(good);
    auto changed = [&](const char *field, const nlohmann::json &value) {
        nlohmann::json line = base;
        line[field] = value;
        return line.dump();
    };
    {
        std::ofstream out(log);
        out << changed("target_class", "../../escaped") << '\n' // export would write outside -o
            << changed("shape", {1, 1e300, 1}) << '\n'          // a real, not an integer
            << changed("shape", {1, 4294967297LL, 1}) << '\n'   // would wrap to 1 as an int
            << changed("params", {{"a", 2.5}}) << '\n'
            << changed("seed", -1) << '\n'
            << base.dump() << '\n';
    }
    LogContents contents = read_log(log);
    for (const std::string &w : contents.warnings)
        std::printf("%s\n", w.c_str());
    CHECK(contents.records.size() == 1);
    REQUIRE(contents.warnings.size() == 5);
    CHECK(contents.warnings[0].find(":1: \"target_class\" is '../../escaped'") !=
          std::string::npos);
    CHECK(contents.warnings[1].find(":2: shape[1] is not an integer") != std::string::npos);
    CHECK(contents.warnings[2].find(":3: shape[1] is 1048577, not in 1..1048576") !=
          std::string::npos);
    CHECK(contents.warnings[3].find(":4: params.a is not an integer") != std::string::npos);
    CHECK(contents.warnings[4].find(":5: seed is -1, not in 0..4294967295") != std::string::npos);
    std::remove(log.c_str());
}

TEST_CASE("export keeps, per class, the parameters best over all the class's shapes") {
    // Two prefill shapes: A is best on the first, B on the second, C is second-best on both.
    auto record = [](ProblemShape shape, ParamPoint params, double ms, bool defaults) {
        TrialRecord r = task_identity();
        r.shape = shape;
        r.shape_class = shape.queries <= 16 ? "decode" : "prefill";
        r.params = std::move(params);
        r.status = "ok";
        r.median_ms = ms;
        r.defaults = defaults;
        return r;
    };
    const ParamPoint a{{"x", 1}}, b{{"x", 2}}, c{{"x", 3}}, d{{"x", 4}};
    std::vector<TrialRecord> records = {
        record({1, 512, 512}, d, 20, true),    record({1, 512, 512}, a, 10, false),
        record({1, 512, 512}, c, 11, false),   record({1, 1024, 1024}, d, 40, true),
        record({1, 1024, 1024}, b, 20, false), record({1, 1024, 1024}, c, 22, false)};
    std::vector<TrialRecord> winners = best_per_class(records);
    REQUIRE(winners.size() == 1);
    // A: 1.0 and (defaults) 2.0; B: 2.0 and 1.0; C: 1.1 and 1.1 -> C.
    CHECK(winners[0].params == c);
    // A decode shape is a class of its own.
    records.push_back(record({1, 1, 4096}, d, 5, true));
    CHECK(best_per_class(records).size() == 2);
}
