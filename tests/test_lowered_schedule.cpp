// What the x86 schedule's lowered code must look like, which no timing would notice losing and
// the numerical suite cannot see (it checks that every copy computes the right values):
// - The structured masks (causal, window, key padding) are tested only on the blocks of keys
//   they cut. A tile's masked scores are computed a block of keys at a time; that loop must come
//   in two kinds of copies: one whose stores carry no mask test (blocks every query of the tile
//   sees) and one whose stores do (the diagonal, a window's edges, the padding boundary).
// - With a causal, window or padding mask, P·V's loop over keys is bounded per register block
//   of queries (r_values), not per tile, where the blocks tile the tile from its start.
// - Grouped-query heads share each K/V chunk: inside a tile the loop over the flash chunks runs
//   outside the loop over the kv head's group of query heads, which computes the scores; with
//   task_tiles, outside the loop over the task's query tiles too.
// - On AVX-512 the split-KV P·V sums each block of keys in a register tile (a constant-size
//   intermediate) over a loop of blocks; on AVX2 it keeps one loop over the keys.
// - The GPU schedule's blocks ask for no more shared memory than attngen checks against the
//   48 KiB a CUDA block may use, and stage, score and fold no step past a tile's last key; the
//   scores of a step keep every lane of the warp busy, decode's one query row included.
#include "dsl/attention_algorithm.h"
#include "dsl/halide_compat.h"
#include "dsl/layer_interface.h"
#include "generators/bind_inputs.h"
#include "schedules/schedule.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace Halide::Internal;
using Halide::Expr;

/**
 * An IRVisitor that knows the values of the LetStmts around it, so that a condition or a loop
 * extent can be read whole: Halide 21 lifts them into lets (t123, weighted_sum.loaded) where
 * Halide 14 left them in place. The buffers' fields (key.extent.1) stay as they are.
 */
class LetsInScope : public IRVisitor {
  protected:
    using IRVisitor::visit;
    std::map<std::string, Expr> lets_;

    void visit(const LetStmt *op) override {
        const auto *call = op->value.as<Call>();
        if (call != nullptr && call->name.rfind("_halide_buffer_get", 0) == 0) {
            IRVisitor::visit(op);
            return;
        }
        const auto outer = lets_.find(op->name);
        const std::optional<Expr> shadowed =
            outer == lets_.end() ? std::nullopt : std::optional<Expr>(outer->second);
        lets_[op->name] = op->value;
        IRVisitor::visit(op);
        if (shadowed)
            lets_[op->name] = *shadowed;
        else
            lets_.erase(op->name);
    }

    Expr resolved(const Expr &e) const { return resolve(lets_, e); }

  public:
    /** `e` with `lets` substituted, transitively, and simplified. */
    static Expr resolve(const std::map<std::string, Expr> &lets, Expr e) {
        for (int depth = 0; depth < 16; depth++) {
            Expr next = substitute(lets, e);
            if (equal(next, e))
                break;
            e = next;
        }
        return simplify(e);
    }
};

/**
 * Counts the stores into Funcs whose name starts with `prefix` that can run where `assumed`
 * holds: a branch whose condition (read with `lets`, those of the function that launched the
 * code) contradicts it is skipped. Halide 21 computes a Func used on one side of a specialization
 * under a flag (weighted_sum$1.loaded) that parallel tasks read from their closure.
 */
class StoresUnder : public IRVisitor {
  public:
    StoresUnder(std::string prefix, Expr assumed, std::map<std::string, Expr> lets)
        : prefix_(std::move(prefix)), assumed_(std::move(assumed)), lets_(std::move(lets)) {}
    int count = 0;

  private:
    using IRVisitor::visit;
    std::string prefix_;
    Expr assumed_;
    std::map<std::string, Expr> lets_;

    void visit(const Store *op) override {
        count += op->name.rfind(prefix_, 0) == 0;
        IRVisitor::visit(op);
    }

    void visit(const IfThenElse *op) override {
        const Expr condition = LetsInScope::resolve(lets_, op->condition);
        if (!can_prove(!assumed_ || !condition))
            op->then_case.accept(this);
        if (op->else_case.defined() && !can_prove(!assumed_ || condition))
            op->else_case.accept(this);
    }
};

