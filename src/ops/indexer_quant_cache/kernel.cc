// The IndexerQuantCache kernel: Highway SIMD with runtime dispatch, rows written straight into
// the cache in token order; the driver (execute.cc) splits rows over threads.
//
// - bfloat16 rows into a float8_e4m3fn cache in the power-of-two modes (fp8 with round_scale,
//   mxfp8) take 16-bit lane work over the bf16 bits (src/quant/quant_simd-inl.h), a batch of
//   rows at a time: the magnitudes of eight groups (fp8: whole rows) reduced together, their
//   scales as one vector (mxfp8: from the magnitudes' bits alone, no float multiply), then each
//   row's codes by integer subtraction of its scale's exponent.
//   One row at a time, the reduction and the scale rule are a dependency chain several times
//   longer than the row's arithmetic; a batch's rows overlap theirs. With AVX-512 and d = 128,
//   mxfp8's scales come from one key byte per value instead (E4M3RowKeys16), four rows at a
//   time, with each group's normal test. Batches are filled run by run, a vector at a time: a
//   prefill's consecutive slots compared alone.
// - The lanes of a group whose quotients fall below e4m3's normal range (where the lane form is
//   not exact) are redone by the scalar rules over a lane form exact for zeros. Rows whose
//   minimum magnitude shows none (fp8: the row's own; mxfp8: one for each set of eight groups)
//   take a cheaper form without the sign mask, which only zeros and those lanes need; other
//   mxfp8 rows learn whether they hold any from the quantizing pass itself. With AVX-512 and
//   d = 128 every mxfp8 row takes the cheaper form, and a group whose own smallest key shows
//   such lanes has them (and its zeros) redone right after its row. Groups (or fp8 rows) with a
//   non-finite element and every other combination of mode and dtype take the general path: the row
//   widened to float32, the scalar scale rules of internal.h and the batch encoders shared with
//   kv_compress_epilog, bit-identical to the reference. float16 rows in the modes whose codes and
//   scales survive rounding to bfloat16 by round-to-odd are rounded so, 16 KiB of rows at a time,
//   and take the bfloat16 paths (f16_rows_as_bf16). In the e4m3 modes (but for mxfp8 rows of more
//   than eight groups) only their largest and smallest magnitudes are rounded, and the groups that
//   pass the tests are coded straight from the float16 bits (f16_magnitudes_as_bf16; with AVX-512
//   and d = 128 mxfp8 keys them on their own bits, E4M3RowKeys16's kF16); mxfp4 (d = 128: AVX2
//   and AVX-512) and hifloat8 (AVX2, SSE4, AVX-512) take float16 rows in their own forms
//   (f16_in_kernels).
// - bfloat16 rows in mode mxfp4 are batched the same way; each code comes from the bf16 bits
//   less the scale's exponent by a 16-entry byte table (FP4Pow2Codes), or on AVX-512 a 32-entry
//   word table (FP4Pow2CodesWide); on AVX-512 with d = 128 the groups' largest exponents are
//   reduced as bytes, four rows at a time (FP4RowExponents16), and where the CPU has VBMI and
//   GFNI the codes' table indices come out by multishifts and the codes in the sums' high bytes,
//   which byte permutes gather and an affine transform signs (QuantizeFP4Pow2Row128High).
//   AVX2 reduces the exponents as bytes the same way and looks the codes up one byte per value,
//   32 to a vector (FP4BytePairs). Groups of zeros, with a non-finite element, or with a scale
//   below 2^-123 take the scalar rules. On AVX2 and in the VBMI form the codes pass prefetches
//   the next batch's rows (Batch::ahead).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/indexer_quant_cache/kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/slots.h"
#include "core/vbmi.h"
#include "formats/f16-inl.h"
#include "kvscatter/formats.h"
#include "ops/indexer_quant_cache/kernel.h"
#include "ops/kv_compress_epilog/kernel.h"  // the shared float8 / HiFloat8 batch encoders
#include "quant/hifloat8_table.h"
#include "quant/quant_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::indexer {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr std::int64_t kMaxD = 8192, kMaxGroups = kMaxD / 32;

// Per-chunk work space of one row: the float32 rows of the general path on the heap (d
// floats each), the per-group arrays on the stack.
struct Scratch {
  float* x = nullptr;
  float* y = nullptr;
  HWY_ALIGN std::uint16_t keys[kMaxD];  // hifloat8 table keys of a row
  HWY_ALIGN std::uint16_t bf16[kMaxD];  // a float16 row rounded to bfloat16 (f16_row_as_bf16)
  HWY_ALIGN std::uint16_t amax[kMaxGroups + 8], min1[kMaxGroups + 8];
  HWY_ALIGN std::uint32_t exp[kMaxGroups + 8], subw[kMaxGroups + 8];
  std::uint8_t fast[kMaxGroups + 8];
  std::uint8_t scale[kMaxGroups * 4];
};

// ---- General path: float32 rows and the scalar rules ---------------------------------------

void scale_by(const float* x, float mul, float* y, std::int64_t n) {
  for (std::int64_t k = 0; k < n; ++k) y[k] = x[k] * mul;
}

// FP8 codes of y (|y| within the format unless the input was not finite).
void encode_fp8(DType cache, const float* y, std::uint8_t* out, std::int64_t n) {
  if (cache == DType::float8_e4m3fn) {
    simd_encode_e4m3_clamped(y, out, static_cast<std::size_t>(n), false);
    return;
  }
  for (std::int64_t k = 0; k < n; ++k) out[k] = formats::encode_float8_e5m2(y[k]);
}

void widen(const IndexerQuantCachePlan& p, const std::uint16_t* src, std::int64_t n, float* out) {
  if (p.x.dtype == DType::float16) {
    formats::float16_to_float32(src, out, static_cast<std::size_t>(n));
  } else {
    formats::bfloat16_to_float32(src, out, static_cast<std::size_t>(n));
  }
}

void fp8_row(const IndexerQuantCachePlan& p, Scratch& s, std::uint8_t* codes, std::uint8_t* scale) {
  const float* x = s.x;
  float* y = s.y;
  const float amax = finite_amax(x, p.d);
  const float sc = amax == 0.0f ? 0.0f : amax * fp8_coefficient(p.cache.dtype);
  float stored = sc;
  if (p.options.round_scale) {
    const std::uint32_t e = exponent_rounded_up(sc);
    stored = f32(e << 23);
    scale_by(x, pow2_from(e), y, p.d);
  } else if (sc == 0.0f) {
    std::copy(x, x + p.d, y);
  } else {
    const float inv = 1.0f / sc;
    for (std::int64_t k = 0; k < p.d; ++k) {
      const float v = x[k] * inv;
      y[k] = std::isfinite(v) ? v : x[k];
    }
  }
  encode_fp8(p.cache.dtype, y, codes, p.d);
  std::memcpy(scale, &stored, 4);
}

// One mxfp8 group of 32 widened elements at x.
void mxfp8_group(DType cache, const float* x, float* y, std::uint8_t* codes, std::uint8_t* scale) {
  const float eps = f32(kEpsBits), c = fp8_coefficient(cache);
  const std::uint32_t e = exponent_rounded_up(std::max(group_amax(x, 32), eps) * c);
  *scale = static_cast<std::uint8_t>(e);
  scale_by(x, pow2_from(e), y, 32);
  encode_fp8(cache, y, codes, 32);
}

// One mxfp4 group of 32 widened elements at x: 16 code bytes, one scale byte.
void mxfp4_group(bool e2m1, const float* x, std::uint8_t* codes, std::uint8_t* scale) {
  const std::uint32_t emax = e2m1 ? 2 : 0;
  std::uint8_t nib[32];
  std::uint32_t m = 0;
  for (int k = 0; k < 32; ++k) m = std::max(m, (bits(x[k]) >> 23) & 0xFFu);
  const std::uint32_t sg = m == 0 ? 0 : std::max(m, emax) - emax;
  *scale = static_cast<std::uint8_t>(sg);
  const float mul = pow2_from(sg);
  for (int k = 0; k < 32; ++k) {
    const float y = x[k] * mul;
    nib[k] = m == 0 ? (std::signbit(x[k]) ? 0x8 : 0x0)
             : e2m1 ? formats::encode_float4_e2m1(y)
                    : formats::encode_float4_e1m2(y);
  }
  for (int j = 0; j < 16; ++j) {
    codes[j] = static_cast<std::uint8_t>(nib[2 * j] | nib[2 * j + 1] << 4);
  }
}

void mxfp4_row(const IndexerQuantCachePlan& p, Scratch& s, std::uint8_t* codes,
               std::uint8_t* scale) {
  const bool e2m1 = p.cache.dtype == DType::float4_e2m1;
  for (std::int64_t g = 0; g < p.d / 32; ++g)
    mxfp4_group(e2m1, &s.x[32 * g], codes + 16 * g, scale + g);
}

void general_row(const IndexerQuantCachePlan& p, Scratch& s, const std::uint16_t* src,
                 std::uint8_t* codes) {
  widen(p, src, p.d, s.x);
  switch (p.options.quant_mode) {
    case IndexerQuantMode::fp8:
      fp8_row(p, s, codes, s.scale);
      break;
    case IndexerQuantMode::mxfp8:
      for (std::int64_t g = 0; g < p.d / 32; ++g) {
        mxfp8_group(p.cache.dtype, s.x + 32 * g, s.y + 32 * g, codes + 32 * g, s.scale + g);
      }
      break;
    case IndexerQuantMode::hifloat8:
      scale_by(s.x, p.options.x_scale, s.y, p.d);
      simd_encode_hifloat8_sat(s.y, codes, static_cast<std::size_t>(p.d));
      break;
    case IndexerQuantMode::mxfp4:
      mxfp4_row(p, s, codes, s.scale);
      break;
  }
}

// The row addresses of a call, read once from the plan: the byte stores of the kernels may
// alias anything, so plan fields read inside the loops would be reloaded on every row.
struct RowAddresses {
  explicit RowAddresses(const IndexerQuantCachePlan& p)
      : split(p.block_size),  // row_at's addresses, the slot split by a shift where it can be
        c0(p.cache.stride(0) * static_cast<std::int64_t>(p.cache.element_size())),
        c1(p.cache.stride(1) * static_cast<std::int64_t>(p.cache.element_size())),
        s0(p.cache_scale.stride(0) * static_cast<std::int64_t>(p.cache_scale.element_size())),
        s1(p.cache_scale.stride(1) * static_cast<std::int64_t>(p.cache_scale.element_size())),
        x0(p.x.stride(0)),
        cache(static_cast<std::uint8_t*>(p.cache.data)),
        cache_scale(static_cast<std::uint8_t*>(p.cache_scale.data)),
        x(static_cast<const std::uint16_t*>(p.x.data)),
        xv(&p.x),
        rank2(p.x.rank == 2) {}
  const std::uint16_t* src(std::int64_t r) const {
    return x + (rank2 ? r * x0 : x_row(*xv, r));  // rank 2: no division per row
  }
  std::uint8_t* codes(std::int64_t slot) const { return split.address(cache, c0, c1, slot); }
  std::uint8_t* scale(std::int64_t slot) const { return split.address(cache_scale, s0, s1, slot); }

