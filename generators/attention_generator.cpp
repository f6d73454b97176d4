// The Halide Generator that binds an attention description, a target and a schedule into a
// library. Its GeneratorParams mirror AttentionSpec field for field; the inputs and outputs it
// declares follow from the spec (DESIGN.md, "Data layout"), and their names are the ones the
// runtime matches arguments by.
#include "dsl/attention_algorithm.h"
#include "dsl/attention_spec.h"
#include "dsl/layer_interface.h"
#include "schedules/schedule.h"

#include "Halide.h"

#include <map>

namespace attngen {

using Halide::Buffer;
using Halide::Func;
using Halide::GeneratorInput;
using Halide::GeneratorOutput;

class AttentionGenerator : public Halide::Generator<AttentionGenerator> {
public:
    GeneratorParam<int> model_dim{"model_dim", 0};
    GeneratorParam<int> heads{"heads", 1};
    GeneratorParam<int> kv_heads{"kv_heads", 0};
    GeneratorParam<int> head_dim{"head_dim", 0};
    GeneratorParam<std::string> scale{"scale", "default"};
    GeneratorParam<std::string> dtype{"dtype", "f32"};
    GeneratorParam<std::string> projections{"projections", "none"};
    GeneratorParam<bool> bias{"bias", false};
    GeneratorParam<bool> cross{"cross", false};
    GeneratorParam<std::string> mask{"mask", "none"};
    /** auto (by target), reference or x86. */
    GeneratorParam<std::string> schedule_name{"schedule", "auto"};

    void configure() {
        std::vector<SpecError> errors;
        spec_ = spec_from_params({{"model_dim", std::to_string(int(model_dim))},
                                  {"heads", std::to_string(int(heads))},
                                  {"kv_heads", std::to_string(int(kv_heads))},
                                  {"head_dim", std::to_string(int(head_dim))},
                                  {"scale", scale},
                                  {"dtype", dtype},
                                  {"projections", projections},
                                  {"bias", bias ? "true" : "false"},
                                  {"cross", cross ? "true" : "false"},
                                  {"mask", mask}},
                                 errors);
        if (errors.empty())
            errors = check_spec(spec_);
        if (!errors.empty())
            fail("invalid attention layer:\n" + describe_errors(errors));
        if (!is_schedule_name(schedule_name))
            fail("schedule must be auto, reference or x86, got '" +
                 std::string(schedule_name) + "'");

        const Halide::Type stored = storage_type(spec_.dtype);
        for (const BufferArgument &arg : layer_arguments(spec_)) {
            const Halide::Type type = arg.is_int32 ? Halide::Int(32) : stored;
            const int dims = static_cast<int>(arg.extents.size());
            if (arg.is_output) {
                out_ = add_output<Buffer<>>(arg.name, type, dims);
                out_extents_ = arg.extents;
                continue;
            }
            inputs_[arg.name] = {add_input<Buffer<>>(arg.name, type, dims), arg.extents};
        }
    }

    void generate() {
        // Fixed extents become constraints the schedule can rely on; mins are always 0.
        for (auto &entry : inputs_)
            constrain(*entry.second.first, entry.second.second);

        AttentionInputs in;
        in.query = input("query");
        in.key = input("key");
        in.value = input("value");
        in.x = input("x");
        in.context = input("context");
        in.wq = input("wq");
        in.wk = input("wk");
        in.wv = input("wv");
        in.wo = input("wo");
        in.bq = input("bq");
        in.bk = input("bk");
        in.bv = input("bv");
        in.bo = input("bo");
        in.key_lengths = input("key_lengths");
        in.attn_bias = input("attn_bias");
        const char *queries = spec_.projections.any() ? "x" : "query";
        const char *keys = spec_.projections.any() ? (spec_.cross_attention ? "context" : "x")
                                                   : "key";
        in.query_len = inputs_.at(queries).first->dim(1).extent();
        in.key_len = inputs_.at(keys).first->dim(1).extent();

        stages_ = build_attention(spec_, in, *out_);
        constrain(*out_, out_extents_);
    }

    void schedule() {
        std::string problem = apply_schedule(stages_, get_target(), schedule_name);
        if (!problem.empty())
            fail(problem);
    }

private:
    /** Stops generation with a message; Halide reports it and the build step fails. */
    [[noreturn]] static void fail(const std::string &message) {
        throw Halide::CompileError("attngen: " + message);
    }

    /** The input's Func, or an undefined Func when the spec has no such input. */
    Func input(const std::string &name) const {
        auto found = inputs_.find(name);
        return found == inputs_.end() ? Func() : Func(*found->second.first);
    }

    template <typename Argument>
    static void constrain(Argument &argument, const std::vector<int> &extents) {
        for (size_t i = 0; i < extents.size(); i++) {
            argument.dim(i).set_min(0);
            if (extents[i] > 0)
                argument.dim(i).set_extent(extents[i]);
        }
    }

    AttentionSpec spec_;
    AttentionStages stages_;
    std::map<std::string, std::pair<GeneratorInput<Buffer<>> *, std::vector<int>>> inputs_;
    GeneratorOutput<Buffer<>> *out_ = nullptr;
    std::vector<int> out_extents_;
};

} // namespace attngen

HALIDE_REGISTER_GENERATOR(attngen::AttentionGenerator, attention)
