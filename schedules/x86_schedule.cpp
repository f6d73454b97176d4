// x86 register blocks for the CPU schedule. SSE4.1 and AVX2 have 16 vector registers (4 and 8
// floats), AVX-512 has 32 of 16 floats. The score loop keeps query_vectors x key_block
// accumulators plus the query vectors and one broadcast key; P·V keeps query_block x d_vectors
// plus the value vectors and one broadcast probability.
#include "schedule.h"

namespace attngen {

CpuScheduleParams x86_schedule_params(const Halide::Target &target) {
    CpuScheduleParams params;
    // By the vector width the code will have, not by feature names: "avx2-fma-f16c" does not
    // name "avx", yet its vectors are 8 floats wide.
    const int lanes = target.natural_vector_size<float>();
    if (lanes >= 16) {
        // 32 registers: 2 x 6 score accumulators, 8 x 2 for P·V (8 divides the 32-query tile).
        params.query_vectors = 2;
        params.key_block = 6;
        params.query_block = 8;
        params.d_vectors = 2;
        // Whole rows up to 2048 keys, chunks beyond (CpuScheduleParams::rows_up_to). With
        // these blocks and 256-key chunks, AOT, 2 threads, H=8, ms with / without: causal D=64
        // 0.942, 0.937, 0.998 and D=128 without a mask 0.952, 0.954, 0.991 at L = 1024, 2048,
        // 8192 (7 alternations).
        params.rows_up_to = 2048;
    } else if (lanes == 8) {
        // 16 registers: 3 x 4 = 12 score accumulators + 3 query vectors + 1 broadcast key;
        // 6 x 2 = 12 for P·V + 2 value vectors + 1 broadcast probability. Measured with
        // `attngen run --schedule-params` (2 threads, B=1 H=8 L=2048): 127 GFLOP/s at D=64 and
        // 124 at D=128, against 111 and 102 for a 16-query tile with 4 x 2 blocks.
        params.query_vectors = 3;
        params.key_block = 4;
        params.query_block = 6;
        params.d_vectors = 2;
        // Whole rows up to 1024 keys: AVX2 code on the AVX-512 machine, as above, ms with
        // rows_up_to 2048 / without: causal D=64 0.944, 0.964, 0.996 and D=128 without a mask
        // 0.990, 1.032, 0.988 at L = 1024, 2048, 4096; 1024 keeps the gain at L = 1024 without
        // the loss at 2048.
        params.rows_up_to = 1024;
        // Projection tiles: 3 x 4 = 12 accumulators + 3 row vectors + 1 broadcast weight.
        // model_dim 1024, ms against 2 x 4 tiles: 1.01 at L = 128, 0.84 at L = 512.
        params.gemm_row_vectors = 3;
        params.gemm_outputs = 4;
    } else {
        // SSE4.1: 16 registers of 4 floats; a 16-query tile is 4 vectors, 4 x 2 accumulators.
        params.query_vectors = 4;
        params.key_block = 2;
        params.query_block = 4;
        params.d_vectors = 2;
        params.gemm_row_vectors = 3;
        params.gemm_outputs = 4;
    }
    return params;
}

} // namespace attngen
