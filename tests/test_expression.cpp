// The expression tree: builders, canonical text, and the type rules check_expression applies.
#include "dsl/attention_spec.h"
#include "dsl/constant_expression.h"
#include "dsl/expression.h"
#include "dsl/expression_check.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attngen;

namespace {

const std::vector<RuntimeTensor> &tensors() {
    static const std::vector<RuntimeTensor> declared = {
        {"slope", false, {{TensorDim::Symbol::heads, 0}}},
        {"doc", true, {{TensorDim::Symbol::batch, 0}, {TensorDim::Symbol::keys, 0}}},
        {"rel_bias", false, {{TensorDim::Symbol::heads, 0}, {TensorDim::Symbol::fixed, 65}}}};
    return declared;
}

const std::vector<RuntimeScalar> &scalars() {
    static const std::vector<RuntimeScalar> declared = {{"cap", false}, {"window", true}};
    return declared;
}

// The type of `expr` in score_mod (or a mask predicate when !score_allowed), and its errors.
struct Typed {
    ExprType type;
    std::vector<std::string> errors;
};

Typed typed(const ModExprPtr &expr, bool score_allowed = true) {
    std::vector<ExprError> errors;
    ExprType type = check_expression(*expr, {score_allowed, &tensors(), &scalars()}, errors);
    Typed result{type, {}};
    for (const ExprError &error : errors)
        result.errors.push_back(error.message);
    return result;
}

ExprType type_of(const ModExprPtr &expr) {
    Typed result = typed(expr);
    INFO(to_string(*expr));
    REQUIRE(result.errors.empty());
    return result.type;
}

std::vector<std::string> errors_of(const ModExprPtr &expr, bool score_allowed = true) {
    return typed(expr, score_allowed).errors;
}

using Errors = std::vector<std::string>;

ModExprPtr score() {
    return variable("score");
}

} // namespace

TEST_CASE("the language has thirteen functions with fixed argument counts") {
    std::vector<std::pair<std::string, int>> table;
    for (const FunctionInfo &function : functions())
        table.emplace_back(function.name, function.arguments);
    CHECK(table == std::vector<std::pair<std::string, int>>{{"abs", 1},
                                                            {"min", 2},
                                                            {"max", 2},
                                                            {"clamp", 3},
                                                            {"exp", 1},
                                                            {"log", 1},
                                                            {"sqrt", 1},
                                                            {"tanh", 1},
                                                            {"floor", 1},
                                                            {"ceil", 1},
                                                            {"select", 3},
                                                            {"float", 1},
                                                            {"int", 1}});
    CHECK(is_index_variable("b"));
    CHECK(is_index_variable("k"));
    CHECK_FALSE(is_index_variable("score"));
    CHECK_FALSE(is_index_variable("x"));
    CHECK(std::string(symbol_name(TensorDim::Symbol::kv_heads)) == "kv_heads");
    CHECK(std::string(symbol_name(TensorDim::Symbol::head_dim)) == "head_dim");
}

TEST_CASE("builders make the nodes they name") {
    ModExprPtr read = tensor("slope", {variable("h")});
    CHECK(read->kind == ModExpr::Kind::tensor);
    CHECK(read->name == "slope");
    REQUIRE(read->operands.size() == 1);
    CHECK(read->operands[0]->kind == ModExpr::Kind::variable);
    CHECK(integer(3)->is_integer);
    CHECK(integer(3)->number == 3);
    CHECK_FALSE(number(3)->is_integer);
    CHECK(boolean(true)->kind == ModExpr::Kind::boolean);
    CHECK(boolean(true)->number == 1);
    CHECK(boolean(false)->number == 0);
    CHECK(binary("+", score(), integer(1))->operands.size() == 2);
    CHECK(call("clamp", {score(), integer(0), integer(1)})->kind == ModExpr::Kind::call);
    CHECK(scalar("cap")->kind == ModExpr::Kind::scalar);
    CHECK(unary("!", boolean(true))->name == "!");
    CHECK(score()->where.line == 0);
}

