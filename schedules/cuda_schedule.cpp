// The GPU schedule (CUDA, and the same schedule on OpenCL, which CI runs on the CPU through PoCL).
//
// One thread block per (query tile, heads_per_block query heads of one kv head's group, batch):
// each K/V chunk staged in shared memory serves every query of the tile and every head of the
// block (one head by default; see gpu_schedule_params). Scores exist only per chunk: register
// micro-tiles per thread, then a chunk in shared memory, never a whole row in global memory. The
// softmax statistics and P·V are reductions over keys walked chunk by chunk (rfactor: each thread
// reduces one chunk in registers and adds it once to the block's accumulator), in two passes over
// K:
//   1. row_max: scores computed per chunk, the max kept per query;
//   2. row_sum and P·V fused (compute_with): scores recomputed, exp(score - max) staged once per
//      chunk, summed and multiplied with the staged V chunk.
// The output is written once, threads along head_dim so the stores are coalesced.
//
// Decode shapes (a few queries per head) leave that grid mostly empty, so their split-KV form
// (kv_chunk > 0) gives each chunk of keys its own block: the same two passes compute the chunk's
// max, sum and partial output, blocks run over (query tile, chunk, kv head x batch), and the
// output's kernel combines the chunks exactly.
#include "schedule.h"

#include <algorithm>
#include <vector>

