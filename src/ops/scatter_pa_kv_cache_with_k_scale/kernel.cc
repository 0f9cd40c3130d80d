// The kernel of scatter_pa_kv_cache_with_k_scale, compiled once per SIMD target (Highway
// dynamic dispatch). The operator is a pure byte copy, so the fast path is one copy per
// (token, head) row; the driver (execute.cc) splits tokens over threads.
//
// Tokens whose slots follow each other in one block (a prefill) go in tiles of job.tile, head
// by head: each head's rows of a tile then fill one contiguous stretch of the cache instead of
// the cache being written in H places per token, while the tile's input rows stay in L1. Larger
// calls go token by token (their reads come from further out, where sequential rows matter
// more), those that write more than the caches hold with streaming stores, which skip the read
// for ownership of every line they fill. Cached calls write each chunk's keys (and scales)
// first, then its values (CachedSides).
#include <hwy/cache_control.h>

#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/scatter_pa_kv_cache_with_k_scale/kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/bytes-inl.h"
#include "core/streaming.h"
#include "ops/scatter_pa_kv_cache_with_k_scale/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::k_scale::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using detail::HWY_NAMESPACE::CopyBytes;

// Copies n one-byte elements between strided rows; CopyBytes when both are contiguous, with the
// common head sizes as compile-time sizes so the copy is a few inline vector moves of the
// target's width (GCC expands a fixed-size memcpy into 16-byte moves even on AVX2).
HWY_INLINE void CopyRow(std::uint8_t* dst, std::int64_t dst_stride, const std::uint8_t* src,
                        std::int64_t src_stride, std::int64_t n) {
  if ((dst_stride == 1 && src_stride == 1) || n == 1) {
    switch (n) {
      case 64:
        CopyBytes(dst, src, 64);
        return;
      case 128:
        CopyBytes(dst, src, 128);
        return;
      case 192:
        CopyBytes(dst, src, 192);
        return;
      case 256:
        CopyBytes(dst, src, 256);
        return;
      case 512:
        CopyBytes(dst, src, 512);
        return;
      default:
        std::memcpy(dst, src, static_cast<std::size_t>(n));
        return;
    }
  }
  for (std::int64_t i = 0; i < n; ++i) dst[i * dst_stride] = src[i * src_stride];
}

// CopyRow, or with streaming stores where both rows are contiguous.
template <bool kStream>
HWY_INLINE void MoveRow(std::uint8_t* dst, std::int64_t dst_stride, const std::uint8_t* src,
                        std::int64_t src_stride, std::int64_t n) {
  if (kStream && dst_stride == 1 && src_stride == 1) {
    detail::HWY_NAMESPACE::StreamBytes(dst, src, static_cast<std::size_t>(n));
    return;
  }
  CopyRow(dst, dst_stride, src, src_stride, n);
}

// Contiguous rows of kD bytes (a common head size) in tiles: each row a few inline vector moves,
// with no per-row test of strides or size, which in cache costs as much as the moves.
template <std::int64_t kD>
HWY_INLINE void CopyTileFixed(std::uint8_t* dst, const std::int64_t* dst_strides,
                              const std::uint8_t* src, const std::int64_t* src_strides,
                              std::int64_t H, std::int64_t n) {
  for (std::int64_t h = 0; h < H; ++h) {
    std::uint8_t* d = dst + h * dst_strides[1];
    const std::uint8_t* s = src + h * src_strides[1];
    for (std::int64_t i = 0; i < n; ++i) {
      CopyBytes(d + i * dst_strides[2], s + i * src_strides[0], kD);
    }
  }
}

