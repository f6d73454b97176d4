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
    return name == "auto" || name == "reference" || name == "x86";
}

std::string apply_schedule(AttentionStages &stages, const Halide::Target &target,
                           const std::string &name) {
    if (name == "reference") {
        apply_reference_schedule(stages, target);
        return "";
    }
    bool x86 = target.arch == Halide::Target::X86;
    if (name == "x86" || (name == "auto" && x86)) {
        if (!x86)
            return "schedule 'x86' needs an x86 target, got " + target.to_string();
        apply_x86_schedule(stages, target);
        return "";
    }
    if (name == "auto")
        return "no schedule for target " + target.to_string() +
               " yet; use schedule=reference";
    return "unknown schedule '" + name + "'; expected auto, reference or x86";
}

} // namespace attngen
