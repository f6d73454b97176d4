// The GPU benchmark: attngen's CUDA layers (H=16, D=64 and 128, no mask and causal) over
// B x L, timed on device buffers, against PyTorch's scaled_dot_product_attention on the same
// machine when sdpa_peer.py's table is given (--peer FILE): its math backend in float32, the
// like-for-like peer, and its flash backend in float16 as context. Prints ms, TFLOP/s (causal
// counts half the flops) and the fraction of the GPU's float32 peak (SMs x FP32 lanes x 2 x
// clock, read from the driver). Timings are medians of --runs runs after a warm-up, each run
// synchronized; inputs are random. Without a CUDA GPU it says so and exits 0.
#include "attngen/runtime.h"

#include "gbench_d128.h"
#include "gbench_d128_causal.h"
#include "gbench_d64.h"
#include "gbench_d64_causal.h"

#include "device_buffer.h"

#include <dlfcn.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

constexpr int heads = 16;

/** The GPU's float32 peak in TFLOP/s from the driver's attributes, or 0 if unknown. */
double fp32_peak_tflops(std::string &name) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cuda == nullptr)
        return 0;
    using Init = int (*)(unsigned);
    using DeviceGet = int (*)(int *, int);
    using Attribute = int (*)(int *, int, int);
    using Name = int (*)(char *, int, int);
    auto init = reinterpret_cast<Init>(dlsym(cuda, "cuInit"));
    auto device_get = reinterpret_cast<DeviceGet>(dlsym(cuda, "cuDeviceGet"));
    auto attribute = reinterpret_cast<Attribute>(dlsym(cuda, "cuDeviceGetAttribute"));
    auto device_name = reinterpret_cast<Name>(dlsym(cuda, "cuDeviceGetName"));
    int device = 0;
    if (!init || !device_get || !attribute || !device_name || init(0) != 0 ||
        device_get(&device, 0) != 0)
        return 0;
    char text[256] = {};
    device_name(text, sizeof(text) - 1, device);
    name = text;
    // CU_DEVICE_ATTRIBUTE_CLOCK_RATE (kHz), _MULTIPROCESSOR_COUNT, _COMPUTE_CAPABILITY_MAJOR/MINOR.
    int clock_khz = 0, sms = 0, major = 0, minor = 0;
    if (attribute(&clock_khz, 13, device) != 0 || attribute(&sms, 16, device) != 0 ||
        attribute(&major, 75, device) != 0 || attribute(&minor, 76, device) != 0)
        return 0;
    // FP32 lanes per SM: 64 on sm_60/70/80, 128 on sm_86, 89, 90 and later.
    const int lanes = (major < 8 || (major == 8 && minor == 0)) ? 64 : 128;
    return double(sms) * lanes * 2 * clock_khz * 1e3 / 1e12;
}

/** A float32 tensor in GPU memory, filled with random values from the host. */
struct DeviceTensor {
    DeviceTensor(size_t elements, std::mt19937 &rng)
        : host(random_values(elements, rng)),
          device(attngen::Device::cuda, host.data(), elements * sizeof(float)) {}
    static std::vector<float> random_values(size_t elements, std::mt19937 &rng) {
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        std::vector<float> values(elements);
        for (float &value : values)
            value = uniform(rng);
        return values;
    }
    std::vector<float> host;
    attngen_test::DeviceBuffer device;
};

/** PyTorch's times (ms) by (D, causal, B, L): math f32 and flash f16; negative if it failed. */
using PeerTable = std::map<std::tuple<int, int, int, int>, std::pair<double, double>>;

