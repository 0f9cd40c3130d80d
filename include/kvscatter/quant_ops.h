// The quantized cache writers of spec quant_ops.md: ScatterPaKvCacheWithKScale (a byte copy of
// float8 key/value plus one float32 scale per token and head) and KvCompressEpilog (quantize a
// bfloat16 row and scatter it into a paged uint8 cache).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kvscatter/export.h"
#include "kvscatter/tensor.h"

namespace kvscatter {

// ---- ScatterPaKvCacheWithKScale -------------------------------------------------------------

struct KVSCATTER_API ScatterPaKvCacheWithKScalePlan {
  TensorView key, value, key_cache, value_cache, slot_mapping, key_scale, key_scale_cache;
  std::int64_t num_tokens = 0, num_heads = 0, key_head_size = 0, value_head_size = 0;
  std::int64_t num_blocks = 0, block_size = 0;
  std::int64_t num_slots = 0;  // num_blocks * block_size: slots outside [0, num_slots) are skipped
};

// cache_layout: empty or "BNBD". Slots < 0 or >= num_blocks * block_size are skipped (G6).
KVSCATTER_API ScatterPaKvCacheWithKScalePlan plan_scatter_pa_kv_cache_with_k_scale(
    const TensorView& key, const TensorView& value, const TensorView& key_cache,
    const TensorView& value_cache, const TensorView& slot_mapping, const TensorView& key_scale,
    const TensorView& key_scale_cache, const std::string& cache_layout = "BNBD");

KVSCATTER_API void execute(const ScatterPaKvCacheWithKScalePlan& plan);

KVSCATTER_API void scatter_pa_kv_cache_with_k_scale(
    const TensorView& key, const TensorView& value, const TensorView& key_cache,
    const TensorView& value_cache, const TensorView& slot_mapping, const TensorView& key_scale,
    const TensorView& key_scale_cache, const std::string& cache_layout = "BNBD");

// ---- KvCompressEpilog -----------------------------------------------------------------------

enum class QuantMode : std::uint8_t { fp8_bf16 = 0, fp8_e8m0 = 1, hifloat8_fp4 = 2 };

// Accepts "fp8_bf16" | "fp8_e8m0" | "hifloat8_fp4" (case-insensitive, surrounding blanks
// ignored) or "0" | "1" | "2"; throws kvscatter::Error otherwise (G11).
KVSCATTER_API QuantMode parse_quant_mode(const std::string& text);

struct KVSCATTER_API KvCompressEpilogPlan {
  TensorView cache, x, slot_mapping;
  QuantMode quant_mode = QuantMode::fp8_e8m0;
  std::int64_t quant_group_size = 64;
  bool round_scale = true;
  float x_scale = 1.0f;
  // Resolved geometry: bs rows of d elements; row layout of spec section 4.3.
  std::int64_t rows = 0, d = 0, num_blocks = 0, block_size = 0;
  std::int64_t row_bytes = 0;       // kvCacheCol: bytes written per row, padding included
  std::int64_t payload_bytes = 0;   // concatCol
  std::int64_t group_size = 64;     // effective group: 64 in modes 0/1, quant_group_size in mode 2
  std::int64_t num_groups = 0;      // (d - 64) / group_size
  std::int64_t num_slots = 0;       // num_blocks * block_size
};

KVSCATTER_API KvCompressEpilogPlan plan_kv_compress_epilog(const TensorView& cache,
                                                           const TensorView& x,
                                                           const TensorView& slot_mapping,
                                                           std::int64_t quant_group_size = 64,
                                                           QuantMode quant_mode = QuantMode::fp8_e8m0,
                                                           bool round_scale = true,
                                                           float x_scale = 1.0f);

KVSCATTER_API void execute(const KvCompressEpilogPlan& plan);

KVSCATTER_API void kv_compress_epilog(const TensorView& cache, const TensorView& x,
                                      const TensorView& slot_mapping,
                                      std::int64_t quant_group_size = 64,
                                      QuantMode quant_mode = QuantMode::fp8_e8m0,
                                      bool round_scale = true, float x_scale = 1.0f);

namespace reference {
KVSCATTER_API void execute(const ScatterPaKvCacheWithKScalePlan& plan);
KVSCATTER_API void execute(const KvCompressEpilogPlan& plan);
}  // namespace reference

}  // namespace kvscatter
