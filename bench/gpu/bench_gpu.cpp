// The GPU benchmark: attngen's CUDA layers against PyTorch's scaled_dot_product_attention on the
// same machine when sdpa_peer.py's table is given (--peer FILE), TF32 off.
//   Prefill: H=16, D=64 and 128, no mask and causal, over B x L. Peers: PyTorch's math and
//   memory-efficient backends in float32 (like for like) and its flash backend in float16
//   (context). Prints ms, TFLOP/s (causal counts half the flops) and the fraction of the GPU's
//   float32 peak (SMs x FP32 lanes x 2 x clock, read from the driver).
//   Decode: one query per sequence, 32 query heads on 8 kv heads, D=128, causal, over B x Lk;
//   prints GB/s of K and V read, against the card's memory bandwidth (2 x memory clock x bus
//   width, from the driver), and the same peers (enable_gqa).
// Timings are medians of --runs runs after a warm-up, each run synchronized; inputs are random
// in [-1, 1). Without a CUDA GPU it says so and exits 0.
#include "attngen/runtime.h"

#include "gbench_d128.h"
#include "gbench_d128_causal.h"
#include "gbench_d64.h"
#include "gbench_d64_causal.h"
#include "gbench_decode_d128.h"

#include "device_buffer.h"

#include <dlfcn.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

constexpr int heads = 16;
constexpr int decode_heads = 32, decode_kv_heads = 8, decode_head_dim = 128;

/** A CUDA device attribute of device 0 (CUdevice_attribute values), or 0 if unknown. */
int device_attribute(int attribute) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cuda == nullptr)
        return 0;
    using Init = int (*)(unsigned);
    using DeviceGet = int (*)(int *, int);
    using Attribute = int (*)(int *, int, int);
    auto init = reinterpret_cast<Init>(dlsym(cuda, "cuInit"));
    auto device_get = reinterpret_cast<DeviceGet>(dlsym(cuda, "cuDeviceGet"));
    auto get = reinterpret_cast<Attribute>(dlsym(cuda, "cuDeviceGetAttribute"));
    int device = 0, value = 0;
    if (!init || !device_get || !get || init(0) != 0 || device_get(&device, 0) != 0 ||
        get(&value, attribute, device) != 0)
        return 0;
    return value;
}

/** The card's memory bandwidth in GB/s: 2 x memory clock x bus width; 0 if unknown. */
double memory_bandwidth_gbs() {
    // CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE (kHz), _GLOBAL_MEMORY_BUS_WIDTH (bits).
    const double clock_khz = device_attribute(36), bus_bits = device_attribute(37);
    return 2.0 * clock_khz * 1e3 * bus_bits / 8 / 1e9;
}

/** The GPU's float32 peak in TFLOP/s from the driver's attributes, or 0 if unknown. */
double fp32_peak_tflops(std::string &name) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    using Name = int (*)(char *, int, int);
    auto device_name = cuda ? reinterpret_cast<Name>(dlsym(cuda, "cuDeviceGetName")) : nullptr;
    char text[256] = {};
    if (device_name != nullptr && device_attribute(16) > 0 && device_name(text, 255, 0) == 0)
        name = text;
    // CU_DEVICE_ATTRIBUTE_CLOCK_RATE (kHz), _MULTIPROCESSOR_COUNT, _COMPUTE_CAPABILITY_MAJOR/MINOR.
    const int clock_khz = device_attribute(13), sms = device_attribute(16);
    const int major = device_attribute(75), minor = device_attribute(76);
    // FP32 lanes per SM: 64 on sm_60/70/80, 128 on sm_86, 89, 90 and later.
    const int lanes = (major < 8 || (major == 8 && minor == 0)) ? 64 : 128;
    return double(sms) * lanes * 2 * clock_khz * 1e3 / 1e12;
}

/**
 * A float32 tensor in GPU memory, filled from the host with random values in [-1, 1): a
 * xorshift generator, since the largest cells hold half a billion values per tensor (a Mersenne
 * twister with a uniform distribution took longer to fill them than to time them).
 */
