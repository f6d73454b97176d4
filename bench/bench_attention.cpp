// Benchmarks the generated self-attention layers against the plain way people write attention
// on a CPU, the math path: sgemm for the scores, a numerically stable row softmax, sgemm for
// P·V, with the sgemm of OpenBLAS and with that of oneDNN. All run with the same number of
// threads. The prefill rows also time the layers generated with attngen's reference schedule.
// Every row also checks that they agree; the program exits non-zero when a layer fails or
// disagrees.
#include "agreement.h"
#include "bench_cache_contiguous.h"
#include "bench_cache_contiguous_f16.h"
#include "bench_cache_contiguous_i8.h"
#include "bench_cache_paged.h"
#include "bench_cache_paged_f16.h"
#include "bench_cache_paged_i8.h"
#include "bench_cache_paged_packed.h"
#include "bench_d128.h"
#include "bench_d128_causal.h"
#include "bench_d128_causal_packed.h"
#include "bench_d128_causal_padded.h"
#include "bench_d128_causal_reference.h"
#include "bench_d128_causal_rope.h"
#include "bench_d128_reference.h"
#include "bench_d64.h"
#include "bench_d64_causal.h"
#include "bench_d64_causal_reference.h"
#include "bench_d64_reference.h"
#include "bench_decode.h"
#include "bench_mha1024.h"
#include "bench_mha512.h"
#include "fused_peers.h"
#include "machine_probes.h"
#include "storage_types.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned seed = 20240611;
constexpr int64_t batch = 1;
constexpr int64_t lengths[] = {128, 512, 1024, 2048, 4096, 8192};
constexpr int64_t longest = lengths[std::size(lengths) - 1];
constexpr double relative_tolerance = 1e-4, absolute_tolerance = 1e-5;
constexpr double slow_run_ms = 1000; // once a run takes longer, --runs rounds and no more
constexpr int max_runs = 100;        // what --min-ms may extend a measurement to

/**
 * How many timed runs (rounds) a measurement takes: at least `runs`, and more, up to max_runs,
 * until they have taken `min_ms` in all. Five runs of a short row are over in tens of ms, and
 * one slow moment of a shared machine can hold all of them; a second of runs cannot be held by
 * a moment. Slow phases that last seconds still show: a whole multi-head L = 128 row has been
 * seen at twice its usual time, its peers at 1.3-1.5 times theirs.
 */
struct Rounds {
    int runs = 5;
    double min_ms = 1000;
};
// Nothing sleeps between the calls that are timed. The peers' sgemms run single-threaded on the
// benchmark's own worker threads (openblas_set_num_threads(1), omp_set_num_threads(1)), so no
// idle BLAS worker spins after them (measured: 0.1 ms of CPU in a 300 ms pause after
// single-threaded OpenBLAS calls, 103 ms with its own threads). A pause would instead let the
// cores idle before the next call: on a shared virtual machine, a 250 ms pause before each of
// attngen's runs made its L=128 rows up to twice as slow, even after five untimed calls.

// Multi-head attention end to end (bench_mha512, bench_mha1024) at these lengths.
constexpr int64_t mha_lengths[] = {128, 512, 1024, 2048};
// Decode: one query against a long cache, grouped-query heads (bench_decode: H=32, Hkv=8).
constexpr int64_t decode_lengths[] = {1024, 4096, 16384, 32768};
// The decode inputs are rotated through copies that together exceed the last-level cache.
constexpr size_t decode_rotation_bytes = size_t(256) << 20;
// Peak memory: one call of bench_d64 at this length.
constexpr int64_t memory_len = 16384;

struct Options {
    int threads = 2;
    int64_t max_len = longest;
    int64_t reference_max_len = 2048;
    Rounds rounds;
    bool decode = true;
    bool memory = true;
    bool mha = true;
    bool rope = true;
    bool packed = true;
    bool max_len_given = false; ///< --max-len caps the cached decode rows too
    bool prefill = true;
    bool cache = true;
    bool fused_peers = true;
    std::string peers_dir = ATTNGEN_BENCH_PEERS_DIR; ///< made by bench/peers/setup.sh
    attngen::CpuVariant cpu_variant = attngen::CpuVariant::automatic; ///< --cpu-variant
};

void print_usage() {
    fmt::print("usage: bench_attention [--threads N] [--max-len L] [--ref-max-len L] [--runs N]\n"
               "                       [--min-ms N] [--no-prefill] [--no-decode] [--no-cache]\n"
               "                       [--no-mha] [--no-rope] [--no-packed] [--no-memory]\n"
               "                       [--peers DIR] [--no-peers] [--cpu-variant V] [--help]\n"
               "  --threads N  worker threads of attngen, OpenBLAS and oneDNN (default 2)\n"
               "  --max-len L  skip sequence lengths above L (default {}, all of them), and cap\n"
               "               the cached decode rows' cache lengths at L\n"
               "  --ref-max-len L\n"
               "               time attngen's reference schedule up to L only (default {}; it\n"
               "               runs one thread, unvectorized, in time growing as L^2, and\n"
               "               stores three L x L arrays of scores: 6 GiB at L=8192)\n"
               "  --runs N     timed runs per measurement after a warm-up (default 5; exactly\n"
               "               N once a run takes over {:.0f} s)\n"
               "  --min-ms N   and more runs, up to {}, until they have taken N ms in all\n"
               "               (default {:.0f}; 0 = exactly --runs)\n"
               "  --no-prefill skip the prefill table (D=64 and 128, with and without causal)\n"
               "  --no-decode  skip the decode table (Lq=1, H=32, Hkv=8, Lk up to {})\n"
               "  --no-cache   skip the cached decode table (KV caches, contiguous and paged)\n"
               "  --no-mha     skip the end-to-end table (projections, model_dim 512 and 1024)\n"
               "  --no-rope    skip the rotary-embedding table (D=128 causal, with and without)\n"
               "  --no-packed  skip the packed tables (against padded and batched calls)\n"
               "  --no-memory  skip the peak-memory run (L={}, D=64, H=8)\n"
               "  --peers DIR  where bench/peers/setup.sh put the fused peers, PyTorch and ggml\n"
               "               (default {}); a peer that is absent gets \"-\" columns\n"
               "  --no-peers   do not start the fused peers\n"
               "  --cpu-variant V\n"
               "               run attngen's V variant: automatic (the default: the best the CPU\n"
               "               has), avx512, avx2 or baseline; the FMA probe then measures the\n"
               "               peak of that variant's vectors. With avx2 the peers are capped at\n"
               "               AVX2 too (ggml's AVX2 build; PyTorch, MKL, oneDNN and OpenBLAS by\n"
               "               their environment variables, printed in the header); otherwise\n"
               "               they choose their own\n",
               longest, Options().reference_max_len, slow_run_ms / 1000, max_runs,
               Options().rounds.min_ms, decode_lengths[std::size(decode_lengths) - 1], memory_len,
               Options().peers_dir);
}

/** `text` as an integer in [low, high], or nullopt after saying on stderr what is wrong. */
std::optional<int64_t> parse_integer(const std::string &option, const std::string &text,
                                     int64_t low, int64_t high) {
    int64_t value = 0;
    const char *end = text.data() + text.size();
    auto [stop, error] = std::from_chars(text.data(), end, value);
    if (error == std::errc() && stop == end && value >= low && value <= high)
        return value;
    fmt::print(stderr, "bench_attention: {} must be an integer in [{}, {}], got '{}'\n", option,
               low, high, text);
    return std::nullopt;
}

/** The options, or nullopt after printing why they are wrong; `help` is set by --help. */
std::optional<Options> parse_options(int argc, char **argv, bool &help) {
    Options options;
    for (int i = 1; i < argc; i++) {
        const std::string option = argv[i];
        if (option == "--help" || option == "-h") {
            help = true;
            return std::nullopt;
        }
        if (option == "--no-decode" || option == "--no-memory" || option == "--no-mha" ||
            option == "--no-rope" || option == "--no-prefill" || option == "--no-cache" ||
            option == "--no-packed" || option == "--no-peers") {
            (option == "--no-decode"    ? options.decode
             : option == "--no-memory"  ? options.memory
             : option == "--no-rope"    ? options.rope
             : option == "--no-packed"  ? options.packed
             : option == "--no-prefill" ? options.prefill
             : option == "--no-cache"   ? options.cache
             : option == "--no-peers"   ? options.fused_peers
                                        : options.mha) = false;
            continue;
        }
        if (option != "--threads" && option != "--max-len" && option != "--ref-max-len" &&
            option != "--runs" && option != "--min-ms" && option != "--peers" &&
            option != "--cpu-variant") {
            fmt::print(stderr, "bench_attention: unknown option '{}' (see --help)\n", option);
            return std::nullopt;
        }
        if (i + 1 == argc) {
            fmt::print(stderr, "bench_attention: {} needs a value (see --help)\n", option);
            return std::nullopt;
        }
        const std::string text = argv[++i];
        if (option == "--peers") {
            options.peers_dir = text;
            continue;
        }
        if (option == "--cpu-variant") {
            bool known = false;
            for (attngen::CpuVariant variant :
                 {attngen::CpuVariant::automatic, attngen::CpuVariant::avx512,
                  attngen::CpuVariant::avx2, attngen::CpuVariant::baseline})
                if (text == attngen::cpu_variant_name(variant)) {
                    options.cpu_variant = variant;
                    known = true;
                }
            if (!known) {
                fmt::print(stderr,
                           "bench_attention: --cpu-variant must be automatic, avx512, avx2 or "
                           "baseline, got '{}'\n",
                           text);
                return std::nullopt;
            }
            continue;
        }
        std::optional<int64_t> value;
        if (option == "--threads") {
            if ((value = parse_integer(option, text, 1, 1024)))
                options.threads = static_cast<int>(*value);
        } else if (option == "--max-len") {
            // Below the shortest length nothing would run.
            if ((value =
                     parse_integer(option, text, lengths[0], std::numeric_limits<int>::max()))) {
                options.max_len = *value;
                options.max_len_given = true;
            }
        } else if (option == "--ref-max-len") {
            if ((value = parse_integer(option, text, 0, std::numeric_limits<int>::max())))
                options.reference_max_len = *value;
        } else if (option == "--min-ms") {
            if ((value = parse_integer(option, text, 0, 600000)))
                options.rounds.min_ms = static_cast<double>(*value);
        } else if ((value = parse_integer(option, text, 1, 1000))) {
            options.rounds.runs = static_cast<int>(*value);
        }
        if (!value)
            return std::nullopt;
    }
    return options;
}

std::string cpu_model() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
        if (line.rfind("model name", 0) != 0)
            continue;
        size_t colon = line.find(':');
        if (colon == std::string::npos)
            continue;
        size_t start = line.find_first_not_of(" \t", colon + 1);
        if (start != std::string::npos)
            return line.substr(start);
    }
    return "unknown";
}

/** Uniform values in [-1, 1], drawn in order from `rng`. */
std::vector<float> random_tensor(std::mt19937 &rng, int64_t size) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> values(static_cast<size_t>(size));
    for (float &value : values)
        value = uniform(rng);
    return values;
}

/**
 * A fixed team of `size` threads, the caller and size - 1 workers made once, that runs one job
 * at a time: run(job) calls job(0) on the calling thread and job(1) ... job(size - 1) on the
 * workers, and returns once all have returned. Idle workers sleep on a condition variable, so
 * that they take no cores from attngen or OpenBLAS between jobs; the caller, once done with its
 * own part, waits for theirs by yielding rather than sleeping, since its own sleep and wake-up
 * would add tens of microseconds to every job.
 */
