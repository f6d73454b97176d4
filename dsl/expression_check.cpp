// Type checking of expressions and of the run-time inputs a layer declares.
#include "expression_check.h"

#include "spelling.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <optional>
#include <unordered_map>

namespace attngen {

namespace {

const char *type_phrase(ExprType type) {
    switch (type) {
    case ExprType::boolean:
        return "a boolean";
    case ExprType::integer:
        return "an integer";
    case ExprType::real:
        return "a real";
    }
    return "a real";
}

bool is_number(ExprType type) {
    return type != ExprType::boolean;
}

ExprType promote(ExprType a, ExprType b) {
    return a == ExprType::real || b == ExprType::real ? ExprType::real : ExprType::integer;
}

std::string plural(size_t count, const char *one, const char *many) {
    return std::to_string(count) + " " + (count == 1 ? one : many);
}

const FunctionInfo *find_function(const std::string &name) {
    for (const FunctionInfo &function : functions())
        if (name == function.name)
            return &function;
    return nullptr;
}

// Walks one tree. A subexpression that already has an error yields no type, so that one
// mistake is reported once rather than again by every operator above it.
class Checker {
  public:
    /** `types`, when given, receives the type of every node that has one. */
    Checker(const ExprContext &context, std::vector<ExprError> &errors,
            std::unordered_map<const ModExpr *, ExprType> *types = nullptr)
        : context_(context), errors_(errors), errors_before_(errors.size()), types_(types) {
        if (context.tensors)
            for (const RuntimeTensor &tensor : *context.tensors)
                tensors_.emplace(tensor.name, &tensor);
        if (context.scalars)
            for (const RuntimeScalar &scalar : *context.scalars)
                scalars_.emplace(scalar.name, &scalar);
    }

    std::optional<ExprType> check(const ModExpr &expr) {
        std::optional<ExprType> type = check_node(expr);
        if (type && types_)
            (*types_)[&expr] = *type;
        return type;
    }

  private:
    std::optional<ExprType> check_node(const ModExpr &expr) {
        switch (expr.kind) {
        case ModExpr::Kind::number:
            return check_number(expr);
        case ModExpr::Kind::boolean:
            return ExprType::boolean;
        case ModExpr::Kind::variable:
            return check_variable(expr);
        case ModExpr::Kind::scalar:
            return check_scalar(expr);
        case ModExpr::Kind::tensor:
            return check_tensor(expr);
        case ModExpr::Kind::unary:
            return check_unary(expr);
        case ModExpr::Kind::binary:
            return check_binary(expr);
        case ModExpr::Kind::call:
            return check_call(expr);
        }
        return fail(expr, "unknown kind of expression node");
    }

    // Beyond max_errors_reported, errors still stop types but are not reported: a huge
    // generated expression full of unknown names must not cost a suggestion each.
    bool reporting() const { return errors_.size() - errors_before_ < max_errors_reported; }

    std::nullopt_t fail(const ModExpr &expr, const std::string &message) {
        if (reporting())
            errors_.push_back({expr.where, message});
        return std::nullopt;
    }

    // The types of all operands, or none when one is missing or has an error.
    std::optional<std::vector<ExprType>> check_operands(const ModExpr &expr,
                                                        const std::string &what) {
        std::vector<ExprType> types;
        bool complete = true;
        for (const ModExprPtr &operand : expr.operands) {
            if (!operand) {
                fail(expr, what + " is missing an operand");
                complete = false;
                continue;
            }
            std::optional<ExprType> type = check(*operand);
            complete = complete && type.has_value();
            types.push_back(type.value_or(ExprType::real));
        }
        if (!complete)
            return std::nullopt;
        return types;
    }

    std::optional<ExprType> check_number(const ModExpr &expr) {
        if (!std::isfinite(expr.number))
            return fail(expr, "number must be finite, got " + to_string(expr));
        if (!expr.is_integer)
            return ExprType::real;
        if (std::trunc(expr.number) != expr.number || expr.number < INT_MIN ||
            expr.number > INT_MAX)
            return fail(expr, "integer " + to_string(expr) + " does not fit in 32 bits");
        return ExprType::integer;
    }