struct DeviceTensor {
    DeviceTensor(size_t elements, uint32_t &state)
        : host(random_values(elements, state)),
          device(attngen::Device::cuda, host.data(), elements * sizeof(float)) {}
    static std::vector<float> random_values(size_t elements, uint32_t &state) {
        std::vector<float> values(elements);
        for (float &value : values) {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            value = float(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
        }
        return values;
    }
    std::vector<float> host;
    attngen_test::DeviceBuffer device;
};

/** PyTorch's times (ms) of one case: math f32, memory-efficient f32, flash f16; -1 if failed. */
struct PeerTimes {
    double math = -1, efficient = -1, flash = -1;
};

/** Prefill cases by (D, causal, B, L); decode cases by (B, Lk). */
struct PeerTable {
    std::map<std::tuple<int, int, int, int>, PeerTimes> prefill;
    std::map<std::pair<int, int>, PeerTimes> decode;
};

PeerTable read_peer(const std::string &path) {
    PeerTable table;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream row(line);
        std::string kind;
        row >> kind;
        PeerTimes times;
        if (kind == "prefill") {
            int d = 0, causal = 0, b = 0, l = 0;
            if (row >> d >> causal >> b >> l >> times.math >> times.efficient >> times.flash)
                table.prefill[{d, causal, b, l}] = times;
        } else if (kind == "decode") {
            int h = 0, hkv = 0, d = 0, b = 0, lk = 0;
            if (row >> h >> hkv >> d >> b >> lk >> times.math >> times.efficient >> times.flash &&
                h == decode_heads && hkv == decode_kv_heads && d == decode_head_dim)
                table.decode[{b, lk}] = times;
        }
    }
    return table;
}

std::vector<int> parse_list(const std::string &text) {
    std::vector<int> values;
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ','))
        values.push_back(std::atoi(item.c_str()));
    return values;
}

/** A call's shape: B, query heads on kv heads, Lq, Lk, head_dim. */
struct CallShape {
    int batch, heads, kv_heads, queries, keys, head_dim;
};