class WorkerPool {
  public:
    explicit WorkerPool(int size) : size_(size) {
        for (int index = 1; index < size; index++)
            workers_.emplace_back([this, index] { work(index); });
    }
    WorkerPool(const WorkerPool &) = delete;
    WorkerPool &operator=(const WorkerPool &) = delete;
    ~WorkerPool() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        for (std::thread &worker : workers_)
            worker.join();
    }

    int size() const { return size_; }

    /** Calls job(index) for every index in [0, size()), concurrently; job must not throw. */
    void run(const std::function<void(int)> &job) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            job_ = &job;
            busy_.store(size_ - 1, std::memory_order_relaxed);
            generation_++;
        }
        wake_.notify_all();
        job(0);
        while (busy_.load(std::memory_order_acquire) != 0)
            std::this_thread::yield();
    }

  private:
    void work(int index) {
        uint64_t seen = 0;
        for (;;) {
            const std::function<void(int)> *job;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
                if (stopping_)
                    return;
                seen = generation_;
                job = job_;
            }
            (*job)(index);
            busy_.fetch_sub(1, std::memory_order_release);
        }
    }

    const int size_;
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    const std::function<void(int)> *job_ = nullptr; ///< guarded by mutex_, like the two below
    uint64_t generation_ = 0;                       ///< how many jobs have been started
    bool stopping_ = false;
    std::atomic<int> busy_{0}; ///< workers still running the current job
};

/**
 * e^x for x <= 0, written so that compilers vectorize it (no calls, no branches): x = n ln 2 + r
 * with |r| <= ln 2 / 2 (Cody-Waite, ln 2 in two parts), e^r by its degree-6 Taylor polynomial
 * (relative error below 2e-7 there), 2^n put into the exponent bits. Below -87 (where e^x
 * leaves the normal floats, and for -inf) it is 0.
 */
[[gnu::always_inline]] inline float exp_nonpositive(float x) {
    constexpr float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f;
    constexpr float round_magic = 12582912.0f; // 1.5 * 2^23: adding it rounds to an integer
    const float clamped = x < -87.0f ? -87.0f : x;
    const float n = (clamped * log2e + round_magic) - round_magic;
    const float r = (clamped - n * ln2_hi) - n * ln2_lo;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t exponent_bits = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &exponent_bits, sizeof scale);
    return x < -87.0f ? 0.0f : p * scale;
}

/**
 * The numerically stable softmax of one row of `length` scores, in place, in separate passes
 * over the contiguous row that compilers vectorize (compiled for AVX2 + FMA too, picked at run
 * time). Without -ffast-math a compiler may not reorder one float accumulator, so the max and
 * the sum keep `lanes` partial results; only the order of the sum differs from a plain
 * left-to-right loop. The exponential is exp_nonpositive, not a scalar std::exp call per score:
 * the peer is meant to be the math path at its best.
 */
__attribute__((target_clones("arch=haswell", "default"))) void softmax_row(float *score,
                                                                           int64_t length) {
    constexpr int64_t lanes = 16;
    const int64_t whole = length - length % lanes;
    float lane_max[lanes];
    std::fill(std::begin(lane_max), std::end(lane_max), -std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < whole; j += lanes)
        for (int64_t k = 0; k < lanes; k++)
            lane_max[k] = std::max(lane_max[k], score[j + k]);
    float row_max = *std::max_element(std::begin(lane_max), std::end(lane_max));
    for (int64_t j = whole; j < length; j++)
        row_max = std::max(row_max, score[j]);
    for (int64_t j = 0; j < length; j++)
        score[j] = exp_nonpositive(score[j] - row_max);
    float lane_sum[lanes] = {};
    for (int64_t j = 0; j < whole; j += lanes)
        for (int64_t k = 0; k < lanes; k++)
            lane_sum[k] += score[j + k];
    float row_sum = 0;
    for (float sum : lane_sum)
        row_sum += sum;
    for (int64_t j = whole; j < length; j++)
        row_sum += score[j];
    const float inverse_sum = 1.0f / row_sum;
    for (int64_t j = 0; j < length; j++)
        score[j] *= inverse_sum;
}

/** The sgemm libraries the math path is measured with. */
enum class Blas { openblas, onednn };

const char *blas_name(Blas blas) {
    return blas == Blas::openblas ? "OpenBLAS" : "oneDNN";
}

/** Row-major C (M x N) = alpha * A (M x K) * op(B), op(B) = B (K x N) or Bᵀ (B: N x K). */
void sgemm(Blas blas, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
    if (blas == Blas::openblas) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
                    static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k),
                    alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), 0.0f, c,
                    static_cast<blasint>(ldc));
        return;
    }
    const dnnl_status_t status =
        dnnl_sgemm('N', transpose_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
    if (status != dnnl_success) {
        fmt::print(stderr, "bench_attention: dnnl_sgemm failed with status {}\n",
                   static_cast<int>(status));
        std::abort();
    }
}

/** Query rows per block of the peer: their scores (rows x L floats) stay in L2 up to L = 2048. */
constexpr int64_t peer_rows = 64;

/**
 * The peer, the math path written well: the (batch, head, block of peer_rows queries) tasks are
 * shared out over the threads of `pool`; each computes its block's scores S = scale·Q·Kᵀ with a
 * single-threaded sgemm (all keys, even the ones a causal mask hides), sets masked keys to -inf,
 * takes a stable softmax per row and O = P·V with a second sgemm. The block's scores stay in
 * cache between the three steps. Tensors are (B, H, L, D) row-major; `scores` holds
 * pool.size() blocks.
 */
void blas_attention(Blas blas, const attngen::LayerInfo &info, int64_t length, const float *query,
                    const float *key, const float *value, float *out, std::vector<float> &scores,
                    WorkerPool &pool) {
    const int64_t query_len = length, key_len = length, dim = info.head_dim;
    const int64_t head_size = length * dim;
    const int64_t blocks_per_head = (query_len + peer_rows - 1) / peer_rows;
    const int64_t tasks = batch * info.heads * blocks_per_head;
    std::atomic<int64_t> next_task{0};
    const std::function<void(int)> work = [&](int thread) {
        if (blas == Blas::onednn)
            omp_set_num_threads(1); // this thread's sgemm runs on this thread only
        float *block_scores = scores.data() + thread * peer_rows * key_len;
        for (int64_t task; (task = next_task.fetch_add(1)) < tasks;) {
            const int64_t head = task / blocks_per_head;
            const int64_t first = (task % blocks_per_head) * peer_rows;
            const int64_t rows = std::min(peer_rows, query_len - first);
            sgemm(blas, true, rows, key_len, dim, static_cast<float>(info.scale),
                  query + head * head_size + first * dim, dim, key + head * head_size, dim,
                  block_scores, key_len);
            for (int64_t row = 0; row < rows; row++) {
                float *score = block_scores + row * key_len;
                if (info.causal) // key j is visible to query i iff j <= i + (Lk - Lq)
                    std::fill(score + first + row + (key_len - query_len) + 1, score + key_len,
                              -std::numeric_limits<float>::infinity());
                softmax_row(score, key_len);
            }
            sgemm(blas, false, rows, dim, key_len, 1.0f, block_scores, key_len,
                  value + head * head_size, dim, out + head * head_size + first * dim, dim);
        }
    };
    pool.run(work);
}

/** The median of `values` (not empty). */
double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    size_t middle = values.size() / 2;
    return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

