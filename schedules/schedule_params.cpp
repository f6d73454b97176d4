// The table of schedule parameters, and the parsing, help and documentation made from it.
#include "schedule_params.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <type_traits>

namespace attngen {

namespace {

using F = ScheduleFamily;
using W = SearchWhen;

// The values of the CopyValues enum, by index.
const std::vector<std::string> copy_values_names = {"none", "flash", "all"};

/** What every CPU target shares. */
constexpr CpuDefaults all_cpus(int value) {
    return {value, value, value, value};
}

/** GPU parameters take their defaults from the layer (gpu_schedule_params). */
constexpr CpuDefaults gpu_only = {0, 0, 0, 0};

/**
 * The register blocks: the score loop keeps query_vectors x key_block accumulators plus the
 * query vectors and a broadcast key; P·V keeps value_queries x d_vectors plus the value vectors
 * and a broadcast probability. AVX-512 and NEON have 32 vector registers, SSE4.1 and AVX2 16.
 */
std::vector<ScheduleParam> cpu_register_blocks() {
    return {
        {"query_vectors",
         F::cpu,
         &CpuScheduleParams::query_vectors,
         1,
         16,
         "Vectors of queries per parallel task: the query tile, whose rows of scores stay in "
         "cache while P·V reads them.",
         {2, 3, 4, 4},
         "",
         W::prefill,
         {1, 2, 3, 4, 5, 6}},
        {"key_block",
         F::cpu,
         &CpuScheduleParams::key_block,
         1,
         16,
         "Keys per register block of the score loop (query_vectors x key_block accumulators).",
         {6, 4, 2, 6},
         "",
         W::prefill,
         {1, 2, 3, 4, 5, 6, 8}},
        {"value_queries",
         F::cpu,
         &CpuScheduleParams::value_queries,
         1,
         16,
         "Queries per register block of P·V (value_queries x d_vectors accumulators); at most "
         "the query tile.",
         {8, 6, 4, 8},
         "",
         W::prefill,
         {1, 2, 3, 4, 5, 6, 8, 10, 12},
         SearchValues::listed,
         {"query_block"}},
        {"d_vectors",
         F::cpu,
         &CpuScheduleParams::d_vectors,
         1,
         16,
         "Vectors of head_dim per register block of P·V (at most; a power of two that divides "
         "head_dim).",
         all_cpus(2),
         "",
         W::prefill,
         {1, 2, 4}},
    };
}

/** The CPU forms (whole rows, flash chunks, split-KV) and how they walk K and V. */
std::vector<ScheduleParam> cpu_form_params() {
    return {
        {"flash_chunk",
         F::cpu,
         &CpuScheduleParams::flash_chunk,
         0,
         65536,
         "Keys per chunk of the flash form: each query tile walks K and V a chunk at a time and "
         "combines the chunks exactly (0: whole rows). Naming it nonzero turns split_chunk off.",
         // A chunk's scores and probabilities (24 queries x 256 keys, 24 KiB each at f32) and
         // its V rows are reused from L1 and L2 rather than streamed from a whole row of the
         // tile.
         all_cpus(256),
         "0 for decode shapes",
         W::prefill,
         {0, 64, 128, 256, 512, 1024},
         SearchValues::listed,
         {"key_chunk"}},
        {"task_tiles",
         F::cpu,
         &CpuScheduleParams::task_tiles,
         1,
         16,
         "Query tiles per parallel task of the flash form. The task walks K and V once, each "
         "chunk serving all its tiles while it is in L2, so that memory (or a shared L3) "
         "delivers K and V once per task rather than once per tile.",
         all_cpus(1),
         "",
         W::prefill,
         {1, 2, 4}},
        {"rows_up_to",
         F::cpu,
         &CpuScheduleParams::rows_up_to,
         0,
         65536,
         "Calls with Lk up to this walk whole rows rather than flash chunks (both forms are "
         "generated, specialized on Lk; 0: chunks at every length). Not with split_chunk.",
         {2048, 1024, 0, 0},
         "0 when flash_chunk or split_chunk is named",
         W::prefill,
         {0, 512, 1024, 2048, 4096}},
        {"split_chunk",
         F::cpu,
         &CpuScheduleParams::split_chunk,
         0,
         65536,
         "Keys per chunk of the split-KV form: tasks are (chunk, kv head, batch) and the heads "
         "of a group share each chunk, for decode, where a query tile would be mostly empty "
         "(0: the query-tile forms). Uses no other parameter but the projections'.",
         all_cpus(0),
         "512 for decode shapes",
         W::decode,
         {128, 256, 512, 1024, 2048},
         SearchValues::listed,
         {"kv_chunk"}},
        {"copy_values",
         F::cpu,
         &CpuScheduleParams::copy_values,
         0,
         2,
         "Where prefill without projections copies V into an aligned buffer once per call "
         "rather than reading the caller's (rarely 64-byte aligned) rows in place: none, the "
         "flash form only, or all forms. K is always copied.",
         all_cpus(2),
         "f32 on 16-lane targets: none for head_dim <= 64, else flash",
         W::prefill_without_projections,
         {0, 1, 2}},
    };
}

/** The layouts of the flash form's per-call copies of K and V. */
std::vector<ScheduleParam> cpu_panel_params() {
    return {
        {"value_panels",
         F::cpu,
         &CpuScheduleParams::value_panels,
         0,
         1,
         "The flash form's copy of V (where copy_values makes one) holds each key's features in "
         "panels of one P·V register block (d_vectors vectors), so that a block's loop over "
         "the keys reads memory in order rather than a whole row apart.",
         {0, 1, 0, 0},
         "",
         W::prefill_without_projections,
         {0, 1}},
        {"key_panels",
         F::cpu,
         &CpuScheduleParams::key_panels,
         0,
         1,
         "The flash form's copy of K holds each run of key_block keys feature by feature, so "
         "that a score block reads its keys' features side by side rather than a whole row "
         "apart.",
         {0, 1, 0, 0},
         "false for head_dim <= 64",
         W::prefill_without_projections,
         {0, 1}},
    };
}

/** The CPU projections: packing the weights, the fused QKV GEMM and its tiles. */
std::vector<ScheduleParam> cpu_packed_projection_params() {
    return {
        {"packed_weights",
         F::cpu,
         &CpuScheduleParams::packed_weights,
         0,
         1,
         "The prefill projections pack (transpose) each weight once per call and use the "
         "gemm_rows tiles; false: they read weights in place, over activations transposed once, "
         "in gemm_row_vectors x gemm_outputs tiles. Decode reads weights in place.",
         {0, 0, 0, 1},
         "true for f16 and bf16 (packing converts the weights once)",
         W::prefill_with_projections,
         {0, 1}},
        {"gemm_rows",
         F::cpu,
         &CpuScheduleParams::gemm_rows,
         1,
         16,
         "Packed projections: rows per register tile (gemm_rows x one or two vectors of "
         "outputs).",
         all_cpus(6),
         "",
         W::prefill_with_projections,
         {2, 3, 4, 5, 6, 8, 12}},
        {"gemm_task_rows",
         F::cpu,
         &CpuScheduleParams::gemm_task_rows,
         1,
         4096,
         "Packed projections: rows per parallel task, whose activations are copied once and "
         "whose weight panels stay in L2 while they pass.",
         all_cpus(24),
         "",
         W::prefill_with_projections,
         {24, 36, 48, 72, 96, 144}},
    };
}

/** The CPU projections that read their weights in place: their tiles. */
std::vector<ScheduleParam> cpu_in_place_projection_params() {
    return {
        {"gemm_row_vectors",
         F::cpu,
         &CpuScheduleParams::gemm_row_vectors,
         1,
         16,
         "In-place projections: vectors of rows per register tile.",
         {2, 3, 3, 2},
         "",
         W::prefill_with_projections,
         {1, 2, 3, 4}},
        {"gemm_outputs",
         F::cpu,
         &CpuScheduleParams::gemm_outputs,
         1,
         16,
         "In-place projections: outputs per register tile (the largest divisor of head_dim, or "
         "of the output projection's task, up to this).",
         {8, 4, 4, 8},
         "",
         W::prefill_with_projections,
         {2, 4, 8, 16}},
        {"gemm_task_tiles",
         F::cpu,
         &CpuScheduleParams::gemm_task_tiles,
         1,
         64,
         "In-place projections: row tiles per parallel task.",
         all_cpus(2),
         "",
         W::prefill_with_projections,
         {1, 2, 4, 8}},
    };
}

/** The GPU blocks: their queries, steps of keys, lanes and heads. */
std::vector<ScheduleParam> gpu_block_params() {
    return {
        {"query_tile",
         F::gpu,
         &GpuScheduleParams::query_tile,
         1,
         128,
         "Queries per block: a power of two, or a multiple of the lanes along the queries "
         "(32 / (head_dim / d_per_lane)).",
         gpu_only,
         "32 (head_dim 64), 16 (128), within 48 KiB of shared memory; 1 for decode",
         W::always,
         {8, 16, 32, 64}},
        {"step_keys",
         F::gpu,
         &GpuScheduleParams::step_keys,
         1,
         128,
         "Keys per step through shared memory, a power of two.",
         gpu_only,
         "32, halved until the block fits 48 KiB; a divisor of split_chunk",
         W::always,
         {8, 16, 32, 64},
         SearchValues::listed,
         {"key_chunk"}},
        {"d_per_lane",
         F::gpu,
         &GpuScheduleParams::d_per_lane,
         1,
         256,
         "Value_dim elements (head_dim unless the layer sets value_dim) of the running state "
         "per lane; value_dim / d_per_lane lanes (a power of two up to 32) share a row.",
         gpu_only,
         "about 8; value_dim / 32 for decode",
         W::always,
         {},
         SearchValues::head_dim_lanes},
        {"heads_per_block",
         F::gpu,
         &GpuScheduleParams::heads_per_block,
         1,
         256,
         "Query heads of one kv head's group per block, sharing each step (a divisor of the "
         "group).",
         gpu_only,
         "1; up to 4 of the group for decode (1 where head_dim is not a multiple of 32)",
         W::always,
         {},
         SearchValues::group_divisors},
    };
}

/** The GPU blocks' staging in shared memory, and the split-KV form. */
std::vector<ScheduleParam> gpu_staging_params() {
    return {
        {"stage_queries",
         F::gpu,
         &GpuScheduleParams::stage_queries,
         0,
         1,
         "The block's scaled queries are staged in shared memory; false: read where they lie.",
         gpu_only,
         "true",
         W::always,
         {0, 1}},
        {"stage_kv",
         F::gpu,
         &GpuScheduleParams::stage_kv,
         0,
         1,
         "Each step's K and V are staged in shared memory; false: read where they lie, for "
         "blocks of a few queries.",
         gpu_only,
         "true",
         W::always,
         {0, 1}},
        {"split_chunk",
         F::gpu,
         &GpuScheduleParams::split_chunk,
         0,
         65536,
         "Keys per block of the split-KV form, a multiple of step_keys: blocks over (query "
         "tile, chunk, kv head x batch) and a kernel that combines the chunks exactly (0: each "
         "block walks whole rows).",
         gpu_only,
         "0; 128 for decode",
         W::decode,
         {64, 128, 256, 512, 1024},
         SearchValues::listed,
         {"kv_chunk"}},
    };
}

/**
 * The table, each group's parameters in turn: the order in which the usage and
 * docs/schedule-params.md list them.
 */
std::vector<ScheduleParam> make_table() {
    std::vector<ScheduleParam> table;
    for (auto group :
         {cpu_register_blocks, cpu_form_params, cpu_panel_params, cpu_packed_projection_params,
          cpu_in_place_projection_params, gpu_block_params, gpu_staging_params}) {
        std::vector<ScheduleParam> params = group();
        table.insert(table.end(), params.begin(), params.end());
    }
    return table;
}

/** Whether the field is a bool or an enum member. */
template <typename Member> struct FieldKind;
template <typename Params, typename T> struct FieldKind<T Params::*> {
    using params = Params;
    using type = T;
};

template <typename Params> int read_field(const ParamField &field, const Params &params) {
    return std::visit(
        [&](auto member) -> int {
            using Kind = FieldKind<decltype(member)>;
            if constexpr (std::is_same_v<typename Kind::params, Params>)
                return static_cast<int>(params.*member);
            else
                return 0;
        },
        field);
}

template <typename Params> void write_field(const ParamField &field, Params &params, int value) {
    std::visit(
        [&](auto member) {
            using Kind = FieldKind<decltype(member)>;
            if constexpr (std::is_same_v<typename Kind::params, Params>) {
                using T = typename Kind::type;
                if constexpr (std::is_same_v<T, bool>)
                    params.*member = value != 0;
                else
                    params.*member = static_cast<T>(value);
            }
        },
        field);
}

/** Parses one value of `param`; returns false if it is not one the parameter takes. */
bool parse_value(const ScheduleParam &param, const std::string &text, int &value) {
    const std::string kind = param.kind();
    if (kind == "flag" && (text == "true" || text == "false")) {
        value = text == "true" ? 1 : 0;
        return true;
    }
    if (kind == "enum") {
        const auto named = std::find(copy_values_names.begin(), copy_values_names.end(), text);
        if (named != copy_values_names.end()) {
            value = static_cast<int>(named - copy_values_names.begin());
            return true;
        }
    }
    char *end = nullptr;
    const long number = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || number < param.min || number > param.max)
        return false;
    value = static_cast<int>(number);
    return true;
}

/** `text` with the '|' a Markdown table cell cannot hold escaped. */
std::string table_cell(const std::string &text) {
    std::string cell;
    for (char c : text)
        cell += c == '|' ? std::string("\\|") : std::string(1, c);
    return cell;
}

const char *when_text(SearchWhen when) {
    switch (when) {
    case W::prefill:
        return "prefill";
    case W::prefill_without_projections:
        return "prefill, without projections";
    case W::prefill_with_projections:
        return "prefill, with projections";
    case W::decode:
        return "decode";
    case W::always:
        break;
    }
    return "always";
}

} // namespace

