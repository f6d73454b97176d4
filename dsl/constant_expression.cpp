// Evaluation of constant expressions.
#include "constant_expression.h"

#include <climits>
#include <cmath>
#include <cstdlib>

namespace attngen {

namespace {

void find_non_constants(const ModExpr &expr, std::vector<ExprError> &errors) {
    if (expr.kind == ModExpr::Kind::variable) {
        errors.push_back(
            {expr.where, "'" + expr.name + "' is not a constant: it differs from score to score"});
        return;
    }
    if (expr.kind == ModExpr::Kind::tensor) {
        errors.push_back(
            {expr.where, "tensor '" + expr.name + "' is not a constant: it is read at run time"});
        return;
    }
    for (const ModExprPtr &operand : expr.operands)
        if (operand)
            find_non_constants(*operand, errors);
}

class Evaluator {
  public:
    Evaluator(const Constants &constants, std::vector<ExprError> &errors)
        : constants_(constants), errors_(errors) {}

    // Only called on trees that passed check_expression, so shapes and types are as expected.
    std::optional<ConstantValue> evaluate(const ModExpr &expr) {
        switch (expr.kind) {
        case ModExpr::Kind::number:
            return ConstantValue{expr.is_integer ? ExprType::integer : ExprType::real, expr.number};
        case ModExpr::Kind::boolean:
            return ConstantValue{ExprType::boolean, expr.number != 0 ? 1.0 : 0.0};
        case ModExpr::Kind::scalar:
            for (const auto &constant : constants_)
                if (constant.first == expr.name)
                    return ConstantValue{ExprType::integer, static_cast<double>(constant.second)};
            return fail(expr, "unknown name '" + expr.name + "'");
        case ModExpr::Kind::unary:
            return evaluate_unary(expr);
        case ModExpr::Kind::binary:
            return evaluate_binary(expr);
        case ModExpr::Kind::call:
            return evaluate_call(expr);
        case ModExpr::Kind::variable:
        case ModExpr::Kind::tensor:
            break;
        }
        return fail(expr, "'" + to_string(expr) + "' is not a constant");
    }

  private:
    std::nullopt_t fail(const ModExpr &expr, const std::string &message) {
        errors_.push_back({expr.where, message});
        return std::nullopt;
    }

    std::optional<ConstantValue> integer_result(const ModExpr &expr, double value) {
        if (value < INT_MIN || value > INT_MAX)
            return fail(expr, "integer overflow: '" + to_string(expr) + "' is outside 32 bits");
        return ConstantValue{ExprType::integer, value};
    }

    std::optional<std::vector<ConstantValue>> evaluate_operands(const ModExpr &expr) {
        std::vector<ConstantValue> values;
        for (const ModExprPtr &operand : expr.operands) {
            std::optional<ConstantValue> value = evaluate(*operand);
            if (!value)
                return std::nullopt;
            values.push_back(*value);
        }
        return values;
    }

    std::optional<ConstantValue> evaluate_unary(const ModExpr &expr) {
        std::optional<ConstantValue> operand = evaluate(*expr.operands[0]);
        if (!operand)
            return std::nullopt;
        if (expr.name == "!")
            return ConstantValue{ExprType::boolean, operand->value != 0 ? 0.0 : 1.0};
        if (operand->type == ExprType::integer)
            return integer_result(expr, -operand->value);
        return ConstantValue{ExprType::real, -operand->value};
    }

