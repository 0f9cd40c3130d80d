// scatter_pa_kv_cache: writes each token's key (and value) rows into a paged cache at the slot
// named by slot_mapping, in place. Shapes, modes and errors: docs/operators/scatter_pa_kv_cache.md.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "kvscatter/export.h"
#include "kvscatter/tensor.h"

namespace kvscatter {

// Norm: [num_blocks, block_size, num_head, head_size] caches. PA_NZ: 32-byte fractal caches.
enum class CacheMode : std::uint8_t { Norm, PA_NZ };
// None: one slot per token. Nct: keys read through explicit row strides and offsets. NHSD:
// [num_blocks, num_head, block_size, head_size] caches. Alibi, Rope, Omni: compress modes,
// one run of cache rows per (batch, head).
enum class ScatterMode : std::uint8_t { None, Nct, Alibi, Rope, Omni, NHSD };

// The mode names the C ABI and Python take: "Norm" | "PA_NZ" and "None" | "Nct" | "Alibi" |
// "Rope" | "Omni" | "NHSD"; the empty string selects Norm / None. Any other text throws
// kvscatter::Error (invalid_parameter).
KVSCATTER_API CacheMode parse_cache_mode(std::string_view text);
KVSCATTER_API ScatterMode parse_scatter_mode(std::string_view text);
KVSCATTER_API const char* cache_mode_name(CacheMode mode) noexcept;
KVSCATTER_API const char* scatter_mode_name(ScatterMode mode) noexcept;

struct ScatterPaKvCacheOptions {
  std::optional<TensorView> compress_lens;
  std::optional<TensorView> compress_seq_offsets;
  std::optional<TensorView> seq_lens;
  CacheMode cache_mode = CacheMode::Norm;
  ScatterMode scatter_mode = ScatterMode::None;
  std::optional<std::array<std::int64_t, 2>> strides;  // Nct only: {strideK, strideV}
  std::optional<std::array<std::int64_t, 2>> offsets;  // Nct only: {offsetK, offsetV}
};

// Everything checkable from shapes, dtypes, strides and modes, resolved once. Data-dependent
// rules (slot values, compress lengths and offsets) are checked by execute() before its first
// write, so a plan may be executed for many layers: rebind the views' data pointers (same
// shapes, dtypes and strides) and call execute() again.
struct KVSCATTER_API ScatterPaKvCachePlan {
  TensorView key;
  std::optional<TensorView> value;  // absent: key-only call
  TensorView key_cache;
  std::optional<TensorView> value_cache;
  TensorView slot_mapping;
  std::optional<TensorView> compress_lens, compress_seq_offsets, seq_lens;
  CacheMode cache_mode = CacheMode::Norm;
  ScatterMode scatter_mode = ScatterMode::None;  // resolved: a 4-D key gives Rope or Alibi
  std::array<std::int64_t, 2> strides{0, 0};     // Nct: resolved {strideK, strideV}
  std::array<std::int64_t, 2> offsets{0, 0};     // Nct: resolved {offsetK, offsetV}
  // Resolved geometry (filled by plan_scatter_pa_kv_cache).
  std::int64_t num_tokens = 0, num_heads = 0, key_head_size = 0, value_head_size = 0;
  // num_tokens is B * S for a 4-D key; batch is set by the compress modes, seq_len (S) by 4-D keys.
  std::int64_t num_blocks = 0, block_size = 0, batch = 0, seq_len = 0;
  std::int64_t num_slots = 0;  // num_blocks * block_size
};

// Checks every shape, dtype, stride and mode rule and throws kvscatter::Error naming the
// argument; writes nothing. value and value_cache are both absent (std::nullopt) for a
// key-only call.
KVSCATTER_API ScatterPaKvCachePlan plan_scatter_pa_kv_cache(
    const TensorView& key, const std::optional<TensorView>& value, const TensorView& key_cache,
    const std::optional<TensorView>& value_cache, const TensorView& slot_mapping,
    const ScatterPaKvCacheOptions& options = {});

// Checks the data-dependent rules over all tokens, then writes the caches.
KVSCATTER_API void execute(const ScatterPaKvCachePlan& plan);

// Plan and execute in one call.
KVSCATTER_API void scatter_pa_kv_cache(const TensorView& key,
                                       const std::optional<TensorView>& value,
                                       const TensorView& key_cache,
                                       const std::optional<TensorView>& value_cache,
                                       const TensorView& slot_mapping,
                                       const ScatterPaKvCacheOptions& options = {});

namespace reference {
// The scalar oracle: the same checks, then plain element loops.
KVSCATTER_API void execute(const ScatterPaKvCachePlan& plan);
}  // namespace reference

}  // namespace kvscatter