std::string ScheduleParam::search_text() const {
    std::string text;
    switch (search_values) {
    case SearchValues::head_dim_lanes:
        text = "value_dim / 2..32 lanes";
        break;
    case SearchValues::group_divisors:
        text = "divisors of the group";
        break;
    case SearchValues::listed:
        for (int value : search)
            text += (text.empty() ? "" : ", ") + format(value);
        break;
    }
    return text + " (" + when_text(search_when) + ")";
}

std::string ScheduleParam::defaults_text() const {
    if (family == F::gpu)
        return default_rule;
    const CpuDefaults &d = cpu_defaults;
    std::string text = d.avx512 == d.avx2 && d.avx2 == d.sse41 && d.sse41 == d.arm
                           ? format(d.avx512)
                           : "AVX-512 " + format(d.avx512) + ", AVX2 " + format(d.avx2) +
                                 ", SSE4.1 " + format(d.sse41) + ", arm " + format(d.arm);
    if (*default_rule != '\0')
        text += "; " + std::string(default_rule);
    return text;
}

std::string ScheduleParam::kind() const {
    return std::visit(
        [](auto member) -> std::string {
            using T = typename FieldKind<decltype(member)>::type;
            if constexpr (std::is_same_v<T, bool>)
                return "flag";
            else if constexpr (std::is_same_v<T, CopyValues>)
                return "enum";
            else
                return "count";
        },
        field);
}

