// The Halide Generator that binds an attention description, a target and a schedule into a
// library. Its GeneratorParams mirror AttentionSpec field for field; the inputs and outputs it
// declares follow from the spec (DESIGN.md, "Data layout"), and their names are the ones the
// runtime matches arguments by.
#include "dsl/attention_algorithm.h"
#include "dsl/attention_spec.h"
#include "dsl/halide_compat.h"
#include "dsl/layer_interface.h"
#include "generators/bind_inputs.h"
#include "generators/layer_source.h"
#include "schedules/schedule.h"
#include "schedules/tuned_params.h"

#include "Halide.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace attngen {

using Halide::Buffer;
using Halide::Func;
using Halide::GeneratorInput;
using Halide::GeneratorOutput;

/**
 * Halide's compile-time messages as Halide prints them, less a warning every build of a GPU
 * test layer gave once per OpenCL variant: Halide cannot evaluate an assertion inside an
 * OpenCL kernel (here, consistency checks of the GPU schedule's bounds on its key steps, which
 * the GPU tests cover) and says so each time. ATTNGEN_VERBOSE=1 shows it again. Errors are
 * thrown as Halide throws them.
 */
class QuietWarnings : public Halide::CompileTimeErrorReporter {
  public:
    void warning(const char *message) override {
        const std::string text = message;
        if (text.find("Ignoring assertion inside OpenCL kernel") != std::string::npos && !verbose())
            return;
        std::fprintf(stderr, "%s%s", text.c_str(),
                     !text.empty() && text.back() == '\n' ? "" : "\n");
    }

    [[noreturn]] void error(const char *message) override {
        const std::string text = message;
        if (text.rfind("Error", 0) == 0)
            throw Halide::CompileError(text);
        throw Halide::InternalError(text);
    }

    /** ATTNGEN_VERBOSE set (and not 0): say more about each variant. */
    static bool verbose() {
        const char *value = std::getenv("ATTNGEN_VERBOSE");
        return value != nullptr && *value != '\0' && std::string(value) != "0";
    }
};

class AttentionGenerator : public Halide::Generator<AttentionGenerator> {
  public:
    GeneratorParam<int> model_dim{"model_dim", 0};
    GeneratorParam<int> heads{"heads", 1};
    GeneratorParam<int> kv_heads{"kv_heads", 0};
    GeneratorParam<int> head_dim{"head_dim", 0};
    GeneratorParam<int> value_dim{"value_dim", 0};
    GeneratorParam<std::string> scale{"scale", "default"};
    GeneratorParam<std::string> dtype{"dtype", "f32"};
    GeneratorParam<std::string> kv_dtype{"kv_dtype", "default"};
    GeneratorParam<std::string> projections{"projections", "none"};
    GeneratorParam<bool> bias{"bias", false};
    GeneratorParam<bool> cross{"cross", false};
    /** The field `sinks`: Halide 21 refuses a generator parameter named like an input. */
    GeneratorParam<bool> sinks{"with_sinks", false};
    /** "out", or "out,lse" for a layer that also writes its rows' log-sum-exp. */
    GeneratorParam<std::string> outputs{"outputs", "out"};
    /** "batched", or "packed" for sequences end to end (the runtime runs each on its own). */
    GeneratorParam<std::string> layout{"layout", "batched"};
    GeneratorParam<std::string> mask{"mask", "none"};
    GeneratorParam<std::string> rope{"rope", "none"};
    GeneratorParam<std::string> rope_theta{"rope_theta", "10000"};
    GeneratorParam<int> rotary_dim{"rotary_dim", 0};
    GeneratorParam<std::string> rope_scaling{"rope_scaling", "none"};
    GeneratorParam<std::string> cache{"cache", "none"};
    GeneratorParam<std::string> cache_dtype{"cache_dtype", "default"};
    /** Alternatively, a .attn file and the layer of it to generate (the keys above unset). */
    GeneratorParam<std::string> spec_file{"spec", ""};
    GeneratorParam<std::string> layer{"layer", ""};
    /** auto (by target), reference, x86, arm or cuda. */
    GeneratorParam<std::string> schedule_name{"schedule", "auto"};
    /** Register blocks of the CPU schedules, "key=value,..." (see schedules/schedule.h). */
    GeneratorParam<std::string> schedule_params{"schedule_params", ""};
    /**
     * A directory of tuned tables (schedules/tuned): without schedule_params, the record for
     * this target, spec and shape class (prefill or decode) is used, and the generator says
     * which, or that there is none and the defaults are used.
     */
    GeneratorParam<std::string> tuned{"tuned", ""};
    GeneratorParam<std::string> shape_class{"shape_class", "prefill"};
    /** Unused by generation: a digest of the tuned tables, so the build regenerates on change. */
    GeneratorParam<std::string> tuned_digest{"tuned_digest", ""};
    /**
     * With one of Halide's autoschedulers instead of attngen's schedules (GenGen's
     * `autoscheduler=NAME`, as `attngen tune` runs its baselines): the call "B,Lq,Lk" it
     * schedules for, every argument's extents following from it.
     */
    GeneratorParam<std::string> estimates{"estimates", ""};

