// The fused-attention peers' processes (see fused_peers.h).
#include "fused_peers.h"

#include "agreement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace attngen_bench {

namespace {

bool is_executable(const std::string &path) {
    return access(path.c_str(), X_OK) == 0;
}

bool write_file(const std::string &path, const float *data, int64_t count) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(count * 4));
    return static_cast<bool>(out);
}

bool read_file(const std::string &path, std::vector<float> &data) {
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char *>(data.data()), static_cast<std::streamsize>(data.size() * 4));
    return in.gcount() == static_cast<std::streamsize>(data.size() * 4);
}

const char *const input_names[] = {"query.f32", "key.f32", "value.f32"};

} // namespace

std::unique_ptr<PeerProcess> PeerProcess::start(const std::vector<std::string> &argv,
                                                std::string &ready_line) {
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0)
        return nullptr;
    if (pipe2(from_child, O_CLOEXEC) != 0) {
        close(to_child[0]);
        close(to_child[1]);
        return nullptr;
    }
    std::vector<char *> args;
    for (const std::string &arg : argv)
        args.push_back(const_cast<char *>(arg.c_str()));
    args.push_back(nullptr);
    // The peers' OpenMP threads sleep as soon as a call is over. By default they spin for a
    // while after it, and took the cores from the next call timed in the round: attngen's
    // L=512 rows ran up to twice as slow after them. Their own calls do not wait on OpenMP.
    static char passive[] = "OMP_WAIT_POLICY=PASSIVE";
    std::vector<char *> environment{passive};
    for (char **variable = environ; *variable != nullptr; variable++)
        if (std::strncmp(*variable, "OMP_WAIT_POLICY=", 16) != 0)
            environment.push_back(*variable);
    environment.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) { // the child: its stdin and stdout are the pipes, its stderr ours
        dup2(to_child[0], STDIN_FILENO);
        dup2(from_child[1], STDOUT_FILENO);
        execve(args[0], args.data(), environment.data());
        std::fprintf(stderr, "bench_attention: cannot run %s: %s\n", args[0], std::strerror(errno));
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    if (pid < 0) {
        close(to_child[1]);
        close(from_child[0]);
        return nullptr;
    }
    std::unique_ptr<PeerProcess> process(new PeerProcess(pid, to_child[1], from_child[0]));
    std::optional<std::string> ready = process->read_line();
    if (!ready || ready->rfind("ready ", 0) != 0)
        return nullptr;
    ready_line = ready->substr(6);
    return process;
}

PeerProcess::PeerProcess(int pid, int to_child, int from_child)
    : pid_(pid), to_child_(to_child), from_child_(from_child) {}

PeerProcess::~PeerProcess() {
    const char quit[] = "quit\n";
    [[maybe_unused]] ssize_t ignored = write(to_child_, quit, sizeof quit - 1);
    close(to_child_); // a peer that does not read "quit" sees the end of its input
    close(from_child_);
    waitpid(pid_, nullptr, 0);
}

std::optional<std::string> PeerProcess::read_line() {
    for (;;) {
        const size_t end = buffered_.find('\n');
        if (end != std::string::npos) {
            std::string line = buffered_.substr(0, end);
            buffered_.erase(0, end + 1);
            return line;
        }
        char chunk[4096];
        const ssize_t got = read(from_child_, chunk, sizeof chunk);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return std::nullopt;
        buffered_.append(chunk, static_cast<size_t>(got));
    }
}

std::optional<std::string> PeerProcess::request(const std::string &line) {
    const std::string text = line + "\n";
    size_t sent = 0;
    while (sent < text.size()) {
        const ssize_t wrote = write(to_child_, text.data() + sent, text.size() - sent);
        if (wrote < 0 && errno == EINTR)
            continue;
        if (wrote <= 0)
            return std::nullopt;
        sent += static_cast<size_t>(wrote);
    }
    return read_line();
}

FusedPeers::FusedPeers(const std::string &dir, const std::string &source_dir, int threads,
                       bool avx2) {
    std::signal(SIGPIPE, SIG_IGN); // a peer that dies makes its writes fail, not the benchmark
    const std::string setup = "bench/peers/setup.sh";
    peers_[0].name = "PyTorch";
    peers_[0].file_prefix = "torch";
    peers_[1].name = "ggml";
    peers_[1].file_prefix = "ggml";
    const std::string python = dir + "/venv/bin/python";
    const std::vector<std::string> commands[count] = {
        {python, source_dir + "/torch_peer.py", std::to_string(threads)},
        {dir + (avx2 ? "/ggml_peer_avx2" : "/ggml_peer"), std::to_string(threads)}};
    for (size_t i = 0; i < count; i++) {
        FusedPeer &peer = peers_[i];
        if (!is_executable(commands[i][0])) {
            peer.missing =
                fmt::format("not set up ({} is absent; {} sets it up)", commands[i][0], setup);
            continue;
        }
        peer.process = PeerProcess::start(commands[i], peer.description);
        if (!peer.process)
            peer.missing = fmt::format("{} did not start (see above)", commands[i][0]);
    }
    char pattern[] = "/tmp/attngen-bench-XXXXXX";
    if (any()) {
        if (mkdtemp(pattern) == nullptr) {
            for (size_t i = 0; i < count; i++)
                stop(i, fmt::format("no scratch folder: {}", std::strerror(errno)));
        } else {
            scratch_ = pattern;
        }
    }
}

