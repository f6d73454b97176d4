// Picks a schedule by name and target.
#include "schedule.h"

#include "cache_prefetch.h"
#include "dsl/halide_compat.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace attngen {

int vector_width_dividing(int extent, int lanes) {
    int width = 1;
    while (width * 2 <= lanes && extent % (width * 2) == 0)
        width *= 2;
    return width;
}

bool is_power_of_two(int n) {
    return (n & (n - 1)) == 0;
}

bool is_schedule_name(const std::string &name) {
    return name == "auto" || name == "reference" || name == "x86" || name == "arm" ||
           name == "cuda";
}

namespace {

/** Sets every parameter `named` gives (by current name) in `params`. */
template <typename Params>
void apply_named(ScheduleFamily family, const std::map<std::string, int> &named, Params &params) {
    for (const auto &[name, value] : named)
        set_param_value(*find_schedule_param(family, name), params, value);
}

} // namespace

std::string parse_cpu_schedule_params(const std::string &text, CpuScheduleParams &params) {
    std::map<std::string, int> named;
    if (std::string problem = parse_named_params(ScheduleFamily::cpu, text, named);
        !problem.empty())
        return problem;
    apply_named(ScheduleFamily::cpu, named, params);
    // The two chunk forms exclude each other: naming one nonzero turns off the other's default,
    // and the default rows_up_to goes with the default chunks (a flash_chunk named alone means
    // chunks at every length; the split-KV form takes none).
    const bool split_named = named.count("split_chunk") != 0;
    const bool flash_named = named.count("flash_chunk") != 0;
    if (!split_named && flash_named && params.flash_chunk > 0)
        params.split_chunk = 0;
    if (!flash_named && split_named && params.split_chunk > 0)
        params.flash_chunk = 0;
    if (named.count("rows_up_to") == 0 && (split_named || flash_named || params.split_chunk > 0))
        params.rows_up_to = 0;
    if (params.split_chunk > 0 && params.flash_chunk > 0)
        return "schedule parameters split_chunk and flash_chunk: at most one may be nonzero, got "
               "split_chunk=" +
               std::to_string(params.split_chunk) +
               " and flash_chunk=" + std::to_string(params.flash_chunk);
    if (params.rows_up_to > 0 && params.split_chunk > 0)
        return "schedule parameter rows_up_to chooses whole rows over the flash form's "
               "flash_chunk; the split-KV form takes none, got rows_up_to=" +
               std::to_string(params.rows_up_to) +
               " with split_chunk=" + std::to_string(params.split_chunk);
    return "";
}

std::string parse_gpu_schedule_params(const std::string &text, GpuScheduleParams &params) {
    std::map<std::string, int> named;
    if (std::string problem = parse_named_params(ScheduleFamily::gpu, text, named);
        !problem.empty())
        return problem;
    apply_named(ScheduleFamily::gpu, named, params);
    // A step the text does not name divides the split_chunk it names: the largest power of two
    // up to the default that does.
    if (named.count("step_keys") == 0)
        while (params.split_chunk % params.step_keys != 0 && params.step_keys > 1)
            params.step_keys /= 2;
    // The block's threads split a step evenly only for a power of two.
    if (!is_power_of_two(params.step_keys))
        return "schedule parameter step_keys must be a power of two for a GPU target, got " +
               std::to_string(params.step_keys);
    // The split-KV form rounds a step's keys out to whole aligned steps (cuda_schedule.cpp):
    // they are the chunk's own only if a chunk is whole steps.
    if (params.split_chunk % params.step_keys != 0)
        return "schedule parameter split_chunk must be a multiple of step_keys (" +
               std::to_string(params.step_keys) + ") for a GPU target, got " +
               std::to_string(params.split_chunk);
    return "";
}

