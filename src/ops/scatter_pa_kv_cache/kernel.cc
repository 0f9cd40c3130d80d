// Byte movers of the optimized scatter_pa_kv_cache kernel, compiled once per SIMD target (Highway
// dynamic dispatch, chosen once per chunk of work). Every access is an unaligned vector load or
// store of bytes (or memcpy, or an aligned streaming store), so rows at any address and of any
// length are safe.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/scatter_pa_kv_cache/kernel.cc"
#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/bytes-inl.h"
#include "core/slots.h"
#include "core/unaligned.h"
#include "kvscatter/formats.h"
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

HWY_INLINE void WriteToken(const SideJob& j, const SlotSplitter& split, std::int64_t t,
                           std::int64_t slot, bool stream) {
  unsigned char* dst = split.address(j.dst, j.block_stride, j.slot_pitch, slot);
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
HWY_INLINE void WriteGroup(const SideJob& j, const SlotSplitter& split, std::int64_t t,
                           std::int64_t slot, std::int64_t n, bool stream) {
  unsigned char* dst = split.address(j.dst, j.block_stride, j.slot_pitch, slot);
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
HWY_INLINE void WriteTileNz(const SideJob& j, const SlotSplitter& split, const std::int64_t* toks,
                            const std::int64_t* slots, int m) {
  const hn::CappedTag<std::uint8_t, 32> d32;
  const std::size_t N = hn::Lanes(d32);
  unsigned char* dst[kScatterTile];
  const unsigned char* src[kScatterTile];
  for (int i = 0; i < m; ++i) {
    dst[i] = split.address(j.dst, j.block_stride, 32, slots[i]);
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
  const SlotSplitter& split = job.split;
  const bool nz = job.side[0].chunk_pitch != 0;
  std::int64_t tile_tok[kScatterTile], tile_slot[kScatterTile];
  int m = 0;
  const auto flush = [&] {
    for (int k = 0; k < job.num_sides; ++k) WriteTileNz(job.side[k], split, tile_tok, tile_slot, m);
    m = 0;
  };
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t s = job.slots[t];
    if (s < 0) continue;
    std::int64_t n = 1;
    if (job.group) {
      // Tokens filling the next slots of the same block (a prefill) form one group.
      while (t + n < end && job.slots[t + n] == s + n && split.offset(s + n) != 0) ++n;
    }
    if (n > 1) {
      for (int k = 0; k < job.num_sides; ++k) WriteGroup(job.side[k], split, t, s, n, job.stream);
      t += n - 1;
      continue;
    }
    if (nz) {  // writes never overlap (duplicates are skipped), so the order is free
      tile_tok[m] = t;
      tile_slot[m] = s;
      if (++m == kScatterTile) flush();
      continue;
    }
    for (int k = 0; k < job.num_sides; ++k) WriteToken(job.side[k], split, t, s, job.stream);
  }
  if (m > 0) flush();
  // Streaming stores are weakly ordered: drain them before the pool reports the chunk done.
  if (job.stream) hwy::FlushStream();
}

// Index of the last of the n ascending values that is <= v (values[0] <= v).
HWY_INLINE std::int64_t LastAtMost(const std::int64_t* values, std::int64_t n, std::int64_t v) {
  return (std::upper_bound(values + 1, values + n, v) - values) - 1;
}

void CompressRowRange(const CompressJob& job, std::int64_t begin, std::int64_t end) {
  std::int64_t r = LastAtMost(job.first_row, job.num_runs, begin);  // the run holding `begin`
  for (std::int64_t g = begin; g < end; ++g) {
    while (g >= job.first_row[r] + job.runs[r].rows) ++r;
    const CompressRun& run = job.runs[r];
    const std::int64_t j = g - job.first_row[r];
    const std::int64_t row = run.start + j;
    const std::int64_t pos = run_source(job.mode, run, j);
    for (int k = 0; k < job.num_sides; ++k) {
      const CompressSide& s = job.side[k];
      unsigned char* dst = job.split.address(s.dst, s.block_stride, s.row_bytes, row);
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
  if (job.packed) b = LastAtMost(job.batch_first, job.batch, begin);
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
        unsigned char* dst = job.split.address(s.dst, s.block_stride, s.row_bytes, row);
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

// ---- Rope mean rows (scalar: compiled once) ------------------------------------------------

namespace {

// Decoded value of every code of an 8-bit float format.
const float* decode_table(DType d) {
  struct Tables {
    float t[3][256];
    Tables() {
      const DType types[3] = {DType::hifloat8, DType::float8_e5m2, DType::float8_e4m3fn};
      for (int k = 0; k < 3; ++k) {
        for (std::uint32_t c = 0; c < 256; ++c) t[k][c] = formats::decode(types[k], c);
      }
    }
  };
  static const Tables tables;
  return tables.t[d == DType::hifloat8 ? 0 : d == DType::float8_e5m2 ? 1 : 2];
}

// One Rope mean row being accumulated: fp32 sums for floating types (token order, from
// +0.0, `x + acc`), wrapping (u)int32 sums for integer types.
class MeanAcc {
 public:
  void reset(DType dtype, std::int64_t n) {
    dtype_ = dtype;
    n_ = static_cast<std::size_t>(n);
    if (dtype_is_floating(dtype))
      f_.assign(n_, 0.0f);
    else
      u_.assign(n_, 0);
  }

  void add(const unsigned char* row) {
    const std::size_t n = n_;
    switch (dtype_) {
      case DType::float32:
        tmp_.resize(n);
        std::memcpy(tmp_.data(), row, n * 4);
        break;
      case DType::bfloat16:
      case DType::float16:
        tmp_.resize(n);
        c16_.resize(n);
        std::memcpy(c16_.data(), row, n * 2);
        if (dtype_ == DType::bfloat16)
          formats::bfloat16_to_float32(c16_.data(), tmp_.data(), n);
        else
          formats::float16_to_float32(c16_.data(), tmp_.data(), n);
        break;
      case DType::hifloat8:
      case DType::float8_e5m2:
      case DType::float8_e4m3fn: {
        const float* table = decode_table(dtype_);
        tmp_.resize(n);
        for (std::size_t e = 0; e < n; ++e) tmp_[e] = table[row[e]];
        break;
      }
      case DType::int8:
        for (std::size_t e = 0; e < n; ++e)
          u_[e] += static_cast<std::uint32_t>(
              static_cast<std::int32_t>(static_cast<std::int8_t>(row[e])));
        return;
      case DType::uint8:
        for (std::size_t e = 0; e < n; ++e) u_[e] += row[e];
        return;
      case DType::int16:
        for (std::size_t e = 0; e < n; ++e)
          u_[e] += static_cast<std::uint32_t>(
              static_cast<std::int32_t>(load_as<std::int16_t>(row + 2 * e)));
        return;
      case DType::uint16:
        for (std::size_t e = 0; e < n; ++e) u_[e] += load_as<std::uint16_t>(row + 2 * e);
        return;
      default:  // int32, uint32: the same wrapping 32-bit sum
        for (std::size_t e = 0; e < n; ++e) u_[e] += load_as<std::uint32_t>(row + 4 * e);
        return;
    }
    for (std::size_t e = 0; e < n; ++e) f_[e] = tmp_[e] + f_[e];
  }

  void store(std::int64_t w, unsigned char* dst) {
    const std::size_t n = n_;
    switch (dtype_) {
      case DType::int8:
      case DType::int16:
      case DType::int32: {
        // Division truncating toward zero, then the low bits.
        const auto wi = static_cast<std::int32_t>(w);
        for (std::size_t e = 0; e < n; ++e) {
          const std::int32_t q = static_cast<std::int32_t>(u_[e]) / wi;
          if (dtype_ == DType::int8)
            dst[e] = static_cast<unsigned char>(q);
          else if (dtype_ == DType::int16)
            store_as(dst + 2 * e, static_cast<std::int16_t>(q));
          else
            store_as(dst + 4 * e, q);
        }
        return;
      }
      case DType::uint8:
      case DType::uint16:
      case DType::uint32: {
        const auto wu = static_cast<std::uint32_t>(w);
        for (std::size_t e = 0; e < n; ++e) {
          const std::uint32_t q = u_[e] / wu;
          if (dtype_ == DType::uint8)
            dst[e] = static_cast<unsigned char>(q);
          else if (dtype_ == DType::uint16)
            store_as(dst + 2 * e, static_cast<std::uint16_t>(q));
          else
            store_as(dst + 4 * e, q);
        }
        return;
      }
      default:
        break;
    }
    const auto wf = static_cast<float>(w);
    for (std::size_t e = 0; e < n; ++e) f_[e] = f_[e] / wf;  // one IEEE division per element
    switch (dtype_) {
      case DType::float32:
        std::memcpy(dst, f_.data(), n * 4);
        return;
      case DType::bfloat16:
      case DType::float16:
        c16_.resize(n);
        if (dtype_ == DType::bfloat16)
          formats::float32_to_bfloat16(f_.data(), c16_.data(), n);
        else
          formats::float32_to_float16(f_.data(), c16_.data(), n);
        std::memcpy(dst, c16_.data(), n * 2);
        return;
      case DType::hifloat8:  // round half away from zero; infinities and NaN kept
        for (std::size_t e = 0; e < n; ++e) dst[e] = formats::encode_hifloat8(f_[e], false);
        return;
      case DType::float8_e5m2:
        for (std::size_t e = 0; e < n; ++e) dst[e] = formats::encode_float8_e5m2(f_[e]);
        return;
      default:
        for (std::size_t e = 0; e < n; ++e) dst[e] = formats::encode_float8_e4m3fn(f_[e]);
        return;
    }
  }

 private:
  DType dtype_ = DType::float32;
  std::size_t n_ = 0;
  std::vector<float> f_, tmp_;
  std::vector<std::uint32_t> u_;
  std::vector<std::uint16_t> c16_;
};

}  // namespace

// Every Rope mean row of batch b on one side. The batch's tokens are read in order (a token's
// heads are adjacent in the source) and each head whose window holds the token accumulates it,
// so every head keeps its own token-order sum.
void batch_mean_rows(const CompressJob& job, const CompressSide& s, std::int64_t b) {
  thread_local std::vector<MeanAcc> accs;
  const std::int64_t nh = job.num_heads;
  const CompressRun* runs = job.all_runs + b * nh;
  if (static_cast<std::int64_t>(accs.size()) < nh) accs.resize(static_cast<std::size_t>(nh));
  std::int64_t lo = -1, hi = -1;
  for (std::int64_t h = 0; h < nh; ++h) {
    const CompressRun& r = runs[h];
    if (r.rows == 0 || r.window == 0) continue;
    accs[static_cast<std::size_t>(h)].reset(s.dtype, s.head_size);
    lo = lo < 0 ? r.offset : std::min(lo, r.offset);
    hi = std::max(hi, r.offset + r.window);
  }
  if (lo < 0) return;
  const unsigned char* src0 =
      s.src + (job.packed ? job.batch_first[b] * s.src_token : b * s.src_batch);
  for (std::int64_t pos = lo; pos < hi; ++pos) {
    for (std::int64_t h = 0; h < nh; ++h) {
      const CompressRun& r = runs[h];
      if (r.rows == 0 || pos < r.offset || pos >= r.offset + r.window) continue;
      accs[static_cast<std::size_t>(h)].add(src0 + pos * s.src_token + h * s.src_head);
    }
  }
  for (std::int64_t h = 0; h < nh; ++h) {
    const CompressRun& r = runs[h];
    if (r.rows == 0 || r.window == 0) continue;
    accs[static_cast<std::size_t>(h)].store(
        r.window, job.split.address(s.dst, s.block_stride, s.row_bytes, r.start + r.offset));
  }
}

void rope_mean_row(DType dtype, const unsigned char* src, std::int64_t stride, std::int64_t w,
                   std::int64_t n, unsigned char* dst) {
  thread_local MeanAcc acc;
  acc.reset(dtype, n);
  for (std::int64_t k = 0; k < w; ++k) acc.add(src + k * stride);
  acc.store(w, dst);
}

}  // namespace kvscatter::detail::scatter
#endif  // HWY_ONCE