/**
 * Counts the stores into the masked scores, by whether their value tests the mask: a select, or
 * the bitwise and that replaces a hidden score's bits (where the select was lifted out).
 */
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
        void visit(const Call *op) override {
            found = found || op->is_intrinsic(Call::bitwise_and);
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

/**
 * The dynamic shared memory of each CUDA kernel launch (halide_cuda_run's bytes argument) in
 * the code visited, for sequences of `length` queries and keys: the lets it sits in are
 * substituted, the buffers' extents along the sequence (dimension 1) set to `length`. What
 * depends on anything else does not simplify to a constant.
 */
class SharedMemoryOfLaunches : public IRVisitor {
  public:
    explicit SharedMemoryOfLaunches(int length) : length_(length) {}
    std::vector<Expr> bytes;

  private:
    using IRVisitor::visit;

    void let(const std::string &name, const Expr &value) {
        const std::string sequence = ".extent.1";
        const bool is_sequence =
            name.size() > sequence.size() &&
            name.compare(name.size() - sequence.size(), sequence.size(), sequence) == 0;
        lets_[name] = is_sequence ? Expr(length_) : value;
    }
    void visit(const LetStmt *op) override {
        let(op->name, op->value);
        IRVisitor::visit(op);
    }
    void visit(const Let *op) override {
        let(op->name, op->value);
        IRVisitor::visit(op);
    }
    /** `e` with the lets substituted, simplified. */
    Expr resolve(Expr e) {
        for (int round = 0; round < 100; round++) {
            Expr substituted = substitute(lets_, e);
            if (equal(substituted, e))
                break;
            e = substituted;
        }
        return simplify(e);
    }

    void visit(const Call *op) override {
        if (op->name == "halide_cuda_run" && op->args.size() > 8)
            bytes.push_back(resolve(op->args[8]));
        IRVisitor::visit(op);
    }

    int length_;
    std::map<std::string, Expr> lets_;
};

/** The spec of the spec parameters `params`, which must be valid. */
attngen::AttentionSpec spec_of(const std::map<std::string, std::string> &params) {
    std::vector<attngen::SpecError> errors;
    attngen::AttentionSpec spec = attngen::spec_from_params(params, errors);
    REQUIRE(errors.empty());
    return spec;
}

/**
 * A lowering pass that keeps the statement it is given (the whole pipeline, GPU kernels still
 * inline) and changes nothing.
 */
class KeepLowered : public IRMutator {
  public:
    Stmt kept;
    using IRMutator::mutate;
    Stmt mutate(const Stmt &stmt) override {
        if (!kept.defined())
            kept = stmt;
        return stmt;
    }
};

/**
 * The lowered functions, by name, of a layer with the spec parameters `params` for `target`
 * and schedule `schedule` (x86 code for AVX2 by default), for prefill shapes.
 */
std::map<std::string, Stmt> lower_layer_functions(
    const std::map<std::string, std::string> &params, const std::string &schedule_params,
    const Halide::Target &target = Halide::Target("x86-64-linux-avx-avx2-f16c-fma-sse41-"
                                                  "no_runtime"),
    const std::string &schedule = "x86", KeepLowered *keep = nullptr) {
    const attngen::AttentionSpec spec = spec_of(params);
    attngen::BoundArguments bound;
    for (const attngen::EntryArgument &entry : attngen::layer_arguments(spec)) {
        if (entry.kind == attngen::EntryArgument::Kind::buffer)
            attngen::bind_image_param(spec, entry, bound);
        if (entry.kind == attngen::EntryArgument::Kind::scalar) {
            const Halide::Type type = attngen::argument_type(spec, entry);
            bound.scalars[entry.name] = Variable::make(
                type, entry.name, attngen::halide_compat::Parameter(type, false, 0, entry.name));
        }
    }
    // The pipeline's outputs: out, and a cached layer's new rows (and an i8 cache's new rows'
    // scales), as the generator makes them.
    std::map<std::string, Halide::Func> outputs{{"out", Halide::Func("out")}};
    attngen::AttentionInputs in = attngen::bind_inputs(spec, bound);
    if (spec.cache.any()) {
        in.k_new = outputs["k_new"] = Halide::Func("k_new");
        in.v_new = outputs["v_new"] = Halide::Func("v_new");
        if (spec.resolved_cache_dtype() == attngen::DType::i8) {
            in.k_new_scales = outputs["k_new_scales"] = Halide::Func("k_new_scales");
            in.v_new_scales = outputs["v_new_scales"] = Halide::Func("v_new_scales");
        }
    }
    attngen::AttentionStages stages = attngen::build_attention(
        spec, in, outputs.at("out"),
        attngen::algorithm_options(spec, target, schedule, schedule_params));
    REQUIRE(attngen::apply_schedule(stages, target, schedule, schedule_params).empty());
    // The outputs' fixed extents, as the generator constrains them.
    for (const attngen::EntryArgument &entry : attngen::layer_arguments(spec))
        if (entry.kind == attngen::EntryArgument::Kind::output) {
            Halide::OutputImageParam output = outputs.at(entry.name).output_buffer();
            attngen::constrain_argument(output, entry.dims);
        }

    std::vector<Halide::Func> funcs;
    for (const auto &entry : outputs)
        funcs.push_back(entry.second);
    Halide::Pipeline pipeline(funcs);
    attngen::add_lowering_passes(pipeline, stages);
    if (keep != nullptr)
        pipeline.add_custom_lowering_pass(keep, [] {}); // the caller owns it
    Halide::Module module = pipeline.compile_to_module(pipeline.infer_arguments(), "layer", target);
    std::map<std::string, Stmt> functions;
    for (const LoweredFunc &function : module.functions())
        functions[function.name] = function.body;
    return functions;
}

/**
 * For each loop over the online form's steps (running's r_online.z), whether its body is one
 * test of the step alone with every stage of the step inside it: a step the test rejects then
 * stages, scores and folds nothing.
 */
class StepsInsideTheirTest : public IRVisitor {
  public:
    int loops = 0, guarded = 0;

  private:
    using IRVisitor::visit;

    /** Counts the productions in a statement. */
    struct Productions : public IRVisitor {
        int count = 0;
        using IRVisitor::visit;
        void visit(const ProducerConsumer *op) override {
            count += op->is_producer;
            IRVisitor::visit(op);
        }
    };

    void visit(const For *op) override {
        const std::string suffix = "r_online$z";
        const bool steps =
            op->name.rfind("running", 0) == 0 && op->name.size() > suffix.size() &&
            op->name.compare(op->name.size() - suffix.size(), suffix.size(), suffix) == 0;
        if (steps) {
            loops++;
            // The outermost test in the body that names the step must hold every production of
            // the body.
            struct OutermostTest : public LetsInScope {
                std::string var;
                const IfThenElse *found = nullptr;
                using LetsInScope::visit;
                void visit(const IfThenElse *test) override {
                    if (found == nullptr && expr_uses_var(resolved(test->condition), var))
                        found = test;
                    else if (found == nullptr)
                        IRVisitor::visit(test);
                }
            } outermost;
            outermost.var = op->name;
            op->body.accept(&outermost);
            if (outermost.found != nullptr) {
                Productions inside, all;
                outermost.found->then_case.accept(&inside);
                op->body.accept(&all);
                guarded += !outermost.found->else_case.defined() && inside.count == all.count &&
                           inside.count > 0;
            }
        }
        IRVisitor::visit(op);
    }
};

/** The targets the tests lower for, without a runtime (the layer's own code alone). */
const Halide::Target avx512("x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41-"
                            "no_runtime");
const Halide::Target avx2("x86-64-linux-avx-avx2-f16c-fma-sse41-no_runtime");
const Halide::Target sse41("x86-64-linux-sse41-no_runtime");
const Halide::Target arm("arm-64-linux-no_runtime");

/** The bodies of lower_layer_functions. */
std::vector<Stmt>
lower_layer(const std::map<std::string, std::string> &params, const std::string &schedule_params,
            const Halide::Target &target = Halide::Target("x86-64-linux-avx-avx2-f16c-fma-sse41-"
                                                          "no_runtime"),
            const std::string &schedule = "x86") {
    std::vector<Stmt> bodies;
    for (const auto &[name, body] :
         lower_layer_functions(params, schedule_params, target, schedule))
        bodies.push_back(body);
    return bodies;
}

/** The names of the functions that halide_do_par_for calls in `stmt`. */
class ParallelTasks : public IRVisitor {
  public:
    std::vector<std::string> names;

  private:
    using IRVisitor::visit;

    void visit(const Call *op) override {
        if (op->name == "halide_do_par_for" && !op->args.empty()) {
            std::ostringstream printed;
            printed << op->args[0];
            const std::string text = printed.str();
            const size_t scope = text.rfind("::");
            names.push_back(scope == std::string::npos ? text : text.substr(scope + 2));
        }
        IRVisitor::visit(op);
    }
};

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
    std::set<int64_t> constant_extents; ///< of the loops found whose extent is a constant

  private:
    using IRVisitor::visit;
    std::string part_;

    void visit(const For *op) override {
        if (op->name.find(part_) != std::string::npos) {
            count++;
            if (const std::optional<int64_t> extent =
                    attngen::halide_compat::constant_int(op->extent))
                constant_extents.insert(*extent);
        }
        IRVisitor::visit(op);
    }
};

/**
 * Finds the stores into the scores made inside a loop over the flash chunks (partials' j) and,
 * within it, a loop over query heads (partials' h), and records that loop's extent.
 */
class ChunkThenHeads : public LetsInScope {
  public:
    int stores_inside = 0;
    std::vector<int> head_extents;
    /// The loops over a task's query tiles (task_tiles > 1) inside the chunk loop, and how many
    /// of the head loops run inside one.
    std::vector<int> tile_extents;
    int heads_inside_tiles = 0;

  private:
    using LetsInScope::visit;
    bool in_chunk = false, in_tiles = false, in_heads = false;

    static bool is_loop(const For *op, const std::string &var) {
        return op->name.rfind("partials", 0) == 0 &&
               op->name.find(".s0." + var) != std::string::npos;
    }

    int extent(const For *op) {
        const Expr extent_expr = resolved(op->extent);
        const auto *value = extent_expr.as<IntImm>();
        return value ? static_cast<int>(value->value) : -1;
    }

    void visit(const For *op) override {
        const bool chunk = is_loop(op, "j"), heads = in_chunk && is_loop(op, "h");
        const bool tiles = in_chunk && is_loop(op, "q.p_tile");
        if (heads) {
            head_extents.push_back(extent(op));
            heads_inside_tiles += in_tiles ? 1 : 0;
        }
        if (tiles)
            tile_extents.push_back(extent(op));
        const bool was_chunk = in_chunk, was_tiles = in_tiles, was_heads = in_heads;
        in_chunk = in_chunk || chunk;
        in_tiles = in_tiles || tiles;
        in_heads = in_heads || heads;
        IRVisitor::visit(op);
        in_chunk = was_chunk;
        in_tiles = was_tiles;
        in_heads = was_heads;
    }

    void visit(const Store *op) override {
        if (in_heads && op->name.rfind("scores", 0) == 0)
            stores_inside++;
        IRVisitor::visit(op);
    }
};

/** The allocations whose name holds `part`, and how many of them have a constant size. */
class AllocationsNamed : public IRVisitor {
  public:
    explicit AllocationsNamed(std::string part) : part_(std::move(part)) {}
    int count = 0, constant = 0;

  private:
    using IRVisitor::visit;
    std::string part_;

    void visit(const Allocate *op) override {
        if (op->name.find(part_) != std::string::npos) {
            count++;
            constant += op->constant_allocation_size() > 0;
        }
        IRVisitor::visit(op);
    }
};

/**
 * Counts the stores into Funcs whose name starts with `prefix`; with `predicated`, only those
 * that carry a vector predicate (lanes masked off one by one).
 */
class StoresInto : public IRVisitor {
  public:
    explicit StoresInto(std::string prefix, bool predicated = false)
        : prefix_(std::move(prefix)), predicated_(predicated) {}
    int count = 0;