/** Wall time in ms of one call of `call`. */
template <typename Call> double elapsed_ms(const Call &call) {
    Clock::time_point start = Clock::now();
    call();
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/** How many runs a median is taken over, for the tables' headings. */
std::string rounds_text(const Rounds &rounds) {
    std::string text = fmt::format("median of {} run{}", rounds.runs, rounds.runs == 1 ? "" : "s");
    if (rounds.min_ms > 0)
        text += fmt::format(" or more (up to {}, until they have taken {:.0f} ms; {} once a run "
                            "takes over {:.0f} s)",
                            max_runs, rounds.min_ms, rounds.runs, slow_run_ms / 1000);
    return text;
}

/**
 * Runs `round` (which returns the ms of its slowest timed call) as `rounds` says, but not past
 * rounds.runs once a call is slower than slow_run_ms: min_ms is for rows over in tens of ms.
 */
template <typename Round> void run_rounds(const Rounds &rounds, const Round &round) {
    double spent_ms = 0;
    bool slow = false;
    for (int done = 0; done < rounds.runs || (!slow && spent_ms < rounds.min_ms && done < max_runs);
         done++) {
        double slowest = 0;
        spent_ms += elapsed_ms([&] { slowest = round(); });
        slow = slow || slowest > slow_run_ms;
    }
}

/** Median wall time in ms of calls of `call`, as many as `rounds` says. */
template <typename Call> double median_ms(const Call &call, const Rounds &rounds) {
    std::vector<double> times;
    run_rounds(rounds, [&] {
        times.push_back(elapsed_ms(call));
        return times.back();
    });
    return median(times);
}

/** A layer and the arguments of one call of it. */
using Call = std::pair<const attngen::Layer *, const attngen::Arguments *>;

/** Two calls' median times over alternating rounds, and the median of the per-round b / a. */
struct PairTimes {
    double a_ms = std::numeric_limits<double>::quiet_NaN();
    double b_ms = std::numeric_limits<double>::quiet_NaN();
    double b_over_a = std::numeric_limits<double>::quiet_NaN();
};

/** Times calls `a` and `b` in alternating rounds, as many as `rounds` says. */
PairTimes time_pair(const Rounds &rounds, Call a, Call b) {
    std::vector<double> a_times, b_times, ratios;
    run_rounds(rounds, [&] {
        a_times.push_back(elapsed_ms([&] { attngen::run(*a.first, *a.second); }));
        b_times.push_back(elapsed_ms([&] { attngen::run(*b.first, *b.second); }));
        ratios.push_back(b_times.back() / a_times.back());
        return std::max(a_times.back(), b_times.back());
    });
    return {median(a_times), median(b_times), median(ratios)};
}

/** Runs each call once; prints the first failure with `where` and returns false on it. */
bool run_each(std::initializer_list<Call> calls, const std::string &where) {
    for (const auto &[layer, args] : calls)
        if (attngen::Status status = attngen::run(*layer, *args); !status) {
            fmt::print(stderr, "bench_attention: {} {}: {}\n", layer->info.name, where,
                       status.message());
            return false;
        }
    return true;
}

/** agrees (agreement.h) at the benchmark's tolerances. */
template <typename Expected>
bool agrees(const std::string &what, const std::vector<float> &actual,
            const std::vector<Expected> &expected) {
    return attngen_bench::agrees(what, actual, expected, relative_tolerance, absolute_tolerance);
}

/** The fused peers' times over the rounds of one row, and their ratios to attngen's. */
class FusedRounds {
  public:
    static constexpr size_t count = attngen_bench::FusedPeers::count;

    /** Times one call of each running peer after attngen's `attngen_ms`; returns the slowest. */
    double time(attngen_bench::FusedPeers &fused, bool rewarm, double attngen_ms) {
        double slowest = 0;
        const std::vector<double> times = fused.time(rewarm);
        for (size_t i = 0; i < times.size(); i++) {
            if (std::isnan(times[i]))
                continue;
            times_[i].push_back(times[i]);
            ratios_[i].push_back(times[i] / attngen_ms);
            slowest = std::max(slowest, times[i]);
        }
        return slowest;
    }

    /**
     * Each peer's median ms and median ratio over `rounds` rounds; NaN for one that did not run
     * or stopped during them.
     */
    void report(size_t rounds, double (&ms)[count], double (&ratio)[count]) const {
        for (size_t i = 0; i < count; i++)
            if (!times_[i].empty() && times_[i].size() == rounds) {
                ms[i] = median(times_[i]);
                ratio[i] = median(ratios_[i]);
            }
    }

  private:
    std::vector<double> times_[count], ratios_[count];
};

constexpr Blas peers[] = {Blas::openblas, Blas::onednn};

/** One row of the table; attngen_ms is NaN when the layer failed. */
struct RowResult {
    double attngen_ms = std::numeric_limits<double>::quiet_NaN();
    double peer_ms[std::size(peers)] = {};
    double ratio[std::size(peers)] = {}; ///< median over the rounds of peer ms / attngen ms
    /// the same for the fused peers (PyTorch, ggml); NaN where one is not running
    double fused_ms[attngen_bench::FusedPeers::count] = {NAN, NAN};
    double fused_ratio[attngen_bench::FusedPeers::count] = {NAN, NAN};
    /// attngen's reference schedule: its median ms and that / attngen_ms; NaN when not timed
    double reference_ms = std::numeric_limits<double>::quiet_NaN();
    double reference_ratio = std::numeric_limits<double>::quiet_NaN();
    const char *check = "ok";                                       ///< ok, MISMATCH or ERROR
    attngen::CpuVariant code_path = attngen::CpuVariant::automatic; ///< of the warm-up call
};

/**
 * Times `run_attngen` against `run_peer(blas)` for each peer, after one warm-up run of each, in
 * rounds: each round times attngen and then every peer, back to back, so that the drift of a
 * shared machine falls on all of them alike; a row reports each one's median time and the
 * median over the rounds of each peer's time / attngen's time. The outputs are compared:
 * attngen's `out` with each peer's `reference`. Problems are described on stderr (as `name` at
 * L=`length`) and marked in `check`. When `load_fused` is given, it is called after the warm-up
 * (it loads the fused peers with the inputs and checks their outputs against `out`), and each
 * round also times every running fused peer, last.
 */
RowResult time_and_compare(const char *name, int64_t length, const Rounds &rounds,
                           const std::function<attngen::Status()> &run_attngen,
                           const std::function<void(Blas)> &run_peer, const std::vector<float> &out,
                           const std::vector<float> &reference,
                           attngen_bench::FusedPeers *fused = nullptr,
                           const std::function<bool()> &load_fused = {}) {
    attngen::Status status;
    auto run_checked = [&] {
        attngen::Status result = run_attngen();
        if (!result && status)
            status = result;
    };
    RowResult row;
    double slowest_warm_up = elapsed_ms(run_checked);
    row.code_path = attngen::last_cpu_variant();
    // The warm-up runs are checked: all are deterministic, so their outputs are those of
    // every run.
    for (Blas blas : peers) {
        slowest_warm_up = std::max(slowest_warm_up, elapsed_ms([&] { run_peer(blas); }));
        if (!status)
            continue;
        if (!agrees(fmt::format("{} at L={}: max|attngen - {}|", name, length, blas_name(blas)),
                    out, reference))
            row.check = "MISMATCH";
    }

    const bool with_fused = fused != nullptr && load_fused && status && fused->any();
    if (with_fused && !load_fused())
        row.check = "MISMATCH";

    // Short calls are timed right after an untimed call of their own, as they run back to
    // back in a model: with their own data in cache.
    const bool rewarm = slowest_warm_up < slow_run_ms;
    auto timed = [&](const auto &call) {
        if (rewarm)
            call();
        return elapsed_ms(call);
    };
    std::vector<double> attngen_times, peer_times[std::size(peers)], ratios[std::size(peers)];
    FusedRounds fused_rounds;
    run_rounds(rounds, [&] {
        double slowest = 0;
        if (status) {
            attngen_times.push_back(timed(run_checked));
            slowest = attngen_times.back();
        }
        for (size_t i = 0; i < std::size(peers); i++) {
            peer_times[i].push_back(timed([&] { run_peer(peers[i]); }));
            slowest = std::max(slowest, peer_times[i].back());
            if (status)
                ratios[i].push_back(peer_times[i].back() / attngen_times.back());
        }
        if (with_fused)
            slowest = std::max(slowest, fused_rounds.time(*fused, rewarm, attngen_times.back()));
        return slowest;
    });
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (size_t i = 0; i < std::size(peers); i++) {
        row.peer_ms[i] = median(peer_times[i]);
        row.ratio[i] = status ? median(ratios[i]) : nan;
    }
    fused_rounds.report(attngen_times.size(), row.fused_ms, row.fused_ratio);
    if (status) {
        row.attngen_ms = median(attngen_times);
    } else { // in the warm-up or a timed run; status keeps the first failure
        fmt::print(stderr, "bench_attention: {} at L={}: {}\n", name, length, status.message());
        row.check = "ERROR";
    }
    return row;
}

/**
 * Times a self-contained layer (no projections) against the math path on random inputs, and,
 * when `reference_layer` is given, the same layer generated with the reference schedule: its
 * output is checked against attngen's, its median time is reported next to attngen's. It is
 * timed apart from the rounds: at 10 to 100 times attngen's time, drift does not matter.
 */
RowResult measure(const attngen::Layer &layer, const attngen::Layer *reference_layer,
                  int64_t length, const Rounds &rounds, WorkerPool &pool,
                  attngen_bench::FusedPeers *fused) {
    const attngen::LayerInfo &info = layer.info;
    const int64_t heads = info.heads, dim = info.head_dim;
    const int64_t size = batch * heads * length * dim;
    std::mt19937 rng(seed); // every row is reproducible on its own
    const std::vector<float> query = random_tensor(rng, size);
    const std::vector<float> key = random_tensor(rng, size);
    const std::vector<float> value = random_tensor(rng, size);
    std::vector<float> out(static_cast<size_t>(size)), reference(out.size());
    std::vector<float> scores(static_cast<size_t>(pool.size() * peer_rows * length));

    attngen::Arguments args;
    args.query = attngen::view(query.data(), {batch, heads, length, dim});
    args.key = attngen::view(key.data(), {batch, heads, length, dim});
    args.value = attngen::view(value.data(), {batch, heads, length, dim});
    args.out = attngen::mutable_view(out.data(), {batch, heads, length, dim});
    RowResult row = time_and_compare(
        info.name, length, rounds, [&] { return attngen::run(layer, args); },
        [&](Blas blas) {
            blas_attention(blas, info, length, query.data(), key.data(), value.data(),
                           reference.data(), scores, pool);
        },
        out, reference, fused,
        [&] {
            attngen_bench::PeerShape shape;
            shape.batch = batch;
            shape.heads = shape.kv_heads = heads;
            shape.query_len = shape.key_len = length;
            shape.dim = dim;
            shape.causal = info.causal;
            return fused->load(fmt::format("{} at L={}", info.name, length), shape, query.data(),
                               key.data(), value.data(), out);
        });
    if (reference_layer == nullptr || std::isnan(row.attngen_ms))
        return row;

    std::vector<float> reference_out(out.size());
    attngen::Arguments reference_args = args;
    reference_args.out = attngen::mutable_view(reference_out.data(), {batch, heads, length, dim});
    // The warm-up call, checked.
    if (attngen::Status status = attngen::run(*reference_layer, reference_args); !status) {
        fmt::print(stderr, "bench_attention: {} at L={}: {}\n", reference_layer->info.name, length,
                   status.message());
        row.check = "ERROR";
        return row;
    }
    if (!agrees(
            fmt::format("{} at L={}: max|reference - attngen|", reference_layer->info.name, length),
            reference_out, out)) {
        row.check = "MISMATCH";
        return row;
    }
    row.reference_ms = median_ms([&] { attngen::run(*reference_layer, reference_args); }, rounds);
    row.reference_ratio = row.reference_ms / row.attngen_ms;
    return row;
}

/** Rows per task of the MHA peer's projections. */
constexpr int64_t projection_rows = 128;

/**
 * The peer of a layer with projections (self-attention, H*D = M, no bias), as PyTorch's
 * nn.MultiheadAttention computes it on a CPU: Q, K, V = X·Wᵀ, written per head as (H, L, D)
 * with one sgemm per (block of rows, head, projection); the math path per head
 * (blas_attention); then the heads' outputs gathered back to (L, H*D) and Y = O·Woᵀ, one sgemm
 * per block of rows. Every step's tasks are shared out over `pool`, each sgemm single-threaded.
 */
void blas_mha(Blas blas, const attngen::LayerInfo &info, int64_t length, const float *x,
              const float *const weights[4], float *out, std::vector<float> projected[4],
              std::vector<float> &scores, WorkerPool &pool) {
    const int64_t model = info.model_dim, heads = info.heads, dim = info.head_dim;
    const int64_t blocks = (length + projection_rows - 1) / projection_rows;
    std::atomic<int64_t> next_task{0};
    const std::function<void(int)> project = [&](int) {
        if (blas == Blas::onednn)
            omp_set_num_threads(1);
        for (int64_t task; (task = next_task.fetch_add(1)) < 3 * heads * blocks;) {
            const int64_t which = task / (heads * blocks), head = task / blocks % heads;
            const int64_t first = task % blocks * projection_rows;
            const int64_t rows = std::min(projection_rows, length - first);
            sgemm(blas, true, rows, dim, model, 1.0f, x + first * model, model,
                  weights[which] + head * dim * model, model,
                  projected[which].data() + (head * length + first) * dim, dim);
        }
    };
    pool.run(project);
    blas_attention(blas, info, length, projected[0].data(), projected[1].data(),
                   projected[2].data(), projected[3].data(), scores, pool);
    next_task = 0;
    const std::function<void(int)> output = [&](int thread) {
        if (blas == Blas::onednn)
            omp_set_num_threads(1);
        // The thread's rows of O as (rows, H*D), gathered from the heads.
        float *gathered = scores.data() + thread * projection_rows * model;
        for (int64_t block; (block = next_task.fetch_add(1)) < blocks;) {
            const int64_t first = block * projection_rows;
            const int64_t rows = std::min(projection_rows, length - first);
            for (int64_t row = 0; row < rows; row++)
                for (int64_t head = 0; head < heads; head++)
                    std::copy_n(projected[3].data() + (head * length + first + row) * dim, dim,
                                gathered + row * model + head * dim);
            sgemm(blas, true, rows, model, model, 1.0f, gathered, model, weights[3], model,
                  out + first * model, model);
        }
    };
    pool.run(output);
}

/** Times a self-attention layer with Q/K/V/out projections against blas_mha. */
RowResult measure_mha(const attngen::Layer &layer, int64_t length, const Rounds &rounds,
                      WorkerPool &pool) {
    const attngen::LayerInfo &info = layer.info;
    const int64_t model = info.model_dim, inner = int64_t(info.heads) * info.head_dim;
    std::mt19937 rng(seed);
    const std::vector<float> x = random_tensor(rng, batch * length * model);
    // nn.Linear's initial scale, U(-1/sqrt(in), 1/sqrt(in)), keeps the scores in a range
    // where float32 results agree to the check's tolerance.
    std::vector<float> weights[4];
    for (std::vector<float> &weight : weights) {
        weight = random_tensor(rng, inner * model);
        for (float &w : weight)
            w /= std::sqrt(float(model));
    }
    std::vector<float> out(static_cast<size_t>(batch * length * model)), reference(out.size());
    std::vector<float> projected[4];
    for (std::vector<float> &tensor : projected)
        tensor.resize(static_cast<size_t>(length * inner));
    std::vector<float> scores(
        static_cast<size_t>(pool.size() * std::max(peer_rows * length, projection_rows * model)));
    const float *const weight_data[4] = {weights[0].data(), weights[1].data(), weights[2].data(),
                                         weights[3].data()};

    attngen::Arguments args;
    args.x = attngen::view(x.data(), {batch, length, model});
    args.wq = attngen::view(weights[0].data(), {inner, model});
    args.wk = attngen::view(weights[1].data(), {inner, model});
    args.wv = attngen::view(weights[2].data(), {inner, model});
    args.wo = attngen::view(weights[3].data(), {model, inner});
    args.out = attngen::mutable_view(out.data(), {batch, length, model});
    return time_and_compare(
        info.name, length, rounds, [&] { return attngen::run(layer, args); },
        [&](Blas blas) {
            blas_mha(blas, info, length, x.data(), weight_data, reference.data(), projected, scores,
                     pool);
        },
        out, reference);
}

/** Attention for one query per head, in double precision: (H, D) from q (H, D), k/v (Hkv, Lk, D).
 */
std::vector<double> decode_reference(const attngen::LayerInfo &info, int64_t key_len,
                                     const float *query, const float *key, const float *value) {
    const int64_t heads = info.heads, dim = info.head_dim, group = info.heads / info.kv_heads;
    std::vector<double> out(static_cast<size_t>(heads * dim)), score(static_cast<size_t>(key_len));
    for (int64_t h = 0; h < heads; h++) {
        const float *k = key + (h / group) * key_len * dim,
                    *v = value + (h / group) * key_len * dim;
        double top = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j < key_len; j++) {
            double dot = 0;
            for (int64_t d = 0; d < dim; d++)
                dot += double(query[h * dim + d]) * double(k[j * dim + d]);
            score[j] = info.scale * dot;
            top = std::max(top, score[j]);
        }
        for (int64_t j = 0; j < key_len; j++) {
            const double p = std::exp(score[j] - top);
            sum += p;
            for (int64_t d = 0; d < dim; d++)
                out[h * dim + d] += p * double(v[j * dim + d]);
        }
        for (int64_t d = 0; d < dim; d++)
            out[h * dim + d] /= sum;
    }
    return out;
}

