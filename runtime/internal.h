// Pieces of the runtime shared between its files; not part of the public API.
#pragma once

#include "attngen/runtime.h"

namespace attngen::internal {

/** Installs the Halide hooks (error routing, scratch allocator, CPU dispatch) once. */
void install_halide_hooks();

/** Routes Halide errors to the call whose user_context raised them (run.cpp). */
void install_error_routing();

/** Installs the caching scratch allocator (scratch_allocator.cpp). */
void install_scratch_allocator();

/** Marks the start of a call on this thread for last_cpu_variant(). */
void begin_dispatch();

} // namespace attngen::internal
