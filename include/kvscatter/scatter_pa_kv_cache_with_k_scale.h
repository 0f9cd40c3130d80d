// scatter_pa_kv_cache_with_k_scale: copies float8 key and value rows, and one float32 key
// scale per token and head, into paged caches at the slots named by slot_mapping, in place.
// Shapes and errors: docs/operators/scatter_pa_kv_cache_with_k_scale.md.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvscatter/export.h"
#include "kvscatter/tensor.h"

namespace kvscatter {

// BNBD: caches are [num_blocks, num_heads, block_size, head_size].
enum class KScaleCacheLayout : std::uint8_t { BNBD };

// "BNBD", or the empty string for BNBD; any other text throws kvscatter::Error.
KVSCATTER_API KScaleCacheLayout parse_k_scale_cache_layout(std::string_view text);

struct KVSCATTER_API ScatterPaKvCacheWithKScalePlan {
  TensorView key, value, key_cache, value_cache, slot_mapping, key_scale, key_scale_cache;
  KScaleCacheLayout cache_layout = KScaleCacheLayout::BNBD;
  std::int64_t num_tokens = 0, num_heads = 0, key_head_size = 0, value_head_size = 0;
  std::int64_t num_blocks = 0, block_size = 0;
  std::int64_t num_slots = 0;  // num_blocks * block_size: slots outside [0, num_slots) are skipped
};

// Checks every shape, dtype and layout rule; writes nothing. Slots < 0 or >= num_blocks *
// block_size are skipped when the plan runs, never rejected.
KVSCATTER_API ScatterPaKvCacheWithKScalePlan plan_scatter_pa_kv_cache_with_k_scale(
    const TensorView& key, const TensorView& value, const TensorView& key_cache,
    const TensorView& value_cache, const TensorView& slot_mapping, const TensorView& key_scale,
    const TensorView& key_scale_cache, KScaleCacheLayout cache_layout = KScaleCacheLayout::BNBD);

KVSCATTER_API void execute(const ScatterPaKvCacheWithKScalePlan& plan);

// Plan and execute in one call.
KVSCATTER_API void scatter_pa_kv_cache_with_k_scale(
    const TensorView& key, const TensorView& value, const TensorView& key_cache,
    const TensorView& value_cache, const TensorView& slot_mapping, const TensorView& key_scale,
    const TensorView& key_scale_cache, KScaleCacheLayout cache_layout = KScaleCacheLayout::BNBD);

namespace reference {
// The scalar oracle: a byte copy in token order.
KVSCATTER_API void execute(const ScatterPaKvCacheWithKScalePlan& plan);
}  // namespace reference

}  // namespace kvscatter
