// The FMA-peak and bandwidth probes (see machine_probes.h). The FMA loop keeps 12 independent
// accumulator chains, enough to cover FMA latency on current x86 cores; the bandwidth loop XORs
// 64-bit words, which compilers vectorize without reassociating floats.
#include "machine_probes.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace attngen_bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr long fma_iterations = 40'000'000;
constexpr int chains = 12;
constexpr int fma_trials = 9; // about 0.15 s each at 200 GFLOP/s on 2 threads

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iterations) {
    __m256 acc[chains];
    for (int j = 0; j < chains; j++)
        acc[j] = _mm256_set1_ps(1.0f + 0.01f * j);
    const __m256 scale = _mm256_set1_ps(0.999999f), offset = _mm256_set1_ps(1e-6f);
    for (long i = 0; i < iterations; i++)
        for (int j = 0; j < chains; j++)
            acc[j] = _mm256_fmadd_ps(acc[j], scale, offset);
    float sum = 0;
    for (int j = 0; j < chains; j++)
        sum += _mm256_cvtss_f32(acc[j]);
    return sum;
}

__attribute__((target("avx512f"))) float fma_loop_avx512(long iterations) {
    __m512 acc[chains];
    for (int j = 0; j < chains; j++)
        acc[j] = _mm512_set1_ps(1.0f + 0.01f * j);
    const __m512 scale = _mm512_set1_ps(0.999999f), offset = _mm512_set1_ps(1e-6f);
    for (long i = 0; i < iterations; i++)
        for (int j = 0; j < chains; j++)
            acc[j] = _mm512_fmadd_ps(acc[j], scale, offset);
    float sum = 0;
    for (int j = 0; j < chains; j++)
        sum += _mm512_cvtss_f32(acc[j]);
    return sum;
}
#endif

/** Runs `work(index)` on `threads` threads at once and returns the wall time in seconds. */
template <typename Work> double timed_on_threads(int threads, const Work &work) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++)
        pool.emplace_back([&, t] {
            ready++;
            while (!go.load())
                std::this_thread::yield();
            work(t);
        });
    while (ready.load() < threads)
        std::this_thread::yield();
    auto start = Clock::now();
    go = true;
    for (std::thread &thread : pool)
        thread.join();
    return std::chrono::duration<double>(Clock::now() - start).count();
}

} // namespace

FmaPeak measure_fma_peak(int threads) {
    FmaPeak peak;
    int lanes = 0;
    float (*loop)(long) = nullptr;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
        loop = fma_loop_avx512;
        lanes = 16;
        peak.kind = "avx512";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        loop = fma_loop_avx2;
        lanes = 8;
        peak.kind = "avx2";
    }
#endif
    if (loop == nullptr) {
        peak.kind = "unavailable";
        return peak;
    }
    // A peak is a best case: on a shared machine a neighbour can halve a short trial (one run
    // measured 114 GFLOP/s where the next measured 227), so take the best of many.
    std::vector<float> sink(threads);
    for (int trial = 0; trial < fma_trials; trial++) {
        double seconds = timed_on_threads(threads, [&](int t) { sink[t] = loop(fma_iterations); });
        double flops = 2.0 * lanes * chains * double(fma_iterations) * threads;
        peak.gflops = std::max(peak.gflops, flops / seconds * 1e-9);
    }
    return peak;
}

ReadProbe::ReadProbe(int threads)
    : threads_(threads), buffer_((size_t(256) << 20) / sizeof(uint64_t)), sink_(threads) {
    for (size_t i = 0; i < buffer_.size(); i++)
        buffer_[i] = i * 0x9e3779b97f4a7c15ull;
}

double ReadProbe::measure() {
    const size_t words = buffer_.size();
    const double seconds = timed_on_threads(threads_, [&](int t) {
        // Whole cache lines per step, four independent folds: the loop is bound by memory,
        // not by the dependency of one accumulator (-O2 does not unroll it).
        const size_t begin = words * t / threads_ / 8 * 8;
        const size_t end = t + 1 == threads_ ? words : words * (t + 1) / threads_ / 8 * 8;
        uint64_t folded[4] = {0, 0, 0, 0};
        size_t i = begin;
        for (; i + 8 <= end; i += 8)
            for (int lane = 0; lane < 4; lane++)
                folded[lane] ^= buffer_[i + lane] ^ buffer_[i + 4 + lane];
        for (; i < end; i++)
            folded[0] ^= buffer_[i];
        sink_[t] = folded[0] ^ folded[1] ^ folded[2] ^ folded[3];
    });
    return double(words * sizeof(uint64_t)) / seconds * 1e-9;
}

double measure_read_bandwidth(int threads) {
    ReadProbe probe(threads);
    double best = 0;
    for (int trial = 0; trial < 3; trial++)
        best = std::max(best, probe.measure());
    return best;
}

} // namespace attngen_bench