    std::optional<ExprType> check_variable(const ModExpr &expr) {
        if (is_index_variable(expr.name))
            return ExprType::integer;
        if (expr.name != "score")
            return fail(expr, "unknown variable '" + expr.name +
                                  "'; the variables are score, b, h, q and k");
        if (!context_.score_allowed)
            return fail(expr, "'score' is not available here: only score_mod reads the score");
        return ExprType::real;
    }

    const RuntimeTensor *find_tensor(const std::string &name) const {
        auto found = tensors_.find(name);
        return found != tensors_.end() ? found->second : nullptr;
    }

    const RuntimeScalar *find_scalar(const std::string &name) const {
        auto found = scalars_.find(name);
        return found != scalars_.end() ? found->second : nullptr;
    }

    std::vector<std::string> known_names(bool tensors, bool scalars) const {
        std::vector<std::string> names;
        if (tensors && context_.tensors)
            for (const RuntimeTensor &tensor : *context_.tensors)
                names.push_back(tensor.name);
        if (scalars && context_.scalars)
            for (const RuntimeScalar &scalar : *context_.scalars)
                names.push_back(scalar.name);
        return names;
    }

    std::optional<ExprType> check_scalar(const ModExpr &expr) {
        if (const RuntimeScalar *scalar = find_scalar(expr.name))
            return scalar->is_int32 ? ExprType::integer : ExprType::real;
        if (!reporting())
            return std::nullopt;
        if (const RuntimeTensor *tensor = find_tensor(expr.name))
            return fail(expr, "tensor '" + expr.name + "' is read with " +
                                  plural(tensor->dims.size(), "index", "indices") + ": " +
                                  expr.name + "[...]");
        std::vector<std::string> candidates = known_names(true, true);
        for (const char *name : {"b", "h", "q", "k"})
            candidates.push_back(name);
        if (context_.score_allowed)
            candidates.push_back("score");
        return fail(expr, "unknown name '" + expr.name + "'" + did_you_mean(expr.name, candidates));
    }

    std::optional<ExprType> check_tensor(const ModExpr &expr) {
        const RuntimeTensor *tensor = find_tensor(expr.name);
        bool complete = true;
        if (!tensor && !reporting()) {
            complete = false;
        } else if (!tensor) {
            if (find_scalar(expr.name))
                fail(expr, "'" + expr.name + "' is a scalar, not a tensor: write it without [...]");
            else
                fail(expr, "unknown tensor '" + expr.name + "'" +
                               did_you_mean(expr.name, known_names(true, false)));
            complete = false;
        } else if (tensor->dims.size() != expr.operands.size()) {
            fail(expr, "tensor '" + expr.name + "' has " +
                           plural(tensor->dims.size(), "dimension", "dimensions") +
                           " but is read with " + plural(expr.operands.size(), "index", "indices"));
            complete = false;
        }
        for (size_t i = 0; i < expr.operands.size(); ++i) {
            const ModExprPtr &index = expr.operands[i];
            if (!index) {
                complete = false;
                fail(expr, "index " + std::to_string(i + 1) + " of tensor '" + expr.name +
                               "' is missing");
                continue;
            }
            std::optional<ExprType> type = check(*index);
            if (type && *type != ExprType::integer) {
                fail(*index, "index " + std::to_string(i + 1) + " of tensor '" + expr.name +
                                 "' must be an integer, got " + type_phrase(*type) +
                                 (*type == ExprType::real ? " (int(x) truncates)" : ""));
            }
            complete = complete && type == ExprType::integer;
        }
        if (!complete)
            return std::nullopt;
        return tensor->is_int32 ? ExprType::integer : ExprType::real;
    }

    std::optional<ExprType> check_unary(const ModExpr &expr) {
        if (expr.name != "-" && expr.name != "!")
            return fail(expr, "unknown operator '" + expr.name + "'");
        if (expr.operands.size() != 1)
            return fail(expr, "operator '" + expr.name + "' takes 1 operand, got " +
                                  std::to_string(expr.operands.size()));
        std::optional<std::vector<ExprType>> types =
            check_operands(expr, "operator '" + expr.name + "'");
        if (!types)
            return std::nullopt;
        ExprType operand = (*types)[0];
        if (expr.name == "!") {
            if (operand != ExprType::boolean)
                return fail(expr, "'!' needs a boolean, got " + std::string(type_phrase(operand)));
            return ExprType::boolean;
        }
        if (!is_number(operand))
            return fail(expr, "'-' needs a number, got a boolean");
        return operand;
    }

