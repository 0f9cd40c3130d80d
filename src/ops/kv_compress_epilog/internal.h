// Pieces of kv_compress_epilog shared by plan.cc, reference.cc, kernel.cc and execute.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "core/index.h"
#include "core/overlap.h"
#include "kvscatter/kv_compress_epilog.h"
#include "quant/constants.h"

namespace kvscatter::detail {

inline constexpr std::int64_t kRopeDim = 64;  // last 64 columns of x

// Element offset of row r of x (all dimensions but the last flattened row-major).
inline std::int64_t x_row_offset(const TensorView& x, std::int64_t r) noexcept {
  return flat_offset(x, r, x.rank - 1);
}

namespace epilog {

// Null data pointers of the bound views; run by plan and by every execute().
void check_bound_data(const KvCompressEpilogPlan& plan);

// Reads slot_mapping and checks every value before anything is written: -1 is kept as a skip
// marker, anything else outside [0, num_slots) throws kvscatter::Error (invalid_parameter).
void check_data(const KvCompressEpilogPlan& plan, std::vector<std::int64_t>& slots);

// The operands of a call, outputs first (see core/overlap.h); P is the plan, const or not.
template <class P>
[[gnu::always_inline]] inline Operands operands(P& p) {
  return Operands{{{{&p.cache, "cache"}}}, {{{&p.x, "x"}, {&p.slot_mapping, "slot_mapping"}}}};
}

}  // namespace epilog
}  // namespace kvscatter::detail
