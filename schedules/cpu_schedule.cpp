// The CPU schedule skeleton shared by x86 and ARM: one parallel task per (batch, kv head, query
// tile), covering every query head of the kv head's group. Inside a task the keys are walked in
// flash chunks (flash_chunk; 0: whole rows), each chunk by the group's heads in turn while its K
// and V rows are in cache: a chunk's scores are computed, masked and turned into probabilities
// while they are in L1, vectorized along queries (K is broadcast from an aligned row-major copy,
// no transpose); its P·V is register-blocked and vectorized along value_dim; the chunks combine
// exactly. With rows_up_to, the layer holds both forms and its tiles are specialized on Lk:
// whole rows up to rows_up_to keys, chunks beyond.
// The prefill projections are GEMMs that read the weights in place (register tiles broadcast
// weight elements against vectors of activations transposed once per call), or packed GEMMs
// (packed_weights: each weight transposed once per call, tiles that broadcast activations); in
// decode, the projections over a few rows (Q and the output, and K and V in self-attention)
// read the weights in place as dot products. The blocks' defaults come from the target family's
// column of schedule_param_table(). Decode shapes use the split-KV
// form instead (schedule_split_kv): tasks over chunks of keys, not query tiles.
#include "schedule.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

namespace attngen {

using Halide::Func;
using Halide::RDom;
using Halide::TailStrategy;
using Halide::Var;

namespace {

/**
 * The row length, in floats, to store a packed weight with `rows` outputs: padded by two
 * vectors. A GEMM tile walks the packed weight down its input features at this stride; at a
 * power of two (512 or 1024 floats) every step maps to the same few cache sets and the tile's
 * panel is evicted from L1 and L2 as it is read.
 */
int padded_row(int rows, int lanes) {
    return rows + 2 * lanes;
}

/** The outputs of vectorize_dot_products that share each load along its reduction. */
struct DotProductBlock {
    std::vector<std::pair<Var, int>> vars; ///< each bounded to its extent
    bool vector_sums = false;              ///< one reduction for the whole block (see there)
    int pair = 1; ///< elements of r per lane and step: 2 for an integer dot product's pmaddwd
};

/**
 * Vectorizes the reduction over `r` of `stage`'s update as dot products: r is split into
 * vectors (rfactor) of `lanes` partial sums, each over `block.pair` adjacent elements a step,
 * each output keeps one vector of partial sums in registers, computed at `at` for a block of
 * outputs (`block.vars`, each bounded to its extent and unrolled, so that they share each load
 * along r), and one horizontal sum per output finishes them; with `block.vector_sums`, one for the
 * whole block instead, its outputs' vectors reduced together into a vector of outputs (a
 * transposing tree of shuffles and adds: the split-KV scores of four heads took 94 instructions per
 * key rather than 118, AVX-512). `outer_r` lists the update's other reduction loops, which run
 * outside r.
 */
void vectorize_dot_products(Func stage, const Halide::RVar &r, int lanes,
                            const Halide::LoopLevel &at, const DotProductBlock &block,
                            const std::vector<Halide::RVar> &outer_r = {}) {
    const int pair = block.pair;
    Halide::RVar r_outer{"r_outer"}, r_lane{"r_lane"}, r_pair{"r_pair"};
    Var lane{stage.name() + "_lane"};
    stage.update().split(r, r_outer, r_lane, lanes * pair);
    if (pair > 1)
        stage.update().split(r_lane, r_lane, r_pair, pair);
    Func partial = stage.update().rfactor(r_lane, lane);
    std::vector<Var> storage{lane};
    std::vector<Halide::VarOrRVar> order{lane};
    if (pair > 1)
        order.insert(order.begin(), r_pair);
    for (const auto &[var, extent] : block.vars) {
        storage.push_back(var);
        order.emplace_back(var);
    }
    order.emplace_back(r_outer);
    order.insert(order.end(), outer_r.begin(), outer_r.end());
    partial.compute_at(at).reorder_storage(storage).vectorize(lane);
    partial.update().reorder(order);
    if (pair > 1)
        partial.update().atomic().vectorize(r_pair);
    partial.update().vectorize(lane);
    stage.update().atomic().vectorize(r_lane);
    for (const auto &[var, extent] : block.vars) {
        partial.bound_extent(var, extent).unroll(var);
        partial.update().unroll(var);
        if (block.vector_sums)
            stage.update().vectorize(var);
        else
            stage.update().unroll(var);
    }
}

/** Outputs per task of the packed GEMMs (at least one head), so that short inputs still
 * make tasks for every core. */
constexpr int gemm_task_outputs = 256;

/** Accumulator vectors of a P·V register block of the split-KV schedule: half the vector
 *  registers (32 with AVX-512's 16 lanes, 16 with AVX2's 8). */
int pv_register_accumulators(int lanes) {
    return lanes >= 16 ? 16 : 8;
}

/**
 * Stores `weight(in, out)`, the caller's nn.Linear weight (in features contiguous),
 * transposed at root so that a GEMM tile loads vectors of outputs, its rows padded by
 * padded_row. Packed in blocks of vectors x vectors (a transpose in registers), in parallel
 * over blocks of eight vectors of input features: each task reads four consecutive cache
 * lines of every weight row once, rather than one line per row (a 1024-wide row is a 4 KiB
 * page of its own), and writes its rows of the packed weight in order (docs/performance.md
 * has the measurements behind this and the other choices below).
 */
void pack_transposed(Func weight, int outputs, int lanes) {
    Var in = weight.args()[0], out = weight.args()[1];
    Var out_inner{out.name() + "_inner"}, in_inner{in.name() + "_inner"};
    Var in_block{in.name() + "_block"};
    weight.compute_root()
        .reorder_storage(out, in)
        .bound_storage(out, padded_row(outputs, lanes))
        .split(in, in_block, in, 8 * lanes, TailStrategy::GuardWithIf)
        .tile(out, in, out_inner, in_inner, lanes, lanes, TailStrategy::GuardWithIf)
        .reorder(out_inner, in_inner, in, out, in_block)
        .vectorize(out_inner)
        .unroll(in_inner)
        .parallel(in_block);
}

/** The register tile of the in-place projection: rows x outputs partial-sum vectors. */
constexpr int dot_rows = 4, dot_outputs = 3;

/** A projection `stage(out, row, ...) += a(r, ..., row) * weight(r, ..., out)` read in place. */
struct InPlaceProjection {
    Func tiled;  ///< the stage's root wrapper or consumer, which holds the tiles
    Func stage;  ///< the reduction
    Func weight; ///< the caller's nn.Linear weight, contiguous along r
    int r_extent;
    Var out;
    int out_extent;
    Var row;
    std::vector<Var> outer; ///< further pure loops of `tiled`, run as parallel tasks
    int out_tiles_per_task; ///< output tiles per task; 0: all of them
};

/**
 * Schedules a projection (InPlaceProjection) as
 * dot products along r = stage.rvars(0)[0] (any further reduction loops run outside it), where
 * both the activations and the caller's nn.Linear weight are contiguous along r, so the weight
 * is read in place rather than packed. `tiled` is split
 * into tiles of dot_rows rows x dot_outputs outputs, in parallel tasks over blocks of rows and
 * the `outer` vars, and over blocks of `out_tiles_per_task` output tiles where that is nonzero.
 * Each tile keeps one vector of partial sums per (row, output) in registers across r and
 * finishes each with one horizontal sum; its rows of `a` stay in L1 while the outputs pass by.
 * For decode: with a few rows each weight row is read once either way. With many rows every
 * block of rows streams the whole weight from L3 again, which is why prefill uses the packed
 * GEMM or transposes the activations.
 */
void schedule_projection_in_place(const InPlaceProjection &projection, int lanes) {
    Func tiled = projection.tiled, stage = projection.stage;
    const Var &out_var = projection.out, &row_var = projection.row;
    const int out_tiles_per_task = projection.out_tiles_per_task;
    const int r_lanes = vector_width_dividing(projection.r_extent, lanes);
    const int tile_outputs = std::min(dot_outputs, projection.out_extent);
    Var out_outer{out_var.name() + "_outer"}, out_inner{out_var.name() + "_inner"};
    Var row_outer{row_var.name() + "_outer"}, row_inner{row_var.name() + "_inner"};
    Var out_task{out_var.name() + "_task"}, task{stage.name() + "_task"};
    Func weight = projection.weight;
    weight.compute_inline();

    // Rows may be fewer than a tile (decode): guard them rather than shift below row 0. The
    // output tiles shift inwards instead: a guarded tile would still read its whole width.
    tiled.split(out_var, out_outer, out_inner, tile_outputs)
        .split(row_var, row_outer, row_inner, dot_rows, TailStrategy::GuardWithIf)
        .reorder(out_inner, row_inner, out_outer, row_outer)
        .unroll(out_inner)
        .unroll(row_inner);
    std::vector<Var> tasks{row_outer};
    if (out_tiles_per_task > 0) {
        tiled.split(out_outer, out_task, out_outer, out_tiles_per_task, TailStrategy::GuardWithIf)
            .reorder(out_outer, row_outer, out_task);
        tasks.push_back(out_task);
    }
    tasks.insert(tasks.end(), projection.outer.begin(), projection.outer.end());
    tiled.fuse(tasks[0], tasks[1], task);
    for (size_t i = 2; i < tasks.size(); i++)
        tiled.fuse(task, tasks[i], task);
    tiled.parallel(task);
    stage.compute_at(tiled, out_outer)
        .bound_extent(out_var, tile_outputs)
        .bound_extent(row_var, dot_rows)
        .unroll(out_var)
        .unroll(row_var);
    const std::vector<Halide::RVar> rvars = stage.rvars(0);
    vectorize_dot_products(stage, rvars[0], r_lanes, Halide::LoopLevel(tiled, out_outer),
                           {{{out_var, tile_outputs}, {row_var, dot_rows}}},
                           {rvars.begin() + 1, rvars.end()});
}

/** A GEMM's register tile: `vector_var` (in vectors of `vec`) x `other`. */
struct RegisterTile {
    Var vector_var;
    int vector_extent;
    int vec;
    Var other;
    int other_extent;
};

/**
 * Computes `stage`, a GEMM's register tile, at `at`: both of the tile's vars unrolled so that
 * the accumulators stay in registers, stored and looped `vector_var` innermost; its update
 * runs the `reduction` loops (innermost first) outside the tile.
 */
void schedule_register_tile(Func stage, const Halide::LoopLevel &at, const RegisterTile &tile,
                            const std::vector<Halide::VarOrRVar> &reduction) {
    const Var &vector_var = tile.vector_var, &other = tile.other;
    const int vector_extent = tile.vector_extent, vec = tile.vec, other_extent = tile.other_extent;
    stage.compute_at(at)
        .bound_extent(vector_var, vector_extent)
        .bound_extent(other, other_extent)
        .reorder_storage(vector_var, other)
        .reorder(vector_var, other)
        .vectorize(vector_var, vec)
        .unroll(vector_var)
        .unroll(other);
    std::vector<Halide::VarOrRVar> order{vector_var, other};
    order.insert(order.end(), reduction.begin(), reduction.end());
    stage.update().reorder(order).vectorize(vector_var, vec).unroll(vector_var).unroll(other);
}

/**
 * The loops of a projection GEMM `stage(out, row, group, b) += a(r..., row) * w(r..., out...)`
 * and the Func that holds its tiles.
 */
struct GemmLoops {
    Func tiled; ///< the stage's root wrapper or consumer
    Func stage;
    Var out, row;
    Var group;      ///< an outer part of the outputs
    int group_size; ///< values of group per task; divides its extent
    Var b;
    std::vector<Halide::VarOrRVar> reduction; ///< the update's loops, innermost first
};

/**
 * Tiles the packed GEMM `gemm`, whose
 * weight is packed (pack_transposed), into its root wrapper `tiled`. A task takes
 * params.gemm_task_rows rows of one batch and `group_size` values of `group` (an outer part
 * of the outputs; group_size divides its extent), and walks its panels of `block` outputs,
 * each over every register tile of params.gemm_rows rows x `block` outputs: one broadcast of
 * `a` per row, vectors of `vec` outputs from the panel, which stays in L2 while the task's
 * rows pass by. `reduction` lists the update's loops, innermost first. Returns the task loop.
 */
Var tile_packed_gemm(const GemmLoops &gemm, int vec, int block, const CpuScheduleParams &params) {
    Func tiled = gemm.tiled, stage = gemm.stage;
    const Var &out = gemm.out, &row = gemm.row, &group = gemm.group, &b = gemm.b;
    const int gemm_rows = params.gemm_rows;
    Var out_outer{out.name() + "_outer"}, out_inner{out.name() + "_inner"};
    Var row_task{row.name() + "_task"}, row_outer{row.name() + "_outer"},
        row_inner{row.name() + "_inner"}, group_task{group.name() + "_task"};
    Var task{stage.name() + "_task"};
    // Rows may be fewer than a tile: guard them rather than shift below row 0.
    tiled.split(row, row_task, row, params.gemm_task_rows, TailStrategy::GuardWithIf)
        .split(row, row_outer, row_inner, gemm_rows, TailStrategy::GuardWithIf)
        .split(group, group_task, group, gemm.group_size)
        .split(out, out_outer, out_inner, block);
    tiled.reorder(out_inner, row_inner, row_outer, out_outer, group, group_task, row_task, b)
        .vectorize(out_inner, vec)
        .unroll(out_inner)
        .unroll(row_inner)
        .fuse(group_task, row_task, task)
        .fuse(task, b, task)
        .parallel(task);
    schedule_register_tile(stage, Halide::LoopLevel(tiled, row_outer),
                           {out, block, vec, row, gemm_rows}, gemm.reduction);
    return task;
}

/** A block of one or two vectors of `vec` that divides `extent` (vec divides it). */
int panel_width(int extent, int vec) {
    return extent % (2 * vec) == 0 ? 2 * vec : vec;
}

/** The largest divisor of `n` that is at most `limit` (and at least 1). */
int largest_divisor_at_most(int n, int limit) {
    for (int divisor = std::max(1, std::min(n, limit)); divisor > 1; divisor--)
        if (n % divisor == 0)
            return divisor;
    return 1;
}

/** Heads per task of a Q, K or V projection GEMM with `outputs` outputs: at most
 * gemm_task_outputs outputs, dividing the heads. */
int gemm_task_heads(int outputs, int head_dim) {
    return largest_divisor_at_most(outputs / head_dim, gemm_task_outputs / head_dim);
}

/** A Q, K or V projection: `stage(d, row, h, b) += rows(r, row, b) * weight(r, h * width + d)`,
 * width head_dim (Q, K) or value_dim (V). */
struct Projection {
    Func stage, weight, rows;
    int outputs;
    int width;
};

/** The GEMM loops of a projection, tiled in `tiled`: tasks of whole heads (gemm_task_heads). */
GemmLoops head_projection_loops(Func tiled, const Projection &projection,
                                const AttentionStages &s) {
    Func stage = projection.stage;
    const int task_heads = gemm_task_heads(projection.outputs, projection.width);
    return {tiled, stage, s.d, stage.args()[1], s.h, task_heads, s.b, {stage.rvars(0)[0]}};
}

/**
 * Schedules a Q, K or V projection (Projection) as a packed GEMM (tile_packed_gemm), for prefill:
 * tasks of whole heads, and each task copies its rows of activations once, so that the inner loop
 * reads them at fixed strides with no clamps left in it.
 */
void schedule_projection_packed(const Projection &projection, const AttentionStages &s, int lanes,
                                const CpuScheduleParams &params) {
    const int width = projection.width;
    Func stage = projection.stage, rows = projection.rows;
    pack_transposed(projection.weight, projection.outputs, lanes);
    const int d_vec = vector_width_dividing(width, lanes);
    Func tiled = stage.in();
    tiled.compute_root();
    Var task = tile_packed_gemm(head_projection_loops(tiled, projection, s), d_vec,
                                panel_width(width, d_vec), params);
    Var feature = rows.args()[0];
    rows.in(stage).compute_at(tiled, task).vectorize(feature, lanes, TailStrategy::GuardWithIf);
}

/**
 * Schedules `copy`, computed at root with `dense` stored innermost, as a transpose of a source
 * whose innermost dimension is `across`: in tiles of lanes x lanes, each stored vector along
 * `dense` gathered from the source, the tile's `across` unrolled (vectorizing both, for a
 * transpose in registers, was slower). Parallel over blocks of `across` and the other
 * dimensions.
 */
void schedule_transpose(Func copy, const Var &dense, const Var &across, int lanes) {
    Var dense_inner{dense.name() + "_t"}, across_inner{across.name() + "_t"};
    Var task{copy.name() + "_task"};
    std::vector<Halide::VarOrRVar> loops{dense_inner, across_inner, dense, across};
    copy.compute_root()
        .split(across, task, across, 8 * lanes, TailStrategy::GuardWithIf)
        .tile(dense, across, dense_inner, across_inner, lanes, lanes, TailStrategy::GuardWithIf);
    loops.emplace_back(task);
    std::vector<Var> outer;
    for (const Var &arg : copy.args())
        if (arg.name() != dense.name() && arg.name() != across.name())
            outer.push_back(arg);
    loops.insert(loops.end(), outer.begin(), outer.end());
    copy.reorder(loops).vectorize(dense_inner).unroll(across_inner);
    for (const Var &arg : outer)
        copy.fuse(task, arg, task);
    copy.parallel(task);
}

/**
 * Makes `readers` read a root copy of activations `rows(r..., row, ...)` stored rows innermost
 * (the vector lanes of schedule_projection_broadcast).
 */
void transposed_rows(Func rows, const std::vector<Func> &readers, int lanes) {
    Func copy = rows.in(readers);
    const Var r = copy.args()[0], row = copy.args()[1];
    copy.reorder_storage(row, r);
    schedule_transpose(copy, row, r, lanes);
}

/**
 * Schedules a projection GEMM (GemmLoops, reading activations rows_t transposed)
 * with the caller's nn.Linear weight read in place, for prefill: a register tile holds
 * params.gemm_row_vectors vectors of rows x `tile_outputs` outputs, and each step of the reduction
 * loads one vector of the activations (transposed: transposed_rows) per row vector and broadcasts
 * one weight element per output. `tiled`, the stage's root wrapper, is stored rows innermost. A
 * task takes params.gemm_task_tiles row tiles and `group_size` values of `group` (an outer part of
 * the outputs) and walks its output tiles, each over the task's row tiles: the tile's weight rows
 * stay in L1 while the rows pass, the task's activations in L2. `reduction` lists the update's
 * loops, innermost first. Against packing each weight once per call (schedule_projection_packed),
 * this reads each weight once and transposes the activations instead, which costs as many bytes as
 * the activations rather than the weights.
 */
void schedule_projection_broadcast(const GemmLoops &gemm, Func weight, int tile_outputs,
                                   const CpuScheduleParams &params, int lanes) {
    Func tiled = gemm.tiled, stage = gemm.stage;
    const Var &out = gemm.out, &row = gemm.row, &group = gemm.group, &b = gemm.b;
    const int tile_rows = params.gemm_row_vectors * lanes;
    weight.compute_inline();
    Var out_outer{out.name() + "_outer"}, out_inner{out.name() + "_inner"};
    Var row_task{row.name() + "_task"}, row_outer{row.name() + "_outer"},
        row_inner{row.name() + "_inner"}, group_task{group.name() + "_task"};
    Var task{stage.name() + "_task"};
    std::vector<Var> storage{row};
    for (const Var &arg : tiled.args())
        if (arg.name() != row.name())
            storage.push_back(arg);
    tiled.compute_root()
        .reorder_storage(storage)
        .split(row, row_outer, row_inner, tile_rows, TailStrategy::RoundUp)
        .split(row_outer, row_task, row_outer, params.gemm_task_tiles, TailStrategy::GuardWithIf)
        .split(group, group_task, group, gemm.group_size)
        .split(out, out_outer, out_inner, tile_outputs)
        .reorder(row_inner, out_inner, row_outer, out_outer, group, group_task, row_task, b)
        .vectorize(row_inner, lanes)
        .unroll(row_inner)
        .unroll(out_inner)
        .fuse(group_task, row_task, task)
        .parallel(task);
    schedule_register_tile(stage, Halide::LoopLevel(tiled, row_outer),
                           {row, tile_rows, lanes, out, tile_outputs}, gemm.reduction);
}

/**
 * Whether the split-KV form widens a cached layer's K and V rows (an f16 or bf16 cache) to f32
 * once per key (or block of keys) into L1, rather than once per head (or block of heads) that
 * reads them. An f32 cache's rows are read in place: the copy cost more than it saved (a
 * decode step of 32k keys, 2-core Zen 5: 6-15% slower).
 */
bool widens_cache_rows(const AttentionSpec &spec) {
    return spec.cache.any() && spec.resolved_cache_dtype() != DType::f32;
}

/**
 * The split-KV P·V register tile (cpu_kv_value_block) for vectors of `lanes`: `heads` of the
 * group's heads by `vectors` of a V row's `row_vectors`, and whether a block's V rows are first
 * copied, widened to f32, into L1 (`copies`).
 *
 * With 16 accumulators (AVX-512), whole rows (two heads' at D = 128), read again from L1 for
 * the group's other heads; but a contiguous i8 cache's rows in slices for all the group's heads
 * at once, since widening a slice again costs two instructions a vector, less than the copy and
 * its reads per head. With 8 (AVX2), slices (D = 128: two vectors for each of four heads).
 *
 * The copy, of a cache's rows only: in f16 or bf16, whose widening costs more than the copy; in
 * i8, those of a paged cache (read in place, each slice would look its block up again) and
 * all of them with 8 accumulators (eight slices a row at D = 128).
 */
struct ValueTile {
    int heads;
    int vectors;
    bool copies;
};

ValueTile split_kv_value_tile(const AttentionSpec &spec, int row_vectors, int lanes) {
    const int accumulators = pv_register_accumulators(lanes);
    const int group = spec.group_size();
    const bool paged = spec.cache.kind == CacheSpec::Kind::paged;
    const bool i8_rows = spec.cache.any() && spec.resolved_cache_dtype() == DType::i8;
    const bool slices = accumulators < 16 || (i8_rows && !paged);
    ValueTile tile{};
    tile.vectors = slices ? largest_divisor_at_most(row_vectors, std::max(1, accumulators / group))
                          : row_vectors;
    tile.heads = largest_divisor_at_most(group, std::max(1, accumulators / tile.vectors));
    tile.copies = widens_cache_rows(spec) && (!i8_rows || paged || accumulators < 16);
    return tile;
}

/**
 * The split-KV form's P·V (schedule_split_kv), per task at `at`, in vectors of `d_vec` on a
 * target of `lanes`: each V row is read once from memory into the group's accumulators: in
 * register tiles a block of keys at a time where they fit (cpu_kv_value_block), else in L1.
 */
void schedule_split_kv_values(AttentionStages &s, const Halide::LoopLevel &at, int d_vec,
                              int lanes) {
    const int value_dim = s.spec.resolved_value_dim();
    const int group = s.spec.group_size();
    Var d = s.d, q = s.q, h = s.h, b = s.b, j = s.j;
    s.part_out.compute_at(at).bound_extent(h, group).vectorize(d, d_vec);
    if (s.options.kv_value_block == 0) {
        if (widens_cache_rows(s.spec))
            s.v_heads.compute_at(s.part_out, s.r_values.x).vectorize(d, d_vec).unroll(d);
        // P·V: each V row is read once, whole: the group's accumulators for it stay in L1.
        // Blocks of value_dim held in registers instead would read V in strided passes.
        s.part_out.update()
            .reorder(d, h, s.r_values.x, q, j, b)
            .vectorize(d, d_vec)
            .unroll(d)
            .unroll(h);
        return;
    }
    // P·V in register tiles (split_kv_value_tile): for each block of keys, the tile's
    // accumulators take the block's rows (or their slices) for the tile's heads; one
    // load-add-store of each accumulator per block rather than per key.
    const ValueTile value_tile = split_kv_value_tile(s.spec, value_dim / d_vec, lanes);
    Var block{"pv_block"}, h_outer{"pv_h_outer"}, h_inner{"pv_h_inner"};
    Var d_outer{"pv_d_outer"}, d_inner{"pv_d_inner"};
    const Halide::RVar keys = s.r_values.x, blocks = s.r_values.y;
    Func tile = s.part_out.update().rfactor(blocks, block);
    // A block's rows, bounded so that they are one fixed buffer on the stack: the last
    // block's clamped rows made its extent vary, and every block a heap allocation.
    if (value_tile.copies)
        s.v_heads.compute_at(s.part_out, blocks)
            .bound_extent(s.k, s.options.kv_value_block)
            .vectorize(d, d_vec)
            .unroll(d);
    const int slice = value_tile.vectors * d_vec;
    s.part_out.update()
        .split(d, d_outer, d_inner, slice)
        .split(h, h_outer, h_inner, value_tile.heads)
        .reorder(d_inner, h_inner, d_outer, h_outer, blocks, q, j, b)
        .vectorize(d_inner, d_vec)
        .unroll(d_inner)
        .unroll(h_inner);
    tile.compute_at(s.part_out, d_outer)
        .bound_extent(h, value_tile.heads)
        .bound_extent(d, slice)
        .vectorize(d, d_vec)
        .unroll(d)
        .unroll(h);
    tile.update().reorder(d, h, keys).vectorize(d, d_vec).unroll(d).unroll(h);
}

/**
 * The split-KV form's scores (schedule_split_kv), per task at `at`: per key, the group's dot
 * products accumulate vectors of head_dim that share each load of K; one reduction per key sums
 * them into a vector of the group's scores. Stored heads innermost, so that the statistics and
 * probabilities are vectorized across heads. With integer scores (i8 keys,
 * AlgorithmOptions::integer_scores), pairs of elements a lane (pmaddwd), the keys' bytes read in
 * place.
 */
void schedule_split_kv_scores(AttentionStages &s, const Halide::LoopLevel &at, int lanes) {
    const int group = s.spec.group_size();
    const int head_dim = s.spec.resolved_head_dim();
    const int d_vec = vector_width_dividing(head_dim, lanes);
    const bool integer = s.q_codes.defined();
    const int dot_vec = integer ? vector_width_dividing(head_dim / 2, lanes) : d_vec;
    Var d = s.d, k = s.k, h = s.h, q = s.q, b = s.b;
    s.scores.compute_at(at).bound_extent(h, group).reorder_storage(h, k, q, b).reorder(h, k, q);
    vectorize_dot_products(s.scores, s.r_head_dim.x, dot_vec, Halide::LoopLevel(s.scores, k),
                           {{{h, group}}, group > 1, integer ? 2 : 1});
    s.scores.update().reorder(h, k, q, b);
    if (widens_cache_rows(s.spec) && !integer)
        s.k_heads.compute_at(s.scores, k).vectorize(d, d_vec).unroll(d);
    // The group's scaled queries (and their codes), once per task rather than once per key.
    s.q_heads.compute_at(at).bound_extent(h, group).vectorize(d, d_vec);
    if (integer) {
        s.q_code_scale.compute_at(at).bound_extent(h, group);
        s.q_codes.compute_at(at).bound_extent(h, group).vectorize(d, d_vec);
    }
}

/**
 * The split-KV form's masked scores, statistics and probabilities (schedule_split_kv), per task
 * at `at`: vectorized across the group's heads, so that the reductions over keys need no
 * horizontal steps within a head, and, where the group divides the vector, across keys too
 * (key_vec keys of the group's heads a vector; across the heads alone, a group of four used a
 * quarter of AVX-512's lanes). The masked scores once per key (inlined, the max and the
 * probabilities each computed them again); the statistics' reductions over keys into key_vec
 * lanes of partial results, then one small reduction a chunk.
 */
void schedule_split_kv_softmax(AttentionStages &s, const Halide::LoopLevel &at, int lanes) {
    const int group = s.spec.group_size();
    Var k = s.k, h = s.h, q = s.q, b = s.b, j = s.j;
    const int h_vec = vector_width_dividing(group, lanes);
    const int key_vec =
        h_vec == group && s.options.chunk_keys % (lanes / group) == 0 ? lanes / group : 1;
    for (Func stage : {s.part_max, s.part_sum}) {
        stage.compute_at(at).bound_extent(h, group).reorder_storage(h, j, q, b).vectorize(h, h_vec);
        if (key_vec == 1) {
            stage.update().reorder(h, s.r_keys.x, j, q, b).vectorize(h, h_vec);
            continue;
        }
        Halide::RVar r_outer{"r_keys_outer"}, r_lane{"r_keys_lane"};
        Var lane{stage.name() + "_key_lane"};
        stage.update().split(s.r_keys.x, r_outer, r_lane, key_vec);
        Func partial = stage.update().rfactor(r_lane, lane);
        partial.compute_at(at)
            .bound_extent(h, group)
            .reorder_storage(h, lane, j, q, b)
            .reorder(h, lane, j, q, b)
            .vectorize(h, h_vec)
            .vectorize(lane);
        partial.update().reorder(h, lane, r_outer, j, q, b).vectorize(h, h_vec).vectorize(lane);
        stage.update().reorder(h, r_lane, j, q, b).vectorize(h, h_vec);
    }
    // With P·V in register tiles, an i8 V row's weights (probability times scale) likewise,
    // once per key and head: inlined, each of the tiles' passes over a block's rows
    // (split_kv_value_tile) multiplied them again, a scalar each. The one loop reads a row once
    // per head, so it keeps them inline.
    std::vector<Func> per_key{s.masked, s.probs};
    if (s.value_weights.defined() && s.options.kv_value_block > 0)
        per_key.push_back(s.value_weights);
    Var k_lane{"k_lane"};
    for (Func stage : per_key) {
        stage.compute_at(at)
            .bound_extent(h, group)
            .reorder_storage(h, k, q, b)
            .reorder(h, k, q, b)
            .vectorize(h, h_vec);
        if (key_vec > 1)
            stage.split(k, k, k_lane, key_vec, TailStrategy::RoundUp)
                .reorder(h, k_lane, k, q, b)
                .vectorize(k_lane);
    }
}

/**
 * The split-KV form (the chunks form with split_chunk), for decode shapes where a query tile would
 * be mostly empty. One parallel task per (chunk, kv head, batch) computes the chunk's partials for
 * every query and every query head of the kv head's group: scores, statistics, probabilities
 * and P·V, so a single query still spreads over all cores, a K or V chunk is read from memory
 * once, and the scratch is one chunk's (chunk x group x Lq floats per stage), not the call's.
 * Scores are dot products vectorized along head_dim whose K loads the group's heads share;
 * P·V reads each V row once from memory into the group's accumulators: in register tiles a
 * block of keys at a time where they fit (cpu_kv_value_block), else in L1. The exact combine
 * reads the partials afterwards.
 */
void schedule_split_kv(AttentionStages &s, Func core, const Halide::Target &target) {
    const int lanes = target.natural_vector_size<float>();
    const int group = s.spec.group_size();
    // Vectors along value_dim in P·V and the outputs.
    const int v_vec = vector_width_dividing(s.spec.resolved_value_dim(), lanes);
    Var d = s.d, q = s.q, k = s.k, h = s.h, b = s.b, j = s.j;
    Var kv{"kv"}, g{"g"}, task{"chunk_task"};

    s.partials.compute_root()
        .split(h, kv, g, group)
        .reorder(d, g, q, j, kv, b)
        .vectorize(d, v_vec)
        .fuse(j, kv, task)
        .fuse(task, b, task)
        .parallel(task);
    const Halide::LoopLevel at(s.partials, task);

    schedule_split_kv_scores(s, at, lanes);
    // The row scales of i8 keys and values (a cache's or the inputs'), once per key of the
    // task: inlined, each head's statistics, probabilities and P·V looked each one up again
    // (a cache's choosing between its rows and the new ones). A cache's, a vector of keys at a
    // time from a multiple of the vector (its reads are clamped, so the few keys more cost
    // nothing); for a paged cache, the widest power of two, at most the vector, that divides
    // BLOCK (scalar for an odd BLOCK): then Halide proves that a vector's keys share a block
    // and loads their scales whole after one block-table lookup, where a vector that crossed
    // blocks would gather them with a lookup per key.
    const int scale_vec = s.spec.cache.kind == CacheSpec::Kind::paged
                              ? vector_width_dividing(s.spec.cache.block_size, lanes)
                              : lanes;
    for (Func scale : {s.k_scale, s.v_scale}) {
        if (!scale.defined())
            continue;
        scale.compute_at(at);
        if (s.spec.cache.any() && scale_vec > 1)
            scale.align_bounds(s.k, scale_vec).vectorize(s.k, scale_vec);
    }

    schedule_split_kv_softmax(s, at, lanes);
    schedule_split_kv_values(s, at, v_vec, lanes);

    // The exact combine, per (head, batch): chunk weights, row sums, weighted partial outputs.
    Var combine{"combine_task"};
    core.reorder(d, q, h, b).vectorize(d, v_vec).fuse(h, b, combine).parallel(combine);
    for (Func stage : {s.row_max, s.part_scale, s.row_sum})
        stage.compute_at(core, combine);
    s.weighted_sum.compute_at(core, q).vectorize(d, v_vec);
    s.weighted_sum.update().reorder(d, s.r_chunks.x).vectorize(d, v_vec);
}

/**
 * Vectorizes `rows` (d, ...) along the features. A rotated neox row is split into blocks of
 * rotary_dim / 2 features, the blocks unrolled: in each, which half a feature is in is a
 * constant, so its pair and partner are dense vectors, where a select between the halves per
 * lane made them gathers.
 */
void vectorize_features(Func rows, const AttentionStages &s, int lanes) {
    const int head_dim = s.spec.resolved_head_dim();
    if (s.spec.rope.kind == RopeKind::neox) {
        const int half = s.spec.resolved_rotary_dim() / 2;
        Var part{"rope_part"}, within{"rope_within"};
        rows.split(s.d, part, within, half, TailStrategy::GuardWithIf)
            .unroll(part)
            .vectorize(within, vector_width_dividing(half, lanes));
    } else {
        rows.vectorize(s.d, vector_width_dividing(head_dim, lanes));
    }
}

/**
 * Rotary embeddings, computed once per call (inlined into the scores, the rotation would run
 * once per score). The table at root. The rotated queries and keys at root in parallel tasks,
 * unless `into_copies`: then the forms' own per-call copy of K and per-tile copy of Q rotate
 * as they copy (at root they are one more pass over Q and K).
 */
void schedule_rope(AttentionStages &s, int lanes, bool into_copies) {
    const int head_dim = s.spec.resolved_head_dim();
    if (s.spec.cache.any()) {
        // A cached layer's new rows: parallel over heads and sequences.
        for (Func rows : {s.k_new, s.v_new}) {
            Var task{rows.name() + "_task"};
            const int width =
                rows.name() == s.k_new.name() ? head_dim : s.spec.resolved_value_dim();
            rows.fuse(s.h, s.b, task)
                .parallel(task)
                .vectorize(s.d, vector_width_dividing(width, lanes));
        }
        // An i8 cache's new rows' scales: parallel over heads and sequences.
        for (Func scales : {s.k_new_scales, s.v_new_scales})
            if (scales.defined()) {
                Var task{scales.name() + "_task"};
                scales.fuse(s.h, s.b, task).parallel(task);
            }
    }
    if (!s.spec.rope.any())
        return;
    const int half = s.spec.resolved_rotary_dim() / 2;
    if (s.spec.cache.any()) {
        // The angles of the new tokens' positions only, inside their rotation: at root, the
        // table would cover every cached position, each call.
        s.rope_table.compute_inline();
    } else {
        // The vectors of pairs unrolled: each pair's frequency is then a constant, where a
        // vector of pairs would select it from all of them (rotary_dim / 2 selects per vector).
        Var positions{"rope_positions"};
        s.rope_table.compute_root()
            .split(s.position, positions, s.position, 64, TailStrategy::GuardWithIf)
            .parallel(positions)
            .vectorize(s.pair, vector_width_dividing(half, lanes))
            .unroll(s.pair);
    }
    Var task{"rope_task"};
    for (Func rotated : {s.q_rope, s.k_rope}) {
        if (into_copies && rotated.name() == s.k_rope.name()) {
            rotated.compute_inline();
            continue;
        }
        rotated.compute_root().fuse(s.h, s.b, task).parallel(task);
        vectorize_features(rotated, s, lanes);
    }
}

} // namespace

int cpu_kv_prefetch_keys(const AttentionSpec &spec, const Halide::Target &target) {
    constexpr int prefetch_bytes = 16 * 1024;
    const DType stored = spec.cache.any() ? spec.resolved_cache_dtype() : spec.resolved_kv_dtype();
    // A paged f32 cache's step with AVX-512 ran faster without (Zen 4: 8-12% at two threads,
    // Lk = 8192, up to 17% on one; docs/cache.md); with AVX2 it ran slower.
    if (spec.cache.kind == CacheSpec::Kind::paged && stored == DType::f32 &&
        target.arch == Halide::Target::X86 && target.natural_vector_size<float>() >= 16)
        return 0;
    const int row_bytes = spec.resolved_head_dim() * storage_type(stored).bytes();
    return std::max(1, prefetch_bytes / row_bytes);
}

int cpu_kv_value_block(const AttentionSpec &spec, const Halide::Target &target,
                       const CpuScheduleParams &params) {
    const int lanes = target.natural_vector_size<float>();
    const int value_dim = spec.resolved_value_dim();
    const int row_vectors = value_dim / vector_width_dividing(value_dim, lanes);
    // AVX-512 (32 registers): tiles of up to 16 accumulators, a row's loads and a broadcast.
    // AVX2 (16 registers): tiles of 8 (split_kv_value_tile), for a cache's widened rows only;
    // f32 rows in slices were slower than the one loop (docs/performance.md). Narrower vectors
    // keep the one loop.
    const int accumulators = pv_register_accumulators(lanes);
    const bool fits =
        accumulators >= 16 ? row_vectors <= accumulators : lanes == 8 && widens_cache_rows(spec);
    // 8 keys: 4 were as fast, 2 slower.
    constexpr int block = 8;
    // Split-KV only (the query-tile form's chunks keep one loop); a block that does not divide
    // the chunk is refused by the algorithm itself (AlgorithmOptions::kv_value_block).
    return fits && params.split_chunk > 0 ? block : 0;
}

int cpu_value_block(int value_dim, int lanes, int d_vectors) {
    int block = vector_width_dividing(value_dim, lanes);
    const int widest = d_vectors * block;
    while (block < widest && value_dim % (2 * block) == 0)
        block *= 2;
    return block;
}

int cpu_value_panel(const AttentionSpec &spec, const Halide::Target &target,
                    const CpuScheduleParams &params) {
    // The flash form's copy of V (copy_values), without projections or a cache, whose rows
    // are wider than one register block of P·V: in rows, each block's loop over the chunk's
    // keys steps a whole row a key, a cache line each from L2 or memory, at a stride that maps
    // them to a few of L1's sets (docs/performance.md).
    const int lanes = target.natural_vector_size<float>();
    const int value_dim = spec.resolved_value_dim();
    const int block = cpu_value_block(value_dim, lanes, params.d_vectors);
    const bool copied = params.copy_values != CopyValues::none;
    const bool flash = params.flash_chunk > 0 && params.split_chunk <= 0;
    const bool plain = !spec.projections.any() && !spec.cache.any();
    return params.value_panels && copied && flash && plain && block < value_dim ? block : 0;
}

int cpu_key_panel(const AttentionSpec &spec, const CpuScheduleParams &params) {
    // The flash form's per-call copy of K, without projections or a cache: in rows, a score
    // block's key_block keys are read a whole row apart, each feature from another cache line
    // (docs/performance.md).
    const bool flash = params.flash_chunk > 0 && params.split_chunk <= 0;
    const bool plain = !spec.projections.any() && !spec.cache.any();
    return params.key_panels && flash && plain && params.key_block > 1 ? params.key_block : 0;
}

int cpu_query_tile(const Halide::Target &target, const CpuScheduleParams &params) {
    return params.query_vectors * target.natural_vector_size<float>();
}

bool cpu_reverse_queries(const AttentionSpec &spec, const Halide::Target &target,
                         const CpuScheduleParams &params) {
    // A causal tile costs what its last query's row does. In query order, a 48-query tile
    // leaves L % 48 queries for a last tile as costly as a whole one: 1024 = 21 x 48 + 16 wastes
    // 32 queries x 1024 keys, 6% of the layer. Last to first, that short tile takes queries 0 to
    // 15 and the tiles run longest first; the price is a copy of the output into query order,
    // which is all that is left where the tile, a power of two, divides the usual lengths.
    const int tile = cpu_query_tile(target, params);
    return spec.mask.causal && params.split_chunk <= 0 && !is_power_of_two(tile);
}

namespace {

/**
 * What the functions of the query-tile schedule share: the sizes derived once from the target,
 * the spec and the parameters, and the pipeline's loop variables.
 */
struct CpuPlan {
    CpuPlan(const AttentionStages &s, const Halide::Target &target,
            const CpuScheduleParams &params);