FusedPeers::~FusedPeers() {
    for (FusedPeer &peer : peers_)
        peer.process.reset();
    if (scratch_.empty())
        return;
    for (const char *name : input_names)
        std::remove((scratch_ + "/" + name).c_str());
    for (const char *name : {"torch.out", "ggml_f32.out", "ggml_f16.out"})
        std::remove((scratch_ + "/" + name).c_str());
    rmdir(scratch_.c_str());
}

bool FusedPeers::any() const {
    return std::any_of(std::begin(peers_), std::end(peers_),
                       [](const FusedPeer &peer) { return peer.process != nullptr; });
}

void FusedPeers::stop(size_t i, const std::string &why) {
    fmt::print(stderr, "bench_attention: {} peer stopped: {}\n", peers_[i].name, why);
    peers_[i].process.reset();
    peers_[i].missing = why;
    peers_[i].forms.clear();
}

bool FusedPeers::load(const std::string &what, const PeerShape &shape, const float *query,
                      const float *key, const float *value, const std::vector<float> &expected) {
    if (!any())
        return true;
    const int64_t query_count = shape.batch * shape.heads * shape.query_len * shape.dim;
    const int64_t kv_count = shape.batch * shape.kv_heads * shape.key_len * shape.dim;
    const float *inputs[] = {query, key, value};
    const int64_t counts[] = {query_count, kv_count, kv_count};
    for (size_t i = 0; i < 3; i++)
        if (!write_file(scratch_ + "/" + input_names[i], inputs[i], counts[i])) {
            for (size_t p = 0; p < count; p++)
                if (peers_[p].process)
                    stop(p, fmt::format("cannot write {}/{}", scratch_, input_names[i]));
            return true;
        }
    bool agree = true;
    const std::string command = fmt::format(
        "load {} {} {} {} {} {} {} {} {}", scratch_, shape.batch, shape.heads, shape.kv_heads,
        shape.query_len, shape.key_len, shape.dim, shape.causal ? 1 : 0, shape.copies);
    for (size_t p = 0; p < count; p++) {
        FusedPeer &peer = peers_[p];
        if (!peer.process)
            continue;
        const std::optional<std::string> answer = peer.process->request(command);
        if (!answer || answer->rfind("ok", 0) != 0) {
            stop(p, answer ? *answer : "it exited");
            continue;
        }
        std::istringstream words(answer->substr(2));
        peer.forms.clear();
        for (std::string form; words >> form;)
            peer.forms.push_back(form);
        std::vector<float> out(expected.size());
        for (const std::string &form : peer.forms) {
            const bool single = peer.forms.size() == 1;
            const std::string file =
                scratch_ + "/" + peer.file_prefix + (single ? "" : "_" + form) + ".out";
            if (!read_file(file, out)) {
                stop(p, "cannot read " + file);
                break;
            }
            // Rounding K and V (in [-1, 1]) to f16 moves an output by up to about 2^-11.
            const bool half = form == "f16";
            if (!agrees(fmt::format("{}: max|attngen - {} ({})|", what, peer.name, form), out,
                        expected, half ? 2e-3 : 1e-4, half ? 1e-3 : 1e-5))
                agree = false;
        }
    }
    return agree;
}

std::vector<double> FusedPeers::time(bool rewarm) {
    std::vector<double> best(count, std::numeric_limits<double>::quiet_NaN());
    const std::string command = rewarm ? "time 1" : "time 0";
    for (size_t p = 0; p < count; p++) {
        if (!peers_[p].process || peers_[p].forms.empty())
            continue;
        const std::optional<std::string> answer = peers_[p].process->request(command);
        std::istringstream words(answer.value_or("error it exited"));
        std::vector<double> times;
        for (double ms; words >> ms;)
            times.push_back(ms);
        if (times.size() != peers_[p].forms.size()) {
            stop(p, answer.value_or("it exited"));
            continue;
        }
        best[p] = *std::min_element(times.begin(), times.end());
    }
    return best;
}

} // namespace attngen_bench
