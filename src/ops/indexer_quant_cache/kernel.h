// The optimized IndexerQuantCache kernel: rows [begin, end) of x quantized into the cache rows
// named by slots (negative: skip), written in token order, so a slot repeated inside the range
// ends with its last writer (chunks on different threads need pairwise distinct slots).
#pragma once

#include <cstdint>

#include "ops/indexer_quant_cache/internal.h"

namespace kvscatter::detail::indexer {

void quantize_rows(const IndexerQuantCachePlan& plan, const std::int64_t* slots, std::int64_t begin,
                   std::int64_t end);

// Whether every slot of slots[0, n) is -1 (skip) or in [0, num_slots).
bool slots_in_range(const std::int64_t* slots, std::int64_t n, std::int64_t num_slots);

}  // namespace kvscatter::detail::indexer
