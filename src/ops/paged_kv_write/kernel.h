// The job the PagedKvWrite driver (execute.cc) hands to the SIMD kernel
// (kernel.cc).
#pragma once

#include <cstdint>

#include "core/slots.h"
#include "kvscatter/dtype.h"
#include "kvscatter/paged_kv_write.h"

namespace kvscatter::detail::paged_kv_write {

// One side (key or value). Every distance is in bytes. Token t, head h is read
// at src + t*src_token + h*src_head (head_size contiguous elements). Slot s,
// head h is written at split.address(dst, block_stride, slot_stride, s) +
// h*head_stride.
struct Side {
  const unsigned char* src = nullptr;
  std::int64_t src_token = 0, src_head = 0;
  unsigned char* dst = nullptr;
  std::int64_t block_stride = 0, slot_stride = 0, head_stride = 0;
  const float* scales = nullptr;  // fp8 formats: one per head
  bool merged = false;            // the heads of a token form one run on both ends
};

struct Job {
  Side side[2];
  std::int64_t num_heads = 0, head_size = 0;
  SlotSplitter split;
  DType dtype = DType::float32;  // of key and value
  KvCacheFormat format = KvCacheFormat::copy;
  bool uniform_scale = false;  // one scale for every head (merged runs may be quantized at once)
  const std::int64_t* slots = nullptr;  // per token; < 0: padding or a dropped earlier writer
  bool stream = false;                  // copies may use non-temporal stores (large calls)
};

// Dispatched entry point: writes tokens [begin, end).
void write_token_range(const Job& job, std::int64_t begin, std::int64_t end);

}  // namespace kvscatter::detail::paged_kv_write
