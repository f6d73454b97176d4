// The caching pool behind the scratch allocator: freed blocks are kept in power-of-two size
// classes and reused; an optional cap bounds what may be held at once. No Halide here, so the
// attngen tool's JIT pipelines allocate from the same code as the generated libraries.
//
// Each thread keeps a few blocks of each size class for itself, in front of the shared cache.
// The tasks of a parallel loop allocate and free their scratch at the same moments on every
// worker; with one shared lock the workers queued on it (futex sleeps and wake-ups) at every
// task. A thread's own blocks need no lock and touch no shared cache line: decode at Lk = 1024
// (16 tasks per call) ran 0.937x the time with them, 2 threads.
#include "scratch_pool.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace attngen::scratch {

namespace {

constexpr size_t alignment = 128;  // >= halide_malloc_alignment() on every target
constexpr int smallest_class = 12; // 4 KiB
constexpr int size_classes = 48;
constexpr size_t max_cached_bytes = size_t(1) << 30;
// What a thread keeps for itself: up to 4 blocks of each class up to 4 MiB (a task's scratch
// in the shipped schedules is a few blocks of at most a few hundred KiB).
constexpr int largest_thread_class = 22;
constexpr int thread_blocks_per_class = 4;

/** Stored in front of each block: its size class, and whether it counts against the limit. */
struct alignas(alignment) BlockHeader {
    int size_class;
    bool counted;
};

size_t class_bytes(int size_class) {
    return size_t(1) << size_class;
}

struct ScratchPool {
    std::mutex mutex; ///< guards free_blocks and shared_cached_bytes
    std::vector<void *> free_blocks[size_classes];
    size_t shared_cached_bytes = 0;
    /** Bytes of every block obtained from the system and not yet returned to it. */
    std::atomic<size_t> held_bytes{0};
    /** Bytes of the live blocks allocated while a limit was set (those that count). */
    std::atomic<size_t> live_bytes{0};
    std::atomic<size_t> limit{0};
    /** Advanced by set_limit: a thread's own blocks are freed at its next allocate or release. */
    std::atomic<unsigned> generation{0};

    void return_to_system(void *block, int size_class) {
        std::free(block);
        held_bytes -= class_bytes(size_class);
    }

    void release_cache_locked() {
        for (int size_class = 0; size_class < size_classes; size_class++) {
            for (void *block : free_blocks[size_class])
                return_to_system(block, size_class);
            free_blocks[size_class].clear();
        }
        shared_cached_bytes = 0;
    }

    /** Counts `bytes` as live, or returns false when that would pass the limit. */
    bool reserve(size_t bytes) {
        size_t live = live_bytes.load(std::memory_order_relaxed);
        do {
            const size_t cap = limit.load(std::memory_order_relaxed);
            if (cap != 0 && live + bytes > cap)
                return false;
        } while (!live_bytes.compare_exchange_weak(live, live + bytes, std::memory_order_relaxed));
        return true;
    }
};

ScratchPool &pool() {
    static ScratchPool *instance = new ScratchPool; // outlives every static that may free
    return *instance;
}

thread_local bool thread_cache_closed = false;

/** The blocks one thread keeps for itself; only that thread touches them. */
class ThreadCache {
  public:
    ThreadCache() = default;
    ThreadCache(const ThreadCache &) = delete;
    ThreadCache &operator=(const ThreadCache &) = delete;
    ~ThreadCache() {
        empty();
        // A block released later in this thread's exit goes to the shared cache. (A flag of
        // its own: a store to a member here may be dropped, as the object's life ends.)
        thread_cache_closed = true;
    }

    /** A kept block of `size_class`, or nullptr. */
    void *take(int size_class) {
        if (!usable(size_class))
            return nullptr;
        follow_generation();
        int &count = counts_[size_class];
        return count == 0 ? nullptr : blocks_[size_class][--count];
    }

    /** Keeps `block` of `size_class`; false when this thread already keeps enough of them. */
    bool keep(void *block, int size_class) {
        if (!usable(size_class))
            return false;
        follow_generation();
        int &count = counts_[size_class];
        if (count == thread_blocks_per_class)
            return false;
        blocks_[size_class][count++] = block;
        return true;
    }

    /** Returns every kept block to the system. */
    void empty() {
        for (int size_class = 0; size_class <= largest_thread_class; size_class++) {
            for (int i = 0; i < counts_[size_class]; i++)
                pool().return_to_system(blocks_[size_class][i], size_class);
            counts_[size_class] = 0;
        }
    }

  private:
    static bool usable(int size_class) {
        return size_class <= largest_thread_class && !thread_cache_closed;
    }

    void follow_generation() {
        const unsigned current = pool().generation.load(std::memory_order_acquire);
        if (current != generation_) {
            empty();
            generation_ = current;
        }
    }

    void *blocks_[largest_thread_class + 1][thread_blocks_per_class] = {};
    int counts_[largest_thread_class + 1] = {};
    unsigned generation_ = 0;
};

thread_local ThreadCache thread_cache;

} // namespace

void *allocate(size_t bytes) {
    int size_class = smallest_class;
    while (size_class < size_classes - 1 && class_bytes(size_class) < bytes + sizeof(BlockHeader))
        size_class++;
    const size_t block_bytes = class_bytes(size_class);
    if (block_bytes < bytes + sizeof(BlockHeader))
        return nullptr;

    ScratchPool &p = pool();
    const bool counted = p.limit.load(std::memory_order_relaxed) != 0;
    if (counted && !p.reserve(block_bytes))
        return nullptr;
    void *block = thread_cache.take(size_class);
    if (block == nullptr) {
        std::lock_guard<std::mutex> lock(p.mutex);
        auto &blocks = p.free_blocks[size_class];
        if (!blocks.empty()) {
            block = blocks.back();
            blocks.pop_back();
            p.shared_cached_bytes -= block_bytes;
        }
    }
    if (block == nullptr) {
        block = std::aligned_alloc(alignment, block_bytes);
        if (block == nullptr) {
            if (counted)
                p.live_bytes -= block_bytes;
            return nullptr;
        }
        p.held_bytes += block_bytes;
    }
    auto *header = static_cast<BlockHeader *>(block);
    header->size_class = size_class;
    header->counted = counted;
    return static_cast<char *>(block) + sizeof(BlockHeader);
}

void release(void *memory) {
    if (memory == nullptr)
        return;
    void *block = static_cast<char *>(memory) - sizeof(BlockHeader);
    const auto *header = static_cast<const BlockHeader *>(block);
    const int size_class = header->size_class;
    const size_t block_bytes = class_bytes(size_class);
    ScratchPool &p = pool();
    if (header->counted)
        p.live_bytes -= block_bytes;
    if (thread_cache.keep(block, size_class))
        return;
    {
        std::lock_guard<std::mutex> lock(p.mutex);
        if (p.shared_cached_bytes + block_bytes <= max_cached_bytes) {
            p.free_blocks[size_class].push_back(block);
            p.shared_cached_bytes += block_bytes;
            return;
        }
    }
    p.return_to_system(block, size_class);
}

void set_limit(size_t bytes) {
    ScratchPool &p = pool();
    p.limit = bytes;
    p.generation.fetch_add(1, std::memory_order_acq_rel);
    {
        std::lock_guard<std::mutex> lock(p.mutex);
        p.release_cache_locked();
    }
    thread_cache.empty();
}

size_t bytes_held() {
    return pool().held_bytes.load();
}

} // namespace attngen::scratch
