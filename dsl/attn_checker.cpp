// The .attn checker: lets, scale, and check_spec's rules at source locations.
#include "attn_checker.h"

#include "constant_expression.h"
#include "expression_check.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

namespace attngen {

namespace {

// The names scale may use, beside numbers and functions.
Constants scale_constants(const AttentionSpec &spec) {
    return {{"head_dim", spec.resolved_head_dim()},
            {"model_dim", spec.resolved_model_dim()},
            {"heads", spec.heads},
            {"kv_heads", spec.resolved_kv_heads()}};
}

// Why `name` cannot name a let, or "": a let may not hide what scale reads either.
std::string reserved_for_let(const std::string &name) {
    if (name == "head_dim" || name == "model_dim" || name == "heads" || name == "kv_heads")
        return "a field that scale reads";
    return why_reserved(name);
}

class LayerChecker {
  public:
    LayerChecker(const LayerSyntax &layer, DiagnosticList &diagnostics)
        : layer_(layer), diagnostics_(diagnostics) {}

    std::optional<AttentionSpec> check() {
        const size_t errors_before = diagnostics_.count();
        AttentionSpec spec = layer_.spec;

        check_let_names();
        spec.score_mod = layer_.score_mod ? resolve_root(layer_.score_mod) : nullptr;
        spec.mask_predicates.clear();
        // An expression whose lets could not be substituted is left out (and reported).
        for (const ModExprPtr &predicate : layer_.mask_predicates)
            if (ModExprPtr resolved = resolve_root(predicate))
                spec.mask_predicates.push_back(resolved);
        ModExprPtr scale = layer_.scale ? resolve_root(layer_.scale) : nullptr;
        check_unused_lets();
        // Lets only other unused lets refer to: substituted once, for cycles among them. (With
        // an error already, they may be unsubstituted only because that error stopped it.)
        if (diagnostics_.count() == errors_before)
            for (size_t i = 0; i < layer_.lets.size(); ++i)
                if (state_[i] == State::unused && let_index_.at(layer_.lets[i].name) == i) {
                    too_deep_ = false;
                    within_limits(resolve_let(i, 1).expr, layer_.lets[i].where);
                }

        check_fields(spec, scale);
        for (LayerExprError &error : check_layer_expressions(spec))
            report_layer_error(error);

        if (diagnostics_.count() != errors_before)
            return std::nullopt;
        // The checks above are check_spec's, piece by piece; anything else it finds is a bug
        // here, but must still not let an invalid layer through.
        for (const SpecError &error : check_spec(spec))
            diagnostics_.error(layer_.name_where, error.field + " " + error.message);
        if (diagnostics_.count() != errors_before)
            return std::nullopt;
        return spec;
    }

  private:
    // ---- Lets -----------------------------------------------------------------------------

    void check_let_names() {
        std::map<std::string, std::string> declared; // name -> "tensor" or "scalar"
        for (const RuntimeTensor &tensor : layer_.spec.tensors)
            declared.emplace(tensor.name, "tensor");
        for (const RuntimeScalar &scalar : layer_.spec.scalars)
            declared.emplace(scalar.name, "scalar");
        for (size_t i = 0; i < layer_.lets.size(); ++i) {
            const LayerSyntax::Let &let = layer_.lets[i];
            auto first = let_index_.find(let.name);
            if (first != let_index_.end()) {
                error(let.where, "let '" + let.name +
                                     "' is defined twice; the first definition "
                                     "is at line " +
                                     std::to_string(layer_.lets[first->second].where.line));
                continue;
            }
            let_index_[let.name] = i;
            std::string reserved = reserved_for_let(let.name);
            if (!reserved.empty())
                error(let.where, "a let cannot be named '" + let.name + "': that is " + reserved);
            auto same = declared.find(let.name);
            if (same != declared.end())
                error(let.where, "let '" + let.name + "' has the same name as " + same->second +
                                     " '" + let.name + "'");
        }
        state_.assign(layer_.lets.size(), State::unused);
        resolved_.assign(layer_.lets.size(), Resolved{});
    }

    // `expr` with its lets substituted, or null when that failed (reported).
    ModExprPtr resolve_root(const ModExprPtr &expr) {
        too_deep_ = false;
        return within_limits(resolve(expr, 1).expr, expr->where);
    }

