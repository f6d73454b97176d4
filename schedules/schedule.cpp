// Picks a schedule by name and target.
#include "schedule.h"

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

/** One schedule parameter: its name, where it goes and the values it may take. */
struct ParamField {
    const char *name;
    int *value;
    int max;
    int min = 1;
};

/** Parses "key=value,..." or "key:value,..." into `fields` (':' since GenGen reserves '='). */
std::string parse_params(const std::string &text, std::initializer_list<ParamField> fields) {
    std::string names;
    for (const ParamField &field : fields)
        names += std::string(names.empty() ? "" : ", ") + field.name;
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ',')) {
        if (item.empty())
            continue;
        const size_t equals = item.find_first_of("=:");
        const std::string key = item.substr(0, equals);
        const ParamField *found = nullptr;
        for (const ParamField &field : fields)
            if (key == field.name)
                found = &field;
        if (found == nullptr || equals == std::string::npos)
            return "unknown schedule parameter '" + item + "'; expected " + names + " =N";
        const std::string value = item.substr(equals + 1);
        char *end = nullptr;
        long number = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || number < found->min || number > found->max)
            return "schedule parameter " + key + " must be in " + std::to_string(found->min) +
                   ".." + std::to_string(found->max) + ", got '" + value + "'";
        *found->value = static_cast<int>(number);
    }
    return "";
}

} // namespace

std::string parse_cpu_schedule_params(const std::string &text, CpuScheduleParams &params) {
    // The two chunk forms exclude each other: naming one turns off the other's default, and
    // naming both nonzero is an error. -1 marks a chunk the text does not name.
    const CpuScheduleParams defaults = params;
    params.kv_chunk = params.key_chunk = params.rows_up_to = -1;
    std::string problem = parse_params(text, {{"query_vectors", &params.query_vectors, 16},
                                              {"key_block", &params.key_block, 16},
                                              {"query_block", &params.query_block, 16},
                                              {"d_vectors", &params.d_vectors, 16},
                                              {"gemm_rows", &params.gemm_rows, 16},
                                              {"gemm_task_rows", &params.gemm_task_rows, 4096},
                                              {"fused_qkv", &params.fused_qkv, 1, 0},
                                              {"copy_values", &params.copy_values, 2, 0},
                                              {"alternate_chunks", &params.alternate_chunks, 1, 0},
                                              {"packed_weights", &params.packed_weights, 1, 0},
                                              {"gemm_row_vectors", &params.gemm_row_vectors, 16},
                                              {"gemm_outputs", &params.gemm_outputs, 16},
                                              {"gemm_task_tiles", &params.gemm_task_tiles, 64},
                                              {"kv_chunk", &params.kv_chunk, 65536, 0},
                                              {"key_chunk", &params.key_chunk, 65536, 0},
                                              {"rows_up_to", &params.rows_up_to, 65536, 0}});
    const bool kv_named = params.kv_chunk >= 0, key_named = params.key_chunk >= 0;
    if (!kv_named)
        params.kv_chunk = key_named && params.key_chunk > 0 ? 0 : defaults.kv_chunk;
    if (!key_named)
        params.key_chunk = kv_named && params.kv_chunk > 0 ? 0 : defaults.key_chunk;
    // The default rows_up_to goes with the default chunks: a key_chunk named alone means
    // chunks at every length, and the split-KV form takes none.
    if (params.rows_up_to < 0)
        params.rows_up_to = key_named || kv_named || params.kv_chunk > 0 ? 0 : defaults.rows_up_to;
    if (problem.empty() && params.kv_chunk > 0 && params.key_chunk > 0) {
        const std::string both = "kv_chunk=" + std::to_string(params.kv_chunk) +
                                 " and key_chunk=" + std::to_string(params.key_chunk);
        problem =
            "schedule parameters kv_chunk and key_chunk: at most one may be nonzero, got " + both;
    }
    if (problem.empty() && params.rows_up_to > 0 && params.kv_chunk > 0)
        problem = "schedule parameter rows_up_to chooses whole rows over the flash form's "
                  "key_chunk; the split-KV form takes none, got rows_up_to=" +
                  std::to_string(params.rows_up_to) +
                  " with kv_chunk=" + std::to_string(params.kv_chunk);
    return problem;
}

