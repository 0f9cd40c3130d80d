// The job the PagedCacheGather driver (execute.cc) hands to the SIMD kernel (kernel.cc).
#pragma once

#include <cstdint>

#include "kvscatter/dtype.h"
#include "kvscatter/paged_kv_write.h"
#include "ops/paged_cache_gather/internal.h"

namespace kvscatter::detail::paged_cache_gather {

struct Job {
  const unsigned char* src = nullptr;  // src_cache data; a row's entry at src + src_offset * src_es
  unsigned char* dst = nullptr;        // dst data; row t at dst + t * dst_row_bytes
  std::int64_t src_es = 1, dst_row_bytes = 0, entry = 0;
  DType dst_dtype = DType::float32;
  KvCacheFormat format = KvCacheFormat::copy;
  float scale = 1.0f;
  const Row* rows = nullptr;
  bool stream = false;  // copies may use non-temporal stores (large calls)
};

// Dispatched entry point: rows [begin, end) of job.rows.
void gather_rows(const Job& job, std::int64_t begin, std::int64_t end);

}  // namespace kvscatter::detail::paged_cache_gather
