// The benchmark's ggml peer: ggml_flash_attn_ext, the fused attention of llama.cpp, on ggml's CPU
// backend. bench_attention starts it as `ggml_peer THREADS` and talks to it in lines over
// stdin/stdout (see peer protocol in bench_attention.cpp):
//
//     load DIR B H HKV LQ LK D CAUSAL COPIES   reads DIR/query.f32, key.f32, value.f32 (B, H or
//                                              HKV, L, D row-major), runs each form once, writes
//                                              DIR/ggml_f32.out and DIR/ggml_f16.out (B, H, LQ, D);
//                                              answers "ok f32 f16" or "error WHY"
//     time REWARM                              times one call of each form, after an untimed one
//                                              when REWARM is 1; answers "MS_F32 MS_F16"
//     quit
//
// Two forms: K and V in f32, and in f16 as llama.cpp keeps its cache (converted at load, not
// timed). COPIES > 1 makes that many copies of the inputs, and each timed call takes the next,
// so that decode calls read K and V from memory rather than from the caches.
#include <ggml-cpu.h>
#include <ggml.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Shape {
    int64_t batch = 0, heads = 0, kv_heads = 0, query_len = 0, key_len = 0, dim = 0;
    bool causal = false;
};

bool read_file(const std::string &path, std::vector<float> &data, int64_t count) {
    data.resize(static_cast<size_t>(count));
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char *>(data.data()), static_cast<std::streamsize>(count * 4));
    return in.gcount() == count * 4;
}

struct ContextDeleter {
    void operator()(ggml_context *context) const { ggml_free(context); }
};

/** One form (K/V dtype) over every copy: a graph per copy, planned once. */
struct Form {
    ggml_type kv_type;
    std::vector<ggml_cgraph *> graphs;
    std::vector<ggml_tensor *> outputs;
    std::vector<ggml_cplan> plans;
    std::vector<std::vector<uint8_t>> work;
};

class Peer {
  public:
    explicit Peer(int threads) : threads_(threads) {}

