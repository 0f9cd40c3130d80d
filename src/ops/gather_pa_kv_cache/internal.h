// Pieces of GatherPaKvCache shared by plan.cc (validation), reference.cc (the
// oracle) and execute.cc (the optimized driver).
#pragma once

#include <cstdint>
#include <vector>

#include "core/overlap.h"
#include "kvscatter/gather_pa_kv_cache.h"

namespace kvscatter::detail::gather {

// One block's share of a sequence: rows 0 .. count-1 of physical block `block`
// (negative: a padding block, written as zero bytes) go to output rows row ..
// row+count-1.
struct Segment {
  std::int64_t block = 0;
  std::int64_t row = 0;
  std::int64_t count = 0;
};

// What the data-dependent validation learned: every segment, in batch then
// block order.
struct CheckedData {
  std::vector<Segment> segments;
  std::int64_t total_rows = 0;
};

// Null data pointers of the bound views (161001); run by every execute() since
// the caller may rebind pointers between calls.
void check_bound_data(const GatherPaKvCachePlan& plan);

// Every data-dependent rule (lengths, offsets, table width, block ids, output
// rows) over the whole batch, before any write. Throws kvscatter::Error naming
// the offending element.
void check_data(const GatherPaKvCachePlan& plan, CheckedData& out);

// The operands of a call, outputs first (see core/overlap.h); P is the plan, const or not.
template <class P>
[[gnu::always_inline]] inline Operands operands(P& p) {
  return Operands{{{{&p.key, "key"}, {opt(p.value), "value"}}},
                  {{{&p.key_cache, "key_cache"},
                    {opt(p.value_cache), "value_cache"},
                    {&p.block_tables, "block_tables"},
                    {&p.seq_lens, "seq_lens"},
                    {opt(p.seq_offset), "seq_offset"}}}};
}

}  // namespace kvscatter::detail::gather
