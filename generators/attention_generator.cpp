// The Halide Generator that binds an attention description, a target and a schedule into a
// library. Its GeneratorParams mirror AttentionSpec field for field; the inputs and outputs it
// declares follow from the spec (DESIGN.md, "Data layout"), and their names are the ones the
// runtime matches arguments by.
#include "dsl/attention_algorithm.h"
#include "dsl/attention_spec.h"
#include "schedules/schedule.h"

#include "Halide.h"

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
        const int dim = spec_.resolved_head_dim();
        const int kv = spec_.resolved_kv_heads();
        const int width = spec_.resolved_model_dim();
        const Projections &proj = spec_.projections;
        if (proj.any()) {
            x_ = add_buffer("x", stored, {width, -1, -1});
            if (spec_.cross_attention)
                context_ = add_buffer("context", stored, {width, -1, -1});
            wq_ = add_buffer("wq", stored, {width, spec_.heads * dim});
            wk_ = add_buffer("wk", stored, {width, kv * dim});
            wv_ = add_buffer("wv", stored, {width, kv * dim});
            if (proj.bias) {
                bq_ = add_buffer("bq", stored, {spec_.heads * dim});
                bk_ = add_buffer("bk", stored, {kv * dim});
                bv_ = add_buffer("bv", stored, {kv * dim});
            }
            if (proj.out) {
                wo_ = add_buffer("wo", stored, {spec_.heads * dim, width});
                if (proj.bias)
                    bo_ = add_buffer("bo", stored, {width});
            }
        } else {
            query_ = add_buffer("query", stored, {dim, -1, spec_.heads, -1});
            key_ = add_buffer("key", stored, {dim, -1, kv, -1});
            value_ = add_buffer("value", stored, {dim, -1, kv, -1});
        }
        if (spec_.mask.key_padding)
            key_lengths_ = add_buffer("key_lengths", Halide::Int(32), {-1});
        if (spec_.mask.additive)
            attn_bias_ = add_buffer("attn_bias", stored, {-1, -1, spec_.heads, -1});

        if (proj.out)
            out_ = add_output<Buffer<>>("out", stored, 3);
        else
            out_ = add_output<Buffer<>>("out", stored, 4);
    }

    void generate() {
        constrain_inputs();
        AttentionInputs in;
        auto func = [](GeneratorInput<Buffer<>> *input) { return input ? Func(*input) : Func(); };
        in.query = func(query_);
        in.key = func(key_);
        in.value = func(value_);
        in.x = func(x_);
        in.context = func(context_);
        in.wq = func(wq_);
        in.wk = func(wk_);
        in.wv = func(wv_);
        in.wo = func(wo_);
        in.bq = func(bq_);
        in.bk = func(bk_);
        in.bv = func(bv_);
        in.bo = func(bo_);
        in.key_lengths = func(key_lengths_);
        in.attn_bias = func(attn_bias_);
        if (spec_.projections.any()) {
            in.query_len = x_->dim(1).extent();
            in.key_len = (spec_.cross_attention ? context_ : x_)->dim(1).extent();
        } else {
            in.query_len = query_->dim(1).extent();
            in.key_len = key_->dim(1).extent();
        }

        stages_ = build_attention(spec_, in, *out_);
        // The output's fixed extents, so the schedule can rely on them.
        if (spec_.projections.out) {
            out_->dim(0).set_bounds(0, spec_.resolved_model_dim());
        } else {
            out_->dim(0).set_bounds(0, spec_.resolved_head_dim());
            out_->dim(2).set_bounds(0, spec_.heads);
        }
        for (int i = 0; i < out_->dimensions(); i++)
            out_->dim(i).set_min(0);
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

    /** Declares a buffer input; a positive extent is fixed at generation time, -1 is free. */
    GeneratorInput<Buffer<>> *add_buffer(const std::string &name, Halide::Type type,
                                         const std::vector<int> &extents) {
        auto *input = add_input<Buffer<>>(name, type, static_cast<int>(extents.size()));
        inputs_.push_back({input, extents});
        return input;
    }

    void constrain_inputs() {
        for (const auto &entry : inputs_)
            for (size_t i = 0; i < entry.second.size(); i++) {
                entry.first->dim(i).set_min(0);
                if (entry.second[i] > 0)
                    entry.first->dim(i).set_extent(entry.second[i]);
            }
    }

    AttentionSpec spec_;
    AttentionStages stages_;
    std::vector<std::pair<GeneratorInput<Buffer<>> *, std::vector<int>>> inputs_;
    GeneratorInput<Buffer<>> *query_ = nullptr, *key_ = nullptr, *value_ = nullptr;
    GeneratorInput<Buffer<>> *x_ = nullptr, *context_ = nullptr;
    GeneratorInput<Buffer<>> *wq_ = nullptr, *wk_ = nullptr, *wv_ = nullptr, *wo_ = nullptr;
    GeneratorInput<Buffer<>> *bq_ = nullptr, *bk_ = nullptr, *bv_ = nullptr, *bo_ = nullptr;
    GeneratorInput<Buffer<>> *key_lengths_ = nullptr, *attn_bias_ = nullptr;
    GeneratorOutput<Buffer<>> *out_ = nullptr;
};

} // namespace attngen

HALIDE_REGISTER_GENERATOR(attngen::AttentionGenerator, attention)