std::string ScheduleParam::values_text() const {
    const std::string k = kind();
    if (k == "flag")
        return "true|false";
    if (k == "enum")
        return copy_values_names[0] + "|" + copy_values_names[1] + "|" + copy_values_names[2];
    return std::to_string(min) + ".." + std::to_string(max);
}

std::string ScheduleParam::format(int value) const {
    const std::string k = kind();
    if (k == "flag")
        return value != 0 ? "true" : "false";
    if (k == "enum" && value >= 0 && value < static_cast<int>(copy_values_names.size()))
        return copy_values_names[value];
    return std::to_string(value);
}

const std::vector<ScheduleParam> &schedule_param_table() {
    static const std::vector<ScheduleParam> table = make_table();
    return table;
}

const ScheduleParam *find_schedule_param(ScheduleFamily family, const std::string &name) {
    for (const ScheduleParam &param : schedule_param_table()) {
        if (param.family != family)
            continue;
        if (name == param.name)
            return &param;
        for (const char *old : param.old_names)
            if (name == old)
                return &param;
    }
    return nullptr;
}

const RemovedParam *find_removed_param(ScheduleFamily family, const std::string &name) {
    static const RemovedParam removed[] = {
        {F::cpu, "fused_qkv", 0,
         "Q, K and V as one packed GEMM was never faster than three (docs/performance.md)"},
        {F::cpu, "alternate_chunks", RemovedParam::any_value,
         "walking odd query tiles' flash chunks last to first won nothing beyond noise "
         "(docs/performance.md)"}};
    for (const RemovedParam &param : removed)
        if (param.family == family && name == param.name)
            return &param;
    return nullptr;
}

