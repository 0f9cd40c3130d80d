// PagedLatentWrite: write one cache row per token holding two inputs side by side, the latent
// vector kv_c followed by the rotary key part k_pe (multi-head latent attention caches), copied,
// quantized to fp8 with one scale, or packed into the 656-byte fp8_ds_mla entry (per-tile
// scales). See docs/semantics.md, "paged_latent_write".
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kvscatter/export.h"
#include "kvscatter/tensor.h"

namespace kvscatter {

enum class LatentCacheFormat : std::uint8_t {
  copy,        // the input dtype: [kv_c | k_pe], raw bytes
  fp8_e4m3,    // float8_e4m3fn codes of x / scale, saturating; NaN -> 0x7F
  fp8_e5m2,    // float8_e5m2 codes of x / scale, saturating; NaN -> 0x7F
  fp8_ds_mla,  // 656 bytes: 512 e4m3 codes in 4 tiles, 4 float32 tile scales, 64 raw k_pe
};

struct PagedLatentWriteOptions {
  LatentCacheFormat format = LatentCacheFormat::copy;
  // float32 with exactly 1 element; required by fp8_e4m3 / fp8_e5m2, validated when given.
  std::optional<TensorView> scale;
};

struct KVSCATTER_API PagedLatentWritePlan {
  TensorView kv_c, k_pe, kv_cache, slot_mapping;
  std::optional<TensorView> scale;
  LatentCacheFormat format = LatentCacheFormat::copy;
  std::int64_t num_tokens = 0, latent_dim = 0, pe_dim = 0;
  std::int64_t num_blocks = 0, block_size = 0, num_slots = 0;
};

// kv_c: [T_c, latent_dim], k_pe: [T_p, pe_dim], float32 / float16 / bfloat16 (one dtype), any
// token stride; kv_cache: [num_blocks, block_size, entry] with any block and slot strides, entry
// = latent_dim + pe_dim elements (656 bytes for fp8_ds_mla); slot_mapping: [num_tokens] int32 /
// int64, negative entries are padding, T_c and T_p >= num_tokens.
KVSCATTER_API PagedLatentWritePlan plan_paged_latent_write(
    const TensorView& kv_c, const TensorView& k_pe, const TensorView& kv_cache,
    const TensorView& slot_mapping, const PagedLatentWriteOptions& options = {});

KVSCATTER_API void execute(const PagedLatentWritePlan& plan);

KVSCATTER_API void paged_latent_write(const TensorView& kv_c, const TensorView& k_pe,
                                      const TensorView& kv_cache, const TensorView& slot_mapping,
                                      const PagedLatentWriteOptions& options = {});

// "copy", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla": the names the C ABI and Python take. Empty
// text selects copy; any other unknown text throws Error (invalid_parameter).
KVSCATTER_API const char* latent_cache_format_name(LatentCacheFormat format) noexcept;
KVSCATTER_API LatentCacheFormat parse_latent_cache_format(std::string_view text);

namespace reference {
KVSCATTER_API void execute(const PagedLatentWritePlan& plan);
}  // namespace reference

}  // namespace kvscatter