TEST_CASE("numbers print so that they read back as the same number and type") {
    CHECK(to_string(*integer(3)) == "3");
    CHECK(to_string(*integer(-7)) == "-7");
    CHECK(to_string(*number(2)) == "2.0");
    CHECK(to_string(*number(0.1)) == "0.1");
    CHECK(to_string(*number(0.125)) == "0.125");
    CHECK(to_string(*number(-0.5)) == "-0.5");
    CHECK(to_string(*number(1e-5)) == "1e-05");
    CHECK(to_string(*number(1e20)) == "1e+20");
    CHECK(to_string(*number(1.0 / 3.0)) == "0.3333333333333333");
    CHECK(std::stod(to_string(*number(1.0 / 3.0))) == 1.0 / 3.0);
    CHECK(to_string(*number(-0.0)) == "-0.0");
    CHECK(to_string(*boolean(true)) == "true");
}

TEST_CASE("expressions print with the parentheses their structure needs and no more") {
    ModExprPtr q = variable("q"), k = variable("k");
    CHECK(to_string(*binary("+", score(),
                            binary("*", tensor("slope", {variable("h")}), binary("-", k, q)))) ==
          "score + slope[h] * (k - q)");
    CHECK(to_string(*binary("-", binary("-", q, k), integer(1))) == "q - k - 1");
    CHECK(to_string(*binary("-", q, binary("-", k, integer(1)))) == "q - (k - 1)");
    CHECK(to_string(
              *binary("||", binary("<", k, q), binary("&&", binary("<=", k, q), boolean(true)))) ==
          "k < q || k <= q && true");
    CHECK(to_string(*binary("&&", binary("||", k, q), boolean(false))) == "(k || q) && false");
    CHECK(to_string(*binary("==", binary("<", k, q), boolean(true))) == "(k < q) == true");
    CHECK(to_string(*binary("==", boolean(true), binary("<", k, q))) == "true == (k < q)");
    CHECK(to_string(*unary("-", binary("+", q, k))) == "-(q + k)");
    CHECK(to_string(*unary("-", integer(1))) == "-(1)");
    CHECK(to_string(*unary("-", integer(-1))) == "-(-1)");
    CHECK(to_string(*unary("-", unary("-", q))) == "- -q");
    CHECK(to_string(*unary("!", unary("!", binary("<", q, k)))) == "!!(q < k)");
    CHECK(to_string(*unary("-", unary("!", q))) == "-!q");
    CHECK(to_string(*binary("*", integer(-1), q)) == "-1 * q");
    CHECK(to_string(*binary("-", integer(2), integer(-1))) == "2 - -1");
    CHECK(to_string(*unary("!", binary("<", q, k))) == "!(q < k)");
    CHECK(to_string(*binary("*", unary("-", q), k)) == "-q * k");
    CHECK(to_string(*call("clamp", {binary("+", binary("-", k, q), integer(32)), integer(0),
                                    integer(64)})) == "clamp(k - q + 32, 0, 64)");
    CHECK(to_string(*tensor("doc", {variable("b"), q})) == "doc[b, q]");
    CHECK(to_string(*call("max", {})) == "max()");
}

TEST_CASE("variables, literals, scalars and tensor reads have their declared types") {
    CHECK(type_of(score()) == ExprType::real);
    for (const char *index : {"b", "h", "q", "k"})
        CHECK(type_of(variable(index)) == ExprType::integer);
    CHECK(type_of(integer(4)) == ExprType::integer);
    CHECK(type_of(number(4)) == ExprType::real);
    CHECK(type_of(boolean(false)) == ExprType::boolean);
    CHECK(type_of(scalar("cap")) == ExprType::real);
    CHECK(type_of(scalar("window")) == ExprType::integer);
    CHECK(type_of(tensor("slope", {variable("h")})) == ExprType::real);
    CHECK(type_of(tensor("doc", {variable("b"), variable("k")})) == ExprType::integer);
}

