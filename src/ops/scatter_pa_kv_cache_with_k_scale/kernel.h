// The job the driver (execute.cc) hands to the kernel of scatter_pa_kv_cache_with_k_scale, and
// its dispatched entry point.
#pragma once

#include <cstdint>

#include "core/slots.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"

namespace kvscatter::detail::k_scale {

struct TokenJob {
  const ScatterPaKvCacheWithKScalePlan* plan = nullptr;
  const std::int64_t* slots = nullptr;  // per token; -1: skipped
  SlotSplitter split;
  bool stream = false;    // non-temporal stores: the call writes more than the caches hold
  std::int64_t tile = 1;  // tokens on consecutive slots copied head by head, at most
};

// The tile of calls whose rows stay in cache.
inline constexpr std::int64_t kTile = 8;

// How a call that writes `written` bytes of rows goes, given the streaming threshold and the
// last-level cache (core/streaming.h). The call reads as much as it writes, so its footprint is
// twice that. Streaming stores send each head's short runs of rows to memory: worth it once
// the footprint outgrows three quarters of the cache, not before, where the rows would have
// stayed cached. Tiles pay off while the footprint is at most half of it (or under the
// threshold): past that their strided reads of the input cost more than the contiguous writes
// save. At exactly half, tiles ran 1.1 x as fast as token-by-token copies on AMD Zen 3 (within
// that host's noise) and 1.26 x on Zen 5, where the token-by-token copies fall furthest behind.
// With the default threshold (8 MiB) and a cache of 8 MiB or less, both follow from the
// threshold alone.
struct Strategy {
  bool stream;
  std::int64_t tile;
};
inline Strategy choose_strategy(std::int64_t written, std::int64_t threshold, std::int64_t cache) {
  const std::int64_t footprint = 2 * written;
  const bool stream = written >= threshold && 4 * footprint >= 3 * cache;
  const bool tiled = !stream && (footprint < threshold || 2 * footprint <= cache);
  return {stream, tiled ? kTile : 1};
}

// Tokens [begin, end): the key and value rows and the scales of each (token, head); cached calls
// write a chunk's keys and scales before its values, streamed ones each token's together.
void token_range(const TokenJob& job, std::int64_t begin, std::int64_t end);

}  // namespace kvscatter::detail::k_scale