  private:
    using IRVisitor::visit;
    std::string prefix_;
    bool predicated_;

    void visit(const Store *op) override {
        count += op->name.rfind(prefix_, 0) == 0 && (!predicated_ || !is_const_one(op->predicate));
        IRVisitor::visit(op);
    }
};

/**
 * Finds the branches on `condition` (as printed) in `functions`, the lowered functions by name,
 * between the forms, and counts, on each side, the stores into the masked scores and into the
 * flash form's partials: in the branch and in the parallel tasks it launches.
 */
class FormBranches : public LetsInScope {
  public:
    FormBranches(std::string condition, std::map<std::string, Stmt> functions)
        : condition_(std::move(condition)), functions_(std::move(functions)) {}
    int branches = 0;
    int then_masked = 0, then_partials = 0, else_masked = 0, else_partials = 0;

  private:
    using LetsInScope::visit;
    std::string condition_;
    std::map<std::string, Stmt> functions_;

    int stores(const Stmt &stmt, const std::string &prefix, const Expr &assumed) {
        if (!stmt.defined())
            return 0;
        StoresUnder counter(prefix, assumed, lets_);
        stmt.accept(&counter);
        ParallelTasks tasks;
        stmt.accept(&tasks);
        for (const std::string &name : tasks.names)
            if (auto found = functions_.find(name); found != functions_.end())
                found->second.accept(&counter);
        return counter.count;
    }

    void visit(const IfThenElse *op) override {
        std::ostringstream printed;
        const Expr condition = resolved(op->condition);
        printed << condition;
        if (printed.str() == condition_) {
            const int counts[] = {stores(op->then_case, "masked", condition),
                                  stores(op->then_case, "partials", condition),
                                  stores(op->else_case, "masked", !condition),
                                  stores(op->else_case, "partials", !condition)};
            // A branch around something else, such as one form's copy of V, is not counted.
            if (counts[0] + counts[1] + counts[2] + counts[3] > 0) {
                branches++;
                then_masked += counts[0];
                then_partials += counts[1];
                else_masked += counts[2];
                else_partials += counts[3];
            }
        }
        IRVisitor::visit(op);
    }
};

/** FormBranches on `condition` over the lowered functions of a layer (lower_layer_functions). */
FormBranches form_branches(const std::map<std::string, std::string> &params,
                           const std::string &schedule_params, const std::string &condition) {
    const std::map<std::string, Stmt> functions = lower_layer_functions(params, schedule_params);
    FormBranches branches(condition, functions);
    for (const auto &[name, body] : functions)
        body.accept(&branches);
    return branches;
}

} // namespace

TEST_CASE("with rows_up_to, a call runs whole rows or chunks by its key length") {
    for (const std::string mask : {"none", "causal"}) {
        INFO("mask " << mask);
        const FormBranches branches =
            form_branches({{"heads", "2"}, {"head_dim", "32"}, {"mask", mask}},
                          "flash_chunk=64,rows_up_to=300", "(key.extent.1 <= 300)");
        // One branch: whole rows (masked scores, no partials) up to 300 keys, chunks beyond.
        CHECK(branches.branches == 1);
        CHECK(branches.then_masked > 0);
        CHECK(branches.then_partials == 0);
        CHECK(branches.else_masked > 0);
        CHECK(branches.else_partials > 0);
    }
}

TEST_CASE("x86 layers walk whole rows up to 1024 keys (AVX2) unless a chunk is named") {
    auto count = [](const std::string &schedule_params) {
        return form_branches({{"heads", "2"}, {"head_dim", "32"}}, schedule_params,
                             "(key.extent.1 <= 1024)");
    };
    const FormBranches defaults = count("");
    CHECK(defaults.branches == 1);
    CHECK(defaults.then_partials == 0);
    CHECK(defaults.else_partials > 0);
    // flash_chunk named alone: chunks at every length, no branch.
    CHECK(count("flash_chunk=64").branches == 0);
    CHECK(count("flash_chunk=64,rows_up_to=1024").branches == 1);
    CHECK(count("rows_up_to=0").branches == 0);
}

TEST_CASE("structured masks are tested only on the blocks of keys they cut") {
    for (const std::string schedule_params : {"", "flash_chunk=0"}) {
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
                     "flash_chunk=64"))
                body.accept(&nest);
            CHECK(nest.stores_inside > 0);
            const int group = std::stoi(heads) / std::stoi(kv_heads);
            // Halide 21 may keep a second copy of the chunk's body (the last, partial chunk).
            REQUIRE(!nest.head_extents.empty());
            for (int extent : nest.head_extents)
                CHECK(extent == group);
        }
    }
}

TEST_CASE("the query tiles of a flash task share each K/V chunk (task_tiles)") {
    for (const std::string mask : {"none", "causal"}) {
        INFO("mask " << mask);
        ChunkThenHeads nest;
        for (const Stmt &body :
             lower_layer({{"heads", "4"}, {"kv_heads", "2"}, {"head_dim", "32"}, {"mask", mask}},
                         "flash_chunk=64,task_tiles=3"))
            body.accept(&nest);
        CHECK(nest.stores_inside > 0);
        // Inside each chunk: the task's 3 tiles, and in each the group's 2 heads.
        REQUIRE(!nest.tile_extents.empty());
        for (int extent : nest.tile_extents)
            CHECK(extent == 3);
        REQUIRE(!nest.head_extents.empty());
        CHECK(nest.heads_inside_tiles == static_cast<int>(nest.head_extents.size()));
        for (int extent : nest.head_extents)
            CHECK(extent == 2);
    }
}

TEST_CASE("compile and tune start from the same CPU defaults, which follow the dtype") {
    // `attngen tune` seeds its search and measures its "defaults" trial with
    // cpu_schedule_params; compile resolves an empty parameter list to the same values.
    const std::map<std::string, std::string> mha = {
        {"model_dim", "64"}, {"heads", "4"}, {"projections", "q,k,v,out"}};
    std::map<std::string, std::string> mha_f16 = mha;
    mha_f16["dtype"] = "f16";
    std::map<std::string, std::string> mha_bf16 = mha;
    mha_bf16["dtype"] = "bf16";
    // f32 reads the weights in place on x86; f16 and bf16 pack them (one conversion each), and
    // so does ARM.
    CHECK_FALSE(attngen::cpu_schedule_params(spec_of(mha), avx2, "prefill").packed_weights);
    CHECK(attngen::cpu_schedule_params(spec_of(mha_f16), avx2, "prefill").packed_weights);
    CHECK(attngen::cpu_schedule_params(spec_of(mha_bf16), avx2, "prefill").packed_weights);
    CHECK(attngen::cpu_schedule_params(spec_of(mha), arm, "prefill").packed_weights);
    // The register blocks are the target's, the chunks the shape class's.
    const attngen::CpuScheduleParams f32 =
        attngen::cpu_schedule_params(spec_of(mha), avx2, "prefill");
    const attngen::CpuScheduleParams target = attngen::cpu_target_params(avx2);
    CHECK(f32.query_vectors == target.query_vectors);
    CHECK(f32.gemm_row_vectors == target.gemm_row_vectors);
    CHECK(f32.flash_chunk == target.flash_chunk);
    CHECK(f32.flash_chunk > 0);
    CHECK(f32.split_chunk == 0);
    const attngen::CpuScheduleParams decode =
        attngen::cpu_schedule_params(spec_of(mha), avx2, "decode");
    CHECK(decode.split_chunk == attngen::cpu_decode_split_chunk);
    // The reference docs say so too (attngen params).
    const attngen::ScheduleParam *split =
        attngen::find_schedule_param(attngen::ScheduleFamily::cpu, "split_chunk");
    CHECK(std::string(split->default_rule) ==
          std::to_string(attngen::cpu_decode_split_chunk) + " for decode shapes");
    CHECK(decode.flash_chunk == 0);
}

