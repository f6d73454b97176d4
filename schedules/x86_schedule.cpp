// x86 register blocks for the CPU schedule. SSE4.1 and AVX2 have 16 vector registers (4 and 8
// floats), AVX-512 has 32 of 16 floats. The score loop keeps query_vectors x key_block
// accumulators plus the query vectors and one broadcast key; P·V keeps query_block x d_vectors
// plus the value vectors and one broadcast probability.
#include "schedule.h"

namespace attngen {

CpuScheduleParams x86_schedule_params(const Halide::Target &target) {
    CpuScheduleParams params;
    if (target.has_feature(Halide::Target::AVX512_Skylake) ||
        target.has_feature(Halide::Target::AVX512)) {
        // 32 registers: 2 x 6 score accumulators, 6 x 2 for P·V.
        params.query_vectors = 2;
        params.key_block = 6;
        params.query_block = 6;
        params.d_vectors = 2;
    } else if (target.has_feature(Halide::Target::AVX)) {
        // 16 registers: 2 x 4 = 8 score accumulators, 4 x 2 = 8 for P·V.
        params.query_vectors = 2;
        params.key_block = 4;
        params.query_block = 4;
        params.d_vectors = 2;
    } else {
        // SSE4.1: 16 registers of 4 floats; a 16-query tile is 4 vectors, 4 x 2 accumulators.
        params.query_vectors = 4;
        params.key_block = 2;
        params.query_block = 4;
        params.d_vectors = 2;
    }
    return params;
}

} // namespace attngen
