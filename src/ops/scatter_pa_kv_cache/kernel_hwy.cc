// Byte movers of the optimized ScatterPaKvCache kernel, compiled once per SIMD target (Highway
// dynamic dispatch, chosen once per chunk of work). Every access is an unaligned vector load or
// store of bytes (or memcpy, or an aligned streaming store), so rows at any address and of any
// length are safe.
#include <algorithm>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/scatter_pa_kv_cache/kernel_hwy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "core/bytes-inl.h"
#include "ops/scatter_pa_kv_cache/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::scatter::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using detail::HWY_NAMESPACE::CopyBytes;
using detail::HWY_NAMESPACE::StreamBytes;

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
      const auto bytes = static_cast<std::size_t>(j.num_heads * j.head_bytes);
      if (stream)
        StreamBytes(dst, src, bytes);
      else
        CopyBytes(dst, src, bytes);
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

constexpr std::int64_t kTile = 8;

// The PA_NZ pieces of a group, tile by tile (see WriteGroup); kStream: non-temporal stores.
template <bool kStream>
HWY_INLINE void GroupPieces(const SideJob& j, unsigned char* dst, const unsigned char* src,
                            std::int64_t n, std::int64_t heads, std::int64_t pieces) {
  const hn::CappedTag<std::uint8_t, 32> d32;
  const std::size_t N = hn::Lanes(d32);
  for (std::int64_t i0 = 0; i0 < n; i0 += kTile) {
    const std::int64_t m = std::min(kTile, n - i0);
    for (std::int64_t h = 0; h < heads; ++h) {
      unsigned char* dh = dst + h * j.head_pitch + i0 * 32;
      const unsigned char* sh = src + h * j.src_head + i0 * j.src_token;
      for (std::int64_t c = 0; c < pieces; ++c) {
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::size_t k = 0; k < 32; k += N) {
            const auto v = hn::LoadU(d32, sh + i * j.src_token + c * 32 + k);
            unsigned char* to = dh + c * j.chunk_pitch + i * 32 + k;
            if constexpr (kStream) {
              hn::Stream(v, d32, to);
            } else {
              hn::StoreU(v, d32, to);
            }
          }
        }
      }
    }
  }
}

// n tokens t, t+1, ... going to consecutive slots s, s+1, ... of one block (a prefill). Each
// destination piece (a 32-byte PA_NZ chunk, an NHSD head) of those slots is one contiguous run,
// so pieces are written piece-major: sequential stores filling whole lines, instead of one
// 32-byte store per token on every one of NH*D/L pages. Tokens go in tiles of kTile, whose
// rows stay in L1 while their pieces are distributed.
HWY_INLINE void WriteGroup(const SideJob& j, std::int64_t block_size, std::int64_t t,
                           std::int64_t slot, std::int64_t n, bool stream) {
  unsigned char* dst =
      j.dst + (slot / block_size) * j.block_stride + (slot % block_size) * j.slot_pitch;
  const unsigned char* src = j.src + t * j.src_token;
  if (j.chunk_pitch == 0) {  // NHSD: head h of the n slots, slot_pitch apart
    for (std::int64_t i0 = 0; i0 < n; i0 += kTile) {
      const std::int64_t m = std::min(kTile, n - i0);
      for (std::int64_t h = 0; h < j.num_heads; ++h) {
        for (std::int64_t i = i0; i < i0 + m; ++i) {
          CopyBytes(dst + h * j.head_pitch + i * j.slot_pitch,
                    src + i * j.src_token + h * j.src_head, static_cast<std::size_t>(j.head_bytes));
        }
      }
    }
    return;
  }
  const hn::CappedTag<std::uint8_t, 32> d32;
  const std::size_t N = hn::Lanes(d32);
  const std::int64_t heads = j.merged ? 1 : j.num_heads;
  const std::int64_t pieces = (j.merged ? j.num_heads * j.head_bytes : j.head_bytes) / 32;
  // Streaming stores need vector-aligned destinations; every chunk of the group shares the
  // alignment of its first one.
  if (stream && reinterpret_cast<std::uintptr_t>(dst) % N == 0) {
    GroupPieces<true>(j, dst, src, n, heads, pieces);
  } else {
    GroupPieces<false>(j, dst, src, n, heads, pieces);
  }
}

constexpr int kScatterTile = 16;

// Up to kScatterTile single tokens of a PA_NZ side, chunk-major: the chunks of one token are
// chunk_pitch apart (a multiple of 4 KiB for usual block sizes), so token-major stores all fall
// into one L1 set and their misses serialise; interleaving tokens (random slots, hence random
// sets) keeps many line fills in flight.
HWY_INLINE void WriteTileNz(const SideJob& j, std::int64_t block_size, const std::int64_t* toks,
                            const std::int64_t* slots, int m) {
  const hn::CappedTag<std::uint8_t, 32> d32;
  const std::size_t N = hn::Lanes(d32);
  unsigned char* dst[kScatterTile];
  const unsigned char* src[kScatterTile];
  for (int i = 0; i < m; ++i) {
    dst[i] = j.dst + (slots[i] / block_size) * j.block_stride + (slots[i] % block_size) * 32;
    src[i] = j.src + toks[i] * j.src_token;
  }
  const std::int64_t per_head = j.head_bytes / 32;
  const std::int64_t heads = j.merged ? 1 : j.num_heads;
  const std::int64_t pieces = j.merged ? j.num_heads * per_head : per_head;
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t c = 0; c < pieces; ++c) {
      const std::int64_t so = h * j.src_head + c * 32;
      const std::int64_t doff = (h * pieces + c) * j.chunk_pitch;
      for (int i = 0; i < m; ++i) {
        for (std::size_t k = 0; k < 32; k += N) {
          hn::StoreU(hn::LoadU(d32, src[i] + so + k), d32, dst[i] + doff + k);
        }
      }
    }
  }
}

