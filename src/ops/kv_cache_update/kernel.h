// The job the driver (execute.cc) hands to the kv_cache_update kernel, and its dispatched entry
// point.
#pragma once

#include <cstdint>

#include "kvscatter/tensor.h"

namespace kvscatter::detail::update {

// One cache/input pair cut into items: (b, l, h) rows of `run` elements that are contiguous in
// both views (D, H*D when the head axis is dense, L*H*D when the sequence axis is too), each cut
// into `pieces` pieces of at most piece_len elements so a single-batch prefill still spreads
// over threads.
struct PairJob {
  const TensorView* cache = nullptr;
  const TensorView* input = nullptr;
  std::int64_t position = 0;
  std::int64_t rows_l = 0, rows_h = 0, run = 0;
  std::int64_t pieces = 1, piece_len = 0;
  // Same-dtype copies of a call that writes at least the streaming threshold
  // (core/streaming.h): non-temporal stores.
  bool stream = false;
};

// Items [begin, end) of the job, converting float32 input to the cache dtype where they differ.
void update_range(const PairJob& job, std::int64_t begin, std::int64_t end);

}  // namespace kvscatter::detail::update
