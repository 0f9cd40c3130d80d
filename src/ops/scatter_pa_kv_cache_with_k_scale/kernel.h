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

// Tokens [begin, end): the key and value rows of each (token, head), then the scales.
void token_range(const TokenJob& job, std::int64_t begin, std::int64_t end);

}  // namespace kvscatter::detail::k_scale
