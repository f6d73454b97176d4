// Small probes of the machine the benchmark runs on, so that results can be stated as a
// fraction of what this machine can do rather than of a datasheet figure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attngen_bench {

struct FmaPeak {
    double gflops = 0; ///< best of nine trials
    std::string kind;  ///< "avx512", "avx2" or "scalar"
};

/** The f32 FMA throughput with `threads` threads: independent FMA chains, best of 9 trials. */
FmaPeak measure_fma_peak(int threads);

/** Streams a 256 MiB buffer with `threads` threads: one pass gives the read bandwidth. */
class ReadProbe {
  public:
    explicit ReadProbe(int threads);
    /** GB/s of one pass over the buffer. */
    double measure();

  private:
    int threads_;
    std::vector<uint64_t> buffer_;
    std::vector<uint64_t> sink_;
};

/** Read bandwidth in GB/s with `threads` threads streaming a 256 MiB buffer, best of 3. */
double measure_read_bandwidth(int threads);

} // namespace attngen_bench