std::string parse_gpu_schedule_params(const std::string &text, GpuScheduleParams &params) {
    // A key_chunk the text does not name divides the kv_chunk it names: the largest power of
    // two up to the default that does.
    const int default_key_chunk = params.key_chunk;
    params.key_chunk = -1;
    std::string problem = parse_params(text, {{"query_tile", &params.query_tile, 128},
                                              {"key_chunk", &params.key_chunk, 128},
                                              {"kv_chunk", &params.kv_chunk, 65536, 0},
                                              {"heads_per_block", &params.heads_per_block, 256},
                                              {"stage_queries", &params.stage_queries, 1, 0},
                                              {"d_per_lane", &params.d_per_lane, 256},
                                              {"stage_kv", &params.stage_kv, 1, 0}});
    if (params.key_chunk < 0) {
        params.key_chunk = default_key_chunk;
        while (params.kv_chunk % params.key_chunk != 0 && params.key_chunk > 1)
            params.key_chunk /= 2;
    }
    // The block's threads split a chunk evenly only for a power of two.
    if (problem.empty() && !is_power_of_two(params.key_chunk))
        problem = "schedule parameter key_chunk must be a power of two for a GPU target, got " +
                  std::to_string(params.key_chunk);
    // The split-KV form rounds a step's keys out to whole aligned steps (cuda_schedule.cpp):
    // they are the chunk's own only if a chunk is whole steps.
    if (problem.empty() && params.kv_chunk % params.key_chunk != 0)
        problem = "schedule parameter kv_chunk must be a multiple of key_chunk (" +
                  std::to_string(params.key_chunk) + ") for a GPU target, got " +
                  std::to_string(params.kv_chunk);
    return problem;
}

int gpu_default_kv_chunk(const std::string &shape_class) {
    // 128 keys, 4 steps of the default key_chunk: Lk = 4096 with 8 kv heads gives 256 blocks,
    // about two per multiprocessor of an A100 or H100.
    return shape_class == "decode" ? 128 : 0;
}

int64_t gpu_shared_memory_bytes(const AttentionSpec &spec, const GpuScheduleParams &params) {
    // What the schedule in cuda_schedule.cpp keeps in shared memory per block, as if no two
    // buffers shared space: the staged queries (head_dim x rows, rows padded by 4 words when
    // staged transposed, from 8 queries up) and the step's K (head_dim x key_chunk + 4) and V
    // (head_dim x key_chunk) where they are staged, its masked scores and probabilities (key_chunk
    // x rows each) and its max per row. The running state is in registers.
    const int64_t head_dim = spec.resolved_head_dim();
    const int64_t keys = params.key_chunk;
    const int64_t heads = params.heads_per_block;
    const int64_t queries = params.query_tile;
    const int64_t rows = queries * heads;
    const int64_t staged_queries = (queries >= 8 ? queries + 4 : queries) * heads;
    return 4 * (params.stage_queries * head_dim * staged_queries +
                params.stage_kv * head_dim * (2 * keys + 4) + 2 * keys * rows + rows);
}

