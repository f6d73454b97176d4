// Random inputs, pipeline parameters and the double-precision reference for one layer and shape.
#include "layer_problem.h"

#include "dsl/layer_interface.h"

#include "reference_attention.h"
#include "reference_expression.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

namespace attngen::cli {

namespace {

/** Fills `arg` with uniform values in [low, high] (integers for i32), rounded to its type. */
void fill(HostArgument &arg, double low, double high, std::mt19937 &rng) {
    const Halide::Type type = arg.buffer.type();
    const size_t count = arg.buffer.number_of_elements();
    arg.values.resize(count);
    std::uniform_real_distribution<double> uniform(low, high);
    for (size_t i = 0; i < count; i++) {
        double value = uniform(rng);
        if (type.is_int()) {
            int32_t integer = static_cast<int32_t>(std::floor(value + 0.5));
            if (type.bits() == 8)
                static_cast<int8_t *>(arg.buffer.data())[i] = static_cast<int8_t>(integer);
            else
                static_cast<int32_t *>(arg.buffer.data())[i] = integer;
            arg.values[i] = integer;
        } else if (type.is_bfloat()) {
            Halide::bfloat16_t stored(static_cast<float>(value));
            static_cast<Halide::bfloat16_t *>(arg.buffer.data())[i] = stored;
            arg.values[i] = static_cast<float>(stored);
        } else if (type.bits() == 16) {
            Halide::float16_t stored(static_cast<float>(value));
            static_cast<Halide::float16_t *>(arg.buffer.data())[i] = stored;
            arg.values[i] = static_cast<float>(stored);
        } else {
            static_cast<float *>(arg.buffer.data())[i] = static_cast<float>(value);
            arg.values[i] = static_cast<float>(value);
        }
    }
}

double read_as_double(const Halide::Buffer<> &buffer, size_t i) {
    const Halide::Type type = buffer.type();
    if (type.is_bfloat())
        return static_cast<float>(static_cast<const Halide::bfloat16_t *>(buffer.data())[i]);
    if (type.bits() == 16)
        return static_cast<float>(static_cast<const Halide::float16_t *>(buffer.data())[i]);
    return static_cast<const float *>(buffer.data())[i];
}

std::vector<int> extents_of(const EntryArgument &entry, const ProblemShape &shape) {
    std::vector<int> extents;
    for (const TensorDim &dim : entry.dims)
        switch (dim.symbol) {
        case TensorDim::Symbol::batch:
            extents.push_back(shape.batch);
            break;
        case TensorDim::Symbol::queries:
            extents.push_back(shape.queries);
            break;
        case TensorDim::Symbol::keys:
            extents.push_back(shape.keys);
            break;
        default:
            extents.push_back(dim.extent);
        }
    return extents;
}

double relative_error(const Halide::Buffer<> &out, const std::vector<double> &want) {
    double error = 0, scale = 1;
    for (size_t i = 0; i < want.size(); i++) {
        scale = std::max(scale, std::abs(want[i]));
        const double diff = std::abs(read_as_double(out, i) - want[i]);
        error = std::isnan(diff) ? INFINITY : std::max(error, diff);
    }
    return error / scale;
}

} // namespace

std::string parse_scalars(const std::vector<std::string> &words, const AttentionSpec &spec,
                          std::map<std::string, double> &values) {
    for (const std::string &word : words) {
        const size_t equals = word.find('=');
        char *end = nullptr;
        const double value =
            equals == std::string::npos ? 0 : std::strtod(word.c_str() + equals + 1, &end);
        if (equals == std::string::npos || end == nullptr || *end != '\0' || !std::isfinite(value))
            return "--scalar must be NAME=NUMBER, got '" + word + "'";
        const std::string name = word.substr(0, equals);
        const RuntimeScalar *declared = nullptr;
        for (const RuntimeScalar &scalar : spec.scalars)
            if (scalar.name == name)
                declared = &scalar;
        if (declared == nullptr)
            return "layer '" + spec.name + "' declares no scalar '" + name + "'";
        if (declared->is_int32 &&
            (value != std::floor(value) || value < INT32_MIN || value > INT32_MAX))
            return fmt::format("--scalar {}: {} is an i32 scalar, so {} must be an integer in "
                               "{}..{}",
                               word, name, word.substr(equals + 1), INT32_MIN, INT32_MAX);
        if (!declared->is_int32 && std::abs(value) > FLT_MAX)
            return fmt::format("--scalar {}: {} is an f32 scalar, so it must be within +-{:g}",
                               word, name, FLT_MAX);
        values[name] = value;
    }
    for (const RuntimeScalar &scalar : spec.scalars)
        if (!values.count(scalar.name)) {
            fmt::print("scalar {} not given (--scalar {}=VALUE): using 1\n", scalar.name,
                       scalar.name);
            values[scalar.name] = 1.0;
        }
    return "";
}

std::string check_problem(const AttentionSpec &spec, const ProblemShape &shape) {
    if (spec.cache.any())
        return fmt::format("layer '{}' has a KV cache (cache = {}), which attngen run and tune do "
                           "not fill: generate it and call it from C++ (docs/cache.md)",
                           spec.name, cache_text(spec.cache));
    if (spec.projections.any() && !spec.cross_attention && shape.keys != shape.queries)
        return fmt::format("layer '{}' is self-attention: its keys are its queries, so shape {} "
                           "needs Lk = Lq",
                           spec.name, to_string(shape));
    if (spec.rope.table && shape.queries > shape.keys)
        return fmt::format("layer '{}' takes rope tables with a row per key position, and a query "
                           "sits at q + Lk - Lq: shape {} needs Lq <= Lk",
                           spec.name, to_string(shape));
    // The generated entry points take tensors of at most 2^31 - 1 bytes; so do these buffers.
    for (const EntryArgument &entry : layer_arguments(spec)) {
        if (entry.kind == EntryArgument::Kind::scalar)
            continue;
        const std::vector<int> extents = extents_of(entry, shape);
        double bytes = argument_type(spec, entry).bytes();
        for (int extent : extents)
            bytes *= extent;
        if (bytes > INT32_MAX)
            return fmt::format("at shape {}, `{}` would take {:.4g} GiB; a tensor holds at most "
                               "2^31 - 1 bytes",
                               to_string(shape), entry.name, bytes / (1 << 30));
    }
    return "";
}

InputSet make_inputs(const LayerProblem &problem, uint32_t seed) {
    const AttentionSpec &spec = problem.spec;
    std::mt19937 rng(seed);
    InputSet inputs;
    const double fan_in = spec.resolved_model_dim();
    const double concat = double(spec.heads) * spec.resolved_value_dim();
    for (const EntryArgument &entry : layer_arguments(spec)) {
        if (entry.kind != EntryArgument::Kind::buffer)
            continue;
        const std::vector<int> extents = extents_of(entry, problem.shape);
        HostArgument &arg = inputs[entry.name];
        arg.buffer = Halide::Buffer<>(argument_type(spec, entry), extents);
        arg.shape.assign(extents.rbegin(), extents.rend());
        const std::string &name = entry.name;
        if (name == "key_lengths" || (entry.is_declared && entry.is_int32))
            fill(arg, 0, static_cast<double>(problem.shape.keys), rng);
        else if (name == "wq" || name == "wk" || name == "wv")
            fill(arg, -1 / std::sqrt(fan_in), 1 / std::sqrt(fan_in), rng);
        else if (name == "wo")
            fill(arg, -1 / std::sqrt(concat), 1 / std::sqrt(concat), rng);
        else if (name == "bq" || name == "bk" || name == "bv" || name == "bo")
            fill(arg, -0.5, 0.5, rng);
        else if (name == "attn_bias")
            fill(arg, -2, 2, rng);
        else if (name == "key_scales" || name == "value_scales")
            fill(arg, 0.5 / 127, 1.0 / 127, rng);
        else if (arg.buffer.type() == Halide::Int(8)) // i8 keys and values, as quantized
            fill(arg, -127, 127, rng);
        else
            fill(arg, -1, 1, rng);
    }
    // i8 keys and values: the reference reads each element times its row's scale.
    if (spec.resolved_kv_dtype() == DType::i8 && !spec.projections.any())
        for (const char *name : {"key", "value"}) {
            HostArgument &stored = inputs.at(name);
            const std::vector<double> &scales = inputs.at(std::string(name) + "_scales").values;
            const size_t row = static_cast<size_t>(stored.buffer.dim(0).extent());
            for (size_t i = 0; i < stored.values.size(); i++)
                stored.values[i] *= scales[i / row];
        }
    return inputs;
}

LayerProblem make_layer_problem(const AttentionSpec &spec, const ProblemShape &shape,
                                const std::map<std::string, double> &scalars, uint32_t seed) {
    LayerProblem problem;
    problem.spec = spec;
    problem.shape = shape;
    problem.scalars = scalars;
    for (const EntryArgument &entry : layer_arguments(spec)) {
        const Halide::Type type = argument_type(spec, entry);
        switch (entry.kind) {
        case EntryArgument::Kind::output:
            if (entry.name != "out") // run and tune measure and check `out` alone
                break;
            problem.out_extents = extents_of(entry, shape);
            problem.out_dims = entry.dims;
            problem.out_type = type;
            break;
        case EntryArgument::Kind::scalar: {
            halide_compat::Parameter parameter(type, false, 0, entry.name);
            const double value = scalars.at(entry.name);
            if (type.is_int())
                parameter.set_scalar<int32_t>(static_cast<int32_t>(value));
            else
                parameter.set_scalar<float>(static_cast<float>(value));
            problem.bound.scalars[entry.name] =
                Halide::Internal::Variable::make(type, entry.name, parameter);
            problem.scalar_params.push_back(parameter);
            break;
        }
        case EntryArgument::Kind::buffer:
            problem.images.emplace(entry.name, bind_image_param(spec, entry, problem.bound));
            break;
        }
    }
    problem.inputs = make_inputs(problem, seed);
    bind(problem, problem.inputs);
    return problem;
}

void constrain_output(const LayerProblem &problem, Halide::Func &out) {
    Halide::OutputImageParam buffer = out.output_buffer();
    constrain_argument(buffer, problem.out_dims);
}

std::vector<InputSet> make_input_sets(const LayerProblem &problem, int count, uint32_t seed) {
    std::vector<InputSet> sets = {problem.inputs};
    for (int i = 1; i < count; i++)
        sets.push_back(make_inputs(problem, seed + static_cast<uint32_t>(i)));
    return sets;
}

void bind(LayerProblem &problem, InputSet &inputs) {
    for (auto &entry : problem.images)
        entry.second.set(inputs.at(entry.first).buffer);
}

std::vector<double> reference_output(const LayerProblem &lp, const InputSet &inputs,
                                     std::vector<double> *lse) {
    const AttentionSpec &spec = lp.spec;
    attngen_test::ReferenceProblem problem;
    problem.batch = lp.shape.batch;
    problem.heads = spec.heads;
    problem.kv_heads = spec.resolved_kv_heads();
    problem.head_dim = spec.resolved_head_dim();
    problem.value_dim = spec.resolved_value_dim();
    problem.model_dim = spec.resolved_model_dim();
    problem.query_len = lp.shape.queries;
    problem.key_len = lp.shape.keys;
    problem.scale = spec.resolved_scale();
    problem.causal = spec.mask.causal;
    problem.key_padding = spec.mask.key_padding;
    problem.window = spec.mask.window;
    problem.additive = spec.mask.additive;
    problem.projections = spec.projections.any();
    problem.out_projection = spec.projections.out;
    problem.bias = spec.projections.bias;
    problem.cross = spec.cross_attention;
    using Rope = attngen_test::ReferenceRope;
    const RopeSpec &rope = spec.rope;
    problem.rope.layout = rope.kind == RopeKind::neox          ? Rope::Layout::neox
                          : rope.kind == RopeKind::interleaved ? Rope::Layout::interleaved
                                                               : Rope::Layout::none;
    problem.rope.theta = rope.theta;
    problem.rope.rotary_dim = spec.resolved_rotary_dim();
    problem.rope.scaling = rope.scaling.kind == RopeScaling::Kind::linear   ? Rope::Scaling::linear
                           : rope.scaling.kind == RopeScaling::Kind::llama3 ? Rope::Scaling::llama3
                                                                            : Rope::Scaling::none;
    problem.rope.factor = rope.scaling.factor;
    problem.rope.low_freq_factor = rope.scaling.low_freq_factor;
    problem.rope.high_freq_factor = rope.scaling.high_freq_factor;
    problem.rope.original_max_positions = rope.scaling.original_max_positions;
    auto values = [&](const char *name) {
        auto found = inputs.find(name);
        return found == inputs.end() ? std::vector<double>() : found->second.values;
    };
    problem.query = values("query");
    problem.key = values("key");
    problem.value = values("value");
    problem.x = values("x");
    problem.context = values("context");
    problem.wq = values("wq");
    problem.wk = values("wk");
    problem.wv = values("wv");
    problem.wo = values("wo");
    problem.bq = values("bq");
    problem.bk = values("bk");
    problem.bv = values("bv");
    problem.bo = values("bo");
    problem.attn_bias = values("attn_bias");
    problem.sinks = values("sinks");
    problem.rope.cos_table = values("rope_cos"); // rope = table; any values in [-1, 1]
    problem.rope.sin_table = values("rope_sin");
    for (double length : values("key_lengths"))
        problem.key_lengths.push_back(static_cast<int>(length));
    attngen_test::ReferenceBindings bindings;
    for (const RuntimeTensor &tensor : spec.tensors)
        bindings.tensors[tensor.name] = {inputs.at(tensor.name).values,
                                         inputs.at(tensor.name).shape, tensor.is_int32};
    for (const RuntimeScalar &scalar : spec.scalars)
        bindings.scalars[scalar.name] = {lp.scalars.at(scalar.name), scalar.is_int32};
    if (spec.score_mod)
        problem.score_mod = [&](double score, int b, int h, int q, int k) {
            return attngen_test::evaluate(*spec.score_mod, bindings, score, b, h, q, k);
        };
    if (!spec.mask_predicates.empty())
        problem.visible = [&](int b, int h, int q, int k) {
            for (const ModExprPtr &predicate : spec.mask_predicates)
                if (attngen_test::evaluate(*predicate, bindings, 0, b, h, q, k) == 0)
                    return false;
            return true;
        };
    return attngen_test::reference_attention(problem, lse);
}

OutputCheck check_lse(const Halide::Buffer<float> &lse, const std::vector<double> &want) {
    OutputCheck check;
    check.tolerance = 1e-5;
    const int rows = lse.dim(0).extent(), heads = lse.dim(1).extent();
    for (int b = 0; b < lse.dim(2).extent(); b++)
        for (int h = 0; h < heads; h++)
            for (int q = 0; q < rows; q++) {
                const double got = lse(q, h, b);
                const double w = want[(static_cast<size_t>(b) * heads + h) * rows + q];
                double error = 0;
                if (!std::isfinite(w))
                    error = (std::isnan(w) ? std::isnan(got) : got == w)
                                ? 0
                                : std::numeric_limits<double>::infinity();
                else
                    error = std::abs(got - w) / std::max(1.0, std::abs(w));
                if (!(error <= check.error)) // NaN counts as infinite
                    check.error =
                        std::isnan(error) ? std::numeric_limits<double>::infinity() : error;
            }
    return check;
}

double output_tolerance(DType dtype) {
    return dtype == DType::bf16 ? 1.6e-2 : dtype == DType::f16 ? 2e-3 : 1e-5;
}

std::string OutputCheck::describe() const {
    return fmt::format("relative error {:g} above the tolerance {:g}", error, tolerance);
}

OutputCheck check_output(const LayerProblem &problem, const Halide::Buffer<> &out,
                         const std::vector<double> &want) {
    return {relative_error(out, want), output_tolerance(problem.spec.dtype)};
}

double attention_flops(const AttentionSpec &spec, const ProblemShape &shape) {
    // 2 flops per multiply-add of Q·Kᵀ (head_dim) and of P·V (value_dim).
    return 2.0 * shape.batch * spec.heads * double(shape.queries) * shape.keys *
           (spec.resolved_head_dim() + spec.resolved_value_dim());
}

} // namespace attngen::cli
