// ScatterPaCache: the single-cache sibling of scatter_pa_kv_cache. Writes the
// rows of one tensor (key) into one paged cache at slot_mapping (3-D key), or,
// with a 4-D key, one compressed run per (batch, head): the sequence with a
// window replaced by its mean (ReduceMean, when compress_seq_offsets is given)
// or the sequence's tail (tail keep). Each call writes exactly the bytes of the
// key side of the matching scatter_pa_kv_cache call, with the same kernels. See
// docs/operators/scatter_pa_cache.md.
#pragma once

#include <cstdint>
#include <optional>

#include "kvscatter/export.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "kvscatter/tensor.h"

namespace kvscatter {

enum class ScatterPaCacheScenario : std::uint8_t { Plain, ReduceMean, TailKeep };

struct ScatterPaCacheOptions {
  std::optional<TensorView> compress_lens;         // 4-D key: [batch, heads] or [batch * heads]
  std::optional<TensorView> compress_seq_offsets;  // 4-D key, ReduceMean: [batch * heads]
  std::optional<TensorView> seq_lens;              // 4-D key: [batch]
};

// Every shape, dtype and stride rule, resolved once; slot values and compress
// lengths are checked by execute() over every token before its first write.
// Rebind the views' data pointers (same shapes, dtypes, strides) to execute the
// plan again.
struct KVSCATTER_API ScatterPaCachePlan {
  TensorView key, key_cache, slot_mapping;
  std::optional<TensorView> compress_lens, compress_seq_offsets, seq_lens;
  ScatterPaCacheScenario scenario = ScatterPaCacheScenario::Plain;
  // The key-only scatter_pa_kv_cache plan that does the work (Norm/None for a
  // 3-D key, 4-D Rope for ReduceMean, 4-D Alibi for tail keep). Packed FP4 rows
  // travel as bytes. Its data pointers are taken from the views above at every
  // execution.
  ScatterPaKvCachePlan scatter;
};

KVSCATTER_API ScatterPaCachePlan plan_scatter_pa_cache(const TensorView& key,
                                                       const TensorView& key_cache,
                                                       const TensorView& slot_mapping,
                                                       const ScatterPaCacheOptions& options = {});

KVSCATTER_API void execute(const ScatterPaCachePlan& plan);

// Plan and execute in one call.
KVSCATTER_API void scatter_pa_cache(const TensorView& key, const TensorView& key_cache,
                                    const TensorView& slot_mapping,
                                    const ScatterPaCacheOptions& options = {});

namespace reference {
// The scalar oracle: the reference kernel of the matching scatter_pa_kv_cache
// call.
KVSCATTER_API void execute(const ScatterPaCachePlan& plan);
}  // namespace reference

}  // namespace kvscatter
