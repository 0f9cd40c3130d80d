// ScatterPaCache has no kernels of its own: plan.cc validates the single-cache
// call and builds the key-only scatter_pa_kv_cache plan whose kernels
// (optimized and reference) do the writing.
#pragma once

#include "kvscatter/scatter_pa_cache.h"

namespace kvscatter::detail::scatter_cache {

// The inner scatter_pa_kv_cache plan with the data pointers of `plan`'s views
// (which a caller may have rebound since planning).
ScatterPaKvCachePlan bound_scatter_plan(const ScatterPaCachePlan& plan);

}  // namespace kvscatter::detail::scatter_cache