// One side (key or value) of n tokens: input rows t0.. (strides src[0..2]) into the n
// consecutive slots from dst (cache strides dst[0..3]), head by head.
template <bool kStream>
HWY_INLINE void CopyTile(std::uint8_t* dst, const std::int64_t* dst_strides,
                         const std::uint8_t* src, const std::int64_t* src_strides, std::int64_t H,
                         std::int64_t D, std::int64_t n) {
  for (std::int64_t h = 0; h < H; ++h) {
    std::uint8_t* d = dst + h * dst_strides[1];
    const std::uint8_t* s = src + h * src_strides[1];
    for (std::int64_t i = 0; i < n; ++i) {
      MoveRow<kStream>(d + i * dst_strides[2], dst_strides[3], s + i * src_strides[0],
                       src_strides[2], D);
    }
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// Eight tokens' scales of eight heads (token rows of 8 contiguous scales) into each head's run
// of 8 slots: an 8x8 transpose in 256-bit registers (two 128-bit blocks), one store per head.
HWY_INLINE void Transpose8(std::int32_t* dst, std::int64_t dst_head, const std::int32_t* src,
                           std::int64_t src_token) {
  const hn::CappedTag<std::int32_t, 8> d;
  const hn::Repartition<std::int64_t, decltype(d)> d64;
  using V = hn::Vec<decltype(d)>;
  V r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = hn::LoadU(d, src + i * src_token);
  // t[2j], t[2j+1]: rows 2j and 2j+1 interleaved, per block (lanes 0,1 then 2,3 of each block).
  for (int j = 0; j < 4; ++j) {
    t[2 * j] = hn::InterleaveLower(d, r[2 * j], r[2 * j + 1]);
    t[2 * j + 1] = hn::InterleaveUpper(d, r[2 * j], r[2 * j + 1]);
  }
  // q[4g + c]: rows 4g..4g+3 of head c (lower block) and head c + 4 (upper block).
  V q[8];
  for (int g = 0; g < 2; ++g) {
    const auto a0 = hn::BitCast(d64, t[4 * g]), a1 = hn::BitCast(d64, t[4 * g + 1]);
    const auto b0 = hn::BitCast(d64, t[4 * g + 2]), b1 = hn::BitCast(d64, t[4 * g + 3]);
    q[4 * g + 0] = hn::BitCast(d, hn::InterleaveLower(d64, a0, b0));
    q[4 * g + 1] = hn::BitCast(d, hn::InterleaveUpper(d64, a0, b0));
    q[4 * g + 2] = hn::BitCast(d, hn::InterleaveLower(d64, a1, b1));
    q[4 * g + 3] = hn::BitCast(d, hn::InterleaveUpper(d64, a1, b1));
  }
  for (int c = 0; c < 4; ++c) {
    hn::StoreU(hn::ConcatLowerLower(d, q[4 + c], q[c]), d, dst + c * dst_head);
    hn::StoreU(hn::ConcatUpperUpper(d, q[4 + c], q[c]), d, dst + (c + 4) * dst_head);
  }
}
#endif

// The key scales of n <= kTile tokens on consecutive slots (neighbours in the cache), head by
// head: one gather over the token rows and one store per head instead of n scalar moves. Scales
// move as 32-bit integers, so every float bit pattern survives. A part vector leaves through a
// buffer: a masked store may be a load, blend and store of the whole vector (NEON), which would
// rewrite the entries after the run, racing with the thread whose tokens own them.
HWY_INLINE void ScaleRuns(std::int32_t* dst, std::int64_t dst_head, const std::int32_t* src,
                          std::int64_t src_token, std::int64_t src_head, std::int64_t H,
                          std::int64_t n) {
  const hn::CappedTag<std::int32_t, kTile> d;
  const auto N = static_cast<std::int64_t>(hn::Lanes(d));
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if (N == 8 && H == 8 && n == 8 && src_head == 1) {
    Transpose8(dst, dst_head, src, src_token);
    return;
  }
#endif
  const auto stride = hn::Set(d, static_cast<std::int32_t>(src_token));
  for (std::int64_t i0 = 0; i0 < n; i0 += N) {
    const std::int64_t count = n - i0 < N ? n - i0 : N;
    // Lanes past the tile re-read its last token, so no read leaves the input.
    const auto last = hn::Set(d, static_cast<std::int32_t>(count - 1));
    const auto idx = hn::Mul(hn::Min(hn::Iota(d, 0), last), stride);
    for (std::int64_t h = 0; h < H; ++h) {
      const auto scales = hn::GatherIndex(d, src + i0 * src_token + h * src_head, idx);
      std::int32_t* out = dst + i0 + h * dst_head;
      if (count == N) {
        hn::StoreU(scales, d, out);
      } else {
        HWY_ALIGN std::int32_t part[kTile];
        hn::Store(scales, d, part);
        std::memcpy(out, part, static_cast<std::size_t>(count) * sizeof(std::int32_t));
      }
    }
  }
}

// Which sides Tokens writes: the key rows with the scales, the value rows, or both.
enum Sides : unsigned { kKeys = 1, kValues = 2, kBoth = 3 };

// Tokens [begin, end) of the given sides in tiles of at most `tile` tokens on consecutive slots
// of one block, each tile's key rows, then its scales, then its value rows; kD, when not 0, is
// the head size of both sides, whose rows are all contiguous (no streaming).
template <bool kStream, std::int64_t kD = 0>
void Tokens(const TokenJob& job, std::int64_t begin, std::int64_t end, std::int64_t tile,
            unsigned sides) {
  const ScatterPaKvCacheWithKScalePlan& p = *job.plan;
  const auto* key_scale = static_cast<const std::uint8_t*>(p.key_scale.data);
  auto* scale_cache = static_cast<std::uint8_t*>(p.key_scale_cache.data);
  const auto ks = p.key_scale.strides;
  const auto sc = p.key_scale_cache.strides;
  const std::int64_t H = p.num_heads;
  const SlotSplitter& split = job.split;
  const std::int64_t* slots = job.slots;
  // A tile's scales of one head are neighbours in the cache when its slots are; the gather
  // indexes tokens with 32-bit offsets and reads whole aligned floats.
  const bool gather_scales =
      sc[2] == 1 && ks[0] >= 0 && ks[0] <= (std::int64_t{1} << 31) / kTile - 1 &&
      reinterpret_cast<std::uintptr_t>(key_scale) % 4 == 0 &&
      reinterpret_cast<std::uintptr_t>(scale_cache) % 4 == 0;
  // The rows of n tokens from t (slots from slot on) of one side.
  const auto rows = [&](const TensorView& input, const TensorView& cache, std::int64_t D,
                        std::int64_t t, std::int64_t n, std::int64_t slot) {
    const auto x = input.strides;
    const auto c = cache.strides;
    const auto* in = static_cast<const std::uint8_t*>(input.data) + t * x[0];
    std::uint8_t* dst = split.address(static_cast<std::uint8_t*>(cache.data), c[0], c[2], slot);
    if (kD != 0) {
      CopyTileFixed<kD>(dst, c.data(), in, x.data(), H, n);
    } else {
      CopyTile<kStream>(dst, c.data(), in, x.data(), H, D, n);
    }
  };

  for (std::int64_t t = begin; t < end;) {
    const std::int64_t slot = slots[t];
    if (slot < 0) {
      ++t;
      continue;
    }
    std::int64_t n = 1;
    while (n < tile && t + n < end && slots[t + n] == slot + n && split.offset(slot + n) != 0) {
      ++n;
    }
    if (sides & kKeys) {
      rows(p.key, p.key_cache, p.key_head_size, t, n, slot);
      // float32 scales move as raw bytes; element strides are scaled to bytes here.
      std::uint8_t* sdst = split.address(scale_cache, 4 * sc[0], 4 * sc[2], slot);
      if (n > 1 && gather_scales) {
        ScaleRuns(reinterpret_cast<std::int32_t*>(sdst), sc[1],
                  reinterpret_cast<const std::int32_t*>(key_scale + 4 * t * ks[0]), ks[0], ks[1], H,
                  n);
      } else {
        for (std::int64_t i = 0; i < n; ++i) {
          const std::uint8_t* srow = key_scale + 4 * (t + i) * ks[0];
          for (std::int64_t h = 0; h < H; ++h) {
            std::memcpy(sdst + 4 * (i * sc[2] + h * sc[1]), srow + 4 * h * ks[1], 4);
          }
        }
      }
    }
    if (sides & kValues) rows(p.value, p.value_cache, p.value_head_size, t, n, slot);
    t += n;
  }
}

// Cached rows: the keys of a chunk, then its values, so that the two caches' rows do not
// compete for the same L1 sets (docs/architecture.md, "One cache at a time"); streamed rows
// keep a token's sides together.
template <std::int64_t kD = 0>
void CachedSides(const TokenJob& job, std::int64_t begin, std::int64_t end) {
  Tokens<false, kD>(job, begin, end, job.tile, kKeys);
  Tokens<false, kD>(job, begin, end, job.tile, kValues);
}

void TokenRange(const TokenJob& job, std::int64_t begin, std::int64_t end) {
  if (job.stream) {
    Tokens<true>(job, begin, end, 1, kBoth);
    // Streaming stores are weakly ordered: drain them before the pool reports the chunk done.
    hwy::FlushStream();
    return;
  }
  const ScatterPaKvCacheWithKScalePlan& p = *job.plan;
  const bool unit = p.key.strides[2] == 1 && p.value.strides[2] == 1 &&
                    p.key_cache.strides[3] == 1 && p.value_cache.strides[3] == 1;
  const std::int64_t D = unit && p.key_head_size == p.value_head_size ? p.key_head_size : 0;
  switch (D) {
    case 64:
      return CachedSides<64>(job, begin, end);
    case 128:
      return CachedSides<128>(job, begin, end);
    case 256:
      return CachedSides<256>(job, begin, end);
    default:
      return CachedSides(job, begin, end);
  }
}

}  // namespace kvscatter::detail::k_scale::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail::k_scale {

HWY_EXPORT(TokenRange);

void token_range(const TokenJob& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(TokenRange)(job, begin, end);
}

}  // namespace kvscatter::detail::k_scale
#endif  // HWY_ONCE
