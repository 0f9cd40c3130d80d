// The optimized IndexerQuantCache kernel: rows [begin, end) of x quantized into the cache rows
// named by slots (negative: skip; pairwise distinct, so chunks may run on any thread).
#pragma once

#include <cstdint>

#include "ops/indexer_quant_cache/internal.h"

namespace kvscatter::detail::indexer {

void quantize_rows(const IndexerQuantCachePlan& plan, const std::int64_t* slots, std::int64_t begin,
                   std::int64_t end);

}  // namespace kvscatter::detail::indexer
