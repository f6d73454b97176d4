// Tuned schedule parameters that ship with the build: schedules/tuned/*.json, written by
// `attngen tune export`, looked up by (target class, spec class, shape class).
#pragma once

#include "dsl/attention_spec.h"

#include "Halide.h"

#include <string>

namespace attngen {

/**
 * What a schedule's speed depends on in a target: "x86-64-linux-avx512", "-avx2" or "-sse41"
 * by vector width, "arm-64-linux", or a GPU API and capability ("cuda_capability_80", "opencl").
 */
std::string target_class(const Halide::Target &target);

/**
 * What a schedule's speed depends on in a spec: head_dim, group size, masks, storage, custom
 * score/mask code and projections, e.g. "d64-g4-causal-f32" or "d64-g1-none-f32-proj512".
 */
std::string spec_class(const AttentionSpec &spec);

/** "decode" for 16 queries or fewer per call, else "prefill". */
std::string shape_class(int queries);

/** True for "prefill" and "decode". */
bool is_shape_class(const std::string &name);

/** A stable 16-hex-digit hash of everything the spec computes (FNV-1a of its canonical form). */
std::string spec_hash(const AttentionSpec &spec);

/** The outcome of a lookup: parameters ("key=value,...") and where they came from, or why none. */
struct TunedLookup {
    bool found = false;
    std::string params;
    std::string message;   ///< the record used, or why the defaults are used
    bool problems = false; ///< a table was malformed and skipped (named in the message)
};

/**
 * The tuned parameters for `spec` on `target` in `shape_class` from the *.json files of
 * `directory` (the first file and record that match; files are read in name order). A missing
 * directory finds nothing; a malformed file is reported in the message and skipped.
 */
TunedLookup find_tuned_params(const std::string &directory, const Halide::Target &target,
                              const AttentionSpec &spec, const std::string &shape_class);

} // namespace attngen