    // "its left operand is a boolean", "its operands are a boolean and an integer", ...
    static std::string describe_operands(bool left_bad, bool right_bad, ExprType left,
                                         ExprType right) {
        if (left_bad && right_bad && left == right)
            return std::string("its operands are ") + to_string(left) + "s";
        if (left_bad && right_bad)
            return std::string("its operands are ") + type_phrase(left) + " and " +
                   type_phrase(right);
        if (left_bad)
            return std::string("its left operand is ") + type_phrase(left);
        return std::string("its right operand is ") + type_phrase(right);
    }

    std::optional<ExprType> check_binary(const ModExpr &expr) {
        const std::string &op = expr.name;
        bool arithmetic = op == "+" || op == "-" || op == "*" || op == "/";
        bool comparison =
            op == "<" || op == "<=" || op == ">" || op == ">=" || op == "==" || op == "!=";
        bool logical = op == "&&" || op == "||";
        if (!arithmetic && !comparison && !logical && op != "%")
            return fail(expr, "unknown operator '" + op + "'");
        if (expr.operands.size() != 2)
            return fail(expr, "operator '" + op + "' takes 2 operands, got " +
                                  std::to_string(expr.operands.size()));
        std::optional<std::vector<ExprType>> types = check_operands(expr, "operator '" + op + "'");
        if (!types)
            return std::nullopt;
        ExprType left = (*types)[0], right = (*types)[1];
        if (logical) {
            bool left_bad = left != ExprType::boolean, right_bad = right != ExprType::boolean;
            if (left_bad || right_bad)
                return fail(expr, "'" + op + "' needs booleans, but " +
                                      describe_operands(left_bad, right_bad, left, right));
            return ExprType::boolean;
        }
        if (op == "%") {
            bool left_bad = left != ExprType::integer, right_bad = right != ExprType::integer;
            if (left_bad || right_bad)
                return fail(expr, "'%' needs integers, but " +
                                      describe_operands(left_bad, right_bad, left, right));
            return ExprType::integer;
        }
        bool left_bad = !is_number(left), right_bad = !is_number(right);
        if (left_bad || right_bad)
            return fail(expr, "'" + op + "' needs numbers, but " +
                                  describe_operands(left_bad, right_bad, left, right));
        return comparison ? ExprType::boolean : promote(left, right);
    }

    std::optional<ExprType> check_call(const ModExpr &expr) {
        const FunctionInfo *function = find_function(expr.name);
        if (!function) {
            check_operands(expr, "call of '" + expr.name + "'");
            if (!reporting())
                return std::nullopt;
            if (find_tensor(expr.name))
                return fail(expr, "'" + expr.name + "' is a tensor: read it with " + expr.name +
                                      "[...], not " + expr.name + "(...)");
            std::vector<std::string> names;
            for (const FunctionInfo &known : functions())
                names.push_back(known.name);
            std::string suggestion = did_you_mean(expr.name, names);
            if (suggestion.empty())
                suggestion = "; the functions are abs, min, max, clamp, exp, log, sqrt, tanh, "
                             "floor, ceil, select, float and int";
            return fail(expr, "unknown function '" + expr.name + "'" + suggestion);
        }
        std::optional<std::vector<ExprType>> types =
            check_operands(expr, "call of '" + expr.name + "'");
        if (expr.operands.size() != static_cast<size_t>(function->arguments))
            return fail(expr, "'" + expr.name + "' takes " +
                                  plural(function->arguments, "argument", "arguments") + ", got " +
                                  std::to_string(expr.operands.size()));
        if (!types)
            return std::nullopt;

        bool is_select = expr.name == "select";
        bool complete = true;
        for (size_t i = 0; i < types->size(); ++i) {
            ExprType type = (*types)[i];
            std::string argument = "argument " + std::to_string(i + 1) + " of '" + expr.name + "'";
            if (is_select && i == 0) {
                if (type != ExprType::boolean) {
                    fail(*expr.operands[i],
                         argument + " (the condition) must be a boolean, got " + type_phrase(type));
                    complete = false;
                }
            } else if (!is_number(type)) {
                fail(*expr.operands[i], argument + " must be a number, got a boolean");
                complete = false;
            }
        }
        if (!complete)
            return std::nullopt;

        const std::string &name = expr.name;
        if (name == "float" || name == "exp" || name == "log" || name == "sqrt" || name == "tanh" ||
            name == "floor" || name == "ceil")
            return ExprType::real;
        if (name == "int")
            return ExprType::integer;
        ExprType result = ExprType::integer;
        for (size_t i = is_select ? 1 : 0; i < types->size(); ++i)
            result = promote(result, (*types)[i]);
        return result; // abs, min, max, clamp, select
    }

