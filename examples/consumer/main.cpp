// Runs the layer generated from my_attention.attn and checks it against attention written out
// plainly in double precision, with the same ALiBi modification.
#include "my_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
    const int B = 2, H = 4, L = 37, D = 32;
    const unsigned seed = 7;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> q(B * H * L * D), k(q.size()), v(q.size()), out(q.size());
    for (auto *tensor : {&q, &k, &v})
        for (float &x : *tensor)
            x = uniform(rng);
    std::vector<float> slope(H);
    for (int h = 0; h < H; h++)
        slope[h] = std::pow(2.0f, -8.0f * (h + 1) / H);

    attngen::Arguments args;
    args.query = attngen::view(q.data(), {B, H, L, D});
    args.key = attngen::view(k.data(), {B, H, L, D});
    args.value = attngen::view(v.data(), {B, H, L, D});
    args.set_tensor("slope", attngen::view(slope.data(), {H}));
    args.out = attngen::mutable_view(out.data(), {B, H, L, D});
    attngen::Status status = alibi_causal(args);
    if (!status) {
        std::fprintf(stderr, "%s\n", status.message().c_str());
        return 1;
    }

    double max_error = 0;
    const double scale = 1 / std::sqrt(double(D));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < L; i++) {
                auto at = [&](const std::vector<float> &t, int row, int d) {
                    return double(t[((b * H + h) * L + row) * D + d]);
                };
                std::vector<double> p(i + 1);
                double row_max = -INFINITY, total = 0;
                for (int j = 0; j <= i; j++) { // causal: keys up to the query
                    double dot = 0;
                    for (int d = 0; d < D; d++)
                        dot += at(q, i, d) * at(k, j, d);
                    p[j] = scale * dot + slope[h] * (j - i);
                    row_max = std::max(row_max, p[j]);
                }
                for (double &x : p)
                    total += x = std::exp(x - row_max);
                for (int d = 0; d < D; d++) {
                    double sum = 0;
                    for (int j = 0; j <= i; j++)
                        sum += p[j] / total * at(v, j, d);
                    max_error = std::max(max_error, std::abs(sum - at(out, i, d)));
                }
            }
    const bool ok = max_error <= 1e-5;
    std::printf("alibi_causal from my_attention.attn: B=%d H=%d L=%d D=%d seed %u, max error "
                "%.3g (tolerance 1e-5): %s\n",
                B, H, L, D, seed, max_error, ok ? "ok" : "MISMATCH");
    return ok ? 0 : 1;
}