GpuScheduleParams gpu_schedule_params(const AttentionSpec &spec, const std::string &shape_class) {
    const int head_dim = spec.resolved_head_dim();
    GpuScheduleParams params;
    params.kv_chunk = gpu_default_kv_chunk(shape_class);
    if (shape_class == "decode") {
        // A chunk of keys per block for the query heads of a kv head's group, so that K and V
        // are read once for several: one query per head, and the lanes along head_dim, as many
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
        while (head_dim % lanes != 0)
            lanes /= 2;
        params.d_per_lane = head_dim / lanes;
    } else {
        // About 8 head_dim elements per lane in the fold: a power of two of lanes, up to 32,
        // shares a row, the others run along the queries; each lane folds up to 8 queries, as
        // many as keep its part of the state within 64 registers. On an H200, 8 elements a
        // lane ran 1.04x (head_dim 64) and 1.4x (128) faster than head_dim / 4.
        int d_groups = 1;
        while (d_groups < 32 && head_dim % (2 * d_groups) == 0 && head_dim / (2 * d_groups) >= 8)
            d_groups *= 2;
        params.d_per_lane = head_dim / d_groups;
        const int lane_queries = std::clamp(64 / params.d_per_lane, 1, 8);
        params.query_tile = std::min(32 / d_groups * lane_queries, 32);
    }
    // key_chunk: 32 keys, halved until the block's shared memory fits under the limit; then
    // heads_per_block and query_tile halve.
    params.key_chunk = 32;
    auto fits = [&] { return gpu_shared_memory_bytes(spec, params) <= gpu_shared_memory_limit; };
    while (!fits() && params.key_chunk > 4)
        params.key_chunk /= 2;
    while (!fits() && params.heads_per_block > 1) {
        int heads = params.heads_per_block - 1;
        while (spec.group_size() % heads != 0)
            heads--;
        params.heads_per_block = heads;
    }
    while (!fits() && params.query_tile > 1)
        params.query_tile /= 2;
    while (params.kv_chunk % params.key_chunk != 0)
        params.key_chunk /= 2;
    return params;
}