    const ExprContext &context_;
    std::vector<ExprError> &errors_;
    const size_t errors_before_;
    std::unordered_map<const ModExpr *, ExprType> *types_;
    std::unordered_map<std::string, const RuntimeTensor *> tensors_;
    std::unordered_map<std::string, const RuntimeScalar *> scalars_;
};

bool is_identifier(const std::string &name) {
    if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
        return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
}

/** Why a tensor or scalar may not take `name`: they become entry-point arguments. */
std::string why_reserved_argument(const std::string &name) {
    for (const char *argument : {"query",
                                 "key",
                                 "value",
                                 "x",
                                 "context",
                                 "wq",
                                 "wk",
                                 "wv",
                                 "wo",
                                 "bq",
                                 "bk",
                                 "bv",
                                 "bo",
                                 "key_lengths",
                                 "attn_bias",
                                 "rope_cos",
                                 "rope_sin",
                                 "sinks",
                                 "k_cache",
                                 "v_cache",
                                 "k_scales",
                                 "v_scales",
                                 "block_table",
                                 "cache_lengths",
                                 "query_lengths",
                                 "key_count",
                                 "out",
                                 "lse",
                                 "k_new",
                                 "v_new",
                                 "k_new_scales",
                                 "v_new_scales"})
        if (name == argument)
            return "a built-in argument of every layer that has it";
    if (name.rfind("__", 0) == 0)
        return "reserved for generated code (it starts with '__')";
    return why_reserved(name);
}

void check_declarations(const AttentionSpec &spec, std::vector<LayerExprError> &errors) {
    std::unordered_map<std::string, std::string> seen; // name -> "tensor x" / "scalar x"
    auto declaration = [&](const std::string &field, size_t index, const std::string &name) {
        auto fail = [&errors, field, index](const std::string &message) {
            errors.push_back({field, index, {}, message, true});
        };
        if (!is_identifier(name)) {
            fail("must be named with letters, digits and '_', starting with a letter or '_'; "
                 "got '" +
                 name + "'");
        } else if (std::string reserved = why_reserved_argument(name); !reserved.empty()) {
            fail("has a reserved name: '" + name + "' is " + reserved);
        }
        auto earlier = seen.emplace(name, field);
        if (!earlier.second)
            fail(earlier.first->second == field ? "is declared twice"
                                                : "has the same name as " + earlier.first->second);
        return fail;
    };
    for (size_t i = 0; i < spec.tensors.size(); ++i) {
        const RuntimeTensor &tensor = spec.tensors[i];
        auto fail = declaration("tensor " + tensor.name, i, tensor.name);
        if (tensor.dims.empty() || tensor.dims.size() > 4)
            fail("has " + plural(tensor.dims.size(), "dimension", "dimensions") +
                 "; a tensor has 1 to 4");
        double fixed_bytes = 4; // f32 or i32 elements
        for (size_t d = 0; d < tensor.dims.size(); ++d)
            if (tensor.dims[d].symbol == TensorDim::Symbol::fixed && tensor.dims[d].extent < 1)
                fail("has extent " + std::to_string(tensor.dims[d].extent) + " in dimension " +
                     std::to_string(d + 1) + "; a fixed extent is at least 1");
            else if (tensor.dims[d].symbol == TensorDim::Symbol::fixed)
                fixed_bytes *= tensor.dims[d].extent;
            else if (spec.cache.any() && (tensor.dims[d].symbol == TensorDim::Symbol::queries ||
                                          tensor.dims[d].symbol == TensorDim::Symbol::keys))
                fail("has a dimension of " +
                     std::string(tensor.dims[d].symbol == TensorDim::Symbol::queries ? "queries"
                                                                                     : "keys") +
                     ", which a layer with a cache does not have (its q and k are positions in "
                     "each sequence): give that dimension a fixed size");
        // An entry point accepts tensors of at most 2^31 - 1 bytes (runtime validation).
        if (fixed_bytes > INT32_MAX) {
            char elements[32];
            std::snprintf(elements, sizeof(elements), "%.4g", fixed_bytes / 4);
            fail(std::string("has ") + elements +
                 " elements of 4 bytes in its fixed extents; a tensor holds at most 2^31 - 1 "
                 "bytes");
        }
    }
    for (size_t i = 0; i < spec.scalars.size(); ++i)
        declaration("scalar " + spec.scalars[i].name, i, spec.scalars[i].name);
}

/**
 * Integer constants that Halide would fold out of 32 bits. Halide simplifies every expression
 * while it generates a layer: it folds constants, reassociating sums, products, quotients,
 * comparisons and min/max around them ((q * 65536) * 65536 becomes q * 4294967296; q / 512 <
 * 10000000 becomes q < 5120000000), and generation stops with an error where a signed 32-bit
 * fold overflowed. So that `check` refuses what generation would, each integer node gets three
 * bounds on what folding can make of it: `constant`, on an additive constant term; `factor`, on
 * the constant factor of a term with a variable; `divisor`, on a constant it is divided by,
 * which multiplies whatever folding moves across the division (x / c0 + c1 is (x + c1 * c0) /
 * c0). A variable, scalar or tensor read is (0, 1, 1); a number v is (|v|, 0, 1).
 *   a ± b, a comparison of a and b, min, max, clamp: constant = a.constant * b.divisor +
 *     b.constant * a.divisor, and the same for factor; the largest divisor;
 *   a * b: constant a.constant * b.constant, factor a.factor * b.constant + a.constant *
 *     b.factor + a.factor * b.factor; the largest divisor;
 *   a / b: a's constant and factor, divisor a.divisor * b.constant, or b's bounds where larger;
 *   a % b, select, abs, -a: the largest of each; int(x): a number's for a number, else a
 *     variable's.
 * Conservative (it refuses q * 20000000, which Halide accepts but which overflows at run time
 * for q >= 108 anyway), and checked against Halide's simplifier and code generation on
 * random expressions (tests/test_constant_folding.cpp). The lowest node whose bounds pass
 * the limits is reported, once per expression.
 */
class FoldingCheck {
  public:
    /** The largest bounds accepted, far enough below 2^31 for what a schedule folds in: lane
     * and tile offsets into constants and quotients, up to 64 lanes times a factor into the
     * stride of a vector of indices. */
    static constexpr double constant_limit = 1073741824; // 2^30
    static constexpr double factor_limit = 16777216;     // 2^24