TEST_CASE("V is copied aligned in the forms that copy_values names") {
    auto layer = [](const std::string &head_dim, const std::string &dtype) {
        return std::map<std::string, std::string>{
            {"heads", "4"}, {"head_dim", head_dim}, {"dtype", dtype}, {"mask", "causal"}};
    };
    // The defaults: in place for 16-lane f32 code at head_dim <= 64, copied for the flash form
    // only at larger head_dim there, and in both forms otherwise.
    using attngen::CopyValues;
    constexpr CopyValues none = CopyValues::none, flash = CopyValues::flash, all = CopyValues::all;
    struct Case {
        std::string head_dim, dtype;
        Halide::Target target;
        attngen::CopyValues copy_values;
    };
    for (const Case &c : {Case{"64", "f32", avx512, none}, Case{"32", "f32", avx512, none},
                          Case{"128", "f32", avx512, flash}, Case{"64", "f16", avx512, all},
                          Case{"64", "f32", avx2, all}}) {
        INFO("head_dim " << c.head_dim << ", " << c.dtype << ", " << c.target.to_string());
        CHECK(attngen::cpu_schedule_params(spec_of(layer(c.head_dim, c.dtype)), c.target, "prefill")
                  .copy_values == c.copy_values);
    }

    // The lowered code stores into each form's copy of V exactly when the parameter asks for
    // it: the flash form's (v_heads) and the whole-row form's (v_heads_rows).
    auto copies = [&](const std::string &forms, const std::string &copy_values) {
        StoresInto any("v_heads"), rows("v_heads_rows");
        for (const Stmt &body :
             lower_layer(layer("64", "f32"), forms + ",copy_values=" + copy_values, avx512)) {
            body.accept(&any);
            body.accept(&rows);
        }
        return std::pair<bool, bool>{any.count > rows.count, rows.count > 0};
    };
    const std::string both_forms = "flash_chunk=64,rows_up_to=1024";
    CHECK(copies(both_forms, "none") == std::pair<bool, bool>{false, false});
    CHECK(copies(both_forms, "flash") == std::pair<bool, bool>{true, false});
    CHECK(copies(both_forms, "all") == std::pair<bool, bool>{true, true});
    // The whole-row form alone (flash_chunk 0) is in v_heads' place: flash leaves it in place.
    CHECK(copies("flash_chunk=0", "flash") == std::pair<bool, bool>{false, false});
    CHECK(copies("flash_chunk=0", "all") == std::pair<bool, bool>{true, false});
    CHECK(copies("flash_chunk=64", "flash") == std::pair<bool, bool>{true, false});
}

TEST_CASE("value_panels: the flash form copies V in panels, where it copies V") {
    // Stores into the panels (v_heads_panels), and into a V copy in rows (v_heads alone).
    auto copies = [](const std::string &head_dim, const std::string &schedule_params,
                     const Halide::Target &target) {
        StoresInto any("v_heads"), panels("v_heads_panels");
        for (const Stmt &body :
             lower_layer({{"heads", "4"}, {"head_dim", head_dim}}, schedule_params, target)) {
            body.accept(&any);
            body.accept(&panels);
        }
        return std::pair<bool, bool>{panels.count > 0, any.count > panels.count};
    };
    const std::string flash = "flash_chunk=64,rows_up_to=0,";
    // AVX2's default; panels of 16 features (d_vectors 2), 8 of them at head_dim 128.
    CHECK(attngen::cpu_schedule_params(spec_of({{"heads", "4"}, {"head_dim", "128"}}), avx2,
                                       "prefill")
              .value_panels);
    CHECK(copies("128", flash + "copy_values=all", avx2) == std::pair<bool, bool>{true, false});
    CHECK(copies("128", flash + "copy_values=all,value_panels=false", avx2) ==
          std::pair<bool, bool>{false, true});
    // Nothing to arrange without a copy, in the whole-row form, or where one block is the row.
    CHECK(copies("128", flash + "copy_values=none", avx2) == std::pair<bool, bool>{false, false});
    CHECK(copies("128", "flash_chunk=0,copy_values=all", avx2) ==
          std::pair<bool, bool>{false, true});
    CHECK(copies("16", flash + "copy_values=all", avx2) == std::pair<bool, bool>{false, true});
    // Off by default on AVX-512 (not measured there), on when named.
    CHECK(copies("128", flash + "copy_values=all", avx512) == std::pair<bool, bool>{false, true});
    CHECK(copies("128", flash + "copy_values=all,value_panels=true", avx512) ==
          std::pair<bool, bool>{true, false});
}

/**
 * The indices of the loads from Funcs whose name starts with `buffer` inside each loop whose name
 * holds `loop` (one list a loop), read with the lets around them.
 */
class LoadsInLoops : public LetsInScope {
  public:
    LoadsInLoops(std::string buffer, std::string loop)
        : buffer_(std::move(buffer)), loop_(std::move(loop)) {}
    std::vector<std::vector<Expr>> loops;

  private:
    using LetsInScope::visit;
    std::string buffer_, loop_;
    int inside_ = 0;

    void visit(const For *op) override {
        const bool named = op->name.find(loop_) != std::string::npos;
        if (named)
            loops.emplace_back();
        inside_ += named;
        LetsInScope::visit(op);
        inside_ -= named;
    }
    void visit(const Load *op) override {
        if (inside_ > 0 && op->name.rfind(buffer_, 0) == 0)
            loops.back().push_back(resolved(op->index));
        LetsInScope::visit(op);
    }
};

TEST_CASE("key_panels: a score block reads its keys from one panel at constant offsets") {
    // The keys of each dot-product loop (the scores' loop over head_dim): how many loops read
    // k_heads_panels, and whether every loop's loads are one address plus constants (a block
    // that straddled two panels made LLVM keep its addresses in a vector register).
    auto panel_reads = [](const std::map<std::string, std::string> &layer,
                          const std::string &schedule_params, const Halide::Target &target) {
        LoadsInLoops loads("k_heads_panels", ".s1.r_head_dim");
        for (const Stmt &body : lower_layer(layer, schedule_params, target))
            body.accept(&loads);
        int reading = 0;
        bool constant_offsets = true;
        for (const std::vector<Expr> &indices : loads.loops) {
            reading += !indices.empty();
            for (const Expr &index : indices)
                constant_offsets = constant_offsets && is_const(simplify(index - indices[0]));
        }
        return std::pair<int, bool>{reading, constant_offsets};
    };
    const std::map<std::string, std::string> d128 = {{"heads", "4"}, {"head_dim", "128"}};
    const std::string flash = "flash_chunk=64,rows_up_to=0,";
    // AVX2's default.
    CHECK(attngen::cpu_schedule_params(spec_of(d128), avx2, "prefill").key_panels);
    const auto [reading, constant_offsets] = panel_reads(d128, flash + "key_block=4", avx2);
    CHECK(reading > 0);
    CHECK(constant_offsets);
    // Blocks that divide neither the chunks nor the test's lengths, under a causal mask.
    const auto [odd_reading, odd_offsets] =
        panel_reads({{"heads", "2"}, {"head_dim", "48"}, {"mask", "causal"}},
                    "flash_chunk=7,rows_up_to=0,key_block=5,key_panels=true", avx2);
    CHECK(odd_reading > 0);
    CHECK(odd_offsets);
    // Off when named, in the whole-row form, with one key a block, and by default on AVX-512.
    CHECK(panel_reads(d128, flash + "key_panels=false", avx2).first == 0);
    CHECK(panel_reads(d128, "flash_chunk=0,key_panels=true", avx2).first == 0);
    CHECK(panel_reads(d128, flash + "key_block=1,key_panels=true", avx2).first == 0);
    CHECK(panel_reads(d128, flash, avx512).first == 0);
    CHECK(panel_reads(d128, flash + "key_panels=true", avx512).first > 0);
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
         {"query_vectors=2,value_queries=4", "query_vectors=3,value_queries=6,flash_chunk=0"}) {
        for (const std::string mask : {"causal", "window(40)", "padding"}) {
            INFO("mask " << mask << ", schedule parameters '" << schedule_params << "'");
            CHECK(value_loops(mask, schedule_params) > 0);
        }
        INFO("no mask, schedule parameters '" << schedule_params << "'");
        CHECK(value_loops("none", schedule_params) == 0);
    }
    // Blocks of 5 do not tile a 16-query tile from its start: the tile's bounds serve.
    CHECK(value_loops("causal", "query_vectors=2,value_queries=5") == 0);
}

