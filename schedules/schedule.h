// Schedules: functions of (pipeline stages, target, parameters) that never change what is computed.
#pragma once

#include "dsl/attention_algorithm.h"

#include <cstdint>
#include <string>

namespace attngen {

/**
 * The register blocks of the CPU schedule. The score block holds query_vectors x key_block
 * accumulators, the P·V block query_block x d_vectors; both must fit the register file with
 * room for the operands they load.
 */
struct CpuScheduleParams {
    int query_vectors = 2; ///< vectors of queries per parallel task (its query tile)
    int key_block = 4;     ///< keys per register block of the score loop
    int query_block = 4;   ///< queries per register block of P·V and of the projections
    int d_vectors = 2;     ///< vectors of head_dim per register block of P·V (at most)
    /**
     * Keys per chunk of the split-KV form (0: whole rows per query tile). With chunks, the
     * parallel tasks are (chunk, kv head, batch) and every query head of a kv head's group
     * shares each K/V chunk: the decode schedule, where a query tile would be mostly empty.
     * That schedule uses only this parameter of the four above.
     */
    int kv_chunk = 0;
    /**
     * Keys per chunk of the query-tile schedule's flash form (0: whole rows). Each tile walks
     * K/V a chunk at a time: the chunk's scores, statistics and partial output stay in L1, and
     * the chunks are combined exactly. At most one of kv_chunk and key_chunk is nonzero.
     */
    int key_chunk = 0;
    /**
     * Calls with Lk <= rows_up_to walk each head's whole rows rather than key_chunk chunks (0:
     * chunks at every length; key_chunk 0 walks whole rows at every length anyway). Not with
     * kv_chunk. Both forms are generated into one pipeline, specialized on Lk: whole rows are
     * faster while a tile's rows stay in L2, chunks beyond. AVX-512, 2 threads, causal D=64,
     * tuned blocks (48-query tiles), AOT, 9 alternations, ms of chunks of 2048 / whole rows:
     * 1.058 and 1.022 at Lk = 1024 and 2048, 0.918 and 0.839 at 4096 and 8192. Default: the
     * target's (x86_schedule_params), with the default chunks only; naming key_chunk or
     * kv_chunk without it sets it to 0.
     */
    int rows_up_to = 0;
    /**
     * Prefill without projections: where V is copied into an aligned f32 buffer once per call
     * rather than read in place by P·V. 0: nowhere; 1: in the chunked (flash) form only, so
     * calls with Lk <= rows_up_to read it in place; 2: in both forms. (K is always copied: its
     * rows then sit at one constant stride.) A caller's rows are rarely 64-byte aligned (a
     * large std::vector's start 16 bytes past a page), so in place P·V's vectors straddle
     * cache lines; the copy is a pass over V in memory, dearer the shorter the rows and the
     * busier the machine's memory. AOT on an AMD EPYC (Zen 4), 2 threads, H=8, V 16 bytes past
     * 64, medians of 8 alternations, ms in place / copied, no mask and causal, at L = 1024,
     * 2048, 4096: AVX-512 D=64 0.99 1.00 1.00 and 0.98 1.00 0.99; D=128 0.99 1.02 1.01 and
     * 0.98 1.01 1.01; AVX2 code, D=64: 1.09 1.13 1.06 and 1.04 1.11 1.20. D=128 with tuned
     * blocks (whole rows up to 1024), ms of 1 / 2 at L = 512, 1024, 2048, 8 alternations:
     * causal 0.97 0.98 1.01, no mask 0.99 1.00 1.00; while the machine's memory was busy, V's
     * copy took 5% of a causal L = 1024 call (Halide's profiler: 0.66 of 12.5 ms). Default 0
     * for f32 storage with head_dim <= 64 on 16-lane targets, 1 for other f32 storage there,
     * else 2 (the copy also converts f16 and bf16 once).
     */
    int copy_values = 2;
    /**
     * 1: without a causal, window or padding mask, the flash form's odd query tiles walk the
     * chunks last to first (AlgorithmOptions::alternate_chunks), so that each tile starts on
     * the K and V rows the tile before it read last; 0: every tile walks them first to last.
     * It matters once a head's K and V outgrow the share of L3 the machine leaves free. AOT on
     * an AMD EPYC (Zen 4, 32 MiB L3 shared with other tenants), AVX-512, 2 threads, H=8, no
     * mask, tuned blocks, medians of the per-round ratios ms 1 / 0: D=128 L=8192 (8 MiB of K
     * and V per head) 1.004 and 0.965 over 30 alternations, 0.979 and 0.996 over 20; D=128
     * L=4096 0.994, D=64 L=8192 0.996 and L=4096 0.998 over 10. Small, and never a loss.
     */
    int alternate_chunks = 1;
    /**
     * The prefill Q/K/V and output projections as packed GEMMs (packed_weights): rows per register
     * tile, whose accumulators are gemm_rows x one or two vectors of outputs, and rows per parallel
     * task, whose activations are copied once and whose weight panels stay in L2 while they pass.
     * Decode projections read their weights in place and use neither. Measured with `attngen
     * run` (model_dim 1024, AVX2, 2 threads, fastest of 4 alternations, ms): task rows 12 /
     * 24 / 48 gave 11.8 / 13.1 / 13.5 at L = 128, 41.3 / 43.0 / 47.4 at L = 512 and 100.2 /
     * 92.4 / 101.9 at L = 1024; 4 or 8 tile rows were slower than 6 at every length.
     */
    int gemm_rows = 6;
    int gemm_task_rows = 24;
    /**
     * 1: self-attention's Q, K and V (as many kv heads as heads) as one packed GEMM whose
     * tasks copy their rows of x once for all three (AlgorithmOptions::fused_qkv); prefill only.
     * Off by default: `attngen run`, model_dim 1024, heads 16, AVX-512, 2 threads, two
     * alternations, ms separate / fused, with the output projection: 3.57, 3.52 / 4.43, 4.32
     * at L = 128; 13.05, 13.14 / 14.03, 13.71 at L = 512; 81.5, 80.3 / 80.9, 79.8 at L = 2048.
     * Reading x once saves little, and the three packed weights must then stay in cache
     * together rather than one after another (tasks ordered weight-first changed nothing).
     */
    int fused_qkv = 0;
    /**
     * The prefill projections' form. 0: each GEMM reads the caller's weight in place,
     * broadcasting its elements into register tiles of gemm_row_vectors vectors of rows x
     * gemm_outputs outputs (a divisor of head_dim, or of the output projection's task), over
     * activations transposed once per call; a task takes gemm_task_tiles row tiles. 1: each
     * weight is packed (transposed) once per call, and the tiles are gemm_rows x one or two
     * vectors of outputs, in tasks of gemm_task_rows rows; fused_qkv needs this form. Packing
     * moves the weights twice more through memory, the transposes move only the activations:
     * AOT, AVX-512, 2 threads, 4 alternations, ms in place / packed, model_dim 1024: 0.75 at
     * L = 128 and 0.97 at 512; model_dim 512: 0.83 and 1.01. AVX2 code (3 x 4 tiles), model_dim
     * 1024: 0.78 and 0.94. gemm_outputs 4 with 4 row vectors, and 8 with 3, were slower on
     * AVX-512 (0.79 and 0.91 at L = 128). Default 1 for f16 and bf16 storage, whose packing
     * also converts the weights once.
     */
    int packed_weights = 0;
    int gemm_row_vectors = 2;
    int gemm_outputs = 8;
    int gemm_task_tiles = 2;
};

/** The CPU schedule's kv_chunk for a shape class: split-KV for decode, 0 otherwise. */
int cpu_default_kv_chunk(const std::string &shape_class);

/** The CPU schedule's key_chunk for a shape class: the flash form for prefill, 0 for decode. */
int cpu_default_key_chunk(const std::string &shape_class);

/**
 * The GPU schedule's tiles: a thread block computes query_tile queries of heads_per_block query
 * heads of one kv head's group and walks the keys key_chunk at a time through shared memory.
 */
struct GpuScheduleParams {
    int query_tile = 32; ///< queries per thread block
    int key_chunk = 32;  ///< keys staged in shared memory per step (a power of two)
    /**
     * Query heads per block, a divisor of the group (query heads per kv head). Each staged K/V
     * chunk serves all of them; fewer leave room for larger tiles.
     */
    int heads_per_block = 1;
    /** 1: the block's scaled queries are staged in shared memory; 0: read where they lie. */
    int stage_queries = 1;
    /**
     * 1: each step's K and V are staged in shared memory, where every query of the block reads
     * them; 0: read where they lie, each key by the lane that scores it and each value by the
     * lanes that fold it (for blocks of a few queries, where each is used a few times).
     */
    int stage_kv = 1;
    /**
     * Head_dim elements of the running state per lane (a divisor of head_dim): a lane folds
     * each step into d_per_lane elements of a few rows, head_dim / d_per_lane lanes a row.
     */
    int d_per_lane = 16;
    /**
     * Keys per chunk of the split-KV form (0: each block walks whole rows). With chunks, a
     * block computes one chunk's partial softmax and output, blocks run over (query tile,
     * chunk, kv head x batch), and a second kernel combines the chunks exactly: the decode
     * schedule, where a few queries per head would otherwise leave most of the GPU idle.
     */
    int kv_chunk = 0;
};

/** The shared memory a CUDA block may use without opting in; larger tiles are refused. */
constexpr int gpu_shared_memory_limit = 48 * 1024;

/**
 * The bytes of shared memory one block of the GPU schedule holds at once for `spec` with
 * `params` (Halide sizes it at launch, so ptxas cannot report it).
 */
int64_t gpu_shared_memory_bytes(const AttentionSpec &spec, const GpuScheduleParams &params);

/** The GPU schedule's kv_chunk for a shape class: split-KV for decode, 0 otherwise. */
int gpu_default_kv_chunk(const std::string &shape_class);

/** Every stage computed at root, serially: the baseline every other schedule must match. */
void apply_reference_schedule(AttentionStages &stages, const Halide::Target &target);

/**
 * Overrides `params` from "key=value,..." or "key:value,..." (keys: query_vectors, key_block,
 * query_block, d_vectors, gemm_rows, each 1..16; gemm_task_rows 1..4096; kv_chunk, key_chunk
 * 0..65536; fused_qkv 0..1). Naming one of the two chunks nonzero turns the other off; naming both
 * nonzero is an error. Returns an empty string, or what is wrong with `text`.
 */
std::string parse_cpu_schedule_params(const std::string &text, CpuScheduleParams &params);

/** The queries of one parallel task of the CPU schedule: query_vectors vectors. */
int cpu_query_tile(const Halide::Target &target, const CpuScheduleParams &params);

/**
 * Keys per register block of the split-KV schedule's P·V (AlgorithmOptions::kv_value_block),
 * or 0 for one loop over the chunk's keys. Blocks need a whole V row of accumulators for a
 * few heads in registers: targets with 32 vector registers (AVX-512) and head_dim of at most
 * 16 vectors.
 */
int cpu_kv_value_block(const Halide::Target &target, const CpuScheduleParams &params, int head_dim);

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
 * Overrides `params` from "key=value,..." or "key:value,..." (keys: query_tile 1..128,
 * key_chunk 1..128 a power of two, kv_chunk 0..65536 a multiple of key_chunk, heads_per_block
 * 1..256, stage_queries 0..1). Returns an empty string, or what is wrong with `text`.
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

/** Register blocks for x86 (16 registers for SSE/AVX2, 32 for AVX-512). */
CpuScheduleParams x86_schedule_params(const Halide::Target &target);

/** Register blocks for AArch64 NEON (32 registers of 4 floats). */
CpuScheduleParams arm_schedule_params(const Halide::Target &target);

/**
 * The CPU schedule's defaults for `spec` on `target` (x86 or arm-64), before any named
 * parameters: the target's register blocks, the prefill chunks, and the spec's choices (f16 and
 * bf16 pack their weights). What `compile` and `tune` start from.
 */
CpuScheduleParams cpu_schedule_params(const AttentionSpec &spec, const Halide::Target &target,
                                      const std::string &shape_class);

/**
 * How build_attention should write the algorithm for the schedule that apply_schedule will
 * apply with the same arguments: its query tiles as AlgorithmOptions::query_block, its KV
 * chunks as kv_chunk. Parameters that do not parse give the defaults here; apply_schedule
 * reports them. `shape_class` ("prefill" or "decode") picks the defaults the parameters
 * override.
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