    void configure() {
        static QuietWarnings warnings;
        Halide::set_custom_compile_time_error_reporter(&warnings);
        std::map<std::string, std::string> params;
        if (!std::string(spec_file).empty()) {
            params = {{"spec", spec_file}};
            if (!std::string(layer).empty())
                params["layer"] = layer;
        } else {
            params = {{"model_dim", std::to_string(int(model_dim))},
                      {"heads", std::to_string(int(heads))},
                      {"kv_heads", std::to_string(int(kv_heads))},
                      {"head_dim", std::to_string(int(head_dim))},
                      {"value_dim", std::to_string(int(value_dim))},
                      {"scale", scale},
                      {"dtype", dtype},
                      {"kv_dtype", kv_dtype},
                      {"projections", projections},
                      {"bias", bias ? "true" : "false"},
                      {"cross", cross ? "true" : "false"},
                      {"mask", mask},
                      {"rope", rope},
                      {"rope_theta", rope_theta},
                      {"rotary_dim", std::to_string(int(rotary_dim))},
                      {"rope_scaling", rope_scaling},
                      {"cache", cache},
                      {"cache_dtype", cache_dtype},
                      {"sinks", sinks ? "true" : "false"},
                      {"outputs", outputs},
                      {"layout", layout}};
        }
        LayerSource source = load_layer(params);
        if (!source.spec)
            fail(source.errors);
        spec_ = *source.spec;
        if (!is_schedule_name(schedule_name))
            fail("schedule must be auto, reference, x86, arm or cuda, got '" +
                 std::string(schedule_name) + "'");
        if (!is_shape_class(shape_class))
            fail("shape_class must be prefill or decode, got '" + std::string(shape_class) + "'");

        for (const EntryArgument &arg : layer_arguments(spec_)) {
            const Halide::Type type = argument_type(spec_, arg);
            const int dims = static_cast<int>(arg.dims.size());
            switch (arg.kind) {
            case EntryArgument::Kind::output:
                outputs_[arg.name] = {add_output<Buffer<>>(arg.name, type, dims), arg.dims};
                break;
            case EntryArgument::Kind::scalar:
                scalars_[arg.name] = add_input<Halide::Expr>(arg.name, type);
                break;
            case EntryArgument::Kind::buffer:
                inputs_[arg.name] = {add_input<Buffer<>>(arg.name, type, dims), arg.dims};
                break;
            }
        }
    }