// Prefill with rotary embeddings (bench_d128_causal_rope against bench_d128_causal).
constexpr int64_t rope_lengths[] = {512, 1024, 2048, 4096};

/** One row of the rotary-embedding table; the times are NaN when a layer failed. */
struct RopeResult {
    double plain_ms = std::numeric_limits<double>::quiet_NaN();
    double rope_ms = std::numeric_limits<double>::quiet_NaN();
    double ratio = std::numeric_limits<double>::quiet_NaN(); ///< median of rope ms / plain ms
    const char *check = "ok";
};

/**
 * Times a layer with rotary embeddings against the same layer without them, in alternating
 * rounds on the same inputs. The rotated layer's output is checked against OpenBLAS's math path
 * on queries and keys rotated beforehand in double.
 */
RopeResult measure_rope(const attngen::Layer &plain, const attngen::Layer &rope, int64_t length,
                        const Rounds &rounds, WorkerPool &pool) {
    const attngen::LayerInfo &info = rope.info;
    const int64_t heads = info.heads, dim = info.head_dim;
    const int64_t size = batch * heads * length * dim;
    std::mt19937 rng(seed);
    const std::vector<float> query = random_tensor(rng, size);
    const std::vector<float> key = random_tensor(rng, size);
    const std::vector<float> value = random_tensor(rng, size);
    std::vector<float> out(static_cast<size_t>(size)), reference(out.size());
    std::vector<float> scores(static_cast<size_t>(pool.size() * peer_rows * length));

    // Rotate-half (neox) at each row's position, theta^(-2i / D) per pair i.
    auto rotate = [&](const std::vector<float> &x) {
        std::vector<float> y(x.size());
        const int64_t half = dim / 2;
        for (int64_t row = 0; row < batch * heads * length; row++) {
            const double position = double(row % length);
            const float *in = &x[static_cast<size_t>(row * dim)];
            float *rotated = &y[static_cast<size_t>(row * dim)];
            for (int64_t i = 0; i < half; i++) {
                const double angle = position * std::pow(info.rope.theta, -2.0 * i / dim);
                const double c = std::cos(angle), s = std::sin(angle);
                rotated[i] = float(in[i] * c - in[i + half] * s);
                rotated[i + half] = float(in[i + half] * c + in[i] * s);
            }
        }
        return y;
    };
    const std::vector<float> rotated_query = rotate(query), rotated_key = rotate(key);

    attngen::Arguments args;
    args.query = attngen::view(query.data(), {batch, heads, length, dim});
    args.key = attngen::view(key.data(), {batch, heads, length, dim});
    args.value = attngen::view(value.data(), {batch, heads, length, dim});
    args.out = attngen::mutable_view(out.data(), {batch, heads, length, dim});
    RopeResult row;
    const std::string where = fmt::format("at L={}", length);
    if (!run_each({{&plain, &args}, {&rope, &args}}, where)) {
        row.check = "ERROR";
        return row;
    }
    blas_attention(Blas::openblas, info, length, rotated_query.data(), rotated_key.data(),
                   value.data(), reference.data(), scores, pool);
    if (!agrees(
            fmt::format("{} at L={}: max|attngen - openblas on rotated q, k|", info.name, length),
            out, reference))
        row.check = "MISMATCH";

    const PairTimes times = time_pair(rounds, {&plain, &args}, {&rope, &args});
    row.plain_ms = times.a_ms;
    row.rope_ms = times.b_ms;
    row.ratio = times.b_over_a;
    return row;
}

// Packed sequences (bench_d128_causal_packed) against a padded batch of the same sequences
// (bench_d128_causal_padded: causal + key padding, each sequence right-padded to the longest).
constexpr int64_t packed_longest[] = {1024, 2048, 4096};
constexpr int packed_sequences = 8;

/** One row of the packed table; the times are NaN when a layer failed. */
struct PackedResult {
    std::vector<int> lengths;
    double packed_ms = std::numeric_limits<double>::quiet_NaN();
    double padded_ms = std::numeric_limits<double>::quiet_NaN();
    double ratio = std::numeric_limits<double>::quiet_NaN(); ///< median of padded / packed ms
    const char *check = "ok";
};

/**
 * Times one packed call of `packed_sequences` causal sequences (lengths drawn from the seed in
 * [longest / 16, longest], one of them the longest) against one batched call over the same
 * sequences padded to the longest, alternating; the packed rows are checked against the padded
 * call's.
 */
PackedResult measure_packed(const attngen::Layer &packed, const attngen::Layer &padded,
                            int64_t longest, const Rounds &rounds) {
    const attngen::LayerInfo &info = packed.info;
    const int64_t heads = info.heads, dim = info.head_dim, count = packed_sequences;
    std::mt19937 rng(seed + static_cast<unsigned>(longest));
    std::uniform_int_distribution<int> draw(static_cast<int>(longest / 16),
                                            static_cast<int>(longest));
    PackedResult row;
    row.lengths.push_back(static_cast<int>(longest));
    while (static_cast<int64_t>(row.lengths.size()) < count)
        row.lengths.push_back(draw(rng));
    std::vector<int32_t> offsets = {0}, key_lengths;
    for (int length : row.lengths) {
        offsets.push_back(offsets.back() + length);
        key_lengths.push_back(length);
    }
    const int64_t total = offsets.back();
    // The padded batch holds sequence b in rows [0, length) of entry b; the packed tensors are
    // those rows end to end.
    const std::vector<float> query = random_tensor(rng, count * heads * longest * dim);
    const std::vector<float> key = random_tensor(rng, count * heads * longest * dim);
    const std::vector<float> value = random_tensor(rng, count * heads * longest * dim);
    auto pack = [&](const std::vector<float> &batched) {
        std::vector<float> rows;
        for (int64_t b = 0; b < count; b++)
            for (int64_t t = 0; t < row.lengths[static_cast<size_t>(b)]; t++)
                for (int64_t h = 0; h < heads; h++) {
                    const auto first = batched.begin() + ((b * heads + h) * longest + t) * dim;
                    rows.insert(rows.end(), first, first + dim);
                }
        return rows;
    };
    const std::vector<float> packed_query = pack(query), packed_key = pack(key),
                             packed_value = pack(value);
    std::vector<float> packed_out(static_cast<size_t>(total * heads * dim));
    std::vector<float> padded_out(static_cast<size_t>(count * heads * longest * dim));
    attngen::Arguments packed_args, padded_args;
    packed_args.query = attngen::view(packed_query.data(), {total, heads, dim});
    packed_args.key = attngen::view(packed_key.data(), {total, heads, dim});
    packed_args.value = attngen::view(packed_value.data(), {total, heads, dim});
    packed_args.query_offsets = attngen::view(offsets.data(), {count + 1});
    packed_args.out = attngen::mutable_view(packed_out.data(), {total, heads, dim});
    padded_args.query = attngen::view(query.data(), {count, heads, longest, dim});
    padded_args.key = attngen::view(key.data(), {count, heads, longest, dim});
    padded_args.value = attngen::view(value.data(), {count, heads, longest, dim});
    padded_args.key_lengths = attngen::view(key_lengths.data(), {count});
    padded_args.out = attngen::mutable_view(padded_out.data(), {count, heads, longest, dim});
    if (!run_each({{&packed, &packed_args}, {&padded, &padded_args}},
                  fmt::format("at L={}", longest))) {
        row.check = "ERROR";
        return row;
    }
    // The padded call's rows of each sequence, packed, are what the packed call computes.
    if (!agrees(fmt::format("{} at L={}: max|packed - padded|", info.name, longest), packed_out,
                pack(padded_out)))
        row.check = "MISMATCH";
    const PairTimes times = time_pair(rounds, {&packed, &packed_args}, {&padded, &padded_args});
    row.packed_ms = times.a_ms;
    row.padded_ms = times.b_ms;
    row.ratio = times.b_over_a;
    return row;
}

/**
 * Runs `timed` between read-probe passes and returns their median GB/s. The bandwidth that
 * decode calls are held to drifts on shared machines: passes right before and right after the
 * timed calls measure it under the same conditions. (A pass between calls would let the thread
 * pool fall asleep, which back-to-back calls of a model's layers do not see.)
 */
template <typename Timed>
double probed_bandwidth(attngen_bench::ReadProbe &probe, const Timed &timed) {
    std::vector<double> probes;
    for (int i = 0; i < 3; i++)
        probes.push_back(probe.measure());
    timed();
    for (int i = 0; i < 3; i++)
        probes.push_back(probe.measure());
    return median(probes);
}

/** One row of the decode table; ms is NaN when the layer failed. */
struct DecodeResult {
    double ms = std::numeric_limits<double>::quiet_NaN();
    /// the fused peers' median ms and median of their ms / attngen's, round by round
    double fused_ms[attngen_bench::FusedPeers::count] = {NAN, NAN};
    double fused_ratio[attngen_bench::FusedPeers::count] = {NAN, NAN};
    double probe_gbps = 0; ///< median of read-probe passes just before and after the calls
    double bytes = 0;      ///< K and V once, plus Q and the output
    const char *check = "ok";
};

/**
 * Times `layer` (B=1, Lq=1) at `key_len`, rotating through copies of the inputs that together
 * exceed the caches, and checks the first copy's output against decode_reference. Each round
 * also times the running fused peers (`fused`, may be null), which rotate through as many copies
 * of their own; their outputs are checked against attngen's.
 */
