// The worked example of reference/seed_examples.md, computed by generated code:
// attention(A, A, A) over three tokens, no projections, scale = 1 and the default 1/sqrt(4).
#include "pool_default_scale.h"
#include "pool_unit_scale.h"

#include <cstdio>

namespace {

constexpr int tokens = 3, features = 4;

void print_matrix(const char *title, const float *values, int rows, int cols) {
    std::printf("%s\n", title);
    for (int r = 0; r < rows; r++) {
        std::printf("  [");
        for (int c = 0; c < cols; c++)
            std::printf("%s%.2f", c ? ", " : "", values[r * cols + c]);
        std::printf("]\n");
    }
}

} // namespace

int main() {
    const float a[tokens * features] = {0.5f, 0.1f, 0.1f, 0.2f,  // pool
                                        0.1f, 0.5f, 0.2f, 0.1f,  // beats
                                        0.5f, 0.1f, 0.2f, 0.1f}; // badminton

    // The similarity matrix A·Aᵀ is plain arithmetic; the generated layer does the rest.
    float similarity[tokens * tokens];
    for (int i = 0; i < tokens; i++)
        for (int j = 0; j < tokens; j++) {
            float dot = 0;
            for (int f = 0; f < features; f++)
                dot += a[i * features + f] * a[j * features + f];
            similarity[i * tokens + j] = dot;
        }
    print_matrix("similarity A·Aᵀ:", similarity, tokens, tokens);

    float out[tokens * features];
    attngen::Arguments args;
    args.query = args.key = args.value = attngen::view(a, {1, 1, tokens, features});
    args.out = attngen::mutable_view(out, {1, 1, tokens, features});

    attngen::Status status = pool_unit_scale(args);
    if (!status) {
        std::fprintf(stderr, "%s\n", status.message().c_str());
        return 1;
    }
    print_matrix("attention(A, A, A), scale = 1:", out, tokens, features);

    status = pool_default_scale(args);
    if (!status) {
        std::fprintf(stderr, "%s\n", status.message().c_str());
        return 1;
    }
    print_matrix("attention(A, A, A), scale = 1/sqrt(4):", out, tokens, features);
    return 0;
}