    struct Bounds {
        double constant = 0;
        double factor = 1;
        double divisor = 1;
    };

    FoldingCheck(const std::unordered_map<const ModExpr *, ExprType> &types,
                 std::vector<ExprError> &errors)
        : types_(types), errors_(errors) {}

    /** The node's bounds, or nothing when it is neither an integer nor an integer comparison. */
    std::optional<Bounds> bounds(const ModExpr &expr) {
        std::vector<Bounds> operands;
        for (const ModExprPtr &operand : expr.operands)
            operands.push_back(bounds(*operand).value_or(Bounds{}));
        auto largest = [](const Bounds &a, const Bounds &b) {
            return Bounds{std::max(a.constant, b.constant), std::max(a.factor, b.factor),
                          std::max(a.divisor, b.divisor)};
        };
        auto combined = [](const Bounds &a, const Bounds &b) {
            return Bounds{a.constant * b.divisor + b.constant * a.divisor,
                          a.factor * b.divisor + b.factor * a.divisor,
                          std::max(a.divisor, b.divisor)};
        };
        Bounds result;
        switch (expr.kind) {
        case ModExpr::Kind::number:
            if (!expr.is_integer)
                return std::nullopt;
            result = {std::fabs(expr.number), 0, 1};
            break;
        case ModExpr::Kind::boolean:
            return std::nullopt;
        case ModExpr::Kind::variable:
        case ModExpr::Kind::scalar:
        case ModExpr::Kind::tensor:
            if (!is_integer(expr))
                return std::nullopt;
            break;
        case ModExpr::Kind::unary:
            if (!is_integer(expr))
                return std::nullopt;
            result = operands[0];
            break;
        case ModExpr::Kind::binary: {
            const std::string &op = expr.name;
            const bool compares =
                op == "<" || op == "<=" || op == ">" || op == ">=" || op == "==" || op == "!=";
            if (compares ? !(is_integer(*expr.operands[0]) && is_integer(*expr.operands[1]))
                         : !is_integer(expr))
                return std::nullopt;
            const Bounds &a = operands[0], &b = operands[1];
            if (op == "*")
                result = {a.constant * b.constant,
                          a.factor * b.constant + a.constant * b.factor + a.factor * b.factor,
                          std::max(a.divisor, b.divisor)};
            else if (op == "/")
                result = largest({a.constant, a.factor, a.divisor * b.constant}, b);
            else if (op == "%")
                result = largest(a, b);
            else // + - and the comparisons
                result = combined(a, b);
            break;
        }
        case ModExpr::Kind::call:
            if (!is_integer(expr))
                return std::nullopt;
            if (expr.name == "int") {
                const ModExpr &argument = *expr.operands[0];
                if (argument.kind == ModExpr::Kind::number)
                    result = {std::fabs(argument.number), 0, 1};
            } else if (expr.name == "abs") {
                result = operands[0];
            } else if (expr.name == "select") {
                result = largest(operands[1], operands[2]);
            } else { // min, max, clamp
                result = operands[0];
                for (size_t i = 1; i < operands.size(); ++i)
                    result = combined(result, operands[i]);
            }
            break;
        }
        // A number alone is whatever its operator makes of it: a real operator converts it.
        const bool too_large = expr.kind != ModExpr::Kind::number &&
                               (result.constant > constant_limit || result.factor > factor_limit ||
                                result.divisor > constant_limit);
        if (too_large && !reported_) {
            reported_ = true;
            errors_.push_back({expr.where, message(expr, result)});
        }
        return result;
    }

