// Measuring candidates for targets this process does not JIT (another architecture, a GPU, or
// --aot): each candidate is generated ahead of time into a static library, linked with
// tools/tune_harness.c by the target's C compiler, and run by a runner command (nothing,
// qemu-aarch64, or a script that runs it on the real device), once to check its output against
// the reference and once to time it.
#pragma once

#include "layer_problem.h"
#include "tuner.h"

#include <string>
#include <vector>

namespace attngen::cli {

struct AotSetup {
    std::string spec_file, layer; ///< what `attngen compile` would be given
    std::string target;           ///< a Halide target string (no jit)
    std::string cc;               ///< the target's C compiler
    std::string runner;           ///< prefix of the harness command line; may be empty
    std::string work_dir;         ///< where data and candidates go (paths the runner must see)
    double timeout_s = 120;
};

/** The C compiler and runner that build and run `target` from this machine, by default. */
AotSetup default_aot_setup(const std::string &target);

class AotBench {
  public:
    /** Writes the shapes and `input_sets` sets of inputs for the harness into the work dir. */
    AotBench(LayerProblem problem, AotSetup setup, int input_sets, uint32_t seed);

    /** Why the work dir could not be prepared, or empty. */
    const std::string &setup_error() const { return setup_error_; }

    /** A MeasureFn: generate, build, check and time one candidate. */
    Measurement measure(const std::string &scheduler, const ParamPoint &params, int runs,
                        double slow_ms);

  private:
    LayerProblem problem_;
    AotSetup setup_;
    int sets_ = 2;
    std::vector<double> reference_;
    std::string setup_error_;
    int candidates_ = 0;
};

} // namespace attngen::cli
