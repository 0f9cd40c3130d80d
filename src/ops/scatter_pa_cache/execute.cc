// ScatterPaCache execution: the optimized scatter_pa_kv_cache kernels on the
// key-only plan (data-dependent checks over every token first, then the writes,
// split across threads).
#include "ops/scatter_pa_cache/internal.h"

namespace kvscatter {

void execute(const ScatterPaCachePlan& plan) {
  execute(detail::scatter_cache::bound_scatter_plan(plan));
}

}  // namespace kvscatter
