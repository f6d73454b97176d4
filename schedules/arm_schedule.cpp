// AArch64 NEON register blocks for the CPU schedule: 32 vector registers of 4 floats, and FMLA
// by element, which multiplies by one lane of a register without a separate broadcast.
//  - scores: a 16-query tile is 4 vectors; 6 keys per block gives 24 accumulators, plus the 4
//    query vectors and the key values: 30 of 32 registers.
//  - P·V: 8 queries x 2 vectors of head_dim = 16 accumulators, 2 value vectors and the 8
//    probabilities (two registers, read by element).
#include "schedule.h"

namespace attngen {

CpuScheduleParams arm_schedule_params(const Halide::Target &) {
    CpuScheduleParams params;
    params.query_vectors = 4;
    params.key_block = 6;
    params.query_block = 8;
    params.d_vectors = 2;
    // The projections keep the packed form, whose tiles were chosen on ARM code: the in-place
    // form's were measured on x86 only.
    params.packed_weights = 1;
    return params;
}

} // namespace attngen
