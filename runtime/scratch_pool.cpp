// The caching pool behind the scratch allocator: freed blocks are kept in power-of-two size
// classes and reused; an optional cap bounds what may be held at once. No Halide here, so the
// attngen tool's JIT pipelines allocate from the same code as the generated libraries.
#include "scratch_pool.h"

#include <cstdlib>
#include <mutex>
#include <vector>

namespace attngen::scratch {

namespace {

constexpr size_t alignment = 128; // >= halide_malloc_alignment() on every target
constexpr int size_classes = 48;
constexpr size_t max_cached_bytes = size_t(1) << 30;

/** Stored in front of each block: which size class it belongs to. */
struct alignas(alignment) BlockHeader {
    int size_class;
};

struct ScratchPool {
    std::mutex mutex;
    std::vector<void *> free_blocks[size_classes];
    size_t live_bytes = 0;
    size_t cached_bytes = 0;
    size_t limit = 0;

    void release_cache_locked() {
        for (auto &blocks : free_blocks) {
            for (void *block : blocks)
                std::free(block);
            blocks.clear();
        }
        cached_bytes = 0;
    }
};

ScratchPool &pool() {
    static ScratchPool *instance = new ScratchPool; // outlives every static that may free
    return *instance;
}

size_t class_bytes(int size_class) {
    return size_t(1) << size_class;
}

} // namespace

void *allocate(size_t bytes) {
    int size_class = 12; // 4 KiB
    while (size_class < size_classes - 1 && class_bytes(size_class) < bytes + sizeof(BlockHeader))
        size_class++;
    const size_t block_bytes = class_bytes(size_class);
    if (block_bytes < bytes + sizeof(BlockHeader))
        return nullptr;

    ScratchPool &p = pool();
    void *block = nullptr;
    {
        std::lock_guard<std::mutex> lock(p.mutex);
        if (p.limit != 0 && p.live_bytes + block_bytes > p.limit)
            return nullptr;
        auto &blocks = p.free_blocks[size_class];
        if (!blocks.empty()) {
            block = blocks.back();
            blocks.pop_back();
            p.cached_bytes -= block_bytes;
        }
        p.live_bytes += block_bytes;
    }
    if (block == nullptr)
        block = std::aligned_alloc(alignment, block_bytes);
    if (block == nullptr) {
        std::lock_guard<std::mutex> lock(p.mutex);
        p.live_bytes -= block_bytes;
        return nullptr;
    }
    static_cast<BlockHeader *>(block)->size_class = size_class;
    return static_cast<char *>(block) + sizeof(BlockHeader);
}

void release(void *memory) {
    if (memory == nullptr)
        return;
    void *block = static_cast<char *>(memory) - sizeof(BlockHeader);
    const int size_class = static_cast<BlockHeader *>(block)->size_class;
    const size_t block_bytes = class_bytes(size_class);
    ScratchPool &p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    p.live_bytes -= block_bytes;
    if (p.cached_bytes + block_bytes > max_cached_bytes) {
        std::free(block);
        return;
    }
    p.free_blocks[size_class].push_back(block);
    p.cached_bytes += block_bytes;
}

void set_limit(size_t bytes) {
    ScratchPool &p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    p.limit = bytes;
    p.release_cache_locked();
}

size_t bytes_held() {
    ScratchPool &p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    return p.live_bytes + p.cached_bytes;
}

} // namespace attngen::scratch
