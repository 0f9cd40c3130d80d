// The PagedKvWrite SIMD kernel, compiled once per target: byte copies for the
// copy format, and division by the scale plus saturating fp8 encoding for the
// fp8 formats. No threads here.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/paged_kv_write/kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/bytes-inl.h"
#include "formats/fp8-inl.h"
#include "formats/fp8_table-inl.h"
#include "kvscatter/formats.h"
#include "ops/paged_kv_write/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::paged_kv_write::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using detail::HWY_NAMESPACE::CopyBytes;
using detail::HWY_NAMESPACE::StreamBytes;

using formats::HWY_NAMESPACE::BF16Shortcut;
using formats::HWY_NAMESPACE::Fp8F16Bytes;
using formats::HWY_NAMESPACE::Fp8Table;
using formats::HWY_NAMESPACE::MakeBF16Shortcut;
using formats::HWY_NAMESPACE::MakeFp8F16Bytes;
using formats::HWY_NAMESPACE::MakeFp8Table;
using formats::HWY_NAMESPACE::QuantizeBF16HeadRuns;
using formats::HWY_NAMESPACE::QuantizeBF16Row;
using formats::HWY_NAMESPACE::QuantizeBF16RowByTable;
using formats::HWY_NAMESPACE::QuantizeBF16Runs;
using formats::HWY_NAMESPACE::QuantizeRun;
using formats::HWY_NAMESPACE::QuantizeRuns;

// Whether side s reads 16-bit values of `dtype` at even addresses and steps: the inputs of the
// bfloat16 shortcut and of the float16 byte tables.
bool Aligned16(const Job& job, const Side& s, DType dtype) {
  return job.dtype == dtype && reinterpret_cast<std::uintptr_t>(s.src) % 2 == 0 &&
         s.src_token % 2 == 0 && s.src_head % 2 == 0;
}
bool AlignedBF16(const Job& job, const Side& s) { return Aligned16(job, s, DType::bfloat16); }

// Values per run of side s on the QuantizeBF16HeadRuns path (aligned bfloat16 heads of whole
// groups), 0 when the side does not take it: heads apart, or per-head scales that differ. A
// token whose heads are one run with one scale keeps its one call per token (QuantizeToken),
// which measured faster once its rows come from memory.
std::int64_t HeadRunLength(const Job& job, const Side& s) {
  if (!AlignedBF16(job, s) || (s.merged && job.uniform_scale)) return 0;
  return job.head_size % static_cast<std::int64_t>(formats::HWY_NAMESPACE::BF16GroupSize()) == 0
             ? job.head_size
             : 0;
}

// The bfloat16 shortcut's setup for one side, computed once per chunk: one entry for one scale,
// one per head for per-head scales that differ; empty when the side takes
// QuantizeRun / QuantizeRuns (other dtypes, odd addresses or head sizes).
template <bool kE4M3>
std::vector<BF16Shortcut> SideShortcuts(const Job& job, const Side& s) {
  std::vector<BF16Shortcut> out;
  if (!AlignedBF16(job, s)) return out;
  if ((s.merged || HeadRunLength(job, s) > 0) && job.uniform_scale) {
    out.push_back(MakeBF16Shortcut<kE4M3>(s.scales[0]));
  } else if (job.head_size % static_cast<std::int64_t>(4 * hn::Lanes(hn::ScalableTag<float>())) ==
             0) {
    for (std::int64_t h = 0; h < job.num_heads; ++h) {
      out.push_back(MakeBF16Shortcut<kE4M3>(s.scales[h]));
    }
  }
  return out;
}


// The code tables of a side's shortcuts (one per shortcut), or none when the chunk is too
// short for them to pay off.
template <bool kE4M3>
std::vector<Fp8Table> SideTables(const Job& job, const std::vector<BF16Shortcut>& sc,
                                 std::int64_t tokens) {
  std::vector<Fp8Table> out;
  if (sc.empty() || !formats::HWY_NAMESPACE::kHaveFp8Table) return out;
  const std::int64_t per_scale =
      tokens * job.head_size * (sc.size() == 1 ? job.num_heads : std::int64_t{1});
  if (per_scale < formats::HWY_NAMESPACE::kFp8TableMinValues) return out;
  for (const BF16Shortcut& s : sc) out.push_back(MakeFp8Table<kE4M3>(s.scale));
  return out;
}

