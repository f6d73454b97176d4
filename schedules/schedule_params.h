// Schedule parameters: the typed records the CPU and GPU schedules read, and the one table that
// names, explains, bounds, defaults and searches every parameter. The parser, `attngen tune`'s
// search space, the CLI's --help and docs/schedule-params.md all come from the table.
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

namespace attngen {

/** Where prefill without projections copies V into an aligned f32 buffer once per call. */
enum class CopyValues {
    none,  ///< P·V reads V in place in every form
    flash, ///< the flash (chunked) form copies V; whole rows read it in place
    all,   ///< both forms copy V
};

/**
 * The CPU schedule's parameters (x86 and AArch64). What each means, its range and its defaults
 * are in schedule_param_table(); cpu_schedule_params (schedule.h) fills a record for a target,
 * and the initializers below only make a default-constructed record valid. The register blocks
 * must fit the register file with room for the operands they load.
 */
struct CpuScheduleParams {
    int query_vectors = 2; ///< vectors of queries per parallel task (its query tile)
    int key_block = 4;     ///< keys per register block of the score loop
    int value_queries = 4; ///< queries per register block of P·V
    int d_vectors = 2;     ///< vectors of head_dim per register block of P·V (at most)
    int split_chunk = 0;   ///< keys per chunk of the split-KV (decode) form; 0: not that form
    int flash_chunk = 0;   ///< keys per chunk of the flash (prefill) form; 0: whole rows
    int task_tiles = 1;    ///< query tiles per parallel task of the flash form
    int rows_up_to = 0;    ///< calls with Lk up to this walk whole rows rather than chunks
    CopyValues copy_values = CopyValues::all;
    bool value_panels = false;   ///< the flash form's V copy in panels of one P·V block's features
    bool key_panels = false;     ///< the flash form's K copy in panels of one score block's keys
    bool packed_weights = false; ///< projections pack (transpose) their weights once per call
    int gemm_rows = 6;           ///< packed GEMM: rows per register tile
    int gemm_task_rows = 24;     ///< packed GEMM: rows per parallel task
    int gemm_row_vectors = 2;    ///< in-place GEMM: vectors of rows per register tile
    int gemm_outputs = 8;        ///< in-place GEMM: outputs per register tile
    int gemm_task_tiles = 2;     ///< in-place GEMM: row tiles per parallel task
};

/**
 * The GPU schedule's parameters (CUDA, OpenCL): a block computes query_tile queries of
 * heads_per_block heads of one kv head's group and walks the keys step_keys at a time.
 * gpu_schedule_params (schedule.h) fills a record for a layer.
 */
struct GpuScheduleParams {
    int query_tile = 32;       ///< queries per block
    int step_keys = 32;        ///< keys per step through shared memory (a power of two)
    int heads_per_block = 1;   ///< query heads of one group per block (a divisor of the group)
    bool stage_queries = true; ///< the block's scaled queries are staged in shared memory
    bool stage_kv = true;      ///< each step's K and V are staged in shared memory
    int d_per_lane = 16;       ///< head_dim elements of the running state per lane
    int split_chunk = 0;       ///< keys per block of the split-KV (decode) form; 0: not that form
};

/** The schedule family a parameter belongs to. */
enum class ScheduleFamily { cpu, gpu };

/** A pointer to the member a parameter sets; its type says whether it is a count, flag or enum. */
using ParamField = std::variant<int CpuScheduleParams::*, bool CpuScheduleParams::*,
                                CopyValues CpuScheduleParams::*, int GpuScheduleParams::*,
                                bool GpuScheduleParams::*>;

/** The shapes and layers for which `attngen tune` searches a parameter. */
enum class SearchWhen {
    prefill,                     ///< every prefill search
    prefill_without_projections, ///< prefill layers without projections
    prefill_with_projections,    ///< prefill layers with projections
    decode,                      ///< searches whose shapes are all decode shapes
    always,                      ///< every search of the family
};

/** Where the tuner's values of a parameter come from. */
enum class SearchValues {
    listed,         ///< ScheduleParam::search
    head_dim_lanes, ///< value_dim (head_dim unless set) / lanes for 2 to 32 lanes per row
    group_divisors, ///< the divisors of the grouped-query group (searched when it has several)
};

/** The CPU defaults by target: x86 by vector width, and AArch64. */
struct CpuDefaults {
    int avx512, avx2, sse41, arm;
};

/** One schedule parameter. */
struct ScheduleParam {
    const char *name;
    ScheduleFamily family;
    ParamField field;
    int min, max;             ///< the values a count may take (flags 0..1, enums their indices)
    const char *meaning;      ///< one or two sentences
    CpuDefaults cpu_defaults; ///< the CPU targets' defaults (CPU parameters only)
    const char *default_rule; ///< how the spec or shape class changes the default, or ""
    SearchWhen search_when;
    std::vector<int> search; ///< the tuner's values (SearchValues::listed)
    SearchValues search_values = SearchValues::listed;
    std::vector<const char *> old_names = {}; ///< names read from older logs and tables

