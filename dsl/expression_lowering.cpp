// ModExpr -> Halide::Expr. Types follow the language: integer arithmetic stays integer (Halide's
// floor division and Euclidean modulo match the language's / and %), anything with a real
// operand is float32, and tensor indices are clamped so that no read leaves the tensor.
#include "expression_lowering.h"

#include <stdexcept>

namespace attngen {

using Halide::Expr;

namespace {

bool is_real(const Expr &e) {
    return e.type().is_float();
}

/** Both operands as float when either is, so min/max/clamp/select see one type. */
void promote(Expr &a, Expr &b) {
    if (is_real(a) || is_real(b)) {
        a = Halide::cast<float>(a);
        b = Halide::cast<float>(b);
    }
}

Expr real(const Expr &e) {
    return Halide::cast<float>(e);
}

Expr lower_call(const ModExpr &expr, const std::vector<Expr> &args) {
    const std::string &f = expr.name;
    if (f == "abs")
        return is_real(args[0]) ? Halide::abs(args[0]) : Halide::cast<int>(Halide::abs(args[0]));
    if (f == "min" || f == "max") {
        Expr a = args[0], b = args[1];
        promote(a, b);
        return f == "min" ? Halide::min(a, b) : Halide::max(a, b);
    }
    if (f == "clamp") {
        Expr x = args[0], lo = args[1], hi = args[2];
        if (is_real(x) || is_real(lo) || is_real(hi)) {
            x = real(x);
            lo = real(lo);
            hi = real(hi);
        }
        return Halide::clamp(x, lo, hi);
    }
    if (f == "select") {
        Expr a = args[1], b = args[2];
        promote(a, b);
        return Halide::select(args[0], a, b);
    }
    if (f == "exp")
        return Halide::exp(real(args[0]));
    if (f == "log")
        return Halide::log(real(args[0]));
    if (f == "sqrt")
        return Halide::sqrt(real(args[0]));
    if (f == "tanh")
        return Halide::tanh(real(args[0]));
    if (f == "floor")
        return Halide::floor(real(args[0]));
    if (f == "ceil")
        return Halide::ceil(real(args[0]));
    if (f == "float")
        return real(args[0]);
    if (f == "int")
        return Halide::cast<int>(args[0]);
    throw std::logic_error("attngen: lowering an unchecked call to '" + f + "'");
}

Expr lower_binary(const std::string &op, Expr a, Expr b) {
    if (op == "&&")
        return a && b;
    if (op == "||")
        return a || b;
    promote(a, b);
    if (op == "+")
        return a + b;
    if (op == "-")
        return a - b;
    if (op == "*")
        return a * b;
    if (op == "/")
        return a / b;
    if (op == "%")
        return a % b;
    if (op == "<")
        return a < b;
    if (op == "<=")
        return a <= b;
    if (op == ">")
        return a > b;
    if (op == ">=")
        return a >= b;
    if (op == "==")
        return a == b;
    if (op == "!=")
        return a != b;
    throw std::logic_error("attngen: lowering an unchecked operator '" + op + "'");
}

} // namespace

Expr lower_expression(const ModExpr &expr, const LoweringContext &context) {
    std::vector<Expr> operands;
    for (const ModExprPtr &operand : expr.operands)
        operands.push_back(lower_expression(*operand, context));

    switch (expr.kind) {
    case ModExpr::Kind::number:
        if (expr.is_integer)
            return Expr(static_cast<int>(expr.number));
        return Expr(static_cast<float>(expr.number));
    case ModExpr::Kind::boolean:
        return Halide::cast<bool>(expr.number != 0);
    case ModExpr::Kind::variable:
        if (expr.name == "score" && context.score.defined())
            return context.score;
        if (expr.name == "b")
            return context.b;
        if (expr.name == "h")
            return context.h;
        if (expr.name == "q")
            return context.q;
        if (expr.name == "k")
            return context.k;
        break;
    case ModExpr::Kind::scalar:
        if (auto found = context.scalars.find(expr.name); found != context.scalars.end())
            return found->second;
        break;
    case ModExpr::Kind::tensor: {
        auto func = context.tensors.find(expr.name);
        auto extents = context.tensor_extents.find(expr.name);
        if (func == context.tensors.end() || extents == context.tensor_extents.end() ||
            extents->second.size() != operands.size())
            break;
        // Indices are written outermost first; Halide's dimension 0 is the innermost.
        std::vector<Expr> at;
        for (size_t i = operands.size(); i-- > 0;)
            at.push_back(Halide::clamp(Halide::cast<int>(operands[i]), 0,
                                       extents->second[operands.size() - 1 - i] - 1));
        return func->second(at);
    }
    case ModExpr::Kind::unary:
        if (expr.name == "-")
            return -operands[0];
        if (expr.name == "!")
            return !operands[0];
        break;
    case ModExpr::Kind::binary:
        return lower_binary(expr.name, operands[0], operands[1]);
    case ModExpr::Kind::call:
        return lower_call(expr, operands);
    }
    throw std::logic_error("attngen: lowering an unchecked expression '" + to_string(expr) + "'");
}

} // namespace attngen
