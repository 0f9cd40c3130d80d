// Pieces of kv_cache_update shared by plan.cc, reference.cc, kernel.cc and execute.cc.
#pragma once

#include <cstdint>

#include "core/overlap.h"
#include "kvscatter/kv_cache_update.h"

namespace kvscatter::detail::update {

// Address of row (b, s, h) of a rank-4 view: D elements, contiguous.
inline char* row_at(const TensorView& t, std::int64_t b, std::int64_t s, std::int64_t h) noexcept {
  const std::int64_t off = b * t.stride(0) + s * t.stride(1) + h * t.stride(2);
  return static_cast<char*>(t.data) + off * static_cast<std::int64_t>(t.element_size());
}

// Null data pointers of the bound views; run by plan and by every execute(). The operator has
// no data-dependent rule beyond them: position is part of the plan.
void check_bound_data(const KvCacheUpdatePlan& plan);

// The operands of a call, outputs first (see core/overlap.h); P is the plan, const or not.
template <class P>
[[gnu::always_inline]] inline Operands operands(P& p) {
  return Operands{{{{&p.key_cache, "key_cache"}, {&p.value_cache, "value_cache"}}},
                  {{{&p.new_keys, "new_keys"}, {&p.new_values, "new_values"}}}};
}

}  // namespace kvscatter::detail::update