TEST_CASE("on AVX-512 the split-KV P·V sums blocks of keys in registers") {
    // A register tile of P·V (part_out's rfactor intermediate, constant size) and a loop over
    // blocks of keys (r_values' y) on 32-register AVX-512; one loop over the keys on AVX2.
    for (const std::string mask : {"none", "causal+padding"}) {
        for (const auto &[target, blocks] : {std::pair{avx512, true}, std::pair{avx2, false}}) {
            INFO("mask " << mask << ", target " << target.to_string());
            AllocationsNamed tiles("part_out");
            LoopsNamed block_loops(".s1.r_values$y");
            for (const Stmt &body : lower_layer(
                     {{"heads", "8"}, {"kv_heads", "2"}, {"head_dim", "64"}, {"mask", mask}},
                     "split_chunk=64", target)) {
                body.accept(&tiles);
                body.accept(&block_loops);
            }
            // part_out itself (sized by Lq), plus, with blocks, its register tile (and a copy of
            // it in the epilogue of the loop over blocks that Halide's loop partitioning adds).
            CHECK((tiles.count > 1) == blocks);
            CHECK((tiles.constant > 0) == blocks);
            CHECK((block_loops.count > 0) == blocks);
        }
    }
    // A chunk that is not a whole number of blocks keeps the one loop.
    LoopsNamed block_loops(".s1.r_values$y");
    for (const Stmt &body :
         lower_layer({{"heads", "8"}, {"kv_heads", "2"}, {"head_dim", "64"}}, "split_chunk=60",
                     Halide::Target("x86-64-linux-avx-avx2-avx512-"
                                    "avx512_skylake-f16c-fma-sse41-no_runtime")))
        body.accept(&block_loops);
    CHECK(block_loops.count == 0);
}

TEST_CASE("the split-KV P·V tiles take whole V rows on AVX-512 and slices of them on AVX2") {
    // split_kv_value_tile: on AVX-512, whole rows (D = 128: two heads' rows) in two passes
    // over the group's four heads (pv_h_outer), except a contiguous i8 cache's rows, widened
    // again per half row (pv_d_outer) for all the heads. On AVX2, eighths of rows for a cache
    // stored in f16 or i8; an f32 cache and the inputs keep the one loop. The V rows of a block
    // are copied (widened) into L1 for an f16 cache, a paged i8 cache and on AVX2. The width of
    // AVX-512's registers decides, not the vectors a row is cut into: at D = 72 (vectors of 8),
    // still whole rows, in four passes of one head.
    const std::map<std::string, std::string> gqa{
        {"heads", "8"}, {"kv_heads", "2"}, {"head_dim", "128"}, {"mask", "causal"}};
    auto cached = [&](const std::string &cache, const std::string &dtype) {
        std::map<std::string, std::string> params = gqa;
        params["cache"] = cache;
        params["cache_dtype"] = dtype;
        return params;
    };
    std::map<std::string, std::string> narrow = cached("contiguous", "f32");
    narrow["head_dim"] = "72";
    enum class Tile { one_loop, rows, slices };
    struct Case {
        std::map<std::string, std::string> params;
        Halide::Target target;
        Tile tile;
        int passes; ///< of the rows or slices loop
        bool copies;
    };
    const std::vector<Case> cases = {
        {gqa, avx512, Tile::rows, 2, false},
        {cached("contiguous", "f32"), avx512, Tile::rows, 2, false},
        {cached("contiguous", "f16"), avx512, Tile::rows, 2, true},
        {cached("contiguous", "i8"), avx512, Tile::slices, 2, false},
        {cached("paged(16)", "i8"), avx512, Tile::rows, 2, true},
        {narrow, avx512, Tile::rows, 4, false},
        {cached("contiguous", "f16"), avx2, Tile::slices, 8, true},
        {cached("paged(16)", "i8"), avx2, Tile::slices, 8, true},
        {cached("contiguous", "i8"), avx2, Tile::slices, 8, true},
        {cached("paged(16)", "f32"), avx2, Tile::one_loop, 0, false},
        {gqa, avx2, Tile::one_loop, 0, false},
    };
    for (const Case &c : cases) {
        std::ostringstream described;
        for (const auto &[key, value] : c.params)
            described << key << "=" << value << " ";
        INFO(described.str() << c.target.to_string());
        LoopsNamed blocks(".s1.r_values$y"), head_passes(".pv_h_outer"), slices(".pv_d_outer");
        AllocationsNamed copies("v_heads");
        for (const Stmt &body : lower_layer(c.params, "split_chunk=64", c.target)) {
            body.accept(&blocks);
            body.accept(&head_passes);
            body.accept(&slices);
            body.accept(&copies);
        }
        CHECK((blocks.count > 0) == (c.tile != Tile::one_loop));
        CHECK((head_passes.count > 0) == (c.tile == Tile::rows));
        CHECK((slices.count > 0) == (c.tile == Tile::slices));
        const LoopsNamed &passes = c.tile == Tile::rows ? head_passes : slices;
        if (c.tile != Tile::one_loop)
            CHECK(passes.constant_extents == std::set<int64_t>{c.passes});
        CHECK((copies.count > 0) == c.copies);
    }
}

TEST_CASE("causal tiles that powers of two leave short run the queries last to first") {
    // AVX2: 8 lanes, so 3 query vectors make 24-query tiles and 2 make 16.
    struct Case {
        std::string mask, schedule_params;
        bool reversed;
    };
    for (const Case &c :
         {Case{"causal", "query_vectors=3", true},
          Case{"causal+padding", "query_vectors=3,flash_chunk=0", true},
          Case{"causal", "query_vectors=2", false}, Case{"padding", "query_vectors=3", false},
          Case{"causal", "query_vectors=3,split_chunk=32", false}}) {
        INFO("mask " << c.mask << ", schedule parameters '" << c.schedule_params << "'");
        StoresInto reversed("attn_reversed");
        StoresInto row_max("row_max", true), row_sum("row_sum", true);
        for (const Stmt &body :
             lower_layer({{"heads", "4"}, {"kv_heads", "2"}, {"head_dim", "32"}, {"mask", c.mask}},
                         c.schedule_params)) {
            body.accept(&reversed);
            body.accept(&row_max);
            body.accept(&row_sum);
        }
        CHECK((reversed.count > 0) == c.reversed);
        // Rows aligned to the tiles: a tile's key range is one range for all its lanes, not a
        // predicate per lane (4x slower when the rows' region started at an unknown offset).
        CHECK(row_max.count == 0);
        CHECK(row_sum.count == 0);
    }
}

TEST_CASE("the GPU schedule stages, scores and folds no step past the last key a tile sees") {
    // Causal and window masks hide the steps past a query tile's last visible key; the test of
    // a step must hold all of its stages, so that such a step costs the test alone. (With key
    // padding the test reads the key lengths, and Halide 14 leaves it inside the stages.)
    for (const std::string mask : {"causal", "window(40)", "causal+window(40)"}) {
        INFO("mask " << mask);
        KeepLowered keep;
        lower_layer_functions({{"heads", "2"}, {"head_dim", "64"}, {"mask", mask}}, "",
                              Halide::Target("x86-64-linux-cuda-cuda_capability_80-no_runtime"),
                              "cuda", &keep);
        REQUIRE(keep.kept.defined());
        StepsInsideTheirTest steps;
        keep.kept.accept(&steps);
        CHECK(steps.loops > 0);
        CHECK(steps.guarded == steps.loops);
    }
}

