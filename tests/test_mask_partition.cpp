// The structured masks (causal, window, key padding) are tested only on the blocks of keys they
// cut. The x86 schedule computes a tile's masked scores a block of keys at a time; in the
// lowered code that loop must come in two kinds of copies: one whose stores carry no mask test
// (blocks every query of the tile sees) and one whose stores do (the diagonal, a window's edges,
// the padding boundary). The numerical suite checks that both compute the right values; this
// checks that the split exists, which no timing would notice losing.
#include "dsl/attention_algorithm.h"
#include "dsl/layer_interface.h"
#include "generators/bind_inputs.h"
#include "schedules/schedule.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>

namespace {

using namespace Halide::Internal;

/** Counts the stores into the masked scores, by whether their value holds a select. */
class MaskedStores : public IRVisitor {
public:
    int with_test = 0, without_test = 0;

private:
    using IRVisitor::visit;

    struct FindsSelect : public IRVisitor {
        bool found = false;
        using IRVisitor::visit;
        void visit(const Select *op) override {
            found = true;
            IRVisitor::visit(op);
        }
    };

    void visit(const Store *op) override {
        if (op->name.rfind("masked", 0) == 0) {
            FindsSelect finder;
            op->value.accept(&finder);
            (finder.found ? with_test : without_test)++;
        }
        IRVisitor::visit(op);
    }
};

/** The lowered x86 (AVX2) code of a layer with `mask`, and its masked-score stores counted. */
MaskedStores lower_layer(const std::string &mask, const std::string &schedule_params) {
    std::vector<attngen::SpecError> errors;
    attngen::AttentionSpec spec = attngen::spec_from_params(
        {{"heads", "2"}, {"head_dim", "32"}, {"mask", mask}}, errors);
    REQUIRE(errors.empty());

    attngen::BoundArguments bound;
    for (const attngen::EntryArgument &entry : attngen::layer_arguments(spec))
        if (entry.kind == attngen::EntryArgument::Kind::buffer)
            attngen::bind_image_param(spec, entry, bound);
    const Halide::Target target("x86-64-linux-avx-avx2-f16c-fma-sse41-no_runtime");
    Halide::Func out("out");
    attngen::AttentionStages stages = attngen::build_attention(
        spec, attngen::bind_inputs(spec, bound), out,
        attngen::algorithm_options(spec, target, "x86", schedule_params));
    REQUIRE(attngen::apply_schedule(stages, target, "x86", schedule_params).empty());

    Halide::Module module = out.compile_to_module(out.infer_arguments(), "layer", target);
    MaskedStores stores;
    for (const LoweredFunc &function : module.functions())
        function.body.accept(&stores);
    return stores;
}

} // namespace

TEST_CASE("structured masks are tested only on the blocks of keys they cut") {
    for (const std::string schedule_params : {"", "key_chunk=0"}) {
        for (const std::string mask : {"causal", "window(40)", "padding", "causal+padding"}) {
            INFO("mask " << mask << ", schedule parameters '" << schedule_params << "'");
            const MaskedStores stores = lower_layer(mask, schedule_params);
            CHECK(stores.without_test > 0);
            CHECK(stores.with_test > 0);
        }
    }
    // Without a mask nothing is tested anywhere: the count above means what it says.
    const MaskedStores unmasked = lower_layer("none", "");
    CHECK(unmasked.without_test > 0);
    CHECK(unmasked.with_test == 0);
}
