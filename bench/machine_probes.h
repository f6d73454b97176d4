// Small probes of the machine the benchmark runs on, so that results can be stated as a
// fraction of what this machine can do rather than of a datasheet figure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attngen_bench {

struct FmaPeak {
    double gflops = 0; ///< best of five trials
    std::string kind;  ///< "avx512", "avx2" or "unavailable"
    int lanes = 0;     ///< f32 lanes of one FMA instruction
};

/**
 * The f32 FMA throughput with `threads` threads, each running a loop of 12 independent FMA
 * chains written in assembly (AVX-512 where the CPU has it and `avx512` allows it, else AVX2):
 * best of five trials.
 */
FmaPeak measure_fma_peak(int threads, bool avx512 = true);

/**
 * The core clock in GHz with `threads` threads busy: a chain of dependent integer adds (one per
 * cycle on every x86 core), best of five; 0 where it cannot be measured. With it, an FMA probe
 * can be checked against the ISA's bound: clock x 2 FMA instructions per cycle x lanes x 2.
 */
double measure_clock_ghz(int threads);

/** Streams a 256 MiB buffer with `threads` threads: one pass gives the read bandwidth. */
class ReadProbe {
  public:
    explicit ReadProbe(int threads);
    /** GB/s of one pass over the buffer: the better of a plain pass and a prefetched one. */
    double measure();

  private:
    double pass(bool prefetched);

    int threads_;
    std::vector<uint64_t> buffer_;
    std::vector<uint64_t> sink_;
};

/** Read bandwidth in GB/s with `threads` threads streaming a 256 MiB buffer, best of 3. */
double measure_read_bandwidth(int threads);

} // namespace attngen_bench
