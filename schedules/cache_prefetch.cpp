// The lowering pass that prefetches KV-cache rows ahead of the loops over keys (cache_prefetch.h).
#include "cache_prefetch.h"

#include "dsl/halide_compat.h"

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

namespace attngen {

namespace {

namespace hi = Halide::Internal;
using Halide::Expr;
using hi::Stmt;

/** Names bound around a point of the IR, innermost last, with their values. */
using Bindings = std::vector<std::pair<std::string, Expr>>;

/** `e` with every name of `bindings` replaced by its value, innermost first. */
Expr expanded(Expr e, const Bindings &bindings) {
    for (auto it = bindings.rbegin(); it != bindings.rend(); ++it)
        if (hi::expr_uses_var(e, it->first))
            e = hi::substitute(it->first, it->second, e);
    return e;
}

/** One load of a cache buffer: the address of its first element, closed over the lets inside
 *  the expression that holds it. */
struct CacheLoad {
    std::string buffer;
    Halide::Type element;
    Expr index;
};

/** The loads of the cache buffers in an expression (dense vectors and scalars; no gathers). */
class FindCacheLoads : public hi::IRVisitor {
  public:
    explicit FindCacheLoads(const std::set<std::string> &buffers) : buffers_(buffers) {}
    std::vector<CacheLoad> found;

  private:
    using hi::IRVisitor::visit;

    void visit(const hi::Let *op) override {
        op->value.accept(this);
        lets_.emplace_back(op->name, op->value);
        op->body.accept(this);
        lets_.pop_back();
    }

    void visit(const hi::Load *op) override {
        hi::IRVisitor::visit(op);
        if (buffers_.count(op->name) == 0)
            return;
        Expr first = op->index;
        if (const auto *ramp = first.as<hi::Ramp>())
            first = ramp->base;
        if (!first.type().is_scalar())
            return;
        found.push_back({op->name, op->type.element_of(), expanded(first, lets_)});
    }

    const std::set<std::string> &buffers_;
    Bindings lets_;
};

/** A prefetch already placed in the current loop body or branch. */
struct Placed {
    std::string buffer;
    Expr address;
};

constexpr int64_t cache_line_bytes = 64;

class CachePrefetch : public hi::IRMutator {
  public:
    CachePrefetch(std::set<std::string> buffers, int keys_ahead)
        : buffers_(std::move(buffers)), keys_ahead_(keys_ahead) {}

  private:
    using hi::IRMutator::visit;

    Stmt visit(const hi::For *op) override {
        if (op->device_api != Halide::DeviceAPI::None && op->device_api != Halide::DeviceAPI::Host)
            return op;
        loops_.push_back(op->name);
        placed_.emplace_back();
        Stmt result = hi::IRMutator::visit(op);
        placed_.pop_back();
        loops_.pop_back();
        return result;
    }

    Stmt visit(const hi::LetStmt *op) override {
        // Only the lets that vary with a loop are expanded into a prefetch's address; the
        // others (strides, a task's bases) stay names in scope.
        std::vector<Stmt> block = prefetches(op->value);
        const bool varies = varies_with_loops(op->value);
        if (varies)
            lets_.emplace_back(op->name, op->value);
        block.push_back(hi::IRMutator::visit(op));
        if (varies)
            lets_.pop_back();
        return block.size() == 1 ? block[0] : hi::Block::make(block);
    }

    /** Whether `value` uses an enclosing loop's variable, directly or through a let. */
    bool varies_with_loops(const Expr &value) const {
        for (const std::string &loop : loops_)
            if (hi::expr_uses_var(value, loop))
                return true;
        for (const auto &let : lets_)
            if (hi::expr_uses_var(value, let.first))
                return true;
        return false;
    }

    Stmt visit(const hi::IfThenElse *op) override {
        // Each branch places its own prefetches: one placed in the other may not run.
        auto branch = [&](const Stmt &body) {
            if (!body.defined())
                return body;
            placed_.emplace_back();
            Stmt result = mutate(body);
            placed_.pop_back();
            return result;
        };
        Stmt then_case = branch(op->then_case), else_case = branch(op->else_case);
        if (then_case.same_as(op->then_case) && else_case.same_as(op->else_case))
            return op;
        return hi::IfThenElse::make(op->condition, then_case, else_case);
    }

    Stmt visit(const hi::Store *op) override {
        std::vector<Stmt> block = prefetches(op->value);
        if (block.empty())
            return op;
        block.emplace_back(op);
        return hi::Block::make(block);
    }

    /** The prefetches for the cache loads of `value`, a statement's value. */
    std::vector<Stmt> prefetches(const Expr &value) {
        std::vector<Stmt> block;
        if (loops_.empty())
            return block;
        FindCacheLoads loads(buffers_);
        value.accept(&loads);
        for (const CacheLoad &load : loads.found)
            if (Stmt prefetch = prefetch_ahead(load); prefetch.defined())
                block.push_back(prefetch);
        return block;
    }

    /** The prefetch of what `load` reads keys_ahead iterations of its loop over keys later,
     *  unless the current body already prefetches that cache line. */
    Stmt prefetch_ahead(const CacheLoad &load) {
        const Expr index = expanded(load.index, lets_);
        for (auto loop = loops_.rbegin(); loop != loops_.rend(); ++loop) {
            if (!hi::expr_uses_var(index, *loop))
                continue;
            const Expr var = hi::Variable::make(Halide::Int(32), *loop);
            // A loop whose step moves the load by a constant walks a row's vectors.
            if (hi::is_const(hi::simplify(hi::substitute(*loop, var + 1, index) - index)))
                continue;
            const Expr ahead = hi::simplify(hi::substitute(*loop, var + keys_ahead_, index));
            if (already_placed(load, ahead))
                return Stmt();
            placed_.back().push_back({load.buffer, ahead});
            // Typed as an unsigned integer of the element's size: the address is the same, and
            // Halide 14's AArch64 code for an f16 prefetch without arm_fp16 is a module LLVM
            // cannot read back (its object emission fails).
            const Expr base = hi::Variable::make(Halide::Handle(), load.buffer);
            const Halide::Type bits = Halide::UInt(load.element.bits());
            return hi::Evaluate::make(
                hi::Call::make(bits, hi::Call::prefetch, {base, ahead, 1, 1}, hi::Call::Intrinsic));
        }
        return Stmt();
    }

    /** Whether a prefetch in the current body reads within a cache line of `address`. */
    bool already_placed(const CacheLoad &load, const Expr &address) const {
        const int64_t element_bytes = load.element.bytes();
        for (const Placed &placed : placed_.back()) {
            if (placed.buffer != load.buffer)
                continue;
            const std::optional<int64_t> apart =
                halide_compat::constant_int(hi::simplify(address - placed.address));
            if (apart && std::llabs(*apart) * element_bytes < cache_line_bytes)
                return true;
        }
        return false;
    }

    std::set<std::string> buffers_;
    int keys_ahead_;
    std::vector<std::string> loops_; ///< enclosing CPU loops, innermost last
    Bindings lets_;                  ///< the enclosing lets that vary with a loop, innermost last
    std::vector<std::vector<Placed>> placed_; ///< per enclosing loop body or branch
};

} // namespace

std::unique_ptr<Halide::Internal::IRMutator>
make_cache_prefetch_pass(const std::set<std::string> &buffers, int keys_ahead) {
    return std::make_unique<CachePrefetch>(buffers, keys_ahead);
}

} // namespace attngen
