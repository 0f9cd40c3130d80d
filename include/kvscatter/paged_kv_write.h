// PagedKvWrite: write the key and value vectors of N tokens into a paged K
// cache and a paged V cache at the slots given by slot_mapping, either as a
// byte copy or quantized to an 8-bit float format with one scale per tensor or
// per head. Each cache is addressed through its own strides, so NHD and HND
// caches, K and V interleaved in one allocation, and padded blocks all work.
// See docs/semantics.md, "paged_kv_write".
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kvscatter/export.h"
#include "kvscatter/tensor.h"

namespace kvscatter {

// What a cache element holds.
enum class KvCacheFormat : std::uint8_t {
  copy,      // the input dtype, written as a raw byte copy
  fp8_e4m3,  // float8_e4m3fn codes of x / scale, saturated to +-448, NaN -> 0x7F
  fp8_e5m2,  // float8_e5m2 codes of x / scale, saturated to +-57344, NaN -> 0x7F
};

// How the dimensions of a cache view are read. NHD: [num_blocks, block_size,
// num_heads, head_size]; HND: [num_blocks, num_heads, block_size, head_size].
// Either way the view may carry any strides (an HND allocation permuted to NHD
// order is simply an NHD view with HND strides).
enum class KvCacheLayout : std::uint8_t { NHD, HND };

struct PagedKvWriteOptions {
  KvCacheFormat format = KvCacheFormat::copy;
  KvCacheLayout layout = KvCacheLayout::NHD;
  // float32 scales with 1 (per tensor) or num_heads (per head) elements, read
  // in row-major order; k_scale and v_scale have the same shape. Required by
  // the fp8 formats; when given with format copy they are validated and unused.
  std::optional<TensorView> k_scale, v_scale;
};

// Everything checkable from shapes, dtypes, strides and the options, resolved
// once. Caches are stored as NHD views (an HND layout is permuted here). Slot
// values and scale values are read by execute(), so one plan serves many layers
// whose views differ only in their data pointers.
struct KVSCATTER_API PagedKvWritePlan {
  TensorView key, value, key_cache, value_cache, slot_mapping;
  std::optional<TensorView> k_scale, v_scale;
  KvCacheFormat format = KvCacheFormat::copy;
  std::int64_t num_tokens = 0, num_heads = 0, head_size = 0;
  std::int64_t num_blocks = 0, block_size = 0, num_slots = 0;
  bool per_head_scale = false;
};

// key, value: [T, num_heads, head_size] float32 / float16 / bfloat16 with T >=
// num_tokens (rows past num_tokens are never read); key_cache, value_cache: 4-D
// per options.layout; slot_mapping: [num_tokens] int32 / int64, negative
// entries are padding.
KVSCATTER_API PagedKvWritePlan plan_paged_kv_write(const TensorView& key, const TensorView& value,
                                                   const TensorView& key_cache,
                                                   const TensorView& value_cache,
                                                   const TensorView& slot_mapping,
                                                   const PagedKvWriteOptions& options = {});

KVSCATTER_API void execute(const PagedKvWritePlan& plan);

// Plan and execute in one call.
KVSCATTER_API void paged_kv_write(const TensorView& key, const TensorView& value,
                                  const TensorView& key_cache, const TensorView& value_cache,
                                  const TensorView& slot_mapping,
                                  const PagedKvWriteOptions& options = {});

// "copy", "fp8_e4m3", "fp8_e5m2" / "NHD", "HND": the names the C ABI and Python
// take. Empty text selects the default (copy / NHD); any other unknown text
// throws Error (invalid_parameter).
KVSCATTER_API const char* kv_cache_format_name(KvCacheFormat format) noexcept;
KVSCATTER_API KvCacheFormat parse_kv_cache_format(std::string_view text);
KVSCATTER_API KvCacheLayout parse_kv_cache_layout(std::string_view text);

namespace reference {
// The scalar oracle: same checks as execute(), plain loops.
KVSCATTER_API void execute(const PagedKvWritePlan& plan);
}  // namespace reference

}  // namespace kvscatter
