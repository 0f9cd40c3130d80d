// Pieces of PagedKvWrite shared by plan.cc (validation), reference.cc (the
// oracle) and execute.cc (the optimized driver).
#pragma once

#include <cstdint>
#include <vector>

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

}  // namespace kvscatter::detail::paged_kv_write
