// Multi-head causal self-attention with projections and biases (model_dim 512, 8 heads of 64,
// grouped into 2 kv heads) on random input: prints the error against the double-precision
// reference and the median time of the generated layer.
#include "example_mha.h"

#include "reference_attention.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

std::vector<float> random_values(size_t count, float range, std::mt19937 &rng) {
    std::uniform_real_distribution<float> uniform(-range, range);
    std::vector<float> values(count);
    for (float &value : values)
        value = uniform(rng);
    return values;
}

std::vector<double> widen(const std::vector<float> &values) {
    return std::vector<double>(values.begin(), values.end());
}

} // namespace

int main(int argc, char **argv) {
    const attngen::LayerInfo &info = example_mha_layer().info;
    const int batch = 2, length = argc > 1 ? std::atoi(argv[1]) : 256;
    if (length < 1 || length > 16384) {
        std::fprintf(stderr, "usage: mha_self_attention [sequence length in 1..16384]\n");
        return 1;
    }
    const int M = info.model_dim, H = info.heads, Hkv = info.kv_heads, D = info.head_dim;
    const unsigned seed = 20261121;
    std::mt19937 rng(seed);
    const float w_range = 1.0f / std::sqrt(static_cast<float>(M));
    std::vector<float> x = random_values(size_t(batch) * length * M, 1.0f, rng);
    std::vector<float> wq = random_values(size_t(H) * D * M, w_range, rng);
    std::vector<float> wk = random_values(size_t(Hkv) * D * M, w_range, rng);
    std::vector<float> wv = random_values(size_t(Hkv) * D * M, w_range, rng);
    std::vector<float> wo = random_values(size_t(M) * H * D, w_range, rng);
    std::vector<float> bq = random_values(size_t(H) * D, 0.5f, rng);
    std::vector<float> bk = random_values(size_t(Hkv) * D, 0.5f, rng);
    std::vector<float> bv = random_values(size_t(Hkv) * D, 0.5f, rng);
    std::vector<float> bo = random_values(M, 0.5f, rng);
    std::vector<float> y(size_t(batch) * length * M);

    attngen::Arguments args;
    args.x = attngen::view(x.data(), {batch, length, M});
    args.wq = attngen::view(wq.data(), {H * D, M});
    args.wk = attngen::view(wk.data(), {Hkv * D, M});
    args.wv = attngen::view(wv.data(), {Hkv * D, M});
    args.wo = attngen::view(wo.data(), {M, H * D});
    args.bq = attngen::view(bq.data(), {H * D});
    args.bk = attngen::view(bk.data(), {Hkv * D});
    args.bv = attngen::view(bv.data(), {Hkv * D});
    args.bo = attngen::view(bo.data(), {M});
    args.out = attngen::mutable_view(y.data(), {batch, length, M});

    std::vector<double> times;
    for (int run = 0; run < 6; run++) {
        auto start = std::chrono::steady_clock::now();
        attngen::Status status = example_mha(args);
        auto stop = std::chrono::steady_clock::now();
        if (!status) {
            std::fprintf(stderr, "%s\n", status.message().c_str());
            return 1;
        }
        if (run > 0) // the first run warms caches and the thread pool
            times.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    }
    std::sort(times.begin(), times.end());

    attngen_test::ReferenceProblem problem;
    problem.batch = batch;
    problem.heads = H;
    problem.kv_heads = Hkv;
    problem.head_dim = D;
    problem.model_dim = M;
    problem.query_len = problem.key_len = length;
    problem.scale = info.scale;
    problem.causal = info.causal;
    problem.projections = problem.out_projection = problem.bias = true;
    problem.x = widen(x);
    problem.wq = widen(wq);
    problem.wk = widen(wk);
    problem.wv = widen(wv);
    problem.wo = widen(wo);
    problem.bq = widen(bq);
    problem.bk = widen(bk);
    problem.bv = widen(bv);
    problem.bo = widen(bo);
    std::vector<double> want = attngen_test::reference_attention(problem);
    double max_error = 0, max_value = 0;
    for (size_t i = 0; i < y.size(); i++) {
        max_error = std::max(max_error, std::abs(y[i] - want[i]));
        max_value = std::max(max_value, std::abs(want[i]));
    }

    std::printf("multi-head causal self-attention: batch %d, length %d, model_dim %d, %d heads "
                "of %d (%d kv heads), seed %u\n",
                batch, length, M, H, D, Hkv, seed);
    std::printf("max abs error vs double reference: %.3g (max |y| %.3g, relative %.3g)\n",
                max_error, max_value, max_error / std::max(max_value, 1.0));
    std::printf("median time over %zu runs: %.3f ms\n", times.size(), times[times.size() / 2]);
    return max_error / std::max(max_value, 1.0) <= 5e-6 ? 0 : 1;
}