    CpuScheduleParams params;
    int lanes;
    int head_dim;
    int value_dim; ///< the P·V and output rows' features
    int query_tile;
    /// Query tiles per parallel task: task_tiles in the flash form, whose chunks the task's
    /// tiles share; 1 with whole rows only.
    int task_tiles;
    /// The P·V register block's queries: value_queries, but no taller than the tile it splits
    /// (Halide would shift the last block below query 0).
    int value_queries;
    int k_vec;   ///< the vector along head_dim (K and Q rows)
    int d_vec;   ///< the vector along value_dim (V rows, P·V and the outputs)
    int d_block; ///< the P·V register block's features: d_vectors vectors that divide value_dim
    /// The pipeline's loop variables: the same Vars (by name) in every form's stages, so the
    /// helpers that take no stages can name them.
    Var d, q, k, h, b;
};

CpuPlan::CpuPlan(const AttentionStages &s, const Halide::Target &target,
                 const CpuScheduleParams &params)
    : params(params), lanes(target.natural_vector_size<float>()),
      head_dim(s.spec.resolved_head_dim()), value_dim(s.spec.resolved_value_dim()),
      query_tile(cpu_query_tile(target, params)),
      task_tiles(s.options.form == AttentionForm::chunks ? params.task_tiles : 1),
      value_queries(std::min(params.value_queries, query_tile)),
      k_vec(vector_width_dividing(head_dim, lanes)), d_vec(vector_width_dividing(value_dim, lanes)),
      d_block(cpu_value_block(value_dim, lanes, params.d_vectors)), d(s.d), q(s.q), k(s.k), h(s.h),
      b(s.b) {}

/**
 * The Q, K and V projections: in decode, dot products that read the weights in place; in prefill,
 * GEMMs that broadcast the weights in place or read them packed (params.packed_weights).
 */
void schedule_input_projections(AttentionStages &s, const CpuPlan &plan) {
    const CpuScheduleParams &params = plan.params;
    const int lanes = plan.lanes, head_dim = plan.head_dim;
    const int model_dim = s.spec.resolved_model_dim();
    const int kv_heads = s.spec.resolved_kv_heads();
    const Projection projections[] = {
        {s.q_proj, s.q_weight, s.q_rows, s.spec.heads * head_dim, head_dim},
        {s.k_proj, s.k_weight, s.kv_rows, kv_heads * head_dim, head_dim},
        {s.v_proj, s.v_weight, s.kv_rows, kv_heads * plan.value_dim, plan.value_dim}};
    // Prefill with the weights read in place: one transposed copy of each activation source
    // (x serves Q, K and V in self-attention), shared by its projections; V is transposed
    // back for P·V, which reads V rows along value_dim.
    const bool weights_in_place = params.split_chunk <= 0 && !params.packed_weights;
    if (weights_in_place) {
        if (!s.spec.cross_attention) {
            transposed_rows(s.q_rows, {s.q_proj, s.k_proj, s.v_proj}, lanes);
        } else {
            transposed_rows(s.q_rows, {s.q_proj}, lanes);
            transposed_rows(s.kv_rows, {s.k_proj, s.v_proj}, lanes);
        }
        schedule_transpose(s.v_heads, s.d, s.v_heads.args()[1], lanes);
    }
    for (const Projection &projection : projections) {
        Func stage = projection.stage;
        // Decode: a few queries, so Q's weight is read once either way and packing it would
        // read and write it once more. K and V have as few rows in self-attention, but a
        // cross-attention context is long, and in place each block of its rows would stream
        // the whole weight again, so they are packed.
        const bool few_rows = stage.name() == s.q_proj.name() || !s.spec.cross_attention;
        if (params.split_chunk > 0 && few_rows) {
            Func tiled = stage.in();
            tiled.compute_root();
            schedule_projection_in_place({tiled,
                                          stage,
                                          projection.weight,
                                          model_dim,
                                          s.d,
                                          projection.width,
                                          stage.args()[1],
                                          {s.h, s.b},
                                          0},
                                         lanes);
        } else if (weights_in_place) {
            schedule_projection_broadcast(
                head_projection_loops(stage.in(), projection, s), projection.weight,
                largest_divisor_at_most(projection.width, params.gemm_outputs), params, lanes);
        } else {
            schedule_projection_packed(projection, s, lanes, params);
        }
    }
}

/**
 * The outputs that read `core` at root: without an output projection the output is a copy in
 * query order, tasks of 256 rows of a head; the lse (q, h, b) a copy vectorized along queries.
 */
void schedule_output_copies(AttentionStages &s, const CpuPlan &plan) {
    if (!s.spec.projections.out) {
        Var task{"copy_task"}, rows{"copy_rows"};
        s.output.split(plan.q, rows, plan.q, 256, TailStrategy::GuardWithIf)
            .reorder(plan.d, plan.q, rows, plan.h, plan.b)
            .fuse(rows, plan.h, task)
            .fuse(task, plan.b, task)
            .parallel(task)
            .vectorize(plan.d, plan.d_vec);
    }
    if (s.spec.lse_output) {
        Var task{"lse_task"};
        s.lse.fuse(plan.h, plan.b, task)
            .parallel(task)
            .vectorize(plan.q, plan.lanes, TailStrategy::GuardWithIf);
    }
}

/**
 * Returns `core`, the Func that carries the attention tiles: the output itself, or attn_out at
 * root when an output projection or the lse output reads it, or attn_reversed at root when the
 * queries run last to first (AlgorithmOptions::reverse_queries); attn_out then reads it in
 * place. The outputs that copy from core are scheduled here.
 */
Func schedule_core(AttentionStages &s, const CpuPlan &plan) {
    const bool reversed = s.options.reverse_queries;
    const bool at_root = reversed || s.spec.projections.out || s.spec.lse_output;
    Func core = reversed ? s.attn_reversed : at_root ? s.attn_out : s.output;
    if (at_root)
        core.compute_root();
    if (core.name() != s.attn_out.name())
        s.attn_out.compute_inline();
    if (at_root)
        schedule_output_copies(s, plan);
    // Its region starts at row 0: aligned, so that the tiles' key ranges are seen to be
    // uniform (AlgorithmOptions::query_tile).
    if (reversed)
        core.align_bounds(plan.q, plan.query_tile);
    return core;
}

/**
 * The output projection over `core`'s rows of concatenated heads: in decode, dot products that
 * read the weight in place; in prefill, a GEMM that broadcasts the weight in place over
 * transposed rows, or one that reads it packed (params.packed_weights).
 */
void schedule_output_projection(AttentionStages &s, Func core, const CpuPlan &plan) {
    const CpuScheduleParams &params = plan.params;
    const int lanes = plan.lanes;
    const Var &q = plan.q, &b = plan.b;
    // Rows of the concatenated heads contiguous, for the GEMM's broadcasts.
    core.reorder_storage(plan.d, plan.h, q, b);
    const int model_dim = s.spec.resolved_model_dim();
    if (params.split_chunk > 0) {
        // Decode: a few rows, so the weight is read once in place rather than three times
        // (read, written and read packed); tasks of 8 output tiles give the cores work.
        schedule_projection_in_place(
            {s.output, s.out_proj, s.o_weight, plan.value_dim, s.c, model_dim, q, {b}, 8}, lanes);
        return;
    }
    Var c = s.c, c_group{"c_group"};
    if (!params.packed_weights) {
        // The heads' outputs transposed (queries along the lanes), and the layer's output
        // transposed back from a root copy.
        Func tiled = s.out_proj.in(s.output);
        const int c_task = largest_divisor_at_most(model_dim, gemm_task_outputs);
        tiled.split(c, c_group, c, c_task);
        transposed_rows(s.attn_out, {s.out_proj}, lanes);
        const GemmLoops gemm{tiled, s.out_proj, c, q, c_group, 1, b, {s.r_concat.x, s.r_concat.y}};
        schedule_projection_broadcast(
            gemm, s.o_weight, largest_divisor_at_most(c_task, params.gemm_outputs), params, lanes);
        schedule_transpose(s.output, c, q, lanes);
        return;
    }
    const int c_vec = vector_width_dividing(model_dim, lanes);
    pack_transposed(s.o_weight, model_dim, lanes);
    // Tasks of whole panels: a guarded partial panel would still read its whole width.
    const int c_block = panel_width(model_dim, c_vec);
    const int c_task =
        c_block * largest_divisor_at_most(model_dim / c_block, gemm_task_outputs / c_block);
    s.output.split(c, c_group, c, c_task);
    const GemmLoops gemm{s.output, s.out_proj, c, q, c_group, 1, b, {s.r_concat.x, s.r_concat.y}};
    tile_packed_gemm(gemm, c_vec, c_block, params);
}

/**
 * The per-call copies of K (and of V, as copy_values says) of the whole-row and flash forms
 * without projections.
 */
void schedule_head_copies(AttentionStages &s, const CpuPlan &plan) {
    // P·V reads vectors of V rows: from caller memory that is not 64-byte aligned they
    // straddle cache lines (slower in AVX2 code). An aligned f32 copy
    // per call (and f16/bf16 are converted once) avoids that, in the forms that
    // copy_values names: the whole-row form's V is a Func of its own, so a call that runs
    // one form copies only that form's V.
    // K always gets the same copy: its rows then sit at one constant stride, so the score
    // block's keys are one base pointer and constant offsets rather than a clamped address
    // per key (LLVM computed those in vector registers inside the dot-product loop).
    const CopyValues copy_values = plan.params.copy_values;
    std::vector<Func> copies = {s.k_heads};
    if (s.k_panels.defined()) {
        // The flash form's keys in panels; the whole-row form's, where a call may take it,
        // in rows of their own, so that each call copies K once.
        copies = {s.k_panels};
        if (s.rows)
            copies.push_back(s.k_heads.in(s.rows->scores));
    }
    const bool chunked = s.options.form == AttentionForm::chunks;
    if (copy_values == CopyValues::all || (copy_values == CopyValues::flash && chunked))
        copies.push_back(s.v_panels.defined() ? s.v_panels : s.v_heads);
    if (s.rows && copy_values == CopyValues::all)
        copies.push_back(s.rows->v_heads);
    for (Func heads : copies) {
        Var task{"kv_task"};
        heads.compute_root().fuse(plan.h, plan.b, task).parallel(task);
        if (heads.name() == s.k_panels.name()) {
            // Each feature's panel of keys at once: vectors along the rows, stored interleaved.
            const Var panel_key = heads.args()[0];
            heads.bound(panel_key, 0, s.options.key_panel)
                .unroll(panel_key)
                .vectorize(plan.d, vector_width_dividing(s.spec.resolved_head_dim(), plan.lanes));
            continue;
        }
        const bool keys = heads.name().rfind(s.k_heads.name(), 0) == 0;
        if (keys && s.spec.rope.any() && !s.spec.cache.any())
            vectorize_features(heads, s, plan.lanes); // rotates as it copies
        else
            heads.vectorize(plan.d, keys ? plan.k_vec : plan.d_vec);
    }
}

/** Where a form's stages are computed within core's tiles. */
struct TileLoops {
    Func core;
    Halide::LoopLevel tile_at; ///< one task: task_tiles query tiles of a kv head's group
    Halide::LoopLevel head_at; ///< one query head of the group in one tile of a task
    int group;
};

/**
 * Splits `stage` into the output's and the partials' register blocks: value_queries queries x
 * d_block features, under the `outer` loops. Every loop inside a block is unrolled, so that
 * LLVM keeps the block's accumulators in registers (a rolled loop indexes them, and they go to
 * the stack).
 */
void output_blocks(Func stage, const Var &queries, std::vector<Halide::VarOrRVar> outer,
                   const CpuPlan &plan) {
    Var q_block{"q_block"}, q_lane{"q_lane"}, d_outer{"d_outer"}, d_inner{"d_inner"};
    outer.insert(outer.begin(), {d_inner, q_lane, d_outer, q_block});
    stage.split(queries, q_block, q_lane, plan.value_queries)
        .split(plan.d, d_outer, d_inner, plan.d_block)
        .reorder(outer)
        .vectorize(d_inner, plan.d_vec)
        .unroll(d_inner)
        .unroll(q_lane);
}

/**
 * A row statistic vectorized along queries (no horizontal reductions), the tile's query
 * vectors unrolled inside the loop over the reduction: independent chains of max and add,
 * where one chain per vector waited on each add's latency.
 */
void row_statistic(Func stage, const Halide::LoopLevel &at, const Halide::RVar &r,
                   const CpuPlan &plan) {
    Var q_vector{"q_vector"}, q_vlane{"q_vlane"};
    stage.compute_at(at)
        .bound_extent(plan.q, plan.query_tile)
        .vectorize(plan.q, plan.lanes)
        .unroll(plan.q);
    stage.update()
        .split(plan.q, q_vector, q_vlane, plan.lanes)
        .reorder(q_vlane, q_vector, r)
        .vectorize(q_vlane)
        .unroll(q_vector);
}

/** A reduction into value_queries queries x d_block features held in registers, computed per
 * block of `consumer` (output_blocks). */
void register_block(Func stage, Func consumer, const Halide::RVar &r, const CpuPlan &plan) {
    const Var &d = plan.d, &q = plan.q;
    stage.compute_at(consumer, Var{"d_outer"})
        .bound_extent(q, plan.value_queries)
        .vectorize(d, plan.d_vec)
        .unroll(d)
        .unroll(q);
    stage.update().reorder(d, q, r).vectorize(d, plan.d_vec).unroll(d).unroll(q);
}

/**
 * The flash form's chunk partials, per task: `partials` loops over chunks outermost, then the
 * task's query tiles, then the group's heads, so the scores and probabilities of a chunk stay
 * in L1, the P·V blocks reuse the chunk's V rows from L1, and the tiles and heads reuse its K
 * and V rows from L1 and L2. Then the combine, per head of each tile.
 */
void schedule_chunk_partials(AttentionStages &t, const TileLoops &tiles, const CpuPlan &plan) {
    const Var &q = plan.q, &h = plan.h, &b = plan.b, &j = t.j;
    Var p_tile{"p_tile"}, p_query{"p_query"};
    t.partials.compute_at(tiles.tile_at)
        .bound_extent(q, plan.query_tile * plan.task_tiles)
        .bound_extent(h, tiles.group)
        .split(q, p_tile, p_query, plan.query_tile);
    output_blocks(t.partials, p_query, {h, p_tile, j, b}, plan);
    // One chunk per iteration; stored queries innermost so the vectors are dense.
    t.part_out.bound_extent(j, 1);
    for (Func stage : {t.part_max, t.part_sum})
        stage.bound_extent(j, 1).reorder_storage(q, j);
    // The combine: chunk weights and row sums along queries, the weighted partial outputs in
    // the same register blocks as the output.
    row_statistic(t.row_max, tiles.head_at, t.r_chunks.x, plan);
    row_statistic(t.row_sum, tiles.head_at, t.r_chunks.x, plan);
    t.part_scale.compute_at(tiles.head_at)
        .bound_extent(q, plan.query_tile)
        .reorder_storage(q, j)
        .reorder(q, j)
        .vectorize(q, plan.lanes)
        .unroll(q);
    register_block(t.weighted_sum, tiles.core, t.r_chunks.x, plan);
}

/** Scores in register blocks of key_block keys x query_tile queries, masked as they are made. */
void schedule_score_blocks(AttentionStages &t, const Halide::LoopLevel &rows_at,
                           const CpuPlan &plan) {
    const Var &q = plan.q, &k = plan.k;
    const int lanes = plan.lanes, key_block = plan.params.key_block;
    Var k_outer{"k_outer"}, k_inner{"k_inner"};
    t.masked.compute_at(rows_at).bound_extent(q, plan.query_tile).reorder_storage(q, k);
    // Where the scores read K in panels of a block's keys (k_panels), the blocks start at
    // multiples of key_block, so that a block's keys are one panel at constant offsets (a
    // shifted last block straddles two: LLVM then kept the block's addresses in a vector
    // register and extracted them in the dot-product loop).
    const bool panels = t.options.key_panel == key_block;
    if (panels)
        t.masked.align_bounds(k, key_block);
    t.masked
        .split(k, k_outer, k_inner, key_block, panels ? TailStrategy::RoundUp : TailStrategy::Auto)
        .reorder(q, k_inner, k_outer)
        .vectorize(q, lanes)
        .unroll(q)
        .unroll(k_inner);
    t.scores.compute_at(t.masked, k_outer)
        .bound_extent(q, plan.query_tile)
        .bound_extent(k, key_block)
        .reorder_storage(q, k)
        .reorder(q, k)
        .vectorize(q, lanes)
        .unroll(q)
        .unroll(k);
    t.scores.update().reorder(q, k, t.r_head_dim.x).vectorize(q, lanes).unroll(q).unroll(k);
}

/**
 * The stages from the scores to weighted_sum of one form, `t`: the flash form (the chunks form)
 * walks the keys in chunks inside the tile (schedule_chunk_partials); without chunks each
 * head's whole rows are computed at once.
 */
void schedule_form(AttentionStages &t, const TileLoops &tiles, const CpuPlan &plan) {
    const Var &q = plan.q, &d = plan.d;
    const bool flash = t.options.form == AttentionForm::chunks;
    // The group's scaled queries, transposed so that queries are the vector lanes: once per
    // tile for the whole group in the flash form, whose chunks take the group's heads in
    // turn; per head with whole rows. The last tile of a row may be short (GuardWithIf);
    // bounding the extents of the stages inside a tile keeps their loops constant so they
    // unroll and vectorize.
    t.q_heads.in(t.scores)
        .compute_at(flash ? tiles.tile_at : tiles.head_at)
        .bound_extent(q, plan.query_tile * (flash ? plan.task_tiles : 1))
        .bound_extent(plan.h, flash ? tiles.group : 1)
        .reorder_storage(q, d)
        .reorder(q, d)
        .vectorize(q, plan.lanes);

    Halide::LoopLevel rows_at = tiles.head_at;
    Func max_stage = t.row_max, sum_stage = t.row_sum, out_stage = t.weighted_sum;
    Func block_consumer = tiles.core;
    if (flash) {
        schedule_chunk_partials(t, tiles, plan);
        rows_at = Halide::LoopLevel(t.partials, plan.h);
        max_stage = t.part_max;
        sum_stage = t.part_sum;
        out_stage = t.part_out;
        block_consumer = t.partials;
    }
    schedule_score_blocks(t, rows_at, plan);

    // The softmax of the rows (or chunk), then P·V.
    row_statistic(max_stage, rows_at, t.r_keys.x, plan);
    t.probs.compute_at(rows_at)
        .bound_extent(q, plan.query_tile)
        .reorder_storage(q, plan.k)
        .reorder(q, plan.k)
        .vectorize(q, plan.lanes)
        .unroll(q);
    row_statistic(sum_stage, rows_at, t.r_keys.x, plan);
    register_block(out_stage, block_consumer, t.r_values.x, plan);
}

/**
 * The query-tile form's tasks: a task is task_tiles query tiles of every query head of one kv
 * head's group (g runs inside it), so the group's heads and the task's tiles share each K/V
 * chunk while it is in cache.
 */
void schedule_query_tiles(AttentionStages &s, Func core, const CpuPlan &plan) {
    const int group = s.spec.group_size();
    Var q_task{"q_task"}, q_tiles{"q_tiles"}, q_mid{"q_mid"}, q_inner{"q_inner"};
    Var tile{"tile"}, kv{"kv"}, g{"g"};
    core.split(plan.q, q_task, q_tiles, plan.query_tile * plan.task_tiles,
               TailStrategy::GuardWithIf)
        .split(q_tiles, q_mid, q_inner, plan.query_tile)
        .split(plan.h, kv, g, group);
    output_blocks(core, q_inner, {g, q_mid, q_task, kv, plan.b}, plan);
    core.fuse(q_task, kv, tile).fuse(tile, plan.b, tile).parallel(tile);
    const TileLoops tiles{core, Halide::LoopLevel(core, tile), Halide::LoopLevel(core, g), group};
    schedule_form(s, tiles, plan);
    if (s.rows) {
        // Both forms under the same tiles; each call runs one (AttentionStages::rows), and the
        // other's stages get empty regions. The specialization copies core's schedule so far.
        schedule_form(*s.rows, tiles, plan);
        core.specialize(s.use_rows);
    }
}

} // namespace

void apply_cpu_schedule(AttentionStages &s, const Halide::Target &target,
                        const CpuScheduleParams &params) {
    const CpuPlan plan{s, target, params};
    // A decode step streams K and V from memory once. Its split-KV tasks read K, then compute
    // the chunk's statistics reading nothing, then read V: without software prefetch the
    // hardware's streams restart at each pass and the memory idles between (Lq = 1, H=32,
    // Hkv=8, D=128, f32 inputs, Lk >= 4096, 2-core Zen 5: 64-85% of the probed bandwidth
    // without, 84-98% with; docs/performance.md).
    if (s.spec.cache.any() || params.split_chunk > 0)
        s.kv_prefetch_keys = cpu_kv_prefetch_keys(s.spec, target);
    // The whole-row and flash forms without projections copy K per call and Q per tile.
    const bool copies_heads = !s.spec.projections.any() && params.split_chunk <= 0;
    schedule_rope(s, plan.lanes, copies_heads && !s.spec.cache.any());
    if (s.spec.projections.any())
        schedule_input_projections(s, plan);
    Func core = schedule_core(s, plan);
    if (s.spec.projections.out)
        schedule_output_projection(s, core, plan);
    if (params.split_chunk > 0) {
        schedule_split_kv(s, core, target);
        return;
    }
    if (copies_heads)
        schedule_head_copies(s, plan);
    schedule_query_tiles(s, core, plan);
}

} // namespace attngen
