// The caching pool behind generated code's scratch (runtime/scratch_pool.cpp): blocks are never
// handed to two owners at once, the limit refuses what would pass it, and the bytes held are
// given back when a thread ends (also for a block released after its own cache is gone) and when
// a limit is set.
#include "scratch_pool.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace scratch = attngen::scratch;

namespace {

/** A block a thread holds, whose first and last (up to) 4 KiB it filled with `tag`. */
struct Block {
    unsigned char *data = nullptr;
    size_t bytes = 0;
    unsigned char tag = 0;
};

size_t edge_bytes(const Block &block) {
    return std::min<size_t>(block.bytes, 4096);
}

void fill(const Block &block) {
    std::memset(block.data, block.tag, edge_bytes(block));
    std::memset(block.data + block.bytes - edge_bytes(block), block.tag, edge_bytes(block));
}

bool still_filled(const Block &block) {
    for (size_t i = 0; i < edge_bytes(block); i++)
        if (block.data[i] != block.tag || block.data[block.bytes - 1 - i] != block.tag)
            return false;
    return true;
}

} // namespace

TEST_CASE("scratch blocks taken by several threads at once are never shared") {
    const uint32_t seed = attngen_test::test_seed(4242);
    INFO("seed " << seed);
    constexpr int threads = 4, steps = 3000;
    std::vector<int> failures(threads, 0);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; t++)
        workers.emplace_back([&, t] {
            std::mt19937 rng(seed + static_cast<uint32_t>(t));
            std::vector<Block> held;
            for (int step = 0; step < steps; step++) {
                // Mostly the sizes of a task's scratch, sometimes one past a thread's own cache.
                const size_t bytes = (rng() % 32 == 0) ? (size_t(5) << 20) : 1 + rng() % 200000;
                if (held.size() < 6 && rng() % 2 == 0) {
                    Block block{static_cast<unsigned char *>(scratch::allocate(bytes)), bytes,
                                static_cast<unsigned char>(1 + (t * 64 + step) % 255)};
                    if (block.data == nullptr ||
                        reinterpret_cast<uintptr_t>(block.data) % 128 != 0) {
                        failures[t]++;
                        continue;
                    }
                    fill(block);
                    held.push_back(block);
                } else if (!held.empty()) {
                    const size_t pick = rng() % held.size();
                    failures[t] += still_filled(held[pick]) ? 0 : 1;
                    scratch::release(held[pick].data);
                    held.erase(held.begin() + static_cast<std::ptrdiff_t>(pick));
                }
            }
            for (const Block &block : held) {
                failures[t] += still_filled(block) ? 0 : 1;
                scratch::release(block.data);
            }
        });
    for (std::thread &worker : workers)
        worker.join();
    for (int t = 0; t < threads; t++) {
        INFO("thread " << t);
        CHECK(failures[t] == 0);
    }
}

TEST_CASE("scratch a thread keeps for itself is given back when the thread ends") {
    scratch::set_limit(0);
    const size_t before = scratch::bytes_held();
    size_t while_alive = 0;
    std::thread worker([&] {
        void *blocks[3];
        for (void *&block : blocks)
            block = scratch::allocate(10000); // a 16 KiB block each
        for (void *block : blocks)
            scratch::release(block);
        while_alive = scratch::bytes_held();
    });
    worker.join();
    CHECK(while_alive == before + 3 * 16384);
    CHECK(scratch::bytes_held() == before);
}

TEST_CASE("the scratch limit refuses what would pass it and empties the cache") {
    scratch::set_limit(0);
    const size_t before = scratch::bytes_held();
    // 20000 bytes take a 32 KiB block: two fit under 64 KiB, a third does not.
    scratch::set_limit(65536);
    void *first = scratch::allocate(20000);
    void *second = scratch::allocate(20000);
    void *third = scratch::allocate(20000);
    CHECK(first != nullptr);
    CHECK(second != nullptr);
    CHECK(third == nullptr);
    scratch::release(first);
    void *again = scratch::allocate(20000);
    CHECK(again != nullptr);
    scratch::release(again);
    scratch::release(second);
    CHECK(scratch::bytes_held() == before + 2 * 32768);
    // Blocks allocated without a limit do not count against one set later.
    scratch::set_limit(0);
    CHECK(scratch::bytes_held() == before);
    void *uncounted = scratch::allocate(20000);
    scratch::set_limit(32768);
    void *counted = scratch::allocate(20000);
    CHECK(counted != nullptr);
    scratch::release(uncounted);
    scratch::release(counted);
    scratch::set_limit(0);
    CHECK(scratch::bytes_held() == before);
}

namespace {

/** Releases its block when the thread that made it ends, after that thread's own cache. */
struct ReleaseAtThreadExit {
    void *block = nullptr;
    ~ReleaseAtThreadExit() { scratch::release(block); }
};

} // namespace

TEST_CASE("scratch released after a thread's own cache is gone goes to the shared cache") {
    scratch::set_limit(0);
    const size_t before = scratch::bytes_held();
    std::thread worker([] {
        // Made before the thread's cache, so destroyed after it.
        thread_local ReleaseAtThreadExit late;
        late.block = scratch::allocate(10000);
    });
    worker.join();
    CHECK(scratch::bytes_held() == before + 16384);
    scratch::set_limit(0); // empties the shared cache, where the block must be
    CHECK(scratch::bytes_held() == before);
}
