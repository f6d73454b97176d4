// Pieces of the runtime shared between its files; not part of the public API.
#pragma once

#include "attngen/runtime.h"

namespace attngen::internal {

/** Installs the Halide hooks (error routing, scratch allocator) once. */
void install_halide_hooks();

/** Routes Halide errors to the call whose user_context raised them (run.cpp). */
void install_error_routing();

/** Installs the caching scratch allocator (scratch_allocator.cpp). */
void install_scratch_allocator();

/**
 * The variant of `layer` this call should run: the first the CPU supports and the forced
 * variant allows. Records it for last_cpu_variant(); nullptr when there is none.
 */
const LayerVariant *choose_variant(const Layer &layer);

/** The variant force_cpu_variant set (automatic by default). */
CpuVariant forced_cpu_variant();

} // namespace attngen::internal
