// The optimized IndexerQuantCache kernel: rows [begin, end) of x quantized into the cache rows
// named by slots (negative: skip), written in token order, so a slot repeated inside the range
// ends with its last writer (chunks on different threads need pairwise distinct slots).
#pragma once

#include <cstdint>

#include "ops/indexer_quant_cache/internal.h"

namespace kvscatter::detail::indexer {

void quantize_rows(const IndexerQuantCachePlan& plan, const std::int64_t* slots, std::int64_t begin,
                   std::int64_t end);

}  // namespace kvscatter::detail::indexer