CpuScheduleParams cpu_target_params(const Halide::Target &target) {
    // By the vector width the code will have, not by feature names: "avx2-fma-f16c" does not
    // name "avx", yet its vectors are 8 floats wide.
    const int lanes = target.natural_vector_size<float>();
    const bool arm = target.arch == Halide::Target::ARM;
    CpuScheduleParams params;
    for (const ScheduleParam &param : schedule_param_table()) {
        if (param.family != ScheduleFamily::cpu)
            continue;
        const CpuDefaults &d = param.cpu_defaults;
        set_param_value(param, params,
                        arm           ? d.arm
                        : lanes >= 16 ? d.avx512
                        : lanes == 8  ? d.avx2
                                      : d.sse41);
    }
    return params;
}

int gpu_default_split_chunk(const std::string &shape_class) {
    // 128 keys, 4 steps of the default step_keys: Lk = 4096 with 8 kv heads gives 256 blocks,
    // about two per multiprocessor of an A100 or H100.
    return shape_class == "decode" ? 128 : 0;
}

int64_t gpu_shared_memory_bytes(const AttentionSpec &spec, const GpuScheduleParams &params) {
    // What the schedule in cuda_schedule.cpp keeps in shared memory per block, as if no two
    // buffers shared space: the staged queries (head_dim x rows, rows padded by 4 words when
    // staged transposed, from 8 queries up) and the step's K (head_dim x step_keys + 4) and V
    // (value_dim x step_keys) where they are staged, its masked scores and probabilities
    // (step_keys x rows each) and its max per row. The running state is in registers.
    const int64_t head_dim = spec.resolved_head_dim();
    const int64_t value_dim = spec.resolved_value_dim();
    const int64_t keys = params.step_keys;
    const int64_t heads = params.heads_per_block;
    const int64_t queries = params.query_tile;
    const int64_t rows = queries * heads;
    const int64_t staged_queries = (queries >= 8 ? queries + 4 : queries) * heads;
    return 4 *
           (params.stage_queries * head_dim * staged_queries +
            params.stage_kv * (head_dim * (keys + 4) + value_dim * keys) + 2 * keys * rows + rows);
}

GpuScheduleParams gpu_schedule_params(const AttentionSpec &spec, const std::string &shape_class) {
    // The running state and the output spread value_dim (V's head size) over the lanes.
    const int value_dim = spec.resolved_value_dim();
    GpuScheduleParams params;
    params.split_chunk = gpu_default_split_chunk(shape_class);
    if (shape_class == "decode") {
        // A chunk of keys per block for the query heads of a kv head's group, so that K and V
        // are read once for several: one query per head, and the lanes along value_dim, as many
        // as divide it.
        // Up to 4 heads: 8 (Llama-70B's group) keep more state and score tiles than a lane's
        // registers hold (ptxas spilled them). K and V staged: read where they lie (stage_kv
        // 0), ptxas spilled the layers of 8 heads per kv head too, and on an H200 neither
        // form was faster than the other.
        params.query_tile = 1;
        params.heads_per_block = std::min(spec.group_size(), 4);
        while (spec.group_size() % params.heads_per_block != 0)
            params.heads_per_block--;
        int lanes = 32;
        while (value_dim % lanes != 0)
            lanes /= 2;
        params.d_per_lane = value_dim / lanes;
        // Fewer lanes than the warp's (value_dim not a multiple of 32) hold one row each: see
        // gpu_params_problem.
        if (lanes < 32)
            params.heads_per_block = 1;
    } else {
        // About 8 value_dim elements per lane in the fold: a power of two of lanes, up to 32,
        // shares a row, the others run along the queries; each lane folds up to 8 queries, as
        // many as keep its part of the state within 64 registers.
        int d_groups = 1;
        while (d_groups < 32 && value_dim % (2 * d_groups) == 0 && value_dim / (2 * d_groups) >= 8)
            d_groups *= 2;
        params.d_per_lane = value_dim / d_groups;
        const int lane_queries = std::clamp(64 / params.d_per_lane, 1, 8);
        params.query_tile = std::min(32 / d_groups * lane_queries, 32);
    }
    // step_keys: 32 keys, halved until the block's shared memory fits under the limit; then
    // heads_per_block and query_tile halve.
    params.step_keys = 32;
    auto fits = [&] { return gpu_shared_memory_bytes(spec, params) <= gpu_shared_memory_limit; };
    while (!fits() && params.step_keys > 4)
        params.step_keys /= 2;
    while (!fits() && params.heads_per_block > 1) {
        int heads = params.heads_per_block - 1;
        while (spec.group_size() % heads != 0)
            heads--;
        params.heads_per_block = heads;
    }
    while (!fits() && params.query_tile > 1)
        params.query_tile /= 2;
    while (params.split_chunk % params.step_keys != 0)
        params.step_keys /= 2;
    return params;
}

