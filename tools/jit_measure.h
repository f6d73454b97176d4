// Measuring candidates on this machine: each candidate is JIT-compiled and run in a child
// process (fork), so a candidate that crashes or hangs is recorded as such and the search goes
// on; the inputs and the reference output are computed once, before the first fork.
#pragma once

#include "layer_problem.h"
#include "tuner.h"

#include "Halide.h"

#include <string>
#include <vector>

namespace attngen::cli {

/** The Halide autoschedulers Debian's Halide 14 ships, by the names `tune --baselines` takes. */
const std::vector<std::string> &autoscheduler_names();

class JitBench {
  public:
    /**
     * `input_sets` >= 2 sets of inputs are rotated through the timed runs so that no run finds
     * the previous run's inputs in cache; the output is checked on the first set.
     */
    JitBench(LayerProblem problem, const Halide::Target &target, int input_sets, uint32_t seed,
             int threads, double timeout_s);

    /** A MeasureFn: one candidate in a child process. */
    Measurement measure(const std::string &scheduler, const ParamPoint &params, int runs,
                        double slow_ms);

    /** Bytes of one input set, to choose how many to rotate. */
    static size_t input_bytes(const InputSet &inputs);

  private:
    Measurement run_candidate(const std::string &scheduler, const ParamPoint &params, int runs,
                              double slow_ms);

    LayerProblem problem_;
    Halide::Target target_;
    std::vector<InputSet> input_sets_;
    std::vector<double> reference_;
    int threads_;
    double timeout_s_;
};

} // namespace attngen::cli
