// The expression tree of the attention language: its functions, builders and canonical text.
#include "expression.h"

#include <charconv>
#include <cmath>
#include <utility>

namespace attngen {

namespace {

ModExprPtr make(ModExpr::Kind kind, std::string name, std::vector<ModExprPtr> operands = {}) {
    auto node = std::make_shared<ModExpr>();
    node->kind = kind;
    node->name = std::move(name);
    node->operands = std::move(operands);
    return node;
}

// Binding strength of what an expression prints as; higher binds tighter. A negative number
// prints with a leading '-' and so binds like a unary operator.
enum Precedence {
    lowest,
    logical_or,
    logical_and,
    comparison,
    additive,
    multiplicative,
    prefix,
    atom
};

Precedence binary_precedence(const std::string &op) {
    if (op == "||")
        return logical_or;
    if (op == "&&")
        return logical_and;
    if (op == "<" || op == "<=" || op == ">" || op == ">=" || op == "==" || op == "!=")
        return comparison;
    if (op == "+" || op == "-")
        return additive;
    if (op == "*" || op == "/" || op == "%")
        return multiplicative;
    return lowest;
}

Precedence precedence(const ModExpr *expr) {
    if (!expr)
        return atom;
    switch (expr->kind) {
    case ModExpr::Kind::binary:
        return binary_precedence(expr->name);
    case ModExpr::Kind::unary:
        return prefix;
    case ModExpr::Kind::number:
        return std::signbit(expr->number) ? prefix : atom;
    default:
        return atom;
    }
}

std::string real_text(double value) {
    char buffer[64];
    std::to_chars_result result = std::to_chars(buffer, buffer + sizeof buffer, value);
    std::string text(buffer, result.ptr);
    // "2" would read back as an integer; "inf" and "nan" cannot be written in the language at
    // all (the checker refuses them), so they are left as they are.
    if (text.find_first_of(".ein") == std::string::npos)
        text += ".0";
    return text;
}

std::string number_text(const ModExpr &expr) {
    if (expr.is_integer && std::isfinite(expr.number) && std::fabs(expr.number) < 9.0e18 &&
        std::trunc(expr.number) == expr.number)
        return std::to_string(static_cast<long long>(expr.number));
    return real_text(expr.number);
}

std::string list_text(const std::vector<ModExprPtr> &items) {
    std::string text;
    for (size_t i = 0; i < items.size(); ++i)
        text += (i ? ", " : "") + (items[i] ? to_string(*items[i]) : std::string("?"));
    return text;
}

std::string operand_text(const ModExprPtr &operand, bool parenthesize) {
    std::string text = operand ? to_string(*operand) : "?";
    return parenthesize ? "(" + text + ")" : text;
}

} // namespace

const std::vector<FunctionInfo> &functions() {
    static const std::vector<FunctionInfo> table = {
        {"abs", 1},    {"min", 2},   {"max", 2},  {"clamp", 3}, {"exp", 1},
        {"log", 1},    {"sqrt", 1},  {"tanh", 1}, {"floor", 1}, {"ceil", 1},
        {"select", 3}, {"float", 1}, {"int", 1},
    };
    return table;
}

bool is_index_variable(const std::string &name) {
    return name == "b" || name == "h" || name == "q" || name == "k";
}

const char *symbol_name(TensorDim::Symbol symbol) {
    switch (symbol) {
    case TensorDim::Symbol::fixed:
        return "fixed";
    case TensorDim::Symbol::batch:
        return "batch";
    case TensorDim::Symbol::heads:
        return "heads";
    case TensorDim::Symbol::kv_heads:
        return "kv_heads";
    case TensorDim::Symbol::queries:
        return "queries";
    case TensorDim::Symbol::keys:
        return "keys";
    case TensorDim::Symbol::head_dim:
        return "head_dim";
    }
    return "fixed";
}

std::string to_string(const ModExpr &expr) {
    switch (expr.kind) {
    case ModExpr::Kind::number:
        return number_text(expr);
    case ModExpr::Kind::boolean:
        return expr.number != 0 ? "true" : "false";
    case ModExpr::Kind::variable:
    case ModExpr::Kind::scalar:
        return expr.name;
    case ModExpr::Kind::tensor:
        return expr.name + "[" + list_text(expr.operands) + "]";
    case ModExpr::Kind::call:
        return expr.name + "(" + list_text(expr.operands) + ")";
    case ModExpr::Kind::unary: {
        // A number right after '-' reads back as a negative literal, so a negated literal keeps
        // its parentheses: unary("-", integer(1)) prints "-(1)", integer(-1) prints "-1".
        // Prefix operators stack without them ("- -x", "!!b"), so that printing never nests
        // deeper than the tree does.
        const ModExprPtr operand = expr.operands.empty() ? nullptr : expr.operands[0];
        bool literal = operand && operand->kind == ModExpr::Kind::number;
        bool parenthesize = literal || precedence(operand.get()) < prefix;
        std::string text = operand_text(operand, parenthesize);
        bool separate = expr.name == "-" && !text.empty() && text[0] == '-';
        return expr.name + (separate ? " " : "") + text;
    }
    case ModExpr::Kind::binary: {
        Precedence own = binary_precedence(expr.name);
        const ModExprPtr left = expr.operands.size() > 0 ? expr.operands[0] : nullptr;
        const ModExprPtr right = expr.operands.size() > 1 ? expr.operands[1] : nullptr;
        // Left-associative, and comparisons do not associate at all.
        Precedence left_precedence = precedence(left.get());
        bool left_parens =
            left_precedence < own || (own == comparison && left_precedence == comparison);
        bool right_parens = precedence(right.get()) <= own;
        return operand_text(left, left_parens) + " " + expr.name + " " +
               operand_text(right, right_parens);
    }
    }
    return "?";
}

ModExprPtr number(double value) {
    auto node = std::make_shared<ModExpr>();
    node->kind = ModExpr::Kind::number;
    node->number = value;
    return node;
}

ModExprPtr integer(long value) {
    auto node = std::make_shared<ModExpr>();
    node->kind = ModExpr::Kind::number;
    node->number = static_cast<double>(value);
    node->is_integer = true;
    return node;
}

ModExprPtr boolean(bool value) {
    auto node = std::make_shared<ModExpr>();
    node->kind = ModExpr::Kind::boolean;
    node->number = value ? 1 : 0;
    return node;
}

ModExprPtr variable(const std::string &name) {
    return make(ModExpr::Kind::variable, name);
}

ModExprPtr scalar(const std::string &name) {
    return make(ModExpr::Kind::scalar, name);
}

ModExprPtr tensor(const std::string &name, std::vector<ModExprPtr> indices) {
    return make(ModExpr::Kind::tensor, name, std::move(indices));
}

ModExprPtr unary(const std::string &op, ModExprPtr operand) {
    return make(ModExpr::Kind::unary, op, {std::move(operand)});
}

ModExprPtr binary(const std::string &op, ModExprPtr left, ModExprPtr right) {
    return make(ModExpr::Kind::binary, op, {std::move(left), std::move(right)});
}

ModExprPtr call(const std::string &function, std::vector<ModExprPtr> arguments) {
    return make(ModExpr::Kind::call, function, std::move(arguments));
}

} // namespace attngen