// The byte tables of a float16 side (MakeFp8F16Bytes, every target but the scalar one), one for
// one scale, one per head for per-head scales that differ, when the chunk is long enough to pay
// for them, the side's runs are aligned whole groups of 32 and every table is usable; empty
// otherwise (QuantizeRun / QuantizeRuns).
template <bool kE4M3>
std::vector<Fp8F16Bytes> SideF16Tables(const Job& job, const Side& s, std::int64_t tokens) {
  std::vector<Fp8F16Bytes> out;
#if KVS_FP8_F16_BYTES
  const bool one = s.merged && job.uniform_scale;
  const std::int64_t run = one ? job.head_size * job.num_heads : job.head_size;
  if (!Aligned16(job, s, DType::float16) || run % 32 != 0 ||
      tokens * run < formats::HWY_NAMESPACE::kFp8TableMinValues) {
    return out;
  }
  const std::int64_t count = one || job.uniform_scale ? 1 : job.num_heads;
  for (std::int64_t h = 0; h < count; ++h) {
    out.push_back(MakeFp8F16Bytes<kE4M3>(s.scales[h]));
    if (!out.back().usable) return {};
  }
#else
  (void)job, (void)s, (void)tokens;
#endif
  return out;
}

// One token's float16 rows of side s by the byte tables f16 (SideF16Tables, not empty).
template <bool kE4M3>
HWY_INLINE void QuantizeF16Token(const Job& job, const Side& s, const std::vector<Fp8F16Bytes>& f16,
                                 const unsigned char* src, unsigned char* row) {
#if KVS_FP8_F16_BYTES
  const auto* x = reinterpret_cast<const std::uint16_t*>(src);
  const auto d = static_cast<std::size_t>(job.head_size);
  const auto runs = [&](std::int64_t h, std::int64_t count, std::size_t n, std::size_t k) {
    formats::HWY_NAMESPACE::QuantizeF16RunsBytes<kE4M3>(x + h * (s.src_head / 2), s.src_head / 2, n,
                                                        count, f16[k], s.scales[h],
                                                        row + h * s.head_stride, s.head_stride);
  };
  if (s.merged && job.uniform_scale) {
    runs(0, 1, d * static_cast<std::size_t>(job.num_heads), 0);
  } else if (f16.size() == 1) {
    runs(0, job.num_heads, d, 0);
  } else {
    for (std::int64_t h = 0; h < job.num_heads; ++h) runs(h, 1, d, static_cast<std::size_t>(h));
  }
#else
  (void)job, (void)s, (void)f16, (void)src, (void)row;
#endif
}

template <bool kE4M3>
HWY_INLINE void QuantizeToken(const Job& job, const Side& s, const std::vector<BF16Shortcut>& sc,
                              const std::vector<Fp8Table>& tables,
                              const std::vector<Fp8F16Bytes>& f16, std::int64_t t,
                              unsigned char* row) {
  const unsigned char* src = s.src + t * s.src_token;
  const auto d = static_cast<std::size_t>(job.head_size);
  const auto heads = static_cast<std::size_t>(job.num_heads);
  const auto* x = reinterpret_cast<const std::uint16_t*>(src);
  if (!f16.empty()) {
    QuantizeF16Token<kE4M3>(job, s, f16, src, row);
    return;
  }
  if (s.merged && job.uniform_scale) {
    if (!tables.empty() && tables[0].usable) {
      QuantizeBF16RowByTable<kE4M3>(x, d * heads, tables[0], sc[0], row);
    } else if (!sc.empty()) {
      QuantizeBF16Row<kE4M3>(x, d * heads, sc[0], row);
    } else {
      QuantizeRun<kE4M3>(job.dtype, src, d * heads, s.scales[0], row);
    }
    return;
  }
  if (!tables.empty()) {
    for (std::int64_t h = 0; h < job.num_heads; ++h) {
      const auto k = static_cast<std::size_t>(h);
      if (tables[k].usable) {
        QuantizeBF16RowByTable<kE4M3>(x + h * (s.src_head / 2), d, tables[k], sc[k],
                                      row + h * s.head_stride);
      } else {
        QuantizeBF16Row<kE4M3>(x + h * (s.src_head / 2), d, sc[k], row + h * s.head_stride);
      }
    }
    return;
  }
  if (!sc.empty()) {
    QuantizeBF16Runs<kE4M3>(x, s.src_head / 2, d, job.num_heads, sc.data(), row, s.head_stride);
    return;
  }
  QuantizeRuns<kE4M3>(job.dtype, src, s.src_head, d, job.num_heads, s.scales, row, s.head_stride);
}

// Tokens per tile of the QuantizeBF16HeadRuns path: one call per tile and side (or per tile,
// side and head, for per-head scales that differ).
constexpr std::int64_t kTile = 16;