DecodeResult measure_decode(const attngen::Layer &layer, int64_t key_len, const Rounds &rounds,
                            attngen_bench::ReadProbe &probe, attngen_bench::FusedPeers *fused) {
    const attngen::LayerInfo &info = layer.info;
    const int64_t heads = info.heads, kv_heads = info.kv_heads, dim = info.head_dim;
    const int64_t query_size = heads * dim, cache_size = kv_heads * key_len * dim;
    DecodeResult result;
    result.bytes = 4.0 * double(2 * cache_size + 2 * query_size);
    const size_t copies =
        std::clamp<size_t>(decode_rotation_bytes / static_cast<size_t>(result.bytes) + 1, 1, 32);
    std::mt19937 rng(seed);
    struct Copy {
        std::vector<float> query, key, value, out;
    };
    std::vector<Copy> set(copies);
    for (Copy &copy : set) {
        copy.query = random_tensor(rng, query_size);
        copy.key = random_tensor(rng, cache_size);
        copy.value = random_tensor(rng, cache_size);
        copy.out.assign(static_cast<size_t>(query_size), 0.0f);
    }
    attngen::Status status;
    size_t next = 0;
    auto run_one = [&] {
        Copy &copy = set[next++ % copies];
        attngen::Arguments args;
        args.query = attngen::view(copy.query.data(), {1, heads, 1, dim});
        args.key = attngen::view(copy.key.data(), {1, kv_heads, key_len, dim});
        args.value = attngen::view(copy.value.data(), {1, kv_heads, key_len, dim});
        args.out = attngen::mutable_view(copy.out.data(), {1, heads, 1, dim});
        attngen::Status call = attngen::run(layer, args);
        if (!call && status)
            status = call;
    };
    run_one(); // the warm-up, on copy 0
    bool with_fused = false;
    if (fused != nullptr && status && fused->any()) {
        attngen_bench::PeerShape shape;
        shape.heads = heads;
        shape.kv_heads = kv_heads;
        shape.key_len = key_len;
        shape.dim = dim;
        shape.copies = static_cast<int>(copies);
        if (!fused->load(fmt::format("{} at Lk={}", info.name, key_len), shape, set[0].query.data(),
                         set[0].key.data(), set[0].value.data(), set[0].out))
            result.check = "MISMATCH";
        with_fused = fused->any();
    }
    std::vector<double> times;
    FusedRounds fused_rounds;
    result.probe_gbps = probed_bandwidth(probe, [&] {
        run_rounds({std::max<int>(rounds.runs, static_cast<int>(copies)), rounds.min_ms}, [&] {
            times.push_back(elapsed_ms(run_one));
            return with_fused
                       ? std::max(times.back(), fused_rounds.time(*fused, false, times.back()))
                       : times.back();
        });
    });
    result.ms = median(times);
    fused_rounds.report(times.size(), result.fused_ms, result.fused_ratio);
    if (!status) {
        fmt::print(stderr, "bench_attention: {} at Lk={}: {}\n", info.name, key_len,
                   status.message());
        result.ms = std::numeric_limits<double>::quiet_NaN();
        result.check = "ERROR";
        return result;
    }
    const std::vector<double> want = decode_reference(info, key_len, set[0].query.data(),
                                                      set[0].key.data(), set[0].value.data());
    if (!agrees(fmt::format("{} at Lk={}: max|attngen - reference|", info.name, key_len),
                set[0].out, want))
        result.check = "MISMATCH";
    return result;
}

// Cached decode steps (bench_cache_*: H=32, Hkv=8, D=128, causal; contiguous or paged(64)
// caches of f32 or f16 under an f32 layer): B sequences with ragged cache lengths from about
// half of `longest` up to it, one new token each.
struct CacheRow {
    int64_t batch, longest;
};
constexpr CacheRow cache_rows[] = {{1, 32768}, {8, 32768}, {32, 4096}};
constexpr int64_t cache_block = 64; // the paged layers' block size

/** One row of the cached-decode table for one cache dtype. */
struct CacheResult {
    double contiguous_ms = std::numeric_limits<double>::quiet_NaN();
    double paged_ms = std::numeric_limits<double>::quiet_NaN();
    double ratio = std::numeric_limits<double>::quiet_NaN(); ///< median of paged / contiguous
    double bytes = 0;      ///< the cached K and V that a step reads, and the new rows
    double probe_gbps = 0; ///< median of read-probe passes just before and after
    const char *check = "ok";
};

/** One row of the packed decode table. */
struct PackedDecodeResult {
    double batched_ms = std::numeric_limits<double>::quiet_NaN();
    double packed_ms = std::numeric_limits<double>::quiet_NaN();
    double ratio = std::numeric_limits<double>::quiet_NaN(); ///< median of packed / batched ms
    const char *check = "ok";
};

/**
 * Times a decode step of `batch_size` sequences (one new token each, cache lengths spread from
 * longest / 2 to longest) through a paged f32 cache: one batched call against one packed call,
 * alternating, their outputs checked against each other.
 */
PackedDecodeResult measure_packed_decode(const attngen::Layer &batched,
                                         const attngen::Layer &packed, int64_t batch_size,
                                         int64_t longest, const Rounds &rounds) {
    const attngen::LayerInfo &info = batched.info;
    const int64_t heads = info.heads, kv_heads = info.kv_heads, dim = info.head_dim;
    std::vector<int32_t> lengths(static_cast<size_t>(batch_size));
    for (int64_t b = 0; b < batch_size; b++)
        lengths[b] = static_cast<int32_t>(longest / 2 + (longest / 2) * (b + 1) / batch_size - 1);
    const int64_t max_blocks = longest / cache_block, blocks = batch_size * max_blocks;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::mt19937 rng(seed);
    const int64_t cache_size = blocks * kv_heads * cache_block * dim;
    std::vector<float> k_cache = random_tensor(rng, cache_size);
    std::vector<float> v_cache = random_tensor(rng, cache_size);
    const std::vector<float> query = random_tensor(rng, batch_size * heads * dim);
    const std::vector<float> key = random_tensor(rng, batch_size * kv_heads * dim);
    const std::vector<float> value = random_tensor(rng, batch_size * kv_heads * dim);
    std::vector<float> outs[2] = {std::vector<float>(query.size()),
                                  std::vector<float>(query.size())};
    std::vector<int32_t> offsets(static_cast<size_t>(batch_size + 1));
    std::iota(offsets.begin(), offsets.end(), 0);
    attngen::Arguments args;
    args.k_cache = attngen::mutable_view(k_cache.data(), {blocks, kv_heads, cache_block, dim});
    args.v_cache = attngen::mutable_view(v_cache.data(), {blocks, kv_heads, cache_block, dim});
    args.block_table = attngen::view(table.data(), {batch_size, max_blocks});
    args.cache_lengths = attngen::view(lengths.data(), {batch_size});
    attngen::Arguments batched_args = args, packed_args = args;
    batched_args.query = attngen::view(query.data(), {batch_size, heads, 1, dim});
    batched_args.key = attngen::view(key.data(), {batch_size, kv_heads, 1, dim});
    batched_args.value = attngen::view(value.data(), {batch_size, kv_heads, 1, dim});
    batched_args.out = attngen::mutable_view(outs[0].data(), {batch_size, heads, 1, dim});
    packed_args.query = attngen::view(query.data(), {batch_size, heads, dim});
    packed_args.key = attngen::view(key.data(), {batch_size, kv_heads, dim});
    packed_args.value = attngen::view(value.data(), {batch_size, kv_heads, dim});
    packed_args.query_offsets = attngen::view(offsets.data(), {batch_size + 1});
    packed_args.out = attngen::mutable_view(outs[1].data(), {batch_size, heads, dim});
    PackedDecodeResult row;
    if (!run_each({{&batched, &batched_args}, {&packed, &packed_args}},
                  fmt::format("at B={}", batch_size))) {
        row.check = "ERROR";
        return row;
    }
    if (!agrees(fmt::format("{} at B={}: max|packed - batched|", packed.info.name, batch_size),
                outs[1], outs[0]))
        row.check = "MISMATCH";
    const PairTimes times = time_pair(rounds, {&batched, &batched_args}, {&packed, &packed_args});
    row.batched_ms = times.a_ms;
    row.packed_ms = times.b_ms;
    row.ratio = times.b_over_a;
    return row;
}

/** A value in [-1, 1) for each cache element, from its coordinates (splitmix64). */
float cache_value(uint64_t b, uint64_t h, uint64_t position, uint64_t d, uint64_t which) {
    uint64_t z = ((((b * 64 + h) << 24 | position) * 256 + d) << 1 | which) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>(static_cast<double>(z >> 40) / double(1 << 23) - 1.0);
}

/** A row of a cache as `dtype` stores it: its bytes, its scale (i8), what it reads back as. */
struct StoredRow {
    uint8_t bytes[512];
    float scale = 1.0f;
    std::vector<float> values;
};

/** `values` (dim of them) as a row of a `dtype` cache. */
StoredRow stored_row(attngen::DType dtype, const float *values, int64_t dim) {
    StoredRow row;
    row.values.assign(values, values + dim);
    const size_t element = attngen::dtype_size(dtype);
    if (dtype == attngen::DType::i8) {
        int8_t quantized[512];
        row.scale = attngen_test::quantize_i8(row.values.data(), row.values.size(), quantized);
        for (int64_t d = 0; d < dim; d++)
            row.values[d] = static_cast<float>(quantized[d]) * row.scale;
        std::memcpy(row.bytes, quantized, static_cast<size_t>(dim));
        return row;
    }
    for (int64_t d = 0; d < dim; d++) {
        if (dtype == attngen::DType::f16) {
            const uint16_t half = attngen_test::to_f16(row.values[d]);
            row.values[d] = attngen_test::from_f16(half);
            std::memcpy(row.bytes + d * element, &half, element);
        } else {
            std::memcpy(row.bytes + d * element, &row.values[d], element);
        }
    }
    return row;
}

/**
 * Times a decode step of `contiguous` against the same step of `paged` (the same cache
 * contents, in shuffled blocks), alternating, and checks the first and last sequences of both
 * against decode_reference over the cache as stored.
 */
