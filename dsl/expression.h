// Expressions of the attention language: score modifications (score_mod) and mask predicates,
// over the score, the indices b, h, q, k, and named run-time tensors and scalars that a layer
// declares. One tree serves the .attn front end, the C++ description API, the lowering to
// Halide and the plain reference. No Halide here.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace attngen {

/** Where an expression came from in a .attn file; line 0 means "built in C++". 1-based. */
struct SourceRange {
    int line = 0;
    int column = 0;
    int length = 0;
};

struct ModExpr;
using ModExprPtr = std::shared_ptr<const ModExpr>;

/**
 * One node. Types: integers (b, h, q, k, integer literals, i32 tensors and scalars), reals
 * (score, real literals, f32 tensors and scalars, and any arithmetic with a real operand) and
 * booleans (comparisons, !, &&, ||). Integer / and % are Euclidean, as Halide defines them:
 * a % b is in [0, |b|), a == (a / b) * b + a % b, and x / 0 = x % 0 = 0.
 */
struct ModExpr {
    enum class Kind {
        number,   ///< `number`; integer when `is_integer`
        boolean,  ///< true or false, in `number` (1 or 0)
        variable, ///< `name` is score, b, h, q or k
        scalar,   ///< a declared run-time scalar `name`
        tensor,   ///< a read of declared tensor `name` at `operands` (indices are clamped)
        unary,    ///< `name` is "-" or "!"; one operand
        binary,   ///< `name` is + - * / % < <= > >= == != && ||; two operands
        call,     ///< `name` is a function of the language (see functions()); its arguments
    };
    Kind kind = Kind::number;
    std::string name;
    double number = 0;
    bool is_integer = false;
    std::vector<ModExprPtr> operands;
    SourceRange where;
};

/** The language's functions and their argument counts. */
struct FunctionInfo {
    const char *name;
    int arguments;
};
const std::vector<FunctionInfo> &functions();

/** The index variables and their meanings, for messages and documentation. */
bool is_index_variable(const std::string &name); ///< b, h, q, k

/** A dimension of a run-time tensor: a size of the call, or a fixed extent. */
struct TensorDim {
    enum class Symbol { fixed, batch, heads, kv_heads, queries, keys, head_dim };
    Symbol symbol = Symbol::fixed;
    int extent = 0; ///< when fixed
};

/** A named tensor the application passes at run time, row-major, f32 or i32. */
struct RuntimeTensor {
    std::string name;
    bool is_int32 = false;
    std::vector<TensorDim> dims; ///< outermost first, 1 to 4 of them
};

/** A named scalar the application passes at run time. */
struct RuntimeScalar {
    std::string name;
    bool is_int32 = false;
};

const char *symbol_name(TensorDim::Symbol symbol); ///< "batch", "heads", ...

/** Canonical text of an expression (fully parenthesized where precedence needs it). */
std::string to_string(const ModExpr &expr);

// Building expressions from C++: the embedded form of the language.
ModExprPtr number(double value);
ModExprPtr integer(long value);
ModExprPtr boolean(bool value);               ///< true or false
ModExprPtr variable(const std::string &name); ///< score, b, h, q, k
ModExprPtr scalar(const std::string &name);
ModExprPtr tensor(const std::string &name, std::vector<ModExprPtr> indices);
ModExprPtr unary(const std::string &op, ModExprPtr operand);
ModExprPtr binary(const std::string &op, ModExprPtr left, ModExprPtr right);
ModExprPtr call(const std::string &function, std::vector<ModExprPtr> arguments);

} // namespace attngen