CpuScheduleParams cpu_schedule_params(const AttentionSpec &spec, const Halide::Target &target,
                                      const std::string &shape_class) {
    CpuScheduleParams params = target.arch == Halide::Target::ARM ? arm_schedule_params(target)
                                                                  : x86_schedule_params(target);
    params.kv_chunk = cpu_default_kv_chunk(shape_class);
    params.key_chunk = cpu_default_key_chunk(shape_class);
    // f16 and bf16 weights read in place would be converted once per element and row tile,
    // where packing converts them once: `attngen run`, model_dim 1024, L 128, AVX-512, f16,
    // ms packed / in place: 7.8, 7.5 / 16.0, 17.7.
    if (spec.dtype != DType::f32)
        params.packed_weights = 1;
    // V read in place costs 16-lane vectors less than its copy, except in long rows of
    // head_dim > 64 (CpuScheduleParams::copy_values).
    if (spec.dtype == DType::f32 && target.natural_vector_size<float>() >= 16)
        params.copy_values = spec.resolved_head_dim() <= 64 ? 0 : 1;
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
    const bool x86 = target.arch == Halide::Target::X86;
    const bool arm = target.arch == Halide::Target::ARM && target.bits == 64;
    if (name == "cuda" || (name == "auto" && gpu)) {
        resolved.family = Family::gpu;
        if (!gpu) {
            resolved.problem =
                "schedule 'cuda' needs a GPU target (cuda or opencl), got " + target.to_string();
            return resolved;
        }
        resolved.gpu = gpu_schedule_params(spec, shape_class);
        resolved.problem = parse_gpu_schedule_params(params, resolved.gpu);
        const int heads = resolved.gpu.heads_per_block;
        if (resolved.problem.empty() && spec.group_size() % heads != 0)
            resolved.problem = "schedule parameter heads_per_block must divide the " +
                               std::to_string(spec.group_size()) +
                               " query heads per kv head, got " + std::to_string(heads);
        const int head_dim = spec.resolved_head_dim();
        const int width = resolved.gpu.d_per_lane;
        const int d_groups = head_dim % width == 0 ? head_dim / width : 0;
        if (resolved.problem.empty() &&
            (d_groups == 0 || d_groups > 32 || !is_power_of_two(d_groups)))
            resolved.problem =
                "schedule parameter d_per_lane must divide head_dim " + std::to_string(head_dim) +
                " into a power of two of at most 32 lanes per row, got " + std::to_string(width);
        // The lanes of a warp hold the running state only in whole stripes: a tile of
        // queries is whole rows of lanes, or a power of two of them.
        const int query_lanes = d_groups > 0 ? 32 / d_groups : 1;
        const int tile = resolved.gpu.query_tile;
        if (resolved.problem.empty() && tile % query_lanes != 0 && !is_power_of_two(tile))
            resolved.problem = "schedule parameter query_tile must be a power of two or a "
                               "multiple of " +
                               std::to_string(query_lanes) + " (32 lanes over " +
                               std::to_string(d_groups) + " lanes per row), got " +
                               std::to_string(tile);
        const int64_t shared = gpu_shared_memory_bytes(spec, resolved.gpu);
        if (resolved.problem.empty() && shared > gpu_shared_memory_limit) {
            const std::string tiles = "query_tile=" + std::to_string(resolved.gpu.query_tile) +
                                      ", key_chunk=" + std::to_string(resolved.gpu.key_chunk) +
                                      " and heads_per_block=" + std::to_string(heads);
            resolved.problem =
                (params.empty() ? "the GPU schedule's smallest tiles, " + tiles +
                                      ", are too large for this layer (head_dim " +
                                      std::to_string(spec.resolved_head_dim()) + ", " +
                                      std::to_string(spec.group_size()) +
                                      " query heads per kv head): they need "
                                : "GPU schedule parameters " + tiles + " need ") +
                std::to_string(shared) + " bytes of shared memory per block, more than the " +
                std::to_string(gpu_shared_memory_limit) + " a block may use without opting in";
        }
        return resolved;
    }
    if (gpu) {
        resolved.problem = "schedule '" + name + "' is a CPU schedule; a GPU target (" +
                           target.to_string() + ") needs schedule cuda or auto";
        return resolved;
    }
    const bool use_x86 = name == "x86" || (name == "auto" && x86);
    const bool use_arm = name == "arm" || (name == "auto" && arm);
    if (use_x86 && !x86)
        resolved.problem = "schedule 'x86' needs an x86 target, got " + target.to_string();
    else if (use_arm && !arm)
        resolved.problem = "schedule 'arm' needs an arm-64 target, got " + target.to_string();
    else if (use_x86 || use_arm) {
        resolved.family = Family::cpu;
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
    case ResolvedSchedule::Family::cpu:
        options.query_block = cpu_query_tile(target, resolved.cpu);
        // P·V's register blocks, where they tile the query tile from its start.
        if (options.query_block % resolved.cpu.query_block == 0)
            options.value_block = resolved.cpu.query_block;
        options.kv_chunk =
            resolved.cpu.kv_chunk > 0 ? resolved.cpu.kv_chunk : resolved.cpu.key_chunk;
        options.rows_up_to = resolved.cpu.rows_up_to;
        // The flash form's query tiles (prefill only; decode has one tile).
        if (resolved.cpu.kv_chunk <= 0 && resolved.cpu.alternate_chunks != 0)
            options.alternate_chunks = options.query_block;
        options.reverse_queries = cpu_reverse_queries(spec, target, resolved.cpu);
        options.kv_value_block = cpu_kv_value_block(target, resolved.cpu, spec.resolved_head_dim());
        // Measured with `attngen run` (AVX-512, 2 threads, heads 8, D 64, L 2048, tuned
        // record, alternated twice): 20.9 / 20.7 ms with Halide::exp, 20.3 / 20.1 with this.
        options.polynomial_exp = true;
        // Prefill only: decode reads the weights in place.
        options.fused_qkv = resolved.cpu.kv_chunk <= 0 && resolved.cpu.fused_qkv != 0;
        break;
    case ResolvedSchedule::Family::gpu:
        options.query_block = resolved.gpu.query_tile;
        options.kv_chunk = resolved.gpu.kv_chunk;
        options.online_chunk = resolved.gpu.key_chunk;
        options.online_width = resolved.gpu.d_per_lane;
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

} // namespace attngen
