// The table of schedule parameters: every entry is consistent with itself, names are unique,
// old names still read, values round-trip through their text, and the tuner's conditions hold.
#include "schedules/schedule_params.h"
#include "tuning_log.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>

using attngen::ScheduleFamily;
using attngen::ScheduleParam;

namespace {

bool in_range(const ScheduleParam &param, int value) {
    return value >= param.min && value <= param.max;
}

} // namespace

TEST_CASE("each schedule parameter's defaults and search values lie in its range") {
    for (const ScheduleParam &param : attngen::schedule_param_table()) {
        INFO(param.name);
        CHECK(param.min <= param.max);
        CHECK(std::string(param.meaning).size() > 20);
        if (param.family == ScheduleFamily::cpu) {
            const attngen::CpuDefaults &d = param.cpu_defaults;
            for (int value : {d.avx512, d.avx2, d.sse41, d.arm})
                CHECK(in_range(param, value));
        } else {
            CHECK(std::string(param.default_rule).size() > 0);
        }
        for (int value : param.search)
            CHECK(in_range(param, value));
        CHECK((param.search_values == attngen::SearchValues::listed) != param.search.empty());
        if (param.kind() == "flag")
            CHECK((param.min == 0 && param.max == 1));
    }
}

TEST_CASE("a parameter's current and old names name it alone within its family") {
    for (const ScheduleFamily family : {ScheduleFamily::cpu, ScheduleFamily::gpu}) {
        std::set<std::string> names;
        for (const ScheduleParam &param : attngen::schedule_param_table()) {
            if (param.family != family)
                continue;
            INFO(param.name);
            CHECK(names.insert(param.name).second);
            for (const char *old : param.old_names)
                CHECK(names.insert(old).second);
            CHECK(attngen::find_schedule_param(family, param.name) == &param);
            for (const char *old : param.old_names)
                CHECK(attngen::find_schedule_param(family, old) == &param);
        }
    }
    // The CPU and GPU parameters of one name mean one thing: the split-KV form's chunk.
    CHECK(attngen::find_schedule_param(ScheduleFamily::cpu, "step_keys") == nullptr);
    CHECK(attngen::find_schedule_param(ScheduleFamily::gpu, "flash_chunk") == nullptr);
    CHECK(std::string(attngen::find_schedule_param(ScheduleFamily::gpu, "key_chunk")->name) ==
          "step_keys");
    CHECK(std::string(attngen::find_schedule_param(ScheduleFamily::cpu, "key_chunk")->name) ==
          "flash_chunk");
}

TEST_CASE("every value a parameter takes reads back from its text, and nothing outside") {
    for (const ScheduleParam &param : attngen::schedule_param_table()) {
        INFO(param.name);
        for (int value : {param.min, param.max, (param.min + param.max) / 2}) {
            std::map<std::string, int> named;
            const std::string text = std::string(param.name) + "=" + param.format(value);
            REQUIRE(attngen::parse_named_params(param.family, text, named).empty());
            CHECK(named.at(param.name) == value);
            // The numeric form, as tuning logs and older scripts write flags and enums.
            named.clear();
            REQUIRE(attngen::parse_named_params(
                        param.family, std::string(param.name) + ":" + std::to_string(value), named)
                        .empty());
            CHECK(named.at(param.name) == value);
        }
        std::map<std::string, int> named;
        const std::string above = std::string(param.name) + "=" + std::to_string(param.max + 1);
        const std::string problem = attngen::parse_named_params(param.family, above, named);
        CHECK(problem.find(std::string("schedule parameter ") + param.name + " must be") == 0);
        CHECK(named.empty());
    }
}

TEST_CASE("setting a parameter in a record and reading it back gives the value") {
    for (const ScheduleParam &param : attngen::schedule_param_table()) {
        INFO(param.name);
        const int value = param.max;
        if (param.family == ScheduleFamily::cpu) {
            attngen::CpuScheduleParams params;
            attngen::set_param_value(param, params, value);
            CHECK(attngen::param_value(param, params) == value);
        } else {
            attngen::GpuScheduleParams params;
            attngen::set_param_value(param, params, value);
            CHECK(attngen::param_value(param, params) == value);
        }
    }
}

TEST_CASE("the tuner searches the split-KV chunk alone for decode, the GEMMs with projections") {
    auto searched_names = [](bool decode, bool projections) {
        std::set<std::string> names;
        for (const ScheduleParam &param : attngen::schedule_param_table())
            if (param.family == ScheduleFamily::cpu &&
                attngen::searched(param, decode, projections))
                names.insert(param.name);
        return names;
    };
    CHECK(searched_names(true, true) == std::set<std::string>{"split_chunk"});
    const std::set<std::string> plain = searched_names(false, false);
    CHECK(plain.count("copy_values") == 1);
    CHECK(plain.count("gemm_rows") == 0);
    CHECK(plain.count("split_chunk") == 0);
    const std::set<std::string> projected = searched_names(false, true);
    CHECK(projected.count("gemm_rows") == 1);
    CHECK(projected.count("copy_values") == 0);
}

