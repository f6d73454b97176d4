// The checker's integer-overflow rule against Halide itself: Halide folds the integer constants
// of an expression while it generates a layer and stops at a signed 32-bit overflow, so every
// integer expression that check_expression accepts must pass Halide's simplifier. Random
// expressions over b, h, q and k with constants from small to 2^31 - 1, from a printed seed
// (ATTNGEN_FOLDING_SEED overrides it).
#include "dsl/expression.h"
#include "dsl/expression_check.h"
#include "dsl/expression_lowering.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

using attngen::ModExprPtr;

class RandomExpressions {
  public:
    explicit RandomExpressions(uint32_t seed) : random_(seed) {}

    /** An integer expression of at most `depth` levels of operators. */
    ModExprPtr integer_expression(int depth) {
        if (depth == 0 || pick(4) == 0)
            return leaf();
        static const char *operators[] = {"+", "-", "*", "/", "%"};
        switch (pick(8)) {
        case 0:
            return attngen::unary("-", integer_expression(depth - 1));
        case 1:
            return attngen::call(pick(2) ? "min" : "max",
                                 {integer_expression(depth - 1), integer_expression(depth - 1)});
        case 2:
            return attngen::call("select", {comparison(depth - 1), integer_expression(depth - 1),
                                            integer_expression(depth - 1)});
        default:
            return attngen::binary(operators[pick(5)], integer_expression(depth - 1),
                                   integer_expression(depth - 1));
        }
    }

    /** A comparison of two integer expressions. */
    ModExprPtr comparison(int depth) {
        static const char *comparisons[] = {"<", "<=", ">", ">=", "==", "!="};
        return attngen::binary(comparisons[pick(6)], integer_expression(depth),
                               integer_expression(depth));
    }

  private:
    size_t pick(size_t n) { return random_() % n; }

    ModExprPtr leaf() {
        static const char *variables[] = {"b", "h", "q", "k"};
        static const long constants[] = {1,     2,     3,       24,       512,        4096,
                                         46341, 65536, 1000000, 16777216, 1073741824, 2147483647};
        if (pick(2) == 0)
            return attngen::variable(variables[pick(4)]);
        const long value = constants[pick(std::size(constants))];
        return attngen::integer(pick(4) == 0 ? value - 1 : value);
    }

    std::mt19937 random_;
};

uint32_t folding_seed() {
    if (const char *text = std::getenv("ATTNGEN_FOLDING_SEED"))
        return static_cast<uint32_t>(std::strtoul(text, nullptr, 10));
    return 20261127;
}

/**
 * Finds the marker that Halide's simplifier leaves where a constant fold overflowed
 * (signed_integer_overflow); code generation stops at it with "Signed integer overflow
 * occurred during constant-folding".
 */
class FindsOverflow : public Halide::Internal::IRVisitor {
  public:
    bool found = false;

  private:
    using IRVisitor::visit;
    void visit(const Halide::Internal::Call *call) override {
        found = found || call->is_intrinsic(Halide::Internal::Call::signed_integer_overflow);
        IRVisitor::visit(call);
    }
};

/**
 * Whether Halide generates the lowered expression without a signed overflow in its constant
 * folding: a Func of it over (q, k, h, b) is lowered for the host (no code generation) once
 * vectorized along q and once along k, as the schedules vectorize, which folds each index's
 * constant factors into the stride of a vector of indices.
 */
bool halide_folds(const attngen::ModExpr &expr, bool predicate) {
    const Halide::Var b("b"), h("h"), q("q"), k("k");
    attngen::LoweringContext context;
    context.b = b;
    context.h = h;
    context.q = q;
    context.k = k;
    const Halide::Expr value = attngen::lower_expression(expr, context);
    const Halide::Target target = Halide::get_host_target().with_feature(Halide::Target::NoAsserts);
    for (const Halide::Var &along : {q, k}) {
        Halide::Func f("f");
        f(q, k, h, b) = predicate ? Halide::select(value, 1, 0) : value;
        f.vectorize(along, 8);
        FindsOverflow finder;
        for (const Halide::Internal::LoweredFunc &function :
             f.compile_to_module({}, "f", target).functions())
            function.body.accept(&finder);
        if (finder.found)
            return false;
    }
    return true;
}

} // namespace

TEST_CASE("integer expressions that check accepts never overflow Halide's constant folding") {
    const uint32_t seed = folding_seed();
    INFO("seed " << seed << " (ATTNGEN_FOLDING_SEED reproduces it)");
    RandomExpressions expressions(seed);
    int accepted = 0, refused = 0, refused_by_halide = 0;
    for (int i = 0; i < 1000; ++i) {
        const ModExprPtr expr =
            i % 2 == 0 ? expressions.integer_expression(4) : expressions.comparison(3);
        std::vector<attngen::ExprError> errors;
        attngen::check_expression(*expr, {}, errors);
        const bool folds = halide_folds(*expr, i % 2 != 0);
        if (errors.empty()) {
            ++accepted;
            INFO(attngen::to_string(*expr));
            CHECK(folds);
        } else {
            ++refused;
            refused_by_halide += folds ? 0 : 1;
        }
    }
    // Both outcomes occur, and the rule catches what Halide refuses (checked above) without
    // refusing nearly everything.
    INFO("accepted " << accepted << ", refused " << refused << ", of which Halide refuses "
                     << refused_by_halide);
    CHECK(accepted > 250);
    CHECK(refused > 25);
    CHECK(refused_by_halide > 0);
}

TEST_CASE("the checker refuses a constant integer overflow at the lowest node that overflows") {
    // (q * 65536) * 65536: Halide folds the two constants into q * 4294967296.
    const ModExprPtr inner = attngen::binary("*", attngen::variable("q"), attngen::integer(65536));
    const ModExprPtr outer = attngen::binary("*", inner, attngen::integer(65536));
    const ModExprPtr expr = attngen::binary("+", outer, attngen::variable("k"));
    std::vector<attngen::ExprError> errors;
    attngen::check_expression(*expr, {}, errors);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].message.find("'q * 65536 * 65536'") != std::string::npos);
    CHECK(errors[0].message.find("4294967296") != std::string::npos);
    CHECK_FALSE(halide_folds(*expr, false));
}
