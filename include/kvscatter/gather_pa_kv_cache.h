// GatherPaKvCache: the read side of the paged scatter. For each sequence of a
// batch, follow its row of block_tables (logical block -> physical block) and
// copy the tokens the paged caches hold for it into consecutive rows of dense
// key (and value) tensors. The caches are never written. See
// docs/operators/gather_pa_kv_cache.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kvscatter/export.h"
#include "kvscatter/scatter_pa_kv_cache.h"  // CacheMode, parse_cache_mode
#include "kvscatter/tensor.h"

namespace kvscatter {

struct GatherPaKvCacheOptions {
  std::optional<TensorView> seq_offset;  // [batch]; only seq_offset // block_size is used
  bool is_seq_lens_cumsum = false;       // seq_lens holds batch + 1 prefix sums starting at 0
  CacheMode cache_mode = CacheMode::Norm;
};

// Every shape, dtype, stride and mode rule, resolved once. The data-dependent
// rules (lengths, offsets, block ids, table width, output rows) are checked by
// execute() over the whole batch before its first write, so a plan may be
// executed again after rebinding the views' data pointers (same shapes, dtypes
// and strides).
struct KVSCATTER_API GatherPaKvCachePlan {
  TensorView key_cache, block_tables, seq_lens, key;
  std::optional<TensorView> value_cache, value;  // absent: key-only call
  std::optional<TensorView> seq_offset;
  bool is_seq_lens_cumsum = false;
  CacheMode cache_mode = CacheMode::Norm;
  // Resolved geometry. Norm: heads x head sizes; PA_NZ: num_heads = 1 and the
  // head sizes are the row lengths in elements (the cache's two innermost NZ extents multiplied).
  std::int64_t batch = 0, table_width = 0, num_rows = 0;
  std::int64_t num_blocks = 0, block_size = 0, num_heads = 0;
  std::int64_t key_head_size = 0, value_head_size = 0;
  OperandExtents extents;  // set by the plan function; execute() tests overlap with it
};

KVSCATTER_API GatherPaKvCachePlan plan_gather_pa_kv_cache(
    const TensorView& key_cache, const std::optional<TensorView>& value_cache,
    const TensorView& block_tables, const TensorView& seq_lens, const TensorView& key,
    const std::optional<TensorView>& value, const GatherPaKvCacheOptions& options = {});

KVSCATTER_API void execute(const GatherPaKvCachePlan& plan);

// Plan and execute in one call.
KVSCATTER_API void gather_pa_kv_cache(const TensorView& key_cache,
                                      const std::optional<TensorView>& value_cache,
                                      const TensorView& block_tables, const TensorView& seq_lens,
                                      const TensorView& key, const std::optional<TensorView>& value,
                                      const GatherPaKvCacheOptions& options = {});

namespace reference {
// The scalar oracle: plain loops over every element, same checks.
KVSCATTER_API void execute(const GatherPaKvCachePlan& plan);
}  // namespace reference

}  // namespace kvscatter