    /** "count", "flag" or "enum". */
    std::string kind() const;
    /** The values the parameter's text may take, e.g. "1..16", "true|false", "none|flash|all". */
    std::string values_text() const;
    /** A value as text: the number, true/false, or the enum's name. */
    std::string format(int value) const;
    /** The defaults by target, and the rule that changes them, as text. */
    std::string defaults_text() const;
    /** The tuner's values as text, and when it searches them. */
    std::string search_text() const;
};

/** Every schedule parameter, CPU first, in the order --help and the docs list them. */
const std::vector<ScheduleParam> &schedule_param_table();

/** The parameter named `name` (or one of its old names) in `family`, or nullptr. */
const ScheduleParam *find_schedule_param(ScheduleFamily family, const std::string &name);

/**
 * A parameter attngen no longer has, as old tuning logs may still name it: `neutral` is the
 * value that meant what attngen does now; `why` says why it went.
 */
struct RemovedParam {
    /** `neutral` of a parameter whose every value ran as fast as what attngen does now, so
     * that a record's timing stands without it. */
    static constexpr int any_value = -1;
    ScheduleFamily family;
    const char *name;
    int neutral; ///< the value that meant what attngen does now, or any_value
    const char *why;
    /** Whether a record that sets the parameter to `value` may drop it and still be used. */
    bool drops(int value) const { return neutral == any_value || value == neutral; }
};

/** The removed parameter `name` of `family`, or nullptr. */
const RemovedParam *find_removed_param(ScheduleFamily family, const std::string &name);

/** The parameter's value in `params` as an integer (flags 0/1, enums their index). */
int param_value(const ScheduleParam &param, const CpuScheduleParams &params);
int param_value(const ScheduleParam &param, const GpuScheduleParams &params);

/** Sets the parameter in `params` from an integer within [min, max]. */
void set_param_value(const ScheduleParam &param, CpuScheduleParams &params, int value);
void set_param_value(const ScheduleParam &param, GpuScheduleParams &params, int value);

/**
 * Reads "key=value,..." or "key:value,..." (':' since GenGen reserves '=') into the family's
 * parameters by name, checking each name and range: current or old names; flags as true/false
 * or 1/0; enums by name or index. Returns an empty string or what is wrong; `named` gets the
 * values named, as integers, by current name.
 */
std::string parse_named_params(ScheduleFamily family, const std::string &text,
                               std::map<std::string, int> &named);

/** The family's parameters as NAME=VALUES in a few lines of `indent` spaces, for --help. */
std::string schedule_params_usage(ScheduleFamily family, int indent);

/** docs/schedule-params.md: the table as Markdown (a test checks that the page is current). */
std::string schedule_params_markdown();

/** Whether `attngen tune` searches `param` for a layer and shapes of this kind. */
bool searched(const ScheduleParam &param, bool decode, bool projections);

} // namespace attngen