TEST_CASE("arithmetic stays integer only when both operands are integers") {
    ModExprPtr q = variable("q"), k = variable("k");
    for (const char *op : {"+", "-", "*", "/"}) {
        CHECK(type_of(binary(op, q, k)) == ExprType::integer);
        CHECK(type_of(binary(op, q, score())) == ExprType::real);
        CHECK(type_of(binary(op, number(1), k)) == ExprType::real);
    }
    CHECK(type_of(binary("%", q, integer(4))) == ExprType::integer);
    CHECK(type_of(unary("-", q)) == ExprType::integer);
    CHECK(type_of(unary("-", score())) == ExprType::real);
    for (const char *op : {"<", "<=", ">", ">=", "==", "!="})
        CHECK(type_of(binary(op, score(), k)) == ExprType::boolean);
    CHECK(type_of(binary("&&", binary("<", k, q), boolean(true))) == ExprType::boolean);
    CHECK(type_of(unary("!", binary("<", k, q))) == ExprType::boolean);
}

TEST_CASE("functions give their documented result types") {
    ModExprPtr q = variable("q"), k = variable("k");
    CHECK(type_of(call("abs", {q})) == ExprType::integer);
    CHECK(type_of(call("abs", {score()})) == ExprType::real);
    CHECK(type_of(call("min", {q, k})) == ExprType::integer);
    CHECK(type_of(call("max", {q, score()})) == ExprType::real);
    CHECK(type_of(call("clamp", {q, integer(0), integer(64)})) == ExprType::integer);
    CHECK(type_of(call("clamp", {q, integer(0), number(64)})) == ExprType::real);
    for (const char *real : {"exp", "log", "sqrt", "tanh", "floor", "ceil", "float"}) {
        CHECK(type_of(call(real, {q})) == ExprType::real);
        CHECK(type_of(call(real, {score()})) == ExprType::real);
    }
    CHECK(type_of(call("int", {score()})) == ExprType::integer);
    CHECK(type_of(call("select", {binary("<", k, q), q, k})) == ExprType::integer);
    CHECK(type_of(call("select", {binary("<", k, q), q, score()})) == ExprType::real);
    CHECK(to_string(ExprType::boolean) == std::string("boolean"));
}

TEST_CASE("type errors name the operator, the operand and its type") {
    ModExprPtr q = variable("q"), k = variable("k"), less = binary("<", k, q);
    CHECK(errors_of(binary("+", score(), less)) ==
          Errors{"'+' needs numbers, but its right operand is a boolean"});
    CHECK(errors_of(binary("*", less, less)) ==
          Errors{"'*' needs numbers, but its operands are booleans"});
    CHECK(errors_of(binary("%", score(), integer(2))) ==
          Errors{"'%' needs integers, but its left operand is a real"});
    CHECK(errors_of(binary("<", less, k)) ==
          Errors{"'<' needs numbers, but its left operand is a boolean"});
    CHECK(errors_of(binary("&&", less, k)) ==
          Errors{"'&&' needs booleans, but its right operand is an integer"});
    CHECK(errors_of(unary("!", score())) == Errors{"'!' needs a boolean, got a real"});
    CHECK(errors_of(unary("-", less)) == Errors{"'-' needs a number, got a boolean"});
    CHECK(errors_of(binary("^", q, k)) == Errors{"unknown operator '^'"});
    CHECK(errors_of(unary("~", q)) == Errors{"unknown operator '~'"});
}

TEST_CASE("a mistake is reported once, not again by every operator above it") {
    ModExprPtr q = variable("q"), k = variable("k");
    ModExprPtr wrong = binary("%", score(), integer(2));
    CHECK(errors_of(binary("+", binary("*", wrong, q), binary("<", k, q))) ==
          Errors{"'%' needs integers, but its left operand is a real"});
    // Independent mistakes are all reported.
    CHECK(errors_of(binary("+", wrong, call("sqrt", {}))) ==
          Errors{"'%' needs integers, but its left operand is a real",
                 "'sqrt' takes 1 argument, got 0"});
}