  SlotSplitter split;
  std::int64_t c0, c1, s0, s1, x0;
  std::uint8_t *cache, *cache_scale;
  const std::uint16_t* x;
  const TensorView* xv;
  bool rank2;
};

// Calls row(src, codes, scale) for the written rows of [begin, end) in token order. A slot that
// follows the previous row's in the same block (a prefill's run) has its rows one pitch further
// on: no block split, no multiplies. The addressing lives in locals (the row's stores could alias
// the plan's fields, which would then be reloaded on every row), and rank-2 inputs (the usual
// ones) step a pointer instead of splitting the row index.
template <bool kRank2, class Row>
HWY_INLINE void ForEachRowOf(const RowAddresses& a, const std::int64_t* slots, std::int64_t begin,
                             std::int64_t end, Row& row) {
  const std::int64_t block_size = a.split.block_size(), c1 = a.c1, s1 = a.s1, x0 = a.x0;
  std::int64_t next = -1, left = 0;
  std::uint8_t *codes = nullptr, *scale = nullptr;
  const std::uint16_t* src = kRank2 ? a.x + begin * x0 : a.x;
  for (std::int64_t r = begin; r < end; ++r, src += kRank2 ? x0 : 0) {
    const std::int64_t slot = slots[r];
    if (slot < 0) continue;
    if (slot == next && left > 0) {
      codes += c1;
      scale += s1;
      --left;
    } else {
      codes = a.codes(slot);
      scale = a.scale(slot);
      left = block_size - 1 - a.split.offset(slot);
    }
    next = slot + 1;
    row(kRank2 ? src : a.src(r), codes, scale);
  }
}

template <class Row>
HWY_INLINE void ForEachRow(const RowAddresses& a, const std::int64_t* slots, std::int64_t begin,
                           std::int64_t end, Row& row) {
  if (a.rank2) {
    ForEachRowOf<true>(a, slots, begin, end, row);
  } else {
    ForEachRowOf<false>(a, slots, begin, end, row);
  }
}

// ---- Fast path: bfloat16 into float8_e4m3fn with power-of-two scales ------------------------

#if HWY_TARGET != HWY_SCALAR
namespace qn = quant::HWY_NAMESPACE;

bool fast_e4m3(const IndexerQuantCachePlan& p) {
  return p.x.dtype == DType::bfloat16 && p.cache.dtype == DType::float8_e4m3fn &&
         (p.options.quant_mode == IndexerQuantMode::mxfp8 ||
          (p.options.quant_mode == IndexerQuantMode::fp8 && p.options.round_scale));
}

// Rows quantized together, in token order (the order they are written in, so a repeated slot
// still ends with its last writer). Their addresses are kept as integers, so that a run of rows
// one pitch apart fills them a vector at a time (RunFill), with room for a vector past the last.
constexpr int kMaxBatch = 256;
struct Batch {
  static constexpr int kRoom = kMaxBatch + HWY_MAX_BYTES / 8;
  static_assert(sizeof(std::uintptr_t) == sizeof(std::uint64_t), "64-bit addresses");
  std::uint64_t src_at[kRoom], codes_at[kRoom], scale_at[kRoom];
  int n = 0;
  // Where the next batch's rows most likely are: the rows of the tokens after this batch's
  // (rank-2 x, one pitch apart), else this batch's first row (pitch 0). The mxfp4 kernel's
  // byte form (AVX2) and its VBMI form (AVX-512) prefetch them while they code this
  // batch from L1 (prefetch_ahead), so that the next batch's first pass, which reads each of
  // its rows, finds them near. On SSE4, whose codes take three times as long, it gained nothing
  // and cost 1 %; the fp8 and mxfp8 kernels gained nothing or lost (AVX2, AVX-512).
  std::uint64_t ahead = 0;
  std::int64_t ahead_pitch = 0;
  // Row k of those, row_bytes of it. Past x's end a prefetch fetches nothing.
  void prefetch_ahead(int k, std::int64_t row_bytes) const {
    const auto* row = reinterpret_cast<const char*>(ahead + k * ahead_pitch);
    for (std::int64_t c = 0; c < row_bytes; c += 64) __builtin_prefetch(row + c, 0, 2);
  }
  const std::uint16_t* src(int k) const {
    return reinterpret_cast<const std::uint16_t*>(src_at[k]);
  }
  std::uint8_t* codes(int k) const { return reinterpret_cast<std::uint8_t*>(codes_at[k]); }
  std::uint8_t* scale(int k) const { return reinterpret_cast<std::uint8_t*>(scale_at[k]); }
  // Rows k to k + 3 for the four-row reductions, the last row again past the batch's end.
  void four_rows(int k, const std::uint16_t** rows) const {
    for (int j = 0; j < 4; ++j) rows[j] = src(std::min(k + j, n - 1));
  }
};

// The 32-value groups of a batch's rows, in row order, padded to a multiple of eight with the
// last one (the reductions work in eights; results past the rows land in unused entries).
// Returns how many are the rows' own.
inline int batch_groups(const Batch& b, std::int64_t groups, const std::uint16_t** units) {
  int n = 0;
  for (int k = 0; k < b.n; ++k) {
    for (std::int64_t g = 0; g < groups; ++g) units[n++] = b.src(k) + 32 * g;
  }
  const int used = n;
  for (; n % 8 != 0; ++n) units[n] = units[n - 1];
  return used;
}

// Rows per batch: 64 fp8 rows or 256 mxfp8 / mxfp4 32-groups (16 KiB of bfloat16 input), in
// sets of eight that each share one reduction of their magnitudes and one vector of scale rules,
// so the rows' dependency chains overlap instead of queueing (with one set of eight mxfp8 groups,
// the chain from the loads to the scales outlasted the batch's work; eight sets beat four, four
// two). Larger batches also spread each batch's setup over more rows: 64 fp8 rows measured
// 15-20 % faster than 16, 128 mxfp8 groups about 10 % faster than 64 at 1,024 tokens, and 256
// groups 1.03-1.05 x faster than 128 for mxfp8 and mxfp4 on AVX-512 (AMD Zen 5; level on AVX2
// and SSE4), 512 slower again.
int batch_rows(const IndexerQuantCachePlan& p) {
  const std::int64_t groups = p.d / 32;
  if (p.options.quant_mode == IndexerQuantMode::fp8) return 64;
  return groups <= 8 ? static_cast<int>(kMaxBatch / groups) : 1;
}

// The e4m3fn code of the bf16 value `bits` times mul (a power of two) where the product q lies
// below e4m3's normal range (|q| < 2^-6): the encoder's rounding (docs/formats.md,
// "float8_e4m3fn") gives |q| / 2^-9 rounded to nearest even, a subnormal code 0-7 or 8 (0x08,
// 2^-6 itself), and the sign of the value. Float32 adds 2^14, whose ulp is 2^-9, with that same
// rounding, and keeps the multiple in the low mantissa bits. The product is exact unless q is
// far below 2^-10, and every q up to 2^-10 codes as 0 either way, so this equals the encoder for
// every such lane (the tests take every magnitude of the five binades below the normal range at
// every scale exponent, and every one below it at eight, through the kernels), in a few
// operations instead of the encoder's general branches.
inline std::uint8_t e4m3_code_below_normal(std::uint16_t bits, float mul) {
  const float q = f32(std::uint32_t{bits & 0x7FFFu} << 16) * mul;
  const std::uint32_t y = std::bit_cast<std::uint32_t>(q + 16384.0f);
  return static_cast<std::uint8_t>((y & 0xFu) | ((bits >> 8) & 0x80u));
}

// The lanes of a group with a finite amax whose quotients fall below e4m3's normal range
// (where the lane form is not exact), rewritten over the lane form's codes; kZeros: zeros too
// (over the unmasked form, which codes a negative zero wrong).
// threshold: E4M3NormalThreshold of the group; e: its scale's biased exponent.
template <bool kZeros = false>
void fix_lanes_below_normal(const std::uint16_t* src, std::uint8_t* codes, std::int64_t n,
                            std::uint32_t threshold, std::uint32_t e) {
  const float mul = pow2_from(e);
  qn::ForE4M3LanesBelowNormal<kZeros>(
      src, n, threshold, [&](std::int64_t i) { codes[i] = e4m3_code_below_normal(src[i], mul); });
}

constexpr std::uint16_t kInfBits = 0x7F80;  // bf16 magnitudes at or above it are not finite

// The e4m3 codes' last step by the vector multiplier (quant/quant_simd-inl.h, HighByte): the
// fp8 and mxfp8 rows measured 1.02-1.04 x faster on AVX2 and 1.02-1.07 x on SSE4 (AMD Zen 2),
// once their sets that fail the normal test no longer took a branch per row. AVX-512 with VBMI
// takes the byte permute instead (fast_batches); the rare rows' paths keep this one.
constexpr qn::HighByte kHigh = qn::HighByte::kMultiply;

// The smallest scale exponent (biased) whose lane operand sub - 7 is not below zero (below it,
// the operand saturates at 0): sub = (e - 127) * 128 + 0x3C00 is at least 7 from e = 8 on.
constexpr std::uint8_t kMinLaneExp = 8;

// One fp8 row of fast_fp8_rows that the lane forms do not cover (see there), by the general
// path; out of line, so that the rows' loops keep their constants in registers.
HWY_NOINLINE void fp8_row_general(const IndexerQuantCachePlan& p, Scratch& s,
                                  const std::uint16_t* src, std::uint8_t* codes,
                                  std::uint8_t* scale) {
  general_row(p, s, src, codes);
  std::memcpy(scale, s.scale, 4);
}