  private:
    static std::string message(const ModExpr &expr, const Bounds &bounds) {
        auto number = [](double value) {
            char text[32];
            std::snprintf(text, sizeof(text), "%.0f", value);
            return std::string(text);
        };
        const std::string advice =
            ": Halide folds integer constants together and with a schedule's offsets and vector "
            "strides, and generation would stop at a signed 32-bit overflow; use smaller "
            "integers, or reals (write 65536.0) for floating-point arithmetic";
        if (bounds.factor > factor_limit)
            return "integer arithmetic in '" + to_string(expr) + "' multiplies an index by up " +
                   "to " + number(bounds.factor) + ", more than " + number(factor_limit) +
                   " (2^24)" + advice;
        return "integer arithmetic in '" + to_string(expr) + "' folds its constants into up " +
               "to " + number(std::max(bounds.constant, bounds.divisor)) + ", more than " +
               number(constant_limit) + " (2^30)" + advice;
    }

    bool is_integer(const ModExpr &expr) const {
        auto found = types_.find(&expr);
        return found != types_.end() && found->second == ExprType::integer;
    }

    const std::unordered_map<const ModExpr *, ExprType> &types_;
    std::vector<ExprError> &errors_;
    bool reported_ = false;
};

} // namespace

std::string why_reserved(const std::string &name) {
    if (name == "score")
        return "the score";
    if (is_index_variable(name))
        return "an index variable";
    if (name == "true" || name == "false")
        return "a boolean literal";
    if (find_function(name))
        return "a function";
    return "";
}

const char *to_string(ExprType type) {
    switch (type) {
    case ExprType::boolean:
        return "boolean";
    case ExprType::integer:
        return "integer";
    case ExprType::real:
        return "real";
    }
    return "real";
}

ExprType check_expression(const ModExpr &expr, const ExprContext &context,
                          std::vector<ExprError> &errors) {
    std::unordered_map<const ModExpr *, ExprType> types;
    const size_t before = errors.size();
    const ExprType type = Checker(context, errors, &types).check(expr).value_or(ExprType::real);
    if (errors.size() == before && context.folded_by_halide)
        FoldingCheck(types, errors).bounds(expr);
    return type;
}

/** The first node of `expr` that reads the index variable `name`, or null. */
const ModExpr *find_variable(const ModExpr &expr, const char *name) {
    if (expr.kind == ModExpr::Kind::variable && expr.name == name)
        return &expr;
    for (const ModExprPtr &operand : expr.operands)
        if (operand)
            if (const ModExpr *found = find_variable(*operand, name))
                return found;
    return nullptr;
}

/**
 * A packed layer runs each sequence on its own (layout = packed): its expressions have no batch
 * index b, and its tensors no batch-, query- or key-sized dimension.
 */
void check_packed_expressions(const AttentionSpec &spec, std::vector<LayerExprError> &errors) {
    if (!spec.packed)
        return;
    for (size_t i = 0; i < spec.tensors.size(); ++i)
        for (const TensorDim &dim : spec.tensors[i].dims)
            if (dim.symbol == TensorDim::Symbol::batch ||
                dim.symbol == TensorDim::Symbol::queries || dim.symbol == TensorDim::Symbol::keys) {
                errors.push_back({"tensor " + spec.tensors[i].name,
                                  i,
                                  {},
                                  "has a " + std::string(symbol_name(dim.symbol)) +
                                      " dimension, which a packed layer (layout = packed) does "
                                      "not have: sizes are fixed, heads, kv_heads or head_dim",
                                  true});
                break;
            }
    auto check = [&](const std::string &field, size_t index, const ModExprPtr &expr) {
        if (const ModExpr *b = expr ? find_variable(*expr, "b") : nullptr)
            errors.push_back({field, index, b->where,
                              "b is not available in a packed layer (layout = packed): each "
                              "sequence runs on its own",
                              false});
    };
    check("score_mod", 0, spec.score_mod);
    for (size_t i = 0; i < spec.mask_predicates.size(); ++i)
        check("mask", i, spec.mask_predicates[i]);
}

std::vector<LayerExprError> check_layer_expressions(const AttentionSpec &spec) {
    std::vector<LayerExprError> errors;
    check_declarations(spec, errors);
    check_packed_expressions(spec, errors);

    auto check_in = [&](const std::string &field, size_t index, const ModExpr &expr,
                        bool score_allowed) -> std::optional<ExprType> {
        std::vector<ExprError> found;
        ExprType type =
            check_expression(expr, {score_allowed, &spec.tensors, &spec.scalars}, found);
        for (ExprError &error : found)
            errors.push_back({field, index, error.where, std::move(error.message), false});
        if (!found.empty())
            return std::nullopt;
        return type;
    };

    if (spec.score_mod) {
        std::optional<ExprType> type = check_in("score_mod", 0, *spec.score_mod, true);
        if (type == ExprType::boolean)
            errors.push_back({"score_mod", 0, spec.score_mod->where,
                              "must be a number (integer or real), got a boolean", true});
    }
    const size_t predicates = spec.mask_predicates.size();
    for (size_t i = 0; i < predicates; ++i) {
        std::string which = predicates > 1 ? "predicate " + std::to_string(i + 1) : "predicate";
        const ModExprPtr &predicate = spec.mask_predicates[i];
        if (!predicate) {
            errors.push_back({"mask", i, {}, which + " is missing (null)", true});
            continue;
        }
        std::optional<ExprType> type = check_in("mask", i, *predicate, false);
        if (type && *type != ExprType::boolean)
            errors.push_back({"mask", i, predicate->where,
                              which + " must be a boolean (true where the key is visible), got " +
                                  type_phrase(*type),
                              true});
    }
    return errors;
}

} // namespace attngen
