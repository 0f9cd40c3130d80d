// Pieces of PagedKvWrite shared by plan.cc (validation), reference.cc (the
// oracle) and execute.cc (the optimized driver).
#pragma once

#include <cstdint>
#include <vector>

#include "core/overlap.h"
#include "kvscatter/paged_kv_write.h"

namespace kvscatter::detail::paged_kv_write {

// What the data-dependent checks read: the slots, widened, and the scale of
// every head of each side (empty for the copy format).
struct CheckedData {
  std::vector<std::int64_t> slots;
  std::vector<float> k_scale, v_scale;
};

// Null data pointers of the bound views; run by every execute() since an engine
// may rebind pointers between calls.
void check_bound_data(const PagedKvWritePlan& plan);

// Every slot checked (negative: padding; otherwise below num_slots) before any
// write, and the scales read. Throws kvscatter::Error naming the offending
// entry.
void check_data(const PagedKvWritePlan& plan, CheckedData& out);

// The operands of a call, outputs first (see core/overlap.h); P is the plan, const or not.
template <class P>
[[gnu::always_inline]] inline Operands operands(P& p) {
  return Operands{{{{&p.key_cache, "key_cache"}, {&p.value_cache, "value_cache"}}},
                  {{{&p.key, "key"},
                    {&p.value, "value"},
                    {&p.slot_mapping, "slot_mapping"},
                    {opt(p.k_scale), "k_scale"},
                    {opt(p.v_scale), "v_scale"}}}};
}

}  // namespace kvscatter::detail::paged_kv_write
