// The PagedKvWrite SIMD kernel, compiled once per target: byte copies for the
// copy format, and division by the scale plus saturating fp8 encoding for the
// fp8 formats. No threads here.
#include <cstddef>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/paged_kv_write/kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/bytes-inl.h"
#include "formats/fp8-inl.h"
#include "kvscatter/formats.h"
#include "ops/paged_kv_write/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::paged_kv_write::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using detail::HWY_NAMESPACE::CopyBytes;
using detail::HWY_NAMESPACE::StreamBytes;

using formats::HWY_NAMESPACE::QuantizeRun;
using formats::HWY_NAMESPACE::QuantizeRuns;

template <bool kE4M3>
HWY_INLINE void QuantizeToken(const Job& job, const Side& s, std::int64_t t, unsigned char* row) {
  const unsigned char* src = s.src + t * s.src_token;
  const auto d = static_cast<std::size_t>(job.head_size);
  if (s.merged && job.uniform_scale) {
    QuantizeRun<kE4M3>(job.dtype, src, d * static_cast<std::size_t>(job.num_heads), s.scales[0],
                       row);
    return;
  }
  QuantizeRuns<kE4M3>(job.dtype, src, s.src_head, d, job.num_heads, s.scales, row, s.head_stride);
}

HWY_INLINE void CopyToken(const Job& job, const Side& s, std::int64_t t, unsigned char* row) {
  const std::size_t es = job.dtype == DType::float32 ? 4 : 2;
  const unsigned char* src = s.src + t * s.src_token;
  const std::size_t head_bytes = static_cast<std::size_t>(job.head_size) * es;
  if (s.merged) {
    const std::size_t n = head_bytes * static_cast<std::size_t>(job.num_heads);
    if (job.stream)
      StreamBytes(row, src, n);
    else
      CopyBytes(row, src, n);
    return;
  }
  // Heads apart in the cache (HND) are whole lines when the rows are line-aligned: streamed too.
  if (job.stream) {
    for (std::int64_t h = 0; h < job.num_heads; ++h) {
      StreamBytes(row + h * s.head_stride, src + h * s.src_head, head_bytes);
    }
    return;
  }
  for (std::int64_t h = 0; h < job.num_heads; ++h) {
    CopyBytes(row + h * s.head_stride, src + h * s.src_head, head_bytes);
  }
}

void WriteTokenRange(const Job& job, std::int64_t begin, std::int64_t end) {
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t slot = job.slots[t];
    if (slot < 0) continue;
    for (const Side& s : job.side) {
      unsigned char* row = job.split.address(s.dst, s.block_stride, s.slot_stride, slot);
      switch (job.format) {
        case KvCacheFormat::copy:
          CopyToken(job, s, t, row);
          break;
        case KvCacheFormat::fp8_e4m3:
          QuantizeToken<true>(job, s, t, row);
          break;
        case KvCacheFormat::fp8_e5m2:
          QuantizeToken<false>(job, s, t, row);
          break;
      }
    }
  }
  // Streaming stores are weakly ordered: drain them before the pool reports the
  // chunk done.
  if (job.stream) hwy::FlushStream();
}

}  // namespace kvscatter::detail::paged_kv_write::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail::paged_kv_write {

HWY_EXPORT(WriteTokenRange);

void write_token_range(const Job& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(WriteTokenRange)(job, begin, end);
}

}  // namespace kvscatter::detail::paged_kv_write
#endif  // HWY_ONCE