    std::optional<ConstantValue> evaluate_binary(const ModExpr &expr) {
        std::optional<std::vector<ConstantValue>> values = evaluate_operands(expr);
        if (!values)
            return std::nullopt;
        const ConstantValue left = (*values)[0], right = (*values)[1];
        const double a = left.value, b = right.value;
        const std::string &op = expr.name;
        auto truth = [](bool value) { return ConstantValue{ExprType::boolean, value ? 1.0 : 0.0}; };
        if (op == "&&")
            return truth(a != 0 && b != 0);
        if (op == "||")
            return truth(a != 0 || b != 0);
        if (op == "<")
            return truth(a < b);
        if (op == "<=")
            return truth(a <= b);
        if (op == ">")
            return truth(a > b);
        if (op == ">=")
            return truth(a >= b);
        if (op == "==")
            return truth(a == b);
        if (op == "!=")
            return truth(a != b);

        bool integers = left.type == ExprType::integer && right.type == ExprType::integer;
        if (!integers) {
            if (op == "+")
                return ConstantValue{ExprType::real, a + b};
            if (op == "-")
                return ConstantValue{ExprType::real, a - b};
            if (op == "*")
                return ConstantValue{ExprType::real, a * b};
            return ConstantValue{ExprType::real, a / b};
        }
        if (op == "+")
            return integer_result(expr, a + b);
        if (op == "-")
            return integer_result(expr, a - b);
        if (op == "*")
            return integer_result(expr, a * b);
        if (b == 0)
            return fail(expr, "division by zero in '" + to_string(expr) + "'");
        // Euclidean, as Halide divides: the remainder is never negative.
        long long dividend = static_cast<long long>(a), divisor = static_cast<long long>(b);
        long long quotient = dividend / divisor, remainder = dividend % divisor;
        if (remainder < 0) {
            remainder += std::llabs(divisor);
            quotient += divisor > 0 ? -1 : 1;
        }
        return integer_result(expr, static_cast<double>(op == "/" ? quotient : remainder));
    }

    std::optional<ConstantValue> evaluate_call(const ModExpr &expr) {
        std::optional<std::vector<ConstantValue>> values = evaluate_operands(expr);
        if (!values)
            return std::nullopt;
        const std::vector<ConstantValue> &args = *values;
        const std::string &name = expr.name;
        auto real = [](double value) { return ConstantValue{ExprType::real, value}; };
        auto promoted = [&](size_t first, double value) -> std::optional<ConstantValue> {
            for (size_t i = first; i < args.size(); ++i)
                if (args[i].type == ExprType::real)
                    return real(value);
            return integer_result(expr, value);
        };
        if (name == "exp")
            return real(std::exp(args[0].value));
        if (name == "log")
            return real(std::log(args[0].value));
        if (name == "sqrt")
            return real(std::sqrt(args[0].value));
        if (name == "tanh")
            return real(std::tanh(args[0].value));
        if (name == "floor")
            return real(std::floor(args[0].value));
        if (name == "ceil")
            return real(std::ceil(args[0].value));
        if (name == "float")
            return real(args[0].value);
        if (name == "int") {
            double truncated = std::trunc(args[0].value);
            if (!std::isfinite(truncated))
                return fail(expr, "int() of a value that is not finite: '" + to_string(expr) + "'");
            return integer_result(expr, truncated);
        }
        if (name == "abs")
            return promoted(0, std::fabs(args[0].value));
        if (name == "min")
            return promoted(0, std::fmin(args[0].value, args[1].value));
        if (name == "max")
            return promoted(0, std::fmax(args[0].value, args[1].value));
        if (name == "clamp")
            return promoted(0, std::fmin(std::fmax(args[0].value, args[1].value), args[2].value));
        if (name == "select")
            return promoted(1, args[0].value != 0 ? args[1].value : args[2].value);
        return fail(expr, "unknown function '" + name + "'");
    }

    const Constants &constants_;
    std::vector<ExprError> &errors_;
};

} // namespace

std::optional<ConstantValue> evaluate_constant(const ModExpr &expr, const Constants &constants,
                                               std::vector<ExprError> &errors) {
    size_t before = errors.size();
    find_non_constants(expr, errors);
    if (errors.size() != before)
        return std::nullopt;

    std::vector<RuntimeScalar> names;
    for (const auto &constant : constants)
        names.push_back({constant.first, true});
    ExprType type = check_expression(expr, {false, nullptr, &names, false}, errors);
    if (errors.size() != before)
        return std::nullopt;

    std::optional<ConstantValue> value = Evaluator(constants, errors).evaluate(expr);
    if (value)
        value->type = type;
    return value;
}

} // namespace attngen
