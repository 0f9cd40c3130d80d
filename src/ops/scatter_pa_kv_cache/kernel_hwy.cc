// Byte movers of the optimized ScatterPaKvCache kernel, compiled once per SIMD target (Highway
// dynamic dispatch, chosen once per chunk of work). Every access is an unaligned vector load or
// store of bytes (or memcpy), so rows at any address and of any length are safe.
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/scatter_pa_kv_cache/kernel_hwy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/cache_control.h>

#include "ops/scatter_pa_kv_cache/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::scatter::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D8 = hn::ScalableTag<std::uint8_t>;

// n contiguous bytes. Below one vector: memcpy (a few bytes); otherwise full vectors, the last
// one overlapping the previous store so no scalar tail is needed.
HWY_INLINE void CopyBytes(unsigned char* HWY_RESTRICT dst, const unsigned char* HWY_RESTRICT src,
                          std::size_t n) {
  const D8 d;
  const std::size_t N = hn::Lanes(d);
  if (n < N) {
    std::memcpy(dst, src, n);
    return;
  }
  std::size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto a = hn::LoadU(d, src + i);
    const auto b = hn::LoadU(d, src + i + N);
    const auto c = hn::LoadU(d, src + i + 2 * N);
    const auto e = hn::LoadU(d, src + i + 3 * N);
    hn::StoreU(a, d, dst + i);
    hn::StoreU(b, d, dst + i + N);
    hn::StoreU(c, d, dst + i + 2 * N);
    hn::StoreU(e, d, dst + i + 3 * N);
  }
  for (; i + N <= n; i += N) hn::StoreU(hn::LoadU(d, src + i), d, dst + i);
  if (i < n) hn::StoreU(hn::LoadU(d, src + n - N), d, dst + n - N);
}

// Like CopyBytes but the vector-aligned body uses non-temporal stores, which skip reading the
// destination lines first (large writes that would not stay in cache anyway).
HWY_INLINE void StreamBytes(unsigned char* HWY_RESTRICT dst, const unsigned char* HWY_RESTRICT src,
                            std::size_t n) {
  const D8 d;
  const std::size_t N = hn::Lanes(d);
  if (n < 4 * N) {
    CopyBytes(dst, src, n);
    return;
  }
  // Unaligned head with one ordinary store, then aligned streaming stores.
  hn::StoreU(hn::LoadU(d, src), d, dst);
  const std::size_t mis = reinterpret_cast<std::uintptr_t>(dst) & (N - 1);
  std::size_t i = mis == 0 ? N : N - mis;
  for (; i + N <= n; i += N) hn::Stream(hn::LoadU(d, src + i), d, dst + i);
  if (i < n) hn::StoreU(hn::LoadU(d, src + n - N), d, dst + n - N);
}

// n chunks of 32 bytes: source contiguous, destination `pitch` bytes apart (PA_NZ).
HWY_INLINE void Chunks32(unsigned char* HWY_RESTRICT dst, std::int64_t pitch,
                         const unsigned char* HWY_RESTRICT src, std::int64_t n) {
  const hn::CappedTag<std::uint8_t, 32> d;
  constexpr std::size_t kMax = 32;
  const std::size_t N = hn::Lanes(d);
  if (N == kMax) {
    for (std::int64_t c = 0; c < n; ++c) {
      hn::StoreU(hn::LoadU(d, src + c * 32), d, dst + c * pitch);
    }
  } else {
    for (std::int64_t c = 0; c < n; ++c) {
      for (std::size_t k = 0; k < kMax; k += N) {
        hn::StoreU(hn::LoadU(d, src + c * 32 + k), d, dst + c * pitch + k);
      }
    }
  }
}

HWY_INLINE void WriteToken(const SideJob& j, std::int64_t block_size, std::int64_t t,
                           std::int64_t slot, bool stream) {
  unsigned char* dst =
      j.dst + (slot / block_size) * j.block_stride + (slot % block_size) * j.slot_pitch;
  const unsigned char* src = j.src + t * j.src_token;
  if (j.chunk_pitch == 0) {
    if (j.merged) {
      const auto n = static_cast<std::size_t>(j.num_heads * j.head_bytes);
      if (stream) {
        StreamBytes(dst, src, n);
      } else {
        CopyBytes(dst, src, n);
      }
      return;
    }
    for (std::int64_t h = 0; h < j.num_heads; ++h) {
      CopyBytes(dst + h * j.head_pitch, src + h * j.src_head,
                static_cast<std::size_t>(j.head_bytes));
    }
    return;
  }
  if (j.merged) {
    Chunks32(dst, j.chunk_pitch, src, j.num_heads * j.head_bytes / 32);
    return;
  }
  for (std::int64_t h = 0; h < j.num_heads; ++h) {
    Chunks32(dst + h * j.head_pitch, j.chunk_pitch, src + h * j.src_head, j.head_bytes / 32);
  }
}

void ScatterTokenRange(const RowJob& job, std::int64_t begin, std::int64_t end) {
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t s = job.slots[t];
    if (s < 0 || (job.skip != nullptr && job.skip[t] != 0)) continue;
    for (int k = 0; k < job.num_sides; ++k) WriteToken(job.side[k], job.block_size, t, s, job.stream);
  }
  if (job.stream) hwy::FlushStream();
}

void CompressRowRange(const CompressJob& job, std::int64_t begin, std::int64_t end) {
  // The run holding row `begin`: the last run whose first row is <= begin.
  std::int64_t lo = 0, hi = job.num_runs - 1;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (job.first_row[mid] <= begin) lo = mid; else hi = mid - 1;
  }
  std::int64_t r = lo;
  for (std::int64_t g = begin; g < end; ++g) {
    while (g >= job.first_row[r] + job.runs[r].rows) ++r;
    const CompressRun& run = job.runs[r];
    const std::int64_t j = g - job.first_row[r];
    const std::int64_t row = run.start + j;
    const std::int64_t pos = run_source(job.mode, run, j);
    for (int k = 0; k < job.num_sides; ++k) {
      const CompressSide& s = job.side[k];
      unsigned char* dst =
          s.dst + (row / job.block_size) * s.block_stride + (row % job.block_size) * s.row_bytes;
      const unsigned char* tok0 = s.src + run.h * s.src_head +
                                  (job.packed ? run.base * s.src_token : run.b * s.src_batch);
      if (pos < 0) {
        rope_mean_row(s.dtype, tok0 + run.offset * s.src_token, s.src_token, run.window,
                      s.head_size, dst);
      } else {
        CopyBytes(dst, tok0 + pos * s.src_token, static_cast<std::size_t>(s.row_bytes));
      }
    }
  }
}

}  // namespace kvscatter::detail::scatter::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail::scatter {

HWY_EXPORT(ScatterTokenRange);
HWY_EXPORT(CompressRowRange);

void scatter_token_range(const RowJob& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(ScatterTokenRange)(job, begin, end);
}

void compress_row_range(const CompressJob& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(CompressRowRange)(job, begin, end);
}

}  // namespace kvscatter::detail::scatter
#endif  // HWY_ONCE
