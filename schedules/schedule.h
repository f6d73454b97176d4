// Schedules: functions of (pipeline stages, target, parameters) that never change what is computed.
#pragma once

#include "dsl/attention_algorithm.h"
#include "schedules/schedule_params.h"

#include <cstdint>
#include <string>

namespace attngen {

/**
 * The CPU schedule's split_chunk for decode shapes, which then take the split-KV form rather
 * than the flash form (schedule_param_table()'s defaults are prefill's). Each chunk is a task of
 * the K pass and of the V pass: 512 keys are long enough that a task's overhead is small, short
 * enough that Lk = 1024 gives both cores work.
 */
constexpr int cpu_decode_split_chunk = 512;

/**
 * How many keys ahead the CPU schedule prefetches the K and V rows that a cached layer or a
 * split-KV decode streams through (AttentionStages::kv_prefetch_keys): 16 KiB of rows, far
 * enough ahead to cover a DRAM access and a paged cache's jump to its next block at the rate a
 * core reads rows (at 4 KiB the jumps still showed), near enough that the rows stay in a
 * 32 KiB L1 until read. None (0) for a paged f32 cache with AVX-512, whose step was faster
 * without (docs/cache.md).
 */
int cpu_kv_prefetch_keys(const AttentionSpec &spec, const Halide::Target &target);

/** The shared memory a CUDA block may use without opting in; larger tiles are refused. */
constexpr int gpu_shared_memory_limit = 48 * 1024;

/**
 * The bytes of shared memory one block of the GPU schedule holds at once for `spec` with
 * `params` (Halide sizes it at launch, so ptxas cannot report it).
 */
int64_t gpu_shared_memory_bytes(const AttentionSpec &spec, const GpuScheduleParams &params);

/** How the lanes of a GPU block's warp share a step's scores (schedules/cuda_schedule.cpp). */
struct GpuScoreTiles {
    int keys;    ///< keys of a lane's register tile
    int queries; ///< queries of a lane's register tile
    int lanes;   ///< lanes with a tile of their own; any others would only repeat one
};

/**
 * The score tiles of the GPU schedule with `params`: of the splits of the warp between keys
 * and queries, the one with the smallest tile per lane (no lane left idle while another works
 * through a tile alone), and among those the one with the most multiply-adds per load.
 */
GpuScoreTiles gpu_score_tiles(const GpuScheduleParams &params);

/** The GPU schedule's split_chunk for a shape class: split-KV for decode, 0 otherwise. */
int gpu_default_split_chunk(const std::string &shape_class);

/** Every stage computed at root, serially: the baseline every other schedule must match. */
void apply_reference_schedule(AttentionStages &stages, const Halide::Target &target);

/**
 * Overrides `params` from "key=value,..." or "key:value,..." (the CPU parameters of
 * schedule_param_table()). Naming one of flash_chunk and split_chunk nonzero turns the other
 * off; naming either (or a nonzero split_chunk default) turns rows_up_to off unless it is named
 * too; naming both nonzero is an error. Returns an empty string, or what is wrong with `text`.
 */
std::string parse_cpu_schedule_params(const std::string &text, CpuScheduleParams &params);

/**
 * The features of one register block of the CPU schedule's P·V: d_vectors vectors of `lanes`
 * (at most; fewer where they would not divide value_dim).
 */
int cpu_value_block(int value_dim, int lanes, int d_vectors);

/**
 * The flash form's V panels (AlgorithmOptions::value_panel): one register block of P·V's
 * features, where V is copied per call and its rows are wider than a block; else 0.
 */
int cpu_value_panel(const AttentionSpec &spec, const Halide::Target &target,
                    const CpuScheduleParams &params);

/**
 * The flash form's K panels (AlgorithmOptions::key_panel): one register block of the scores'
 * keys (key_block), where the rows are copied per call and a block has more than one key; else 0.
 */
int cpu_key_panel(const AttentionSpec &spec, const CpuScheduleParams &params);

/** The queries of one parallel task of the CPU schedule: query_vectors vectors. */
int cpu_query_tile(const Halide::Target &target, const CpuScheduleParams &params);

/**
 * Keys per register block of the split-KV schedule's P·V (AlgorithmOptions::kv_value_block),
 * or 0 for one loop over the chunk's keys. Blocks hold a tile of V rows' accumulators in
 * registers: with 32 vector registers (AVX-512), whole rows of value_dim up to 16 vectors (or
 * their slices); with 16 (AVX2), slices of the rows a cache stores in f16, bf16 or i8, widened
 * into L1 first (an f32 cache's rows and the inputs' keep the one loop there, which was as
 * fast or faster).
 */
int cpu_kv_value_block(const AttentionSpec &spec, const Halide::Target &target,
                       const CpuScheduleParams &params);

/**
 * Whether the prefill forms take the queries last to first (AlgorithmOptions::reverse_queries):
 * under a causal mask, with a query tile that is not a power of two, so that the usual lengths
 * leave a short tile, which then holds the first queries rather than the longest rows.
 */
bool cpu_reverse_queries(const AttentionSpec &spec, const Halide::Target &target,
                         const CpuScheduleParams &params);

/** Parallel over batch x heads x query tiles, scores and softmax fused into each tile. */
void apply_cpu_schedule(AttentionStages &stages, const Halide::Target &target,
                        const CpuScheduleParams &params);

/**
 * Overrides `params` from "key=value,..." or "key:value,..." (the GPU parameters of
 * schedule_param_table()); step_keys, unless named, becomes the largest power of two up to its
 * default that divides split_chunk. Returns an empty string, or what is wrong with `text`.
 */
std::string parse_gpu_schedule_params(const std::string &text, GpuScheduleParams &params);

/** One thread block per (query tile, kv head, batch), K/V chunks staged in shared memory. */
void apply_gpu_schedule(AttentionStages &stages, const Halide::Target &target,
                        const GpuScheduleParams &params);

/**
 * The GPU schedule's defaults for the spec and shape class, within 48 KiB of shared memory per
 * block. Prefill: four lanes per row of the state, up to 32 queries per block, one head. Decode:
 * one query of every head of a kv head's group per block, the lanes along head_dim, and the
 * split-KV form's chunks.
 */
GpuScheduleParams gpu_schedule_params(const AttentionSpec &spec,
                                      const std::string &shape_class = "prefill");

/**
 * The CPU target's defaults from schedule_param_table(): x86 by its vectors (16 registers of 4
 * or 8 floats for SSE4.1 and AVX2, 32 of 16 for AVX-512), AArch64 NEON (32 registers of 4).
 */
CpuScheduleParams cpu_target_params(const Halide::Target &target);

/**
 * The CPU schedule's defaults for `spec` on `target` (x86 or arm-64), before any named
 * parameters: the target's register blocks, the prefill chunks, and the spec's choices (f16 and
 * bf16 pack their weights). What `compile` and `tune` start from.
 */
CpuScheduleParams cpu_schedule_params(const AttentionSpec &spec, const Halide::Target &target,
                                      const std::string &shape_class);

/**
 * How build_attention should write the algorithm for the schedule that apply_schedule will
 * apply with the same arguments: its form (AttentionForm), query tiles and chunks. Parameters that
 * do not parse give the defaults here; apply_schedule reports them. `shape_class` ("prefill" or
 * "decode") picks the defaults the parameters override.
 */
AlgorithmOptions algorithm_options(const AttentionSpec &spec, const Halide::Target &target,
                                   const std::string &name, const std::string &params = "",
                                   const std::string &shape_class = "prefill");

/**
 * What apply_schedule would refuse for these arguments (an unknown name, a schedule that does
 * not fit the target, malformed or conflicting parameters), or an empty string.
 */
std::string check_schedule(const AttentionSpec &spec, const Halide::Target &target,
                           const std::string &name, const std::string &params = "",
                           const std::string &shape_class = "prefill");

/**
 * Adds the lowering passes that the applied schedule asked for (AttentionStages::
 * kv_prefetch_keys) to the pipeline that compiles `stages`; every compile of a scheduled
 * pipeline calls it after apply_schedule.
 */
void add_lowering_passes(Halide::Pipeline pipeline, const AttentionStages &stages);

/** The schedule names apply_schedule accepts: "auto" picks by target (cuda for GPU targets). */
bool is_schedule_name(const std::string &name);

/**
 * Applies the named schedule ("auto", "reference", "x86", "arm" or "cuda"), with the family's
 * parameters overridden by `params` ("key=value,...", see parse_cpu_schedule_params and
 * parse_gpu_schedule_params). "cuda" is the GPU schedule for any GPU target (CUDA, OpenCL).
 * Returns an empty string on success, or why the schedule or the parameters do not fit.
 */
std::string apply_schedule(AttentionStages &stages, const Halide::Target &target,
                           const std::string &name, const std::string &params = "",
                           const std::string &shape_class = "prefill");

/** The widest power-of-two vector (at most `lanes`) that divides `extent`. */
int vector_width_dividing(int extent, int lanes);

/** Whether n (> 0) is a power of two. */
bool is_power_of_two(int n);

} // namespace attngen