/** Median ms of `runs` synchronized calls after one warm-up; negative with the error printed. */
double time_layer(const attngen::Layer &layer, const CallShape &shape, int runs, uint32_t &rng) {
    const size_t q_elements = size_t(shape.batch) * shape.heads * shape.queries * shape.head_dim;
    const size_t kv_elements = size_t(shape.batch) * shape.kv_heads * shape.keys * shape.head_dim;
    DeviceTensor query(q_elements, rng), key(kv_elements, rng), value(kv_elements, rng),
        out(q_elements, rng);
    if (!query.device.ok() || !key.device.ok() || !value.device.ok() || !out.device.ok()) {
        fmt::print(stderr, "bench_gpu: cannot allocate {} + 2 x {} floats on the GPU\n",
                   2 * q_elements, kv_elements);
        return -1;
    }
    auto tensor = [&](DeviceTensor &t, int tensor_heads, int length) {
        attngen::Tensor view = attngen::view(static_cast<const float *>(t.device.handle()),
                                             {shape.batch, tensor_heads, length, shape.head_dim});
        view.on_device = true;
        return view;
    };
    attngen::Arguments args;
    args.query = tensor(query, shape.heads, shape.queries);
    args.key = tensor(key, shape.kv_heads, shape.keys);
    args.value = tensor(value, shape.kv_heads, shape.keys);
    args.out = attngen::mutable_view(static_cast<float *>(out.device.handle()),
                                     {shape.batch, shape.heads, shape.queries, shape.head_dim});
    args.out.on_device = true;
    std::vector<double> times;
    for (int run = 0; run <= runs; run++) {
        const auto start = std::chrono::steady_clock::now();
        attngen::Status status = attngen::run(layer, args);
        const int synced = out.device.sync();
        const auto stop = std::chrono::steady_clock::now();
        if (!status.ok() || synced != 0) {
            fmt::print(stderr, "bench_gpu: {} B={} Lq={} Lk={}: {} (sync {})\n", layer.info.name,
                       shape.batch, shape.queries, shape.keys, status.message(), synced);
            return -1;
        }
        if (run > 0) // the first run loads the module and warms up
            times.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

/** "ms | ratio" for a peer's time against attngen's (peer ms / attngen ms), or "- | -". */
std::string peer_cells(double peer_ms, double ms) {
    return peer_ms > 0 ? fmt::format("{:.3f} | {:.2f}x", peer_ms, peer_ms / ms) : "- | -";
}

} // namespace

int main(int argc, char **argv) {
    std::vector<int> batches = {1, 2, 4, 8};
    std::vector<int> lengths = {512, 1024, 2048, 4096, 8192};
    std::vector<int> decode_batches = {1, 4, 8};
    std::vector<int> decode_lengths = {1024, 4096, 16384, 32768};
    int runs = 5;
    std::string peer_path;
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--batches" && has_value)
            batches = parse_list(argv[++i]);
        else if (arg == "--lengths" && has_value)
            lengths = parse_list(argv[++i]);
        else if (arg == "--decode-batches" && has_value)
            decode_batches = parse_list(argv[++i]);
        else if (arg == "--decode-lengths" && has_value)
            decode_lengths = parse_list(argv[++i]);
        else if (arg == "--runs" && has_value)
            runs = std::max(1, std::atoi(argv[++i]));
        else if (arg == "--peer" && has_value)
            peer_path = argv[++i];
        else {
            fmt::print(stderr,
                       "usage: bench_gpu [--batches 1,2,4,8] [--lengths 512,...,8192] "
                       "[--decode-batches 1,4,8] [--decode-lengths 1024,...,32768] [--runs 5] "
                       "[--peer sdpa.txt]\n");
            return 1;
        }
    }
    if (!attngen::gpu_available(attngen::Device::cuda)) {
        fmt::print("bench_gpu: skipped: no CUDA driver with a device is present\n");
        return 0;
    }
    attngen::set_gpu_policy(attngen::GpuPolicy::require);
    std::string gpu_name;
    const double peak = fp32_peak_tflops(gpu_name);
    const double bandwidth = memory_bandwidth_gbs();
    const PeerTable peer = peer_path.empty() ? PeerTable() : read_peer(peer_path);
    fmt::print("GPU: {}, float32 peak {:.1f} TFLOP/s (SMs x FP32 lanes x 2 x clock), memory "
               "{:.0f} GB/s (2 x clock x bus width); median of {} runs\n",
               gpu_name, peak, bandwidth, runs);
    fmt::print("peers: PyTorch SDPA, TF32 off: math and memory-efficient backends in float32, "
               "flash in float16 (context); ratio = peer ms / attngen ms{}\n\n",
               peer_path.empty() ? " - not given (--peer)" : "");
    fmt::print("Prefill, H={}:\n\n", heads);
    fmt::print("| D | mask | B | L | attngen ms | TFLOP/s | % fp32 peak | math f32 ms | ratio | "
               "mem-eff f32 ms | ratio | flash f16 ms | ratio |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    uint32_t rng = 2026;
    struct Case {
        int head_dim;
        bool causal;
        const attngen::Layer &layer;
    };
    const Case cases[] = {{64, false, gbench_d64_layer()},
                          {64, true, gbench_d64_causal_layer()},
                          {128, false, gbench_d128_layer()},
                          {128, true, gbench_d128_causal_layer()}};
    int failures = 0;
    for (const Case &c : cases)
        for (int batch : batches)
            for (int length : lengths) {
                const CallShape shape{batch, heads, heads, length, length, c.head_dim};
                const double ms = time_layer(c.layer, shape, runs, rng);
                if (ms < 0) {
                    failures++;
                    continue;
                }
                const double flops =
                    4.0 * batch * heads * double(length) * length * c.head_dim / (c.causal ? 2 : 1);
                const double tflops = flops / (ms * 1e-3) / 1e12;
                auto found = peer.prefill.find({c.head_dim, c.causal ? 1 : 0, batch, length});
                const PeerTimes times = found == peer.prefill.end() ? PeerTimes() : found->second;
                fmt::print("| {} | {} | {} | {} | {:.3f} | {:.2f} | {} | {} | {} | {} |\n",
                           c.head_dim, c.causal ? "causal" : "none", batch, length, ms, tflops,
                           peak > 0 ? fmt::format("{:.0f}%", 100 * tflops / peak) : "?",
                           peer_cells(times.math, ms), peer_cells(times.efficient, ms),
                           peer_cells(times.flash, ms));
            }

    fmt::print("\nDecode, Lq=1, {} query heads on {} kv heads, D={}, causal; GB/s of K and V "
               "read:\n\n",
               decode_heads, decode_kv_heads, decode_head_dim);
    fmt::print("| B | Lk | attngen ms | GB/s | % bandwidth | math f32 ms | ratio | mem-eff f32 ms "
               "| ratio | flash f16 ms | ratio |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int batch : decode_batches)
        for (int length : decode_lengths) {
            const CallShape shape{batch, decode_heads, decode_kv_heads, 1, length, decode_head_dim};
            const double ms = time_layer(gbench_decode_d128_layer(), shape, runs, rng);
            if (ms < 0) {
                failures++;
                continue;
            }
            const double bytes =
                2.0 * 4 * batch * decode_kv_heads * double(length) * decode_head_dim;
            const double gbs = bytes / (ms * 1e-3) / 1e9;
            auto found = peer.decode.find({batch, length});
            const PeerTimes times = found == peer.decode.end() ? PeerTimes() : found->second;
            fmt::print("| {} | {} | {:.3f} | {:.0f} | {} | {} | {} | {} |\n", batch, length, ms,
                       gbs, bandwidth > 0 ? fmt::format("{:.0f}%", 100 * gbs / bandwidth) : "?",
                       peer_cells(times.math, ms), peer_cells(times.efficient, ms),
                       peer_cells(times.flash, ms));
        }
    return failures == 0 ? 0 : 1;
}
