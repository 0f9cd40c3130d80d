// kv_compress_epilog: quantizes each bfloat16 row of x (fp8 or HiFloat8 + fp4 groups with
// their scales) and writes it into a paged uint8 cache at the slot named by slot_mapping, in
// place. Row layout, modes and errors: docs/operators/kv_compress_epilog.md.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvscatter/export.h"
#include "kvscatter/tensor.h"

namespace kvscatter {

enum class QuantMode : std::uint8_t { fp8_bf16 = 0, fp8_e8m0 = 1, hifloat8_fp4 = 2 };

// Accepts "fp8_bf16" | "fp8_e8m0" | "hifloat8_fp4" (case-insensitive, surrounding blanks
// ignored) or "0" | "1" | "2"; throws kvscatter::Error otherwise.
KVSCATTER_API QuantMode parse_quant_mode(std::string_view text);

struct KVSCATTER_API KvCompressEpilogPlan {
  TensorView cache, x, slot_mapping;
  QuantMode quant_mode = QuantMode::fp8_e8m0;
  std::int64_t quant_group_size = 64;
  bool round_scale = true;
  float x_scale = 1.0f;
  // Resolved geometry: rows of d elements (see docs/operators/kv_compress_epilog.md).
  std::int64_t rows = 0, d = 0, num_blocks = 0, block_size = 0;
  std::int64_t row_bytes = 0;      // bytes written per row, padding included
  std::int64_t payload_bytes = 0;  // bytes of a row before its zero padding
  std::int64_t group_size = 64;    // effective group: 64 in modes 0/1, quant_group_size in mode 2
  std::int64_t num_groups = 0;     // (d - 64) / group_size
  std::int64_t num_slots = 0;      // num_blocks * block_size
};

// Checks every shape, dtype, stride and mode rule; writes nothing.
KVSCATTER_API KvCompressEpilogPlan plan_kv_compress_epilog(
    const TensorView& cache, const TensorView& x, const TensorView& slot_mapping,
    std::int64_t quant_group_size = 64, QuantMode quant_mode = QuantMode::fp8_e8m0,
    bool round_scale = true, float x_scale = 1.0f);

// Checks every slot value, then writes the cache.
KVSCATTER_API void execute(const KvCompressEpilogPlan& plan);

// Plan and execute in one call.
KVSCATTER_API void kv_compress_epilog(const TensorView& cache, const TensorView& x,
                                      const TensorView& slot_mapping,
                                      std::int64_t quant_group_size = 64,
                                      QuantMode quant_mode = QuantMode::fp8_e8m0,
                                      bool round_scale = true, float x_scale = 1.0f);

namespace reference {
// The scalar oracle: one row at a time with the scalar encoders of kvscatter::formats.
KVSCATTER_API void execute(const KvCompressEpilogPlan& plan);
}  // namespace reference

}  // namespace kvscatter
