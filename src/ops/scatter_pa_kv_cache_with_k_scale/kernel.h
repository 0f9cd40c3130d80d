// Internal entry points of ScatterPaKvCacheWithKScale.
#pragma once

#include "kvscatter/quant_ops.h"

namespace kvscatter::detail {

// Optimized CPU kernel: threads over tokens, one memcpy per contiguous head row.
void scatter_pa_kv_cache_with_k_scale_cpu(const ScatterPaKvCacheWithKScalePlan& plan);

}  // namespace kvscatter::detail