CpuScheduleParams cpu_schedule_params(const AttentionSpec &spec, const Halide::Target &target,
                                      const std::string &shape_class) {
    CpuScheduleParams params = cpu_target_params(target);
    if (shape_class == "decode") {
        params.split_chunk = cpu_decode_split_chunk;
        params.flash_chunk = 0;
    }
    // f16 and bf16 weights read in place would be converted once per element and row tile,
    // where packing converts them once.
    if (spec.dtype != DType::f32)
        params.packed_weights = true;
    // V read in place costs 16-lane vectors less than its copy, except in long rows of
    // value_dim > 64.
    if (spec.dtype == DType::f32 && target.natural_vector_size<float>() >= 16)
        params.copy_values = spec.resolved_value_dim() <= 64 ? CopyValues::none : CopyValues::flash;
    // K in panels, measured on AVX2: faster at head_dim 128, where a score block's rows are
    // 512 bytes apart; at 64, no faster (docs/performance.md, "K in panels").
    if (spec.resolved_head_dim() <= 64)
        params.key_panels = false;
    return params;
}

namespace {

/** A schedule name, target and parameters resolved to one family and its parameters. */
struct ResolvedSchedule {
    enum class Family { reference, cpu, gpu } family = Family::reference;
    CpuScheduleParams cpu;
    GpuScheduleParams gpu;
    std::string problem; ///< why the name, target or parameters do not fit; empty if they do
};

/**
 * Why the GPU parameters `gpu`, the defaults with the schedule parameters `params` applied, do
 * not fit `spec` or the hardware, or "" if they do.
 */
std::string gpu_params_problem(const AttentionSpec &spec, const GpuScheduleParams &gpu,
                               const std::string &params) {
    const int heads = gpu.heads_per_block;
    if (spec.group_size() % heads != 0)
        return "schedule parameter heads_per_block must divide the " +
               std::to_string(spec.group_size()) + " query heads per kv head, got " +
               std::to_string(heads);
    const int value_dim = spec.resolved_value_dim();
    const int width = gpu.d_per_lane;
    const int d_groups = value_dim % width == 0 ? value_dim / width : 0;
    const std::string value_dim_name = spec.value_dim > 0 ? "value_dim " : "head_dim ";
    if (d_groups == 0 || d_groups > 32 || !is_power_of_two(d_groups))
        return "schedule parameter d_per_lane must divide " + value_dim_name +
               std::to_string(value_dim) +
               " into a power of two of at most 32 lanes per row, got " + std::to_string(width);
    // The lanes of a warp hold the running state only in whole stripes: a tile of
    // queries is whole rows of lanes, or a power of two of them.
    const int query_lanes = 32 / d_groups;
    const int tile = gpu.query_tile;
    if (tile % query_lanes != 0 && !is_power_of_two(tile))
        return "schedule parameter query_tile must be a power of two or a multiple of " +
               std::to_string(query_lanes) + " (32 lanes over " + std::to_string(d_groups) +
               " lanes per row), got " + std::to_string(tile);
    // CUDA keeps a lane's state in registers only where its rows lie a whole warp apart
    // (lane + 32 x row): a tile that fills fewer than 32 lanes holds one row per lane.
    const int lanes = d_groups * std::min(tile, query_lanes);
    if (lanes < 32 && heads > 1)
        return "schedule parameter heads_per_block must be 1 where a block's tile fills " +
               std::to_string(lanes) + " of the warp's 32 lanes (" + value_dim_name +
               std::to_string(value_dim) + " over " + std::to_string(d_groups) +
               " lanes per row, query_tile " + std::to_string(tile) + "), got " +
               std::to_string(heads);
    const int64_t shared = gpu_shared_memory_bytes(spec, gpu);
    if (shared > gpu_shared_memory_limit) {
        const std::string tiles = "query_tile=" + std::to_string(gpu.query_tile) +
                                  ", step_keys=" + std::to_string(gpu.step_keys) +
                                  " and heads_per_block=" + std::to_string(heads);
        return (params.empty() ? "the GPU schedule's smallest tiles, " + tiles +
                                     ", are too large for this layer (head_dim " +
                                     std::to_string(spec.resolved_head_dim()) + ", " +
                                     std::to_string(spec.group_size()) +
                                     " query heads per kv head): they need "
                               : "GPU schedule parameters " + tiles + " need ") +
               std::to_string(shared) + " bytes of shared memory per block, more than the " +
               std::to_string(gpu_shared_memory_limit) + " a block may use without opting in";
    }
    return "";
}

/**
 * The CPU family for `name` on a CPU target, with its parameters, or the problem: a schedule
 * for another architecture, or an unknown name.
 */
ResolvedSchedule resolve_cpu_schedule(const AttentionSpec &spec, const Halide::Target &target,
                                      const std::string &name, const std::string &params,
                                      const std::string &shape_class) {
    ResolvedSchedule resolved;
    const bool x86 = target.arch == Halide::Target::X86;
    const bool arm = target.arch == Halide::Target::ARM && target.bits == 64;
    const bool use_x86 = name == "x86" || (name == "auto" && x86);
    const bool use_arm = name == "arm" || (name == "auto" && arm);
    if (use_x86 && !x86)
        resolved.problem = "schedule 'x86' needs an x86 target, got " + target.to_string();
    else if (use_arm && !arm)
        resolved.problem = "schedule 'arm' needs an arm-64 target, got " + target.to_string();
    else if (use_x86 || use_arm) {
        resolved.family = ResolvedSchedule::Family::cpu;
        resolved.cpu = cpu_schedule_params(spec, target, shape_class);
        resolved.problem = parse_cpu_schedule_params(params, resolved.cpu);
    } else if (name == "auto")
        resolved.problem =
            "no schedule for target " + target.to_string() + " yet; use schedule=reference";
    else
        resolved.problem =
            "unknown schedule '" + name + "'; expected auto, reference, x86, arm or cuda";
    return resolved;
}

ResolvedSchedule resolve_schedule(const AttentionSpec &spec, const Halide::Target &target,
                                  const std::string &name, const std::string &params,
                                  const std::string &shape_class) {
    ResolvedSchedule resolved;
    using Family = ResolvedSchedule::Family;
    if (name == "reference") {
        if (!params.empty())
            resolved.problem = "the reference schedule takes no schedule parameters";
        return resolved;
    }
    const bool gpu = target.has_gpu_feature();
    if (name == "cuda" || (name == "auto" && gpu)) {
        resolved.family = Family::gpu;
        if (!gpu) {
            resolved.problem =
                "schedule 'cuda' needs a GPU target (cuda or opencl), got " + target.to_string();
            return resolved;
        }
        resolved.gpu = gpu_schedule_params(spec, shape_class);
        resolved.problem = parse_gpu_schedule_params(params, resolved.gpu);
        if (resolved.problem.empty())
            resolved.problem = gpu_params_problem(spec, resolved.gpu, params);
        return resolved;
    }
    if (gpu) {
        resolved.problem = "schedule '" + name + "' is a CPU schedule; a GPU target (" +
                           target.to_string() + ") needs schedule cuda or auto";
        return resolved;
    }
    return resolve_cpu_schedule(spec, target, name, params, shape_class);
}

} // namespace