TEST_CASE("calls check the function, the argument count and the argument types") {
    ModExprPtr q = variable("q"), k = variable("k"), less = binary("<", k, q);
    CHECK(errors_of(call("clamp", {score(), integer(0)})) ==
          Errors{"'clamp' takes 3 arguments, got 2"});
    CHECK(errors_of(call("tanhh", {score()})) ==
          Errors{"unknown function 'tanhh' (did you mean 'tanh'?)"});
    CHECK(errors_of(call("softmax", {score()})) ==
          Errors{"unknown function 'softmax'; the functions are abs, min, max, clamp, exp, log, "
                 "sqrt, tanh, floor, ceil, select, float and int"});
    CHECK(errors_of(call("slope", {variable("h")})) ==
          Errors{"'slope' is a tensor: read it with slope[...], not slope(...)"});
    CHECK(errors_of(call("select", {q, score(), score()})) ==
          Errors{"argument 1 of 'select' (the condition) must be a boolean, got an integer"});
    CHECK(errors_of(call("select", {less, less, score()})) ==
          Errors{"argument 2 of 'select' must be a number, got a boolean"});
    CHECK(errors_of(call("exp", {less})) ==
          Errors{"argument 1 of 'exp' must be a number, got a boolean"});
    CHECK(errors_of(call("int", {less})) ==
          Errors{"argument 1 of 'int' must be a number, got a boolean"});
}

TEST_CASE("names must be declared, and a close one is suggested") {
    CHECK(errors_of(scalar("cpa")) == Errors{"unknown name 'cpa' (did you mean 'cap'?)"});
    CHECK(errors_of(scalar("offset")) == Errors{"unknown name 'offset'"});
    CHECK(errors_of(scalar("scor")) == Errors{"unknown name 'scor' (did you mean 'score'?)"});
    CHECK(errors_of(scalar("scor"), false) == Errors{"unknown name 'scor'"});
    CHECK(errors_of(scalar("slope")) == Errors{"tensor 'slope' is read with 1 index: slope[...]"});
    CHECK(errors_of(tensor("slop", {variable("h")})) ==
          Errors{"unknown tensor 'slop' (did you mean 'slope'?)"});
    CHECK(errors_of(tensor("cap", {variable("h")})) ==
          Errors{"'cap' is a scalar, not a tensor: write it without [...]"});
    CHECK(errors_of(variable("x")) ==
          Errors{"unknown variable 'x'; the variables are score, b, h, q and k"});
}

TEST_CASE("tensor reads take one integer index per dimension") {
    ModExprPtr h = variable("h");
    CHECK(errors_of(tensor("rel_bias", {h})) ==
          Errors{"tensor 'rel_bias' has 2 dimensions but is read with 1 index"});
    CHECK(errors_of(tensor("slope", {h, h})) ==
          Errors{"tensor 'slope' has 1 dimension but is read with 2 indices"});
    CHECK(errors_of(tensor("rel_bias", {h, binary("/", variable("k"), number(2))})) ==
          Errors{"index 2 of tensor 'rel_bias' must be an integer, got a real (int(x) truncates)"});
    CHECK(errors_of(tensor("slope", {binary("<", h, h)})) ==
          Errors{"index 1 of tensor 'slope' must be an integer, got a boolean"});
    CHECK(errors_of(tensor("rel_bias", {h, call("floor", {score()})})) ==
          Errors{"index 2 of tensor 'rel_bias' must be an integer, got a real (int(x) truncates)"});
    CHECK(errors_of(tensor("rel_bias", {h, call("int", {call("floor", {score()})})})).empty());
}