// float16 rows in the modes of fast_e4m3 (mode fp8, or rows of at most eight groups) take the
// bfloat16 kernels' scale rules and tests on their magnitudes rounded to bfloat16 by round-to-odd
// (f16_as_bf16 says why that gives each group its scale), and where a group passes, codes
// straight from the float16 bits (E4M3Pow2CodesF16). The magnitudes are reduced on the float16
// bits: round-to-odd keeps their order, so the rounded rows' largest and smallest magnitudes are
// these rounded. The float16 codes also need every lane normal, so a smallest magnitude below
// 0x0400 (a zero or a subnormal) reads as min1 = 0, which fails every normal test. Infinities and
// NaNs read as bfloat16's infinity, not finite either way; a zero or subnormal largest magnitude
// (rare: a group of them) is rounded value by value. Every row with a group that does not pass is
// rounded to bfloat16 on its own (f16_row_as_bf16) and takes the bfloat16 forms, as
// f16_rows_as_bf16 would take it.
template <class D>
HWY_INLINE void f16_magnitudes_as_bf16_of(D d, std::uint16_t* HWY_RESTRICT amax,
                                          std::uint16_t* HWY_RESTRICT min1) {
  using formats::HWY_NAMESPACE::F16ToBF16OddNormalBits;
  using formats::HWY_NAMESPACE::F16ToBF16OddScalar;
  const auto set = [d](int v) HWY_ATTR { return hn::Set(d, static_cast<std::uint16_t>(v)); };
  const auto a = hn::LoadU(d, amax), m1 = hn::LoadU(d, min1);
  if (HWY_UNLIKELY(!hn::AllFalse(d, hn::Lt(a, set(0x0400))))) {
    for (std::size_t j = 0; j < hn::Lanes(d); ++j) {  // a zero or subnormal largest magnitude
      const auto m = static_cast<std::uint16_t>(min1[j] + 1);
      amax[j] = amax[j] > 0x7BFF ? 0x7F80 : F16ToBF16OddScalar(amax[j]);
      min1[j] = static_cast<std::uint16_t>(m > 0x03FF ? F16ToBF16OddScalar(m) - 1 : 0);
    }
    return;
  }
  hn::StoreU(hn::IfThenElse(hn::Gt(a, set(0x7BFF)), set(0x7F80), F16ToBF16OddNormalBits(d, a)), d,
             amax);
  const auto m = F16ToBF16OddNormalBits(d, hn::Add(m1, set(1)));
  hn::StoreU(hn::IfThenElseZero(hn::Gt(m1, set(0x03FE)), hn::Sub(m, set(1))), d, min1);
}

// n entries of each (a multiple of 8), all at once: one set at a time, the constants were set
// up again for every set (mxfp8 rows 1.14-1.16 x slower on AVX2).
void f16_magnitudes_as_bf16(std::uint16_t* HWY_RESTRICT amax, std::uint16_t* HWY_RESTRICT min1,
                            std::int64_t n) {
  const hn::ScalableTag<std::uint16_t> d;
  const hn::CappedTag<std::uint16_t, 8> d8;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + L <= n; i += L) f16_magnitudes_as_bf16_of(d, amax + i, min1 + i);
  for (; i < n; i += static_cast<std::int64_t>(hn::Lanes(d8))) {
    f16_magnitudes_as_bf16_of(d8, amax + i, min1 + i);
  }
}

// A float16 row of d values rounded to bfloat16 by round-to-odd, in s.bf16. Out of line: the
// rows that need it are few, and inlined with a row length known at compile time the rounding's
// scalar tail drew a false warning from GCC for Arm (an iteration past the end of memory).
HWY_NOINLINE const std::uint16_t* f16_row_as_bf16(Scratch& s, const std::uint16_t* src,
                                                  std::int64_t d) {
  formats::HWY_NAMESPACE::F16ToBF16Odd(src, s.bf16, static_cast<std::size_t>(d));
  return s.bf16;
}

// Mode fp8 with round_scale: each row is one group; a zero floor (this mode has no 1e-4 one)
// keeps an all-zero row's scale 0. A row with a non-finite element, or (nonzero) one so small
// that its scale is below 2^-119 (where the lane operand would wrap), takes the general path.
// A set of eight rows that all pass the normal test (the usual case) runs a loop of the
// unmasked form alone, which keeps the per-row bookkeeping in registers. In any other set
// (in the bench's normally distributed rows of 128 values about one in sixty-four holds a lane
// below e4m3's normal range, so about one set in nine) each row takes the checked form, which
// finds such lanes itself, and only a row where it saw one is scanned again; where each row
// has its own smallest magnitude, the rows that pass with it still take the unmasked form.
// Where vectors are 256 bits or less and registers sixteen (x86 below AVX-512) the set has one
// smallest magnitude, not one per row: eight more accumulators spilled there. Reducing a set
// that fails that stricter test again, one minimum per row, and sending its rows one way or the
// other by it cost more than taking all its rows through the checked form (which with the
// cheaper coding of the low lanes made the call 1.04-1.06 x faster on AVX2 and SSE4 at 1,024
// and 4,096 tokens on AMD Zen 2).
template <std::int64_t kD, bool kF16, qn::HighByte kH>
void fast_fp8_rows(const IndexerQuantCachePlan& p, Scratch& s, const Batch& b) {
#if HWY_ARCH_X86 && HWY_TARGET >= HWY_AVX2
  constexpr bool kSetMin = true;
#else
  constexpr bool kSetMin = false;
#endif
  const std::int64_t d = kD != 0 ? kD : p.d;
  const std::uint16_t* units[kMaxBatch];
  int n = 0;
  for (; n < b.n; ++n) units[n] = b.src(n);
  for (; n % 8 != 0; ++n) units[n] = units[n - 1];  // past the rows: results land in unused entries
  HWY_ALIGN std::uint16_t amax[kMaxBatch], min1[kMaxBatch];
  HWY_ALIGN std::uint32_t subw[kMaxBatch], s63w[kF16 ? kMaxBatch : 1];
  const std::uint32_t* ops = kF16 ? s63w : subw;  // the unmasked codes' operands
  HWY_ALIGN std::uint8_t exp[kMaxBatch], fast[kMaxBatch];
  bool all_fast[kMaxBatch / 8];
  // The magnitudes of all sets, then their scales (float16 rounds the magnitudes between).
  for (int c = 0; c < n; c += 8) qn::Magnitudes8Min<16, kSetMin>(units + c, d, amax + c, min1 + c);
  if constexpr (kF16) f16_magnitudes_as_bf16(amax, min1, n);
  for (int c = 0; c < n; c += 8) {
    all_fast[c / 8] = qn::E4M3Pow2ScalesByKey8<0>(amax + c, min1 + c, subw + c, exp + c, fast + c);
  }
  if constexpr (kF16) qn::E4M3F16Operands(exp, n, s63w);
  for (int c = 0; c < b.n; c += 8) {
    const int m = std::min(c + 8, b.n);
    const bool tight = all_fast[c / 8];  // finite, every lane e4m3-normal, exp >= 8
    const auto unmasked = [&](int k) HWY_ATTR {
      qn::QuantizeE4M3Pow2RowUnmasked<false, kH, kF16>(units[k], b.codes(k), d, ops + k);
      const float stored = f32(std::uint32_t{exp[k]} << 23);
      std::memcpy(b.scale(k), &stored, 4);
    };
    // The checked form is exact for zeros too, all that an all-zero row (scale 0) needs.
    const auto checked = [&](int k) HWY_ATTR {
      const std::uint16_t* src = kF16 ? f16_row_as_bf16(s, units[k], p.d) : units[k];
      if (qn::QuantizeE4M3Pow2RowChecked<false, kH>(src, b.codes(k), d, subw + k) && amax[k] != 0) {
        fix_lanes_below_normal(src, b.codes(k), d, qn::E4M3NormalThreshold(subw[k]), exp[k]);
      }
      const float stored = f32(std::uint32_t{exp[k]} << 23);
      std::memcpy(b.scale(k), &stored, 4);
    };
    if (!tight) {
      for (int k = c; k < m; ++k) {
        if (HWY_UNLIKELY(amax[k] >= kInfBits || (exp[k] < kMinLaneExp && amax[k] != 0))) {
          fp8_row_general(p, s, units[k], b.codes(k), b.scale(k));
        } else if (!kSetMin && fast[k] != 0) {  // every lane e4m3-normal, and exp >= 8
          unmasked(k);
        } else {
          checked(k);
        }
      }
      continue;
    }
    for (int k = c; k < m; ++k) unmasked(k);
  }
}

// One mxfp8 group of 32 bfloat16 values by the general path (widened to float32).
void mxfp8_group_bf16(Scratch& s, const std::uint16_t* src, std::uint8_t* codes,
                      std::uint8_t* scale) {
  formats::bfloat16_to_float32(src, s.x, 32);
  mxfp8_group(DType::float8_e4m3fn, s.x, s.y, codes, scale);
}

// One mxfp8 group that a lane form may have coded wrong, rewritten by the scalar rules: a finite
// group's lanes below e4m3's normal range (kZeros: zeros too, see fix_lanes_below_normal), any
// other group whole by the general path. subw, exp: the group's lane-form operand and scale.
template <bool kZeros = false>
void redo_group(Scratch& s, const std::uint16_t* src, std::uint8_t* codes, std::uint8_t* scale,
                bool finite, std::uint32_t subw, std::uint32_t exp) {
  if (finite) {
    fix_lanes_below_normal<kZeros>(src, codes, 32, qn::E4M3NormalThreshold(subw), exp);
  } else {
    mxfp8_group_bf16(s, src, codes, scale);
  }
}

// The groups of one mxfp8 row that the checked form may not cover exactly: their lanes below
// e4m3's normal range, or (a non-finite element) the whole group, rewritten from the scalar
// rules over the checked form's output.
void redo_groups(Scratch& s, const std::uint16_t* src, const std::uint16_t* amax,
                 const std::uint32_t* subw, const std::uint8_t* exp, std::int64_t groups,
                 std::uint8_t* codes, std::uint8_t* scale) {
  for (std::int64_t g = 0; g < groups; ++g) {
    if (amax[g] == 0) continue;  // an all-zero group is right as it is
    redo_group(s, src + 32 * g, codes + 32 * g, scale + g, amax[g] < kInfBits, subw[g], exp[g]);
  }
}