TEST_CASE("a tuning log written with old parameter names is read with the current ones") {
    const std::string line =
        R"({"spec_hash":"0123456789abcdef","layer":"l","spec_class":"d64-g1-none-f32",)"
        R"("target":"x86-64-linux-avx2","target_class":"x86-64-linux-avx2","shape":[1,64,64],)"
        R"("shape_class":"prefill","threads":2,"scheduler":"attngen",)"
        R"("params":{"query_block":6,"key_chunk":256,"kv_chunk":0},"status":"ok",)"
        R"("times_ms":[1.5],"median_ms":1.5})";
    std::string why;
    const std::optional<attngen::cli::TrialRecord> record =
        attngen::cli::record_from_json(nlohmann::json::parse(line), why);
    INFO(why);
    REQUIRE(record.has_value());
    CHECK(record->params ==
          attngen::cli::ParamPoint{{"value_queries", 6}, {"flash_chunk", 256}, {"split_chunk", 0}});
}

TEST_CASE("a removed parameter is refused by name, and old logs that name it are read sensibly") {
    std::map<std::string, int> named;
    const std::string problem =
        attngen::parse_named_params(ScheduleFamily::cpu, "fused_qkv=true", named);
    CHECK(problem.find("schedule parameter fused_qkv was removed") == 0);
    CHECK(named.empty());
    CHECK(attngen::find_schedule_param(ScheduleFamily::cpu, "fused_qkv") == nullptr);
    CHECK(attngen::find_removed_param(ScheduleFamily::gpu, "fused_qkv") == nullptr);
    auto log_line = [](const std::string &fused) {
        return R"({"spec_hash":"0123456789abcdef","layer":"l","spec_class":"d64-g1-none-f32",)"
               R"("target":"x86-64-linux-avx2","target_class":"x86-64-linux-avx2",)"
               R"("shape":[1,64,64],"shape_class":"prefill","threads":2,"scheduler":"attngen",)"
               R"("params":{"gemm_rows":5,"fused_qkv":)" +
               fused + R"(},"status":"ok","times_ms":[1.5],"median_ms":1.5})";
    };
    // At false it meant the separate projections attngen still has: the key is dropped.
    std::string why;
    const std::optional<attngen::cli::TrialRecord> separate =
        attngen::cli::record_from_json(nlohmann::json::parse(log_line("0")), why);
    INFO(why);
    REQUIRE(separate.has_value());
    CHECK(separate->params == attngen::cli::ParamPoint{{"gemm_rows", 5}});
    // At true the trial ran a schedule that is gone: the record is skipped, saying why.
    const std::optional<attngen::cli::TrialRecord> fused =
        attngen::cli::record_from_json(nlohmann::json::parse(log_line("1")), why);
    CHECK_FALSE(fused.has_value());
    CHECK(why.find("params.fused_qkv is 1, a schedule that was removed") == 0);
}

TEST_CASE("alternate_chunks was removed: refused by name, dropped from old logs at any value") {
    std::map<std::string, int> named;
    const std::string problem =
        attngen::parse_named_params(ScheduleFamily::cpu, "alternate_chunks=false", named);
    CHECK(problem.find("schedule parameter alternate_chunks was removed") == 0);
    CHECK(attngen::find_schedule_param(ScheduleFamily::cpu, "alternate_chunks") == nullptr);
    // Both of its values ran as fast as the one order attngen has now, so a record's timing
    // stands without the key.
    for (const char *value : {"0", "1"}) {
        const std::string line =
            R"({"spec_hash":"0123456789abcdef","layer":"l","spec_class":"d64-g1-none-f32",)"
            R"("target":"x86-64-linux-avx2","target_class":"x86-64-linux-avx2",)"
            R"("shape":[1,64,64],"shape_class":"prefill","threads":2,"scheduler":"attngen",)"
            R"("params":{"flash_chunk":128,"alternate_chunks":)" +
            std::string(value) + R"(},"status":"ok","times_ms":[1.5],"median_ms":1.5})";
        std::string why;
        const std::optional<attngen::cli::TrialRecord> record =
            attngen::cli::record_from_json(nlohmann::json::parse(line), why);
        INFO("alternate_chunks " << value << ": " << why);
        REQUIRE(record.has_value());
        CHECK(record->params == attngen::cli::ParamPoint{{"flash_chunk", 128}});
    }
}