int param_value(const ScheduleParam &param, const CpuScheduleParams &params) {
    return read_field(param.field, params);
}

int param_value(const ScheduleParam &param, const GpuScheduleParams &params) {
    return read_field(param.field, params);
}

void set_param_value(const ScheduleParam &param, CpuScheduleParams &params, int value) {
    write_field(param.field, params, value);
}

void set_param_value(const ScheduleParam &param, GpuScheduleParams &params, int value) {
    write_field(param.field, params, value);
}

std::string parse_named_params(ScheduleFamily family, const std::string &text,
                               std::map<std::string, int> &named) {
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ',')) {
        if (item.empty())
            continue;
        const size_t equals = item.find_first_of("=:");
        const std::string key = item.substr(0, equals);
        const ScheduleParam *param = find_schedule_param(family, key);
        if (const RemovedParam *removed = find_removed_param(family, key); removed != nullptr)
            return "schedule parameter " + key + " was removed (" + removed->why + "); drop it";
        if (param == nullptr || equals == std::string::npos) {
            std::string names;
            for (const ScheduleParam &p : schedule_param_table())
                if (p.family == family)
                    names += std::string(names.empty() ? "" : ", ") + p.name;
            return "unknown " + std::string(family == F::cpu ? "CPU" : "GPU") +
                   " schedule parameter '" + item + "'; expected NAME=VALUE with NAME one of " +
                   names;
        }
        const std::string value = item.substr(equals + 1);
        int number = 0;
        if (!parse_value(*param, value, number))
            return "schedule parameter " + key + " must be " +
                   (param->kind() == "count" ? "in " : "") + param->values_text() + ", got '" +
                   value + "'";
        named[param->name] = number;
    }
    return "";
}

