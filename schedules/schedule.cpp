// Picks a schedule by name and target.
#include "schedule.h"

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

std::string apply_schedule(AttentionStages &stages, const Halide::Target &target,
                           const std::string &name) {
    if (name == "reference") {
        apply_reference_schedule(stages, target);
        return "";
    }
    const bool x86 = target.arch == Halide::Target::X86;
    const bool arm = target.arch == Halide::Target::ARM && target.bits == 64;
    if (name == "x86" || (name == "auto" && x86)) {
        if (!x86)
            return "schedule 'x86' needs an x86 target, got " + target.to_string();
        apply_cpu_schedule(stages, target, x86_schedule_params(target));
        return "";
    }
    if (name == "arm" || (name == "auto" && arm)) {
        if (!arm)
            return "schedule 'arm' needs an arm-64 target, got " + target.to_string();
        apply_cpu_schedule(stages, target, arm_schedule_params(target));
        return "";
    }
    if (name == "auto")
        return "no schedule for target " + target.to_string() + " yet; use schedule=reference";
    return "unknown schedule '" + name + "'; expected auto, reference, x86 or arm";
}

} // namespace attngen