TEST_CASE("the score is readable only where the context allows it") {
    CHECK(errors_of(binary(">", score(), number(0)), false) ==
          Errors{"'score' is not available here: only score_mod reads the score"});
    CHECK(errors_of(binary(">", score(), number(0)), true).empty());
}

TEST_CASE("literals must be finite and integers must fit in 32 bits") {
    CHECK(errors_of(number(INFINITY)) == Errors{"number must be finite, got inf"});
    CHECK(errors_of(integer(1L << 40)) == Errors{"integer 1099511627776 does not fit in 32 bits"});
    CHECK(errors_of(integer(-2147483648L)).empty());
}

TEST_CASE("malformed trees built in C++ are reported, not followed") {
    CHECK(errors_of(binary("+", score(), nullptr)) == Errors{"operator '+' is missing an operand"});
    auto lonely = std::make_shared<ModExpr>();
    lonely->kind = ModExpr::Kind::binary;
    lonely->name = "+";
    lonely->operands = {score()};
    CHECK(errors_of(lonely) == Errors{"operator '+' takes 2 operands, got 1"});
    CHECK(to_string(*binary("+", score(), nullptr)) == "score + ?");
}

TEST_CASE("error locations come from the nodes") {
    auto located = std::make_shared<ModExpr>(*scalar("nope"));
    located->where = {3, 14, 4};
    std::vector<ExprError> errors;
    check_expression(*binary("+", score(), located), {true, nullptr, nullptr}, errors);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].where.line == 3);
    CHECK(errors[0].where.column == 14);
    CHECK(errors[0].where.length == 4);
}

TEST_CASE("check_spec reports declarations, score_mod and mask predicates by field") {
    AttentionSpec spec;
    spec.heads = 2;
    spec.head_dim = 16;
    spec.tensors = tensors();
    spec.scalars = scalars();
    spec.score_mod = binary("+", score(), tensor("slope", {variable("h")}));
    spec.mask_predicates = {binary("==", tensor("doc", {variable("b"), variable("q")}),
                                   tensor("doc", {variable("b"), variable("k")}))};
    CHECK(check_spec(spec).empty());

    spec.score_mod = binary("<", score(), number(0));
    spec.mask_predicates.push_back(binary("+", variable("q"), score()));
    spec.tensors.push_back({"q", false, {{TensorDim::Symbol::heads, 0}}});
    spec.tensors.push_back({"wide", false, std::vector<TensorDim>(5)});
    spec.tensors.push_back({"empty", false, {}});
    spec.tensors.push_back({"zero", false, {{TensorDim::Symbol::fixed, 0}}});
    spec.tensors.push_back({"slope", false, {{TensorDim::Symbol::heads, 0}}});
    spec.scalars.push_back({"slope", false});
    spec.scalars.push_back({"9lives", false});
    spec.scalars.push_back({"select", false});
    spec.scalars.push_back({"key_lengths", true});
    spec.scalars.push_back({"sinks", false});
    spec.scalars.push_back({"__user_context", false});
    CHECK(describe_errors(check_spec(spec)) ==
          "tensor q: has a reserved name: 'q' is an index variable\n"
          "tensor wide: has 5 dimensions; a tensor has 1 to 4\n"
          "tensor wide: has extent 0 in dimension 1; a fixed extent is at least 1\n"
          "tensor wide: has extent 0 in dimension 2; a fixed extent is at least 1\n"
          "tensor wide: has extent 0 in dimension 3; a fixed extent is at least 1\n"
          "tensor wide: has extent 0 in dimension 4; a fixed extent is at least 1\n"
          "tensor wide: has extent 0 in dimension 5; a fixed extent is at least 1\n"
          "tensor empty: has 0 dimensions; a tensor has 1 to 4\n"
          "tensor zero: has extent 0 in dimension 1; a fixed extent is at least 1\n"
          "tensor slope: is declared twice\n"
          "scalar slope: has the same name as tensor slope\n"
          "scalar 9lives: must be named with letters, digits and '_', starting with a letter or "
          "'_'; got '9lives'\n"
          "scalar select: has a reserved name: 'select' is a function\n"
          "scalar key_lengths: has a reserved name: 'key_lengths' is a built-in argument of "
          "every layer that has it\n"
          "scalar sinks: has a reserved name: 'sinks' is a built-in argument of every layer that "
          "has it\n"
          "scalar __user_context: has a reserved name: '__user_context' is reserved for "
          "generated code (it starts with '__')\n"
          "score_mod: must be a number (integer or real), got a boolean\n"
          "mask: 'score' is not available here: only score_mod reads the score");

    spec = AttentionSpec{};
    spec.heads = 2;
    spec.head_dim = 16;
    spec.mask_predicates = {binary("+", variable("q"), variable("k")), nullptr};
    CHECK(describe_errors(check_spec(spec)) ==
          "mask: predicate 1 must be a boolean (true where the key is visible), got an integer\n"
          "mask: predicate 2 is missing (null)");
}

