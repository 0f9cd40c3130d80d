// ScatterPaKvCache (spec scatter_pa_kv_cache.md, decisions G1-G11 and S1-S9): write each
// token's key (and value) rows into a paged cache addressed by slot_mapping, in place.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "kvscatter/export.h"
#include "kvscatter/tensor.h"

namespace kvscatter {

enum class CacheMode : std::uint8_t { Norm, PA_NZ };
enum class ScatterMode : std::uint8_t { None, Nct, Alibi, Rope, Omni, NHSD };

struct ScatterPaKvCacheOptions {
  std::optional<TensorView> compress_lens;
  std::optional<TensorView> compress_seq_offsets;
  std::optional<TensorView> seq_lens;
  std::string cache_mode = "Norm";     // "Norm" | "PA_NZ"; empty means Norm (S1)
  std::string scatter_mode = "None";   // "None" | "Nct" | "Alibi" | "Rope" | "Omni" | "NHSD"
  std::optional<std::array<std::int64_t, 2>> strides;  // Nct only: {strideK, strideV}
  std::optional<std::array<std::int64_t, 2>> offsets;  // Nct only: {offsetK, offsetV}
};

// Everything checkable from shapes, dtypes, strides and modes, resolved once. Data-dependent
// rules (slot values, compress lengths and offsets) are checked by execute() before its first
// write, so a plan may be executed for many layers: rebind the views' data pointers (same
// shapes, dtypes and strides) and call execute() again.
struct KVSCATTER_API ScatterPaKvCachePlan {
  TensorView key, key_cache, slot_mapping;
  std::optional<TensorView> value, value_cache;  // absent: key-only call (S5)
  std::optional<TensorView> compress_lens, compress_seq_offsets, seq_lens;
  CacheMode cache_mode = CacheMode::Norm;
  ScatterMode scatter_mode = ScatterMode::None;
  std::array<std::int64_t, 2> strides{0, 0};
  std::array<std::int64_t, 2> offsets{0, 0};
  // Resolved geometry (filled by plan_scatter_pa_kv_cache).
  std::int64_t num_tokens = 0, num_heads = 0, key_head_size = 0, value_head_size = 0;
  std::int64_t num_blocks = 0, block_size = 0, batch = 0, seq_len = 0;
  std::int64_t num_slots = 0;  // num_blocks * block_size
};

KVSCATTER_API ScatterPaKvCachePlan plan_scatter_pa_kv_cache(
    const TensorView& key, const TensorView& key_cache, const TensorView& slot_mapping,
    const std::optional<TensorView>& value, const std::optional<TensorView>& value_cache,
    const ScatterPaKvCacheOptions& options = {});

KVSCATTER_API void execute(const ScatterPaKvCachePlan& plan);

// Plan and execute in one call.
KVSCATTER_API void scatter_pa_kv_cache(const TensorView& key, const TensorView& key_cache,
                                       const TensorView& slot_mapping,
                                       const std::optional<TensorView>& value,
                                       const std::optional<TensorView>& value_cache,
                                       const ScatterPaKvCacheOptions& options = {});

namespace reference {
// The scalar oracle: same validation, plain loops written from the spec.
KVSCATTER_API void execute(const ScatterPaKvCachePlan& plan);
}  // namespace reference

}  // namespace kvscatter
