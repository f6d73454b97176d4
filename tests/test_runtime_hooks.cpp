// The runtime's process-wide hooks: forcing each x86 variant of the multi-target libraries,
// thread counts, concurrent calls, and errors raised inside generated code.
#include "test_support.h"

#include "t_d32_gqa_causal.h"
#include "t_d32_rope_neox.h"
#include "t_d64_all_masks.h"
#include "t_mha_rope.h"
#include "t_mha_self.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <thread>

using namespace attngen_test;

namespace {

struct Outcome {
    attngen::Status status;
    std::vector<float> values;
};

Outcome run_problem(const attngen::Layer &layer, const Problem &problem) {
    OutputBuffer out(layer.info.dtype, problem.out_elements());
    attngen::Status status = attngen::run(layer, problem.arguments(out.data()));
    return {status, out.values()};
}

bool bit_identical(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

} // namespace

TEST_CASE("each variant of a multi-target library runs and matches the reference") {
    const uint32_t seed = test_seed(2024);
    INFO("seed " << seed);
    for (const attngen::Layer *layer : {&t_d64_all_masks_layer(), &t_mha_self_layer(),
                                        &t_d32_rope_neox_layer(), &t_mha_rope_layer()}) {
        Problem problem(layer->info, 2, 19, 23, seed);
        std::vector<double> want = reference_attention(problem.reference());
        // A first call on automatic dispatch, so that forcing has to work after it.
        REQUIRE(run_problem(*layer, problem).status.ok());
        for_each_cpu_variant(*layer, [&] {
            Outcome outcome = run_problem(*layer, problem);
            INFO(outcome.status.message());
            REQUIRE(outcome.status.ok());
            CHECK(relative_error(outcome.values, want) <= tolerance_for(layer->info.dtype));
        });
    }
}

TEST_CASE("forcing a CPU variant that is not one is refused by value") {
    AutomaticDispatchOnExit restore;
    const attngen::Status status = attngen::force_cpu_variant(static_cast<attngen::CpuVariant>(7));
    REQUIRE_FALSE(status.ok());
    CHECK(status.message() == "attngen: force_cpu_variant was given CpuVariant value 7; expected "
                              "one of automatic, avx512, avx2, baseline, arm_fp16 (0..4)");
}

TEST_CASE("a layer with no variant the CPU may run is refused with its targets") {
    AutomaticDispatchOnExit restore;
    const attngen::Layer &full = t_d64_all_masks_layer();
    REQUIRE(full.variant_count >= 2);
    // Only the next-to-last variant (avx2, or arm_fp16), with dispatch forced to the baseline:
    // nothing may run.
    const attngen::LayerVariant &better = full.variants[full.variant_count - 2];
    attngen::Layer avx2_only{full.info, full.metadata, &better, 1};
    REQUIRE(attngen::force_cpu_variant(attngen::CpuVariant::baseline).ok());
    Problem problem(full.info, 1, 4, 5, test_seed(7));
    OutputBuffer out(full.info.dtype, problem.out_elements());
    const std::vector<float> before = out.values();
    attngen::Status status = attngen::run(avx2_only, problem.arguments(out.data()));
    REQUIRE_FALSE(status.ok());
    CHECK(status.message() == "attngen: layer 't_d64_all_masks' cannot run: it has no variant "
                              "this CPU can run with CPU variant baseline; it has " +
                                  std::string(better.target));
    CHECK(out.values() == before);
}

TEST_CASE("calls from several threads at once match the same calls made one after another") {
    const uint32_t seed = test_seed(31337);
    INFO("seed " << seed);
    const attngen::Layer *layers[] = {&t_d64_all_masks_layer(), &t_d32_gqa_causal_layer(),
                                      &t_mha_self_layer(), &t_d64_all_masks_layer()};
    std::vector<Problem> problems;
    for (int i = 0; i < 4; i++)
        problems.emplace_back(layers[i]->info, 2, 40 + 9 * i, 57 - 5 * i, seed + i);

    std::vector<std::vector<float>> serial;
    for (int i = 0; i < 4; i++) {
        Outcome outcome = run_problem(*layers[i], problems[i]);
        REQUIRE(outcome.status.ok());
        serial.push_back(outcome.values);
    }

    constexpr int repeats = 5;
    std::vector<std::vector<Outcome>> concurrent(4);
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; i++)
        threads.emplace_back([&, i] {
            for (int r = 0; r < repeats; r++)
                concurrent[i].push_back(run_problem(*layers[i], problems[i]));
        });
    for (std::thread &thread : threads)
        thread.join();
    for (int i = 0; i < 4; i++)
        for (const Outcome &outcome : concurrent[i]) {
            INFO("thread " << i << ": " << outcome.status.message());
            REQUIRE(outcome.status.ok());
            CHECK(bit_identical(outcome.values, serial[i]));
        }
}

TEST_CASE("the thread count is settable and does not change results") {
    const uint32_t seed = test_seed(555);
    INFO("seed " << seed);
    const attngen::Layer &layer = t_d64_all_masks_layer();
    Problem problem(layer.info, 2, 70, 90, seed);
    REQUIRE(attngen::set_num_threads(1).ok());
    Outcome one = run_problem(layer, problem);
    REQUIRE(attngen::set_num_threads(2).ok());
    Outcome two = run_problem(layer, problem);
    REQUIRE(attngen::set_num_threads(0).ok());
    REQUIRE(one.status.ok());
    REQUIRE(two.status.ok());
    CHECK(bit_identical(one.values, two.values));

    attngen::Status bad = attngen::set_num_threads(-3);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.message() == "attngen: threads must be in 0..1024 (0 = one per core), got -3");
}

TEST_CASE("an error inside generated code reaches the caller as a Status with Halide's message") {
    const uint32_t seed = test_seed(808);
    INFO("seed " << seed);
    const attngen::Layer &layer = t_d64_all_masks_layer();
    // A long key sequence needs heap scratch for the score tile; a tiny cap refuses it.
    Problem problem(layer.info, 1, 16, 3000, seed);
    attngen::set_scratch_limit(1024);
    Outcome capped = run_problem(layer, problem);
    attngen::set_scratch_limit(0);
    REQUIRE_FALSE(capped.status.ok());
    INFO(capped.status.message());
    CHECK(capped.status.message().rfind(
              "attngen: layer 't_d64_all_masks' failed in generated code: ", 0) == 0);
    CHECK(capped.status.message().find("memory") != std::string::npos);

    // Without the cap the same call succeeds, and freed scratch is kept for the next call.
    Outcome uncapped = run_problem(layer, problem);
    INFO(uncapped.status.message());
    REQUIRE(uncapped.status.ok());
    CHECK(relative_error(uncapped.values, reference_attention(problem.reference())) <=
          tolerance_for(layer.info.dtype));
    CHECK(attngen::scratch_bytes_in_use() > 0);
}