namespace attngen {

using Halide::Func;
using Halide::RVar;
using Halide::Stage;
using Halide::TailStrategy;
using Halide::Var;
using Halide::VarOrRVar;

namespace {

/** The block's thread grid; every block-level stage is spread over it. */
constexpr int threads_x = 16, threads_y = 16;

/**
 * Spreads `stage` over the block's threads: x over `x_threads` threads (at most threads_x) with
 * `x_unroll` consecutive elements per thread, y over threads_y likewise. What is left of x and y
 * runs as serial loops around the threads. Returns the thread variables (x innermost).
 */
std::pair<Var, Var> spread(Stage stage, const VarOrRVar &x, int x_unroll, const VarOrRVar &y,
                           int y_unroll, const std::string &prefix, int x_threads = threads_x) {
    Var xo{prefix + "_xo"}, xt{prefix + "_xt"}, xu{prefix + "_xu"};
    Var yo{prefix + "_yo"}, yt{prefix + "_yt"}, yu{prefix + "_yu"};
    stage.split(x, xo, xt, x_threads * x_unroll, TailStrategy::GuardWithIf)
        .split(xt, xt, xu, x_unroll, TailStrategy::GuardWithIf)
        .split(y, yo, yt, threads_y * y_unroll, TailStrategy::GuardWithIf)
        .split(yt, yt, yu, y_unroll, TailStrategy::GuardWithIf)
        .reorder(xu, yu, xt, yt, xo, yo)
        .gpu_threads(xt, yt)
        .unroll(xu)
        .unroll(yu);
    return {xt, yt};
}

/** Elements per thread so that `extent` covers `threads` threads (at least 1). */
int per_thread(int extent, int threads) {
    return std::max(1, (extent + threads - 1) / threads);
}

/**
 * A score micro-tile per thread: `scores` (k, q, h, b) computed inside the thread loop of
 * `chunk`, its head_dim reduction running over register accumulators.
 */
void schedule_scores_in_thread(Func scores, Func chunk, const Var &thread, const Var &k,
                               const Var &q, int key_unroll, int query_unroll) {
    scores.compute_at(chunk, thread)
        .bound_extent(k, key_unroll)
        .bound_extent(q, query_unroll)
        .unroll(k)
        .unroll(q);
    scores.update().reorder(k, q, scores.rvars(0)[0]).unroll(k).unroll(q);
}

} // namespace

void apply_gpu_schedule(AttentionStages &s, const Halide::Target &,
                        const GpuScheduleParams &params) {
    const AttentionSpec &spec = s.spec;
    const int head_dim = spec.resolved_head_dim();
    const int block_heads = params.heads_per_block;
    const int query_tile = params.query_tile;
    const int key_chunk = params.key_chunk;
    Var d = s.d, q = s.q, k = s.k, h = s.h, b = s.b;

    // Projections: plain register-tiled GEMM kernels at root, 4 x 4 outputs per thread.
    auto gemm = [&](Func stage, const Var &row, const Var &outer0, const Var &outer1,
                    const std::string &prefix) {
        Var xo{prefix + "_bx"}, yo{prefix + "_by"}, xi{prefix + "_tx"}, yi{prefix + "_ty"};
        Var xu{prefix + "_ux"}, yu{prefix + "_uy"};
        Var x = stage.args()[0];
        stage.compute_root();
        // The same tiles for the bias (pure) stage and the accumulation, whose reduction runs
        // inside each thread's 2 x 2 outputs.
        for (Stage tiled : {Stage(stage), stage.update()}) {
            tiled
                .tile(x, row, xo, yo, xi, yi, threads_x * 2, threads_y * 2,
                      TailStrategy::GuardWithIf)
                .tile(xi, yi, xi, yi, xu, yu, 2, 2, TailStrategy::GuardWithIf)
                .reorder(xu, yu, xi, yi, xo, yo, outer0, outer1)
                .gpu_blocks(xo, yo, outer0)
                .gpu_threads(xi, yi)
                .unroll(xu)
                .unroll(yu);
        }
        stage.update().reorder(xu, yu, stage.rvars(0)[0]);
    };
    if (spec.projections.any()) {
        gemm(s.q_proj, q, h, b, "qp");
        gemm(s.k_proj, k, h, b, "kp");
        gemm(s.v_proj, k, h, b, "vp");
    }

    Func core = spec.projections.out ? s.attn_out : s.output;
    if (spec.projections.out) {
        s.attn_out.compute_root();
        Var c = s.c;
        Var co{"op_bx"}, qo{"op_by"}, ci{"op_tx"}, qi{"op_ty"};
        s.output.tile(c, q, co, qo, ci, qi, threads_x, threads_y, TailStrategy::GuardWithIf)
            .gpu_blocks(co, qo, b)
            .gpu_threads(ci, qi);
        s.out_proj.compute_at(s.output, ci);
        s.out_proj.update().unroll(s.r_concat.x, 4, TailStrategy::GuardWithIf);
    } else {
        s.attn_out.compute_inline();
    }

    // The kernel that walks the keys: the output itself (whole rows), or in the split-KV form
    // the chunks' partials, which a second kernel (the output's) combines.
    const bool split = s.kv_chunk > 0;
    Func walk = split ? s.partials : core;
    Func max_stat = split ? s.part_max : s.row_max;
    Func sum_stat = split ? s.part_sum : s.row_sum;
    Func out_stat = split ? s.part_out : s.weighted_sum;
    Var j = s.j;

    // The block: a query tile of block_heads heads of one kv head's group (and of one chunk of
    // keys in the split form). block_heads divides the group, so a block's heads share their kv
    // head. The walk's own loop is spread over the threads along head_dim (coalesced stores).
    Var qo{"q_tile"}, qi{"q_in_tile"}, kv{"head_block"}, hg{"head_in_block"};
    auto block_tiles = [&](Func stage) {
        stage.split(h, kv, hg, block_heads, TailStrategy::GuardWithIf)
            .split(q, qo, qi, query_tile, TailStrategy::GuardWithIf);
    };
    block_tiles(walk);
    if (split) {
        Var kvb{"kv_head_batch"};
        walk.compute_root()
            .reorder(d, qi, hg, qo, j, kv, b)
            .fuse(kv, b, kvb)
            .gpu_blocks(qo, j, kvb);
    } else {
        walk.reorder(d, qi, hg, qo, kv, b).gpu_blocks(qo, kv, b);
    }
    spread(walk, d, 1, qi, 1, "out");

    // The block's queries, scaled once and kept in shared memory for both passes (where they
    // fit): the score loops then read them from shared memory and fuse the multiply-add. Stored
    // with the queries innermost, so the threads that share a feature read neighbouring words.
    if (params.stage_queries) {
        s.q_heads.compute_at(walk, qo).reorder_storage(q, d);
        spread(s.q_heads, d, per_thread(head_dim, threads_x), q, per_thread(query_tile, threads_y),
               "q");
    }

    const int d_unroll = per_thread(head_dim, threads_x);
    const int q_unroll = per_thread(query_tile, threads_y);
    const int k_unroll = per_thread(key_chunk, threads_x);

    // The chunk a pass stages: keys as the x threads, queries as the y threads. The key
    // threads cover the chunk exactly (key_chunk is a power of two): one more would make the
    // scores of its K chunk a key longer than the K chunk staged for them.
    auto stage_chunk = [&](Func chunk, Func scores, const Func &consumer, const RVar &chunk_var,
                           const std::string &prefix) {
        chunk.compute_at(consumer, chunk_var);
        if (split) {
            // In the split-KV form Halide's check that a step needs at most key_chunk keys
            // fails for some blocks once a causal or window mask meets long queries (an H100
            // trapped at Lq = Lk = 96..1024; PoCL ignores assertions inside kernels and gave the
            // reference's results). Rounding the step's keys out to whole aligned chunks has no
            // such check; it cost decode 1.2x against the (failing) bound on the H100. Chunks
            // of keys are whole steps (kv_chunk is a multiple of key_chunk), so the aligned steps
            // are the chunk's own.
            chunk.align_bounds(k, key_chunk);
        } else {
            chunk.bound_extent(k, key_chunk);
        }
        chunk.reorder(k, q, h);
        auto threads =
            spread(chunk, k, k_unroll, q, q_unroll, prefix, std::min(threads_x, key_chunk));
        schedule_scores_in_thread(scores, chunk, threads.first, k, q, k_unroll, q_unroll);
        // K chunk for these scores, loaded with head_dim along the threads (coalesced) and
        // stored transposed, keys innermost, in rows padded by one word: the threads of a warp
        // then read (neighbouring keys of one feature) and write (neighbouring features of one
        // key) distinct banks. Unpadded, either the reads or the stores of every thread in a
        // row would fall in one bank.
        Func k_chunk = s.k_heads.in(scores);
        k_chunk.compute_at(consumer, chunk_var)
            .bound_extent(k, key_chunk)
            .reorder_storage(k, d)
            .align_storage(k, key_chunk + 1);
        spread(k_chunk, d, d_unroll, k, per_thread(key_chunk, threads_y), prefix + "_k");
    };

    // The loops of a key reduction's update outside its threads: the heads of the block, then
    // (split form) the chunk of the block, then the steps of key_chunk keys. The chunk loop has
    // extent 1 inside a block; naming it keeps it out from between the thread loops.
    auto outer_loops = [&](std::vector<VarOrRVar> inner, const RVar &chunk_var) {
        if (split)
            inner.emplace_back(j);
        inner.emplace_back(chunk_var);
        return inner;
    };

    // A block-level reduction over keys, chunk by chunk: rfactor per chunk, so that each
    // thread reduces its share of a chunk in registers (the returned intermediate) and adds it
    // once to the block's accumulator. `stat` is spread over the threads by (x, y); the chunk
    // loop is outside the heads of the block, so a staged chunk serves all of them.
    auto reduce_by_chunks = [&](Func stat, const RVar &keys, const Var &x, int x_unroll,
                                const Var &y, int y_unroll, const RVar &chunk_var,
                                const RVar &key_in_chunk, const std::string &prefix) {
        stat.compute_at(walk, qo);
        spread(stat, x, x_unroll, y, y_unroll, prefix + "_init");
        Var u{prefix + "_u"};
        Func partial =
            stat.update()
                .split(keys, chunk_var, key_in_chunk, key_chunk, TailStrategy::GuardWithIf)
                .rfactor(chunk_var, u);
        if (y.same_as(h))
            stat.update().reorder(outer_loops({x, h}, chunk_var));
        else
            stat.update().reorder(outer_loops({x, y, h}, chunk_var));
        auto threads = spread(stat.update(), x, x_unroll, y, y_unroll, prefix + "_update");
        partial.compute_at(stat, threads.first)
            .bound_extent(q, q_unroll)
            .bound_extent(u, 1)
            .unroll(q);
        partial.update().reorder(x, y, key_in_chunk).unroll(q);
        return partial;
    };

    // Pass 1, the row (chunk) max: its own copy of the score stages (scores are recomputed,
    // never kept). Cloned after rfactor, whose intermediate is what reads them.
    {
        RVar chunk_var{"max_chunk"}, key_in_chunk{"max_key"};
        Func partial = reduce_by_chunks(max_stat, s.r_keys.x, q, q_unroll, h, 1, chunk_var,
                                        key_in_chunk, "max");
        Func chunk = s.masked.clone_in(partial);
        Func scores = s.scores.clone_in(chunk);
        stage_chunk(chunk, scores, max_stat, chunk_var, "max");
    }

    // Pass 2: the row sum and P·V fused into one walk over the keys (compute_with), sharing the
    // chunk's probabilities and its K and V in shared memory. Each thread owns d_unroll x
    // q_unroll outputs per head of the block.
    RVar chunk_var{"chunk"}, key_in_chunk{"key_in_chunk"};
    Func pv_partial = reduce_by_chunks(out_stat, s.r_values.x, d, d_unroll, q, q_unroll, chunk_var,
                                       key_in_chunk, "pv");
    if (head_dim % threads_x == 0) {
        // Exact: threads_x x d_unroll == head_dim, so the micro-tile never leaves the head.
        pv_partial.bound_extent(d, d_unroll).unroll(d);
        pv_partial.update().unroll(d);
    }

    sum_stat.compute_at(walk, qo);
    spread(sum_stat, q, q_unroll, h, 1, "sum_init");
    sum_stat.update()
        .split(s.r_keys.x, chunk_var, key_in_chunk, key_chunk, TailStrategy::GuardWithIf)
        .reorder(outer_loops({key_in_chunk, q, h}, chunk_var));
    spread(sum_stat.update(), q, q_unroll, h, 1, "sum_update");
    sum_stat.update().compute_with(out_stat.update(), chunk_var);

    s.masked.compute_inline();
    stage_chunk(s.probs, s.scores, out_stat, chunk_var, "pv");
    Func v_chunk = s.v_heads.in(pv_partial);
    v_chunk.compute_at(out_stat, chunk_var);
    spread(v_chunk, d, d_unroll, k, per_thread(key_chunk, threads_y), "pv_v");

    if (split) {
        // The combine, in the output's kernel: a block per (query tile, kv head, batch) as in
        // the whole-row form; each thread folds the chunks of its own outputs in registers,
        // reading the partials from global memory (a few chunks' worth: no shared memory and
        // no barriers needed).
        block_tiles(core);
        core.reorder(d, qi, hg, qo, kv, b).gpu_blocks(qo, kv, b);
        const Var thread = spread(core, d, 1, qi, 1, "combine").first;
        for (Func stat : {s.row_max, s.row_sum, s.weighted_sum})
            stat.compute_at(core, thread);
        s.part_scale.compute_inline();
    }
}

} // namespace attngen
