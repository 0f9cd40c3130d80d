// The job the driver (execute.cc) hands to the kernel of scatter_pa_kv_cache_with_k_scale, and
// its dispatched entry point.
#pragma once

#include <algorithm>
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
// stayed cached. Tiles pay off while the footprint is under half of it (or under the threshold,
// where that is more): past that their strided reads of the input cost more than the
// contiguous writes save. With the default threshold (8 MiB) and a cache of 16 MiB or less,
// both follow from the threshold alone.
struct Strategy {
  bool stream;
  std::int64_t tile;
};
inline Strategy choose_strategy(std::int64_t written, std::int64_t threshold, std::int64_t cache) {
  const std::int64_t footprint = 2 * written;
  const std::int64_t tiled = std::max(threshold, cache / 2);
  return {written >= threshold && 4 * footprint >= 3 * cache, footprint < tiled ? kTile : 1};
}

// Tokens [begin, end): the key and value rows and the scales of each (token, head); cached calls
// write a chunk's keys and scales before its values, streamed ones each token's together.
void token_range(const TokenJob& job, std::int64_t begin, std::int64_t end);

}  // namespace kvscatter::detail::k_scale