PeerTable read_peer(const std::string &path) {
    PeerTable table;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#')
            continue;
        std::istringstream row(line);
        int d = 0, causal = 0, b = 0, l = 0;
        double math = -1, flash = -1;
        if (row >> d >> causal >> b >> l >> math >> flash)
            table[{d, causal, b, l}] = {math, flash};
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

/** Median ms of `runs` synchronized calls after one warm-up; negative with the error printed. */
double time_layer(const attngen::Layer &layer, int batch, int length, int head_dim, int runs,
                  std::mt19937 &rng) {
    const size_t elements = size_t(batch) * heads * length * head_dim;
    DeviceTensor query(elements, rng), key(elements, rng), value(elements, rng), out(elements, rng);
    if (!query.device.ok() || !key.device.ok() || !value.device.ok() || !out.device.ok()) {
        fmt::print(stderr, "bench_gpu: cannot allocate {} floats x 4 on the GPU\n", elements);
        return -1;
    }
    auto tensor = [&](DeviceTensor &t) {
        attngen::Tensor view = attngen::view(static_cast<const float *>(t.device.handle()),
                                             {batch, heads, length, head_dim});
        view.on_device = true;
        return view;
    };
    attngen::Arguments args;
    args.query = tensor(query);
    args.key = tensor(key);
    args.value = tensor(value);
    args.out = attngen::mutable_view(static_cast<float *>(out.device.handle()),
                                     {batch, heads, length, head_dim});
    args.out.on_device = true;
    std::vector<double> times;
    for (int run = 0; run <= runs; run++) {
        const auto start = std::chrono::steady_clock::now();
        attngen::Status status = attngen::run(layer, args);
        const int synced = out.device.sync();
        const auto stop = std::chrono::steady_clock::now();
        if (!status.ok() || synced != 0) {
            fmt::print(stderr, "bench_gpu: {} B={} L={}: {} (sync {})\n", layer.info.name, batch,
                       length, status.message(), synced);
            return -1;
        }
        if (run > 0) // the first run loads the module and warms up
            times.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
    std::vector<int> batches = {1, 2, 4, 8};
    std::vector<int> lengths = {512, 1024, 2048, 4096, 8192};
    int runs = 5;
    std::string peer_path;
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--batches" && has_value)
            batches = parse_list(argv[++i]);
        else if (arg == "--lengths" && has_value)
            lengths = parse_list(argv[++i]);
        else if (arg == "--runs" && has_value)
            runs = std::max(1, std::atoi(argv[++i]));
        else if (arg == "--peer" && has_value)
            peer_path = argv[++i];
        else {
            fmt::print(stderr,
                       "usage: bench_gpu [--batches 1,2,4,8] [--lengths 512,...,8192] [--runs 5] "
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
    const PeerTable peer = peer_path.empty() ? PeerTable() : read_peer(peer_path);
    fmt::print("GPU: {}, float32 peak {:.1f} TFLOP/s (SMs x FP32 lanes x 2 x clock); H={}, "
               "median of {} runs\n",
               gpu_name, peak, heads, runs);
    fmt::print("peers: PyTorch SDPA math backend float32 (ratio = its ms / attngen's), flash "
               "backend float16 (context){}\n\n",
               peer.empty() ? " - not given (--peer)" : "");
    fmt::print("| D | mask | B | L | attngen ms | TFLOP/s | % fp32 peak | SDPA math f32 ms | "
               "ratio | SDPA flash f16 ms | ratio |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::mt19937 rng(2026);
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
                const double ms = time_layer(c.layer, batch, length, c.head_dim, runs, rng);
                if (ms < 0) {
                    failures++;
                    continue;
                }
                const double flops =
                    4.0 * batch * heads * double(length) * length * c.head_dim / (c.causal ? 2 : 1);
                const double tflops = flops / (ms * 1e-3) / 1e12;
                auto peer_cell = [&](double peer_ms) {
                    return peer_ms > 0 ? fmt::format("{:.3f} | {:.2f}x", peer_ms, peer_ms / ms)
                                       : std::string("- | -");
                };
                auto found = peer.find({c.head_dim, c.causal ? 1 : 0, batch, length});
                const auto times = found == peer.end() ? std::make_pair(-1.0, -1.0) : found->second;
                fmt::print("| {} | {} | {} | {} | {:.3f} | {:.2f} | {} | {} | {} |\n", c.head_dim,
                           c.causal ? "causal" : "none", batch, length, ms, tflops,
                           peak > 0 ? fmt::format("{:.0f}%", 100 * tflops / peak) : "?",
                           peer_cell(times.first), peer_cell(times.second));
            }
    return failures == 0 ? 0 : 1;
}
