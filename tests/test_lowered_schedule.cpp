// What the x86 schedule's lowered code must look like, which no timing would notice losing and
// the numerical suite cannot see (it checks that every copy computes the right values):
// - The structured masks (causal, window, key padding) are tested only on the blocks of keys
//   they cut. A tile's masked scores are computed a block of keys at a time; that loop must come
//   in two kinds of copies: one whose stores carry no mask test (blocks every query of the tile
//   sees) and one whose stores do (the diagonal, a window's edges, the padding boundary).
// - With a causal, window or padding mask, P·V's loop over keys is bounded per register block
//   of queries (r_values), not per tile, where the blocks tile the tile from its start.
// - Grouped-query heads share each K/V chunk: inside a tile the loop over the flash chunks runs
//   outside the loop over the kv head's group of query heads, which computes the scores.
#include "dsl/attention_algorithm.h"
#include "dsl/layer_interface.h"
#include "generators/bind_inputs.h"
#include "schedules/schedule.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

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

/** The lowered x86 (AVX2) code of a layer with the spec parameters `params`. */
std::vector<Stmt> lower_layer(const std::map<std::string, std::string> &params,
                              const std::string &schedule_params) {
    std::vector<attngen::SpecError> errors;
    attngen::AttentionSpec spec = attngen::spec_from_params(params, errors);
    REQUIRE(errors.empty());

    attngen::BoundArguments bound;
    for (const attngen::EntryArgument &entry : attngen::layer_arguments(spec))
        if (entry.kind == attngen::EntryArgument::Kind::buffer)
            attngen::bind_image_param(spec, entry, bound);
    const Halide::Target target("x86-64-linux-avx-avx2-f16c-fma-sse41-no_runtime");
    Halide::Func out("out");
    attngen::AttentionStages stages =
        attngen::build_attention(spec, attngen::bind_inputs(spec, bound), out,
                                 attngen::algorithm_options(spec, target, "x86", schedule_params));
    REQUIRE(attngen::apply_schedule(stages, target, "x86", schedule_params).empty());

    Halide::Module module = out.compile_to_module(out.infer_arguments(), "layer", target);
    std::vector<Stmt> bodies;
    for (const LoweredFunc &function : module.functions())
        bodies.push_back(function.body);
    return bodies;
}

/** The masked-score stores of a layer with `mask`, counted. */
MaskedStores masked_stores(const std::string &mask, const std::string &schedule_params) {
    MaskedStores stores;
    for (const Stmt &body :
         lower_layer({{"heads", "2"}, {"head_dim", "32"}, {"mask", mask}}, schedule_params))
        body.accept(&stores);
    return stores;
}

/** Counts the loops whose name holds `part`. */
class LoopsNamed : public IRVisitor {
  public:
    explicit LoopsNamed(std::string part) : part_(std::move(part)) {}
    int count = 0;

  private:
    using IRVisitor::visit;
    std::string part_;

    void visit(const For *op) override {
        count += op->name.find(part_) != std::string::npos;
        IRVisitor::visit(op);
    }
};

/**
 * Finds the stores into the scores made inside a loop over the flash chunks (partials' j) and,
 * within it, a loop over query heads (partials' h), and records that loop's extent.
 */
class ChunkThenHeads : public IRVisitor {
  public:
    int stores_inside = 0;
    std::vector<int> head_extents;

  private:
    using IRVisitor::visit;
    bool in_chunk = false, in_heads = false;

    static bool is_loop(const For *op, const std::string &var) {
        return op->name.rfind("partials", 0) == 0 &&
               op->name.find(".s0." + var) != std::string::npos;
    }

    void visit(const For *op) override {
        const bool chunk = is_loop(op, "j"), heads = in_chunk && is_loop(op, "h");
        if (heads) {
            const auto *extent = op->extent.as<IntImm>();
            head_extents.push_back(extent ? static_cast<int>(extent->value) : -1);
        }
        const bool was_chunk = in_chunk, was_heads = in_heads;
        in_chunk = in_chunk || chunk;
        in_heads = in_heads || heads;
        IRVisitor::visit(op);
        in_chunk = was_chunk;
        in_heads = was_heads;
    }

    void visit(const Store *op) override {
        if (in_heads && op->name.rfind("scores", 0) == 0)
            stores_inside++;
        IRVisitor::visit(op);
    }
};

} // namespace

TEST_CASE("structured masks are tested only on the blocks of keys they cut") {
    for (const std::string schedule_params : {"", "key_chunk=0"}) {
        for (const std::string mask : {"causal", "window(40)", "padding", "causal+padding"}) {
            INFO("mask " << mask << ", schedule parameters '" << schedule_params << "'");
            const MaskedStores stores = masked_stores(mask, schedule_params);
            CHECK(stores.without_test > 0);
            CHECK(stores.with_test > 0);
        }
    }
    // Without a mask nothing is tested anywhere: the count above means what it says.
    const MaskedStores unmasked = masked_stores("none", "");
    CHECK(unmasked.without_test > 0);
    CHECK(unmasked.with_test == 0);
}

TEST_CASE("the query heads of a group share each K/V chunk of the flash form") {
    for (const auto &[heads, kv_heads] :
         {std::pair{"4", "2"}, std::pair{"6", "2"}, std::pair{"4", "1"}}) {
        for (const std::string mask : {"none", "causal"}) {
            INFO(heads << " heads, " << kv_heads << " kv heads, mask " << mask);
            ChunkThenHeads nest;
            for (const Stmt &body : lower_layer(
                     {{"heads", heads}, {"kv_heads", kv_heads}, {"head_dim", "32"}, {"mask", mask}},
                     "key_chunk=64"))
                body.accept(&nest);
            CHECK(nest.stores_inside > 0);
            const int group = std::stoi(heads) / std::stoi(kv_heads);
            CHECK(nest.head_extents == std::vector<int>{group});
        }
    }
}

TEST_CASE("with a structured mask, each P·V block visits its own keys") {
    auto value_loops = [](const std::string &mask, const std::string &schedule_params) {
        LoopsNamed loops(".s1.r_values");
        for (const Stmt &body :
             lower_layer({{"heads", "2"}, {"head_dim", "32"}, {"mask", mask}}, schedule_params))
            body.accept(&loops);
        return loops.count;
    };
    // AVX2: 8 lanes; query tiles of 16 or 24 queries.
    for (const std::string schedule_params :
         {"query_vectors=2,query_block=4", "query_vectors=3,query_block=6,key_chunk=0"}) {
        for (const std::string mask : {"causal", "window(40)", "padding"}) {
            INFO("mask " << mask << ", schedule parameters '" << schedule_params << "'");
            CHECK(value_loops(mask, schedule_params) > 0);
        }
        INFO("no mask, schedule parameters '" << schedule_params << "'");
        CHECK(value_loops("none", schedule_params) == 0);
    }
    // Blocks of 5 do not tile a 16-query tile from its start: the tile's bounds serve.
    CHECK(value_loops("causal", "query_vectors=2,query_block=5") == 0);
}
