// The GPU schedule (CUDA, and the same schedule on OpenCL, which CI runs on the CPU through PoCL).
//
// The online (one-pass) form of the algorithm (AttentionStages::running), one warp per block.
// A block computes a tile of rows, query_tile queries of heads_per_block query heads of one kv
// head's group, and walks the keys step_keys at a time. Each step:
//   1. stages the block's queries and the step's K in shared memory, transposed (features
//      outermost), and the step's V as stored;
//   2. each lane computes a register tile of the step's scores (score_keys x score_queries,
//      vector loads of neighbouring keys and queries) and stores it masked in shared memory;
//   3. one lane per row takes the step's max and the probabilities relative to it;
//   4. each lane folds the step into its part of the running state, which stays in registers
//      across the steps: d_per_lane value_dim elements of a few rows, and those rows' max, sum
//      and step weight. The step's first key moves the state to the new max; the other keys
//      are multiply-adds only.
// K and V are read once. A step the tile's rows cannot see (causal, window) is skipped whole: its
// stages run inside the test of the step. The mask itself is tested on every score of a step
// computed (Halide 14 does not split the unrolled score tiles at the diagonal).
//
// Decode shapes (a few queries per head) leave that grid mostly empty, so their split-KV form
// (split_chunk > 0) gives each chunk of keys its own block, whose fold over the chunk's steps gives
// the chunk's max, sum and partial output, and the output's kernel combines the chunks exactly.
// There a block takes up to 4 query heads of a kv head's group, so that each staged key and
// value serves all of them.
#include "schedule.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace attngen {

using Halide::Func;
using Halide::MemoryType;
using Halide::RVar;
using Halide::Stage;
using Halide::TailStrategy;
using Halide::Var;
using Halide::VarOrRVar;

namespace {

/** Lanes of a warp: every block of the online form is one warp. */
constexpr int warp_lanes = 32;

/**
 * How the lanes of a block's warp share its tile: query_tile queries of heads_per_block heads.
 * In the fold and the output, lane (d group g, query lane l) holds value_dim elements
 * g * d_per_lane.. of queries l, l + query_lanes, ... of every head of the block; in the
 * scores, a lane holds score_keys keys of score_queries queries (gpu_score_tiles) of one head
 * at a time, or of every head of the block (schedule_scores says where).
 */
struct LaneLayout {
    int d_groups;      ///< value_dim / d_per_lane
    int query_lanes;   ///< lanes along the queries in the fold: d_groups x query_lanes lanes
    int score_keys;    ///< keys of a lane's score tile
    int score_queries; ///< queries of a lane's score tile
};

LaneLayout lane_layout(int value_dim, const GpuScheduleParams &params) {
    LaneLayout layout;
    layout.d_groups = value_dim / params.d_per_lane;
    layout.query_lanes = std::max(1, std::min(params.query_tile, warp_lanes / layout.d_groups));
    const GpuScoreTiles tiles = gpu_score_tiles(params);
    layout.score_keys = tiles.keys;
    layout.score_queries = tiles.queries;
    return layout;
}

/**
 * What the parts of the GPU schedule share: the stages, the parameters and the sizes derived
 * from them, and the Funcs and loops the later parts compute at.
 */
struct GpuSchedule {
    GpuSchedule(AttentionStages &s, const Halide::Target &target, const GpuScheduleParams &params);

