// The optimized GatherPaKvCache kernel's work description. execute.cc resolves
// a plan into byte addresses and pitches; kernel.cc (compiled once per SIMD
// target, chosen at run time) moves the bytes of a range of segments.
#pragma once

#include <cstdint>

#include "ops/gather_pa_kv_cache/internal.h"

namespace kvscatter::detail::gather {

// One side (key or value). Every quantity is in bytes. Row o of block b starts
// at cache + b*block_stride + o*slot_pitch; it is one contiguous run of
// row_bytes (Norm, chunk_pitch == 0) or row_bytes/32 chunks of 32 bytes,
// chunk_pitch apart (PA_NZ). Output row r starts at out + r*row_pitch and is
// contiguous.
struct GatherSide {
  const unsigned char* cache = nullptr;
  std::int64_t block_stride = 0, slot_pitch = 0, chunk_pitch = 0;
  unsigned char* out = nullptr;
  std::int64_t row_pitch = 0, row_bytes = 0;
};

struct GatherJob {
  GatherSide side[2];
  int num_sides = 1;
  const Segment* segments = nullptr;
};

// Dispatched entry point (kernel.cc): segments [begin, end).
void gather_segment_range(const GatherJob& job, std::int64_t begin, std::int64_t end);

}  // namespace kvscatter::detail::gather
