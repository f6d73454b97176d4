// See packed_problem.h.
#include "packed_problem.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <utility>

namespace attngen_test {

namespace {

/** Rows [0, len) of batch entry b of a (B, outer, all, width) tensor, as (1, outer, len, width). */
std::vector<double> slice(const std::vector<double> &tensor, int b, int outer, int all, int len,
                          int width) {
    std::vector<double> rows;
    if (tensor.empty())
        return rows;
    for (int o = 0; o < outer; o++) {
        const auto first = tensor.begin() + ((static_cast<ptrdiff_t>(b) * outer + o) * all) * width;
        rows.insert(rows.end(), first, first + static_cast<ptrdiff_t>(len) * width);
    }
    return rows;
}

/** Sequence b of a batched reference problem, cut to its lq queries and lk keys. */
ReferenceProblem sequence_reference(const ReferenceProblem &all, int b, int lq, int lk) {
    ReferenceProblem p = all;
    p.batch = 1;
    p.query_len = lq;
    p.key_len = lk;
    const int Dv = all.value_dim > 0 ? all.value_dim : all.head_dim;
    p.query = slice(all.query, b, all.heads, all.query_len, lq, all.head_dim);
    p.key = slice(all.key, b, all.kv_heads, all.key_len, lk, all.head_dim);
    p.value = slice(all.value, b, all.kv_heads, all.key_len, lk, Dv);
    p.x = slice(all.x, b, 1, all.query_len, lq, all.model_dim);
    p.context = slice(all.context, b, 1, all.key_len, lk, all.model_dim);
    const size_t pairs = static_cast<size_t>(all.rope.rotary_dim / 2) * lk;
    if (!p.rope.cos_table.empty()) {
        p.rope.cos_table.resize(pairs);
        p.rope.sin_table.resize(pairs);
    }
    return p;
}

int longest(const std::vector<int> &lengths) {
    return std::max(1, *std::max_element(lengths.begin(), lengths.end()));
}

} // namespace

PackedProblem::PackedProblem(const attngen::Layer &layer, std::vector<int> queries,
                             std::vector<int> keys, uint32_t seed)
    : info(layer.info), query_lengths(std::move(queries)),
      key_lengths(info.projections && !info.cross_attention ? query_lengths : std::move(keys)),
      problem(info, static_cast<int>(query_lengths.size()), longest(query_lengths),
              longest(key_lengths), seed),
      query_offsets(offsets_of(query_lengths)), key_offsets(offsets_of(key_lengths)),
      out(info.dtype, static_cast<size_t>(query_offsets.back()) * row_width()),
      lse(static_cast<size_t>(query_offsets.back()) * info.heads, -7.0f) {
    std::vector<float> scratch(problem.out_elements());
    args = problem.arguments(scratch.data());
    auto pack = [&](attngen::Tensor &tensor, const std::vector<int> &lengths) {
        if (!tensor.given())
            return;
        packed.push_back(pack_rows(tensor, lengths));
        tensor = packed.back().view;
    };
    pack(args.query, query_lengths);
    pack(args.x, query_lengths);
    pack(args.key, key_lengths);
    pack(args.value, key_lengths);
    pack(args.context, key_lengths);
    const int64_t batch = static_cast<int64_t>(query_lengths.size());
    args.query_offsets = attngen::view(query_offsets.data(), {batch + 1});
    if (!info.projections)
        args.key_offsets = attngen::view(key_offsets.data(), {batch + 1});
    if (info.cross_attention)
        args.key_offsets = attngen::view(key_offsets.data(), {batch + 1});
    const int64_t total = query_offsets.back();
    args.out =
        info.out_projection
            ? attngen::mutable_view(out.data(), info.dtype, {total, info.model_dim})
            : attngen::mutable_view(out.data(), info.dtype, {total, info.heads, info.value_dim});
    if (info.lse)
        args.lse = attngen::mutable_view(lse.data(), {total, info.heads});
}

size_t PackedProblem::row_width() const {
    return static_cast<size_t>(info.out_projection ? info.model_dim : info.heads * info.value_dim);
}
/** Sequence b's output rows (1, H, Lq, Dv) or (1, Lq, M), as the reference lays them out. */
std::vector<float> PackedProblem::output_rows(int b) const {
    const std::vector<float> all = out.values();
    const size_t first = static_cast<size_t>(query_offsets[static_cast<size_t>(b)]);
    const int lq = query_lengths[static_cast<size_t>(b)];
    std::vector<float> rows;
    if (info.out_projection) {
        rows.assign(all.begin() + static_cast<ptrdiff_t>(first * row_width()),
                    all.begin() + static_cast<ptrdiff_t>((first + lq) * row_width()));
        return rows;
    }
    for (int h = 0; h < info.heads; h++)
        for (int t = 0; t < lq; t++) {
            const auto row = all.begin() + static_cast<ptrdiff_t>(((first + t) * info.heads + h) *
                                                                  info.value_dim);
            rows.insert(rows.end(), row, row + info.value_dim);
        }
    return rows;
}
/** Sequence b's lse (1, H, Lq). */
std::vector<float> PackedProblem::lse_rows(int b) const {
    const size_t first = static_cast<size_t>(query_offsets[static_cast<size_t>(b)]);
    std::vector<float> rows;
    for (int h = 0; h < info.heads; h++)
        for (int t = 0; t < query_lengths[static_cast<size_t>(b)]; t++)
            rows.push_back(lse[(first + t) * info.heads + h]);
    return rows;
}

/** Runs a packed problem and checks every sequence against the reference of it alone. */
void check_packed(const attngen::Layer &layer, const std::vector<int> &queries,
                  const std::vector<int> &keys, uint32_t base_seed,
                  const std::function<void(const Problem &, ReferenceProblem &)> &modify) {
    const uint32_t seed = test_seed(base_seed);
    INFO("layer " << layer.info.name << ", seed " << seed << " (set ATTNGEN_TEST_SEED to vary)");
    PackedProblem packed(layer, queries, keys, seed);
    const attngen::Status status = attngen::run(layer, packed.args);
    INFO(status.message());
    REQUIRE(status.ok());
    ReferenceProblem all = packed.problem.reference();
    if (modify)
        modify(packed.problem, all);
    for (size_t b = 0; b < queries.size(); b++) {
        const int lq = packed.query_lengths[b], lk = packed.key_lengths[b];
        INFO("sequence " << b << ": " << lq << " queries, " << lk << " keys");
        if (lq == 0)
            continue;
        std::vector<double> want_lse;
        const ReferenceProblem one = sequence_reference(all, static_cast<int>(b), lq, lk);
        const std::vector<double> want =
            reference_attention(one, layer.info.lse ? &want_lse : nullptr);
        const double error = relative_error(packed.output_rows(static_cast<int>(b)), want);
        INFO("error " << error << ", tolerance " << tolerance_for(layer.info.dtype));
        CHECK(error <= tolerance_for(layer.info.dtype));
        if (layer.info.lse)
            CHECK(lse_error(packed.lse_rows(static_cast<int>(b)), want_lse) <= lse_tolerance);
    }
}

} // namespace attngen_test
