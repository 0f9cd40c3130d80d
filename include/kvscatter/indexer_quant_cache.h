// IndexerQuantCache: quantize each row of x (the key of a sparse-attention "lightning indexer")
// and write the codes and their scale(s) into a paged cache and a paged scale cache at
// slot_mapping, in place. Four modes: MX-FP8 (one E8M0 scale per 32 elements), FP8 (one
// float32 scale per row), HiFloat8 (static scaling by x_scale, no scale written) and MX-FP4
// (packed FP4, one E8M0 scale per 32 elements). See docs/operators/indexer_quant_cache.md.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvscatter/export.h"
#include "kvscatter/tensor.h"

namespace kvscatter {

enum class IndexerQuantMode : std::uint8_t { mxfp8 = 0, fp8 = 1, hifloat8 = 2, mxfp4 = 3 };

struct IndexerQuantCacheOptions {
  IndexerQuantMode quant_mode = IndexerQuantMode::fp8;
  bool round_scale = true;  // fp8 mode only: scale rounded up to a power of two
  float x_scale = 1.0f;     // hifloat8 mode only: x is multiplied by it before encoding
};

// Every shape, dtype, stride and mode rule, resolved once; slot values are checked by execute()
// over every token before its first write. Rebind the views' data pointers (same shapes,
// dtypes, strides) to execute the plan again.
struct KVSCATTER_API IndexerQuantCachePlan {
  TensorView cache, cache_scale, x, slot_mapping;  // an FP4 cache here counts bytes
  IndexerQuantCacheOptions options;
  std::int64_t num_rows = 0, d = 0;  // rows of x (leading axes flattened), row length
  std::int64_t num_blocks = 0, block_size = 0, num_slots = 0;
  std::int64_t code_bytes = 0;   // cache bytes written per row (d, or d / 2 for FP4)
  std::int64_t scale_count = 0;  // cache_scale entries written per row (0 in hifloat8 mode)
  OperandExtents extents;        // set by the plan function; execute() tests overlap with it
};

// A quant_mode name ("mxfp8", "fp8", "hifloat8", "mxfp4"; any case, surrounding blanks
// ignored) or its number "0".."3"; anything else is an error naming the string.
KVSCATTER_API IndexerQuantMode parse_indexer_quant_mode(std::string_view name);

KVSCATTER_API IndexerQuantCachePlan plan_indexer_quant_cache(
    const TensorView& cache, const TensorView& cache_scale, const TensorView& x,
    const TensorView& slot_mapping, const IndexerQuantCacheOptions& options = {});

KVSCATTER_API void execute(const IndexerQuantCachePlan& plan);

// Plan and execute in one call.
KVSCATTER_API void indexer_quant_cache(const TensorView& cache, const TensorView& cache_scale,
                                       const TensorView& x, const TensorView& slot_mapping,
                                       const IndexerQuantCacheOptions& options = {});

namespace reference {
// The scalar oracle: one element at a time with the scalar encoders of kvscatter::formats.
KVSCATTER_API void execute(const IndexerQuantCachePlan& plan);
}  // namespace reference

}  // namespace kvscatter
