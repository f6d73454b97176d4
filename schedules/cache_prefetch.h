// Software prefetch of KV-cache rows ahead of the loops that read them (a lowering pass).
#pragma once

#include <Halide.h>

#include <memory>
#include <set>
#include <string>

namespace attngen {

/**
 * A lowering pass that, in every CPU loop over keys that loads rows of the named buffers (a KV
 * cache's, or a decode step's K and V inputs), prefetches the row that the loop reads `keys_ahead`
 * iterations later, one prefetch per cache line of the row. A paged cache's blocks are scattered:
 * each block restarts the hardware's stream prefetchers, and the read of a decode step stalls on
 * DRAM at every block boundary without it. The loop over keys is the innermost loop whose step
 * moves a load by a run-time amount (a row stride, or a block looked up in the table); loops whose
 * step moves it by a constant (a row's vectors) are not. Prefetches never fault and change no
 * result; their addresses are the loads' own clamped ones. GPU loops are left alone.
 */
std::unique_ptr<Halide::Internal::IRMutator>
make_cache_prefetch_pass(const std::set<std::string> &buffers, int keys_ahead);

} // namespace attngen
