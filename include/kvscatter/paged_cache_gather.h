// PagedCacheGather: copy the cached entries of B sequences out of a paged cache into one
// contiguous buffer, sequence b filling rows [cu_seq_lens[b], cu_seq_lens[b+1]), optionally
// dequantizing fp8 codes. The read side of prefix caching and chunked prefill.
// See docs/semantics.md, "paged_cache_gather".
#pragma once

#include <cstdint>
#include <optional>

#include "kvscatter/export.h"
#include "kvscatter/paged_kv_write.h"
#include "kvscatter/tensor.h"

namespace kvscatter {

struct PagedCacheGatherOptions {
  // copy: raw bytes (src_cache and dst share a dtype of 1, 2 or 4 bytes); fp8_e4m3 / fp8_e5m2:
  // dst = float(code) * scale rounded to dst's float type, NaN as that type's canonical NaN.
  KvCacheFormat format = KvCacheFormat::copy;
  std::optional<TensorView> scale;  // float32, 1 element; required by the fp8 formats
  // Sequences gathered; -1: len(cu_seq_lens) - 1.
  std::int64_t batch_size = -1;
  // [>= batch_size] position of the first gathered token of each sequence (default 0).
  std::optional<TensorView> seq_starts;
  // Row-driven form: row t < num_tokens belongs to sequence token_to_seq[t] and is skipped when
  // t >= cu_seq_lens[b + 1]. Without it every row of [cu[0], cu[batch_size]) is gathered.
  std::optional<TensorView> token_to_seq;
  std::int64_t num_tokens = 0;  // with token_to_seq only
};

struct KVSCATTER_API PagedCacheGatherPlan {
  TensorView src_cache, dst, block_table, cu_seq_lens;
  std::optional<TensorView> scale, seq_starts, token_to_seq;
  KvCacheFormat format = KvCacheFormat::copy;
  std::int64_t batch_size = 0, num_tokens = 0;
  std::int64_t num_blocks = 0, block_size = 0, entry = 0;  // entry: elements per row
};

// src_cache: [num_blocks, block_size, *entry] (rank >= 3, entry dims C-contiguous); dst:
// [rows, *entry] (entry C-contiguous, any row stride); block_table: [>= batch_size, W];
// cu_seq_lens: [>= batch_size + 1]; index tensors int32 or int64, all one dtype.
KVSCATTER_API PagedCacheGatherPlan plan_paged_cache_gather(
    const TensorView& src_cache, const TensorView& dst, const TensorView& block_table,
    const TensorView& cu_seq_lens, const PagedCacheGatherOptions& options = {});

KVSCATTER_API void execute(const PagedCacheGatherPlan& plan);

KVSCATTER_API void paged_cache_gather(const TensorView& src_cache, const TensorView& dst,
                                      const TensorView& block_table, const TensorView& cu_seq_lens,
                                      const PagedCacheGatherOptions& options = {});

namespace reference {
KVSCATTER_API void execute(const PagedCacheGatherPlan& plan);
}  // namespace reference

}  // namespace kvscatter
