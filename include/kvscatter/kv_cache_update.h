// kv_cache_update: writes L new tokens at sequence position `position` of contiguous
// (B, S, H, D) key and value caches, in place. Errors: docs/operators/kv_cache_update.md.
#pragma once

#include <cstdint>

#include "kvscatter/export.h"
#include "kvscatter/tensor.h"

namespace kvscatter {

// Validated, reusable form of one call's shapes (validate once, execute per layer).
struct KVSCATTER_API KvCacheUpdatePlan {
  std::int64_t batch = 0, seq = 0, heads = 0, head_size = 0, new_len = 0;
  DType cache_dtype = DType::float32;
  DType input_dtype = DType::float32;
  // Everything needed to run on other tensors of the same shapes, dtypes and strides.
  TensorView key_cache, value_cache, new_keys, new_values;
  std::int64_t position = 0;
};

// Checks every rule (rank 4, matching shapes, dtypes, strides, 0 <= position <= S - L) and
// throws kvscatter::Error naming the argument; writes nothing.
KVSCATTER_API KvCacheUpdatePlan plan_kv_cache_update(const TensorView& key_cache,
                                                     const TensorView& value_cache,
                                                     const TensorView& new_keys,
                                                     const TensorView& new_values,
                                                     std::int64_t position);

// Runs a plan. The data pointers of the plan's views are used as they are; an engine may
// rebind them (same shapes, dtypes, strides) between calls.
KVSCATTER_API void execute(const KvCacheUpdatePlan& plan);

// Validates and runs; returns the new length position + L.
KVSCATTER_API std::int64_t kv_cache_update(const TensorView& key_cache,
                                           const TensorView& value_cache,
                                           const TensorView& new_keys, const TensorView& new_values,
                                           std::int64_t position);

namespace reference {
// The scalar oracle: element loops with the scalar encoders of kvscatter::formats.
KVSCATTER_API void execute(const KvCacheUpdatePlan& plan);
}  // namespace reference

}  // namespace kvscatter
