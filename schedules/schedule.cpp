// Picks a schedule by name and target.
#include "schedule.h"

#include <cstdlib>
#include <sstream>

namespace attngen {

int vector_width_dividing(int extent, int lanes) {
    int width = 1;
    while (width * 2 <= lanes && extent % (width * 2) == 0)
        width *= 2;
    return width;
}

bool is_schedule_name(const std::string &name) {
    return name == "auto" || name == "reference" || name == "x86" || name == "arm";
}

std::string parse_cpu_schedule_params(const std::string &text, CpuScheduleParams &params) {
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ',')) {
        if (item.empty())
            continue;
        // key=value, or key:value where '=' cannot appear (GenGen's own key=value words).
        const size_t equals = item.find_first_of("=:");
        const std::string key = item.substr(0, equals);
        int *field = key == "query_vectors" ? &params.query_vectors
                     : key == "key_block"   ? &params.key_block
                     : key == "query_block" ? &params.query_block
                     : key == "d_vectors"   ? &params.d_vectors
                                            : nullptr;
        if (field == nullptr || equals == std::string::npos)
            return "unknown schedule parameter '" + item +
                   "'; expected query_vectors, key_block, query_block or d_vectors =N";
        const std::string value = item.substr(equals + 1);
        char *end = nullptr;
        long number = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || number < 1 || number > 16)
            return "schedule parameter " + key + " must be in 1..16, got '" + value + "'";
        *field = static_cast<int>(number);
    }
    return "";
}

std::string to_string(const CpuScheduleParams &params) {
    return "query_vectors=" + std::to_string(params.query_vectors) +
           ",key_block=" + std::to_string(params.key_block) +
           ",query_block=" + std::to_string(params.query_block) +
           ",d_vectors=" + std::to_string(params.d_vectors);
}

std::string apply_schedule(AttentionStages &stages, const Halide::Target &target,
                           const std::string &name, const std::string &cpu_params) {
    if (name == "reference") {
        apply_reference_schedule(stages, target);
        return cpu_params.empty() ? "" : "the reference schedule takes no schedule parameters";
    }
    const bool x86 = target.arch == Halide::Target::X86;
    const bool arm = target.arch == Halide::Target::ARM && target.bits == 64;
    if (name == "x86" || (name == "auto" && x86)) {
        if (!x86)
            return "schedule 'x86' needs an x86 target, got " + target.to_string();
        CpuScheduleParams params = x86_schedule_params(target);
        if (std::string problem = parse_cpu_schedule_params(cpu_params, params); !problem.empty())
            return problem;
        apply_cpu_schedule(stages, target, params);
        return "";
    }
    if (name == "arm" || (name == "auto" && arm)) {
        if (!arm)
            return "schedule 'arm' needs an arm-64 target, got " + target.to_string();
        CpuScheduleParams params = arm_schedule_params(target);
        if (std::string problem = parse_cpu_schedule_params(cpu_params, params); !problem.empty())
            return problem;
        apply_cpu_schedule(stages, target, params);
        return "";
    }
    if (name == "auto")
        return "no schedule for target " + target.to_string() + " yet; use schedule=reference";
    return "unknown schedule '" + name + "'; expected auto, reference, x86 or arm";
}

} // namespace attngen