AlgorithmOptions algorithm_options(const AttentionSpec &spec, const Halide::Target &target,
                                   const std::string &name, const std::string &params,
                                   const std::string &shape_class) {
    const ResolvedSchedule resolved = resolve_schedule(spec, target, name, params, shape_class);
    AlgorithmOptions options;
    if (!resolved.problem.empty())
        return options;
    switch (resolved.family) {
    case ResolvedSchedule::Family::reference:
        break;
    case ResolvedSchedule::Family::cpu: {
        const CpuScheduleParams &cpu = resolved.cpu;
        const bool split = cpu.split_chunk > 0;
        // The flash and split-KV forms are both the algorithm's chunks; the schedules differ.
        options.chunk_keys = split ? cpu.split_chunk : cpu.flash_chunk;
        options.form = options.chunk_keys > 0 ? AttentionForm::chunks : AttentionForm::whole_rows;
        options.query_tile = cpu_query_tile(target, cpu);
        // P·V's register blocks, where they tile the query tile from its start.
        if (options.query_tile % cpu.value_queries == 0)
            options.value_queries = cpu.value_queries;
        options.rows_up_to = cpu.rows_up_to;
        options.reverse_queries = cpu_reverse_queries(spec, target, cpu);
        options.kv_value_block = cpu_kv_value_block(spec, target, cpu);
        options.value_panel = cpu_value_panel(spec, target, cpu);
        options.key_panel = cpu_key_panel(spec, cpu);
        options.whole_chunk_statistics = split;
        // About half the vector instructions of Halide::exp.
        options.polynomial_exp = true;
        options.native_f16 = halide_compat::converts_f16_in_hardware(target);
        // i8 keys' scores in pmaddwd, a pair of elements an instruction: the split-KV scores'
        // per-key work (docs/cache.md). Elsewhere: no such instruction for these loops
        // (AArch64's is i8 x i8), or the flash form's tiles, not measured with it.
        options.integer_scores =
            split && target.arch == Halide::Target::X86 && spec.resolved_head_dim() % 2 == 0;
        break;
    }
    case ResolvedSchedule::Family::gpu:
        options.form = AttentionForm::online;
        options.query_tile = resolved.gpu.query_tile;
        options.chunk_keys = resolved.gpu.split_chunk;
        options.step_keys = resolved.gpu.step_keys;
        options.d_per_lane = resolved.gpu.d_per_lane;
        break;
    }
    return options;
}

