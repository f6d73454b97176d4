// The scratch allocator behind Halide's halide_malloc. Halide allocates and frees its per-task
// scratch on every call; glibc returns large blocks to the OS and each call then page-faults
// them back in (2.2x slower at L = 4096, DESIGN.md). The blocks come from a caching pool
// (scratch_pool.cpp) instead.
#include "attngen/runtime.h"
#include "internal.h"
#include "scratch_pool.h"

#include "HalideRuntime.h"

namespace attngen {

namespace {

void *scratch_malloc(void *, size_t bytes) {
    return scratch::allocate(bytes);
}

void scratch_free(void *, void *memory) {
    scratch::release(memory);
}

} // namespace

namespace internal {

void install_scratch_allocator() {
    halide_set_custom_malloc(scratch_malloc);
    halide_set_custom_free(scratch_free);
}

} // namespace internal

void set_scratch_limit(size_t bytes) {
    internal::install_halide_hooks();
    scratch::set_limit(bytes);
}

size_t scratch_bytes_in_use() {
    return scratch::bytes_held();
}

} // namespace attngen