    // `resolved`, or null when the substitution that made it went too deep or too large
    // (reported at `where`): later stages walk the whole tree, recursively.
    ModExprPtr within_limits(ModExprPtr resolved, SourceRange where) {
        if (too_deep_) {
            error(where, "expression is too deep once its lets are substituted (more than " +
                             std::to_string(max_expression_depth) + " levels)");
            return nullptr;
        }
        if (resolved && tree_size(resolved) > max_expression_nodes) {
            error(where, "expression is too large once its lets are substituted (more than " +
                             std::to_string(max_expression_nodes) + " nodes)");
            return nullptr;
        }
        return resolved;
    }

    // A substituted expression and its height (levels from it down to its deepest leaf).
    struct Resolved {
        ModExprPtr expr;
        int height = 0;
    };

    // `depth` is the level of `expr` in the substituted tree, which bounds this recursion.
    Resolved resolve(const ModExprPtr &expr, int depth) {
        if (depth > max_expression_depth) {
            too_deep_ = true;
            return {};
        }
        if (expr->kind == ModExpr::Kind::scalar) {
            auto let = let_index_.find(expr->name);
            if (let != let_index_.end())
                return resolve_let(let->second, depth);
        }
        std::vector<ModExprPtr> operands;
        bool changed = false;
        int height = 0;
        for (const ModExprPtr &operand : expr->operands) {
            Resolved resolved = resolve(operand, depth + 1);
            if (!resolved.expr)
                return {};
            changed = changed || resolved.expr != operand;
            height = std::max(height, resolved.height);
            operands.push_back(std::move(resolved.expr));
        }
        if (!changed)
            return {expr, height + 1};
        auto copy = std::make_shared<ModExpr>(*expr);
        copy->operands = std::move(operands);
        return {copy, height + 1};
    }

    Resolved resolve_let(size_t index, int depth) {
        const LayerSyntax::Let &let = layer_.lets[index];
        if (state_[index] == State::done) {
            // Substituted before, perhaps less deep than here.
            if (resolved_[index].expr &&
                depth + resolved_[index].height - 1 > max_expression_depth) {
                too_deep_ = true;
                return {};
            }
            return resolved_[index];
        }
        if (state_[index] == State::resolving) {
            // The lets from this one round to itself: the tail of the stack.
            std::string cycle;
            auto start = std::find(stack_.begin(), stack_.end(), index);
            for (auto it = start; it != stack_.end(); ++it)
                cycle.append(layer_.lets[*it].name).append(" -> ");
            error(let.where, "let '" + let.name + "' refers to itself: " + cycle + let.name);
            return {};
        }
        state_[index] = State::resolving;
        stack_.push_back(index);
        Resolved body = resolve(let.body, depth);
        stack_.pop_back();
        state_[index] = State::done;
        resolved_[index] = body;
        return body;
    }

    static size_t tree_size(const ModExprPtr &root) {
        // Shared subtrees (a let used twice) count each time: that is what later stages walk.
        std::unordered_map<const ModExpr *, size_t> sizes;
        struct Counter {
            std::unordered_map<const ModExpr *, size_t> &sizes;
            size_t operator()(const ModExpr &expr) {
                auto found = sizes.find(&expr);
                if (found != sizes.end())
                    return found->second;
                size_t size = 1;
                for (const ModExprPtr &operand : expr.operands)
                    size = std::min(size + (*this)(*operand), max_expression_nodes + 1);
                sizes[&expr] = size;
                return size;
            }
        };
        return Counter{sizes}(*root);
    }

    // Adds the names `expr` refers to as scalars (lets among them) to `names`.
    static void referenced_names(const ModExpr &expr, std::set<std::string> &names) {
        if (expr.kind == ModExpr::Kind::scalar)
            names.insert(expr.name);
        for (const ModExprPtr &operand : expr.operands)
            referenced_names(*operand, names);
    }