std::string schedule_params_usage(ScheduleFamily family, int indent) {
    const std::string margin(static_cast<size_t>(indent), ' ');
    std::string text, line;
    for (const ScheduleParam &param : schedule_param_table()) {
        if (param.family != family)
            continue;
        const std::string item =
            std::string(param.name) + "=" + (param.kind() == "count" ? "N" : param.values_text());
        if (!line.empty() && margin.size() + line.size() + item.size() + 1 > 80) {
            text += margin + line + ",\n";
            line.clear();
        }
        line += (line.empty() ? "" : ",") + item;
    }
    return text + margin + line;
}

std::string schedule_params_markdown() {
    std::string text =
        "# Schedule parameters\n\n"
        "[← README](../README.md)\n\n"
        "Generated by `attngen params --markdown` from the table in\n"
        "schedules/schedule_params.cpp; a test checks that this page is current.\n\n"
        "`attngen compile` and `attngen run` take them as `--schedule-params NAME=VALUE,...`,\n"
        "`attngen_add_library` as `SCHEDULE_PARAMS`, and `attngen tune` searches them\n"
        "(`--space` narrows its values). Flags take `true` or `false` (or 1 or 0). Old names\n"
        "are still read, from the command line and from tuning logs and tuned tables.\n";
    for (const ScheduleFamily family : {F::cpu, F::gpu}) {
        text += family == F::cpu ? "\n## CPU (x86, arm)\n\n" : "\n## GPU (CUDA, OpenCL)\n\n";
        text += "| name | meaning | values | default | tuner searches |\n"
                "|---|---|---|---|---|\n";
        for (const ScheduleParam &param : schedule_param_table()) {
            if (param.family != family)
                continue;
            std::string name = "`" + std::string(param.name) + "`";
            for (const char *old : param.old_names)
                name += " (was `" + std::string(old) + "`)";
            text += "| " + name + " | " + param.meaning + " | " + table_cell(param.values_text()) +
                    " | " + param.defaults_text() + " | " + param.search_text() + " |\n";
        }
    }
    return text;
}

bool searched(const ScheduleParam &param, bool decode, bool projections) {
    switch (param.search_when) {
    case W::prefill:
        return !decode;
    case W::prefill_without_projections:
        return !decode && !projections;
    case W::prefill_with_projections:
        return !decode && projections;
    case W::decode:
        return decode;
    case W::always:
        break;
    }
    return true;
}

} // namespace attngen
