// The language's semantics, written out plainly: integers stay integers (Euclidean / and %,
// x / 0 = x % 0 = 0), anything with a real is real, and tensor indices are clamped.
#include "reference_expression.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace attngen_test {

namespace {

struct Value {
    double number;
    bool is_int;
};

// Euclidean, as Halide defines integer / and %: a % b in [0, |b|), a == (a / b) * b + a % b.
double euclid_mod(double a, double b) {
    return b == 0 ? 0 : a - std::abs(b) * std::floor(a / std::abs(b));
}
double euclid_div(double a, double b) {
    return b == 0 ? 0 : (a - euclid_mod(a, b)) / b;
}

Value eval(const attngen::ModExpr &e, const ReferenceBindings &env, double score, int b, int h,
           int q, int k) {
    using Kind = attngen::ModExpr::Kind;
    std::vector<Value> args;
    for (const attngen::ModExprPtr &operand : e.operands)
        args.push_back(eval(*operand, env, score, b, h, q, k));
    auto both_int = [&] { return args[0].is_int && args[1].is_int; };
    switch (e.kind) {
    case Kind::number:
        return {e.number, e.is_integer};
    case Kind::boolean:
        return {e.number != 0 ? 1.0 : 0.0, true};
    case Kind::variable:
        if (e.name == "score")
            return {score, false};
        return {static_cast<double>(e.name == "b"   ? b
                                    : e.name == "h" ? h
                                    : e.name == "q" ? q
                                                    : k),
                true};
    case Kind::scalar: {
        const auto &scalar = env.scalars.at(e.name);
        return {scalar.first, scalar.second};
    }
    case Kind::tensor: {
        const ReferenceTensor &t = env.tensors.at(e.name);
        int64_t offset = 0;
        for (size_t i = 0; i < t.shape.size(); i++) {
            int64_t index =
                static_cast<int64_t>(args[i].is_int ? args[i].number : std::trunc(args[i].number));
            offset = offset * t.shape[i] + std::clamp<int64_t>(index, 0, t.shape[i] - 1);
        }
        return {t.values[static_cast<size_t>(offset)], t.is_int32};
    }
    case Kind::unary:
        return e.name == "-" ? Value{-args[0].number, args[0].is_int}
                             : Value{args[0].number != 0 ? 0.0 : 1.0, true};
    case Kind::binary: {
        const double x = args[0].number, y = args[1].number;
        const std::string &op = e.name;
        if (op == "+" || op == "-" || op == "*")
            return {op == "+" ? x + y : op == "-" ? x - y : x * y, both_int()};
        if (op == "/")
            return both_int() ? Value{euclid_div(x, y), true} : Value{x / y, false};
        if (op == "%")
            return {euclid_mod(x, y), true};
        bool result = op == "<"    ? x < y
                      : op == "<=" ? x <= y
                      : op == ">"  ? x > y
                      : op == ">=" ? x >= y
                      : op == "==" ? x == y
                      : op == "!=" ? x != y
                      : op == "&&" ? (x != 0 && y != 0)
                                   : (x != 0 || y != 0);
        return {result ? 1.0 : 0.0, true};
    }
    case Kind::call: {
        const std::string &f = e.name;
        if (f == "abs")
            return {std::abs(args[0].number), args[0].is_int};
        if (f == "min" || f == "max")
            return {f == "min" ? std::min(args[0].number, args[1].number)
                               : std::max(args[0].number, args[1].number),
                    both_int()};
        if (f == "clamp")
            return {std::min(std::max(args[0].number, args[1].number), args[2].number),
                    args[0].is_int && args[1].is_int && args[2].is_int};
        if (f == "select")
            return {args[0].number != 0 ? args[1].number : args[2].number,
                    args[1].is_int && args[2].is_int};
        if (f == "exp")
            return {std::exp(args[0].number), false};
        if (f == "log")
            return {std::log(args[0].number), false};
        if (f == "sqrt")
            return {std::sqrt(args[0].number), false};
        if (f == "tanh")
            return {std::tanh(args[0].number), false};
        if (f == "floor")
            return {std::floor(args[0].number), false};
        if (f == "ceil")
            return {std::ceil(args[0].number), false};
        if (f == "float")
            return {args[0].number, false};
        if (f == "int")
            return {std::trunc(args[0].number), true};
        break;
    }
    }
    throw std::logic_error("reference: cannot evaluate '" + attngen::to_string(e) + "'");
}

} // namespace

double evaluate(const attngen::ModExpr &expr, const ReferenceBindings &bindings, double score,
                int b, int h, int q, int k) {
    return eval(expr, bindings, score, b, h, q, k).number;
}

} // namespace attngen_test
