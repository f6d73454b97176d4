// One layer at one shape, ready to run in this process: random inputs from a seed (the ranges
// `attngen run --help` states), the ImageParams and scalar Params the pipeline reads them from,
// and the double-precision reference output for those inputs. `attngen run` and `attngen tune`
// measure and check candidates with it.
#pragma once

#include "dsl/attention_spec.h"
#include "dsl/halide_compat.h"
#include "generators/bind_inputs.h"
#include "problem_shape.h"

#include "Halide.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attngen::cli {

/**
 * The values of the spec's scalars from NAME=NUMBER words; a scalar not given is 1 (and a line
 * says so on stdout). Returns an empty string, or what is wrong with a word.
 */
std::string parse_scalars(const std::vector<std::string> &words, const AttentionSpec &spec,
                          std::map<std::string, double> &values);

/**
 * Whether `spec` can run at `shape` here: a self-attention layer's Lk is its Lq, and every
 * tensor of the call fits the 2^31 - 1 bytes an entry point accepts. Returns an empty string,
 * or what is wrong.
 */
std::string check_problem(const AttentionSpec &spec, const ProblemShape &shape);

/** One argument's buffer, its values as the layer reads them, and its row-major shape. */
struct HostArgument {
    Halide::Buffer<> buffer;
    std::vector<double> values;
    std::vector<int64_t> shape;
};

/** Every input buffer of one call, by argument name. */
using InputSet = std::map<std::string, HostArgument>;

struct LayerProblem {
    AttentionSpec spec;
    ProblemShape shape;
    std::map<std::string, double> scalars; ///< every scalar the spec declares
    BoundArguments bound;                  ///< ImageParams and scalar Params, for bind_inputs
    std::vector<halide_compat::Parameter> scalar_params;
    std::map<std::string, Halide::ImageParam> images;
    InputSet inputs;              ///< what the images are bound to first
    std::vector<int> out_extents; ///< Halide order
    std::vector<TensorDim> out_dims;
    Halide::Type out_type;
};

/**
 * The parameters and a first set of random inputs (from `seed`) for `spec` at `shape`.
 * `scalars` must give every scalar the spec declares.
 */
LayerProblem make_layer_problem(const AttentionSpec &spec, const ProblemShape &shape,
                                const std::map<std::string, double> &scalars, uint32_t seed);

/**
 * Constrains the defined output Func `out` as the generator constrains its Output (mins 0,
 * fixed extents), so that a JIT pipeline is compiled as the generated library is.
 */
void constrain_output(const LayerProblem &problem, Halide::Func &out);

/** Another set of inputs of the same shapes, from `seed`. */
InputSet make_inputs(const LayerProblem &problem, uint32_t seed);

/** `count` input sets: the problem's own first, then sets from seed + 1, seed + 2, ... */
std::vector<InputSet> make_input_sets(const LayerProblem &problem, int count, uint32_t seed);

/** Binds the problem's ImageParams to `inputs` (which must outlive the calls that read them). */
void bind(LayerProblem &problem, InputSet &inputs);

/** The double-precision reference output for `inputs`, in the output buffer's element order. */
std::vector<double> reference_output(const LayerProblem &problem, const InputSet &inputs,
                                     std::vector<double> *lse = nullptr);

/** The relative error a layer of this storage type may have (f32 1e-5, f16 2e-3, bf16 1.6e-2). */
double output_tolerance(DType dtype);

/**
 * An output against the reference: its relative error, max |out - want| / max(max |want|, 1)
 * (infinite if `out` holds a NaN), and the tolerance of its storage type.
 */
struct OutputCheck {
    double error = 0;
    double tolerance = 0;

    bool ok() const { return error <= tolerance; }
    /** "relative error E above the tolerance T" (for a failed check). */
    std::string describe() const;
};

/** Checks `out` against `want` (from reference_output) with the problem's tolerance. */
OutputCheck check_output(const LayerProblem &problem, const Halide::Buffer<> &out,
                         const std::vector<double> &want);

/**
 * A layer's lse (outputs = out, lse; Halide order (q, h, b)) against the reference's (B, H, Lq):
 * max |lse - want| / max(|want|, 1) over the finite elements, infinite where a -inf or NaN of the
 * reference is not matched exactly; the tolerance is 1e-5.
 */
OutputCheck check_lse(const Halide::Buffer<float> &lse, const std::vector<double> &want);

/** 4 * B * H * Lq * Lk * D: the multiply-adds of scores and P·V, twice. */
double attention_flops(const AttentionSpec &spec, const ProblemShape &shape);

} // namespace attngen::cli