CacheResult measure_cache(const attngen::Layer &contiguous, const attngen::Layer &paged,
                          int64_t batch_size, int64_t longest, const Rounds &rounds,
                          attngen_bench::ReadProbe &probe) {
    const attngen::LayerInfo &info = contiguous.info;
    const attngen::DType dtype = info.cache.dtype;
    const int64_t heads = info.heads, kv_heads = info.kv_heads, dim = info.head_dim;
    const size_t element = attngen::dtype_size(dtype);
    // Ragged: sequence b holds about longest * (1/2 + (b + 1) / 2B) tokens, one slot left for
    // the new token.
    std::vector<int32_t> lengths(static_cast<size_t>(batch_size));
    for (int64_t b = 0; b < batch_size; b++)
        lengths[b] = static_cast<int32_t>(longest / 2 + (longest / 2) * (b + 1) / batch_size - 1);
    CacheResult result;
    // An i8 cache reads a 4-byte scale per row too.
    const bool quantized = dtype == attngen::DType::i8;
    const double row_read = double(dim * element) + (quantized ? 4.0 : 0.0);
    for (int32_t length : lengths)
        result.bytes += 2.0 * double(length + 1) * double(kv_heads) * row_read;

    // The contiguous caches (B, Hkv, longest, D), and the paged ones in shuffled blocks.
    const int64_t max_blocks = longest / cache_block;
    std::vector<int32_t> table(static_cast<size_t>(batch_size * max_blocks), -1);
    int64_t blocks = 0;
    for (int64_t b = 0; b < batch_size; b++)
        blocks += (lengths[b] + cache_block) / cache_block;
    std::vector<int32_t> order(static_cast<size_t>(blocks));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    size_t next_block = 0;
    for (int64_t b = 0; b < batch_size; b++)
        for (int64_t i = 0; i * cache_block <= lengths[b]; i++)
            table[b * max_blocks + i] = order[next_block++];
    const size_t row_bytes = static_cast<size_t>(dim) * element;
    const size_t contiguous_bytes =
        static_cast<size_t>(batch_size * kv_heads * longest) * row_bytes;
    const size_t paged_bytes = static_cast<size_t>(blocks * kv_heads * cache_block) * row_bytes;
    std::vector<uint8_t> caches[4] = {
        std::vector<uint8_t>(contiguous_bytes), std::vector<uint8_t>(contiguous_bytes),
        std::vector<uint8_t>(paged_bytes), std::vector<uint8_t>(paged_bytes)};
    std::vector<float> values(static_cast<size_t>(dim));
    // An i8 cache's scales, a float per row, in the same order.
    std::vector<float> scales[4];
    for (int i = 0; i < 4 && quantized; i++)
        scales[i].resize((i < 2 ? contiguous_bytes : paged_bytes) / row_bytes);
    for (int64_t b = 0; b < batch_size; b++)
        for (int64_t h = 0; h < kv_heads; h++)
            for (int64_t p = 0; p < lengths[b]; p++)
                for (uint64_t which = 0; which < 2; which++) {
                    for (int64_t d = 0; d < dim; d++)
                        values[d] = cache_value(b, h, p, d, which);
                    const StoredRow row = stored_row(dtype, values.data(), dim);
                    const int64_t block = table[b * max_blocks + p / cache_block];
                    const size_t contiguous_row =
                        static_cast<size_t>((b * kv_heads + h) * longest + p);
                    const size_t paged_row =
                        static_cast<size_t>((block * kv_heads + h) * cache_block + p % cache_block);
                    std::memcpy(caches[which].data() + contiguous_row * row_bytes, row.bytes,
                                row_bytes);
                    std::memcpy(caches[2 + which].data() + paged_row * row_bytes, row.bytes,
                                row_bytes);
                    if (quantized) {
                        scales[which][contiguous_row] = row.scale;
                        scales[2 + which][paged_row] = row.scale;
                    }
                }
    const std::vector<float> query = random_tensor(rng, batch_size * heads * dim);
    const std::vector<float> key = random_tensor(rng, batch_size * kv_heads * dim);
    const std::vector<float> value = random_tensor(rng, batch_size * kv_heads * dim);
    std::vector<float> outs[2] = {std::vector<float>(query.size()),
                                  std::vector<float>(query.size())};

    attngen::Status status;
    auto step = [&](bool use_paged) {
        attngen::Arguments args;
        args.query = attngen::view(query.data(), {batch_size, heads, 1, dim});
        args.key = attngen::view(key.data(), {batch_size, kv_heads, 1, dim});
        args.value = attngen::view(value.data(), {batch_size, kv_heads, 1, dim});
        args.cache_lengths = attngen::view(lengths.data(), {batch_size});
        if (use_paged) {
            args.k_cache = attngen::mutable_view(caches[2].data(), dtype,
                                                 {blocks, kv_heads, cache_block, dim});
            args.v_cache = attngen::mutable_view(caches[3].data(), dtype,
                                                 {blocks, kv_heads, cache_block, dim});
            args.block_table = attngen::view(table.data(), {batch_size, max_blocks});
            if (quantized) {
                args.k_scales =
                    attngen::mutable_view(scales[2].data(), {blocks, kv_heads, cache_block});
                args.v_scales =
                    attngen::mutable_view(scales[3].data(), {blocks, kv_heads, cache_block});
            }
        } else {
            args.k_cache = attngen::mutable_view(caches[0].data(), dtype,
                                                 {batch_size, kv_heads, longest, dim});
            args.v_cache = attngen::mutable_view(caches[1].data(), dtype,
                                                 {batch_size, kv_heads, longest, dim});
            if (quantized) {
                args.k_scales =
                    attngen::mutable_view(scales[0].data(), {batch_size, kv_heads, longest});
                args.v_scales =
                    attngen::mutable_view(scales[1].data(), {batch_size, kv_heads, longest});
            }
        }
        args.out = attngen::mutable_view(outs[use_paged].data(), {batch_size, heads, 1, dim});
        attngen::Status call = attngen::run(use_paged ? paged : contiguous, args);
        if (!call && status)
            status = call;
    };
    std::vector<double> contiguous_ms, paged_ms, ratios;
    result.probe_gbps = probed_bandwidth(probe, [&] {
        step(false);
        step(true);
        run_rounds(rounds, [&] {
            contiguous_ms.push_back(elapsed_ms([&] { step(false); }));
            paged_ms.push_back(elapsed_ms([&] { step(true); }));
            ratios.push_back(paged_ms.back() / contiguous_ms.back());
            return std::max(contiguous_ms.back(), paged_ms.back());
        });
    });
    if (!status) {
        fmt::print(stderr, "bench_attention: {} at B={}: {}\n", info.name, batch_size,
                   status.message());
        result.check = "ERROR";
        return result;
    }
    result.contiguous_ms = median(contiguous_ms);
    result.paged_ms = median(paged_ms);
    result.ratio = median(ratios);

    // The first and last sequences against float64 over the cache as stored, and the new token.
    for (int64_t b : {int64_t(0), batch_size - 1}) {
        const int64_t keys = lengths[b] + 1;
        std::vector<float> k(static_cast<size_t>(kv_heads * keys * dim)), v(k.size());
        for (int64_t h = 0; h < kv_heads; h++)
            for (int64_t p = 0; p < keys; p++)
                for (uint64_t which = 0; which < 2; which++) {
                    // The new token as the layer stores it too (an i8 row by its own scale).
                    const float *fresh =
                        (which == 0 ? key : value).data() + (b * kv_heads + h) * dim;
                    for (int64_t d = 0; d < dim; d++)
                        values[d] = p == lengths[b] ? fresh[d] : cache_value(b, h, p, d, which);
                    const StoredRow row = stored_row(dtype, values.data(), dim);
                    std::copy(row.values.begin(), row.values.end(),
                              (which == 0 ? k : v).begin() + (h * keys + p) * dim);
                }
        const std::vector<double> want =
            decode_reference(info, keys, query.data() + b * heads * dim, k.data(), v.data());
        for (int use_paged = 0; use_paged < 2; use_paged++) {
            const std::vector<float> got(outs[use_paged].begin() + b * heads * dim,
                                         outs[use_paged].begin() + (b + 1) * heads * dim);
            if (!agrees(fmt::format("{} sequence {} of {}: max|attngen - reference|",
                                    (use_paged ? paged : contiguous).info.name, b, batch_size),
                        got, want))
                result.check = "MISMATCH";
        }
    }
    return result;
}

/** This process's resident memory now, from /proc/self/statm, in bytes. */
size_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    size_t pages_total = 0, pages_resident = 0;
    statm >> pages_total >> pages_resident;
    return pages_resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

/**
 * In a child process (so that nothing the benchmark did before counts): allocates and fills
 * the inputs and output of `layer` at L = memory_len, runs it once, and prints how far resident
 * memory rose above what it was before the tensors, against their size. Returns false when the
 * call failed or memory rose above twice the tensors.
 */
