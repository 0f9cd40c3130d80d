// The ScatterPaCache oracle: a single-cache call writes the bytes of the key
// side of the matching scatter_pa_kv_cache call, so its reference is that
// operator's reference kernel.
#include "ops/scatter_pa_cache/internal.h"

namespace kvscatter::reference {

void execute(const ScatterPaCachePlan& plan) {
  reference::execute(detail::scatter_cache::bound_scatter_plan(plan));
}

}  // namespace kvscatter::reference