TEST_CASE("the GPU schedule's score tiles give every lane of the warp keys of its own") {
    // A step's query_tile x step_keys scores spread over min(32, their count) lanes, each lane
    // a tile of the same size. (With one query row, decode, the tiles once took all 32 lanes
    // along the queries: lane 0 scored the whole step while 31 lanes waited.)
    for (const int query_tile : {1, 2, 4, 8, 16, 32, 64})
        for (const int step_keys : {8, 16, 32, 64}) {
            attngen::GpuScheduleParams params;
            params.query_tile = query_tile;
            params.step_keys = step_keys;
            const attngen::GpuScoreTiles tiles = attngen::gpu_score_tiles(params);
            INFO("query_tile " << query_tile << ", step_keys " << step_keys << ": tiles of "
                               << tiles.keys << " keys x " << tiles.queries << " queries on "
                               << tiles.lanes << " lanes");
            CHECK(tiles.lanes == std::min(32, query_tile * step_keys));
            CHECK(tiles.keys * tiles.queries * tiles.lanes == query_tile * step_keys);
        }
    // The defaults of the decode and prefill shape classes.
    for (const auto &[head_dim, shape_class] :
         {std::make_pair("128", "decode"), std::make_pair("64", "decode"),
          std::make_pair("64", "prefill"), std::make_pair("128", "prefill")}) {
        const attngen::AttentionSpec spec =
            spec_of({{"heads", "32"}, {"kv_heads", "8"}, {"head_dim", head_dim}});
        const attngen::GpuScoreTiles tiles =
            attngen::gpu_score_tiles(attngen::gpu_schedule_params(spec, shape_class));
        INFO(shape_class << ", head_dim " << head_dim);
        CHECK(tiles.lanes == 32);
    }
}

TEST_CASE("the GPU schedule's shared memory stays within the bound attngen checks") {
    // Halide sizes a block's shared memory at launch, and a CUDA launch above 48 KiB fails
    // (an H100 refused the first layer below, at 51776 bytes, under an earlier count). So the
    // bytes in the lowered launches must stay within gpu_shared_memory_bytes, which attngen
    // holds to the limit: for the default tiles of each head_dim class, heads sharing a block
    // and small query tiles. (The split-KV form sizes some buffers per block and keeps the
    // largest in a host buffer at run time, which this reading of the code does not evaluate.)
    struct Case {
        std::map<std::string, std::string> spec;
        std::string schedule_params;
    };
    const Case cases[] = {
        {{{"heads", "4"}, {"kv_heads", "1"}, {"head_dim", "16"}, {"mask", "padding"}}, ""},
        {{{"heads", "16"}, {"head_dim", "64"}, {"mask", "causal"}}, ""},
        {{{"heads", "16"}, {"head_dim", "128"}}, ""},
        {{{"heads", "2"}, {"head_dim", "256"}}, ""},
        {{{"heads", "16"}, {"kv_heads", "4"}, {"head_dim", "64"}},
         "heads_per_block=2,query_tile=16,step_keys=16"},
        {{{"heads", "4"}, {"head_dim", "32"}}, "query_tile=8,step_keys=64"},
        {{{"heads", "4"}, {"kv_heads", "2"}, {"head_dim", "32"}, {"mask", "causal+window(7)"}},
         "heads_per_block=2"},
        {{{"heads", "4"}, {"kv_heads", "2"}, {"head_dim", "32"}, {"mask", "causal+window(7)"}}, ""},
    };
    const Halide::Target target("x86-64-linux-cuda-cuda_capability_80-no_runtime");
    for (const Case &layer : cases) {
        const attngen::AttentionSpec spec = spec_of(layer.spec);
        attngen::GpuScheduleParams params = attngen::gpu_schedule_params(spec);
        REQUIRE(attngen::parse_gpu_schedule_params(layer.schedule_params, params).empty());
        const int64_t bound = attngen::gpu_shared_memory_bytes(spec, params);
        INFO("head_dim " << spec.resolved_head_dim() << ", " << spec.group_size()
                         << " heads per kv head, schedule parameters '" << layer.schedule_params
                         << "': bound " << bound << " bytes");
        CHECK(bound <= attngen::gpu_shared_memory_limit);
        const std::vector<Stmt> bodies =
            lower_layer(layer.spec, layer.schedule_params, target, "cuda");
        for (const int length : {1, 37, 4096}) {
            SharedMemoryOfLaunches launches(length);
            for (const Stmt &body : bodies)
                body.accept(&launches);
            int64_t largest = 0;
            for (const Expr &bytes : launches.bytes) {
                INFO("length " << length << ": " << bytes);
                const std::optional<int64_t> value = attngen::halide_compat::constant_int(bytes);
                REQUIRE(value.has_value());
                CHECK(*value <= bound);
                largest = std::max(largest, *value);
            }
            CHECK(largest > 0);
        }
    }
}

/** Counts the stores into buffers named `stored`... whose values load from `loaded`... */
class StoresReading : public IRVisitor {
  public:
    StoresReading(std::string stored, std::string loaded)
        : stored_(std::move(stored)), loaded_(std::move(loaded)) {}
    int count = 0;

  private:
    using IRVisitor::visit;
    std::string stored_, loaded_;
    bool in_value_ = false, found_ = false;

    void visit(const Store *op) override {
        if (op->name.rfind(stored_, 0) == 0) {
            in_value_ = true;
            found_ = false;
            op->value.accept(this);
            in_value_ = false;
            count += found_;
        }
        IRVisitor::visit(op);
    }
    void visit(const Load *op) override {
        found_ = found_ || (in_value_ && op->name.rfind(loaded_, 0) == 0);
        IRVisitor::visit(op);
    }
};

TEST_CASE("rotary embeddings are computed once per call, not once per score") {
    // Inlined, the rotation (a table lookup and a partner feature per element) would run inside
    // every dot product: each schedule stores the table and the rotated q instead, and rotates
    // k once, at root (k_rope) or as the forms without projections copy K per call (k_heads),
    // and the scores read no table.
    auto rope_layer = [](std::map<std::string, std::string> params) {
        params.insert({{"heads", "4"}, {"kv_heads", "2"}, {"mask", "causal"}, {"rope", "neox"}});
        return params;
    };
    const std::map<std::string, std::string> plain = rope_layer({{"head_dim", "64"}});
    const std::map<std::string, std::string> projected =
        rope_layer({{"model_dim", "128"}, {"projections", "q,k,v"}});
    struct Case {
        std::map<std::string, std::string> params;
        std::string schedule_params;
    };
    for (const Case &c :
         {Case{plain, ""}, Case{plain, "flash_chunk=0"}, Case{plain, "split_chunk=64"},
          Case{projected, ""}, Case{projected, "packed_weights=1"}}) {
        INFO((c.params.count("projections") ? "projections" : "per-head inputs")
             << ", schedule parameters '" << c.schedule_params << "'");
        StoresInto table("rope_table"), queries("q_rope"), keys("k_rope");
        StoresReading copy_rotates("k_heads", "rope_table"), scores_rotate("scores", "rope_table");
        for (const Stmt &body : lower_layer(c.params, c.schedule_params)) {
            for (StoresInto *stage : {&table, &queries, &keys})
                body.accept(stage);
            body.accept(&copy_rotates);
            body.accept(&scores_rotate);
        }
        CHECK(table.count > 0);
        CHECK(queries.count > 0);
        CHECK(keys.count + copy_rotates.count > 0);
        CHECK(scores_rotate.count == 0);
    }
}

/**
 * The stores into Funcs whose name starts with `prefix`: how many, how many store vectors, and
 * how many sit inside a loop whose name contains `loop_part`.
 */
class StoresPlaced : public IRVisitor {
  public:
    StoresPlaced(std::string prefix, std::string loop_part)
        : prefix_(std::move(prefix)), loop_part_(std::move(loop_part)) {}
    int count = 0, vectors = 0, in_loop = 0;

  private:
    using IRVisitor::visit;
    std::string prefix_, loop_part_;
    int depth_ = 0;

    void visit(const For *op) override {
        const bool inside = op->name.find(loop_part_) != std::string::npos;
        depth_ += inside;
        IRVisitor::visit(op);
        depth_ -= inside;
    }
    void visit(const Store *op) override {
        if (op->name.rfind(prefix_, 0) == 0) {
            count++;
            vectors += op->value.type().lanes() > 1;
            in_loop += depth_ > 0;
        }
        IRVisitor::visit(op);
    }
};