// One row of fast_mxfp8_rows (the arrays at its first group) whose groups did not all pass the
// normal test: the unmasked form where they did after all (fast: each group's result; null to
// skip that test), else the checked form and the groups it may have left wrong redone.
void mxfp8_row_any(Scratch& s, const std::uint16_t* src, std::uint8_t* codes, std::uint8_t* scale,
                   std::int64_t d, const std::uint16_t* amax, const std::uint32_t* subw,
                   const std::uint8_t* exp, const std::uint8_t* fast) {
  const std::int64_t groups = d / 32;
  if (groups == 4) {
    std::memcpy(scale, exp, 4);  // d = 128: one move
  } else {
    std::memcpy(scale, exp, static_cast<std::size_t>(groups));
  }
  // Plain loops: a lambda here would not inherit the target's attributes, nor be inlined.
  bool whole = fast != nullptr, finite = true;
  for (std::int64_t g = 0; whole && g < groups; ++g) whole &= fast[g] != 0;
  if (whole) {
    qn::QuantizeE4M3Pow2RowUnmasked<true, kHigh>(src, codes, d, subw);
    return;
  }
  for (std::int64_t g = 0; g < groups; ++g) finite &= amax[g] < kInfBits;
  const bool low = qn::QuantizeE4M3Pow2RowChecked<true, kHigh>(src, codes, d, subw);
  if (low || !finite) redo_groups(s, src, amax, subw, exp, groups, codes, scale);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// The groups of one row that the unmasked form may have coded wrong, from E4M3ScalesOfKeys16's
// tests (bit j: group j passed; bit 16 + j: its largest key is below 255): a finite group's
// lanes below e4m3's normal range, zeros included, by the scalar rules (the unmasked form is
// exact for every other lane), or the whole group by the general path.
HWY_NOINLINE void redo_keyed_groups(Scratch& s, const std::uint16_t* src, std::uint8_t* codes,
                                    std::uint8_t* scale, const std::uint32_t* subw,
                                    const std::uint8_t* exp, std::uint32_t tests) {
  for (int g = 0; g < 4; ++g) {
    if ((tests >> g) & 1u) continue;
    redo_group<true>(s, src + 32 * g, codes + 32 * g, scale + g, ((tests >> (16 + g)) & 1u) != 0,
                     subw[g], exp[g]);
  }
}
#endif

// Mode mxfp8, rows of at most eight groups. Each set of eight groups has one minimum magnitude
// besides their largest ones: a row whose groups all pass the normal test with it takes the
// unmasked form. Any other row learns whether a lane fell below e4m3's normal range from the
// quantizing pass itself (the checked form), and only a row where one may have, or with a
// non-finite group, is looked at again. Each row is finished (including any group redone by the
// scalar rules) before the next, so a repeated slot keeps its last writer.
template <std::int64_t kD, bool kF16, qn::HighByte kH>
void fast_mxfp8_rows(const IndexerQuantCachePlan& p, Scratch& s, const Batch& b) {
  const std::int64_t d = kD != 0 ? kD : p.d, groups = d / 32;
  HWY_ALIGN std::uint16_t amax[kMaxBatch], min1[kMaxBatch];
  HWY_ALIGN std::uint32_t subw[kMaxBatch], s63w[kF16 ? kMaxBatch : 1];
  const std::uint32_t* ops = kF16 ? s63w : subw;  // the unmasked codes' operands
  HWY_ALIGN std::uint8_t exp[kMaxBatch], fast[kMaxBatch];
  if constexpr (kD == 128) {
    // Four groups to a row.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    // AVX-512: the scales of four rows from one key byte per value (E4M3RowKeys16), with each
    // group's tests. Every row takes the unmasked form; a row with a group that did not pass
    // (rare) has that group's lanes below e4m3's normal range (zeros included) redone at once,
    // or the whole group where its largest key is 255, before the next row. The rows go four
    // at a time with one look at the four's tests (each row's own only where one fails):
    // 1.03-1.05 x over a look per row. float16 rows are keyed on their own bits and coded from
    // them (E4M3F16Operands); a row with a group that did not pass is rounded to bfloat16 first
    // and takes the bfloat16 forms. bfloat16 rows look at their tests after their codes: the
    // look before them, as float16 rows need it, made them 0.96-0.98 x slower.
    {
      std::uint32_t tests[kMaxBatch / 4];
      for (int k = 0; k < b.n; k += 4) {
        const std::uint16_t* rows[4];
        b.four_rows(k, rows);
        tests[k / 4] =
            qn::E4M3ScalesOfKeys16(qn::E4M3RowKeys16<kF16>(rows), subw + 4 * k, exp + 4 * k);
      }
      if constexpr (kF16) qn::E4M3F16Operands(exp, (4 * b.n + 7) / 8 * 8, s63w);
      for (int k = 0; k < b.n; k += 4) {
        const int m = std::min(4, b.n - k);
        const bool all = (tests[k / 4] & 0xFFFFu) == 0xFFFFu;
        for (int j = 0; j < m; ++j) {
          const int u = 4 * (k + j);
          std::memcpy(b.scale(k + j), exp + u, 4);
          const std::uint32_t t = tests[k / 4] >> (4 * j);
          const std::uint16_t* src = b.src(k + j);
          if constexpr (kF16) {
            if (HWY_UNLIKELY(!all) && (t & 0xFu) != 0xFu) {
              src = f16_row_as_bf16(s, src, d);
              qn::QuantizeE4M3Pow2RowUnmasked<true, kH>(src, b.codes(k + j), d, subw + u);
              redo_keyed_groups(s, src, b.codes(k + j), b.scale(k + j), subw + u, exp + u, t);
              continue;
            }
          }
          qn::QuantizeE4M3Pow2RowUnmasked<true, kH, kF16>(src, b.codes(k + j), d, ops + u);
          if (!kF16 && HWY_UNLIKELY(!all) && (t & 0xFu) != 0xFu) {
            redo_keyed_groups(s, src, b.codes(k + j), b.scale(k + j), subw + u, exp + u, t);
          }
        }
      }
      return;
    }
#endif
    // Each set of eight groups is two rows, found from the rows themselves (the last row again
    // past the batch's end). A set whose groups all pass (most sets; about one in four of 32
    // rows holds one that does not) takes the unmasked form alone.
    bool set_fast[kMaxBatch / 8];
    const auto magnitudes = [&](int k) HWY_ATTR {  // the set of rows k and k + 1
      const std::uint16_t* two[2] = {b.src(k), b.src(k + 1 < b.n ? k + 1 : k)};
      qn::Magnitudes8Min<16, true, 4>(two, 32, amax + 4 * k, min1 + 4 * k);
    };
    const auto scales = [&](int k) HWY_ATTR {
      const int c = 4 * k;
      set_fast[k / 2] =
          qn::E4M3Pow2ScalesByKey8<105>(amax + c, min1 + c, subw + c, exp + c, fast + c);
    };
    // The magnitudes of all sets, then their scales: float16 rounds the magnitudes between the
    // two, and set by set bfloat16 ran 1.06-1.07 x slower on SSE4 (the same on AVX2).
    {
      const int entries = (4 * b.n + 7) / 8 * 8;
      for (int k = 0; k < b.n; k += 2) magnitudes(k);
      if constexpr (kF16) f16_magnitudes_as_bf16(amax, min1, entries);
      for (int k = 0; k < b.n; k += 2) scales(k);
      if constexpr (kF16) qn::E4M3F16Operands(exp, entries, s63w);
    }
    for (int k = 0; k < b.n; ++k) {
      const int u = 4 * k;
      if (HWY_LIKELY(set_fast[k / 2])) {
        std::memcpy(b.scale(k), exp + u, 4);
        qn::QuantizeE4M3Pow2RowUnmasked<true, kH, kF16>(b.src(k), b.codes(k), d, ops + u);
      } else {
        // Straight to the checked form: a branch per row on the groups' tests, which the data
        // decide, cost more than the unmasked form saves (1.02-1.03 x on AVX2).
        const std::uint16_t* src = kF16 ? f16_row_as_bf16(s, b.src(k), p.d) : b.src(k);
        mxfp8_row_any(s, src, b.codes(k), b.scale(k), d, amax + u, subw + u, exp + u, nullptr);
      }
    }
    return;
  }
  bool all = true;  // every group of the batch finite and its lanes at least e4m3-normal
  const std::uint16_t* units[kMaxBatch];
  const int used = batch_groups(b, groups, units);
  const int entries = (used + 7) / 8 * 8;
  for (int c = 0; c < used; c += 8) qn::Magnitudes8Min<16, true>(units + c, 32, amax + c, min1 + c);
  if constexpr (kF16) f16_magnitudes_as_bf16(amax, min1, entries);
  for (int c = 0; c < used; c += 8) {
    all &= qn::E4M3Pow2ScalesByKey8<105>(amax + c, min1 + c, subw + c, exp + c, fast + c);
  }
  if (kF16 && all) qn::E4M3F16Operands(exp, entries, s63w);
  for (int k = 0; k < b.n; ++k) {
    const std::int64_t u = k * groups;
    if (all) {  // the usual case
      std::memcpy(b.scale(k), exp + u, static_cast<std::size_t>(groups));
      qn::QuantizeE4M3Pow2RowUnmasked<true, kH, kF16>(b.src(k), b.codes(k), d, ops + u);
    } else {
      const std::uint16_t* src = kF16 ? f16_row_as_bf16(s, b.src(k), p.d) : b.src(k);
      mxfp8_row_any(s, src, b.codes(k), b.scale(k), d, amax + u, subw + u, exp + u, fast + u);
    }
  }
}

// Mode mxfp8, rows of more than eight groups: the row's own groups fill the reductions.
void fast_mxfp8_row(std::int64_t d, Scratch& s, const std::uint16_t* src, std::uint8_t* codes,
                    std::uint8_t* scale) {
  const std::int64_t groups = d / 32;
  qn::GroupMagnitudes<32, true>(src, groups, s.amax, s.min1);
  for (std::int64_t g = 0; g < groups; g += 8) {  // the scale bytes straight into s.scale
    qn::E4M3Pow2ScalesByKey8<105>(s.amax + g, s.min1 + g, s.subw + g, s.scale + g, s.fast + g);
  }
  for (std::int64_t g = 0; g < groups; ++g) {
    if (s.amax[g] < kInfBits) {
      qn::QuantizeE4M3Pow2RowInRange<false, kHigh>(src + 32 * g, codes + 32 * g, 32, s.subw + g);
      if (s.fast[g] == 0) {
        fix_lanes_below_normal(src + 32 * g, codes + 32 * g, 32, qn::E4M3NormalThreshold(s.subw[g]),
                               s.scale[g]);
      }
    } else {
      mxfp8_group_bf16(s, src + 32 * g, codes + 32 * g, s.scale + g);
    }
  }
  std::memcpy(scale, s.scale, static_cast<std::size_t>(groups));
}

// Mode mxfp4, bfloat16 rows. A group's scale 2^(s - 127) is a power of two, so its quotients'
// bf16 bits are the inputs' magnitude bits less (s - 127) * 128, and each code comes from them
// by a byte table (FP4Pow2Codes). The thresholds: the bf16 bits of y one below the smallest
// with code >= k + 1 (ties to the even code); the largest y a scale allows is just below 8
// (e2m1) or 2 (e1m2).
constexpr std::uint16_t kE2M1Steps[7] = {0x3E80, 0x3F3F, 0x3FA0, 0x3FDF, 0x4020, 0x405F, 0x40A0};
constexpr std::uint16_t kE1M2Steps[7] = {0x3E00, 0x3EBF, 0x3F20, 0x3F5F, 0x3F90, 0x3FAF, 0x3FD0};
constexpr qn::FP4Pow2Table kE2M1Table = qn::MakeFP4Pow2Table(kE2M1Steps, 0x40FF, 2);
constexpr qn::FP4Pow2Table kE1M2Table = qn::MakeFP4Pow2Table(kE1M2Steps, 0x3FFF, 0);
static_assert(kE2M1Table.ok && kE1M2Table.ok, "one threshold per bucket, the range covered");
// The same buckets with the codes carried into the sums' high bytes (QuantizeFP4Pow2Row128High).
constexpr qn::FP4Pow2Wide kE2M1High = qn::MakeFP4Pow2Wide(kE2M1Steps, 0x40FF, 2, 32, 254, 256);
constexpr qn::FP4Pow2Wide kE1M2High = qn::MakeFP4Pow2Wide(kE1M2Steps, 0x3FFF, 0, 32, 254, 256);
static_assert(kE2M1High.ok && kE1M2High.ok, "one threshold per bucket, the range covered");
// The same thresholds as float16 patterns (for QuantizeFP4Pow2Row128High<8>): a rounding midpoint
// has at most three mantissa bits, so its bfloat16 pattern is a multiple of 16 and a step is
// either one below it (ties up: 15 mod 16) or it (ties down); its float16 pattern is 8 times its
// bfloat16 one less 112 exponent steps, and the step one below that or it.
struct FP4Steps16 {
  std::uint16_t v[7] = {};
  bool ok = true;
};
constexpr FP4Steps16 MakeFP4Steps16(const std::uint16_t (&bf16)[7]) {
  FP4Steps16 t;
  for (int k = 0; k < 7; ++k) {
    const int up = bf16[k] % 16 == 15, midpoint = bf16[k] + up;
    t.ok = t.ok && midpoint % 16 == 0;
    t.v[k] = static_cast<std::uint16_t>(8 * (midpoint - 0x3800) - up);
  }
  return t;
}
constexpr FP4Steps16 kE2M1Steps16 = MakeFP4Steps16(kE2M1Steps);
constexpr FP4Steps16 kE1M2Steps16 = MakeFP4Steps16(kE1M2Steps);
// The largest float16 exponent field of a group in that form is 30: s up to 142 - emax.
constexpr qn::FP4Pow2Wide kE2M1Wide16 =
    qn::MakeFP4Pow2Wide(kE2M1Steps16.v, 0x47FF, 2, 256, 142, 256);
constexpr qn::FP4Pow2Wide kE1M2Wide16 =
    qn::MakeFP4Pow2Wide(kE1M2Steps16.v, 0x3FFF, 0, 256, 142, 256);
static_assert(kE2M1Steps16.ok && kE1M2Steps16.ok && kE2M1Wide16.ok && kE1M2Wide16.ok,
              "midpoints of at most three mantissa bits, one threshold per bucket");
// The table of QuantizeFP4Pow2Row128High (and its words form) for an FP4 cache's format, for
// bfloat16 rows or (kF16) float16 rows.
template <bool kF16>
const qn::FP4Pow2Wide& fp4_high(bool e2m1) {
  if constexpr (kF16) {
    return e2m1 ? kE2M1Wide16 : kE1M2Wide16;
  } else {
    return e2m1 ? kE2M1High : kE1M2High;
  }
}
#if KVS_FP4_BYTES
constexpr qn::FP4ByteTable kE2M1Bytes = qn::MakeFP4ByteTable(kE2M1Steps, 0x40FF, 6, true);
constexpr qn::FP4ByteTable kE1M2Bytes = qn::MakeFP4ByteTable(kE1M2Steps, 0x3FFF, 5, false);
static_assert(kE2M1Bytes.ok && kE1M2Bytes.ok, "one threshold per bucket, the range covered");
#endif

// The first threshold as the operands t0g of the target's codes take it (on AVX2 less the byte
// table's lead).
std::uint16_t fp4_first(bool e2m1) {
#if KVS_FP4_BYTES
  const qn::FP4ByteTable& bytes = e2m1 ? kE2M1Bytes : kE1M2Bytes;
  return static_cast<std::uint16_t>((e2m1 ? kE2M1Table : kE1M2Table).first - bytes.lead);
#else
  return (e2m1 ? kE2M1Table : kE1M2Table).first;
#endif
}

bool fast_fp4(const IndexerQuantCachePlan& p) {
  return p.x.dtype == DType::bfloat16 && p.options.quant_mode == IndexerQuantMode::mxfp4;
}

// The groups of one mxfp4 row that the lane form does not cover (zero or non-finite groups,
// and those with a scale below 2^-123: FP4Pow2Scales8), rewritten by the scalar rules. exp: the
// lane form's scale bytes s = max(m, emax) - emax, so m = 255 reads as 255 - emax. f16: src
// holds float16 values.
void redo_fp4_groups(Scratch& s, bool e2m1, const std::uint16_t* src, const std::uint8_t* exp,
                     std::int64_t groups, std::uint8_t* codes, std::uint8_t* scale,
                     bool f16 = false) {
  const std::uint32_t emax = e2m1 ? 2 : 0;
  for (std::int64_t g = 0; g < groups; ++g) {
    if (exp[g] >= 4 && exp[g] != 255 - emax) continue;
    if (f16) {
      formats::float16_to_float32(src + 32 * g, s.x, 32);
    } else {
      formats::bfloat16_to_float32(src + 32 * g, s.x, 32);
    }
    mxfp4_group(e2m1, s.x, codes + 16 * g, scale + g);
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// Mode mxfp4, d = 128, where vbmi_usable() and the CPU has GFNI and every group of the batch
// takes the lane form: the rows' scales from exp and their codes by QuantizeFP4Pow2Row128High
// (kF16: float16 rows).
bool fp4_vbmi_usable() {
  static const bool has = __builtin_cpu_supports("gfni");
  return has && vbmi_usable();
}
template <bool kF16>
KVS_VBMI_GFNI_ATTR void fast_mxfp4_rows128_vbmi(const Batch& b, bool e2m1, const std::uint8_t* exp,
                                                const std::uint32_t* t0g) {
  const qn::FP4Pow2Wide& t = fp4_high<kF16>(e2m1);
  const __m512i wide = _mm512_load_si512(t.wide);
  const __m512i bias = _mm512_set1_epi16(static_cast<std::int16_t>(t.bias));
  for (int k = 0; k < b.n; ++k) {
    b.prefetch_ahead(k, 256);
    std::memcpy(b.scale(k), exp + 4 * k, 4);
    qn::QuantizeFP4Pow2Row128High<kF16 ? 8 : 5>(b.src(k), b.codes(k), t0g + 4 * k, wide, bias);
  }
}
// Float16 rows where the VBMI form does not run (no VBMI or no GFNI): the same table, by
// QuantizeFP4Pow2Row128F16Words.
void fast_mxfp4_f16_rows128_words(const Batch& b, bool e2m1, const std::uint8_t* exp,
                                  const std::uint32_t* t0g) {
  const qn::FP4Pow2Wide& t = fp4_high<true>(e2m1);
  const __m512i wide = _mm512_load_si512(t.wide);
  const __m512i bias = _mm512_set1_epi16(static_cast<std::int16_t>(t.bias));
  for (int k = 0; k < b.n; ++k) {
    b.prefetch_ahead(k, 256);
    std::memcpy(b.scale(k), exp + 4 * k, 4);
    qn::QuantizeFP4Pow2Row128F16Words(b.src(k), b.codes(k), t0g + 4 * k, wide, bias);
  }
}
#endif

// Float16 rows of d = 128 in mode mxfp4 go to the kernels (f16_in_kernels) on AVX2 (the byte
// form) and on AVX-512 (the float16 table).
constexpr bool kFP4F16Kernels = KVS_FP4_BYTES || (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3);

// Calls rows(codes) with codes(src, out, t0g) writing the FP4 codes of one row of d values
// from its groups' operands t0g (QuantizeFP4Pow2Row, or on AVX2 its byte form), the constants
// of either in registers for all the rows. kF16: float16 rows (the byte form only).
template <bool kF16 = false, class Rows>
HWY_INLINE void with_fp4_codes(bool e2m1, std::int64_t d, const qn::FP4Pow2Table& table,
                               const Rows& rows) {
#if KVS_FP4_BYTES
  (void)table;
  const auto by = [&](auto shift, auto lead, const qn::FP4ByteTable& bytes) HWY_ATTR {
    const qn::FP4ByteRegs r = qn::LoadFP4ByteRegs(bytes);
    rows([&](const std::uint16_t* src, std::uint8_t* out, const std::uint32_t* t0g) HWY_ATTR {
      qn::QuantizeFP4Pow2RowBytes<decltype(shift)::value, decltype(lead)::value, kF16>(src, out, d,
                                                                                       t0g, r);
    });
  };
  static_assert(kE2M1Bytes.lead != 0 && kE1M2Bytes.lead == 0, "the forms below");
  if (e2m1) {
    by(std::integral_constant<int, 6>(), std::true_type(), kE2M1Bytes);
  } else {
    by(std::integral_constant<int, 5>(), std::false_type(), kE1M2Bytes);
  }
#else
  static_assert(!kF16, "float16 rows take the byte form only");
  (void)e2m1;
  rows([&](const std::uint16_t* src, std::uint8_t* out, const std::uint32_t* t0g) HWY_ATTR {
    qn::QuantizeFP4Pow2Row(src, out, d, t0g, table);
  });
#endif
}

// Mode mxfp4, rows of at most eight groups: the groups of the batch's rows reduced eight at a
// time, their scales as one vector, then each row's codes. A row with a group the lane form
// does not cover is finished by the scalar rules before the next row is written.
// kF16 (d = 128): float16 rows, coded on their own bits by the byte form (AVX2; see
// QuantizeFP4Pow2RowBytes), or on AVX-512 by their own table (QuantizeFP4Pow2Row128High<8> with
// VBMI and GFNI, QuantizeFP4Pow2Row128F16Words without; a batch those forms do not take is
// rounded first, fast_mxfp4_f16_rows_rounded).
template <std::int64_t kD, bool kF16 = false>
void fast_mxfp4_rows(const IndexerQuantCachePlan& p, Scratch& s, const Batch& b);

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// A batch of float16 rows (d = 128) that the AVX-512 forms do not take whole (a group with
// an infinity or a NaN, or with no magnitude of 2^-10 or more): its rows rounded to bfloat16
// (f16_as_bf16 says why that gives the same codes and scales) and quantized as such.
HWY_NOINLINE void fast_mxfp4_f16_rows_rounded(const IndexerQuantCachePlan& p, Scratch& s,
                                              const Batch& b) {
  HWY_ALIGN std::uint16_t rows[kMaxBatch / 4 * 128];
  Batch c = b;
  for (int k = 0; k < b.n; ++k) {
    formats::HWY_NAMESPACE::F16ToBF16Odd(b.src(k), rows + 128 * k, static_cast<std::size_t>(p.d));
    c.src_at[k] = std::uint64_t{reinterpret_cast<std::uintptr_t>(rows + 128 * k)};
  }
  fast_mxfp4_rows<128>(p, s, c);
}
#endif

template <std::int64_t kD, bool kF16>
void fast_mxfp4_rows(const IndexerQuantCachePlan& p, Scratch& s, const Batch& b) {
  static_assert(!kF16 || (kFP4F16Kernels && kD == 128), "float16 rows: d = 128");
  const std::int64_t d = kD != 0 ? kD : p.d, groups = d / 32;
  const bool e2m1 = p.cache.dtype == DType::float4_e2m1;
  // A copy: the code stores could alias the global, so each row would load its vectors again.
  const qn::FP4Pow2Table table = e2m1 ? kE2M1Table : kE1M2Table;
  const std::uint16_t emax = e2m1 ? 2 : 0, first = fp4_first(e2m1);
  HWY_ALIGN std::uint16_t amax[kMaxBatch];
  HWY_ALIGN std::uint32_t t0g[kMaxBatch];
  HWY_ALIGN std::uint8_t exp[kMaxBatch];
  const qn::FP4Tag8 d8;
  auto bad = hn::Zero(d8);
  bool by_groups = true;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kD == 128) {  // four rows per reduction, read from their own addresses
    by_groups = false;
    __m256i bad16 = _mm256_setzero_si256();
    const std::uint16_t first_step = fp4_high<kF16>(e2m1).first;
    for (int k = 0; k < b.n; k += 4) {
      const std::uint16_t* rows[4];
      b.four_rows(k, rows);
      const auto m = qn::FP4RowExponents16<kF16>(rows);
      bad16 = _mm256_or_si256(
          bad16, qn::FP4Pow2ScalesOf16<kF16>(m, emax, first_step, exp + 4 * k, t0g + 4 * k));
    }
    if (fp4_vbmi_usable() && _mm256_testz_si256(bad16, bad16)) {
      fast_mxfp4_rows128_vbmi<kF16>(b, e2m1, exp, t0g);
      return;
    }
    if constexpr (kF16) {
      if (_mm256_testz_si256(bad16, bad16)) {
        fast_mxfp4_f16_rows128_words(b, e2m1, exp, t0g);
      } else {
        fast_mxfp4_f16_rows_rounded(p, s, b);
      }
      return;
    }
    bad = hn::Vec128<std::uint16_t>{_mm_or_si128(_mm256_castsi256_si128(bad16),
                                                 _mm256_extracti128_si256(bad16, 1))};
  }
#elif KVS_FP4_BYTES
  if constexpr (kD == 128) {  // the same on 256-bit vectors, the maxima as bytes throughout
    by_groups = false;
    __m128i bad16 = _mm_setzero_si128();
    for (int k = 0; k < b.n; k += 4) {
      const std::uint16_t* rows[4];
      b.four_rows(k, rows);
      bad16 = _mm_or_si128(bad16,
                           qn::FP4Pow2ScalesOfBytes16<kF16>(qn::FP4RowExponentBytes16<kF16>(rows),
                                                            static_cast<std::uint8_t>(emax), first,
                                                            exp + 4 * k, t0g + 4 * k));
    }
    bad = hn::Vec128<std::uint16_t>{bad16};
  }
#endif
  // AVX-512 has taken float16 rows above.
  if constexpr (!kF16 || KVS_FP4_BYTES) {
    if (by_groups) {
      const std::uint16_t* units[kMaxBatch];
      const int used = batch_groups(b, groups, units);
      for (int c = 0; c < used; c += 8) {
        qn::Maxima8<16>(units + c, 32, amax + c);
        bad = hn::Or(bad, qn::FP4Pow2Scales8(amax + c, emax, first, exp + c, t0g + c));
      }
    }
    const bool all = hn::AllTrue(d8, hn::Eq(bad, hn::Zero(d8)));
    with_fp4_codes<kF16>(e2m1, d, table, [&](const auto& codes) HWY_ATTR {
      if (all) {  // the usual case, in a loop of its own
        for (int k = 0; k < b.n; ++k) {
          if constexpr (KVS_FP4_BYTES) b.prefetch_ahead(k, 2 * d);  // see Batch::ahead
          const std::int64_t u = k * groups;
          std::memcpy(b.scale(k), exp + u, groups == 4 ? 4 : static_cast<std::size_t>(groups));
          codes(b.src(k), b.codes(k), t0g + u);
        }
        return;
      }
      for (int k = 0; k < b.n; ++k) {
        const std::int64_t u = k * groups;
        std::memcpy(b.scale(k), exp + u, groups == 4 ? 4 : static_cast<std::size_t>(groups));
        codes(b.src(k), b.codes(k), t0g + u);
        redo_fp4_groups(s, e2m1, b.src(k), exp + u, groups, b.codes(k), b.scale(k), kF16);
      }
    });
  }
}

// Mode mxfp4, rows of more than eight groups: the row's own groups fill the reductions.
void fast_mxfp4_row(const IndexerQuantCachePlan& p, Scratch& s, const std::uint16_t* src,
                    std::uint8_t* codes, std::uint8_t* scale) {
  const bool e2m1 = p.cache.dtype == DType::float4_e2m1;
  const qn::FP4Pow2Table& table = e2m1 ? kE2M1Table : kE1M2Table;
  const std::uint16_t first = fp4_first(e2m1);
  const std::int64_t groups = p.d / 32;
  qn::GroupMagnitudes<32, false>(src, groups, s.amax, s.min1);
  const qn::FP4Tag8 d8;
  auto bad = hn::Zero(d8);
  for (std::int64_t g = 0; g < groups; g += 8) {
    bad = hn::Or(bad,
                 qn::FP4Pow2Scales8(s.amax + g, e2m1 ? 2 : 0, first, s.scale + g, s.exp + g));
  }
  const bool all = hn::AllTrue(d8, hn::Eq(bad, hn::Zero(d8)));
  std::memcpy(scale, s.scale, static_cast<std::size_t>(groups));
  with_fp4_codes(e2m1, p.d, table, [&](const auto& row_codes) HWY_ATTR {
    row_codes(src, codes, s.exp);
  });
  if (!all) redo_fp4_groups(s, e2m1, src, s.scale, groups, codes, scale);
}

#if KVS_HIF8_BF16 || KVS_HIF8_LANES
// Mode hifloat8, bfloat16 rows (d is a multiple of 32): no scale and no reduction, so each row is
// encoded as the walk reaches it, in a loop that keeps the tables and constants in registers.
// kScaled: x_scale is not 1; kD: the row length when known at compile time (0: d). Both fixed
// per call, so that the loop unrolls the row.
bool fast_hif8(const IndexerQuantCachePlan& p) {
  return p.x.dtype == DType::bfloat16 && p.options.quant_mode == IndexerQuantMode::hifloat8;
}
#else
bool fast_hif8(const IndexerQuantCachePlan&) { return false; }
#endif

#if KVS_HIF8_BF16 || KVS_HIF8_LANES
// Rows [begin, end) in chunks of 16 rows: fast(r, stop) codes a chunk's rows and says whether
// they all came out right, where a check per row cost four operations and a branch per 128
// values; a chunk that did not is taken again by slow(r, stop), in order, so that a repeated slot
// still ends with its last writer. Where that happens twice in a call, such rows are frequent,
// and the rest of the call goes by slow.
template <class Fast, class Slow>
HWY_INLINE void in_checked_chunks(std::int64_t begin, std::int64_t end, const Fast& fast,
                                  const Slow& slow) {
  constexpr std::int64_t kChunk = 16;
  int failed = 0;
  std::int64_t r = begin;
  for (; r < end && failed < 2; r += kChunk) {
    const std::int64_t stop = std::min(end, r + kChunk);
    if (HWY_UNLIKELY(!fast(r, stop))) {
      slow(r, stop);
      ++failed;
    }
  }
  if (r < end) slow(r, end);
}
#endif

#if KVS_HIF8_BF16
// AVX-512: every lane in registers, NaNs included, by the byte tables where the CPU has VBMI
// (core/vbmi.h), else by the 16-bit ones. kF16 (x_scale 1: f16_in_kernels): float16 rows coded
// from their own bits by the float16 tables (HiF8CodesF16RowWords, HiF8CodesF16RowBytes), their
// values tested a chunk at a time (in_checked_chunks); the rows of a chunk holding a value that
// is not normal are rounded to bfloat16 first. Each form spells out its own loops: lambdas
// shared between them would carry only the base target's attributes, and the byte form's code
// called from them out of line ran 0.64 x as fast.
template <bool kScaled, std::int64_t kD, bool kF16 = false>
void hif8_words(const IndexerQuantCachePlan& p, Scratch& s, const RowAddresses& a,
                const std::int64_t* slots, std::int64_t begin, std::int64_t end) {
  const qn::HiF8Bf16Regs t = qn::LoadHiF8Bf16Regs();
  const __m512 xs = _mm512_set1_ps(p.options.x_scale);
  const std::int64_t d = kD != 0 ? kD : p.d;
  if constexpr (!kF16) {
    (void)s;
    auto row = [&](const std::uint16_t* src, std::uint8_t* codes, std::uint8_t*)
                   HWY_ATTR { qn::HiF8CodesBf16RowOf<kScaled>(t, src, codes, d, xs); };
    ForEachRow(a, slots, begin, end, row);
  } else {
    const qn::HiF8F16WordRegs f = qn::LoadHiF8F16WordRegs();
    __m512i worst;
    auto unchecked = [&](const std::uint16_t* src, std::uint8_t* codes, std::uint8_t*)
                         HWY_ATTR { qn::HiF8CodesF16RowWords(f, src, codes, d, worst); };
    auto rounded = [&, t](const std::uint16_t* src, std::uint8_t* codes, std::uint8_t*) HWY_ATTR {
      qn::HiF8CodesBf16RowOf<false>(t, f16_row_as_bf16(s, src, p.d), codes, d, xs);
    };
    in_checked_chunks(
        begin, end,
        [&](std::int64_t r, std::int64_t stop) HWY_ATTR {
          worst = _mm512_setzero_si512();
          ForEachRow(a, slots, r, stop, unchecked);
          return qn::HiF8F16AllNormal(worst);
        },
        [&](std::int64_t r, std::int64_t stop)
            HWY_ATTR { ForEachRow(a, slots, r, stop, rounded); });
  }
}

template <bool kScaled, std::int64_t kD, bool kF16 = false>
KVS_VBMI_ATTR void hif8_bytes(const IndexerQuantCachePlan& p, Scratch& s, const RowAddresses& a,
                              const std::int64_t* slots, std::int64_t begin, std::int64_t end) {
  const qn::HiF8ByteRegs t = qn::LoadHiF8ByteRegs();
  const __m512 xs = _mm512_set1_ps(p.options.x_scale);
  const std::int64_t d = kD != 0 ? kD : p.d;
  if constexpr (!kF16) {
    auto row = [&](const std::uint16_t* src, std::uint8_t* codes, std::uint8_t*)
                   KVS_VBMI_ATTR { qn::HiF8CodesBf16RowBytes<kScaled>(t, src, codes, d, xs); };
    ForEachRow(a, slots, begin, end, row);
  } else {
    const qn::HiF8F16Regs f = qn::LoadHiF8F16Regs();
    __m512i worst;
    auto unchecked = [&](const std::uint16_t* src, std::uint8_t* codes, std::uint8_t*)
                         KVS_VBMI_ATTR { qn::HiF8CodesF16RowBytes(t, f, src, codes, d, worst); };
    // t by value: the rare rows' path stays out of line, and a reference would keep the hot
    // loop's tables in memory.
    auto rounded = [&, t](const std::uint16_t* src, std::uint8_t* codes,
                          std::uint8_t*) KVS_VBMI_ATTR {
      qn::HiF8CodesBf16RowBytes<false>(t, f16_row_as_bf16(s, src, p.d), codes, d, xs);
    };
    in_checked_chunks(
        begin, end,
        [&](std::int64_t r, std::int64_t stop) KVS_VBMI_ATTR {
          worst = _mm512_setzero_si512();
          ForEachRow(a, slots, r, stop, unchecked);
          return qn::HiF8F16AllNormal(worst);
        },
        [&](std::int64_t r, std::int64_t stop)
            KVS_VBMI_ATTR { ForEachRow(a, slots, r, stop, rounded); });
  }
}

template <bool kScaled, std::int64_t kD, bool kF16 = false>
void hif8_rows_of(const IndexerQuantCachePlan& p, Scratch& s, const RowAddresses& a,
                  const std::int64_t* slots, std::int64_t begin, std::int64_t end) {
  if (vbmi_usable()) {
    hif8_bytes<kScaled, kD, kF16>(p, s, a, slots, begin, end);
  } else {
    hif8_words<kScaled, kD, kF16>(p, s, a, slots, begin, end);
  }
}
#elif KVS_HIF8_LANES
// GCC's options for scheduling before register allocation, for one function (see
// hif8_rows_of); elsewhere (Clang, or GCC on Arm, which schedules so already) nothing.
#if defined(__GNUC__) && !defined(__clang__) && HWY_ARCH_X86
#define KVS_SCHEDULE_FIRST __attribute__((optimize("schedule-insns", "sched-pressure")))
#else
#define KVS_SCHEDULE_FIRST
#endif

// AVX2 and SSE4: each row one byte per value, or where it holds a NaN product or one in
// [2^-23, 2^-15) or from 2^15 by the 8,192-entry table, or with a NaN by the general path (this
// mode has no scale).
template <bool kScaled, std::int64_t kD>
HWY_INLINE void hif8_row(const IndexerQuantCachePlan& p, Scratch& s, const qn::HiF8LaneRegs& t,
                         const std::uint16_t* src, std::uint8_t* codes) {
  const float x_scale = p.options.x_scale;
  if (HWY_LIKELY((qn::HiF8CodesByLanes<kScaled, kD>(t, src, codes, p.d, x_scale))) ||
      qn::HiF8CodesByTable(src, codes, p.d, x_scale, s.keys)) {
    return;
  }
  general_row(p, s, src, codes);
}

// The rows' flags checked a chunk at a time (in_checked_chunks); the rows of a chunk that fails
// are checked one by one. kF16: float16 rows (x_scale 1), truncated to bfloat16 in registers by the
// lane form; a row checked on its own is rounded to bfloat16 first (f16_as_bf16 says why either is
// exact). GCC on x86 schedules instructions only after register allocation; scheduling this
// function before it as well, with the registers' pressure in view (KVS_SCHEDULE_FIRST),
// measured 1.04 x faster on AVX2 and 1.02-1.03 x on SSE4 (AMD Zen 3): the lane form's chain from a
// load to its store is long, and its tables fill most of AVX2's sixteen registers. The same options
// for the whole file cost mxfp4 6 %, and for the fp8 and mxfp8 kernels and the epilog's they gained
// nothing or lost, so this function alone takes them.
template <bool kScaled, std::int64_t kD, bool kF16 = false>
KVS_SCHEDULE_FIRST void hif8_rows_of(const IndexerQuantCachePlan& p, Scratch& s,
                                     const RowAddresses& a, const std::int64_t* slots,
                                     std::int64_t begin, std::int64_t end) {
  using DB = hn::ScalableTag<std::uint8_t>;
  const DB d8;
  const qn::HiF8LaneRegs t = qn::LoadHiF8LaneRegs();
  qn::HiF8LaneFlags<DB> flags(d8);
  auto unchecked = [&](const std::uint16_t* src, std::uint8_t* codes, std::uint8_t*) HWY_ATTR {
    qn::HiF8LaneRow<kScaled, kD, false, kF16>(t, src, codes, p.d, p.options.x_scale, flags);
  };
  IndexerQuantCachePlan rounded = p;  // the plan of a float16 row rounded to bfloat16
  rounded.x.dtype = DType::bfloat16;
  auto checked = [&](const std::uint16_t* src, std::uint8_t* codes, std::uint8_t*) HWY_ATTR {
    if constexpr (kF16) {
      hif8_row<kScaled, kD>(rounded, s, t, f16_row_as_bf16(s, src, p.d), codes);
    } else {
      hif8_row<kScaled, kD>(p, s, t, src, codes);
    }
  };
  in_checked_chunks(
      begin, end,
      [&](std::int64_t r, std::int64_t stop) HWY_ATTR {
        flags = qn::HiF8LaneFlags<DB>(d8);
        ForEachRow(a, slots, r, stop, unchecked);
        return flags.AllRight(d8, t);
      },
      [&](std::int64_t r, std::int64_t stop) HWY_ATTR { ForEachRow(a, slots, r, stop, checked); });
}
#endif

#if KVS_HIF8_BF16 || KVS_HIF8_LANES
// hif8_rows_of with the row length known at compile time where it is 128.
template <bool kScaled, bool... kF16>
void hif8_rows_by_d(const IndexerQuantCachePlan& p, Scratch& s, const RowAddresses& a,
                    const std::int64_t* slots, std::int64_t begin, std::int64_t end) {
  if (p.d == 128) {
    hif8_rows_of<kScaled, 128, kF16...>(p, s, a, slots, begin, end);
  } else {
    hif8_rows_of<kScaled, 0, kF16...>(p, s, a, slots, begin, end);
  }
}

// x * 1 is x, and a NaN stays a NaN: with x_scale 1 the inputs are their own products.
void hif8_rows(const IndexerQuantCachePlan& p, Scratch& s, const RowAddresses& a,
               const std::int64_t* slots, std::int64_t begin, std::int64_t end) {
  if (p.x.dtype == DType::float16) {  // f16_in_kernels
    hif8_rows_by_d<false, true>(p, s, a, slots, begin, end);
    return;
  }
  if (p.options.x_scale == 1.0f) {
    hif8_rows_by_d<false>(p, s, a, slots, begin, end);
  } else {
    hif8_rows_by_d<true>(p, s, a, slots, begin, end);
  }
}
#endif

// The batch kernels for a row length kD known at compile time (0: p.d), so that their loops
// over rows, groups and vectors unroll: the per-batch bookkeeping of a d = 128 row (the
// indexer's usual head size) otherwise costs a sizable share of its arithmetic.
// kF16: float16 rows (f16_in_kernels; mode mxfp4 only with d = 128, kFP4F16Kernels).
// kH: how the fp8 and mxfp8 codes are narrowed (fast_batches).
template <qn::HighByte kH, std::int64_t kD, bool kF16 = false>
void fast_rows_of(const IndexerQuantCachePlan& p, Scratch& s, const Batch& b) {
  if (p.options.quant_mode == IndexerQuantMode::fp8) {
    fast_fp8_rows<kD, kF16, kH>(p, s, b);
  } else if (p.options.quant_mode == IndexerQuantMode::mxfp4) {
    if constexpr (!kF16 || (kFP4F16Kernels && kD == 128)) fast_mxfp4_rows<kD, kF16>(p, s, b);
  } else {
    fast_mxfp8_rows<kD, kF16, kH>(p, s, b);
  }
}

template <qn::HighByte kH>
void fast_rows(const IndexerQuantCachePlan& p, Scratch& s, const Batch& b) {
  if (p.x.dtype == DType::float16) {
    if (p.d == 128) {
      fast_rows_of<kH, 128, true>(p, s, b);
    } else {
      fast_rows_of<kH, 0, true>(p, s, b);
    }
  } else if (p.d == 128) {
    fast_rows_of<kH, 128>(p, s, b);
  } else if (p.options.quant_mode == IndexerQuantMode::fp8 || p.d <= 8 * 32) {
    fast_rows_of<kH, 0>(p, s, b);
  } else if (p.options.quant_mode == IndexerQuantMode::mxfp4) {
    fast_mxfp4_row(p, s, b.src(0), b.codes(0), b.scale(0));
  } else {
    fast_mxfp8_row(p.d, s, b.src(0), b.codes(0), b.scale(0));
  }
}

#endif  // HWY_TARGET != HWY_SCALAR



#if HWY_TARGET != HWY_SCALAR
// How many of the slots s[0, room) run on from slot (s[i] == slot + i), a vector at a time.
HWY_INLINE std::int64_t run_length(const std::int64_t* s, std::int64_t slot, std::int64_t room) {
  const hn::ScalableTag<std::int64_t> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  auto want = hn::Add(hn::Iota(d, 0), hn::Set(d, slot));
  std::int64_t len = 0;
  for (; len + L <= room && hn::AllTrue(d, hn::Eq(hn::LoadU(d, s + len), want)); len += L) {
    want = hn::Add(want, hn::Set(d, L));
  }
  while (len < room && s[len] == slot + len) ++len;
  return len;
}

// The addresses of rows one pitch apart: out[i] = first + i * pitch for i < len, a vector at a
// time (out has room for one vector more). The lanes' offsets are set up once per call: set up
// per run, the vector load waited on the scalar stores each time (no store forwarding there).
class RunFill {
 public:
  explicit RunFill(std::int64_t pitch) : stride_(static_cast<std::uint64_t>(pitch)) {
    for (std::size_t i = 0; i < hn::Lanes(d_); ++i) offsets_[i] = i * stride_;
    stride_ *= hn::Lanes(d_);
  }
  HWY_INLINE void operator()(std::uint64_t* out, std::int64_t len, std::uint64_t first) const {
    auto v = hn::Add(hn::Set(d_, first), hn::Load(d_, offsets_));
    const auto stride = hn::Set(d_, stride_);
    for (std::int64_t i = 0; i < len; i += static_cast<std::int64_t>(hn::Lanes(d_))) {
      hn::StoreU(v, d_, out + i);
      v = hn::Add(v, stride);
    }
  }

 private:
  hn::ScalableTag<std::uint64_t> d_;
  HWY_ALIGN std::uint64_t offsets_[HWY_MAX_BYTES / 8];
  std::uint64_t stride_;  // a whole vector's
};

// The written rows of [begin, end) in batches of per_batch (the last one shorter), in token
// order. Rows come in runs: consecutive rows whose slots follow each other within a block (a
// prefill's) have their addresses one pitch apart, so a run is found by comparing its slots
// alone and its entries are filled by strides, both a vector at a time, where the walk row by
// row cost a sizable share of a batch's arithmetic (and the scalar compares and 64-bit
// multiplies that replaced it still 2-3 cycles a row: 2-6 % of a call).
template <bool kRank2, qn::HighByte kH>
void fast_batches_of(const IndexerQuantCachePlan& p, Scratch& s, const RowAddresses& a,
                     const std::int64_t* slots, std::int64_t begin, std::int64_t end) {
  const int per_batch = batch_rows(p);
  const std::int64_t block_size = a.split.block_size();
  const RunFill fill_codes(a.c1), fill_scale(a.s1), fill_src(2 * a.x0);  // x0: 2-byte elements
  const auto at = [](const void* ptr) {
    return std::uint64_t{reinterpret_cast<std::uintptr_t>(ptr)};
  };
  Batch b;
  int n = 0;  // b.n lives in a register between the calls
  // Batch::ahead: the rows of the tokens from r on where x is rank 2 and rows remain.
  const auto aim = [&](std::int64_t r) {
    const bool next = kRank2 && r < end;
    b.ahead = next ? at(a.src(r)) : b.src_at[0];
    b.ahead_pitch = next ? 2 * a.x0 : 0;
  };
  for (std::int64_t r = begin; r < end;) {
    const std::int64_t slot = slots[r];
    if (slot < 0) {
      ++r;
      continue;
    }
    const std::int64_t room =
        std::min({end - r, block_size - a.split.offset(slot), std::int64_t{per_batch - n}});
    const std::int64_t len = run_length(slots + r, slot, room);
    fill_codes(b.codes_at + n, len, at(a.codes(slot)));
    fill_scale(b.scale_at + n, len, at(a.scale(slot)));
    if constexpr (kRank2) {
      fill_src(b.src_at + n, len, at(a.src(r)));
    } else {
      for (std::int64_t i = 0; i < len; ++i) b.src_at[n + i] = at(a.src(r + i));
    }
    n += static_cast<int>(len);
    r += len;
    if (n == per_batch) {
      b.n = n;
      aim(r);
      fast_rows<kH>(p, s, b);
      n = 0;
    }
  }
  b.n = n;
  aim(end);
  if (n > 0) fast_rows<kH>(p, s, b);
}

template <qn::HighByte kH>
void fast_batches_by(const IndexerQuantCachePlan& p, Scratch& s, const RowAddresses& a,
                     const std::int64_t* slots, std::int64_t begin, std::int64_t end) {
  if (a.rank2) {
    fast_batches_of<true, kH>(p, s, a, slots, begin, end);
  } else {
    fast_batches_of<false, kH>(p, s, a, slots, begin, end);
  }
}

void fast_batches(const IndexerQuantCachePlan& p, Scratch& s, const RowAddresses& a,
                  const std::int64_t* slots, std::int64_t begin, std::int64_t end) {
#if KVS_HIGH_BYTE_PERMUTE
  // AVX-512 with VBMI: the fp8 and mxfp8 codes narrowed by one byte permute per vector pair,
  // 1.06-1.07 x faster for fp8 rows at 1,024 tokens, 1.02-1.04 x for mxfp8 (AMD Zen 5).
  if (p.options.quant_mode != IndexerQuantMode::mxfp4 && vbmi_usable()) {
    fast_batches_by<qn::HighByte::kBytePermute>(p, s, a, slots, begin, end);
    return;
  }
#endif
  fast_batches_by<kHigh>(p, s, a, slots, begin, end);
}
#endif

#if HWY_TARGET != HWY_SCALAR
// float16 rows through the bfloat16 kernels. Each value is rounded to bfloat16 by round-to-odd
// (truncated, its last bit set where a dropped bit was): the exponent and every leading bit up to
// bfloat16's last one survive, so where a code rounds x to a format with at most five mantissa
// bits (the float8 and FP4 codes) or truncates it to four (HiFloat8), and its scale is a power of
// two taken from the largest magnitude's exponent (mxfp4) or from that magnitude times 1/448,
// rounded up to a power of two (mxfp8, fp8 with round_scale), the rounded value gives the same
// code and scale as x: it lies on x's side of every rounding midpoint and of 448 * 2^k, since
// those have a short mantissa whose last bfloat16 bit is 0. float16 subnormals become normal
// bfloat16 values with the exponent of their exact value, as the scale rules take them.
// HiFloat8's codes read only the top four mantissa bits, which truncation keeps as well (its
// lane form truncates, HiF8LaneRow's kF16). The modes that would compute
// in float32 with x itself (fp8 without round_scale, hifloat8 with an x_scale, e5m2 caches) keep
// the general path.
bool f16_as_bf16(const IndexerQuantCachePlan& p) {
  if (p.x.dtype != DType::float16) return false;
  IndexerQuantCachePlan q = p;
  q.x.dtype = DType::bfloat16;
  if (p.options.quant_mode == IndexerQuantMode::hifloat8) {
    return p.options.x_scale == 1.0f && fast_hif8(q);
  }
  return fast_e4m3(q) || fast_fp4(q);
}

// Whether the kernels take the f16_as_bf16 rows p on their own float16 bits, without the pass:
// modes fp8 and mxfp8 (f16_magnitudes_as_bf16; mxfp8 rows of at most eight groups), mxfp4 with
// d = 128 on AVX2 (the byte form) and AVX-512 (the float16 table), and hifloat8 on x86 (the lane
// form on AVX2 and SSE4, the float16 tables on AVX-512).
bool f16_in_kernels(const IndexerQuantCachePlan& p) {
  switch (p.options.quant_mode) {
    case IndexerQuantMode::fp8:
      return true;
    case IndexerQuantMode::mxfp8:
      return p.d <= 8 * 32;
    case IndexerQuantMode::mxfp4:
      return p.d == 128 && kFP4F16Kernels;
    case IndexerQuantMode::hifloat8:
      return KVS_HIF8_LANES || KVS_HIF8_BF16;
  }
  return false;
}

void QuantizeRows(const IndexerQuantCachePlan& p, const std::int64_t* slots, std::int64_t begin,
                  std::int64_t end);

// f16_as_bf16 rows: pieces of rows rounded into a bfloat16 buffer, each piece quantized by the
// bfloat16 kernels in token order (so a repeated slot still ends with its last writer).
void f16_rows_as_bf16(const IndexerQuantCachePlan& p, const RowAddresses& a,
                      const std::int64_t* slots, std::int64_t begin, std::int64_t end) {
  constexpr std::int64_t kValues = kMaxD;  // 16 KiB of bfloat16 rows per piece
  HWY_ALIGN std::uint16_t rows[kValues];
  const std::int64_t per_piece = kValues / p.d;
  IndexerQuantCachePlan q = p;
  q.x = TensorView(rows, DType::bfloat16, {per_piece, p.d});
  // Contiguous rows are rounded a run of written rows at a time, where one call per row cost
  // its setup and its final test on every 128 values.
  const bool contiguous = a.rank2 && a.x0 == p.d;
  for (std::int64_t r0 = begin; r0 < end; r0 += per_piece) {
    const std::int64_t n = std::min(per_piece, end - r0);
    for (std::int64_t i = 0; i < n;) {
      if (slots[r0 + i] < 0) {
        ++i;
        continue;
      }
      std::int64_t j = i + 1;
      if (contiguous) {
        while (j < n && slots[r0 + j] >= 0) ++j;
      }
      formats::HWY_NAMESPACE::F16ToBF16Odd(a.src(r0 + i), rows + i * p.d,
                                           static_cast<std::size_t>((j - i) * p.d));
      i = j;
    }
    QuantizeRows(q, slots + r0, 0, n);
  }
}
#endif

void QuantizeRows(const IndexerQuantCachePlan& p, const std::int64_t* slots, std::int64_t begin,
                  std::int64_t end) {
#if HWY_TARGET != HWY_SCALAR
  const bool f16 = f16_as_bf16(p), f16_own = f16 && f16_in_kernels(p);
  const bool hif8 = p.options.quant_mode == IndexerQuantMode::hifloat8;
  if (f16 && !f16_own) {
    f16_rows_as_bf16(p, RowAddresses(p), slots, begin, end);
    return;
  }
#endif
  // The general path's float32 rows: on the stack for the usual head sizes (a heap block per
  // call cost about 1 % of a 1,024-token call).
  constexpr std::int64_t kStackD = 512;
  HWY_ALIGN float stack_rows[2 * kStackD];
  std::vector<float> heap_rows;
  float* rows = stack_rows;
  if (p.d > kStackD) {
    heap_rows.resize(static_cast<std::size_t>(2 * p.d));
    rows = heap_rows.data();
  }
  Scratch s;
  s.x = rows;
  s.y = rows + p.d;
  const RowAddresses a(p);
#if HWY_TARGET != HWY_SCALAR
#if KVS_HIF8_BF16 || KVS_HIF8_LANES
  if (fast_hif8(p) || (f16_own && hif8)) {
    hif8_rows(p, s, a, slots, begin, end);
    return;
  }
#endif
  if (fast_e4m3(p) || fast_fp4(p) || (f16_own && !hif8)) {
    fast_batches(p, s, a, slots, begin, end);
    return;
  }
#endif
#if HWY_TARGET != HWY_SCALAR
  const bool hif8_table = hif8 && p.x.dtype == DType::bfloat16;
#endif
  const std::size_t scale_bytes =
      static_cast<std::size_t>(p.scale_count) * p.cache_scale.element_size();
  for (std::int64_t r = begin; r < end; ++r) {
    const std::int64_t slot = slots[r];
    if (slot < 0) continue;
    std::uint8_t* scale = a.scale(slot);
#if HWY_TARGET != HWY_SCALAR
    if (hif8_table &&
        qn::HiF8CodesByTable(a.src(r), a.codes(slot), p.d, p.options.x_scale, s.keys)) {
      continue;  // no scale in this mode
    }
#endif
    general_row(p, s, a.src(r), a.codes(slot));
    if (scale_bytes == 4) {
      std::memcpy(scale, s.scale, 4);  // fp8, and mxfp8 / mxfp4 with d = 128: one move
    } else if (scale_bytes != 0) {
      std::memcpy(scale, s.scale, scale_bytes);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvscatter::detail::indexer
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail::indexer {

HWY_EXPORT(QuantizeRows);

void quantize_rows(const IndexerQuantCachePlan& p, const std::int64_t* slots, std::int64_t begin,
                   std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(QuantizeRows)(p, slots, begin, end);
}

}  // namespace kvscatter::detail::indexer
#endif  // HWY_ONCE
