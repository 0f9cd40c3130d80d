// The scatter_pa_kv_cache case generator, shared with the guard test that models which bytes a call
// may write.
#pragma once

#include <optional>
#include <random>

#include "harness/harness.h"
#include "harness/helpers.h"
#include "kvscatter/scatter_pa_kv_cache.h"

namespace kvscatter::harness {

// Where every tensor of one scatter_pa_kv_cache call lives in its Case.
struct ScatterPaKvCacheCall {
  TensorRef key, key_cache, slot_mapping;
  std::optional<TensorRef> value, value_cache;  // absent: a key-only call
  std::optional<TensorRef> compress_lens, compress_seq_offsets, seq_lens;
  ScatterPaKvCacheOptions options;  // modes, Nct strides and offsets; tensors bound by plan()

  ScatterPaKvCachePlan plan(const std::vector<std::uint8_t*>& data) const;
};

struct ScatterPaKvCacheCase {
  Case c;
  ScatterPaKvCacheCall call;
};

ScatterPaKvCacheCase scatter_pa_kv_cache_case(std::mt19937_64& rng);

}  // namespace kvscatter::harness