bool report_peak_memory(const attngen::Layer &layer) {
    std::fflush(stdout);
    const pid_t child = fork();
    if (child < 0) {
        fmt::print(stderr, "bench_attention: fork failed: {}\n", std::strerror(errno));
        return false;
    }
    if (child == 0) {
        const attngen::LayerInfo &info = layer.info;
        const int64_t size = batch * info.heads * memory_len * info.head_dim;
        const size_t before = resident_bytes();
        std::mt19937 rng(seed);
        const std::vector<float> query = random_tensor(rng, size), key = random_tensor(rng, size),
                                 value = random_tensor(rng, size);
        std::vector<float> out(static_cast<size_t>(size), 0.0f);
        attngen::Arguments args;
        args.query = attngen::view(query.data(), {batch, info.heads, memory_len, info.head_dim});
        args.key = attngen::view(key.data(), {batch, info.heads, memory_len, info.head_dim});
        args.value = attngen::view(value.data(), {batch, info.heads, memory_len, info.head_dim});
        args.out =
            attngen::mutable_view(out.data(), {batch, info.heads, memory_len, info.head_dim});
        const Clock::time_point start = Clock::now();
        const attngen::Status status = attngen::run(layer, args);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        const double peak = double(usage.ru_maxrss) * 1024; // Linux reports KiB
        const double tensors = 4.0 * double(4 * size), rise = peak - double(before);
        const bool ok = status && rise <= 2 * tensors;
        fmt::print("\npeak memory, {} at B={} H={} L={} D={}: inputs and output {:.1f} MiB; "
                   "resident memory rose {:.1f} MiB ({:.2f}x them; limit 2x; the math path's "
                   "scores alone would be {:.1f} GiB); one call {:.0f} ms: {}\n",
                   info.name, batch, info.heads, memory_len, info.head_dim, tensors / 1048576,
                   rise / 1048576, rise / tensors,
                   4.0 * double(batch * info.heads) * double(memory_len * memory_len) / 1073741824,
                   ms,
                   !status ? status.message()
                   : ok    ? "ok"
                           : "ABOVE LIMIT");
        std::fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    int wait_status = 0;
    waitpid(child, &wait_status, 0);
    return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

/** `value` right-aligned in `width` columns with `decimals` digits, or "-" for NaN. */
std::string column(double value, int width, int decimals, const char *suffix = "") {
    if (std::isnan(value))
        return fmt::format("{:>{}}", "-", width);
    return fmt::format("{:>{}.{}f}{}", value, width - static_cast<int>(std::strlen(suffix)),
                       decimals, suffix);
}

/**
 * The bw column: GB/s as a share of the probed bandwidth, 5 wide. A share above 100% says only
 * that the probe drifted below what the calls drew, a probe failure: it is printed as "probe",
 * not as a result.
 */
std::string bandwidth_share(double gbps, double probe_gbps) {
    if (!(probe_gbps > 0) || std::isnan(gbps))
        return column(NAN, 5, 0);
    const double share = 100 * gbps / probe_gbps;
    return share > 100 ? fmt::format("{:>5}", "probe") : column(share, 5, 0, "%");
}

/**
 * The FMA-peak probes taken through the run (before the first table and after each), and the
 * core clock measured with them. A row's share of the peak is taken against the best probe; a
 * share above 100% would say only that the probes read too little, so it is reported as a probe
 * failure, never as a result. The best probe is also checked against the ISA's bound, the clock
 * x 2 FMA instructions a cycle x lanes x 2 flops x threads.
 */
class PeakLog {
  public:
    /** `avx512`: whether the variant attngen runs may use AVX-512 (--cpu-variant). */
    PeakLog(int threads, bool avx512) : threads_(threads), avx512_(avx512) {}

    void probe(const std::string &when) {
        const attngen_bench::FmaPeak peak = attngen_bench::measure_fma_peak(threads_, avx512_);
        kind_ = peak.kind;
        lanes_ = peak.lanes;
        probes_.emplace_back(when, peak.gflops);
        clock_ghz_ = std::max(clock_ghz_, attngen_bench::measure_clock_ghz(threads_));
    }

    const std::string &kind() const { return kind_; }

    double best() const {
        double best = 0;
        for (const auto &entry : probes_)
            best = std::max(best, entry.second);
        return best;
    }

    /** Whether the best probe is above the ISA's bound (with 5% for the clock's own error). */
    bool failed() const { return clock_ghz_ > 0 && best() > 1.05 * bound(); }

    /** `gflops` as a share of the best probe, 5 wide: "-" without one, "probe" above 100%. */
    std::string share(double gflops) const {
        if (best() <= 0 || failed() || std::isnan(gflops))
            return fmt::format("{:>5}", "-");
        const double percent = 100 * gflops / best();
        return percent > 100 ? fmt::format("{:>5}", "probe") : fmt::format("{:>4.0f}%", percent);
    }

    void print() const {
        if (probes_.empty() || best() <= 0) {
            fmt::print("\nno FMA peak: the probe needs x86 with AVX2 and FMA\n");
            return;
        }
        std::string list;
        double worst = best();
        for (const auto &[when, gflops] : probes_) {
            list += fmt::format("{}{} {:.1f}", list.empty() ? "" : ", ", when, gflops);
            worst = std::min(worst, gflops);
        }
        fmt::print("\nFMA peak probes (f32, {}, {} threads, GFLOP/s, each the best of 5 trials of "
                   "an assembly loop of 12 independent FMA chains): {}\nbest {:.1f}, worst {:.1f} "
                   "(spread {:.1f}%)",
                   kind_, threads_, list, best(), worst, 100 * (best() - worst) / best());
        if (clock_ghz_ > 0)
            fmt::print("; clock {:.2f} GHz with {} threads busy (dependent adds): the ISA's bound "
                       "(2 FMA/cycle x {} lanes x 2 flops x threads) is {:.1f} GFLOP/s, the best "
                       "probe {:.0f}% of it",
                       clock_ghz_, threads_, lanes_, bound(), 100 * best() / bound());
        fmt::print("\n");
        if (failed())
            fmt::print("PROBE FAILURE: the best probe is above the ISA's bound (the clock probe "
                       "read too little); no share of the peak is reported\n");
    }

  private:
    double bound() const { return clock_ghz_ * 2 * lanes_ * 2 * threads_; }

    int threads_;
    bool avx512_;
    std::string kind_;
    int lanes_ = 0;
    double clock_ghz_ = 0;
    std::vector<std::pair<std::string, double>> probes_;
};

struct EnvironmentSetting {
    const char *name, *value;
};

/**
 * The peers' settings (environment variables read when they load): OpenBLAS's idle timeout, at
 * its shortest (unset, its idle worker spins for ~0.1 s after every sgemm on a core the peer's
 * own softmax needs); and with `--cpu-variant avx2` every peer's ISA capped at AVX2, so that
 * attngen's AVX2 code meets the peers an AVX2 machine would run: PyTorch's kernels
 * (ATEN_CPU_CAPABILITY) and its MKL, oneDNN (PyTorch's and the math path's) and OpenBLAS (its
 * Haswell kernels). ggml's AVX2 build is another binary (FusedPeers).
 */
std::vector<EnvironmentSetting> peer_settings(int argc, char **argv) {
    std::vector<EnvironmentSetting> settings{{"OPENBLAS_THREAD_TIMEOUT", "4"}};
    for (int i = 1; i + 1 < argc; i++)
        if (std::strcmp(argv[i], "--cpu-variant") == 0 && std::strcmp(argv[i + 1], "avx2") == 0)
            settings.insert(settings.end(), {{"ATEN_CPU_CAPABILITY", "avx2"},
                                             {"MKL_ENABLE_INSTRUCTIONS", "AVX2"},
                                             {"ONEDNN_MAX_CPU_ISA", "AVX2"},
                                             {"OPENBLAS_CORETYPE", "Haswell"}});
    return settings;
}

} // namespace

int main(int argc, char **argv) {
    // The peers read their settings from the environment when they load, OpenBLAS before main:
    // re-run once with the ones unset (a caller's own stay).
    const std::vector<EnvironmentSetting> settings = peer_settings(argc, argv);
    if (std::any_of(settings.begin(), settings.end(),
                    [](const EnvironmentSetting &s) { return std::getenv(s.name) == nullptr; })) {
        for (const EnvironmentSetting &setting : settings)
            setenv(setting.name, setting.value, 0);
        execv("/proc/self/exe", argv);
        fmt::print(stderr, "bench_attention: could not re-run with the peers' settings: {}\n",
                   std::strerror(errno));
    }

    bool help = false;
    std::optional<Options> parsed = parse_options(argc, argv, help);
    if (help) {
        print_usage();
        return 0;
    }
    if (!parsed)
        return 1;
    const Options options = *parsed;

    if (attngen::Status status = attngen::set_num_threads(options.threads); !status) {
        fmt::print(stderr, "bench_attention: {}\n", status.message());
        return 1;
    }
    if (attngen::Status status = attngen::force_cpu_variant(options.cpu_variant); !status) {
        fmt::print(stderr, "bench_attention: --cpu-variant: {}\n", status.message());
        return 1;
    }
    // The peers run --threads threads of their own, each calling single-threaded sgemms.
    openblas_set_num_threads(1);

    WorkerPool peer_pool(options.threads); // the peers' threads

    // Each prefill layer, and the same layer generated with the reference schedule.
    const std::pair<const attngen::Layer *, const attngen::Layer *> layers[] = {
        {&bench_d64_layer(), &bench_d64_reference_layer()},
        {&bench_d64_causal_layer(), &bench_d64_causal_reference_layer()},
        {&bench_d128_layer(), &bench_d128_reference_layer()},
        {&bench_d128_causal_layer(), &bench_d128_causal_reference_layer()}};

    fmt::print("attngen vs fused attention (PyTorch's CPU scaled_dot_product_attention, ggml's "
               "flash_attn_ext) and the math path (sgemm + softmax + sgemm) with OpenBLAS and "
               "with oneDNN: threads {}, seed {}, CPU {}\n",
               options.threads, seed, cpu_model());
    std::optional<attngen_bench::FusedPeers> fused;
    if (options.fused_peers && (options.prefill || options.decode)) {
        fused.emplace(options.peers_dir, ATTNGEN_BENCH_PEERS_SOURCE_DIR, options.threads,
                      options.cpu_variant == attngen::CpuVariant::avx2);
        for (size_t i = 0; i < attngen_bench::FusedPeers::count; i++) {
            const attngen_bench::FusedPeer &peer = fused->peer(i);
            fmt::print("{}: {}\n", peer.name,
                       peer.missing.empty() ? peer.description : peer.missing);
        }
    }
    std::string environment;
    for (const EnvironmentSetting &setting : settings) {
        const char *value = std::getenv(setting.name);
        environment += fmt::format(" {}={}", setting.name, value != nullptr ? value : "(unset)");
    }
    fmt::print("the peers' environment:{}\n", environment);
    PeakLog peaks(options.threads, options.cpu_variant == attngen::CpuVariant::automatic ||
                                       options.cpu_variant == attngen::CpuVariant::avx512);
    peaks.probe("start");
    const double bandwidth = attngen_bench::measure_read_bandwidth(options.threads);
    fmt::print("measured on this machine, {} threads: f32 FMA peak {:.1f} GFLOP/s ({}; probed "
               "again after each table, summary at the end), read bandwidth {:.1f} GB/s\n",
               options.threads, peaks.best(), peaks.kind(), bandwidth);
    fmt::print("f32, B={}, H={}, Lq = Lk = L; {} after a warm-up", batch,
               layers[0].first->info.heads, rounds_text(options.rounds));
    fmt::print(
        "\nGFLOP/s = 4*B*H*L*L*D / time, halved for causal; ratio = the median over the rounds "
        "of a peer's ms / attngen ms;\neach round times attngen, OpenBLAS, oneDNN, PyTorch and "
        "ggml back to back;\nPyTorch: scaled_dot_product_attention (is_causal for causal rows); "
        "ggml: flash_attn_ext with K and V in f32 and in f16, each round the faster of the two;\n"
        "OpenBLAS and oneDNN: the math path with that library's sgemm;\n"
        "reference: the layer generated with attngen's reference schedule (every stage at root, "
        "one thread, no vectorization, the L x L scores stored), timed apart, up to L = {}; "
        "ratio = its ms / attngen ms\n"
        "check: max|attngen - peer| <= {:g} * max|peer| + {:g}, for every peer (2e-3 and 1e-3 "
        "for ggml's f16 K/V), and the same for the reference against attngen\n\n",
        options.reference_max_len, relative_tolerance, absolute_tolerance);
    // A peer's columns: "<library> ms", its GFLOP/s and the ratio, as wide as their headings.
    auto peer_ms_heading = [](Blas blas) { return fmt::format("{} ms", blas_name(blas)); };
    auto fused_ms_heading = [&](size_t i) {
        return fmt::format("{} ms", i == 0 ? "PyTorch" : "ggml");
    };
    // The columns every table shares after its own leading ones: attngen, the fused peers
    // (prefill only), each math-path peer, the reference schedule (prefill only), check.
    auto print_header = [&](const std::string &leading, bool prefill) {
        std::string header = leading + fmt::format("{:>10} | {:>7} | ", "attngen ms", "GFLOP/s");
        for (size_t i = 0; prefill && i < attngen_bench::FusedPeers::count; i++)
            header +=
                fmt::format("{:>10} | {:>7} | {:>6} | ", fused_ms_heading(i), "GFLOP/s", "ratio");
        for (Blas blas : peers)
            header +=
                fmt::format("{} | {:>7} | {:>6} | ", peer_ms_heading(blas), "GFLOP/s", "ratio");
        if (prefill)
            header += fmt::format("{:>12} | {:>6} | ", "reference ms", "ratio");
        header += "check";
        fmt::print("{}\n{}\n", header, std::string(header.size(), '-'));
        std::fflush(stdout);
    };
    int failures = 0;
    // The runtime picks a layer's code path on every call; report the first row's.
    std::optional<attngen::CpuVariant> code_path;
    auto print_row = [&](const std::string &leading, const RowResult &row, double flops,
                         bool prefill) {
        if (!code_path)
            code_path = row.code_path;
        if (std::strcmp(row.check, "ok") != 0)
            failures++;
        const double gflops = flops / row.attngen_ms * 1e-6;
        std::string peer_columns;
        for (size_t i = 0; prefill && i < attngen_bench::FusedPeers::count; i++)
            peer_columns += fmt::format("{} | {} | {} | ", column(row.fused_ms[i], 10, 3),
                                        column(flops / row.fused_ms[i] * 1e-6, 7, 1),
                                        column(row.fused_ratio[i], 6, 2, "x"));
        for (size_t i = 0; i < std::size(peers); i++) {
            const double ms = row.peer_ms[i];
            peer_columns +=
                fmt::format("{} | {} | {} | ",
                            column(ms, static_cast<int>(peer_ms_heading(peers[i]).size()), 3),
                            column(flops / ms * 1e-6, 7, 1), column(row.ratio[i], 6, 2, "x"));
        }
        if (prefill)
            peer_columns += fmt::format("{} | {} | ", column(row.reference_ms, 12, 1),
                                        column(row.reference_ratio, 6, 0, "x"));
        fmt::print("{}{} | {} | {}{}\n", leading, column(row.attngen_ms, 10, 3),
                   column(gflops, 7, 1), peer_columns, row.check);
        std::fflush(stdout);
    };

    // (D, mask, L, attngen GFLOP/s) of each prefill row, for their share of the FMA peak.
    struct PrefillPoint {
        int64_t dim;
        bool causal;
        int64_t length;
        double gflops;
    };
    std::vector<PrefillPoint> prefill_points;
    if (options.prefill)
        print_header(fmt::format("{:>4} | {:<6} | {:>5} | ", "D", "mask", "L"), true);
    for (auto [layer, reference_layer] : layers) {
        if (!options.prefill)
            break;
        const attngen::LayerInfo &info = layer->info;
        for (int64_t length : lengths) {
            if (length > options.max_len)
                continue;
            const double flops = 4.0 * double(batch * info.heads * length * length) *
                                 info.head_dim * (info.causal ? 0.5 : 1.0);
            const RowResult row =
                measure(*layer, length <= options.reference_max_len ? reference_layer : nullptr,
                        length, options.rounds, peer_pool, fused ? &*fused : nullptr);
            print_row(fmt::format("{:>4} | {:<6} | {:>5} | ", info.head_dim,
                                  info.causal ? "causal" : "none", length),
                      row, flops, true);
            prefill_points.push_back(
                {info.head_dim, info.causal, length, flops / row.attngen_ms * 1e-6});
        }
    }
    if (options.prefill)
        peaks.probe("after prefill");

    if (options.mha) {
        fmt::print("\nmulti-head attention end to end: self-attention with Q, K, V and output "
                   "projections, no bias, no mask, D=64, H = M/64; f32, B=1, {}\nGFLOP/s = "
                   "(8*L*M*M + 4*L*L*M) / time; OpenBLAS and oneDNN: sgemm "
                   "projections per (block of {} rows, head), the math path per head, the heads "
                   "gathered and one output sgemm per block of rows\n\n",
                   rounds_text(options.rounds), projection_rows);
        print_header(fmt::format("{:>5} | {:>5} | ", "M", "L"), false);
        for (const attngen::Layer *layer : {&bench_mha512_layer(), &bench_mha1024_layer()}) {
            const double model = layer->info.model_dim;
            for (int64_t length : mha_lengths) {
                if (length > options.max_len)
                    continue;
                const double flops =
                    8.0 * length * model * model + 4.0 * double(length) * double(length) * model;
                print_row(fmt::format("{:>5} | {:>5} | ", layer->info.model_dim, length),
                          measure_mha(*layer, length, options.rounds, peer_pool), flops, false);
            }
        }
        peaks.probe("after multi-head");
    }

    if (options.rope) {
        fmt::print("\nrotary embeddings in prefill: D=128, H=8, causal, f32, B=1, {}; rope = neox "
                   "(theta 10000, all of D) against the same layer without it, alternating;\n"
                   "ratio = median over the rounds of rope ms / plain ms; check: against "
                   "OpenBLAS's math path on q and k rotated in double\n\n",
                   rounds_text(options.rounds));
        const std::string rope_header = fmt::format("{:>5} | {:>8} | {:>8} | {:>5} | {}", "L",
                                                    "plain ms", "rope ms", "ratio", "check");
        fmt::print("{}\n{}\n", rope_header, std::string(rope_header.size(), '-'));
        for (int64_t length : rope_lengths) {
            if (length > options.max_len)
                continue;
            const RopeResult row =
                measure_rope(bench_d128_causal_layer(), bench_d128_causal_rope_layer(), length,
                             options.rounds, peer_pool);
            if (std::strcmp(row.check, "ok") != 0)
                failures++;
            fmt::print("{:>5} | {} | {} | {} | {}\n", length, column(row.plain_ms, 8, 3),
                       column(row.rope_ms, 8, 3), column(row.ratio, 5, 3), row.check);
            std::fflush(stdout);
        }
    }

    if (options.rope)
        peaks.probe("after rope");
    if (options.packed) {
        fmt::print("\npacked sequences: D=128, H=8, causal, f32, {} sequences of lengths drawn in "
                   "[L/16, L] (one of L), {}; packed = one call of layout = packed;\npadded = one "
                   "batched call of the same sequences right-padded to L, causal + key padding; "
                   "ratio = median over the rounds of padded ms / packed ms;\nwork = sum of "
                   "L_b^2 over B * L^2; check: the packed rows against the padded call's\n\n",
                   packed_sequences, rounds_text(options.rounds));
        const std::string packed_header =
            fmt::format("{:>5} | {:>6} | {:>5} | {:>9} | {:>9} | {:>5} | {}", "L", "tokens", "work",
                        "packed ms", "padded ms", "ratio", "check");
        fmt::print("{}\n{}\n", packed_header, std::string(packed_header.size(), '-'));
        for (int64_t longest : packed_longest) {
            if (longest > options.max_len)
                continue;
            const PackedResult row =
                measure_packed(bench_d128_causal_packed_layer(), bench_d128_causal_padded_layer(),
                               longest, options.rounds);
            if (std::strcmp(row.check, "ok") != 0)
                failures++;
            double tokens = 0, squares = 0;
            for (int length : row.lengths) {
                tokens += length;
                squares += double(length) * length;
            }
            const double work = squares / (double(packed_sequences) * longest * longest);
            fmt::print("{:>5} | {:>6.0f} | {} | {} | {} | {} | {}\n", longest, tokens,
                       column(work, 5, 2), column(row.packed_ms, 9, 3), column(row.padded_ms, 9, 3),
                       column(row.ratio, 5, 2), row.check);
            std::fflush(stdout);
        }
        fmt::print(
            "\npacked decode steps: f32 paged(64) cache, H=32, Hkv=8, D=128, causal, one new "
            "token per sequence, cache lengths spread from L/2 to L, {};\nbatched = one "
            "call over (B, H, 1, D); packed = one layout = packed call over (B, H, D); "
            "ratio = median over the rounds of packed ms / batched ms\n\n",
            rounds_text(options.rounds));
        const std::string decode_header =
            fmt::format("{:>3} | {:>5} | {:>10} | {:>9} | {:>5} | {}", "B", "L", "batched ms",
                        "packed ms", "ratio", "check");
        fmt::print("{}\n{}\n", decode_header, std::string(decode_header.size(), '-'));
        for (const auto &[batch_size, longest] :
             {std::make_pair(4, 4096), std::make_pair(32, 2048)}) {
            const PackedDecodeResult row =
                measure_packed_decode(bench_cache_paged_layer(), bench_cache_paged_packed_layer(),
                                      batch_size, longest, options.rounds);
            if (std::strcmp(row.check, "ok") != 0)
                failures++;
            fmt::print("{:>3} | {:>5} | {} | {} | {} | {}\n", batch_size, longest,
                       column(row.batched_ms, 10, 3), column(row.packed_ms, 9, 3),
                       column(row.ratio, 5, 2), row.check);
            std::fflush(stdout);
        }
        peaks.probe("after packed");
    }
    if (options.decode) {
        const attngen::LayerInfo &info = bench_decode_layer().info;
        fmt::print("\ndecode: f32, B=1, Lq=1, H={}, Hkv={}, D={}; {} (and at least one per "
                   "input copy), rotating input copies of 256 MiB or more;\nGB/s = (K + V + Q + "
                   "out bytes) / "
                   "time; probe = median read bandwidth of 256 MiB passes just before and after "
                   "the row's calls (it drifts on shared machines);\nbw = GB/s / probe (\"probe\": "
                   "above 100%, a probe failure); PyTorch (enable_gqa) and ggml (the faster of f32 "
                   "and f16 K/V) in the same rounds, each with copies of its own;\nratio = median "
                   "over the rounds of peer ms / attngen ms; check: attngen against float64, the "
                   "peers against attngen\n\n",
                   info.heads, info.kv_heads, info.head_dim, rounds_text(options.rounds));
        const std::string decode_header =
            fmt::format("{:>6} | {:>10} | {:>7} | {:>7} | {:>5} | {:>10} | {:>6} | {:>10} | {:>6} "
                        "| {}",
                        "Lk", "attngen ms", "GB/s", "probe", "bw", "PyTorch ms", "ratio", "ggml ms",
                        "ratio", "check");
        fmt::print("{}\n{}\n", decode_header, std::string(decode_header.size(), '-'));
        attngen_bench::ReadProbe probe(options.threads);
        for (int64_t key_len : decode_lengths) {
            const DecodeResult row = measure_decode(bench_decode_layer(), key_len, options.rounds,
                                                    probe, fused ? &*fused : nullptr);
            if (std::strcmp(row.check, "ok") != 0)
                failures++;
            const double gbps = row.bytes / row.ms * 1e-6;
            fmt::print("{:>6} | {} | {} | {} | {} | {} | {} | {} | {} | {}\n", key_len,
                       column(row.ms, 10, 3), column(gbps, 7, 1), column(row.probe_gbps, 7, 1),
                       bandwidth_share(gbps, row.probe_gbps), column(row.fused_ms[0], 10, 3),
                       column(row.fused_ratio[0], 6, 2, "x"), column(row.fused_ms[1], 10, 3),
                       column(row.fused_ratio[1], 6, 2, "x"), row.check);
            std::fflush(stdout);
        }
    }
    if (options.decode)
        peaks.probe("after decode");
    if (options.cache) {
        const attngen::LayerInfo &info = bench_cache_contiguous_layer().info;
        fmt::print("\ncached decode steps: B sequences, cache lengths spread evenly from half of "
                   "max Lk to max Lk, one new token each; f32 layer, H={}, Hkv={}, D={}, causal; "
                   "{};\ncontiguous caches (B, Hkv, max Lk, D) against paged(64) ones in shuffled "
                   "blocks, alternating; GB/s = cached K and V bytes read / contiguous time; "
                   "probe as above;\nbw = GB/s / probe (\"probe\": above 100%, a probe failure); "
                   "paged = median of paged ms / contiguous "
                   "ms; f16/i8 = the f16 row's contig ms / the i8 row's (i8: a byte per element "
                   "and an f32 scale per row);\ncheck: first and last sequences against float64 "
                   "over the cache as stored\n\n",
                   info.heads, info.kv_heads, info.head_dim, rounds_text(options.rounds));
        const std::string header = fmt::format(
            "{:>3} | {:>6} | {:>5} | {:>9} | {:>7} | {:>7} | {:>5} | {:>9} | {:>5} | {:>6} | {}",
            "B", "max Lk", "cache", "contig ms", "GB/s", "probe", "bw", "paged ms", "paged",
            "f16/i8", "check");
        fmt::print("{}\n{}\n", header, std::string(header.size(), '-'));
        attngen_bench::ReadProbe probe(options.threads);
        const std::pair<const attngen::Layer *, const attngen::Layer *> pairs[] = {
            {&bench_cache_contiguous_layer(), &bench_cache_paged_layer()},
            {&bench_cache_contiguous_f16_layer(), &bench_cache_paged_f16_layer()},
            {&bench_cache_contiguous_i8_layer(), &bench_cache_paged_i8_layer()}};
        for (const CacheRow &row : cache_rows) {
            const int64_t longest =
                options.max_len_given ? std::min(row.longest, options.max_len) : row.longest;
            double f16_ms = std::numeric_limits<double>::quiet_NaN();
            for (auto [contiguous, paged] : pairs) {
                const attngen::DType dtype = contiguous->info.cache.dtype;
                const CacheResult result =
                    measure_cache(*contiguous, *paged, row.batch, longest, options.rounds, probe);
                if (std::strcmp(result.check, "ok") != 0)
                    failures++;
                if (dtype == attngen::DType::f16)
                    f16_ms = result.contiguous_ms;
                const double gbps = result.bytes / result.contiguous_ms * 1e-6;
                fmt::print(
                    "{:>3} | {:>6} | {:>5} | {} | {} | {} | {} | {} | {} | {} | {}\n", row.batch,
                    longest, attngen::dtype_name(dtype), column(result.contiguous_ms, 9, 3),
                    column(gbps, 7, 1), column(result.probe_gbps, 7, 1),
                    bandwidth_share(gbps, result.probe_gbps), column(result.paged_ms, 9, 3),
                    column(result.ratio, 5, 2),
                    dtype == attngen::DType::i8 ? column(f16_ms / result.contiguous_ms, 6, 2, "x")
                                                : fmt::format("{:>6}", "-"),
                    result.check);
                std::fflush(stdout);
            }
        }
    }
    if (options.memory && !report_peak_memory(bench_d64_layer()))
        failures++;

    peaks.probe("end");
    peaks.print();
    if (!prefill_points.empty()) {
        fmt::print("\nprefill, attngen's share of the best FMA probe (\"probe\": above 100%, a "
                   "probe failure, not a result):\n{:>4} | {:<6} | {:>5} | {:>7} | {:>5}\n{}\n",
                   "D", "mask", "L", "GFLOP/s", "peak", std::string(39, '-'));
        for (const PrefillPoint &point : prefill_points)
            fmt::print("{:>4} | {:<6} | {:>5} | {} | {}\n", point.dim,
                       point.causal ? "causal" : "none", point.length, column(point.gflops, 7, 1),
                       peaks.share(point.gflops));
    }

    const dnnl_version_t *onednn = dnnl_version();
    fmt::print("\nattngen code path: {}; OpenBLAS core: {} ({}); oneDNN {}.{}.{} (CPU ISA {})\n",
               attngen::cpu_variant_name(code_path.value_or(attngen::CpuVariant::automatic)),
               openblas_get_corename(), openblas_get_config(), onednn->major, onednn->minor,
               onednn->patch, static_cast<int>(dnnl_get_effective_cpu_isa()));
    if (failures > 0) {
        fmt::print(stderr, "bench_attention: {} row(s) failed or disagreed with the math path\n",
                   failures);
        return 1;
    }
    return 0;
}
