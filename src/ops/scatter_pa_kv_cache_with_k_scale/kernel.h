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
// stayed cached. Calls short of that point are tiled while the footprint is under three
// quarters of the cache (or under the threshold): on AMD Zen 3 tiles ran 1.1 x as fast as
// token-by-token copies at half the cache (within that host's noise) and 0.83 x at the whole of
// it, so about level in between, while on Zen 5, where about half of the L3 holds one core's
// data, tiles ran 1.17-1.35 x as fast from half to three quarters (and streaming faster still,
// which would lose a third at half the cache on Zen 3). With the default threshold (8 MiB) and a
// cache of 8 MiB or less, both follow from the threshold alone.
struct Strategy {
  bool stream;
  std::int64_t tile;
};
inline Strategy choose_strategy(std::int64_t written, std::int64_t threshold, std::int64_t cache) {
  const std::int64_t footprint = 2 * written;
  const bool stream = written >= threshold && 4 * footprint >= 3 * cache;
  const bool tiled = !stream && (footprint < threshold || 4 * footprint < 3 * cache);
  return {stream, tiled ? kTile : 1};
}

// Tokens [begin, end): the key and value rows and the scales of each (token, head); cached calls
// write a chunk's keys and scales before its values, streamed ones each token's together.
void token_range(const TokenJob& job, std::int64_t begin, std::int64_t end);

}  // namespace kvscatter::detail::k_scale
