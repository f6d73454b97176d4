// The benchmark's fused-attention peers: PyTorch's scaled_dot_product_attention (its CPU flash
// kernel) and ggml's ggml_flash_attn_ext, each run in a process of its own that
// bench/peers/setup.sh builds (a venv with torch from PyPI; ggml from a pinned source package).
// Neither is needed to build or test attngen: a peer that is not set up gets "-" columns.
//
// The protocol, one line each way (bench/peers/ggml_peer.cpp and torch_peer.py):
//     ready DESCRIPTION                        the peer's first line
//     load DIR B H HKV LQ LK D CAUSAL COPIES   -> "ok FORM..." or "error WHY"; the peer reads
//                                              DIR/{query,key,value}.f32 and writes
//                                              DIR/PEER_FORM.out
//     time REWARM                              -> one ms per form, of one call each
//     quit
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attngen_bench {

/** A shape the peers are loaded with: (B, H or HKV, L, D) row-major f32 tensors. */
struct PeerShape {
    int64_t batch = 1, heads = 1, kv_heads = 1, query_len = 1, key_len = 1, dim = 1;
    bool causal = false;
    int copies = 1; ///< input copies a peer rotates through, one per timed call
};

/** A child process spoken to in lines over its stdin and stdout. */
class PeerProcess {
  public:
    /**
     * Starts argv[0] with argv and OMP_WAIT_POLICY=PASSIVE, and reads its "ready" line into
     * `ready_line`; nullptr if it cannot be started or does not say it is ready.
     */
    static std::unique_ptr<PeerProcess> start(const std::vector<std::string> &argv,
                                              std::string &ready_line);
    ~PeerProcess();
    PeerProcess(const PeerProcess &) = delete;
    PeerProcess &operator=(const PeerProcess &) = delete;

    /** Sends `line` and returns the answer line, or nullopt if the peer has gone. */
    std::optional<std::string> request(const std::string &line);

  private:
    PeerProcess(int pid, int to_child, int from_child);
    std::optional<std::string> read_line();

    int pid_, to_child_, from_child_;
    std::string buffered_;
};

/** One fused peer: its process and the forms it times (ggml: K/V in f32 and in f16). */
struct FusedPeer {
    std::string name;        ///< the table's column name: "PyTorch", "ggml"
    std::string file_prefix; ///< its outputs are DIR/<prefix>_<form>.out or DIR/<prefix>.out
    std::string description; ///< what it said when it started (version, ISA)
    std::string missing;     ///< why it is not running, empty when it is
    std::unique_ptr<PeerProcess> process;
    std::vector<std::string> forms;
};

/**
 * The fused peers found in `dir` (made by bench/peers/setup.sh), started with `threads` threads.
 * Each is started if present; `source_dir` is the repository's bench/peers. With `avx2`, ggml is
 * its AVX2 build (ggml_peer_avx2); PyTorch's ISA is capped by the environment it inherits
 * (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA: bench_attention sets them).
 */
class FusedPeers {
  public:
    FusedPeers(const std::string &dir, const std::string &source_dir, int threads, bool avx2);
    ~FusedPeers();
    FusedPeers(const FusedPeers &) = delete;
    FusedPeers &operator=(const FusedPeers &) = delete;

    static constexpr size_t count = 2;
    const FusedPeer &peer(size_t i) const { return peers_[i]; }
    bool any() const;

    /**
     * Writes the inputs to a scratch folder and loads every running peer with them; then compares
     * each peer's output with `expected` (B, H, LQ, D): max |peer - expected| <= relative *
     * max|expected| + absolute, with 1e-4 and 1e-5 for f32 forms, 2e-3 and 1e-3 for f16 K/V (f16
     * keeps 11 bits of inputs in [-1, 1]). Returns false (after printing why on stderr, naming
     * `what`) if one disagrees; a peer that fails to load is stopped and its columns become "-".
     */
    bool load(const std::string &what, const PeerShape &shape, const float *query, const float *key,
              const float *value, const std::vector<float> &expected);

    /** One timed call of each loaded peer: the best of its forms' ms, NaN for a peer not running.
     */
    std::vector<double> time(bool rewarm);

  private:
    void stop(size_t i, const std::string &why);

    FusedPeer peers_[count];
    std::string scratch_; ///< the folder the inputs are written to
};

} // namespace attngen_bench
