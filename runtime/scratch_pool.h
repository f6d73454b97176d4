// The caching pool behind Halide's scratch allocations (scratch_allocator.cpp installs it into
// the generated code's runtime; the attngen tool into its JIT pipelines). Not public API.
#pragma once

#include <cstddef>

namespace attngen::scratch {

/** A block of at least `bytes`, 128-byte aligned, or nullptr over the cap or out of memory. */
void *allocate(size_t bytes);

/** Returns a block from allocate (nullptr is ignored) to the cache, or to the system. */
void release(void *memory);

/**
 * Caps the bytes of live blocks allocated from now on (0 = no cap) and empties the cache: the
 * shared one and the calling thread's own at once, every other thread's at its next call.
 */
void set_limit(size_t bytes);

/** Bytes held by live blocks and by the caches. */
size_t bytes_held();

} // namespace attngen::scratch
