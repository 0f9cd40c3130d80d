// Byte movers of the optimized GatherPaKvCache kernel, compiled once per SIMD
// target (Highway dynamic dispatch). Every access is an unaligned vector load
// or store of bytes (or memcpy / memset), so rows at any address and of any
// length are safe.
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/gather_pa_kv_cache/kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/bytes-inl.h"
#include "ops/gather_pa_kv_cache/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::gather::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using detail::HWY_NAMESPACE::CopyBytes;

// One output row from its n 32-byte chunks, `pitch` bytes apart in the cache
// (PA_NZ).
HWY_INLINE void GatherChunks(unsigned char* HWY_RESTRICT dst, const unsigned char* HWY_RESTRICT src,
                             std::int64_t pitch, std::int64_t n) {
  const hn::CappedTag<std::uint8_t, 32> d;
  const std::size_t N = hn::Lanes(d);
  if (N == 32) {
    for (std::int64_t c = 0; c < n; ++c) hn::StoreU(hn::LoadU(d, src + c * pitch), d, dst + c * 32);
    return;
  }
  for (std::int64_t c = 0; c < n; ++c) {
    for (std::size_t k = 0; k < 32; k += N) {
      hn::StoreU(hn::LoadU(d, src + c * pitch + k), d, dst + c * 32 + k);
    }
  }
}

HWY_INLINE void GatherSegment(const GatherSide& s, const Segment& g) {
  unsigned char* dst = s.out + g.row * s.row_pitch;
  const auto row = static_cast<std::size_t>(s.row_bytes);
  const bool dense = s.row_pitch == s.row_bytes;
  if (g.block < 0) {  // padding block: zero bytes
    if (dense) {
      std::memset(dst, 0, row * static_cast<std::size_t>(g.count));
      return;
    }
    for (std::int64_t o = 0; o < g.count; ++o) std::memset(dst + o * s.row_pitch, 0, row);
    return;
  }
  const unsigned char* src = s.cache + g.block * s.block_stride;
  if (s.chunk_pitch == 0) {
    if (dense) {  // the block's rows are contiguous in the cache and in the
                  // output
      CopyBytes(dst, src, row * static_cast<std::size_t>(g.count));
      return;
    }
    for (std::int64_t o = 0; o < g.count; ++o) {
      CopyBytes(dst + o * s.row_pitch, src + o * s.slot_pitch, row);
    }
    return;
  }
  const std::int64_t chunks = s.row_bytes / 32;
  for (std::int64_t o = 0; o < g.count; ++o) {
    GatherChunks(dst + o * s.row_pitch, src + o * s.slot_pitch, s.chunk_pitch, chunks);
  }
}

void GatherSegmentRange(const GatherJob& job, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) {
    for (int k = 0; k < job.num_sides; ++k) GatherSegment(job.side[k], job.segments[i]);
  }
}

}  // namespace kvscatter::detail::gather::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail::gather {

HWY_EXPORT(GatherSegmentRange);

void gather_segment_range(const GatherJob& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(GatherSegmentRange)(job, begin, end);
}

}  // namespace kvscatter::detail::gather
#endif  // HWY_ONCE