std::string check_schedule(const AttentionSpec &spec, const Halide::Target &target,
                           const std::string &name, const std::string &params,
                           const std::string &shape_class) {
    return resolve_schedule(spec, target, name, params, shape_class).problem;
}

std::string apply_schedule(AttentionStages &stages, const Halide::Target &target,
                           const std::string &name, const std::string &params,
                           const std::string &shape_class) {
    const ResolvedSchedule resolved =
        resolve_schedule(stages.spec, target, name, params, shape_class);
    if (!resolved.problem.empty())
        return resolved.problem;
    switch (resolved.family) {
    case ResolvedSchedule::Family::reference:
        apply_reference_schedule(stages, target);
        break;
    case ResolvedSchedule::Family::cpu:
        apply_cpu_schedule(stages, target, resolved.cpu);
        break;
    case ResolvedSchedule::Family::gpu:
        apply_gpu_schedule(stages, target, resolved.gpu);
        break;
    }
    return "";
}

void add_lowering_passes(Halide::Pipeline pipeline, const AttentionStages &stages) {
    if (stages.kv_prefetch_keys > 0 && !stages.kv_buffers.empty()) {
        Halide::Internal::IRMutator *pass =
            make_cache_prefetch_pass(stages.kv_buffers, stages.kv_prefetch_keys).release();
        pipeline.add_custom_lowering_pass(pass, [pass] { delete pass; });
    }
}

} // namespace attngen