TEST_CASE("the split-KV P·V tiles weigh an i8 V row once per key and head, not once per pass") {
    // value_weights (probability times the row's scale) at the task, a vector over the group's
    // heads, outside the tiles' passes over a block's rows (pv_d_outer, pv_h_outer): inlined,
    // each pass loaded the scale and multiplied again. P·V in one loop (NEON) keeps it inline.
    struct Case {
        std::string cache;
        Halide::Target target;
        bool tiles;
    };
    for (const Case &c : {Case{"contiguous", avx512, true}, Case{"paged(16)", avx512, true},
                          Case{"contiguous", avx2, true}, Case{"paged(16)", avx2, true},
                          Case{"contiguous", arm, false}}) {
        const std::map<std::string, std::string> params{{"heads", "8"},      {"kv_heads", "2"},
                                                        {"head_dim", "128"}, {"mask", "causal"},
                                                        {"cache", c.cache},  {"cache_dtype", "i8"}};
        INFO(c.cache << " " << c.target.to_string());
        StoresReading pv_scales("part_out", "value_scale");
        StoresReading weights_scales("value_weights", "value_scale");
        StoresPlaced weights("value_weights", ".pv_");
        const std::string schedule = c.target.arch == Halide::Target::ARM ? "arm" : "x86";
        for (const Stmt &body : lower_layer(params, "split_chunk=64", c.target, schedule)) {
            body.accept(&pv_scales);
            body.accept(&weights_scales);
            body.accept(&weights);
        }
        CHECK((pv_scales.count == 0) == c.tiles);
        CHECK((weights_scales.count > 0) == c.tiles);
        CHECK((weights.count > 0) == c.tiles);
        CHECK(weights.vectors == weights.count);
        CHECK(weights.in_loop == 0);
    }
}

/** Per Func name prefix, the widest vector stored to a buffer whose name starts with it. */
class WidestStores : public IRVisitor {
  public:
    explicit WidestStores(std::vector<std::string> prefixes) {
        for (std::string &prefix : prefixes)
            widest[std::move(prefix)] = 0;
    }
    std::map<std::string, int> widest;

  private:
    using IRVisitor::visit;
    void visit(const Store *op) override {
        for (auto &[prefix, lanes] : widest)
            if (op->name.rfind(prefix, 0) == 0)
                lanes = std::max(lanes, op->value.type().lanes());
        IRVisitor::visit(op);
    }
};

TEST_CASE("the split-KV masked scores, probabilities and statistics fill whole vectors") {
    // Vectorized across the group's heads alone, a group of four used a quarter of AVX-512's
    // 16 lanes (and one head, one lane); where the group divides the vector, keys fill the
    // rest: masked, probs and value_weights store (head, key) vectors, and part_max and
    // part_sum reduce into vectors of partial results (their rfactor stages) before a small
    // reduction per chunk.
    struct Case {
        int heads, kv_heads;
        Halide::Target target;
        int lanes; ///< the widest store expected
    };
    for (const Case &c : {Case{8, 2, avx512, 16}, Case{8, 2, avx2, 8}, Case{8, 8, avx512, 16},
                          Case{16, 2, avx512, 16}, Case{32, 1, avx512, 16}, Case{8, 2, arm, 4},
                          Case{8, 8, arm, 4}}) {
        const std::map<std::string, std::string> params{{"heads", std::to_string(c.heads)},
                                                        {"kv_heads", std::to_string(c.kv_heads)},
                                                        {"head_dim", "64"},
                                                        {"mask", "causal"},
                                                        {"cache", "contiguous"},
                                                        {"cache_dtype", "i8"}};
        INFO(c.heads << " heads, " << c.kv_heads << " kv heads, " << c.target.to_string());
        WidestStores stores({"masked", "probs", "value_weights", "part_max", "part_sum"});
        const std::string schedule = c.target.arch == Halide::Target::ARM ? "arm" : "x86";
        for (const Stmt &body : lower_layer(params, "split_chunk=64", c.target, schedule))
            body.accept(&stores);
        for (const auto &[stage, lanes] : stores.widest) {
            INFO(stage);
            // NEON's P·V runs in one loop, which keeps value_weights inline (no stores).
            if (stage == "value_weights" && c.target.arch == Halide::Target::ARM)
                CHECK(lanes == 0);
            else
                CHECK(lanes == c.lanes);
        }
    }
}

/**
 * Per cache buffer: the prefetches of it, and how many of those sit in a loop body (or branch)
 * that also loads it, beside the load they run ahead of.
 */
class CachePrefetches : public IRVisitor {
  public:
    std::map<std::string, int> prefetches, beside_loads;

  private:
    using IRVisitor::visit;
    struct Body {
        std::map<std::string, int> loads, prefetches;
    };
    std::vector<Body> bodies_{1};

    void visit(const For *op) override { within(op->body); }
    void visit(const IfThenElse *op) override {
        op->condition.accept(this);
        within(op->then_case);
        if (op->else_case.defined())
            within(op->else_case);
    }
    void within(const Stmt &body) {
        bodies_.emplace_back();
        body.accept(this);
        for (const auto &[buffer, count] : bodies_.back().prefetches)
            if (bodies_.back().loads.count(buffer))
                beside_loads[buffer] += count;
        bodies_.pop_back();
    }
    void visit(const Load *op) override {
        bodies_.back().loads[op->name]++;
        IRVisitor::visit(op);
    }
    void visit(const Call *op) override {
        if (op->is_intrinsic(Call::prefetch))
            if (const auto *buffer = op->args[0].as<Variable>()) {
                prefetches[buffer->name]++;
                bodies_.back().prefetches[buffer->name]++;
            }
        IRVisitor::visit(op);
    }
};

TEST_CASE("a cached layer's and a decode step's CPU loops prefetch the K and V rows ahead") {
    // A paged cache's blocks are scattered, and each restarts the hardware's prefetchers: the
    // loops over keys that read K and V prefetch the rows they read some keys later, beside
    // the loads. A split-KV decode without a cache does the same with its key and value
    // inputs; prefill schedules, which read K and V in tiles, prefetch nothing, and nor does a
    // paged f32 cache's step with AVX-512.
    for (const std::string cache : {"paged(16)", "contiguous"}) {
        for (const std::string dtype : {"f32", "f16"}) {
            for (const Halide::Target &target : {avx512, avx2, arm}) {
                for (const std::string schedule_params : {"split_chunk=64", ""}) {
                    INFO("cache " << cache << " of " << dtype << ", target " << target.to_string()
                                  << ", schedule parameters '" << schedule_params << "'");
                    CachePrefetches found;
                    for (const Stmt &body :
                         lower_layer({{"heads", "8"},
                                      {"kv_heads", "2"},
                                      {"head_dim", "64"},
                                      {"mask", "causal"},
                                      {"cache", cache},
                                      {"cache_dtype", dtype}},
                                     schedule_params, target,
                                     target.arch == Halide::Target::ARM ? "arm" : "x86"))
                        body.accept(&found);
                    // A paged f32 cache with AVX-512 is left to the hardware
                    // (cpu_kv_prefetch_keys).
                    const bool none = cache != "contiguous" && dtype == "f32" &&
                                      target.natural_vector_size<float>() == 16;
                    for (const char *buffer : {"k_cache", "v_cache"}) {
                        INFO(buffer);
                        CHECK((found.prefetches[buffer] > 0) == !none);
                        CHECK(found.beside_loads[buffer] == found.prefetches[buffer]);
                    }
                }
            }
        }
    }
    const std::map<std::string, std::string> plain = {
        {"heads", "8"}, {"kv_heads", "2"}, {"head_dim", "64"}};
    CachePrefetches decode, prefill;
    for (const Stmt &body : lower_layer(plain, "split_chunk=64"))
        body.accept(&decode);
    for (const char *buffer : {"key", "value"}) {
        INFO(buffer);
        CHECK(decode.prefetches[buffer] > 0);
        CHECK(decode.beside_loads[buffer] == decode.prefetches[buffer]);
    }
    for (const Stmt &body : lower_layer(plain, ""))
        body.accept(&prefill);
    CHECK(prefill.prefetches.empty());
}

/**
 * The dense vector loads of each of `buffers`, and the loads of a paged cache's block table at a
 * vector of indices (one lookup per key).
 */