// Tokens [t0, t0 + count) of side s (count <= kTile) through QuantizeBF16HeadRuns; sc: one
// shortcut, or one per head; tables: theirs, or none.
template <bool kE4M3>
void QuantizeHeadTile(const Job& job, const Side& s, const std::vector<BF16Shortcut>& sc,
                      const std::vector<Fp8Table>& tables, std::int64_t t0, std::int64_t count) {
  unsigned char* rows[kTile];
  const auto d = static_cast<std::size_t>(job.head_size);
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t slot = job.slots[t0 + k];
    rows[k] = slot < 0 ? nullptr : job.split.address(s.dst, s.block_stride, s.slot_stride, slot);
  }
  const auto table = [&](std::size_t k) { return tables.empty() ? nullptr : &tables[k]; };
  const auto* x = reinterpret_cast<const std::uint16_t*>(s.src + t0 * s.src_token);
  if (sc.size() == 1) {
    QuantizeBF16HeadRuns<kE4M3>(x, s.src_token / 2, s.src_head / 2, d, job.num_heads, count, rows,
                                s.head_stride, sc[0], table(0));
    return;
  }
  for (std::int64_t h = 0; h < job.num_heads; ++h) {
    const auto k = static_cast<std::size_t>(h);
    QuantizeBF16HeadRuns<kE4M3>(x + h * (s.src_head / 2), s.src_token / 2, 0, d, 1, count, rows, 0,
                                sc[k], table(k));
    for (std::int64_t j = 0; j < count; ++j) {
      if (rows[j] != nullptr) rows[j] += s.head_stride;
    }
  }
}

template <bool kE4M3>
void QuantizeTokens(const Job& job, std::int64_t begin, std::int64_t end) {
  const std::vector<BF16Shortcut> sc[2] = {SideShortcuts<kE4M3>(job, job.side[0]),
                                           SideShortcuts<kE4M3>(job, job.side[1])};
  const std::vector<Fp8Table> tables[2] = {SideTables<kE4M3>(job, sc[0], end - begin),
                                           SideTables<kE4M3>(job, sc[1], end - begin)};
  const std::vector<Fp8F16Bytes> f16[2] = {SideF16Tables<kE4M3>(job, job.side[0], end - begin),
                                           SideF16Tables<kE4M3>(job, job.side[1], end - begin)};
  const bool tiles[2] = {HeadRunLength(job, job.side[0]) > 0, HeadRunLength(job, job.side[1]) > 0};
  if (!tiles[0] && !tiles[1]) {
    // Sides [first, last) of every token. HND rows go one side at a time, as the copies' cached
    // rows do (WriteTokenRange); merged NHD rows keep a token's sides together.
    const auto quantize = [&](int first, int last) {
      for (std::int64_t t = begin; t < end; ++t) {
        const std::int64_t slot = job.slots[t];
        if (slot < 0) continue;
        for (int k = first; k < last; ++k) {
          const Side& s = job.side[k];
          QuantizeToken<kE4M3>(job, s, sc[k], tables[k], f16[k], t,
                               job.split.address(s.dst, s.block_stride, s.slot_stride, slot));
        }
      }
    };
    if (!(job.side[0].merged && job.side[1].merged)) {
      quantize(0, 1);
      quantize(1, 2);
    } else {
      quantize(0, 2);
    }
    return;
  }
  for (std::int64_t t0 = begin; t0 < end; t0 += kTile) {
    const std::int64_t count = end - t0 < kTile ? end - t0 : kTile;
    // Outputs that share memory are rejected before this runs: a tile is written side by side.
    for (int k = 0; k < 2; ++k) {
      const Side& s = job.side[k];
      if (tiles[k]) {
        QuantizeHeadTile<kE4M3>(job, s, sc[k], tables[k], t0, count);
        continue;
      }
      for (std::int64_t t = t0; t < t0 + count; ++t) {
        const std::int64_t slot = job.slots[t];
        if (slot < 0) continue;
        QuantizeToken<kE4M3>(job, s, sc[k], tables[k], f16[k], t,
                             job.split.address(s.dst, s.block_stride, s.slot_stride, slot));
      }
    }
  }
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
  if (job.format == KvCacheFormat::fp8_e4m3) return QuantizeTokens<true>(job, begin, end);
  if (job.format == KvCacheFormat::fp8_e5m2) return QuantizeTokens<false>(job, begin, end);
  // Sides [first, last) of every token. Cached HND rows go one side at a time, so that the two
  // caches' rows do not compete for the same L1 sets (docs/architecture.md, "One cache at a
  // time"); streamed rows and merged NHD rows keep a token's sides together.
  const auto copy = [&](const Side* first, const Side* last) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t slot = job.slots[t];
      if (slot < 0) continue;
      for (const Side* s = first; s != last; ++s) {
        CopyToken(job, *s, t, job.split.address(s->dst, s->block_stride, s->slot_stride, slot));
      }
    }
  };
  if (job.stream || (job.side[0].merged && job.side[1].merged)) {
    copy(job.side, job.side + 2);
  } else {
    copy(job.side, job.side + 1);
    copy(job.side + 1, job.side + 2);
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
