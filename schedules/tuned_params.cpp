// Classes of targets, specs and shapes, and the lookup of tuned parameters in schedules/tuned/.
#include "tuned_params.h"
#include "schedule_params.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

namespace attngen {

std::string target_class(const Halide::Target &target) {
    if (target.has_feature(Halide::Target::CUDA)) {
        int capability = target.get_cuda_capability_lower_bound();
        return "cuda_capability_" + std::to_string(capability);
    }
    if (target.has_feature(Halide::Target::OpenCL))
        return "opencl";
    const std::string os = target.os == Halide::Target::Linux ? "linux" : "other";
    if (target.arch == Halide::Target::ARM)
        return "arm-" + std::to_string(target.bits) + "-" + os;
    const int lanes = target.natural_vector_size<float>();
    const char *isa = lanes >= 16 ? "avx512" : lanes == 8 ? "avx2" : "sse41";
    return "x86-" + std::to_string(target.bits) + "-" + os + "-" + isa;
}

std::string spec_class(const AttentionSpec &spec) {
    std::string name = "d" + std::to_string(spec.resolved_head_dim()) + "-g" +
                       std::to_string(spec.group_size()) + "-";
    std::string mask = to_string(spec.mask);
    std::replace(mask.begin(), mask.end(), '(', '_');
    mask.erase(std::remove(mask.begin(), mask.end(), ')'), mask.end());
    name += mask + "-" + to_string(spec.dtype);
    if (spec.kv_dtype)
        name += "-kv" + std::string(to_string(*spec.kv_dtype));
    if (spec.resolved_value_dim() != spec.resolved_head_dim())
        name += "-v" + std::to_string(spec.resolved_value_dim());
    if (spec.score_mod || !spec.mask_predicates.empty())
        name += "-mod";
    if (spec.projections.any())
        name += "-proj" + std::to_string(spec.resolved_model_dim());
    return name;
}

std::string shape_class(int queries) {
    return queries <= 16 ? "decode" : "prefill";
}

bool is_shape_class(const std::string &name) {
    return name == "prefill" || name == "decode";
}

std::string spec_hash(const AttentionSpec &spec) {
    std::string canonical;
    for (const auto &entry : spec_to_params(spec)) {
        // Without rotary embeddings or a cache, the hash of every layer from before they existed.
        const bool rope_field = entry.first.rfind("rope", 0) == 0 || entry.first == "rotary_dim";
        const bool cache_field = entry.first.rfind("cache", 0) == 0;
        // Likewise without sinks, a kv_dtype or a value_dim of their own.
        if ((entry.first == "sinks" && !spec.sinks) ||
            (entry.first == "kv_dtype" && !spec.kv_dtype) ||
            (entry.first == "value_dim" && spec.value_dim == 0))
            continue;
        // The lse output changes no schedule's best parameters: its tuned records are the
        // layer's without it.
        if (entry.first == "outputs")
            continue;
        if ((!rope_field || spec.rope.any()) && (!cache_field || spec.cache.any()))
            canonical += entry.first + "=" + entry.second + ";";
    }
    if (spec.score_mod)
        canonical += "score_mod=" + to_string(*spec.score_mod) + ";";
    for (const ModExprPtr &predicate : spec.mask_predicates)
        canonical += "mask_if=" + to_string(*predicate) + ";";
    uint64_t hash = 1469598103934665603ull;
    for (unsigned char c : canonical) {
        hash ^= c;
        hash *= 1099511628211ull;
    }
    char text[17];
    std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
    return text;
}

TunedLookup find_tuned_params(const std::string &directory, const Halide::Target &target,
                              const AttentionSpec &spec, const std::string &shape) {
    namespace fs = std::filesystem;
    const std::string wanted_target = target_class(target), wanted_spec = spec_class(spec);
    TunedLookup lookup;
    const std::string key = wanted_target + " " + wanted_spec + " " + shape;
    const ScheduleFamily family =
        target.has_feature(Halide::Target::CUDA) || target.has_feature(Halide::Target::OpenCL)
            ? ScheduleFamily::gpu
            : ScheduleFamily::cpu;
    std::error_code error;
    std::vector<fs::path> files;
    if (!directory.empty() && fs::is_directory(directory, error))
        for (const fs::directory_entry &entry : fs::directory_iterator(directory, error))
            if (entry.path().extension() == ".json")
                files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    std::string problems;
    for (const fs::path &file : files) {
        std::ifstream stream(file);
        nlohmann::json table = nlohmann::json::parse(stream, nullptr, false);
        if (table.is_discarded() || !table.contains("records") || !table["records"].is_array()) {
            problems += "; " + file.string() + " is not a tuned table (skipped)";
            continue;
        }
        for (const nlohmann::json &record : table["records"]) {
            if (!record.is_object() || record.value("target_class", "") != wanted_target ||
                record.value("spec_class", "") != wanted_spec ||
                record.value("shape_class", "") != shape || !record.contains("params") ||
                !record["params"].is_object())
                continue;
            std::string params, removed_why;
            for (const auto &item : record["params"].items()) {
                if (!item.value().is_number_integer())
                    continue;
                const int value = item.value().get<int>();
                // As in a tuning log: a removed parameter at the value that meant what attngen
                // does now (RemovedParam::drops) is dropped; at any other, the record is a
                // schedule attngen no longer has, and the lookup goes on to the next.
                if (const RemovedParam *removed = find_removed_param(family, item.key())) {
                    if (!removed->drops(value))
                        removed_why = item.key() + "=" + std::to_string(value) + " was removed (" +
                                      removed->why + ")";
                    continue;
                }
                params += (params.empty() ? "" : ",") + item.key() + "=" + std::to_string(value);
            }
            if (!removed_why.empty()) {
                problems += "; a record for " + key + " in " + file.string() + " sets " +
                            removed_why + " (skipped)";
                continue;
            }
            lookup.found = true;
            lookup.problems = !problems.empty();
            lookup.params = params;
            lookup.message = "tuned " + key + " from " + file.string() + ": " + params + " (" +
                             record.value("source", std::string("unknown source")) + ")" + problems;
            return lookup;
        }
    }
    lookup.problems = !problems.empty();
    lookup.message = "no tuned record for " + key + (directory.empty() ? "" : " in " + directory) +
                     "; using the defaults" + problems;
    return lookup;
}

} // namespace attngen
