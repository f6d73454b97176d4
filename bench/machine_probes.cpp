// The FMA-peak, clock and bandwidth probes (see machine_probes.h). The bandwidth loop XORs 64-bit
// words, which compilers vectorize without reassociating floats.
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
constexpr int fma_trials = 5; // about 0.1 s each at 200 GFLOP/s on 2 threads

// The loops are written in assembly so that what is timed does not depend on the compiler or
// its flags: at -O2, GCC 12 keeps an array of C++ accumulators in memory, and such a probe read
// 104 GFLOP/s on a machine whose real peak is twice that. Each iteration is 12 independent FMAs
// (acc += a * b, one register each), enough to cover 4 cycles of latency on two FMA pipes.
#if defined(__x86_64__)
#define ATTNGEN_FMA_12(reg)                                                                        \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "2\n\t"                                           \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "3\n\t"                                           \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "4\n\t"                                           \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "5\n\t"                                           \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "6\n\t"                                           \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "7\n\t"                                           \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "8\n\t"                                           \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "9\n\t"                                           \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "10\n\t"                                          \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "11\n\t"                                          \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "12\n\t"                                          \
    "vfmadd231ps %%" reg "0, %%" reg "1, %%" reg "13\n\t"

// Broadcasts a and b into registers 0 and 1 and a into the 12 accumulators.
#define ATTNGEN_FMA_SETUP(reg)                                                                     \
    "vbroadcastss (%[values]), %%" reg "0\n\t"                                                     \
    "vbroadcastss 4(%[values]), %%" reg "1\n\t"                                                    \
    "vmovaps %%" reg "0, %%" reg "2\n\tvmovaps %%" reg "0, %%" reg "3\n\t"                         \
    "vmovaps %%" reg "0, %%" reg "4\n\tvmovaps %%" reg "0, %%" reg "5\n\t"                         \
    "vmovaps %%" reg "0, %%" reg "6\n\tvmovaps %%" reg "0, %%" reg "7\n\t"                         \
    "vmovaps %%" reg "0, %%" reg "8\n\tvmovaps %%" reg "0, %%" reg "9\n\t"                         \
    "vmovaps %%" reg "0, %%" reg "10\n\tvmovaps %%" reg "0, %%" reg "11\n\t"                       \
    "vmovaps %%" reg "0, %%" reg "12\n\tvmovaps %%" reg "0, %%" reg "13\n\t"

const float fma_values[2] = {0.999999f, 1e-6f}; // acc grows by 1e-6 a step: never subnormal

// The whole loop over registers `reg` ("ymm" or "zmm"), `iterations` times.
#define ATTNGEN_FMA_LOOP(reg, iterations)                                                          \
    asm volatile(ATTNGEN_FMA_SETUP(reg) "1:\n\t" ATTNGEN_FMA_12(reg) "dec %[count]\n\t"            \
                                                                     "jnz 1b\n\t"                  \
                                                                     "vzeroupper"                  \
                 : [count] "+r"(iterations)                                                        \
                 : [values] "r"(fma_values)                                                        \
                 : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
                   "xmm10", "xmm11", "xmm12", "xmm13", "cc", "memory")

__attribute__((target("avx2,fma"))) void fma_loop_avx2(long iterations) {
    ATTNGEN_FMA_LOOP("ymm", iterations);
}

__attribute__((target("avx512f"))) void fma_loop_avx512(long iterations) {
    ATTNGEN_FMA_LOOP("zmm", iterations);
}

/** A chain of dependent integer adds, one a cycle on every x86 core: 8 * iterations cycles. */
void add_chain(long iterations) {
    long value = 0;
    asm volatile("1:\n\t"
                 "add $1, %[value]\n\tadd $1, %[value]\n\tadd $1, %[value]\n\tadd $1, %[value]\n\t"
                 "add $1, %[value]\n\tadd $1, %[value]\n\tadd $1, %[value]\n\tadd $1, %[value]\n\t"
                 "dec %[count]\n\t"
                 "jnz 1b"
                 : [count] "+r"(iterations), [value] "+r"(value)
                 :
                 : "cc");
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

FmaPeak measure_fma_peak(int threads, bool avx512) {
    FmaPeak peak;
    void (*loop)(long) = nullptr;
    static_cast<void>(avx512); // x86 only
#if defined(__x86_64__)
    if (avx512 && __builtin_cpu_supports("avx512f")) {
        loop = fma_loop_avx512;
        peak.lanes = 16;
        peak.kind = "avx512";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        loop = fma_loop_avx2;
        peak.lanes = 8;
        peak.kind = "avx2";
    }
#endif
    if (loop == nullptr) {
        peak.kind = "unavailable";
        return peak;
    }
    // A peak is a best case: a neighbour on a shared machine can halve a short trial.
    for (int trial = 0; trial < fma_trials; trial++) {
        double seconds = timed_on_threads(threads, [&](int) { loop(fma_iterations); });
        double flops = 2.0 * peak.lanes * chains * double(fma_iterations) * threads;
        peak.gflops = std::max(peak.gflops, flops / seconds * 1e-9);
    }
    return peak;
}

double measure_clock_ghz(int threads) {
#if defined(__x86_64__)
    constexpr long iterations = 40'000'000; // 3.2e8 adds: about 0.1 s at 3 GHz
    double best = 0;
    for (int trial = 0; trial < 5; trial++) {
        const double seconds = timed_on_threads(threads, [&](int) { add_chain(iterations); });
        best = std::max(best, 8.0 * double(iterations) / seconds * 1e-9);
    }
    return best;
#else
    (void)threads;
    return 0;
#endif
}

ReadProbe::ReadProbe(int threads)
    : threads_(threads), buffer_((size_t(256) << 20) / sizeof(uint64_t)), sink_(threads) {
    for (size_t i = 0; i < buffer_.size(); i++)
        buffer_[i] = i * 0x9e3779b97f4a7c15ull;
}

double ReadProbe::measure() {
    return std::max(pass(false), pass(true));
}

double ReadProbe::pass(bool prefetched) {
    // Whole cache lines per step, four independent folds: the loop is bound by memory, not by
    // the dependency of one accumulator (-O2 does not unroll it). Prefetched, each thread reads
    // its part as four streams, each prefetched 8 KiB ahead, as attngen's cached decode step
    // reads its cache: the hardware's prefetchers alone read less on some machines.
    const size_t words = buffer_.size();
    const int streams = prefetched ? 4 : 1;
    constexpr size_t ahead_words = 8192 / sizeof(uint64_t);
    const double seconds = timed_on_threads(threads_, [&](int t) {
        const size_t begin = words * t / threads_ / 8 * 8;
        const size_t end = t + 1 == threads_ ? words : words * (t + 1) / threads_ / 8 * 8;
        const size_t stream_words = (end - begin) / streams / 8 * 8;
        uint64_t folded[4] = {0, 0, 0, 0};
        for (size_t i = 0; i < stream_words; i += 8)
            for (int stream = 0; stream < streams; stream++) {
                const uint64_t *line = &buffer_[begin + stream * stream_words + i];
                if (prefetched)
                    __builtin_prefetch(line + ahead_words, 0, 0);
                for (int lane = 0; lane < 4; lane++)
                    folded[lane] ^= line[lane] ^ line[4 + lane];
            }
        for (size_t i = begin + streams * stream_words; i < end; i++)
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
