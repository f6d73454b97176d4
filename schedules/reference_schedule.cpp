// The plain reference schedule: every stage at root, no parallelism, no vectorization. Slow and
// obviously right; the x86 and later schedules are checked against the same reference.
#include "schedule.h"

namespace attngen {

void apply_reference_schedule(AttentionStages &s, const Halide::Target &) {
    for (Halide::Func *stage :
         {&s.q_proj,       &s.k_proj,        &s.v_proj,   &s.rope_table, &s.q_rope,   &s.k_rope,
          &s.q_heads,      &s.k_heads,       &s.v_heads,  &s.scores,     &s.masked,   &s.row_max,
          &s.probs,        &s.value_weights, &s.row_sum,  &s.part_max,   &s.part_sum, &s.part_out,
          &s.part_scale,   &s.weighted_sum,  &s.attn_out, &s.out_proj,   &s.k_new,    &s.v_new,
          &s.k_new_scales, &s.v_new_scales})
        if (stage->defined())
            stage->compute_root();
}

} // namespace attngen
