// Pieces of PagedCacheGather shared by plan.cc, reference.cc and execute.cc.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/index.h"
#include "core/overlap.h"
#include "kvscatter/paged_cache_gather.h"

namespace kvscatter::detail::paged_cache_gather {

// One gathered row: dst row `dst_row` receives the entry at element offset `src_offset` of
// src_cache (block * stride0 + row * stride1).
struct Row {
  std::int64_t dst_row = 0, src_offset = 0;
};

struct CheckedData {
  std::vector<Row> rows;  // in dst row order; every dst row at most once
  float scale = 1.0f;
};

// Element (i, j) of a 1-D (j == 0) or 2-D int32/int64 tensor, at its true width and strides.
inline std::int64_t index_at(const TensorView& t, std::int64_t i, std::int64_t j = 0) {
  return IndexReader(t)[t.rank == 2 ? i * t.dim(1) + j : i];
}

void check_bound_data(const PagedCacheGatherPlan& plan);

// Every data-dependent rule (cu_seq_lens order and bounds, seq_starts, token_to_seq, block-table
// entries) over every gathered row, before any write; fills the row list.
void check_data(const PagedCacheGatherPlan& plan, CheckedData& out);

// The operands of a call, outputs first (see core/overlap.h); P is the plan, const or not.
template <class P>
[[gnu::always_inline]] inline Operands operands(P& p) {
  return Operands{{{{&p.dst, "dst"}}},
                  {{{&p.src_cache, "src_cache"},
                    {&p.block_table, "block_table"},
                    {&p.cu_seq_lens, "cu_seq_lens"},
                    {opt(p.scale), "scale"},
                    {opt(p.seq_starts), "seq_starts"},
                    {opt(p.token_to_seq), "token_to_seq"}}}};
}

}  // namespace kvscatter::detail::paged_cache_gather
