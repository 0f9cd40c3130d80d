// The job the PagedLatentWrite driver (execute.cc) hands to the SIMD kernel (kernel.cc).
#pragma once

#include <cstdint>

#include "core/slots.h"
#include "kvscatter/dtype.h"
#include "kvscatter/paged_latent_write.h"

namespace kvscatter::detail::paged_latent_write {

// Distances in bytes. Token t reads kv_c at kv_c + t*kv_c_token and k_pe at k_pe + t*k_pe_token;
// slot s writes at split.address(cache, block_stride, slot_stride, s).
struct Job {
  const unsigned char *kv_c = nullptr, *k_pe = nullptr;
  std::int64_t kv_c_token = 0, k_pe_token = 0;
  unsigned char* cache = nullptr;
  std::int64_t block_stride = 0, slot_stride = 0;
  SlotSplitter split;
  std::int64_t latent_dim = 0, pe_dim = 0;
  DType dtype = DType::float32;  // of kv_c and k_pe
  LatentCacheFormat format = LatentCacheFormat::copy;
  float scale = 1.0f;
  const std::int64_t* slots = nullptr;  // < 0: padding or a dropped earlier writer
  bool stream = false;                  // copies may use non-temporal stores (large calls)
};

// Dispatched entry point: tokens [begin, end).
void write_token_range(const Job& job, std::int64_t begin, std::int64_t end);

}  // namespace kvscatter::detail::paged_latent_write