    // A let that nothing refers to is still checked, as generously as any use could read it.
    void check_unused_lets() {
        std::set<std::string> used;
        for (const ModExprPtr &root : {layer_.score_mod, layer_.scale})
            if (root)
                referenced_names(*root, used);
        for (const ModExprPtr &predicate : layer_.mask_predicates)
            referenced_names(*predicate, used);
        for (const LayerSyntax::Let &let : layer_.lets)
            referenced_names(*let.body, used);
        for (size_t i = 0; i < layer_.lets.size() && !diagnostics_.full(); ++i) {
            const LayerSyntax::Let &let = layer_.lets[i];
            if (used.count(let.name) || let_index_.at(let.name) != i)
                continue;
            too_deep_ = false;
            ModExprPtr body = within_limits(resolve_let(i, 1).expr, let.where);
            if (!body)
                continue;
            std::vector<RuntimeScalar> scalars = layer_.spec.scalars;
            for (const auto &constant : scale_constants(layer_.spec))
                scalars.push_back({constant.first, true});
            std::vector<ExprError> errors;
            check_expression(*body, {true, &layer_.spec.tensors, &scalars}, errors);
            for (const ExprError &found : errors)
                error(found.where, found.message);
        }
    }

    // ---- Fields and scale -----------------------------------------------------------------

    SourceRange field_where(const std::string &field) const {
        auto found = layer_.field_values.find(field);
        return found != layer_.field_values.end() ? found->second : layer_.name_where;
    }

    static std::string attn_field(const std::string &spec_field) {
        return spec_field == "cross_attention" ? "cross" : spec_field;
    }

    void check_fields(AttentionSpec &spec, const ModExprPtr &scale) {
        // The fields alone; the expressions and declarations are checked with their locations.
        AttentionSpec fields = spec;
        fields.score_mod = nullptr;
        fields.mask_predicates.clear();
        fields.tensors.clear();
        fields.scalars.clear();
        fields.scale.reset();
        bool sizes_valid = true;
        for (const SpecError &problem : check_spec(fields)) {
            std::string field = attn_field(problem.field);
            error(field_where(field), field + " " + problem.message);
            sizes_valid = sizes_valid && field != "heads" && field != "kv_heads" &&
                          field != "head_dim" && field != "model_dim";
        }
        // The scale reads the sizes: with one of them wrong, its value would only mislead.
        if (!scale || !sizes_valid)
            return;
        std::vector<ExprError> errors;
        std::optional<ConstantValue> value =
            evaluate_constant(*scale, scale_constants(spec), errors);
        for (const ExprError &found : errors)
            error(found.where.line > 0 ? found.where : field_where("scale"), found.message);
        if (!value)
            return;
        if (value->type == ExprType::boolean) {
            error(scale->where, "scale must be a number, got a boolean");
            return;
        }
        spec.scale = value->value;
        fields.scale = value->value;
        for (const SpecError &problem : check_spec(fields)) {
            if (problem.field != "scale")
                continue;
            std::string hint;
            if (value->type == ExprType::integer && value->value == 0)
                hint = " (the expression is integer arithmetic, where / truncates: write a real "
                       "number in it, as in 1.0 / head_dim)";
            error(field_where("scale"), "scale " + problem.message + hint);
        }
    }

    // ---- Declarations and expressions -----------------------------------------------------

    void report_layer_error(const LayerExprError &problem) {
        SourceRange where = problem.where;
        if (where.line == 0) {
            bool is_tensor = problem.field.rfind("tensor ", 0) == 0;
            bool is_scalar = problem.field.rfind("scalar ", 0) == 0;
            if (is_tensor && problem.index < layer_.tensor_names.size())
                where = layer_.tensor_names[problem.index];
            else if (is_scalar && problem.index < layer_.scalar_names.size())
                where = layer_.scalar_names[problem.index];
            else
                where = field_where(problem.field);
        }
        error(where, problem.about_field ? problem.field + " " + problem.message : problem.message);
    }

    void error(SourceRange where, const std::string &message) {
        diagnostics_.error(where, message);
    }

    enum class State { unused, resolving, done };

    const LayerSyntax &layer_;
    DiagnosticList &diagnostics_;
    std::map<std::string, size_t> let_index_; // the first definition of each name
    std::vector<State> state_;
    std::vector<Resolved> resolved_;
    std::vector<size_t> stack_; // lets being substituted, outermost first
    bool too_deep_ = false;
};

} // namespace

std::optional<AttentionSpec> check_layer(const LayerSyntax &layer, DiagnosticList &diagnostics) {
    if (!layer.complete)
        return std::nullopt;
    return LayerChecker(layer, diagnostics).check();
}

} // namespace attngen