    std::string load(const std::string &dir, const Shape &shape, int copies) {
        shape_ = shape;
        next_ = 0;
        const int64_t q_count = shape.batch * shape.heads * shape.query_len * shape.dim;
        const int64_t kv_count = shape.batch * shape.kv_heads * shape.key_len * shape.dim;
        std::vector<float> query, key, value;
        if (!read_file(dir + "/query.f32", query, q_count) ||
            !read_file(dir + "/key.f32", key, kv_count) ||
            !read_file(dir + "/value.f32", value, kv_count))
            return "error cannot read the inputs in " + dir;
        const size_t bytes_per_copy = size_t(q_count) * 4 * 3 + size_t(kv_count) * (4 + 2) * 2 +
                                      size_t(shape.key_len * shape.query_len) * 2 +
                                      64 * ggml_tensor_overhead();
        ggml_init_params params{};
        params.mem_size = bytes_per_copy * size_t(copies) + 2 * ggml_graph_overhead() * copies +
                          (size_t(1) << 20);
        context_.reset(ggml_init(params));
        if (!context_)
            return "error ggml_init failed";
        ggml_context *ctx = context_.get();

        // ggml's dimensions run innermost first: (B, H, L, D) row-major is [D, L, H, B].
        ggml_tensor *mask = nullptr;
        if (shape
                .causal) { // bottom-right aligned: key j is visible to query i iff j <= i + Lk - Lq
            mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, shape.key_len, shape.query_len);
            auto *bits = static_cast<ggml_fp16_t *>(mask->data);
            for (int64_t i = 0; i < shape.query_len; i++)
                for (int64_t j = 0; j < shape.key_len; j++)
                    bits[i * shape.key_len + j] = ggml_fp32_to_fp16(
                        j <= i + shape.key_len - shape.query_len ? 0.0f : -INFINITY);
        }
        const float scale = 1.0f / std::sqrt(float(shape.dim));
        forms_ = {Form{GGML_TYPE_F32, {}, {}, {}, {}}, Form{GGML_TYPE_F16, {}, {}, {}, {}}};
        for (int copy = 0; copy < copies; copy++) {
            ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, shape.dim, shape.query_len,
                                                shape.heads, shape.batch);
            std::copy(query.begin(), query.end(), static_cast<float *>(q->data));
            for (Form &form : forms_) {
                ggml_tensor *k = ggml_new_tensor_4d(ctx, form.kv_type, shape.dim, shape.key_len,
                                                    shape.kv_heads, shape.batch);
                ggml_tensor *v = ggml_new_tensor_4d(ctx, form.kv_type, shape.dim, shape.key_len,
                                                    shape.kv_heads, shape.batch);
                fill(k, key);
                fill(v, value);
                ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0f, 0.0f);
                ggml_cgraph *graph = ggml_new_graph(ctx);
                ggml_build_forward_expand(graph, out);
                form.graphs.push_back(graph);
                form.outputs.push_back(out);
            }
        }
        for (Form &form : forms_)
            for (ggml_cgraph *graph : form.graphs) {
                form.plans.push_back(ggml_graph_plan(graph, threads_, nullptr));
                form.work.emplace_back(form.plans.back().work_size);
                form.plans.back().work_data = form.work.back().data();
            }
        // Run each form once on copy 0 and write its output in (B, H, LQ, D).
        for (Form &form : forms_) {
            if (ggml_graph_compute(form.graphs[0], &form.plans[0]) != GGML_STATUS_SUCCESS)
                return "error ggml_graph_compute failed";
            // The result is [D, H, LQ, B]: out[b][i][h][d].
            const float *result = static_cast<const float *>(form.outputs[0]->data);
            std::vector<float> out(static_cast<size_t>(q_count));
            for (int64_t b = 0; b < shape.batch; b++)
                for (int64_t h = 0; h < shape.heads; h++)
                    for (int64_t i = 0; i < shape.query_len; i++)
                        for (int64_t d = 0; d < shape.dim; d++)
                            out[size_t(((b * shape.heads + h) * shape.query_len + i) * shape.dim +
                                       d)] =
                                result[((b * shape.query_len + i) * shape.heads + h) * shape.dim +
                                       d];
            const std::string name =
                dir + (form.kv_type == GGML_TYPE_F32 ? "/ggml_f32.out" : "/ggml_f16.out");
            std::ofstream file(name, std::ios::binary);
            file.write(reinterpret_cast<const char *>(out.data()),
                       static_cast<std::streamsize>(out.size() * 4));
            if (!file)
                return "error cannot write " + name;
        }
        return "ok f32 f16";
    }

    std::string time(bool rewarm) {
        if (forms_.empty())
            return "error nothing loaded";
        const size_t copy = next_++ % forms_[0].graphs.size();
        std::ostringstream answer;
        for (Form &form : forms_) {
            if (rewarm)
                ggml_graph_compute(form.graphs[copy], &form.plans[copy]);
            const auto start = std::chrono::steady_clock::now();
            if (ggml_graph_compute(form.graphs[copy], &form.plans[copy]) != GGML_STATUS_SUCCESS)
                return "error ggml_graph_compute failed";
            const std::chrono::duration<double, std::milli> elapsed =
                std::chrono::steady_clock::now() - start;
            answer << (&form == &forms_[0] ? "" : " ") << elapsed.count();
        }
        return answer.str();
    }

  private:
    static void fill(ggml_tensor *tensor, const std::vector<float> &values) {
        if (tensor->type == GGML_TYPE_F32) {
            std::copy(values.begin(), values.end(), static_cast<float *>(tensor->data));
            return;
        }
        ggml_fp32_to_fp16_row(values.data(), static_cast<ggml_fp16_t *>(tensor->data),
                              static_cast<int64_t>(values.size()));
    }

    int threads_;
    Shape shape_;
    size_t next_ = 0;
    std::unique_ptr<ggml_context, ContextDeleter> context_;
    std::vector<Form> forms_;
};

} // namespace

int main(int argc, char **argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
    if (threads < 1) {
        std::fprintf(stderr, "usage: ggml_peer THREADS\n");
        return 2;
    }
    Peer peer(threads);
    std::cout << "ready ggml " << ggml_version() << " (CPU backend, "
              << (ggml_cpu_has_avx512() ? "AVX-512"
                  : ggml_cpu_has_avx2() ? "AVX2"
                                        : "no AVX2")
              << ")" << std::endl;
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream words(line);
        std::string command;
        words >> command;
        if (command == "quit")
            break;
        if (command == "load") {
            std::string dir;
            Shape shape;
            int causal = 0, copies = 0;
            words >> dir >> shape.batch >> shape.heads >> shape.kv_heads >> shape.query_len >>
                shape.key_len >> shape.dim >> causal >> copies;
            shape.causal = causal != 0;
            if (!words || copies < 1 || shape.batch < 1 || shape.heads < 1 || shape.kv_heads < 1 ||
                shape.heads % shape.kv_heads != 0 || shape.query_len < 1 ||
                shape.key_len < shape.query_len || shape.dim < 1)
                std::cout << "error malformed load: " << line << std::endl;
            else
                std::cout << peer.load(dir, shape, copies) << std::endl;
        } else if (command == "time") {
            int rewarm = 0;
            words >> rewarm;
            std::cout << peer.time(rewarm != 0) << std::endl;
        } else {
            std::cout << "error unknown command: " << line << std::endl;
        }
    }
    return 0;
}