    AttentionStages &stages;
    const GpuScheduleParams &params;
    bool cuda; ///< CUDA runs the lanes on gpu_lanes, OpenCL on gpu_threads
    int width; ///< value_dim elements per lane in the fold and the output
    LaneLayout layout;
    bool split; ///< the split-KV form: a block per chunk of keys, and a combine
    Func core;  ///< the attention's output: attn_out before an out projection or an lse output,
                ///< else the output
    Func walk;  ///< the kernel of the fold: core, or the split form's partials
    Var q_tile; ///< the block's loop over query tiles, where the running state is computed
    RVar step;  ///< the loop over the steps, where each step's stages are computed
};

// The kernel of the fold: the output itself (whole rows), or in the split-KV form the chunks'
// partials, which a second kernel (the output's) combines.
GpuSchedule::GpuSchedule(AttentionStages &s, const Halide::Target &target,
                         const GpuScheduleParams &params)
    : stages(s), params(params), cuda(target.has_feature(Halide::Target::CUDA)),
      width(s.options.d_per_lane), layout(lane_layout(s.spec.resolved_value_dim(), params)),
      split(s.options.chunk_keys > 0),
      core(s.spec.projections.out || s.spec.lse_output ? s.attn_out : s.output),
      walk(split ? s.partials : core), q_tile("q_tile"), step(s.r_online.y) {}

/**
 * Runs `stage` along `lane` on the lanes of the block's warp. OpenCL has no gpu_lanes: there
 * the block's 32 threads run the same loops, and the running state lives in shared memory
 * rather than in registers (CI runs this form on PoCL).
 */
void on_lanes(const GpuSchedule &gpu, Stage stage, const VarOrRVar &lane) {
    if (gpu.cuda)
        stage.gpu_lanes(lane);
    else
        stage.gpu_threads(lane);
}

/**
 * Runs `stage` along `thread` on gpu_threads. Halide 14 synchronizes the stages of a block only
 * where some stage runs on gpu_threads rather than gpu_lanes (it takes a warp's lanes for
 * lockstep, which they are not since Volta): the stages that stage K, V and Q do, and the block
 * gets its barriers.
 */
void on_threads(Stage stage, const VarOrRVar &thread) {
    stage.gpu_threads(thread);
}

/** A projection: a plain register-tiled GEMM kernel at root, 2 x 2 outputs per thread. */
void schedule_gemm(Func stage, const Var &row, const Var &outer0, const Var &outer1,
                   const std::string &prefix) {
    Var xo{prefix + "_bx"}, yo{prefix + "_by"}, xi{prefix + "_tx"}, yi{prefix + "_ty"};
    Var xu{prefix + "_ux"}, yu{prefix + "_uy"};
    Var x = stage.args()[0];
    stage.compute_root();
    // The same tiles for the bias (pure) stage and the accumulation, whose reduction runs
    // inside each thread's 2 x 2 outputs.
    for (Stage tiled : {Stage(stage), stage.update()}) {
        tiled.tile(x, row, xo, yo, xi, yi, 32, 32, TailStrategy::GuardWithIf)
            .tile(xi, yi, xi, yi, xu, yu, 2, 2, TailStrategy::GuardWithIf)
            .reorder(xu, yu, xi, yi, xo, yo, outer0, outer1)
            .gpu_blocks(xo, yo, outer0)
            .gpu_threads(xi, yi)
            .unroll(xu)
            .unroll(yu);
    }
    stage.update().reorder(xu, yu, stage.rvars(0)[0]);
}

/**
 * An elementwise stage as a kernel at root: 32 x 8 tiles of (x, y), the outer dimensions
 * (fused) as the third block dimension.
 */
void schedule_elementwise(Func stage, const Var &x, const Var &y, std::vector<Var> outer,
                          const std::string &prefix) {
    Var xo{prefix + "_bx"}, yo{prefix + "_by"}, xi{prefix + "_tx"}, yi{prefix + "_ty"};
    stage.compute_root().tile(x, y, xo, yo, xi, yi, 32, 8, TailStrategy::GuardWithIf);
    if (outer.size() == 2) {
        Var fused{prefix + "_bz"};
        stage.fuse(outer[0], outer[1], fused);
        outer = {fused};
    }
    std::vector<Halide::VarOrRVar> blocks = {xo, yo};
    blocks.insert(blocks.end(), outer.begin(), outer.end());
    if (blocks.size() == 3)
        stage.gpu_blocks(blocks[0], blocks[1], blocks[2]);
    else
        stage.gpu_blocks(blocks[0], blocks[1]);
    stage.gpu_threads(xi, yi);
}

/** The kernels before the attention's: projections, a cache's new rows, rotary embeddings. */
void schedule_input_kernels(AttentionStages &s) {
    const Var d = s.d, q = s.q, k = s.k, h = s.h, b = s.b;
    if (s.spec.projections.any()) {
        schedule_gemm(s.q_proj, q, h, b, "qp");
        schedule_gemm(s.k_proj, k, h, b, "kp");
        schedule_gemm(s.v_proj, k, h, b, "vp");
    }
    // A cached layer's new rows, outputs of their own (the runtime appends them to the cache).
    if (s.spec.cache.any()) {
        schedule_elementwise(s.k_new, d, k, {h, b}, "kn");
        schedule_elementwise(s.v_new, d, k, {h, b}, "vn");
        if (s.k_new_scales.defined()) {
            schedule_elementwise(s.k_new_scales, k, h, {b}, "ks");
            schedule_elementwise(s.v_new_scales, k, h, {b}, "vs");
        }
    }
    // Rotary embeddings: the table and the rotated queries and keys, each a kernel at root, so
    // that the steps stage rotated rows rather than rotating them again for every tile.
    if (s.spec.rope.any()) {
        // With a cache, the angles of the new tokens' positions only, inside their rotation.
        if (s.spec.cache.any())
            s.rope_table.compute_inline();
        else
            schedule_elementwise(s.rope_table, s.pair, s.position, {}, "rt");
        schedule_elementwise(s.q_rope, d, q, {h, b}, "qr");
        schedule_elementwise(s.k_rope, d, k, {h, b}, "kr");
    }
}

/**
 * The outputs that read the attention's output at root (attn_out): a kernel of 32 x 8 elements
 * per block copying it to the output, unless an out projection writes that, and one of 64 rows
 * per block copying the lse.
 */
void schedule_output_copies(AttentionStages &s) {
    const Var d = s.d, q = s.q, h = s.h, b = s.b;
    if (!s.spec.projections.out) {
        Var dx{"copy_bx"}, qx{"copy_by"}, di{"copy_tx"}, qi{"copy_ty"}, heads{"copy_bz"};
        s.output.tile(d, q, dx, qx, di, qi, 32, 8, TailStrategy::GuardWithIf)
            .fuse(h, b, heads)
            .gpu_blocks(dx, qx, heads)
            .gpu_threads(di, qi);
    }
    if (s.spec.lse_output) {
        Var qx{"lse_bx"}, qi{"lse_tx"}, heads{"lse_by"};
        s.lse.split(q, qx, qi, 64, TailStrategy::GuardWithIf)
            .fuse(h, b, heads)
            .gpu_blocks(qx, heads)
            .gpu_threads(qi);
    }
}

/**
 * The out projection, if any: a kernel of 16 x 16 outputs per block over the attention's
 * output at root; without one, the attention's output is the layer's, or with an lse output
 * attn_out at root, which the output and the lse copy.
 */
void schedule_output_projection(AttentionStages &s) {
    if (!s.spec.projections.out && !s.spec.lse_output) {
        s.attn_out.compute_inline();
        return;
    }
    s.attn_out.compute_root();
    schedule_output_copies(s);
    if (!s.spec.projections.out)
        return;
    Var c = s.c;
    Var co{"op_bx"}, qo{"op_by"}, ci{"op_tx"}, qi{"op_ty"};
    s.output.tile(c, s.q, co, qo, ci, qi, 16, 16, TailStrategy::GuardWithIf)
        .gpu_blocks(co, qo, s.b)
        .gpu_threads(ci, qi);
    s.out_proj.compute_at(s.output, ci);
    s.out_proj.update().unroll(s.r_concat.x, 4, TailStrategy::GuardWithIf);
}

/**
 * The block: a query tile of block_heads heads of one kv head's group (and one chunk of keys in
 * the split form). block_heads divides the group, so a block's heads share their kv head. Its
 * lanes write the output as the fold holds it: d_per_lane elements of a row each.
 */
void schedule_blocks(const GpuSchedule &gpu) {
    const AttentionStages &s = gpu.stages;
    const Var d = s.d, q = s.q, h = s.h, b = s.b, j = s.j;
    Func walk = gpu.walk;
    Var qo = gpu.q_tile, qi{"q_in_tile"}, kv{"head_block"}, hg{"head_in_block"};
    walk.split(h, kv, hg, gpu.params.heads_per_block, TailStrategy::GuardWithIf)
        .split(q, qo, qi, gpu.params.query_tile, TailStrategy::GuardWithIf);
    if (gpu.split) {
        Var kvb{"kv_head_batch"};
        walk.compute_root()
            .reorder(d, qi, hg, qo, j, kv, b)
            .fuse(kv, b, kvb)
            .gpu_blocks(qo, j, kvb);
    } else {
        walk.reorder(d, qi, hg, qo, kv, b).gpu_blocks(qo, kv, b);
    }
    Var dgo{"out_d_group"}, di{"out_d"}, qr{"out_queries"}, ql{"out_query_lane"};
    Var lane{"out_lane"};
    walk.split(d, dgo, di, gpu.width, TailStrategy::GuardWithIf)
        .split(qi, qr, ql, gpu.layout.query_lanes, TailStrategy::GuardWithIf)
        .reorder(di, qr, hg, dgo, ql)
        .fuse(dgo, ql, lane)
        .unroll(di)
        .unroll(qr)
        .unroll(hg);
    on_lanes(gpu, walk, lane);
}

/**
 * Splits a definition of the running state over the lanes: d groups innermost, then the query
 * lanes, fused into one lane dimension. Returns the lane and the lane's rows.
 */
std::pair<Var, Var> lanes_of_state(const GpuSchedule &gpu, Stage stage, const std::string &prefix) {
    const AttentionStages &s = gpu.stages;
    Var qr{prefix + "_queries"}, ql{prefix + "_query_lane"}, lane{prefix + "_lane"};
    stage.split(s.q, qr, ql, gpu.layout.query_lanes, TailStrategy::GuardWithIf)
        .reorder(s.d_group, ql, qr, s.h)
        .fuse(s.d_group, ql, lane);
    return std::make_pair(lane, qr);
}

/**
 * The running state, in registers: lane (d group g, query lane l) holds value_dim elements
 * g * d_per_lane.. of queries l, l + query_lanes, ... of every head of the block, and their
 * max, sum and step weight. (Halide 14 keeps a lane's state in its registers only where the
 * state's index is the lane plus a multiple of the warp: d groups innermost.) Its steps are the
 * loop outside the lanes; the lane's rows are unrolled. Each step's stages are computed at the
 * unit loop inside the step loop, within the test of whether the tile sees the step, so that
 * Halide trims the step loop to the visible steps (AttentionStages::r_online).
 */
void schedule_running_state(const GpuSchedule &gpu) {
    const AttentionStages &s = gpu.stages;
    const Var q = s.q, h = s.h;
    RVar steps = s.r_online.z, key_in_step = s.r_online.x;
    Func state = s.running;
    Var dg = s.d_group;
    // A whole tile of queries (those past Lq read the last query): every step's buffers then
    // have the tile's constant size, and a lane's score tile its constant rows.
    state.compute_at(gpu.walk, gpu.q_tile)
        .bound(q, 0, gpu.params.query_tile)
        .bound(dg, 0, gpu.layout.d_groups);
    if (gpu.cuda)
        state.store_in(MemoryType::Register);
    {
        auto [lane, rows] = lanes_of_state(gpu, Stage(state), "state_init");
        state.reorder(rows, h, lane).unroll(rows).unroll(h);
        on_lanes(gpu, state, lane);
    }
    auto [lane, rows] = lanes_of_state(gpu, state.update(), "fold");
    state.update().reorder(rows, h, key_in_step, lane, gpu.step, steps).unroll(rows).unroll(h);
    // CUDA: the step's keys unrolled, so that the first key's move to the new max is code
    // of its own and the other keys are multiply-adds only (Halide 14 drops the `likely`
    // that would split a loop there once the loop is split or unrolled). OpenCL, which CI
    // runs on PoCL, keeps the loop: the test layers' kernels stay small enough to compile.
    // So does a fold that reads V where it lies (decode): unrolled, its loads of the whole
    // step's values would be hoisted into more registers than a lane has.
    if (gpu.cuda && gpu.params.stage_kv)
        state.update().unroll(key_in_step);
    on_lanes(gpu, state.update(), lane);
}

/**
 * Stages `staged` (K or the block's queries) in shared memory each step, transposed: a score
 * tile reads neighbouring keys and neighbouring queries of one feature as vectors. The lanes
 * load along head_dim, so the loads are coalesced; rows padded by 4 words keep the transposed
 * stores to 4 lanes a bank and the rows aligned for 128-bit loads (lanes along the rows store
 * into distinct banks but load 32 rows at once, which was slower).
 */
void stage_transposed(const GpuSchedule &gpu, Func staged, const Var &row, int rows,
                      const std::string &prefix) {
    const Var d = gpu.stages.d;
    Var dl{prefix + "_d_lane"};
    staged.compute_at(gpu.stages.running, gpu.step)
        .bound_extent(row, rows)
        .reorder_storage(row, d)
        .align_storage(row, rows + 4)
        .split(d, d, dl, warp_lanes, TailStrategy::GuardWithIf)
        .reorder(dl, row, d);
    on_threads(staged, dl);
}

/**
 * The step's inputs in shared memory: K and the block's queries (scaled) transposed, V as
 * stored. The queries are staged each step, not once per block: Halide 14 takes a block's
 * buffers as live from their first to their last use in program order, loops aside, so a buffer
 * allocated later in the step could reuse their space while the next step still needs them.
 * After the first step they come from L1.
 */
void schedule_staged_inputs(const GpuSchedule &gpu) {
    AttentionStages &s = gpu.stages;
    const Var d = s.d, q = s.q, k = s.k, h = s.h;
    Func state = s.running;
    if (gpu.params.stage_queries) {
        s.q_heads.bound_extent(h, gpu.params.heads_per_block);
        if (gpu.params.query_tile >= 8) {
            stage_transposed(gpu, s.q_heads, q, gpu.params.query_tile, "q_stage");
        } else {
            // A few queries (decode): the lanes along head_dim instead.
            Var sd{"q_stage_d"};
            s.q_heads.compute_at(state, gpu.step)
                .bound_extent(q, gpu.params.query_tile)
                .split(d, sd, d, warp_lanes, TailStrategy::GuardWithIf)
                .reorder(d, q, h, sd);
            on_threads(s.q_heads, d);
        }
    }
    if (!gpu.params.stage_kv)
        return;
    stage_transposed(gpu, s.k_heads.in(s.scores), k, gpu.params.step_keys, "k_step");

    // V is read as stored: keys outermost, a lane reading a few neighbouring features.
    Func v_step = s.v_heads.in(state);
    Var vd{"v_step_d"}, vv{"v_step_vector"};
    v_step.compute_at(state, gpu.step)
        .bound_extent(k, gpu.params.step_keys)
        .split(d, vd, d, warp_lanes * 4, TailStrategy::GuardWithIf)
        .split(d, d, vv, 4, TailStrategy::GuardWithIf)
        .reorder(vv, d, k, vd)
        .vectorize(vv);
    on_threads(v_step, d);
}

/**
 * The step's masked scores: a register tile per lane (score_keys keys x score_queries queries
 * of one head), stored queries innermost for the per-row passes that follow.
 */
void schedule_scores(const GpuSchedule &gpu) {
    AttentionStages &s = gpu.stages;
    const Var q = s.q, k = s.k, h = s.h;
    const LaneLayout &layout = gpu.layout;
    Var ko{"score_key_lane"}, ki{"score_key"}, qo2{"score_query_lane"}, qi2{"score_query"};
    Var lane{"score_lane"};
    s.masked.compute_at(s.running, gpu.step)
        .bound_extent(k, gpu.params.step_keys)
        .reorder_storage(q, k, h)
        .split(k, ko, ki, layout.score_keys, TailStrategy::GuardWithIf)
        .split(q, qo2, qi2, layout.score_queries, TailStrategy::GuardWithIf)
        .fuse(ko, qo2, lane)
        .unroll(ki)
        .unroll(qi2);
    s.scores.compute_at(s.masked, lane)
        .bound_extent(k, layout.score_keys)
        .bound_extent(q, layout.score_queries)
        .reorder(k, q, h)
        .unroll(k)
        .unroll(q);
    s.scores.update().reorder(k, q, h, s.r_head_dim.x).unroll(k).unroll(q);
    // A lane's tile takes every head of the block where K is read where it lies, so that each
    // key it loads serves them all, and where the tile is a few scores (decode: a key of one
    // query), so that the lane keeps several independent sums going rather than one.
    const int heads = gpu.params.heads_per_block;
    if (gpu.params.stage_kv && layout.score_keys * layout.score_queries * heads > 8) {
        s.masked.reorder(qi2, ki, lane, h);
    } else {
        s.masked.reorder(qi2, ki, h, lane).unroll(h);
        s.scores.bound_extent(h, heads).unroll(h);
        s.scores.update().unroll(h);
    }
    on_lanes(gpu, s.masked, lane);
}

/** Runs the rows of the block (queries, then heads, fused) on the lanes, a row each. */
void rows_on_lanes(const GpuSchedule &gpu, Stage stage, const std::string &prefix) {
    const AttentionStages &s = gpu.stages;
    VarOrRVar row = s.q;
    if (gpu.params.heads_per_block > 1) {
        Var fused{prefix + "_row"};
        stage.fuse(s.q, s.h, fused);
        row = fused;
    }
    Var outer{prefix + "_rows"}, lane{prefix + "_row_lane"};
    stage.split(row, outer, lane, warp_lanes, TailStrategy::GuardWithIf);
    on_lanes(gpu, stage, lane);
}

/**
 * The step's max per row and the probabilities relative to it. The rows of the block run on
 * the lanes, a row each; the probabilities of blocks of fewer than 8 rows (decode) run on the
 * lanes along the keys instead.
 */
void schedule_step_softmax(const GpuSchedule &gpu) {
    AttentionStages &s = gpu.stages;
    const Var q = s.q, k = s.k, h = s.h;
    const int rows = gpu.params.query_tile * gpu.params.heads_per_block;
    s.part_max.compute_at(s.running, gpu.step);
    rows_on_lanes(gpu, s.part_max, "max_init");
    rows_on_lanes(gpu, s.part_max.update().reorder(s.r_keys.x, q, h), "max");
    s.probs.compute_at(s.running, gpu.step)
        .bound_extent(k, gpu.params.step_keys)
        .reorder_storage(q, k, h);
    if (rows >= 8) {
        rows_on_lanes(gpu, Stage(s.probs).reorder(k, q, h), "probs");
    } else {
        Var ko{"probs_keys"}, lane{"probs_key_lane"};
        s.probs.split(k, ko, lane, warp_lanes, TailStrategy::GuardWithIf).reorder(q, h, lane, ko);
        on_lanes(gpu, s.probs, lane);
    }
}

/**
 * The split form's combine, in the output's kernel: a block per 8 queries of a head of a batch;
 * each thread folds the chunks of its own outputs in registers, reading the partials from
 * global memory (a few chunks' worth: no shared memory and no barriers needed).
 */
void schedule_combine(const GpuSchedule &gpu) {
    AttentionStages &s = gpu.stages;
    Func core = gpu.core;
    Var cq{"combine_q"}, cqi{"combine_qi"}, cd{"combine_d"}, cdi{"combine_di"};
    core.split(s.q, cq, cqi, 8, TailStrategy::GuardWithIf)
        .split(s.d, cd, cdi, 32, TailStrategy::GuardWithIf)
        .reorder(cdi, cqi, cd, cq, s.h, s.b)
        .gpu_blocks(cq, s.h, s.b)
        .gpu_threads(cdi, cqi);
    for (Func stat : {s.row_max, s.row_sum, s.weighted_sum})
        stat.compute_at(core, cdi);
    s.part_scale.compute_inline();
}

} // namespace