void ScatterTokenRange(const RowJob& job, std::int64_t begin, std::int64_t end) {
  const std::int64_t bs = job.block_size;
  const bool nz = job.side[0].chunk_pitch != 0;
  std::int64_t tile_tok[kScatterTile], tile_slot[kScatterTile];
  int m = 0;
  const auto flush = [&] {
    for (int k = 0; k < job.num_sides; ++k) WriteTileNz(job.side[k], bs, tile_tok, tile_slot, m);
    m = 0;
  };
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t s = job.slots[t];
    if (s < 0 || (job.skip != nullptr && job.skip[t] != 0)) continue;
    std::int64_t n = 1;
    if (job.group) {
      // Tokens filling the next slots of the same block (a prefill) form one group.
      while (t + n < end && job.slots[t + n] == s + n && (s + n) % bs != 0 &&
             (job.skip == nullptr || job.skip[t + n] == 0)) {
        ++n;
      }
    }
    if (n > 1) {
      for (int k = 0; k < job.num_sides; ++k) WriteGroup(job.side[k], bs, t, s, n, job.stream);
      t += n - 1;
      continue;
    }
    if (nz) {  // writes never overlap (duplicates are skipped), so the order is free
      tile_tok[m] = t;
      tile_slot[m] = s;
      if (++m == kScatterTile) flush();
      continue;
    }
    for (int k = 0; k < job.num_sides; ++k) WriteToken(job.side[k], bs, t, s, job.stream);
  }
  if (m > 0) flush();
  // Streaming stores are weakly ordered: drain them before the pool reports the chunk done.
  if (job.stream) hwy::FlushStream();
}

void CompressRowRange(const CompressJob& job, std::int64_t begin, std::int64_t end) {
  // The run holding row `begin`: the last run whose first row is <= begin.
  std::int64_t lo = 0, hi = job.num_runs - 1;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (job.first_row[mid] <= begin)
      lo = mid;
    else
      hi = mid - 1;
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
      const unsigned char* tok0 =
          s.src + run.h * s.src_head + (job.packed ? run.base * s.src_token : run.b * s.src_batch);
      if (pos < 0) {
        rope_mean_row(s.dtype, tok0 + run.offset * s.src_token, s.src_token, run.window,
                      s.head_size, dst);
      } else {
        CopyBytes(dst, tok0 + pos * s.src_token, static_cast<std::size_t>(s.row_bytes));
      }
    }
  }
}

// Row of run r fed by source position p, or -1 (outside the run, or inside a Rope window, whose
// mean row is written separately).
HWY_INLINE std::int64_t RowOf(ScatterMode mode, const CompressRun& r, std::int64_t p) {
  if (mode == ScatterMode::Alibi) {
    const std::int64_t j = p - (r.seq_len - r.window);
    return j >= 0 ? j : -1;
  }
  if (r.window == 0 || p < r.offset) return p;
  if (p < r.offset + r.window) return -1;
  return mode == ScatterMode::Rope ? p - r.window + 1 : p - r.window;
}

// Reads the source in order (each token's heads are adjacent there) and writes each head to its
// run: one pass over the key instead of one strided pass per head.
void CompressTokenRange(const CompressJob& job, std::int64_t begin, std::int64_t end) {
  std::int64_t b = 0;
  if (job.packed) {
    std::int64_t lo = 0, hi = job.batch - 1;  // last batch whose first token <= begin
    while (lo < hi) {
      const std::int64_t mid = (lo + hi + 1) / 2;
      if (job.batch_first[mid] <= begin)
        lo = mid;
      else
        hi = mid - 1;
    }
    b = lo;
  }
  for (std::int64_t g = begin; g < end; ++g) {
    std::int64_t p = 0;
    if (job.packed) {
      while (g >= job.batch_first[b + 1]) ++b;
      p = g - job.batch_first[b];
    } else {
      b = g / job.seq_len;
      p = g % job.seq_len;
    }
    const CompressRun* runs = job.all_runs + b * job.num_heads;
    for (std::int64_t h = 0; h < job.num_heads; ++h) {
      const CompressRun& run = runs[h];
      if (run.rows == 0 || p >= run.seq_len) continue;
      const std::int64_t j = RowOf(job.mode, run, p);
      if (j < 0) continue;
      const std::int64_t row = run.start + j;
      for (int k = 0; k < job.num_sides; ++k) {
        const CompressSide& s = job.side[k];
        unsigned char* dst =
            s.dst + (row / job.block_size) * s.block_stride + (row % job.block_size) * s.row_bytes;
        const unsigned char* src =
            s.src + h * s.src_head +
            (job.packed ? g * s.src_token : b * s.src_batch + p * s.src_token);
        CopyBytes(dst, src, static_cast<std::size_t>(s.row_bytes));
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
HWY_EXPORT(CompressTokenRange);

void scatter_token_range(const RowJob& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(ScatterTokenRange)(job, begin, end);
}

void compress_row_range(const CompressJob& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(CompressRowRange)(job, begin, end);
}

void compress_token_range(const CompressJob& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(CompressTokenRange)(job, begin, end);
}

}  // namespace kvscatter::detail::scatter
#endif  // HWY_ONCE