TEST_CASE("constant expressions evaluate with Halide's integer division") {
    Constants constants = {{"head_dim", 64}, {"heads", 8}};
    auto value = [&](const ModExprPtr &expr) {
        std::vector<ExprError> errors;
        std::optional<ConstantValue> result = evaluate_constant(*expr, constants, errors);
        INFO(to_string(*expr));
        REQUIRE(errors.empty());
        REQUIRE(result);
        return *result;
    };
    ConstantValue scale = value(binary("/", integer(1), call("sqrt", {scalar("head_dim")})));
    CHECK(scale.type == ExprType::real);
    CHECK(scale.value == 0.125);
    CHECK(value(binary("/", integer(7), integer(2))).value == 3);
    CHECK(value(binary("/", integer(-7), integer(2))).value == -4);
    CHECK(value(binary("/", integer(7), integer(-2))).value == -3);
    CHECK(value(binary("%", integer(-7), integer(2))).value == 1);
    CHECK(value(binary("%", integer(-7), integer(-2))).value == 1);
    CHECK(value(binary("/", integer(1), scalar("head_dim"))).value == 0);
    CHECK(value(call("int", {number(-2.7)})).value == -2);
    CHECK(value(call("floor", {number(-2.5)})).type == ExprType::real);
    CHECK(value(call("select", {binary(">", scalar("heads"), integer(4)), integer(1), number(2)}))
              .value == 1);
    CHECK(value(call("clamp", {integer(9), integer(0), integer(4)})).value == 4);

    auto problems = [&](const ModExprPtr &expr) {
        std::vector<ExprError> errors;
        CHECK_FALSE(evaluate_constant(*expr, constants, errors));
        std::vector<std::string> messages;
        for (const ExprError &error : errors)
            messages.push_back(error.message);
        return messages;
    };
    CHECK(problems(binary("/", integer(1), variable("q"))) ==
          Errors{"'q' is not a constant: it differs from score to score"});
    CHECK(problems(tensor("slope", {integer(0)})) ==
          Errors{"tensor 'slope' is not a constant: it is read at run time"});
    CHECK(problems(binary("%", integer(1), binary("-", scalar("heads"), integer(8)))) ==
          Errors{"division by zero in '1 % (heads - 8)'"});
    CHECK(problems(binary("*", integer(65536), integer(65536))) ==
          Errors{"integer overflow: '65536 * 65536' is outside 32 bits"});
    CHECK(problems(scalar("model_dim")) == Errors{"unknown name 'model_dim'"});
}

TEST_CASE("one expression reports at most max_errors_reported errors") {
    ModExprPtr sum = scalar("unknown0");
    for (int i = 1; i < 150; ++i)
        sum = binary("+", sum, scalar("unknown" + std::to_string(i)));
    std::vector<ExprError> errors;
    check_expression(*sum, {true, nullptr, nullptr}, errors);
    CHECK(errors.size() == max_errors_reported);
    CHECK(errors.front().message == "unknown name 'unknown0'");
}