GpuScoreTiles gpu_score_tiles(const GpuScheduleParams &params) {
    // A lane past the block's queries or the step's keys has no tile of its own: a decode
    // block's one query row must not leave its step's scores to one lane while 31 wait (on an
    // H200 that made the decode kernel 1.9-3.1x slower). A tile of k keys and q queries loads
    // ceil(k / 4) + ceil(q / 4) vectors per feature.
    GpuScoreTiles best{0, 0, 0};
    double best_per_load = 0;
    for (int query_lanes = 1; query_lanes <= warp_lanes; query_lanes *= 2) {
        const int key_lanes = warp_lanes / query_lanes;
        const int keys = std::max(1, params.step_keys / key_lanes);
        const int queries = std::max(1, params.query_tile / query_lanes);
        const double per_load = double(keys * queries) / ((keys + 3) / 4 + (queries + 3) / 4);
        const int tile = keys * queries, best_tile = best.keys * best.queries;
        if (best.lanes == 0 || tile < best_tile ||
            (tile == best_tile && per_load > best_per_load)) {
            best_per_load = per_load;
            best = {keys, queries,
                    std::min(query_lanes, std::max(params.query_tile, 1)) *
                        std::min(key_lanes, std::max(params.step_keys, 1))};
        }
    }
    return best;
}

void apply_gpu_schedule(AttentionStages &s, const Halide::Target &target,
                        const GpuScheduleParams &params) {
    schedule_input_kernels(s);
    schedule_output_projection(s);

    GpuSchedule gpu{s, target, params};
    schedule_blocks(gpu);
    schedule_running_state(gpu);
    schedule_staged_inputs(gpu);
    schedule_scores(gpu);
    schedule_step_softmax(gpu);
    if (gpu.split)
        schedule_combine(gpu);
}

} // namespace attngen