class ScaleLoads : public IRVisitor {
  public:
    explicit ScaleLoads(std::set<std::string> buffers) : buffers_(std::move(buffers)) {}
    std::map<std::string, int> dense;
    int per_key_lookups = 0;

  private:
    using IRVisitor::visit;
    std::set<std::string> buffers_;

    void visit(const Load *op) override {
        if (buffers_.count(op->name)) {
            const auto *ramp = op->index.as<Halide::Internal::Ramp>();
            dense[op->name] += ramp != nullptr && Halide::Internal::is_const_one(ramp->stride);
        }
        per_key_lookups += op->name == "block_table" && op->type.is_vector();
        IRVisitor::visit(op);
    }
};

TEST_CASE("an i8 cache's row scales are loaded a vector of keys at a time") {
    // Split-KV decode over an i8 cache: each task reads its chunk's K and V scales as dense
    // vectors. One block-table lookup serves a vector, never one per key: the vector is the
    // widest power of two, at most the vector, that divides a paged cache's BLOCK (paged(8): 8
    // keys on AVX-512, whose vector is 16; paged(12) and paged(4): 4 on both).
    // (The vector that straddles the cache's end and the new rows reads each key from one or
    // the other.)
    for (const std::string cache :
         {"paged(32)", "paged(12)", "paged(8)", "paged(4)", "contiguous"}) {
        for (const Halide::Target &target : {avx512, avx2}) {
            INFO("cache " << cache << ", target " << target.to_string());
            ScaleLoads found({"k_scales", "v_scales"});
            for (const Stmt &body : lower_layer({{"heads", "8"},
                                                 {"kv_heads", "2"},
                                                 {"head_dim", "64"},
                                                 {"mask", "causal"},
                                                 {"cache", cache},
                                                 {"cache_dtype", "i8"}},
                                                "split_chunk=64", target))
                body.accept(&found);
            CHECK(found.dense["k_scales"] > 0);
            CHECK(found.dense["v_scales"] > 0);
            CHECK(found.per_key_lookups == 0);
        }
    }
}

/** Whether an expression widens 16-bit integers to 32 bits (a cast or a widening multiply). */
class WidensInt16 : public IRVisitor {
  public:
    bool found = false;

  private:
    using IRVisitor::visit;

    static bool is_int16(const Expr &e) { return e.type().is_int() && e.type().bits() == 16; }

    void visit(const Cast *op) override {
        found |= is_int16(op->value) && op->type.bits() == 32;
        IRVisitor::visit(op);
    }

    void visit(const Call *op) override {
        found |= op->is_intrinsic(Call::widening_mul) && is_int16(op->args[0]);
        IRVisitor::visit(op);
    }
};

/**
 * The 32-bit integer vector sums of pairs of lanes of 16-bit integers widened: the integer
 * scores' partial sums (Halide emits x86's pmaddwd for such a sum of products).
 */
class IntegerDotProducts : public IRVisitor {
  public:
    int pair_sums = 0;

  private:
    using IRVisitor::visit;

    void visit(const VectorReduce *op) override {
        const Halide::Type type = op->type;
        if (op->op == VectorReduce::Add && type.is_int() && type.bits() == 32 &&
            op->value.type().lanes() == 2 * type.lanes()) {
            WidensInt16 operands;
            op->value.accept(&operands);
            pair_sums += operands.found;
        }
        IRVisitor::visit(op);
    }
};

TEST_CASE("i8 keys' scores are integer dot products in the x86 split-KV decode form") {
    // The key's bytes against the query rounded to 16 bits (AlgorithmOptions::integer_scores),
    // summed a pair of elements per lane, as pmaddwd does: on every x86 vector width, for an
    // i8 cache (contiguous and paged) and i8 key inputs. Not for f16 keys, the flash form,
    // AArch64, or i8 key inputs with rotary embeddings (their keys rotate in f32), which keep
    // f32 dot products.
    const std::map<std::string, std::string> gqa{
        {"heads", "8"}, {"kv_heads", "2"}, {"head_dim", "64"}, {"mask", "causal"}};
    auto with = [&](std::map<std::string, std::string> extra) {
        extra.insert(gqa.begin(), gqa.end());
        return extra;
    };
    struct Case {
        std::map<std::string, std::string> params;
        std::string schedule_params;
        Halide::Target target;
        bool integer;
    };
    const std::vector<Case> cases = {
        {with({{"cache", "contiguous"}, {"cache_dtype", "i8"}}), "split_chunk=64", avx512, true},
        {with({{"cache", "paged(16)"}, {"cache_dtype", "i8"}}), "split_chunk=64", avx2, true},
        {with({{"cache", "contiguous"}, {"cache_dtype", "i8"}}), "split_chunk=64", sse41, true},
        {with({{"kv_dtype", "i8"}}), "split_chunk=64", avx2, true},
        {with({{"kv_dtype", "i8"}, {"rope", "neox"}}), "split_chunk=64", avx2, false},
        {with({{"cache", "contiguous"}, {"cache_dtype", "f16"}}), "split_chunk=64", avx2, false},
        {with({{"cache", "contiguous"}, {"cache_dtype", "i8"}}), "", avx2, false},
        {with({{"cache", "contiguous"}, {"cache_dtype", "i8"}}), "split_chunk=64", arm, false},
    };
    for (const Case &c : cases) {
        std::ostringstream described;
        for (const auto &[key, value] : c.params)
            described << key << "=" << value << " ";
        INFO(described.str() << "'" << c.schedule_params << "' " << c.target.to_string());
        IntegerDotProducts found;
        for (const Stmt &body : lower_layer(c.params, c.schedule_params, c.target,
                                            c.target.arch == Halide::Target::ARM ? "arm" : "x86"))
            body.accept(&found);
        CHECK((found.pair_sums > 0) == c.integer);
    }
}

/**
 * The casts from f16 to f32, and the widenings of 16-bit signed integers to 32 bits: widen_f16
 * sign-extends an f16's bits so (attention layers have no other 16-bit integers), a cast that
 * Halide folds with the shift after it into widening_shift_left.
 */
class HalfWidenings : public IRVisitor {
  public:
    int casts = 0, integer_casts = 0;

  private:
    using IRVisitor::visit;

    void visit(const Cast *op) override {
        const Halide::Type from = op->value.type(), to = op->type;
        casts += from.is_float() && !from.is_bfloat() && from.bits() == 16;
        integer_casts += from.is_int() && from.bits() == 16 && to.is_int() && to.bits() == 32;
        IRVisitor::visit(op);
    }

    void visit(const Call *op) override {
        integer_casts += op->is_intrinsic(Call::widening_shift_left) &&
                         op->args[0].type().is_int() && op->args[0].type().bits() == 16;
        IRVisitor::visit(op);
    }
};

TEST_CASE("f16 widens with the conversion instruction where Halide emits one") {
    // Halide 21 turns a cast of f16 to f32 into F16C's conversion on x86 (every AVX2 target);
    // Halide 14 emulates it, slower than attngen's own integer sequence (widen_f16).
    for (const Halide::Target &target : {avx2, sse41}) {
        const bool native = attngen::halide_compat::converts_f16_in_hardware(target);
        INFO("target " << target.to_string() << ", Halide " << ATTNGEN_HALIDE_MAJOR);
        CHECK(native == (ATTNGEN_HALIDE_MAJOR >= 21 && target.has_feature(Halide::Target::AVX2)));
        for (const auto &[field, dtype] :
             {std::pair{"dtype", "f16"}, std::pair{"cache_dtype", "f16"}}) {
            std::map<std::string, std::string> params{
                {"heads", "4"}, {"kv_heads", "2"}, {"head_dim", "32"}, {field, dtype}};
            if (std::string(field) == "cache_dtype")
                params["cache"] = "contiguous";
            HalfWidenings found;
            for (const Stmt &body : lower_layer(params, "split_chunk=64", target))
                body.accept(&found);
            INFO(field << " " << dtype);
            CHECK((found.casts > 0) == native);
            CHECK((found.integer_casts > 0) == !native);
        }
    }
}
