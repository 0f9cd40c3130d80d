// Pieces of PagedCacheGather shared by plan.cc, reference.cc and execute.cc.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

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
  const std::int64_t off = i * t.stride(0) + (t.rank == 2 ? j * t.stride(1) : 0);
  const auto* p = static_cast<const unsigned char*>(t.data);
  if (t.dtype == DType::int64) {
    std::int64_t v;
    std::memcpy(&v, p + off * 8, 8);
    return v;
  }
  std::int32_t v;
  std::memcpy(&v, p + off * 4, 4);
  return v;
}

void check_bound_data(const PagedCacheGatherPlan& plan);

// Every data-dependent rule (cu_seq_lens order and bounds, seq_starts, token_to_seq, block-table
// entries) over every gathered row, before any write; fills the row list.
void check_data(const PagedCacheGatherPlan& plan, CheckedData& out);

}  // namespace kvscatter::detail::paged_cache_gather