    void generate() {
        // Fixed extents become constraints the schedule can rely on; mins are always 0.
        for (auto &entry : inputs_)
            constrain_argument(*entry.second.first, entry.second.second);

        BoundArguments bound;
        for (auto &entry : inputs_) {
            GeneratorInput<Buffer<>> &input = *entry.second.first;
            bound.buffers[entry.first] = Func(input);
            for (int i = 0; i < input.dimensions(); i++)
                bound.extents[entry.first].push_back(input.dim(i).extent());
        }
        for (const auto &entry : scalars_)
            bound.scalars[entry.first] = *entry.second;
        AttentionInputs in = bind_inputs(spec_, bound);
        if (spec_.cache.any()) {
            in.k_new = *outputs_.at("k_new").first;
            in.v_new = *outputs_.at("v_new").first;
            if (spec_.resolved_cache_dtype() == DType::i8) {
                in.k_new_scales = *outputs_.at("k_new_scales").first;
                in.v_new_scales = *outputs_.at("v_new_scales").first;
            }
        }
        if (spec_.lse_output)
            in.lse = *outputs_.at("lse").first;

        // The schedule's parameters are settled first: the algorithm is written for its tiles.
        schedule_params_ = schedule_params;
        if (schedule_params_.empty() && std::string(schedule_name) != "reference" &&
            !std::string(tuned).empty()) {
            const TunedLookup lookup = find_tuned_params(tuned, get_target(), spec_, shape_class);
            // Quiet by default: a build says which variants are tuned and what went wrong;
            // ATTNGEN_VERBOSE=1 also says why each other variant uses the defaults.
            const std::string said = QuietWarnings::verbose() || lookup.problems ? lookup.message
                                     : lookup.found ? "tuned (" + lookup.params + ")"
                                                    : "";
            // Layers from parameters are all named "attention": the build's line names them.
            const std::string layer_name =
                std::string(spec_file).empty() ? "" : "layer " + spec_.name + ", ";
            if (!said.empty())
                std::printf("attngen: %s%s: %s\n", layer_name.c_str(),
                            get_target().to_string().c_str(), said.c_str());
            schedule_params_ = lookup.params;
        }
        // An autoscheduler gets the algorithm's plain form, as the tuner's JIT baselines do.
        const AlgorithmOptions options = ATTNGEN_GENERATOR_AUTOSCHEDULED()
                                             ? AlgorithmOptions{}
                                             : algorithm_options(spec_, get_target(), schedule_name,
                                                                 schedule_params_, shape_class);
        stages_ = build_attention(spec_, in, *outputs_.at("out").first, options);
        for (auto &entry : outputs_)
            constrain_argument(*entry.second.first, entry.second.second);
        if (ATTNGEN_GENERATOR_AUTOSCHEDULED())
            set_estimates();
    }

    void schedule() {
        if (ATTNGEN_GENERATOR_AUTOSCHEDULED())
            return;
        std::string problem =
            apply_schedule(stages_, get_target(), schedule_name, schedule_params_, shape_class);
        if (!problem.empty())
            fail(problem);
        add_lowering_passes(get_pipeline(), stages_);
    }

  private:
    /** The autoscheduler's estimates: every buffer's extents at the `estimates` call, and 1 for
     *  each scalar. */
    void set_estimates() {
        int shape[3] = {0, 0, 0};
        char end = 0;
        if (std::sscanf(std::string(estimates).c_str(), "%d,%d,%d%c", &shape[0], &shape[1],
                        &shape[2], &end) != 3 ||
            shape[0] < 1 || shape[1] < 1 || shape[2] < 1)
            fail("an autoscheduler needs estimates=B,Lq,Lk (each at least 1), got '" +
                 std::string(estimates) + "'");
        auto region = [&](const std::vector<TensorDim> &dims) {
            Halide::Region r;
            for (const TensorDim &dim : dims) {
                int extent = dim.extent;
                if (dim.symbol == TensorDim::Symbol::batch)
                    extent = shape[0];
                else if (dim.symbol == TensorDim::Symbol::queries)
                    extent = shape[1];
                else if (dim.symbol == TensorDim::Symbol::keys)
                    extent = shape[2];
                r.emplace_back(0, extent);
            }
            return r;
        };
        for (auto &entry : inputs_)
            entry.second.first->set_estimates(region(entry.second.second));
        for (auto &entry : outputs_)
            entry.second.first->set_estimates(region(entry.second.second));
        for (auto &entry : scalars_)
            entry.second->set_estimate(Halide::cast(entry.second->type(), 1));
    }

    /** Stops generation with a message; Halide reports it and the build step fails. */
    [[noreturn]] static void fail(const std::string &message) {
        throw Halide::CompileError("attngen: " + message);
    }

    AttentionSpec spec_;
    AttentionStages stages_;
    std::string schedule_params_; ///< given, or from the tuned tables, or empty: the defaults
    std::map<std::string, std::pair<GeneratorInput<Buffer<>> *, std::vector<TensorDim>>> inputs_;
    std::map<std::string, GeneratorInput<Halide::Expr> *> scalars_;
    std::map<std::string, std::pair<GeneratorOutput<Buffer<>> *, std::vector<TensorDim>>> outputs_;
};

} // namespace attngen

HALIDE_REGISTER_GENERATOR(attngen::AttentionGenerator, attention)
