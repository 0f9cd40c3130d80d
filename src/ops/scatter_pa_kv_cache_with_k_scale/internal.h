// Pieces of scatter_pa_kv_cache_with_k_scale shared by plan.cc, reference.cc and execute.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "core/overlap.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"

namespace kvscatter::detail::k_scale {

// Null data pointers of the bound views; run by plan and by every execute().
void check_bound_data(const ScatterPaKvCacheWithKScalePlan& plan);

// The operator rejects no slot value: slots outside [0, num_slots) are skipped (see
// docs/semantics.md, "Out-of-range slots"). Reads slot_mapping widened, with every skipped
// token as -1.
void check_data(const ScatterPaKvCacheWithKScalePlan& plan, std::vector<std::int64_t>& slots);

// The operands of a call, outputs first (see core/overlap.h); P is the plan, const or not.
template <class P>
[[gnu::always_inline]] inline Operands operands(P& p) {
  return Operands{{{{&p.key_cache, "key_cache"},
                    {&p.value_cache, "value_cache"},
                    {&p.key_scale_cache, "key_scale_cache"}}},
                  {{{&p.key, "key"},
                    {&p.value, "value"},
                    {&p.slot_mapping, "slot_mapping"},
                    {&p.key_scale, "key_scale"}}}};
}

}  // namespace kvscatter::detail::k_scale
