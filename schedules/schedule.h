// Schedules: functions of (pipeline stages, target, parameters) that never change what is computed.
#pragma once

#include "dsl/attention_algorithm.h"

#include <string>

namespace attngen {

/** Tunable parameters of the x86 schedule; zero means "derive from the target". */
struct X86ScheduleParams {
    int query_tile = 0;  ///< queries per parallel task; default two vectors of floats
    int key_block = 4;   ///< keys per register block of the score loop
    int query_block = 4; ///< queries per register block of P·V and of the projections
};

/** Every stage computed at root, serially: the baseline every other schedule must match. */
void apply_reference_schedule(AttentionStages &stages, const Halide::Target &target);

/** Parallel over batch x heads x query tiles, scores and softmax fused into each tile. */
void apply_x86_schedule(AttentionStages &stages, const Halide::Target &target,
                        const X86ScheduleParams &params = {});

/** The schedule names apply_schedule accepts: "auto" picks by target. */
bool is_schedule_name(const std::string &name);

/**
 * Applies the named schedule ("auto", "reference" or "x86"). Returns an empty string on
 * success, or why the schedule does not fit the target.
 */
std::string apply_schedule(AttentionStages &stages, const Halide::Target &target,
                           const std::string &name);

/** The widest power-of-two vector (at most `lanes`) that divides `extent`. */
int vector_width_dividing(int extent, int lanes);

} // namespace attngen
