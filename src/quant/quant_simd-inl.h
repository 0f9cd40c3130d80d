// Highway building blocks of the quantizers, for every operator that quantizes bf16 rows in
// groups (include after Highway's main header, in a translation unit that Highway compiles once
// per target; the functions live in kvscatter::quant::HWY_NAMESPACE):
//
// - GroupMagnitudes: the largest |x| (as bf16 bits & 0x7FFF) of every group of a row and,
//   optionally, the smallest (zeros included), eight groups per horizontal reduction instead
//   of one reduction (and one dependency chain) per group (Reduce8 is the reduction).
// - Magnitudes8Min: the same for eight groups anywhere (whole rows, or the groups of a few rows),
//   with their smallest magnitudes per group or for all eight.
// - E4M3Pow2ScalesByKey8: from those, the power-of-two scales of kv_compress_epilog's fp8_bf16
//   and fp8_e8m0 modes (with round_scale) and of indexer_quant_cache's fp8 (with round_scale) and
//   mxfp8 modes, eight groups at a time in integer steps, in the forms the quantizers load.
//   E4M3RowKeys16 + E4M3ScalesOfKeys16 (AVX-512): the same for the sixteen groups of four
//   128-element rows from one key byte per value, reduced as bytes.
// - QuantizeE4M3Pow2RowUnmasked, QuantizeE4M3Pow2RowInRange, QuantizeE4M3Pow2RowChecked: codes
//   of a row's groups divided by their powers of two, on 16-bit lanes straight from the bf16
//   bits, two vectors narrowed together (with VBMI by one byte permute, HighByte).
//   QuantizeE4M3Pow2RowUnmasked's kF16 + E4M3F16Operands: the same codes straight from float16
//   bits.
// - E2M1Thresholds + QuantizeE2M1Group: FP4 codes of a group with a bf16 multiplier as seven
//   16-bit compares per element (the multiply and both roundings folded into the thresholds).
//
// - QuantizeE2M1ByBuckets (AVX-512 only): the same codes by the bucket tables of
//   src/quant/e2m1_buckets.h, a 16-bit table lookup and one addition per element.
//   QuantizeE2M1ByByteBuckets (SSE4, AVX2): by their byte tables, three byte lookups and two
//   compares per element; QuantizeE2M1ByBytePairs (AVX2, groups of 32 and 64): the same one
//   byte per value, 32 per vector (E2M1BucketBytePairs).
// - Maxima8 + FP4Pow2Scales8 + QuantizeFP4Pow2Row: FP4 codes (float4_e2m1, float4_e1m2) of
//   groups with power-of-two scales, each from the bf16 bits less the scale's exponent by a
//   16-entry byte table (FP4Pow2Codes; on AVX-512 a 32-entry word table, FP4Pow2CodesWide),
//   packed two per byte. FP4RowExponents16 + FP4Pow2ScalesOf16 (AVX-512): the scales of four
//   128-element rows from their groups' largest exponents, reduced as bytes;
//   QuantizeFP4Pow2Row128High (VBMI and GFNI): the codes of such a row, bfloat16 or float16
//   (from its own bits), each in its sum's high byte (FP4RowExponents16 and FP4Pow2ScalesOf16 take
//   float16 rows too, kF16).
//   FP4BytePairs + QuantizeFP4Pow2RowBytes (AVX2): the same codes one byte per value, 32 per
//   vector, by two 16-entry byte tables; FP4RowExponentBytes16 + FP4Pow2ScalesOfBytes16: the
//   scales of four rows as above on 256-bit vectors.
// - HiF8CodesBf16Row (AVX-512 only): HiFloat8 codes of bf16 values times a float32 scale, 32
//   per vector: the products truncated to bf16, then 64-entry exponent tables in registers;
//   HiF8CodesF16RowWords and HiF8CodesF16RowBytes (VBMI) those of float16 values from their
//   own bits and tables.
//   HiF8CodesByTable (other targets): the same codes from an 8,192-entry byte table.
//   HiF8CodesByLanes (AVX2, SSE4): the same codes one byte per value by 16-entry byte
//   shuffles, for rows without NaNs or magnitudes in [2^-23, 2^-15) or from 2^15 (the caller
//   takes the table then); HiF8LaneRow takes float16 rows too, truncated in registers.
//
// All of them are exact lane forms of the scalar rules, which the operators' pages state (with
// links to each encoder's bit-level definition):
// - the epilog's scales and codes: docs/operators/kv_compress_epilog.md, "Scale formulas";
// - the indexer's: docs/operators/indexer_quant_cache.md, "Quantization (bit-exact)".
// None of them depends on the target. They need at least 8 lanes of 16 bits, so the scalar
// target has none of them.
#if defined(KVSCATTER_QUANT_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSCATTER_QUANT_SIMD_INL_H_
#undef KVSCATTER_QUANT_SIMD_INL_H_
#else
#define KVSCATTER_QUANT_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/bytes-inl.h"
#include "core/vbmi.h"
#include "formats/f16-inl.h"
#include "quant/e2m1_buckets.h"
#include "quant/hifloat8_table.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::quant::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// QuantizeE2M1ByBuckets exists where this is 1 (AVX-512 targets).
#undef KVS_E2M1_BUCKETS
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define KVS_E2M1_BUCKETS 1
#else
#define KVS_E2M1_BUCKETS 0
#endif

// QuantizeE2M1ByByteBuckets exists where this is 1 (x86 targets below AVX-512).
#undef KVS_E2M1_BYTE_BUCKETS
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4)
#define KVS_E2M1_BYTE_BUCKETS 1
#else
#define KVS_E2M1_BYTE_BUCKETS 0
#endif

// HiF8CodesBf16Row exists where this is 1 (AVX-512 targets).
#undef KVS_HIF8_BF16
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define KVS_HIF8_BF16 1
#else
#define KVS_HIF8_BF16 0
#endif

// HiF8CodesByLanes exists where this is 1 (AVX2 and SSE4: x86 below AVX-512).
#undef KVS_HIF8_LANES
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3 && HWY_TARGET <= HWY_SSE4
#define KVS_HIF8_LANES 1
#else
#define KVS_HIF8_LANES 0
#endif

#if HWY_TARGET != HWY_SCALAR

// SVE vectors are sizeless types: they cannot be array elements or struct members.
#undef KVS_SIZELESS_VECTORS
#if HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || HWY_TARGET == HWY_SVE_256 || \
    HWY_TARGET == HWY_SVE2_128
#define KVS_SIZELESS_VECTORS 1
#else
#define KVS_SIZELESS_VECTORS 0
#endif

// Reduces eight vectors (one per group) to lanes 0..7 of out (eight results,
// group order): a transpose by interleaving 16-, 32- and 64-bit lanes within
// each 128-bit block leaves every block holding one partial result per group,
// then the blocks are combined. About three single-instruction shuffles per
// group on every x86 target.
template <class D, class Op>
HWY_INLINE void Reduce8(D d, const hn::Vec<D>* m, Op op, hn::TFromD<D>* HWY_RESTRICT out) {
  using T = hn::TFromD<D>;
  const hn::Repartition<std::uint32_t, D> d32;
  const hn::Repartition<std::uint64_t, D> d64;
  const auto level1 = [&](hn::Vec<D> a, hn::Vec<D> b) {
    return op(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));
  };
  const auto level2 = [&](hn::Vec<D> a, hn::Vec<D> b) {
    const auto a32 = hn::BitCast(d32, a), b32 = hn::BitCast(d32, b);
    return op(hn::BitCast(d, hn::InterleaveLower(d32, a32, b32)),
              hn::BitCast(d, hn::InterleaveUpper(d32, a32, b32)));
  };
  const auto a = level2(level1(m[0], m[1]), level1(m[2], m[3]));
  const auto b = level2(level1(m[4], m[5]), level1(m[6], m[7]));
  const auto a64 = hn::BitCast(d64, a), b64 = hn::BitCast(d64, b);
  const auto r = op(hn::BitCast(d, hn::InterleaveLower(d64, a64, b64)),
                    hn::BitCast(d, hn::InterleaveUpper(d64, a64, b64)));
  constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(T);
  HWY_ALIGN T lanes[kMaxLanes];
  hn::Store(r, d, lanes);
  const hn::CappedTag<T, 8> d8;  // one 128-bit block
  auto acc = hn::Load(d8, lanes);
  for (std::size_t i = 8; i < hn::Lanes(d); i += 8) acc = op(acc, hn::Load(d8, lanes + i));
  hn::StoreU(acc, d8, out);
}

// Vector of 16-bit lanes for groups of gs elements: at most gs lanes, so that a
// vector never straddles two groups.
template <std::size_t kGs>
using GroupTag = hn::CappedTag<std::uint16_t, kGs>;

// The smallest magnitude m of a group (zeros included) as the min1 entry that
// E4M3Pow2ScalesByKey8 reads: m - 1, saturated at 0, so that a zero fails every normal threshold.
// The scalar form and the form for eight entries in place.
HWY_INLINE std::uint16_t SaturatedDecrement(std::uint16_t m) {
  return static_cast<std::uint16_t>(m == 0 ? 0 : m - 1);
}
HWY_INLINE void SaturatedDecrement8(std::uint16_t* HWY_RESTRICT min1) {
  const hn::CappedTag<std::uint16_t, 8> d8;
  for (std::size_t k = 0; k < 8; k += hn::Lanes(d8)) {
    hn::StoreU(hn::SaturatedSub(hn::LoadU(d8, min1 + k), hn::Set(d8, std::uint16_t{1})), d8,
               min1 + k);
  }
}

// For groups [0, groups) of gs = kGs consecutive bf16 values at x: amax[g] =
// the largest (bits & 0x7FFF), an order of the magnitudes that puts every NaN
// above infinity, and, with kMin, min1[g] = the smallest (bits & 0x7FFF), zeros
// included, less one and saturated at 0 (as Magnitudes8's). A group holding a
// zero then reads to E4M3Pow2ScalesByKey8 as one with a magnitude below every normal
// threshold: not fast, so the unmasked codes, wrong for zeros, never meet one.
// Both arrays need groups + 8 entries. Needs at least 8 lanes (every target
// but scalar).
template <std::size_t kGs, bool kMin, std::size_t kLanes = kGs>
HWY_INLINE void GroupMagnitudes(const std::uint16_t* HWY_RESTRICT x, std::int64_t groups,
                                std::uint16_t* HWY_RESTRICT amax,
                                std::uint16_t* HWY_RESTRICT min1) {
  const GroupTag<(kLanes < kGs ? kLanes : kGs)> d;
  using V = hn::Vec<decltype(d)>;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(d));
  const V mag = hn::Set(d, std::uint16_t{0x7FFF});
#if KVS_SIZELESS_VECTORS
  // SVE vectors cannot form arrays: reduce each group on its own. Entries up to the next
  // multiple of 8 repeat the last group, as below.
  const std::int64_t padded = (groups + 7) / 8 * 8;
  for (std::int64_t g0 = 0; g0 < padded; ++g0) {
    const std::int64_t g = g0 < groups ? g0 : groups - 1;
    const std::uint16_t* xg = x + g * static_cast<std::int64_t>(kGs);
    V hi = hn::And(hn::LoadU(d, xg), mag);
    V lo = hi;
    for (std::int64_t i = L; i < static_cast<std::int64_t>(kGs); i += L) {
      const V b = hn::And(hn::LoadU(d, xg + i), mag);
      hi = hn::Max(hi, b);
      lo = hn::Min(lo, b);
    }
    amax[g0] = hn::GetLane(hn::MaxOfLanes(d, hi));
    if (kMin) min1[g0] = SaturatedDecrement(hn::GetLane(hn::MinOfLanes(d, lo)));
  }
#else
  const auto max_op = [](auto a, auto b) { return hn::Max(a, b); };
  const auto min_op = [](auto a, auto b) { return hn::Min(a, b); };
  for (std::int64_t g0 = 0; g0 < groups; g0 += 8) {
    V hi[8], lo[8];
    for (int k = 0; k < 8; ++k) {
      // Past the last group, the last group again: its results land in unused
      // entries.
      const std::int64_t g = g0 + k < groups ? g0 + k : groups - 1;
      const std::uint16_t* xg = x + g * static_cast<std::int64_t>(kGs);
      const V a = hn::And(hn::LoadU(d, xg), mag);
      hi[k] = a;
      if (kMin) lo[k] = a;
      for (std::int64_t i = L; i < static_cast<std::int64_t>(kGs); i += L) {
        const V b = hn::And(hn::LoadU(d, xg + i), mag);
        hi[k] = hn::Max(hi[k], b);
        if (kMin) lo[k] = hn::Min(lo[k], b);
      }
    }
    Reduce8(d, hi, max_op, amax + g0);
    if (kMin) {
      Reduce8(d, lo, min_op, min1 + g0);
      SaturatedDecrement8(min1 + g0);
    }
  }
#endif
}

// The power-of-two scales of kv_compress_epilog's fp8_bf16 and fp8_e8m0 modes with round_scale
// (docs/operators/kv_compress_epilog.md, "Scale formulas") and of the indexer's modes fp8 with
// round_scale and mxfp8 (docs/operators/indexer_quant_cache.md, "Quantization (bit-exact)"):
// s = 2^(e - 127), the float32 product max(amax, eps) * f32(1/448) rounded up to a power of two,
// eps = f32(1e-4) but in mode fp8 (none). In integer steps on 16-bit lanes: for a finite
// largest magnitude m (bf16 bits & 0x7FFF) the exponent with the floor is max(k - 8, 105) for
// the key k = (m + 31) >> 7 (see E4M3RowKeys16), and without it k - 8 wherever that is at least
// 8, and below 8 where k - 8 is; the tests take every finite m through both. Why:
// docs/operators/indexer_quant_cache.md, "The power-of-two scales in integer steps".
// kFloor: 105 or 0. E4M3ExpOfKey gives that exponent e,
// E4M3S7OfExp the operand s7 = sub - 7 of E4M3Pow2CodesOfT7, where sub = (e - 127) * 128 + 0x3C00:
// subtracted from a magnitude's bf16 bits, sub divides by s and rebiases the exponent from 127
// to e4m3's 7. s7 is at least 0x30F9 with the floor, and saturates at 0 for e below 8, whose
// groups take no lane form but for all-zero ones, whose codes any operand leaves right.
template <int kFloor, class D, class V = hn::Vec<D>>
HWY_INLINE V E4M3ExpOfKey(D d, V key) {
  using T = hn::TFromD<D>;
  const V e = hn::SaturatedSub(key, hn::Set(d, T{8}));
  if constexpr (kFloor == 0) {
    return e;
  } else {
    return hn::Max(e, hn::Set(d, T{kFloor}));
  }
}
template <class D, class V = hn::Vec<D>>
HWY_INLINE V E4M3S7OfExp(D d, V e) {
  return hn::SaturatedSub(hn::ShiftLeft<7>(e), hn::Set(d, hn::TFromD<D>{0x387}));
}

// The scales above for eight groups, from their largest magnitudes amax and their smallest ones
// min1 as GroupMagnitudes or Magnitudes8Min give them (less one, saturated), in the forms the
// quantizer loads: subw[k] = s7 in both 16-bit halves, as a 32-bit broadcast from memory is a
// plain load; exp8[k] = e (the e8m0 byte; the bf16 scale is e << 7); fast[k] = 1 when
// QuantizeE4M3Pow2RowUnmasked is exact for the group: amax finite, no zero, every v / s at
// least 2^-6 (e4m3-normal), and e at least 8, else 0. Returns whether all eight groups are fast.
// The entries of a group that is not finite, or (kFloor 0) whose exponent is below 8, are not
// to be used: neither is fast, and callers take the second through the scalar formulas of the
// operator pages above unless it is all zero.
template <int kFloor>
HWY_INLINE bool E4M3Pow2ScalesByKey8(const std::uint16_t* HWY_RESTRICT amax,
                                     const std::uint16_t* HWY_RESTRICT min1,
                                     std::uint32_t* HWY_RESTRICT subw,
                                     std::uint8_t* HWY_RESTRICT exp8,
                                     std::uint8_t* HWY_RESTRICT fast) {
  const hn::CappedTag<std::uint32_t, 8> du;
  const hn::Rebind<std::uint16_t, decltype(du)> d16;
  const hn::RebindToSigned<decltype(d16)> di16;
  const hn::Rebind<std::uint8_t, decltype(du)> d8;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(du));
  const auto set = [d16](int v) { return hn::Set(d16, static_cast<std::uint16_t>(v)); };
  bool all = true;
  for (std::int64_t g = 0; g < 8; g += L) {
    const auto a = hn::LoadU(d16, amax + g);
    const auto e = E4M3ExpOfKey<kFloor>(d16, hn::ShiftRight<7>(hn::Add(a, set(31))));
    const auto s7 = E4M3S7OfExp(d16, e);
    const auto s7w = hn::PromoteTo(du, s7);
    hn::StoreU(hn::Or(s7w, hn::ShiftLeft<16>(s7w)), du, subw + g);
    hn::StoreU(hn::TruncateTo(d8, e), d8, exp8 + g);
    // Every nonzero magnitude at least sub + 0x80, and amax finite (min1 + 1 wraps to 0 only
    // from 0xFFFF, which then fails).
    const auto smallest = hn::Add(hn::LoadU(d16, min1 + g), set(1));
    auto ok = hn::And(
        hn::Not(hn::Lt(hn::BitCast(di16, smallest), hn::BitCast(di16, hn::Add(s7, set(0x87))))),
        hn::Lt(hn::BitCast(di16, a), hn::Set(di16, 0x7F80)));
    if constexpr (kFloor < 8) {  // the operand saturates below exponent 8
      ok = hn::And(ok, hn::Gt(hn::BitCast(di16, e), hn::Set(di16, 7)));
    }
    hn::StoreU(hn::TruncateTo(d8, hn::IfThenElseZero(hn::RebindMask(d16, ok), set(1))), d8,
               fast + g);
    all = all && hn::AllTrue(di16, ok);
  }
  return all;
}

// How the e4m3 code forms below take a code, the high byte of a 16-bit lane, down to its low
// byte. kShift: an arithmetic shift. kMultiply: on x86 below AVX-512 the high half of the lane
// times 256 (elsewhere the shift), which runs on the vector multiplier: AMD Zen 2 issues vector
// shifts on one pipe only, and a code takes two there. Which is faster depends on the loop
// around the codes. On AMD Zen 2 the indexer's fp8 and mxfp8 rows measured 1.02-1.04 x faster
// by the multiply, the epilog's fp8_bf16 groups 0.96 x; Intel's AVX2 cores shift and multiply
// on the same two ports. kBytePermute (AVX-512, for a caller that has checked vbmi_usable()):
// the code stays the high byte of its lane, and the row's store takes the high bytes of two
// vectors in order by one VBMI byte permute (StoreHighBytePair) where the two shifts, the pack
// and the lane permute after it take four operations; elsewhere it is kShift.
enum class HighByte { kShift, kMultiply, kBytePermute };

#undef KVS_HIGH_BYTE_PERMUTE
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define KVS_HIGH_BYTE_PERMUTE 1
#else
#define KVS_HIGH_BYTE_PERMUTE 0
#endif

template <HighByte kHigh, class DI, class V = hn::Vec<DI>>
HWY_INLINE V SignedHighByte(DI di, V r) {
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
  if constexpr (kHigh == HighByte::kMultiply) {
    return hn::MulHigh(r, hn::Set(di, hn::TFromD<DI>{256}));
  }
#endif
  (void)di;
  if constexpr (KVS_HIGH_BYTE_PERMUTE && kHigh == HighByte::kBytePermute) return r;
  return hn::ShiftRight<8>(r);
}

#if KVS_HIGH_BYTE_PERMUTE
// Stores the high bytes of a's 32 lanes, then of b's: byte j of the pair is byte 2j + 1 of a:b.
// VBMI's vpermt2b by inline assembly, so that the kernels around it need no target attribute
// beyond Highway's AVX-512 one (a function with one could not inline them); only run it where
// vbmi_usable().
HWY_INLINE void StoreHighBytePair(hn::Vec512<std::int16_t> a, hn::Vec512<std::int16_t> b,
                                  std::uint8_t* HWY_RESTRICT out) {
  const __m512i odd = kvscatter::detail::HWY_NAMESPACE::HighBytesOfWordPairs();
  __m512i bytes = a.raw;
  asm("vpermt2b %2, %1, %0" : "+v"(bytes) : "v"(odd), "v"(b.raw));
  _mm512_storeu_si512(out, bytes);
}
#endif

// The e4m3fn code of each lane of w divided by the power of two whose operand is s7 (see
// E4M3ExpOfKey), as a signed 16-bit value whose low byte is the code (in [-128, 127], so a
// signed narrowing keeps it), from t7: the lane's magnitude bits minus s7, saturating at 0 for
// zeros, at most 0x07E7 (448 in e4m3-biased bf16 bits, plus 7). Its 7 mantissa bits are rounded
// to 3, nearest even, and the sign is the input's. The rounding's +7 rides on the subtraction
// (s7 = sub - 7): where t + 7 carries into bit 4 the result rounds up whatever the parity, so
// bit 4 of t + 7 serves as t's parity bit. The rounded magnitude is built four bits up, where
// the sign can be or-ed in unshifted and one arithmetic shift (SignedHighByte, or its multiply
// form) both lowers the code and extends the sign. The forms below (E4M3Pow2CodesInRange,
// E4M3Pow2CodesUnmasked) differ in how they form t7.
template <HighByte kHigh = HighByte::kShift, class D, class V = hn::Vec<D>>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> E4M3Pow2CodesOfT7(D d, V t7, V w) {
  const hn::RebindToSigned<D> di;
  // 16 * (t7 + bit 4 of t7), below 0x8000 where t7 is at most 0x07E7.
  const auto r = hn::Add(hn::ShiftLeft<4>(t7), hn::And(t7, hn::Set(d, std::uint16_t{0x10})));
  return SignedHighByte<kHigh>(di,
                               hn::BitCast(di, hn::OrAnd(r, w, hn::Set(d, std::uint16_t{0x8000}))));
}

// Stores the low bytes of a pair's lanes in element order, the pair as LoadOrderedPair (below)
// loads it (both of tag d: a vector's type does not give its lane count where vectors are
// sizeless). x86 narrows both in one signed pack (the lanes are in [-128, 127]): on AVX2 the
// loads' order leaves the pack in element order, on AVX-512 one lane permute restores it.
// Elsewhere each vector is narrowed on its own.
template <class D, class V>
HWY_INLINE void StoreCodePair(D d, V a, V b, std::uint8_t* HWY_RESTRICT out) {
  const hn::Rebind<std::int8_t, D> d8;
  hn::StoreU(hn::DemoteTo(d8, a), d8, reinterpret_cast<std::int8_t*>(out));
  hn::StoreU(hn::DemoteTo(d8, b), d8, reinterpret_cast<std::int8_t*>(out) + hn::Lanes(d));
}
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSE4
template <class D>
HWY_INLINE void StoreCodePair(D, hn::Vec128<std::int16_t> a, hn::Vec128<std::int16_t> b,
                              std::uint8_t* HWY_RESTRICT out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_packs_epi16(a.raw, b.raw));
}
#endif
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
template <class D>
HWY_INLINE void StoreCodePair(D, hn::Vec256<std::int16_t> a, hn::Vec256<std::int16_t> b,
                              std::uint8_t* HWY_RESTRICT out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_packs_epi16(a.raw, b.raw));
}
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
template <class D>
HWY_INLINE void StoreCodePair(D, hn::Vec512<std::int16_t> a, hn::Vec512<std::int16_t> b,
                              std::uint8_t* HWY_RESTRICT out) {
  const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  const __m512i packed = _mm512_permutexvar_epi64(order, _mm512_packs_epi16(a.raw, b.raw));
  _mm512_storeu_si512(out, packed);
}
#endif

// Loads the 2 * Lanes(d) 16-bit values at x as a pair whose signed pack holds their low bytes
// in order: on AVX2 by LoadCrossedPair (src/core/bytes-inl.h), so that the pack, which interleaves
// a and b by block, needs no 64-bit lane permute after it (see StoreCodePair). Elsewhere two
// plain loads.
template <class D>
HWY_INLINE void LoadOrderedPair(D d, const std::uint16_t* HWY_RESTRICT x, hn::Vec<D>& a,
                                hn::Vec<D>& b) {
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  if constexpr (sizeof(hn::Vec<D>) == 32) {
    __m256i lo, hi;
    detail::HWY_NAMESPACE::LoadCrossedPair(x, lo, hi);
    a = hn::Vec<D>{lo};
    b = hn::Vec<D>{hi};
    return;
  }
#endif
  a = hn::LoadU(d, x);
  b = hn::LoadU(d, x + hn::Lanes(d));
}

// A row of n bf16 values (n a multiple of 32) whose 32-groups use the E4M3Pow2ScalesByKey8 operands
// subw[g] (kPerGroup) or all subw[0], each vector's codes made by codes(d, bits, s7, low): one
// of the forms of E4M3Pow2CodesOfT7 below. low starts with every lane 0xFFFF; a
// form that checks its lanes keeps there the smallest t7 it saw, and with kCheck the row
// returns whether one was below 0x87 (otherwise false). Each pair of vectors is loaded by
// LoadOrderedPair, so that on AVX2 its pack needs no permute: on a CPU whose permutes take
// about two cycles of its shuffle pipes (AMD Zen 2), kv_compress_epilog's fp8 modes and the
// indexer's fp8 and mxfp8 rows measured 1.08-1.17 x faster so at 1,024 tokens.
template <bool kPerGroup, bool kCheck = false, HighByte kHigh = HighByte::kShift, class Codes>
HWY_INLINE bool QuantizeE4M3Pow2RowBy(Codes codes, const std::uint16_t* HWY_RESTRICT x,
                                      std::uint8_t* HWY_RESTRICT out, std::int64_t n,
                                      const std::uint32_t* HWY_RESTRICT subw) {
  const GroupTag<32> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Repartition<std::uint32_t, decltype(d)> d32;
  const hn::Rebind<std::int8_t, decltype(d)> d8;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(d));
  const auto s7 = [&](std::int64_t i) {
    return hn::BitCast(d, hn::Set(d32, subw[kPerGroup ? i / 32 : 0]));
  };
  const auto row_s7 = s7(0);
  auto low = hn::Set(d, std::uint16_t{0xFFFF});
  std::int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    hn::Vec<decltype(d)> wa, wb;
    LoadOrderedPair(d, x + i, wa, wb);
    const auto a = codes(d, wa, kPerGroup ? s7(i) : row_s7, low);
    const auto b = codes(d, wb, kPerGroup ? s7(i + L) : row_s7, low);
#if KVS_HIGH_BYTE_PERMUTE
    if constexpr (kHigh == HighByte::kBytePermute) {
      StoreHighBytePair(a, b, out + i);
      continue;
    }
#endif
    StoreCodePair(di, a, b, out + i);
  }
  if (i < n) {  // an odd number of vectors
    auto a = codes(d, hn::LoadU(d, x + i), kPerGroup ? s7(i) : row_s7, low);
    if constexpr (KVS_HIGH_BYTE_PERMUTE && kHigh == HighByte::kBytePermute) {
      a = hn::ShiftRight<8>(a);
    }
    hn::StoreU(hn::DemoteTo(d8, a), d8, reinterpret_cast<std::int8_t*>(out + i));
  }
  if (!kCheck) return false;
  return !hn::AllFalse(d, hn::Lt(low, hn::Set(d, std::uint16_t{0x87})));
}

// FP4 (e2m1) by thresholds. The code of v in a group with multiplier m (a bf16 value as f32,
// finite, >= 0) is e2m1_RNE(clamp(bf16_RNE(v * m), -6, 6)) (hifloat8_fp4 in
// docs/operators/kv_compress_epilog.md, "Scale formulas"): a monotone function of |v|, so
// its magnitude is the number of thresholds |v| reaches. thr[k * stride + g] = (the smallest
// bf16 magnitude bits whose code is at least k + 1) - 1, for k = 0..6 and every group g. On
// 16-bit lanes that turns the multiply, the two roundings and the clamp into seven compares.
HWY_INLINE void E2M1Thresholds(const float* HWY_RESTRICT mult, std::int64_t groups,
                               std::uint16_t* HWY_RESTRICT thr, std::int64_t stride) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<std::uint16_t, decltype(df)> d16;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  // The smallest bf16 that rounds (nearest even) to an e2m1 code >= k + 1: just above 0.25,
  // 0.75, just above 1.25, 1.75, just above 2.5, 3.5, just above 5 (ties go to even codes).
  constexpr std::uint32_t kLeast[7] = {0x3E81, 0x3F40, 0x3FA1, 0x3FE0, 0x4021, 0x4060, 0x40A1};
  for (std::int64_t g = 0; g < groups; g += L) {
    const auto m = hn::LoadU(df, mult + g);
    for (int k = 0; k < 7; ++k) {
      // bf16_RNE(p) >= least  <=>  p above the midpoint below it (or at it, if least is even).
      const std::uint32_t mid = (kLeast[k] << 16) - 0x8000u;
      const auto p = hn::BitCast(df, hn::Set(du, mid));
      const auto above = hn::BitCast(df, hn::Set(du, (kLeast[k] & 1) ? mid : mid - 1));
      // Candidate: p / m truncated to bf16 (m = 0 gives infinity: no finite |v| reaches it);
      // the threshold is the candidate or the next bf16, whichever first passes (v * m is exact).
      const auto t0 = hn::ShiftRight<16>(hn::BitCast(du, hn::Div(p, m)));
      const auto prod = hn::Mul(hn::BitCast(df, hn::ShiftLeft<16>(t0)), m);
      const auto passes = hn::RebindMask(du, hn::Gt(prod, above));
      hn::StoreU(hn::TruncateTo(d16, hn::Sub(t0, hn::IfThenElseZero(passes, hn::Set(du, 1u)))), d16,
                 thr + k * stride + g);
    }
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// Packs FP4 codes (16-bit lanes, 16 elements per vector) two per byte, element 2i in the low
// nibble: a multiply-add of each lane pair by (1, 16) forms the byte in a 32-bit lane, then two
// packs and one lane permute narrow four vectors (64 elements) to 32 bytes in order, where one
// truncation per vector would take three shuffles.
HWY_INLINE __m256i E2M1NibbleBytes(__m256i p01, __m256i p23) {
  const __m256i bytes = _mm256_packus_epi16(p01, p23);  // dwords: 0-3 of each input, then 4-7
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
HWY_INLINE __m256i E2M1NibblePairs(hn::Vec256<std::int16_t> a, hn::Vec256<std::int16_t> b) {
  const __m256i w = _mm256_set1_epi32(0x00100001);
  return _mm256_packs_epi32(_mm256_madd_epi16(a.raw, w), _mm256_madd_epi16(b.raw, w));
}
HWY_INLINE void StoreE2M1Nibbles(hn::Vec256<std::int16_t> c0, hn::Vec256<std::int16_t> c1,
                                 std::uint8_t* HWY_RESTRICT out) {
  const __m256i p = E2M1NibblePairs(c0, c1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm256_castsi256_si128(E2M1NibbleBytes(p, p)));
}
#endif

// A group's kGs FP4 codes, as codes(i) gives them one vector of tag di (signed 16-bit lanes)
// from element i on, packed two per byte (element 2i in the low nibble) into out. The tag is
// the caller's: on SVE a capped tag's vectors have the type of full ones. 256-bit vectors go
// four to a store, paired two at a time (fewer values live at once: AVX2 has 16 registers).
template <std::size_t kGs, class DI, class Codes>
HWY_INLINE void StoreE2M1Group(DI di, const Codes& codes, std::uint8_t* HWY_RESTRICT out) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if constexpr (kGs % 32 == 0 && std::is_same_v<hn::Vec<DI>, hn::Vec256<std::int16_t>>) {
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(kGs); i += 64) {
      if constexpr (kGs >= 64) {
        const __m256i p01 = E2M1NibblePairs(codes(i), codes(i + 16));
        const __m256i p23 = E2M1NibblePairs(codes(i + 32), codes(i + 48));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i / 2), E2M1NibbleBytes(p01, p23));
      } else {
        StoreE2M1Nibbles(codes(i), codes(i + 16), out + i / 2);
      }
    }
    return;
  }
#endif
  const hn::Repartition<std::uint32_t, DI> d32;
  const hn::Rebind<std::uint8_t, decltype(d32)> d8;
  const auto L = static_cast<std::int64_t>(hn::Lanes(di));
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(kGs); i += L) {
    const auto pairs = hn::BitCast(d32, codes(i));
    hn::StoreU(hn::TruncateTo(d8, hn::Or(pairs, hn::ShiftRight<12>(pairs))), d8, out + i / 2);
  }
}

// FP4 codes of the kGs bf16 values at x with the E2M1Thresholds entries of their group
// (thr[k * stride], k = 0..6), packed two per byte, element 2i in the low nibble. At most 16
// lanes: on AVX-512 each compare would yield a mask register that costs one more instruction
// to turn into a vector, which made 32 lanes slower than 16.
template <std::size_t kGs>
HWY_INLINE void QuantizeE2M1Group(const std::uint16_t* HWY_RESTRICT x,
                                  std::uint8_t* HWY_RESTRICT out,
                                  const std::uint16_t* HWY_RESTRICT thr, std::int64_t stride) {
  const GroupTag<(kGs < 16 ? kGs : 16)> d;
  const hn::RebindToSigned<decltype(d)> di;
  using VI = hn::Vec<decltype(di)>;
#if KVS_SIZELESS_VECTORS  // SVE vectors cannot form arrays: broadcast each threshold in place
  const auto t = [&](int k) { return hn::Set(di, static_cast<std::int16_t>(thr[k * stride])); };
#else
  VI tv[7];
  for (int k = 0; k < 7; ++k) tv[k] = hn::Set(di, static_cast<std::int16_t>(thr[k * stride]));
  const auto t = [&](int k) { return tv[k]; };
#endif
  const auto mag = hn::Set(d, std::uint16_t{0x7FFF});
  const auto eight = hn::Set(d, std::uint16_t{8});
  const auto codes = [&](std::int64_t i) {
    const auto w = hn::LoadU(d, x + i);
    const VI a = hn::BitCast(di, hn::And(w, mag));
    // Each reached threshold is a -1 lane; the sign goes to bit 3.
    VI count = hn::VecFromMask(di, hn::Gt(a, t(0)));
    for (int k = 1; k < 7; ++k) count = hn::Add(count, hn::VecFromMask(di, hn::Gt(a, t(k))));
    return hn::Sub(hn::BitCast(di, hn::And(hn::ShiftRight<12>(w), eight)), count);
  };
  StoreE2M1Group<kGs>(di, codes, out);
}

#if KVS_E2M1_BYTE_BUCKETS
// QuantizeE2M1ByBuckets for targets without vpermw, by the byte tables of src/quant/e2m1_buckets.h
// (16-entry byte lookups, pshufb): a lookup, a compare and a subtraction per threshold a bucket
// of 64 patterns can hold (two) plus one lookup for the count below, where the thresholds take
// seven compares and seven additions. Groups of kGs (16, 32 or 64); refused groups are skipped
// (listed in rest). kBounded as for QuantizeE2M1ByBuckets.
template <std::size_t kGs, bool kBounded>
HWY_INLINE std::int64_t QuantizeE2M1ByByteBuckets(const std::uint16_t* HWY_RESTRICT x,
                                                  std::uint8_t* HWY_RESTRICT out,
                                                  std::int64_t groups,
                                                  const float* HWY_RESTRICT mult,
                                                  const std::uint16_t* HWY_RESTRICT amax,
                                                  std::int64_t* HWY_RESTRICT rest) {
  const GroupTag<16> d;  // never straddles a group
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Repartition<std::uint8_t, decltype(d)> d8;
  const hn::Repartition<std::int8_t, decltype(d)> di8;
  const detail::E2M1Buckets& tables = detail::e2m1_buckets();
  const auto mag = hn::Set(d, std::uint16_t{0x7FFF});
  const auto eight = hn::Set(d, std::uint16_t{8});
  std::int64_t left = 0;
  for (std::int64_t g = 0; g < groups; ++g) {
    std::uint32_t j = 0, base = 0;
    std::uint32_t mb = 0;
    std::memcpy(&mb, mult + g, sizeof(mb));
    if (HWY_UNLIKELY(!detail::e2m1_byte_bucket_params(tables, mb >> 16, j, base) ||
                     (kBounded && amax[g] > base * 64u + 1023u))) {
      rest[left++] = g;
      continue;
    }
    const auto lo = hn::BitCast(di8, hn::LoadDup128(d8, tables.byte_lo[j]));
    const auto hi = hn::BitCast(di8, hn::LoadDup128(d8, tables.byte_hi[j]));
    const auto below = hn::BitCast(di8, hn::LoadDup128(d8, tables.byte_below[j]));
    const auto b = hn::Set(d, static_cast<std::uint16_t>(base * 64u));
    const std::uint16_t* xg = x + g * static_cast<std::int64_t>(kGs);
    std::uint8_t* og = out + g * static_cast<std::int64_t>(kGs / 2);
    // Each lane's bucket index sits in its low byte, zero in its high byte: the high bytes look
    // up entries 0 (no count, thresholds of at least 3 that no high byte passes: the byte
    // tables of src/quant/e2m1_buckets.h), so they stay zero.
    const auto codes = [&](std::int64_t i) {
      const auto w = hn::LoadU(d, xg + i);
      auto r = hn::SaturatedSub(hn::And(w, mag), b);
      if (!kBounded) r = hn::Min(r, hn::Set(d, std::uint16_t{1023}));
      const auto idx = hn::BitCast(di8, hn::ShiftRight<6>(r));
      const auto rl = hn::BitCast(di8, r);
      const auto up_lo = hn::VecFromMask(di8, hn::Gt(rl, hn::TableLookupBytes(lo, idx)));
      const auto up_hi = hn::VecFromMask(di8, hn::Gt(rl, hn::TableLookupBytes(hi, idx)));
      const auto c = hn::Sub(hn::Sub(hn::TableLookupBytes(below, idx), up_lo), up_hi);
      return hn::Or(hn::BitCast(di, c), hn::BitCast(di, hn::And(hn::ShiftRight<12>(w), eight)));
    };
    StoreE2M1Group<kGs>(di, codes, og);
  }
  return left;
}
#endif  // KVS_E2M1_BYTE_BUCKETS

// ---- Power-of-two e4m3 rows, and their lanes below the normal range ------------------------

// E4M3Pow2CodesOfT7 of the magnitude bits less s7, with no clamp at 448: for a group whose amax
// is finite and whose scale 2^k is E4M3Pow2ScalesByKey8's (the float32 product
// max(amax, eps) * f32(1/448) rounded up to a power of two; the scale rules:
// docs/operators/kv_compress_epilog.md, "Scale formulas", and
// docs/operators/indexer_quant_cache.md, "Quantization (bit-exact)"), no quotient exceeds 448
// there. If amax / 2^k were above 448 it would be at least 450 (bf16), and as f32(1/448) (bits
// 0x3B124925) lies above 1/448 the product would exceed 2^k by more than its rounding, so 2^k
// would not be the power of two it rounds up to.
template <HighByte kHigh = HighByte::kShift, class D, class V = hn::Vec<D>>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> E4M3Pow2CodesInRange(D d, V w, V s7, V& low) {
  const auto t7 = hn::SaturatedSub(hn::And(w, hn::Set(d, std::uint16_t{0x7FFF})), s7);
  low = hn::Min(low, t7);  // dead where the row does not check
  return E4M3Pow2CodesOfT7<kHigh>(d, t7, w);
}

// QuantizeE4M3Pow2RowBy with E4M3Pow2CodesInRange (for groups whose amax is finite), every
// lane exact.
template <bool kPerGroup, HighByte kHigh = HighByte::kShift>
HWY_INLINE void QuantizeE4M3Pow2RowInRange(const std::uint16_t* HWY_RESTRICT x,
                                           std::uint8_t* HWY_RESTRICT out, std::int64_t n,
                                           const std::uint32_t* HWY_RESTRICT subw) {
  QuantizeE4M3Pow2RowBy<kPerGroup, false, kHigh>(
      [](auto d, auto w, auto s7, auto& low)
          HWY_ATTR { return E4M3Pow2CodesInRange<kHigh>(d, w, s7, low); },
      x, out, n, subw);
}

// QuantizeE4M3Pow2RowInRange that also tells whether a lane may need coding apart (an e4m3
// subnormal quotient; docs/operators/indexer_quant_cache.md, "Quantization (bit-exact)"), in place
// of Magnitudes8Min's per-group minimum and its reduction: true when some lane's magnitude is below
// E4M3NormalThreshold of its group (t7 below 0x87 there), zeros included (whose codes are right,
// but which the check does not tell apart). Groups of a finite amax only.
template <bool kPerGroup, HighByte kHigh = HighByte::kShift>
HWY_INLINE bool QuantizeE4M3Pow2RowChecked(const std::uint16_t* HWY_RESTRICT x,
                                           std::uint8_t* HWY_RESTRICT out, std::int64_t n,
                                           const std::uint32_t* HWY_RESTRICT subw) {
  return QuantizeE4M3Pow2RowBy<kPerGroup, true, kHigh>(
      [](auto d, auto w, auto s7, auto& low)
          HWY_ATTR { return E4M3Pow2CodesInRange<kHigh>(d, w, s7, low); },
      x, out, n, subw);
}

// The threshold of the normal test from a subw entry of E4M3Pow2ScalesByKey8: a nonzero
// magnitude (bf16 bits & 0x7FFF) below it has a quotient below e4m3's normal range, where the
// lane forms above are not exact. Up to 0x1007F.
HWY_INLINE std::uint32_t E4M3NormalThreshold(std::uint32_t subw) {
  return ((subw + 7u) & 0xFFFFu) + 0x80u;
}

// Calls f(i) for every i in [0, n) (n a multiple of 32; x finite) whose bf16 magnitude
// x[i] & 0x7FFF is nonzero (kZeros: or zero) and below `threshold`: the lanes a group that
// failed only E4M3Pow2ScalesByKey8's normal test must code apart (their rounding:
// docs/operators/indexer_quant_cache.md, "Quantization (bit-exact)").
template <bool kZeros = false, class F>
HWY_INLINE void ForE4M3LanesBelowNormal(const std::uint16_t* HWY_RESTRICT x, std::int64_t n,
                                        std::uint32_t threshold, F&& f) {
  const GroupTag<32> d;
  const hn::RebindToSigned<decltype(d)> di;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(d));
  // Finite magnitudes are below 0x7F80, so a threshold past 0x7FFF may stop there.
  const auto limit =
      hn::Set(di, static_cast<std::int16_t>(threshold < 0x7FFFu ? threshold : 0x7FFFu));
  const auto mag = hn::Set(d, std::uint16_t{0x7FFF});
  for (std::int64_t i = 0; i < n; i += L) {
    const auto m = hn::BitCast(di, hn::And(hn::LoadU(d, x + i), mag));
    const auto below =
        kZeros ? hn::Lt(m, limit) : hn::And(hn::Gt(m, hn::Zero(di)), hn::Lt(m, limit));
    if (hn::AllFalse(di, below)) continue;
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3 && HWY_TARGET <= HWY_SSE4
    // Two bits a lane, from the mask's bytes: Highway narrows a 16-bit lane mask to one bit a
    // lane by pext, which AMD CPUs before Zen 3 run in microcode: on Zen 2 that took a few
    // hundred cycles a call.
    const hn::Repartition<std::uint8_t, decltype(di)> dm;
    const auto mask = hn::MaskFromVec(hn::BitCast(dm, hn::VecFromMask(di, below)));
    constexpr int kStep = 1;  // log2 of the bits a lane takes
#else
    const auto dm = di;
    const auto mask = below;
    constexpr int kStep = 0;
#endif
    std::uint8_t bits[HWY_MAX_BYTES / 8 + 8] = {};
    hn::StoreMaskBits(dm, mask, bits);
    // At most 32 lanes (GroupTag<32>): their bits fit one word, visited set bit by set bit.
    std::uint64_t word = 0;
    std::memcpy(&word, bits, sizeof(word));
    if constexpr (kStep == 1) word &= 0x5555555555555555u;
    for (; word != 0; word &= word - 1) f(i + (std::countr_zero(word) >> kStep));
  }
}

#if KVS_E2M1_BUCKETS
// FP4 codes of 32 bf16 values w by the bucket entries e of their group (src/quant/e2m1_buckets.h)
// and b64 = its first bucket * 64 in every lane: 2r from the doubled magnitude (the doubling
// drops the sign), the entry plus 2r, the sign or-ed into bit 15, then the top four bits.
// kClamp false: the caller knows that no magnitude lies past the group's bucket 31.
template <bool kClamp>
HWY_INLINE __m512i E2M1BucketCodes(__m512i w, __m512i e, __m512i b64) {
  __m512i r2 = _mm512_subs_epu16(_mm512_add_epi16(w, w), b64);
  if (kClamp) r2 = _mm512_min_epu16(r2, _mm512_set1_epi16(2046));
  const __m512i s = _mm512_add_epi16(_mm512_permutexvar_epi16(_mm512_srli_epi16(r2, 6), e), r2);
  // s | (w & 0x8000)
  return _mm512_srli_epi16(
      _mm512_ternarylogic_epi32(s, w, _mm512_set1_epi16(static_cast<short>(0x8000)), 0xF8), 12);
}

// FP4 codes of the groups of kGs (32 or 64) bf16 values at x, packed two per byte, element 2i in
// the low nibble, the sign in bit 3 of each nibble, group g at out + g * kGs / 2, by the bucket
// tables that params(g, entry, b64) gives group g: its table and its first bucket * 64 in both
// halves of a 32-bit word (one 32-bit broadcast per group). Four vectors narrow together (see
// StoreFP4Nibbles4) where one vpmovdb per vector takes two operations. vpermw has no portable
// Highway form in this version, so this is written for AVX-512 directly. kClamp: as
// E2M1BucketCodes.
template <std::size_t kGs, bool kClamp, class Params>
HWY_INLINE void E2M1BucketGroups(const std::uint16_t* HWY_RESTRICT x,
                                 std::uint8_t* HWY_RESTRICT out, std::int64_t groups,
                                 const Params& params) {
  static_assert(kGs == 32 || kGs == 64, "whole vectors of 32 values, four per step");
  constexpr std::int64_t kPer = static_cast<std::int64_t>(kGs / 32);  // vectors per group
  constexpr std::int64_t kStep = 4 / kPer;                            // groups per four vectors
  const __m512i weights = _mm512_set1_epi32(0x00100001);  // even + 16 * odd
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const std::uint16_t* entry[kStep];
  std::uint32_t b64[kStep];
  // Pairs of codes (vector v of the step) as bytes in 32-bit lanes.
  const auto pairs = [&](const std::uint16_t* xs, std::int64_t v) {
    const std::int64_t k = v / kPer;
    const __m512i c =
        E2M1BucketCodes<kClamp>(_mm512_loadu_si512(xs + 32 * v), _mm512_load_si512(entry[k]),
                                _mm512_set1_epi32(static_cast<int>(b64[k])));
    return _mm512_madd_epi16(c, weights);
  };
  std::int64_t g = 0;
  for (; g + kStep <= groups; g += kStep) {
    for (int k = 0; k < kStep; ++k) params(g + k, entry[k], b64[k]);
    const std::uint16_t* xs = x + g * static_cast<std::int64_t>(kGs);
    const __m512i p01 = _mm512_packs_epi32(pairs(xs, 0), pairs(xs, 1));
    const __m512i p23 = _mm512_packs_epi32(pairs(xs, 2), pairs(xs, 3));
    // Block b of the bytes holds dwords 4b..4b+3 of the four vectors in turn.
    _mm512_storeu_si512(out + g * static_cast<std::int64_t>(kGs / 2),
                        _mm512_permutexvar_epi32(order, _mm512_packus_epi16(p01, p23)));
  }
  for (; g < groups; ++g) {
    params(g, entry[0], b64[0]);
    const std::uint16_t* xs = x + g * static_cast<std::int64_t>(kGs);
    std::uint8_t* os = out + g * static_cast<std::int64_t>(kGs / 2);
    for (std::int64_t v = 0; v < kPer; ++v) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(os + 16 * v), _mm512_cvtepi32_epi8(pairs(xs, v)));
    }
  }
}

// E2M1BucketGroups for groups whose multipliers (mult[g], bf16 values, finite) the bucket tables
// serve. Returns how many groups they do not serve, listed in rest for the caller, which
// rewrites them (here they get codes by an arbitrary table, so that all vectors take one path).
// kBounded: amax[g] is the largest magnitude (bits & 0x7FFF) of group g, and groups whose amax
// lies past their bucket 31 go to rest (none do where the multiplier is bf16(6 / amax), which
// puts the amax about 620 patterns above bucket 0), so the others need no clamp; the tests'
// sweeps of every magnitude take the clamped form.
template <std::size_t kGs, bool kBounded>
HWY_INLINE std::int64_t QuantizeE2M1ByBuckets(const std::uint16_t* HWY_RESTRICT x,
                                              std::uint8_t* HWY_RESTRICT out, std::int64_t groups,
                                              const float* HWY_RESTRICT mult,
                                              const std::uint16_t* HWY_RESTRICT amax,
                                              std::int64_t* HWY_RESTRICT rest) {
  const detail::E2M1Buckets& tables = detail::e2m1_buckets();
  std::int64_t left = 0;
  E2M1BucketGroups<kGs, !kBounded>(
      x, out, groups,
      [&](std::int64_t g, const std::uint16_t*& entry, std::uint32_t& b64) HWY_ATTR {
        std::uint32_t j = 0, base = 0;
        std::uint32_t mb = 0;
        std::memcpy(&mb, mult + g, sizeof(mb));
        if (HWY_UNLIKELY(!detail::e2m1_bucket_params(tables, mb >> 16, j, base) ||
                         (kBounded && amax[g] > base * 32u + 1023u))) {
          rest[left++] = g;
          j = base = 0;
        }
        entry = tables.entry[j];
        b64 = base * 64u * 0x10001u;
      });
  return left;
}

// The plans of 32 groups from their largest magnitudes (bits & 0x7FFF, 16-bit lanes of a) by the
// amax entries of src/quant/e2m1_buckets.h: each 128-entry lookup of the mantissa takes two
// vpermt2w (which read the index's bits 0..5) and a blend on bit 6.
struct AmaxPlans {
  __m512i scale;      // the scale's bf16 bits
  __m512i table;      // the bucket table: its first index in the flat entry array
  __m512i b64[2];     // the first bucket * 64 in both halves of a 32-bit word, lanes 0-15, 16-31
  __mmask32 outside;  // lanes whose exponent field lies outside [kAmaxMinExp, 254]
};
HWY_INLINE AmaxPlans E2M1AmaxPlans(const detail::E2M1Buckets& t, __m512i a) {
  const __mmask32 upper = _mm512_test_epi16_mask(a, _mm512_set1_epi16(64));
  const auto look = [&](const std::uint16_t* entries) HWY_ATTR {
    const __m512i lo =
        _mm512_permutex2var_epi16(_mm512_load_si512(entries), a, _mm512_load_si512(entries + 32));
    const __m512i hi = _mm512_permutex2var_epi16(_mm512_load_si512(entries + 64), a,
                                                 _mm512_load_si512(entries + 96));
    return _mm512_mask_blend_epi16(upper, lo, hi);
  };
  const __m512i e = _mm512_srli_epi16(a, 7);
  AmaxPlans p;
  // E - kAmaxMinExp (modulo 2^16) above 254 - kAmaxMinExp.
  p.outside =
      _mm512_cmpgt_epu16_mask(_mm512_sub_epi16(e, _mm512_set1_epi16(detail::kAmaxMinExp)),
                              _mm512_set1_epi16(static_cast<short>(254 - detail::kAmaxMinExp)));
  p.scale = _mm512_add_epi16(look(t.amax_scale), _mm512_slli_epi16(e, 7));
  p.table = look(t.amax_table);
  const __m512i b = _mm512_add_epi16(look(t.amax_b64), _mm512_slli_epi16(e, 8));
  const __m512i b0 = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(b));
  const __m512i b1 = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(b, 1));
  p.b64[0] = _mm512_or_si512(b0, _mm512_slli_epi32(b0, 16));
  p.b64[1] = _mm512_or_si512(b1, _mm512_slli_epi32(b1, 16));
  return p;
}

// Up to four 128-bit blocks of 8 maxima, block(0) .. block(n - 1), as one vector (the lanes of
// blocks not loaded undefined).
template <class Block>
HWY_INLINE __m512i AmaxBlocks(int n, const Block& block) {
  __m512i a = _mm512_castsi128_si512(block(0));
  if (n > 1) a = _mm512_inserti32x4(a, block(1), 1);
  if (n > 2) a = _mm512_inserti32x4(a, block(2), 2);
  if (n > 3) a = _mm512_inserti32x4(a, block(3), 3);
  return a;
}

// The plans of groups [0, groups) from their largest magnitudes amax[g] by E2M1AmaxPlans, 32
// groups a vector: the scale's bf16 bits to scale[g], the bucket table to table[g] and its first
// bucket * 64 in both halves of b64[g]. False, with the outputs undefined, when some group lies
// outside the entries' exponents (a zero, a subnormal, an infinity or a NaN in the group, or a
// largest magnitude below 2^-121): the caller then plans the row by the division. amax holds
// whole blocks of 8 entries (as GroupMagnitudes writes them) and is read 8 entries at a time: a
// wider load of entries just stored 8 at a time would wait for those stores to reach the cache,
// behind a streaming call's stores. The outputs take whole vectors (32 entries from each
// multiple of 32 below groups), unmasked for the same reason.
HWY_INLINE bool E2M1PlansOfAmax(const std::uint16_t* HWY_RESTRICT amax, std::int64_t groups,
                                std::uint16_t* HWY_RESTRICT scale,
                                std::uint16_t* HWY_RESTRICT table,
                                std::uint32_t* HWY_RESTRICT b64) {
  const detail::E2M1Buckets& t = detail::e2m1_buckets();
  if (!t.amax_usable) return false;
  for (std::int64_t g = 0; g < groups; g += 32) {
    const std::int64_t live = groups - g < 32 ? groups - g : 32;
    const __m512i a = AmaxBlocks(static_cast<int>((live + 7) / 8), [&](int s) HWY_ATTR {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(amax + g + 8 * s));
    });
    const AmaxPlans p = E2M1AmaxPlans(t, a);
    if ((p.outside & _bzhi_u32(~0u, static_cast<unsigned>(live))) != 0) return false;
    _mm512_storeu_si512(scale + g, p.scale);
    _mm512_storeu_si512(table + g, p.table);
    _mm512_storeu_si512(b64 + g, p.b64[0]);
    _mm512_storeu_si512(b64 + g + 16, p.b64[1]);
  }
  return true;
}

// E2M1PlansOfAmax for `rows` rows (at most 4) of groups each, row r's maxima at amax + r *
// stride and its outputs at the same offsets of scale, table and b64; ok[r] tells whether row r
// was planned. Rows of up to 16 groups share vectors (four rows of up to 8, two of up to 16),
// so the lookups serve 32 groups where a row alone would fill 8 or 16 of its lanes.
HWY_INLINE void E2M1PlansOfAmaxRows(const std::uint16_t* HWY_RESTRICT amax, std::int64_t stride,
                                    int rows, std::int64_t groups,
                                    std::uint16_t* HWY_RESTRICT scale,
                                    std::uint16_t* HWY_RESTRICT table,
                                    std::uint32_t* HWY_RESTRICT b64, bool* HWY_RESTRICT ok) {
  const detail::E2M1Buckets& t = detail::e2m1_buckets();
  if (groups > 16 || !t.amax_usable) {
    for (int r = 0; r < rows; ++r) {
      const std::int64_t k = r * stride;
      ok[r] = E2M1PlansOfAmax(amax + k, groups, scale + k, table + k, b64 + k);
    }
    return;
  }
  // Slot s (a 128-bit block of the vector, 8 groups) holds block s % blocks of row r0 + s /
  // blocks.
  const int blocks = groups > 8 ? 2 : 1;
  const int per = 4 / blocks;  // rows per vector
  // A row's groups among the lanes of its slots; the lanes past them (repeats of its last group)
  // and those of slots no row fills do not count.
  const std::uint32_t row_lanes = _bzhi_u32(~0u, static_cast<unsigned>(groups));
  const auto at = [&](int r0, int s) { return (r0 + s / blocks) * stride + 8 * (s % blocks); };
  for (int r0 = 0; r0 < rows; r0 += per) {
    const int slots = (rows - r0 < per ? rows - r0 : per) * blocks;
    const __m512i a = AmaxBlocks(slots, [&](int s) HWY_ATTR {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(amax + at(r0, s)));
    });
    const AmaxPlans p = E2M1AmaxPlans(t, a);
    for (int v = 0; v < slots / blocks; ++v) {
      ok[r0 + v] = ((p.outside >> (8 * blocks * v)) & row_lanes) == 0;
    }
    // Each slot's 8 entries back to its row (rows that failed get entries nobody reads).
    const auto put = [&](int s, __m128i scs, __m128i tbs, __m256i ws) HWY_ATTR {
      const std::int64_t k = at(r0, s);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(scale + k), scs);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(table + k), tbs);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b64 + k), ws);
    };
    put(0, _mm512_castsi512_si128(p.scale), _mm512_castsi512_si128(p.table),
        _mm512_castsi512_si256(p.b64[0]));
    if (slots > 1) {
      put(1, _mm512_extracti32x4_epi32(p.scale, 1), _mm512_extracti32x4_epi32(p.table, 1),
          _mm512_extracti64x4_epi64(p.b64[0], 1));
    }
    if (slots > 2) {
      put(2, _mm512_extracti32x4_epi32(p.scale, 2), _mm512_extracti32x4_epi32(p.table, 2),
          _mm512_castsi512_si256(p.b64[1]));
    }
    if (slots > 3) {
      put(3, _mm512_extracti32x4_epi32(p.scale, 3), _mm512_extracti32x4_epi32(p.table, 3),
          _mm512_extracti64x4_epi64(p.b64[1], 1));
    }
  }
}

// E2M1BucketGroups with the plans of E2M1PlansOfAmax (every group served, none past bucket 31).
template <std::size_t kGs>
HWY_INLINE void QuantizeE2M1ByAmaxPlans(const std::uint16_t* HWY_RESTRICT x,
                                        std::uint8_t* HWY_RESTRICT out, std::int64_t groups,
                                        const std::uint16_t* HWY_RESTRICT table,
                                        const std::uint32_t* HWY_RESTRICT b64) {
  const std::uint16_t* entries = &detail::e2m1_buckets().entry[0][0];
  E2M1BucketGroups<kGs, false>(
      x, out, groups, [&](std::int64_t g, const std::uint16_t*& entry, std::uint32_t& b) HWY_ATTR {
        entry = entries + table[g];
        b = b64[g];
      });
}
#endif  // KVS_E2M1_BUCKETS

// ---- FP4 codes under power-of-two scales ---------------------------------------------------

// An FP4 format (float4_e2m1, float4_e1m2) under a power-of-two scale 2^(s - 127): the quotient
// y = x * 2^(127 - s) of a bf16 x has the bf16 bits t = a - (s - 127) * 128 (a: x's magnitude
// bits) wherever y is normal, and its code's magnitude (nearest even, saturating) is the
// number of thresholds thr[k] (the largest bits of a y whose code is at most k) that t
// exceeds. The first threshold is tested on its own; the other six lie in the 16 buckets of
// 32 bit patterns from first + kFP4Span on, at most one in each, and entry[i] = 32 * (the
// thresholds below bucket i) + 31 - (the offset in the bucket of the one inside it, 31 for
// none): added to t's offset in its bucket, it carries into bit 5 exactly when t passes that
// threshold. entry[0] is 0 (the lookup's high bytes read it); ok tells the layout holds.
//
// wide[] and bias serve FP4Pow2CodesWide (AVX-512), which looks up the 32-pattern buckets from
// first on in 16-bit entries: with E[b] = 32 * (the thresholds below bucket b) - 32 * b + 31 -
// (the offset in the bucket of the one inside it, 31 for none), E[t >> 5] + t carries exactly
// the code into bits 5 and up, with no separate test of the first threshold. Its operand is
// t + bias, so the entries are rotated: wide[(b + bias / 32) % 32] = E[b] - bias, and
// wide[31], which no bucket uses, is 1: a positive lane below t0g saturates its operand to
// 0xFFFF and reads that entry, so that the sum wraps to 0, code 0 (see FP4WideOperand).
constexpr std::uint16_t kFP4Span = 0xA0;

// The thresholds thr[from..6] against the bucket [lo, lo + size): how many lie below it, how
// many inside, and the offset of the (last) one inside, size - 1 for none: the census each
// table below takes of its buckets.
struct FP4Bucket {
  int below = 0, inside = 0, offset = 0;
};
constexpr FP4Bucket FP4BucketOf(const std::uint16_t* thr, int from, int lo, int size) {
  FP4Bucket b;
  b.offset = size - 1;
  for (int k = from; k < 7; ++k) {
    b.below += thr[k] < lo;
    if (thr[k] >= lo && thr[k] < lo + size) {
      ++b.inside;
      b.offset = thr[k] - lo;
    }
  }
  return b;
}

// The wide entries alone, for buckets of `unit` bit patterns (32 for bfloat16 bits, 256 for
// float16 bits, whose quotients' patterns step 8 times finer) from thresholds thr and the
// largest pattern; smax: the largest scale exponent s a group may have, four buckets a binade.
// carry: the code's unit in the sums, 32 for FP4Pow2CodesWide (the code from bit 5 up) and 256
// for QuantizeFP4Pow2Row128High (the code in each sum's high byte): E[b] = carry * (the
// thresholds below bucket b) - unit * b + carry - 1 - (the offset of the one inside it), so
// that a lane's offset in its bucket (below unit) carries into the code's bit exactly past the
// bucket's threshold, whatever the unit. first: thr[0], which the operands t0g take.
struct FP4Pow2Wide {
  alignas(64) std::uint16_t wide[32] = {};
  std::uint16_t first = 0;
  std::uint16_t bias = 0;
  bool ok = true;
};
constexpr FP4Pow2Wide MakeFP4Pow2Wide(const std::uint16_t* thr, std::uint16_t largest, int emax,
                                      int unit, int smax, int carry) {
  FP4Pow2Wide t;
  t.ok = carry >= unit;
  t.first = thr[0];
  // The bias: a multiple of the unit, at least the largest lane-form t0g, leaving the buckets in
  // use clear of entry 31 and the biased operands of negative lanes below 0x10000.
  const int buckets = (largest - thr[0]) / unit + 1;
  const int t0g_max = thr[0] + (smax - emax - 127) * 4 * unit;
  int bias = (t0g_max + unit - 1) / unit * unit;
  while ((bias / unit) % 32 + buckets > 31 && bias + largest - thr[0] <= 0x7FFF) bias += unit;
  t.ok = t.ok && (bias / unit) % 32 + buckets <= 31 && bias + largest - thr[0] <= 0x7FFF;
  t.bias = static_cast<std::uint16_t>(bias);
  t.wide[31] = 1;
  for (int b = 0; b < buckets; ++b) {
    const FP4Bucket c = FP4BucketOf(thr, 0, thr[0] + unit * b, unit);
    t.ok = t.ok && c.inside <= 1;
    t.wide[(b + bias / unit) % 32] =
        static_cast<std::uint16_t>(carry * c.below - unit * b + carry - 1 - c.offset - bias);
  }
  return t;
}

// The bfloat16 table: the wide entries (buckets of 32) and the byte entries.
struct FP4Pow2Table : FP4Pow2Wide {
  alignas(16) std::uint8_t entry[16] = {};
};

// emax: the format's, which bounds the operand t0g (FP4Pow2Scales8) from above.
constexpr FP4Pow2Table MakeFP4Pow2Table(const std::uint16_t (&thr)[7], std::uint16_t largest,
                                        int emax) {
  FP4Pow2Table t{MakeFP4Pow2Wide(thr, largest, emax, 32, 254, 32)};
  const int from = thr[0] + kFP4Span;
  t.ok = t.ok && thr[1] >= from && largest - from < 16 * 32;
  for (int i = 0; i < 16; ++i) {
    const FP4Bucket c = FP4BucketOf(thr, 1, from + 32 * i, 32);
    t.ok = t.ok && c.inside <= 1;
    t.entry[i] = static_cast<std::uint8_t>(32 * c.below + 31 - c.offset);
  }
  t.ok = t.ok && t.entry[0] == 0;
  return t;
}

// FP4 codes of the 16-bit lanes w of groups whose operand t0g = first + (s - 127) * 128 is at
// least 0 and whose y stay below the table's largest, each as its magnitude plus its sign in
// bit 10 (the packing below moves it to bit 3): t0 = |w| - t0g (saturating) is above 0 past the
// first threshold, t1 = t0 - kFP4Span (saturating) is t's place in the buckets, whose entry is
// looked up by bytes (the index's high byte 0 reads entry[0] = 0 into the lane's high byte).
// Wherever t1 is above 0 its offset in its bucket is w's (every subtrahend is a multiple of 32),
// and where it is 0, entry 0 leaves any offset below the carry: so the offset comes from w,
// with w's sign riding along from bit 15 to bit 10.
template <class D, class V = hn::Vec<D>, class VB>
HWY_INLINE V FP4Pow2Codes(D d, V w, V t0g, VB entries) {
  const hn::Repartition<std::uint8_t, D> d8;
  const V t0 = hn::SaturatedSub(hn::And(w, hn::Set(d, std::uint16_t{0x7FFF})), t0g);
  const V t1 = hn::SaturatedSub(t0, hn::Set(d, kFP4Span));
  const V e = hn::BitCast(d, hn::TableLookupBytes(entries, hn::BitCast(d8, hn::ShiftRight<5>(t1))));
  const V x = hn::Add(e, hn::And(w, hn::Set(d, std::uint16_t{0x801F})));
  return hn::Add(hn::ShiftRight<5>(x), hn::Min(t0, hn::Set(d, std::uint16_t{1})));
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// FP4Pow2Codes by the table's wide entries (a 32-entry word permute), the sign riding along in
// bit 15 (bit 10 after the shift): w - t0g saturated as signed values is exact for a positive
// w at least t0g, and for a negative one gives -32768 plus its magnitude's difference saturated
// at 0; plus the bias (saturating), it has t + bias in its low 15 bits. A positive w below t0g
// gives a negative difference, which plus the bias saturates to 0xFFFF: entry 31, 1, and a sum
// of 0 (code 0, no sign). FP4WideOperand forms that operand u; the sum with the entry of each
// lane's bucket (u >> 5, of which the permute reads the low five bits), shifted down, is the code.
HWY_INLINE __m512i FP4WideOperand(__m512i w, __m512i t0g, __m512i bias) {
  return _mm512_adds_epu16(_mm512_subs_epi16(w, t0g), bias);
}
// FP4WideSum: u plus its bucket's entry, the code from bit 5 up (bit 8 up for the tables of
// carry 256, QuantizeFP4Pow2Row128High).
HWY_INLINE __m512i FP4WideSum(__m512i u, __m512i index, __m512i wide) {
  return _mm512_add_epi16(_mm512_permutexvar_epi16(index, wide), u);
}
HWY_INLINE hn::Vec512<std::uint16_t> FP4Pow2CodesWide(hn::Vec512<std::uint16_t> w,
                                                      hn::Vec512<std::uint16_t> t0g, __m512i wide,
                                                      __m512i bias) {
  const __m512i u = FP4WideOperand(w.raw, t0g.raw, bias);
  return hn::Vec512<std::uint16_t>{
      _mm512_srli_epi16(FP4WideSum(u, _mm512_srli_epi16(u, 5), wide), 5)};
}
#endif

// Packs FP4Pow2Codes' lanes two per byte, element 2i in the low nibble, each nibble's sign in
// its bit 3: one vector (its lanes / 2 bytes), or four (twice its lanes). A pair's codes and
// signs, formed as c0 + 16 * c1 + 1024 * s0 + 16384 * s1, become the byte by or-ing in that
// value shifted right by 7 (the signs to bits 3 and 7) and keeping the low byte.
template <class D, class V>
HWY_INLINE void StoreFP4Nibbles(D, V c, std::uint8_t* HWY_RESTRICT out) {
  const hn::Repartition<std::uint32_t, D> d32;
  const hn::Rebind<std::uint8_t, decltype(d32)> d8;
  const auto p = hn::BitCast(d32, c);
  const auto pair = hn::Or(p, hn::ShiftRight<12>(p));
  hn::StoreU(hn::TruncateTo(d8, hn::Or(pair, hn::ShiftRight<7>(pair))), d8, out);
}
template <class D, class V>
HWY_INLINE void StoreFP4Nibbles4(D d, V c0, V c1, V c2, V c3, std::uint8_t* HWY_RESTRICT out) {
  const std::size_t half = hn::Lanes(d) / 2;
  StoreFP4Nibbles(d, c0, out);
  StoreFP4Nibbles(d, c1, out + half);
  StoreFP4Nibbles(d, c2, out + 2 * half);
  StoreFP4Nibbles(d, c3, out + 3 * half);
}
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// x86 packs bytes instead: a lane's low byte holds its magnitude code and its high byte the sign
// in bit 2, so a multiply-add of the two bytes by (1, 2) forms the nibble in the low byte, and
// after an unsigned pack one by (1, 16) joins each pair; a last pack and one dword permute put
// the four vectors' bytes in order. Six operations per two vectors where 32-bit multiply-adds
// and a separate move of the signs take eight.
HWY_INLINE __m256i FP4SignedPairs(hn::Vec256<std::uint16_t> a, hn::Vec256<std::uint16_t> b) {
  const __m256i sign = _mm256_set1_epi16(0x0201), pair = _mm256_set1_epi16(0x1001);
  const __m256i n = _mm256_packus_epi16(_mm256_maddubs_epi16(a.raw, sign),
                                        _mm256_maddubs_epi16(b.raw, sign));
  return _mm256_maddubs_epi16(n, pair);
}
template <class D>
HWY_INLINE void StoreFP4Nibbles4(D, hn::Vec256<std::uint16_t> c0, hn::Vec256<std::uint16_t> c1,
                                 hn::Vec256<std::uint16_t> c2, hn::Vec256<std::uint16_t> c3,
                                 std::uint8_t* HWY_RESTRICT out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      E2M1NibbleBytes(FP4SignedPairs(c0, c1), FP4SignedPairs(c2, c3)));
}
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
HWY_INLINE __m512i FP4SignedPairs(hn::Vec512<std::uint16_t> a, hn::Vec512<std::uint16_t> b) {
  const __m512i sign = _mm512_set1_epi16(0x0201), pair = _mm512_set1_epi16(0x1001);
  const __m512i n = _mm512_packus_epi16(_mm512_maddubs_epi16(a.raw, sign),
                                        _mm512_maddubs_epi16(b.raw, sign));
  return _mm512_maddubs_epi16(n, pair);
}
// The last step of either: the nibble pairs of four vectors' codes, in the low bytes of the
// 16-bit lanes of p01 (the first two vectors, by blocks) and p23, packed into bytes (block b
// then holds dwords 4b..4b+3 of the four vectors' pairs in turn) and put in order by one dword
// permute.
HWY_INLINE void StoreFP4PairBlocks(__m512i p01, __m512i p23, std::uint8_t* HWY_RESTRICT out) {
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_si512(out, _mm512_permutexvar_epi32(order, _mm512_packus_epi16(p01, p23)));
}
template <class D>
HWY_INLINE void StoreFP4Nibbles4(D, hn::Vec512<std::uint16_t> c0, hn::Vec512<std::uint16_t> c1,
                                 hn::Vec512<std::uint16_t> c2, hn::Vec512<std::uint16_t> c3,
                                 std::uint8_t* HWY_RESTRICT out) {
  StoreFP4PairBlocks(FP4SignedPairs(c0, c1), FP4SignedPairs(c2, c3), out);
}

// The words form's pairs: bytes holding code | sign << 7, element 2i then 2i + 1, joined by
// one multiply-add by (1, 16) into a 16-bit lane below 4096 (the signs in bits 7 and 11), the
// signs moved to bits 3 and 7 by a shift and a ternary-logic select, (l & 0x77) | ((l >> 4) &
// ~0x77): each pair's byte in its lane's low byte, the high byte 0.
HWY_INLINE __m512i FP4NibblePairsOfSignedBytes(__m512i codes) {
  const __m512i l = _mm512_maddubs_epi16(codes, _mm512_set1_epi16(0x1001));
  return _mm512_ternarylogic_epi32(l, _mm512_srli_epi16(l, 4), _mm512_set1_epi16(0x77), 0xE4);
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// GFNI's byte affine transform (a bit matrix applied to each byte: Ice Lake and later, Zen 4;
// every CPU with VBMI but Cannon Lake), for the kernels that run where vbmi_usable() and the
// CPU has GFNI as well.
#undef KVS_VBMI_GFNI_ATTR
#define KVS_VBMI_GFNI_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vbmi,gfni")))

// QuantizeFP4Pow2Row of a row of 128 elements by VBMI and GFNI, with the table of
// MakeFP4Pow2Wide's carry 256 (wide, bias: its vectors), whose sums hold each lane's code in
// bits 8-10 and its sign in bit 15 (bits 11-14 clear). A multishift takes each lane's bucket
// index out of its operand, bits kShift up. The codes are the sums' high bytes: two byte
// permutes gather them (element i in byte i), one affine transform moves each byte's sign from
// bit 7 to bit 3 (the matrix's rows, from output bit 7 down: 0, 0, 0, 0, bit 7, bit 2, bit 1,
// bit 0), one byte multiply-add by (1, 16) joins each pair, and one byte permute narrows the
// pairs: 27 operations a row.
// - bfloat16 rows (kShift 5: buckets of 32 patterns). The table of carry 32 (FP4Pow2CodesWide)
//   left the codes in bits 5 up, which four shifts and four VNNI byte dot products (by (1, 2,
//   16, 32)) joined, and two byte permutes and a blend narrowed: 31 operations, 1.02-1.06 x
//   slower on AMD Zen 5 at 1,024-16,384 tokens. Intel's cores issue vpermt2b as two
//   operations, and this form has three to that one's two; it has not been measured there.
// - The signs were first moved by a shift and a ternary-logic select after the multiply-add
//   (FP4NibblePairsOfSignedBytes, 29 operations), 1.01-1.06 x slower on Zen 5.
// - float16 rows from their own bits (kShift 8): normal-scaled rows (groups whose largest
//   exponent field is 5 to 30) against the thresholds as float16 patterns, in buckets of 256
//   (MakeFP4Pow2Wide's unit 256: float16's quotients step eight times finer than bfloat16's, so
//   each bucket of the bfloat16 table becomes one of 256 patterns and each threshold falls in
//   its own), with t0g = first + (s - 127) * 1024 (FP4Pow2ScalesOf16's kF16). A rounding
//   midpoint is a float16 pattern, so the codes are exact without rounding the values first;
//   zeros and subnormals lie below every such group's t0g (at least 0x400) and code as 0 with
//   their sign. Rounding in registers and the bfloat16 form took 47 operations (1.20-1.29 x
//   slower on AMD Zen 5).
template <int kShift>
KVS_VBMI_GFNI_ATTR HWY_INLINE void QuantizeFP4Pow2Row128High(const std::uint16_t* HWY_RESTRICT x,
                                                             std::uint8_t* HWY_RESTRICT out,
                                                             const std::uint32_t* HWY_RESTRICT t0g,
                                                             __m512i wide, __m512i bias) {
  static_assert(kShift == 5 || kShift == 8, "bfloat16 or float16 buckets");
  // Byte 2j of each 64-bit lane: bits 16j + kShift and up (word j's bucket index).
  const __m512i index_at = _mm512_set1_epi64(0x0030002000100000 + 0x0001000100010001 * kShift);
  const auto sums = [&](int g) KVS_VBMI_GFNI_ATTR {
    const __m512i u = FP4WideOperand(_mm512_loadu_si512(x + 32 * g),
                                     _mm512_set1_epi32(static_cast<int>(t0g[g])), bias);
    return FP4WideSum(u, _mm512_multishift_epi64_epi8(index_at, u), wide);
  };
  const __m512i odd = kvscatter::detail::HWY_NAMESPACE::HighBytesOfWordPairs();
  const __m512i sign_to_bit3 = _mm512_set1_epi64(0x0102048000000000);
  const auto nibbles = [&](__m512i a, __m512i b) KVS_VBMI_GFNI_ATTR {
    const __m512i codes = _mm512_permutex2var_epi8(a, odd, b);
    return _mm512_maddubs_epi16(_mm512_gf2p8affine_epi64_epi8(codes, sign_to_bit3, 0),
                                _mm512_set1_epi16(0x1001));
  };
  const __m512i lo = nibbles(sums(0), sums(1)), hi = nibbles(sums(2), sums(3));
  // Byte i: byte 2i of lo (i < 32) or of hi.
  const __m512i even = _mm512_sub_epi8(odd, _mm512_set1_epi8(1));
  _mm512_storeu_si512(out, _mm512_permutex2var_epi8(lo, even, hi));
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// QuantizeFP4Pow2Row128High<8> without VBMI: the table index and the code bytes by shifts (the
// code | sign << 7 in each lane's low byte), packs where the byte permutes gathered them (each
// pack keeps a 128-bit block's pairs of neighbours together, so the multiply-add still joins
// element 2i with 2i + 1), and one dword permute puts the blocks in order: 34 operations a row.
HWY_INLINE void QuantizeFP4Pow2Row128F16Words(const std::uint16_t* HWY_RESTRICT x,
                                              std::uint8_t* HWY_RESTRICT out,
                                              const std::uint32_t* HWY_RESTRICT t0g, __m512i wide,
                                              __m512i bias) {
  const auto codes = [&](int g) HWY_ATTR {
    const __m512i u = FP4WideOperand(_mm512_loadu_si512(x + 32 * g),
                                     _mm512_set1_epi32(static_cast<int>(t0g[g])), bias);
    return _mm512_srli_epi16(FP4WideSum(u, _mm512_srli_epi16(u, 8), wide), 8);
  };
  const auto nibbles = [&](__m512i a, __m512i b) HWY_ATTR {
    return FP4NibblePairsOfSignedBytes(_mm512_packus_epi16(a, b));
  };
  StoreFP4PairBlocks(nibbles(codes(0), codes(1)), nibbles(codes(2), codes(3)), out);
}
#endif

// FP4 codes of a row of n bf16 values (n a multiple of 32) whose 32-groups g have the
// FP4Pow2Codes operands t0g[g] (in both halves: a 32-bit broadcast from memory is a load alone,
// a 16-bit one also takes a shuffle), packed two per byte into n / 2 bytes at out.
HWY_INLINE void QuantizeFP4Pow2Row(const std::uint16_t* HWY_RESTRICT x,
                                   std::uint8_t* HWY_RESTRICT out, std::int64_t n,
                                   const std::uint32_t* HWY_RESTRICT t0g,
                                   const FP4Pow2Table& table) {
  const GroupTag<32> d;
  const hn::Repartition<std::uint8_t, decltype(d)> d8;
  const hn::Repartition<std::uint32_t, decltype(d)> d32;
  const auto operand = [&](std::int64_t at) HWY_ATTR {
    return hn::BitCast(d, hn::Set(d32, t0g[at / 32]));
  };
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  (void)d8;
  const __m512i wide = _mm512_load_si512(table.wide);
  const __m512i bias = _mm512_set1_epi16(static_cast<std::int16_t>(table.bias));
  const auto codes = [&](std::int64_t at) HWY_ATTR {
    return FP4Pow2CodesWide(hn::LoadU(d, x + at), operand(at), wide, bias);
  };
  for (; i + 4 * L <= n; i += 4 * L) {
    StoreFP4Nibbles4(d, codes(i), codes(i + L), codes(i + 2 * L), codes(i + 3 * L), out + i / 2);
  }
  for (; i < n; i += L) StoreFP4Nibbles(d, codes(i), out + i / 2);
#else
  const auto entries = hn::LoadDup128(d8, table.entry);
  const auto codes = [&](std::int64_t at) HWY_ATTR {
    return FP4Pow2Codes(d, hn::LoadU(d, x + at), operand(at), entries);
  };
  for (; i + 4 * L <= n; i += 4 * L) {
    const auto c0 = codes(i);
    const auto c1 = codes(i + L);
    const auto c2 = codes(i + 2 * L);
    const auto c3 = codes(i + 3 * L);
    StoreFP4Nibbles4(d, c0, c1, c2, c3, out + i / 2);
  }
  for (; i < n; i += L) StoreFP4Nibbles(d, codes(i), out + i / 2);
#endif
}

// The FP4 scales of eight groups from their Maxima8: s = max(m, emax) - emax with m the largest
// exponent field, its byte in scale8[k] and FP4Pow2Codes' operand in both halves of t0g[k]
// (QuantizeFP4Pow2Row). Returns a lane per group, zero where the group takes the lane form: m
// finite, and s at least 4, so that the operand is not negative and every y the codes tell apart
// is normal (a caller ors the results of many calls and tests them once).
using FP4Tag8 = hn::CappedTag<std::uint16_t, 8>;
HWY_INLINE hn::Vec<FP4Tag8> FP4Pow2Scales8(const std::uint16_t* HWY_RESTRICT amax,
                                           std::uint16_t emax, std::uint16_t first,
                                           std::uint8_t* HWY_RESTRICT scale8,
                                           std::uint32_t* HWY_RESTRICT t0g) {
  const FP4Tag8 d;  // eight lanes on every target with vectors
  const hn::Rebind<std::uint8_t, decltype(d)> d8;
  const hn::Repartition<std::uint32_t, decltype(d)> d32;
  const auto m = hn::ShiftRight<7>(hn::LoadU(d, amax));
  const auto s = hn::SaturatedSub(m, hn::Set(d, emax));
  const auto base = static_cast<std::uint16_t>(first - 127 * 128);
  const auto t = hn::Add(hn::ShiftLeft<7>(s), hn::Set(d, base));
  hn::StoreU(hn::ZipLower(d32, t, t), d32, t0g);
  hn::StoreU(hn::ZipUpper(d32, t, t), d32, t0g + hn::Lanes(d32));
  hn::StoreU(hn::TruncateTo(d8, s), d8, scale8);
  // Nonzero where m > 254 or s < 4.
  return hn::Or(hn::SaturatedSub(m, hn::Set(d, std::uint16_t{254})),
                hn::SaturatedSub(hn::Set(d, std::uint16_t{4}), s));
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// The bytewise maxima of eight vectors (of bytes, 256 or 512 bits) transposed into one: word j
// of each 128-bit block takes the vectors' words j and j + 4, then j and j + 2, then all eight,
// so each block ends with one partial maximum per word of the inputs' pairs of groups (the
// callers fold the blocks). Three levels of interleaves where a reduction per vector takes five.
// kMin: the minima instead.
template <bool kMin = false, class V>
HWY_INLINE V ByteMaxTranspose8(const V* v) {
  const hn::DFromV<V> d;
  const auto level = [d](auto dw, V a, V b) HWY_ATTR {
    const auto wa = hn::BitCast(dw, a), wb = hn::BitCast(dw, b);
    const V lo = hn::BitCast(d, hn::InterleaveLower(dw, wa, wb));
    const V hi = hn::BitCast(d, hn::InterleaveUpper(dw, wa, wb));
    if constexpr (kMin) {
      return hn::Min(lo, hi);
    } else {
      return hn::Max(lo, hi);
    }
  };
  const hn::Repartition<std::uint16_t, decltype(d)> d16;
  const hn::Repartition<std::uint32_t, decltype(d)> d32;
  const hn::Repartition<std::uint64_t, decltype(d)> d64;
  const V m0 = level(d32, level(d16, v[0], v[1]), level(d16, v[2], v[3]));
  const V m1 = level(d32, level(d16, v[4], v[5]), level(d16, v[6], v[7]));
  return level(d64, m0, m1);
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// The exponent fields of the largest magnitudes of the sixteen 32-groups of four 128-element
// rows (in row order), as 16-bit lanes for FP4Pow2ScalesOf16. Only the exponent sets an FP4
// scale, so the maxima run on bytes, two groups to a vector: each lane holds one group's
// exponent in its low byte (w >> 7) and the next group's in its high byte (w + w), which halves
// the transposes of the reduction; four rows share its last steps (50 512-bit operations for
// the sixteen groups where the 16-bit maxima of 256-bit halves took about 90 256-bit ones).
// FP4ExponentMaxima16 reduces the eight vectors of those pairs (v[2k], v[2k + 1]: row k).
// kMin: their smallest instead.
template <bool kMin = false>
HWY_INLINE hn::Vec256<std::uint16_t> FP4ExponentMaxima16(const __m512i* v) {
  hn::Vec512<std::uint8_t> b[8];
  for (int k = 0; k < 8; ++k) b[k] = hn::Vec512<std::uint8_t>{v[k]};
  const __m512i m = ByteMaxTranspose8<kMin>(b).raw;
  const __m256i lo = _mm512_castsi512_si256(m), hi = _mm512_extracti64x4_epi64(m, 1);
  const __m256i m4 = kMin ? _mm256_min_epu8(lo, hi) : _mm256_max_epu8(lo, hi);
  const __m128i lo8 = _mm256_castsi256_si128(m4), hi8 = _mm256_extracti128_si256(m4, 1);
  const __m128i m8 = kMin ? _mm_min_epu8(lo8, hi8) : _mm_max_epu8(lo8, hi8);
  return hn::Vec256<std::uint16_t>{_mm256_cvtepu8_epi16(m8)};
}
// A shift, an add and a blend form each pair, where VBMI's multishift would take two
// operations instead of three: 512-bit multishifts share their one port with the transposes'
// shuffles, which the three ops leave alone: the mxfp4 operator measured 2 % faster on AVX-512
// with the three.
// kF16: float16 rows, their largest exponents E as those of the rows rounded to bfloat16 by
// round-to-odd (E + 112), but 255 for infinities and NaNs and 0 (a group that is not fast)
// below E = 5: where the largest magnitude is at least 2^-10 the scale is at least 2^-12
// (float4_e1m2: 2^-10), so every zero or subnormal value of the group codes as 0 with its sign
// (QuantizeFP4Pow2Row128High<8>). Each field is doubled first, which drops the sign: two
// operations more per pair of vectors.
template <bool kF16 = false>
HWY_INLINE hn::Vec256<std::uint16_t> FP4RowExponents16(const std::uint16_t* const* r) {
  __m512i v[8];
  for (int k = 0; k < 8; ++k) {
    const std::uint16_t* g = r[k / 2] + 64 * (k % 2);
    const __m512i lo = _mm512_loadu_si512(g), hi = _mm512_loadu_si512(g + 32);
    if constexpr (kF16) {
      v[k] = _mm512_mask_blend_epi8(0x5555555555555555ull,
                                    _mm512_srli_epi16(_mm512_add_epi16(hi, hi), 3),
                                    _mm512_srli_epi16(_mm512_add_epi16(lo, lo), 11));
    } else {
      v[k] = _mm512_mask_blend_epi8(0x5555555555555555ull, _mm512_add_epi16(hi, hi),
                                    _mm512_srli_epi16(lo, 7));
    }
  }
  const __m256i e = FP4ExponentMaxima16(v).raw;
  if constexpr (!kF16) {
    return hn::Vec256<std::uint16_t>{e};
  } else {
    const __m256i rebiased = _mm256_maskz_add_epi16(
        _mm256_cmpge_epu16_mask(e, _mm256_set1_epi16(5)), e, _mm256_set1_epi16(112));
    return hn::Vec256<std::uint16_t>{_mm256_mask_blend_epi16(
        _mm256_cmpeq_epi16_mask(e, _mm256_set1_epi16(31)), rebiased, _mm256_set1_epi16(255))};
  }
}

// Sixteen groups' operands (16-bit lanes) into both halves of operand32's entries by one word
// permute, and their scale bytes (16-bit lanes at most 255) into bytes16.
HWY_INLINE void StoreScales16(__m256i operand, __m256i scale,
                              std::uint32_t* HWY_RESTRICT operand32,
                              std::uint8_t* HWY_RESTRICT bytes16) {
  const __m512i twice = _mm512_setr_epi32(0x00000, 0x10001, 0x20002, 0x30003, 0x40004, 0x50005,
                                          0x60006, 0x70007, 0x80008, 0x90009, 0xA000A, 0xB000B,
                                          0xC000C, 0xD000D, 0xE000E, 0xF000F);
  _mm512_storeu_si512(operand32, _mm512_permutexvar_epi16(twice, _mm512_castsi256_si512(operand)));
  const __m128i bytes =
      _mm_packus_epi16(_mm256_castsi256_si128(scale), _mm256_extracti128_si256(scale, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes16), bytes);
}

// FP4Pow2Scales8 for sixteen groups from their exponent fields m. kF16: the operands for
// QuantizeFP4Pow2Row128High<8>, first + (s - 127) * 1024 with first a float16 pattern.
template <bool kF16 = false>
HWY_INLINE __m256i FP4Pow2ScalesOf16(hn::Vec256<std::uint16_t> m, std::uint16_t emax,
                                     std::uint16_t first, std::uint8_t* HWY_RESTRICT scale16,
                                     std::uint32_t* HWY_RESTRICT t0g) {
  const auto set = [](int v) HWY_ATTR { return _mm256_set1_epi16(static_cast<std::int16_t>(v)); };
  constexpr int kShift = kF16 ? 10 : 7;
  const __m256i s = _mm256_subs_epu16(m.raw, set(emax));
  const __m256i t = _mm256_add_epi16(_mm256_slli_epi16(s, kShift), set(first - (127 << kShift)));
  StoreScales16(t, s, t0g, scale16);
  // Nonzero where m > 254 or s < 4.
  return _mm256_or_si256(_mm256_subs_epu16(m.raw, set(254)), _mm256_subs_epu16(set(4), s));
}

// Mode mxfp8's scales (docs/operators/indexer_quant_cache.md, "Quantization (bit-exact)") of
// four 128-element rows from one byte per value. A group's scale
// exponent (E4M3Pow2ScalesByKey8's e) is max(((m + 31) >> 7) - 8, 105) for its largest magnitude m
// (bf16 bits & 0x7FFF), finite: f32(m * f32(1/448)) has a nonzero mantissa exactly where m's
// mantissa is above 96 (1.75 x 2^k times f32(1/448) rounds to 2^(k - 8) exactly), which the 31
// carries into the exponent field, and the 1e-4 floor is the 105. The key min((m + 31) >> 7, 255)
// is monotone in m, so a group's largest key is its largest magnitude's: the maxima run on bytes,
// two groups to a vector, as FP4RowExponents16's do (the doubling drops the sign, the saturating
// add caps the key at 255, which marks a group that may not be finite). The same bytes give
// each group its smallest key by the same transposes: a key k means an exponent field of at
// least k - 1, so keys of at least e - 5 leave every quotient e4m3-normal (and no lane zero).
// One smallest key per group rather than per pair of rows, compared in the same vector as the
// scales, flags fewer than half as many rows (about 1 % of the bench's normally distributed
// rows, where a pair's test flagged 3 %) and leaves no scalar step (a horizontal minimum, a move
// to a general register and a broadcast back) in the chain from the loads to the test: mxfp8
// rows 1.07-1.08 x faster at 1,024-16,384 tokens (AMD Zen 5).
// kF16: float16 rows, keyed as the rows rounded to bfloat16 by round-to-odd would be. For a
// normal float16 magnitude h (exponent field E, mantissa M) the rounded value's key is E + 112
// plus one where M > 768 (where its seven kept mantissa bits with the sticky bit exceed 96), that
// is ((h + 255) >> 10) + 112; the bytes hold (h + 255) >> 7, whose extremes give the keys by a
// shift. A largest byte from 0xF9 on (magnitudes from 61,472 on, infinities and NaNs, which the
// bytes do not tell apart) reads as key 255, the general path; one below 16 (subnormals and zeros
// among them) gives a key of at most 113, and so the floor's exponent 105, as the rounded value's
// key does. A smallest byte below 16 (a zero or a subnormal, which the float16 codes cannot take,
// or a magnitude below 1.07e-4) reads as key 0, which fails the normal test.
struct E4M3RowKeys {
  hn::Vec256<std::uint16_t> max;  // the sixteen groups' largest keys, in row order
  hn::Vec256<std::uint16_t> min;  // and their smallest
};
template <bool kF16 = false>
HWY_INLINE E4M3RowKeys E4M3RowKeys16(const std::uint16_t* const* r) {
  const __m512i carry = _mm512_set1_epi16(kF16 ? 510 : 62);  // 255 or 31, doubled
  const auto key = [&](const std::uint16_t* at) HWY_ATTR {
    const __m512i w = _mm512_loadu_si512(at);
    return _mm512_adds_epu16(_mm512_add_epi16(w, w), carry);  // the key in the high byte
  };
  __m512i v[8];
  for (int k = 0; k < 8; ++k) {
    const std::uint16_t* g = r[k / 2] + 64 * (k % 2);
    v[k] = _mm512_mask_blend_epi8(0x5555555555555555ull, key(g + 32),
                                  _mm512_srli_epi16(key(g), 8));
  }
  E4M3RowKeys out;
  out.max = FP4ExponentMaxima16(v);
  out.min = FP4ExponentMaxima16<true>(v);
  if constexpr (kF16) {
    const auto set = [](int v) HWY_ATTR { return _mm256_set1_epi16(static_cast<std::int16_t>(v)); };
    const auto keys = [&](__m256i b)
                          HWY_ATTR { return _mm256_add_epi16(_mm256_srli_epi16(b, 3), set(112)); };
    const __m256i hi = out.max.raw, lo = out.min.raw;
    out.max.raw =
        _mm256_mask_blend_epi16(_mm256_cmplt_epu16_mask(hi, set(0xF9)), set(255), keys(hi));
    out.min.raw = _mm256_maskz_mov_epi16(_mm256_cmpge_epu16_mask(lo, set(16)), keys(lo));
  }
  return out;
}

// E4M3Pow2ScalesByKey8<105>'s subw and exp8 for the sixteen groups of E4M3RowKeys16. Returns a bit
// per group (bit 4r + j: group j of row r), set where the group is finite and every lane of it
// stays e4m3-normal: there the unmasked form is exact; and in bits 16 up one per group set
// where its largest key is below 255 (finite): the entries of those groups are the ones
// E4M3Pow2ScalesByKey8 gives, and the unmasked form is exact for each of their lanes at or above
// E4M3NormalThreshold.
HWY_INLINE unsigned E4M3ScalesOfKeys16(const E4M3RowKeys& keys, std::uint32_t* HWY_RESTRICT subw,
                                       std::uint8_t* HWY_RESTRICT exp16) {
  const auto set = [](int v) HWY_ATTR { return _mm256_set1_epi16(static_cast<std::int16_t>(v)); };
  const hn::Full256<std::uint16_t> d16;
  const __m256i g = keys.max.raw;
  const hn::Vec256<std::uint16_t> ev = E4M3ExpOfKey<105>(d16, keys.max);
  const __m256i e = ev.raw;
  // E4M3Pow2CodesOfT7's operand in both halves by one word permute.
  StoreScales16(E4M3S7OfExp(d16, ev).raw, e, subw, exp16);
  // Each group's smallest key, plus 5, against its e; its largest key below 255.
  const __mmask16 finite = _mm256_cmplt_epu16_mask(g, set(255));
  const __mmask16 pass =
      _mm256_mask_cmple_epu16_mask(finite, e, _mm256_add_epi16(keys.min.raw, set(5)));
  return static_cast<unsigned>(pass) | static_cast<unsigned>(finite) << 16;
}
#endif

// ---- FP4 codes one byte per value (AVX2) ---------------------------------------------------

// The byte form of the FP4 codes exists where this is 1 (AVX2, where FP4Pow2Codes takes ten
// 16-bit operations per 16 values and their packing two and a half more).
#undef KVS_FP4_BYTES
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
#define KVS_FP4_BYTES 1
#else
#define KVS_FP4_BYTES 0
#endif

#if KVS_FP4_BYTES
// An FP4 format's thresholds (those of MakeFP4Pow2Table) in 16 buckets of 2^shift bit patterns
// from the first threshold on, at most one in each: t = |x| - t0g (saturating: y's bits less the
// first threshold, as in FP4Pow2Codes) lies in bucket t >> shift at offset t & (2^shift - 1),
// and its code's magnitude is below[bucket] + (offset > th[bucket]), th the offset of the
// threshold inside (2^shift - 1 for none). A lane below the first threshold saturates to t = 0:
// bucket 0, whose threshold is the first one at offset 0, so code 0. below8 holds below + 8,
// the sign's bit of the nibble, which positive lanes take off again. float4_e2m1 takes buckets
// of 64 (ten of them hold its range), float4_e1m2 buckets of 32 (all 16).
// With lead (where the range leaves a bucket to spare: float4_e2m1) the buckets start one
// bucket below the first threshold and the operand is t0g less one bucket, so that bucket 0
// has no threshold: every lane below lands there whatever its offset, and the offset is then
// x's own low bits, for a saturating pack to clamp |x| - t0g (see FP4BytePairs).
struct FP4ByteTable {
  alignas(16) std::int8_t th[16] = {};
  alignas(16) std::uint8_t below8[16] = {};
  std::uint16_t lead = 0;  // subtracted from first in the operands t0g
  bool ok = true;
};

constexpr FP4ByteTable MakeFP4ByteTable(const std::uint16_t (&thr)[7], std::uint16_t largest,
                                        int shift, bool lead) {
  FP4ByteTable t;
  const int size = 1 << shift;
  t.lead = static_cast<std::uint16_t>(lead ? size : 0);
  const int from = thr[0] - t.lead;
  t.ok = (largest - from) >> shift < 16;
  for (int i = 0; i < 16; ++i) {
    const FP4Bucket c = FP4BucketOf(thr, 0, from + size * i, size);
    t.ok = t.ok && c.inside <= 1;
    t.th[i] = static_cast<std::int8_t>(c.offset);
    t.below8[i] = static_cast<std::uint8_t>(c.below + 8);
  }
  return t;
}

// A table's entries in both 128-bit blocks, loaded once per batch.
struct FP4ByteRegs {
  __m256i th, below8;
};
HWY_INLINE FP4ByteRegs LoadFP4ByteRegs(const FP4ByteTable& t) {
  return {_mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.th))),
          _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.below8)))};
}

// The FP4 codes of one group's 32 values (w0, w1: its two vectors; t0g: its FP4Pow2Codes
// operand in every 16-bit lane), joined two to a byte (element 2i in the low nibble, each
// nibble's sign in its bit 3) in the low bytes of 16-bit lanes, in the order of a 16-bit pack:
// per 128-bit block, four pairs of w0 then four of w1. The buckets, the offsets and the signs
// (bit 7 of a signed saturating pack of the bits themselves) are packed to bytes, so the
// lookups, the compare and the nibbles take one operation per 32 values: 19 operations per 32
// codes with their share of the final pack, where FP4Pow2Codes and its packing take 25.
// kLead (the table's lead): |x| - t0g as a plain signed difference (both are 15-bit, so it
// cannot overflow), whose shift the unsigned pack clamps to 0 below, and the offsets from x, so
// that the subtraction and the masks run on any port, not on the two that take the shifts,
// compares and multiplies.
// kF16: w0 and w1 hold normal float16 values and t0g is FP4Pow2ScalesOfBytes16's kF16 operand
// (eight times the bfloat16 one less 112 exponent steps: bits of the float16 scale). A value's
// bfloat16 rounded to odd is its magnitude's bits shifted right by 3 plus those steps, with the
// dropped bits' sticky bit or-ed in; the operand is a multiple of 2^(kShift + 3), so the
// bucket is the float16 difference shifted right by kShift + 3 (the sticky bit never reaches
// it) and the offset that difference rounded to odd, masked: eight operations per vector where
// rounding each value first took six more than the bfloat16 form's four. A difference that
// saturates (no lead) reads offset 0, as the bfloat16 one does; with lead, the bucket of a
// negative one has no threshold.
template <int kShift, bool kLead, bool kF16 = false>
HWY_INLINE __m256i FP4BytePairs(__m256i w0, __m256i w1, __m256i t0g, const FP4ByteRegs& r) {
  const __m256i mag = _mm256_set1_epi16(0x7FFF);
  const __m256i within = _mm256_set1_epi16((1 << kShift) - 1);
  const auto diff = [&](__m256i w) HWY_ATTR {
    const __m256i a = _mm256_and_si256(w, mag);
    return kLead ? _mm256_sub_epi16(a, t0g) : _mm256_subs_epu16(a, t0g);
  };
  const __m256i t0 = diff(w0), t1 = diff(w1);
  constexpr int kBucketShift = kF16 ? kShift + 3 : kShift;
  const auto bucket_of = [](__m256i t) HWY_ATTR {
    return kLead ? _mm256_srai_epi16(t, kBucketShift) : _mm256_srli_epi16(t, kBucketShift);
  };
  const __m256i bucket = _mm256_packus_epi16(bucket_of(t0), bucket_of(t1));
  const auto offset_of = [&](__m256i w, __m256i t) HWY_ATTR {
    if constexpr (kF16) {  // the difference rounded to odd
      const __m256i sticky =
          _mm256_min_epu16(_mm256_and_si256(t, _mm256_set1_epi16(7)), _mm256_set1_epi16(1));
      return _mm256_and_si256(_mm256_or_si256(_mm256_srli_epi16(t, 3), sticky), within);
    } else {  // with lead from x itself (t0g is a multiple of the bucket size)
      return _mm256_and_si256(kLead ? w : t, within);
    }
  };
  const __m256i offset = _mm256_packus_epi16(offset_of(w0, t0), offset_of(w1, t1));
  const __m256i passed = _mm256_cmpgt_epi8(offset, _mm256_shuffle_epi8(r.th, bucket));
  // 8 where the sign is clear: a byte shuffle reads 0 where its index has bit 7 set.
  const __m256i positive8 =
      _mm256_shuffle_epi8(_mm256_set1_epi8(8), _mm256_packs_epi16(w0, w1));
  const __m256i nibbles =
      _mm256_sub_epi8(_mm256_sub_epi8(_mm256_shuffle_epi8(r.below8, bucket), passed), positive8);
  return _mm256_maddubs_epi16(nibbles, _mm256_set1_epi16(0x1001));
}

// QuantizeFP4Pow2Row by FP4BytePairs (kShift, kLead: the table's), two groups to a store.
// kF16: x holds float16 values and t0g FP4Pow2ScalesOfBytes16's kF16 operands (FP4BytePairs'
// kF16: exact for normal values; a zero or subnormal lies below the first step, in the lead's
// bucket or saturated to offset 0, and codes as 0 with its sign where the group's scale is at
// least 2^-12, FP4RowExponentBytes16's kF16).
template <int kShift, bool kLead, bool kF16 = false>
HWY_INLINE void QuantizeFP4Pow2RowBytes(const std::uint16_t* HWY_RESTRICT x,
                                        std::uint8_t* HWY_RESTRICT out, std::int64_t n,
                                        const std::uint32_t* HWY_RESTRICT t0g,
                                        const FP4ByteRegs& r) {
  const auto pairs = [&](std::int64_t g) HWY_ATTR {
    const auto* v = reinterpret_cast<const __m256i*>(x + 32 * g);
    return FP4BytePairs<kShift, kLead, kF16>(_mm256_loadu_si256(v), _mm256_loadu_si256(v + 1),
                                             _mm256_set1_epi32(static_cast<int>(t0g[g])), r);
  };
  const std::int64_t groups = n / 32;
  std::int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * g),
                        E2M1NibbleBytes(pairs(g), pairs(g + 1)));
  }
  if (g < groups) {
    const __m256i p = pairs(g);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * g),
                     _mm256_castsi256_si128(E2M1NibbleBytes(p, p)));
  }
}

// FP4RowExponents16 on 256-bit vectors: the exponent fields of the largest magnitudes of the
// sixteen 32-groups of four 128-element rows, a byte each in row order. The 16-bit maxima of a
// group's two vectors, masked to the exponent field, then an even group's field moved to the
// low byte of each lane and the odd group's to the high byte, so that two groups share each
// vector of the transposes. The masks run on any port; shifts and maxima only on two, which
// the byte form's codes keep busy.
// kF16: float16 rows, their largest exponents as bfloat16 ones (E + 112), but 255 for
// infinities and NaNs and 0 (a group the caller redoes) below E = 5: where the largest magnitude
// is at least 2^-10 the scale is at least 2^-12 (float4_e1m2: 2^-10), so every zero or subnormal
// value of the group codes as 0 with its sign (QuantizeFP4Pow2RowBytes's kF16).
template <bool kF16 = false>
HWY_INLINE __m128i FP4RowExponentBytes16(const std::uint16_t* const* r) {
  __m256i v[8];
  const __m256i field = _mm256_set1_epi16(kF16 ? 0x7C00 : 0x7F80);
  for (int k = 0; k < 4; ++k) {
    const auto* row = reinterpret_cast<const __m256i*>(r[k]);
    const auto group = [row, field](int g) HWY_ATTR {
      return _mm256_max_epu16(_mm256_and_si256(_mm256_loadu_si256(row + 2 * g), field),
                              _mm256_and_si256(_mm256_loadu_si256(row + 2 * g + 1), field));
    };
    const auto pair = [&group](int g) HWY_ATTR {
      if constexpr (kF16) {
        return _mm256_or_si256(_mm256_srli_epi16(group(g), 10), _mm256_srli_epi16(group(g + 1), 2));
      } else {
        return _mm256_or_si256(_mm256_srli_epi16(group(g), 7), _mm256_slli_epi16(group(g + 1), 1));
      }
    };
    v[2 * k] = pair(0);
    v[2 * k + 1] = pair(2);
  }
  hn::Vec256<std::uint8_t> b[8];
  for (int k = 0; k < 8; ++k) b[k] = hn::Vec256<std::uint8_t>{v[k]};
  const __m256i m = ByteMaxTranspose8(b).raw;
  const __m128i e = _mm_max_epu8(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  if constexpr (!kF16) {
    return e;
  } else {
    const auto byte = [](int x) HWY_ATTR { return _mm_set1_epi8(static_cast<char>(x)); };
    const __m128i rebiased = _mm_or_si128(_mm_add_epi8(e, byte(112)), _mm_cmpeq_epi8(e, byte(31)));
    return _mm_andnot_si128(_mm_cmplt_epi8(e, byte(5)), rebiased);
  }
}

// FP4Pow2Scales8 for sixteen groups from their exponent fields m (bytes): the scales straight
// from the bytes, t0g in both halves by interleaving the operands with themselves.
// kF16: the operands of float16 rows, 8 * (t0g - 112 * 128) modulo 2^16 (FP4BytePairs' kF16).
template <bool kF16 = false>
HWY_INLINE __m128i FP4Pow2ScalesOfBytes16(__m128i m, std::uint8_t emax, std::uint16_t first,
                                          std::uint8_t* HWY_RESTRICT scale16,
                                          std::uint32_t* HWY_RESTRICT t0g) {
  const auto byte = [](int v) HWY_ATTR { return _mm_set1_epi8(static_cast<char>(v)); };
  const __m128i s = _mm_subs_epu8(m, byte(emax));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(scale16), s);
  const int offset = kF16 ? 8 * (first - 127 * 128 - 112 * 128) : first - 127 * 128;
  const __m256i t = _mm256_add_epi16(_mm256_slli_epi16(_mm256_cvtepu8_epi16(s), kF16 ? 10 : 7),
                                     _mm256_set1_epi16(static_cast<std::int16_t>(offset)));
  const __m256i lo = _mm256_unpacklo_epi16(t, t), hi = _mm256_unpackhi_epi16(t, t);
  auto* out = reinterpret_cast<__m128i*>(t0g);  // lo: groups 0-3, 8-11; hi: 4-7, 12-15
  _mm_storeu_si128(out, _mm256_castsi256_si128(lo));
  _mm_storeu_si128(out + 1, _mm256_castsi256_si128(hi));
  _mm_storeu_si128(out + 2, _mm256_extracti128_si256(lo, 1));
  _mm_storeu_si128(out + 3, _mm256_extracti128_si256(hi, 1));
  // Nonzero where m > 254 or s < 4.
  return _mm_or_si128(_mm_subs_epu8(m, byte(254)), _mm_subs_epu8(byte(4), s));
}

// QuantizeE2M1ByByteBuckets one byte per value: the FP4 codes of 32 values (w0, w1) by a group's
// byte tables (src/quant/e2m1_buckets.h: lo, hi and below8; b64 its first bucket * 64 in every
// 16-bit lane), joined two to a byte as FP4BytePairs joins them (the same order, for
// E2M1NibbleBytes). The bucket indices, the offsets (r's low bytes) and the signs are packed to
// bytes, so the three lookups, the two compares and the nibble arithmetic take one operation
// per 32 values: 21 operations per 32 codes (23 with the clamp) where the 16-bit form takes 26
// and its packing five more. kBounded as for QuantizeE2M1ByByteBuckets.
template <bool kBounded>
HWY_INLINE __m256i E2M1BucketBytePairs(__m256i w0, __m256i w1, __m256i b64, __m256i lo, __m256i hi,
                                       __m256i below8) {
  const __m256i mag = _mm256_set1_epi16(0x7FFF);
  __m256i r0 = _mm256_subs_epu16(_mm256_and_si256(w0, mag), b64);
  __m256i r1 = _mm256_subs_epu16(_mm256_and_si256(w1, mag), b64);
  if constexpr (!kBounded) {
    r0 = _mm256_min_epu16(r0, _mm256_set1_epi16(1023));
    r1 = _mm256_min_epu16(r1, _mm256_set1_epi16(1023));
  }
  const __m256i bucket = _mm256_packus_epi16(_mm256_srli_epi16(r0, 6), _mm256_srli_epi16(r1, 6));
  const __m256i low = _mm256_set1_epi16(0xFF);
  const __m256i offset = _mm256_packus_epi16(_mm256_and_si256(r0, low), _mm256_and_si256(r1, low));
  const __m256i up_lo = _mm256_cmpgt_epi8(offset, _mm256_shuffle_epi8(lo, bucket));
  const __m256i up_hi = _mm256_cmpgt_epi8(offset, _mm256_shuffle_epi8(hi, bucket));
  // 8 where the sign is clear (see FP4BytePairs).
  const __m256i positive8 = _mm256_shuffle_epi8(_mm256_set1_epi8(8), _mm256_packs_epi16(w0, w1));
  const __m256i nibbles = _mm256_sub_epi8(
      _mm256_sub_epi8(_mm256_sub_epi8(_mm256_shuffle_epi8(below8, bucket), up_lo), up_hi),
      positive8);
  return _mm256_maddubs_epi16(nibbles, _mm256_set1_epi16(0x1001));
}

// QuantizeE2M1ByByteBuckets by E2M1BucketBytePairs, for groups of kGs = 32 or 64: the same codes,
// the same refused groups in rest. Two accepted 32-groups in a row share a store.
template <std::size_t kGs, bool kBounded>
HWY_INLINE std::int64_t QuantizeE2M1ByBytePairs(const std::uint16_t* HWY_RESTRICT x,
                                                std::uint8_t* HWY_RESTRICT out, std::int64_t groups,
                                                const float* HWY_RESTRICT mult,
                                                const std::uint16_t* HWY_RESTRICT amax,
                                                std::int64_t* HWY_RESTRICT rest) {
  static_assert(kGs == 32 || kGs == 64, "one or two byte vectors per group");
  const detail::E2M1Buckets& tables = detail::e2m1_buckets();
  struct Tables {
    __m256i b64, lo, hi, below8;
  };
  // The group's tables; false where they do not serve it (then it goes to rest).
  const auto load = [&](std::int64_t g, Tables& t) HWY_ATTR {
    std::uint32_t j = 0, base = 0, mb = 0;
    std::memcpy(&mb, mult + g, sizeof(mb));
    if (HWY_UNLIKELY(!detail::e2m1_byte_bucket_params(tables, mb >> 16, j, base) ||
                     (kBounded && amax[g] > base * 64u + 1023u))) {
      return false;
    }
    const auto dup = [](const std::uint8_t* p) HWY_ATTR {
      return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
    };
    t.b64 = _mm256_set1_epi16(static_cast<std::int16_t>(base * 64u));
    t.lo = dup(tables.byte_lo[j]);
    t.hi = dup(tables.byte_hi[j]);
    t.below8 = dup(tables.byte_below8[j]);
    return true;
  };
  const auto pairs = [&](const std::uint16_t* v, const Tables& t) HWY_ATTR {
    const auto* p = reinterpret_cast<const __m256i*>(v);
    return E2M1BucketBytePairs<kBounded>(_mm256_loadu_si256(p), _mm256_loadu_si256(p + 1), t.b64,
                                         t.lo, t.hi, t.below8);
  };
  const auto half = [](std::uint8_t* o, __m256i p) HWY_ATTR {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm256_castsi256_si128(E2M1NibbleBytes(p, p)));
  };
  std::int64_t left = 0;
  Tables t0, t1;
  if constexpr (kGs == 64) {
    for (std::int64_t g = 0; g < groups; ++g) {
      if (!load(g, t0)) {
        rest[left++] = g;
        continue;
      }
      const std::uint16_t* xg = x + 64 * g;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * g),
                          E2M1NibbleBytes(pairs(xg, t0), pairs(xg + 32, t0)));
    }
  } else {
    std::int64_t g = 0;
    for (; g + 2 <= groups; g += 2) {
      const bool ok0 = load(g, t0), ok1 = load(g + 1, t1);
      if (HWY_LIKELY(ok0 && ok1)) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * g),
                            E2M1NibbleBytes(pairs(x + 32 * g, t0), pairs(x + 32 * g + 32, t1)));
        continue;
      }
      if (ok0) {
        half(out + 16 * g, pairs(x + 32 * g, t0));
      } else {
        rest[left++] = g;
      }
      if (ok1) {
        half(out + 16 * g + 16, pairs(x + 32 * g + 32, t1));
      } else {
        rest[left++] = g + 1;
      }
    }
    if (g < groups) {
      if (load(g, t0)) {
        half(out + 16 * g, pairs(x + 32 * g, t0));
      } else {
        rest[left++] = g;
      }
    }
  }
  return left;
}
#endif  // KVS_FP4_BYTES

// ---- Cheaper magnitudes for the power-of-two e4m3 rows -------------------------------------

// The smallest lane of v; x86 folds it to one 128-bit block for phminposuw, where Highway's
// MinOfLanes takes a longer sequence of shuffles.
template <class D>
HWY_INLINE std::uint16_t SmallestLane(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::MinOfLanes(d, v));
}
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSE4
HWY_INLINE std::uint16_t SmallestLane(hn::Full128<std::uint16_t>, hn::Vec128<std::uint16_t> v) {
  return static_cast<std::uint16_t>(_mm_cvtsi128_si32(_mm_minpos_epu16(v.raw)));
}
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
HWY_INLINE std::uint16_t SmallestLane(hn::Full256<std::uint16_t>, hn::Vec256<std::uint16_t> v) {
  const __m128i m =
      _mm_min_epu16(_mm256_castsi256_si128(v.raw), _mm256_extracti128_si256(v.raw, 1));
  return static_cast<std::uint16_t>(_mm_cvtsi128_si32(_mm_minpos_epu16(m)));
}
#endif

// For eight groups of n elements each (n a multiple of the lanes) that lie anywhere (whole rows,
// or the 32-groups of a few rows): amax[k], the largest magnitude (bf16 bits & 0x7FFF) of group
// k, and the smallest magnitude (zeros included) as its saturated decrement in min1: per group
// (kAll false), or one for all eight groups together in all eight entries (kAll true). Rows are
// reduced together because one row's reduction and scale are a dependency chain far longer
// than its arithmetic. Vectors hold at most kLanes lanes: for 32-element groups, 16 lanes make
// two vectors per group and reduce through transposes half as wide, which is cheaper than one
// 32-lane vector per group where 512-bit operations take two issue slots (AMD Zen 4).
//
// A group without zeros gets its smallest nonzero magnitude less one; a group holding a zero gets
// min1 = 0, which E4M3Pow2ScalesByKey8 reads as a nonzero magnitude below every threshold (not
// fast), so its lanes below the normal range are looked for one by one (zeros need no fix). One
// minimum for eight groups costs a fold and one horizontal reduction where eight minimums cost
// a second Reduce8; compared with the largest of the groups' thresholds it is a stricter test
// than each group's own minimum, and almost as often passed.
// kMin: 0 the maxima alone, 1 the minimum of each group, 2 one minimum for all eight.
// kPerRow: the groups lie kPerRow to a row, one after another: group k starts at
// x[k / kPerRow] + (k % kPerRow) * n (so that a caller passes rows, not a list of groups).
template <std::size_t kLanes, int kMin, int kPerRow = 1>
HWY_INLINE void Magnitudes8(const std::uint16_t* const* HWY_RESTRICT rows, std::int64_t n,
                            std::uint16_t* HWY_RESTRICT amax, std::uint16_t* HWY_RESTRICT min1) {
  static_assert(8 % kPerRow == 0, "whole rows in a set of eight groups");
  const auto group = [rows, n](int k) HWY_ATTR { return rows[k / kPerRow] + (k % kPerRow) * n; };
  constexpr bool kAll = kMin == 2;
#if KVS_SIZELESS_VECTORS
  const GroupTag<32> d;
#else
  const GroupTag<kLanes> d;
#endif
  using V = hn::Vec<decltype(d)>;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(d));
  const V mag = hn::Set(d, std::uint16_t{0x7FFF});
  V all = mag;  // kAll: the smallest magnitude of every group so far
#if KVS_SIZELESS_VECTORS
  for (int k = 0; k < 8; ++k) {
    V hi = hn::And(hn::LoadU(d, group(k)), mag);
    V lo = hi;
    for (std::int64_t i = L; i < n; i += L) {
      const V b = hn::And(hn::LoadU(d, group(k) + i), mag);
      hi = hn::Max(hi, b);
      lo = hn::Min(lo, b);
    }
    amax[k] = hn::GetLane(hn::MaxOfLanes(d, hi));
    if constexpr (kMin == 0) {
      (void)lo;
    } else if (kAll) {
      all = hn::Min(all, lo);
    } else {
      min1[k] = SaturatedDecrement(hn::GetLane(hn::MinOfLanes(d, lo)));
    }
  }
#else
  // kAll: two accumulators for the minimum, not one per group: with eight of each, the
  // maxima's and the minima's vectors took every register of AVX2 and spilled (about 10 % of
  // an mxfp8 call); two keep the chain through them short.
  V hi[8], lo[kAll ? 2 : 8];
  for (int k = 0; k < 8; ++k) {
    hi[k] = hn::And(hn::LoadU(d, group(k)), mag);
    if constexpr (kAll) {
      lo[k % 2] = k < 2 ? hi[k] : hn::Min(lo[k % 2], hi[k]);
    } else if constexpr (kMin != 0) {
      lo[k] = hi[k];
    }
  }
  for (std::int64_t i = L; i < n; i += L) {
    for (int k = 0; k < 8; ++k) {
      const V b = hn::And(hn::LoadU(d, group(k) + i), mag);
      hi[k] = hn::Max(hi[k], b);
      if constexpr (kAll) {
        lo[k % 2] = hn::Min(lo[k % 2], b);
      } else if constexpr (kMin != 0) {
        lo[k] = hn::Min(lo[k], b);
      }
    }
  }
  Reduce8(d, hi, [](auto a, auto b) { return hn::Max(a, b); }, amax);
  if constexpr (kMin == 0) {
    return;
  } else if (kAll) {
    all = hn::Min(lo[0], lo[1]);
  } else {
    Reduce8(d, lo, [](auto a, auto b) { return hn::Min(a, b); }, min1);
    SaturatedDecrement8(min1);
  }
#endif
  if constexpr (kAll) {
    // One vector store: the callers load the eight entries as a vector, which eight scalar
    // stores would hold up until they retire (no store forwarding from several stores).
    const hn::CappedTag<std::uint16_t, 8> d8;
    const auto m1 = hn::Set(d8, SaturatedDecrement(SmallestLane(d, all)));
    for (std::size_t k = 0; k < 8; k += hn::Lanes(d8)) hn::StoreU(m1, d8, min1 + k);
  }
}

template <std::size_t kLanes, bool kAll, int kPerRow = 1>
HWY_INLINE void Magnitudes8Min(const std::uint16_t* const* HWY_RESTRICT x, std::int64_t n,
                               std::uint16_t* HWY_RESTRICT amax, std::uint16_t* HWY_RESTRICT min1) {
  Magnitudes8<kLanes, kAll ? 2 : 1, kPerRow>(x, n, amax, min1);
}

// The largest magnitude (bf16 bits & 0x7FFF) of each of eight groups of n elements that lie
// anywhere (n a multiple of the lanes), for the FP4 rows: Magnitudes8Min without the minimum.
template <std::size_t kLanes>
HWY_INLINE void Maxima8(const std::uint16_t* const* HWY_RESTRICT x, std::int64_t n,
                        std::uint16_t* HWY_RESTRICT amax) {
  Magnitudes8<kLanes, 0>(x, n, amax, nullptr);
}

// E4M3Pow2CodesInRange without the magnitude mask: the subtraction runs on the bf16 bits
// themselves, where a negative lane's sign stays in place above its magnitude's difference.
// Exact for every lane whose magnitude is at least E4M3NormalThreshold (the same as the masked
// form); lanes below it, zeros included, come out wrong and must be rewritten: a group holding
// any (Magnitudes8Min's min1 below the threshold) is not fast and takes the masked form.
//
// The sign needs no operation of its own here: t7 keeps it in bit 15, and as the rest of t7 is
// at most 0x07E7 for those lanes, t7 << 4 plus bit 4 stays below 0x8000 and adding the sign bit
// carries into nothing (E4M3Pow2CodesOfT7 or-s it in from w instead).
template <HighByte kHigh = HighByte::kShift, class D, class V = hn::Vec<D>>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> E4M3Pow2CodesUnmasked(D d, V w, V s7) {
  const hn::RebindToSigned<D> di;
  const auto t7 = hn::SaturatedSub(w, s7);
  const auto r = hn::Add(hn::ShiftLeft<4>(t7), hn::And(t7, hn::Set(d, std::uint16_t{0x8010})));
  return SignedHighByte<kHigh>(di, hn::BitCast(di, r));
}

// The same codes from float16 bits, for groups whose every lane is a normal float16 value with
// an e4m3-normal quotient (a fast group of E4M3Pow2ScalesByKey8 whose smallest magnitude is
// also float16-normal). s63 = sub16 - 63 (mod 2^16), where sub16 = (e - 119) * 1024 divides by
// the scale 2^(e - 127) and rebiases the exponent from float16's 15 to e4m3's 7 (E4M3F16Operands).
// The wrapping difference w - s63 is then the sign in bit 15 over M = the quotient's e4m3-biased
// bits with ten mantissa bits, plus 63: M is at most 0x3F3F (448 plus 63), so nothing borrows
// from or carries into the sign. The code is M's mantissa rounded to three bits, nearest even,
// (M + bit 7 of M) >> 7 as in E4M3Pow2CodesOfT7 (where M + 63 carries into bit 7 the value
// rounds up whatever the parity), built one bit up with the sign kept: t + (t & 0x7FFF) doubles
// M under the sign, and (t >> 6) & 2 adds the parity bit doubled. Seven operations per vector,
// where the round-to-odd pass and the bfloat16 form take fourteen with a store and a load between.
template <HighByte kHigh = HighByte::kShift, class D, class V = hn::Vec<D>>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> E4M3Pow2CodesF16(D d, V w, V s63) {
  const hn::RebindToSigned<D> di;
  const auto t = hn::Sub(w, s63);
  const auto twice = hn::Add(t, hn::And(t, hn::Set(d, std::uint16_t{0x7FFF})));
  const auto r = hn::Add(twice, hn::And(hn::ShiftRight<6>(t), hn::Set(d, std::uint16_t{2})));
  return SignedHighByte<kHigh>(di, hn::BitCast(di, r));
}

// QuantizeE4M3Pow2RowInRange with E4M3Pow2CodesUnmasked, or (kF16) for a row of float16
// values with E4M3Pow2CodesF16, its operands (in place of subw) from E4M3F16Operands.
template <bool kPerGroup, HighByte kHigh = HighByte::kShift, bool kF16 = false>
HWY_INLINE void QuantizeE4M3Pow2RowUnmasked(const std::uint16_t* HWY_RESTRICT x,
                                            std::uint8_t* HWY_RESTRICT out, std::int64_t n,
                                            const std::uint32_t* HWY_RESTRICT subw) {
  QuantizeE4M3Pow2RowBy<kPerGroup, false, kHigh>(
      [](auto d, auto w, auto s, auto&) HWY_ATTR {
        if constexpr (kF16) {
          return E4M3Pow2CodesF16<kHigh>(d, w, s);
        } else {
          return E4M3Pow2CodesUnmasked<kHigh>(d, w, s);
        }
      },
      x, out, n, subw);
}

// The operands of E4M3Pow2CodesF16 from the scale exponents e (the e8m0 bytes of
// E4M3Pow2ScalesByKey8), n of them (a multiple of 8): s63 = (e << 10) - (119 * 1024 + 63)
// (mod 2^16) in both 16-bit halves of s63w[k], as subw holds s7.
HWY_INLINE void E4M3F16Operands(const std::uint8_t* HWY_RESTRICT exp, std::int64_t n,
                                std::uint32_t* HWY_RESTRICT s63w) {
  const hn::CappedTag<std::uint32_t, 8> du;
  const hn::Rebind<std::uint8_t, decltype(du)> d8;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(du));
  for (std::int64_t k = 0; k < n; k += L) {
    const auto e = hn::PromoteTo(du, hn::LoadU(d8, exp + k));
    const auto s63 = hn::And(hn::Add(hn::ShiftLeft<10>(e), hn::Set(du, 0x23C1u)),  // -0x1DC3F
                             hn::Set(du, 0xFFFFu));
    hn::StoreU(hn::Or(s63, hn::ShiftLeft<16>(s63)), du, s63w + k);
  }
}

#if KVS_HIF8_BF16
// The 64-entry tables of hifloat8_bf16_tables() in registers, two halves each; vpermi2w has no
// portable Highway form in this version, so this part is written for AVX-512.
struct HiF8Bf16Regs {
  __m512i half[2], scale[2], offset[2];
};

HWY_INLINE HiF8Bf16Regs LoadHiF8Bf16Regs() {
  const detail::HiFloat8Bf16Tables& t = detail::hifloat8_bf16_tables();
  HiF8Bf16Regs r;
  for (int k = 0; k < 2; ++k) {
    r.half[k] = _mm512_load_si512(t.half + 32 * k);
    r.scale[k] = _mm512_load_si512(t.scale + 32 * k);
    r.offset[k] = _mm512_load_si512(t.offset + 32 * k);
  }
  return r;
}

// The lanes of magnitudes a with codes other than 0x00: 2^-23 <= |x| and no NaN (the only zero
// has no sign). One compare of a - 2^-23, which wraps below it, where two would share the
// permutes' port. Its two constants are parameters, so that a caller may hold them in registers.
HWY_INLINE __m512i HiF8LiveBias() { return _mm512_set1_epi16(-0x3400); }
HWY_INLINE __m512i HiF8LiveSpan() { return _mm512_set1_epi16(0x7F80 - 0x3400); }
HWY_INLINE __mmask32 HiF8Live(__m512i a, __m512i bias = HiF8LiveBias(),
                              __m512i span = HiF8LiveSpan()) {
  return _mm512_cmple_epu16_mask(_mm512_add_epi16(a, bias), span);
}

// Entry i mod 64 of a table held as two halves.
HWY_INLINE __m512i LookUp64(const __m512i* tab, __m512i i) {
  return _mm512_permutex2var_epi16(tab[0], i, tab[1]);
}

// The HiFloat8 codes of 32 bfloat16 values w (NaN gives 0x00; the encoding:
// docs/operators/indexer_quant_cache.md, "Quantization (bit-exact)"), by the lane tables of
// src/quant/hifloat8_table.h, one per 16-bit lane (the high bytes zero). The shifts right are high
// halves of products (vpmulhuw): on Zen 4 shifts share two pipes with the lookups, multiplies have
// two of their own.
HWY_INLINE __m512i HiF8CodesOfBf16(const HiF8Bf16Regs& t, __m512i w) {
  const __m512i a = _mm512_and_si512(w, _mm512_set1_epi16(0x7FFF));
  const __m512i by128 = _mm512_set1_epi16(0x200);  // x >> 7
  // The index from the values themselves (the sign lands past the index's six bits), beside
  // the mask; the add saturates with the bias the tables carry (HiFloat8Bf16Tables).
  const __m512i e = _mm512_mulhi_epu16(w, by128);
  const __m512i u = _mm512_adds_epu16(a, LookUp64(t.half, e));
  const __m512i re = _mm512_mulhi_epu16(u, by128);
  // Codes other than 0x00 for 2^-23 <= |x| and no NaN (the only zero has no sign): the masked
  // operations zero the other lanes.
  const __mmask32 live = HiF8Live(a);
  const __m512i c = _mm512_maskz_add_epi16(live, _mm512_mulhi_epu16(u, LookUp64(t.scale, re)),
                                           LookUp64(t.offset, re));
  const __m512i sign = _mm512_maskz_mulhi_epu16(live, w, _mm512_set1_epi16(0x100));  // w >> 8
  return _mm512_ternarylogic_epi32(c, sign, _mm512_set1_epi16(0x80), 0xF8);
}

// HiF8CodesOfBf16 for 32 normal float16 values h from their own bits, by the float16 tables
// (HiFloat8F16Tables: the exponent field indexes a 32-entry half table, one 16-bit permute, and
// the rounded binade R' the two 64-entry ones). Every normal float16 value has a code other than
// 0x00, so no lane needs masking; values that are not normal are the caller's (see
// HiF8CodesF16RowBytes).
struct HiF8F16WordRegs {
  __m512i half, scale[2], offset[2];
};
HWY_INLINE HiF8F16WordRegs LoadHiF8F16WordRegs() {
  const detail::HiFloat8F16Tables& t = detail::hifloat8_f16_tables();
  HiF8F16WordRegs r;
  r.half = _mm512_load_si512(t.half);
  for (int k = 0; k < 2; ++k) {
    r.scale[k] = _mm512_load_si512(t.scale + 32 * k);
    r.offset[k] = _mm512_load_si512(t.offset + 32 * k);
  }
  return r;
}
// The float16 forms' first steps. HiF8F16Magnitudes: the magnitudes a of values h, folded into
// worst as a - 0x0400 (mod 2^16), below 0x7800 exactly for the normal values
// (HiF8F16AllNormal). HiF8F16Sum: the rounded sums u = a + half[E] (saturating), the exponent
// field E the high half of h times 64 (whose sign bit lands past the 16-bit permute's five
// index bits).
HWY_INLINE __m512i HiF8F16Magnitudes(__m512i h, __m512i& worst) {
  const __m512i a = _mm512_and_si512(h, _mm512_set1_epi16(0x7FFF));
  worst = _mm512_max_epu16(worst, _mm512_sub_epi16(a, _mm512_set1_epi16(0x0400)));
  return a;
}
HWY_INLINE bool HiF8F16AllNormal(__m512i worst) {
  return _mm512_cmpge_epu16_mask(worst, _mm512_set1_epi16(0x7800)) == 0;
}
HWY_INLINE __m512i HiF8F16Sum(__m512i h, __m512i a, __m512i half) {
  return _mm512_adds_epu16(
      a, _mm512_permutexvar_epi16(_mm512_mulhi_epu16(h, _mm512_set1_epi16(0x40)), half));
}

HWY_INLINE __m512i HiF8CodesOfF16(const HiF8F16WordRegs& t, __m512i h, __m512i a) {
  const __m512i u = HiF8F16Sum(h, a, t.half);
  const __m512i re = _mm512_mulhi_epu16(u, _mm512_set1_epi16(0x40));  // u >> 10
  const __m512i c =
      _mm512_add_epi16(_mm512_mulhi_epu16(u, LookUp64(t.scale, re)), LookUp64(t.offset, re));
  const __m512i sign = _mm512_mulhi_epu16(h, _mm512_set1_epi16(0x100));  // h >> 8
  return _mm512_ternarylogic_epi32(c, sign, _mm512_set1_epi16(0x80), 0xF8);
}

// The 32 bfloat16 at src times x_scale, each float32 product truncated to a bfloat16, in
// element order. The truncation keeps a product's HiFloat8 code (its top 13 bits), infinities,
// and NaNs: a NaN from arithmetic is quiet, and its quiet bit (22) is kept.
HWY_INLINE __m512i Bf16ProductsTruncated(const std::uint16_t* HWY_RESTRICT src, __m512 xs) {
  const __m512i w = _mm512_loadu_si512(src);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512 even = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), xs);
  const __m512 odd = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(w, high)), xs);
  return _mm512_ternarylogic_epi32(_mm512_srli_epi32(_mm512_castps_si512(even), 16),
                                   _mm512_castps_si512(odd), high, 0xF8);
}

// 32 values of HiF8CodesBf16Row at j: the products, or with x_scale 1 the inputs themselves
// (x * 1 is x, and a NaN stays a NaN).
template <bool kScaled>
HWY_INLINE __m512i HiF8Codes32(const HiF8Bf16Regs& t, const std::uint16_t* HWY_RESTRICT src,
                               __m512 xs) {
  return HiF8CodesOfBf16(t, kScaled ? Bf16ProductsTruncated(src, xs) : _mm512_loadu_si512(src));
}

// The n codes of a row, codes(j) giving the code vector (one per 16-bit lane, high bytes zero)
// of values j to j + 31: two vectors narrowed together by a pack and a qword permute.
template <class Codes>
HWY_INLINE void HiF8RowWordsOf(std::uint8_t* HWY_RESTRICT out, std::int64_t n, const Codes& codes) {
  const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  std::int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    const __m512i lo = codes(j), hi = codes(j + 32);
    _mm512_storeu_si512(out + j, _mm512_permutexvar_epi64(order, _mm512_packus_epi16(lo, hi)));
  }
  if (j < n) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), _mm512_cvtepi16_epi8(codes(j)));
  }
}

template <bool kScaled>
HWY_INLINE void HiF8CodesBf16RowOf(const HiF8Bf16Regs& t, const std::uint16_t* HWY_RESTRICT src,
                                   std::uint8_t* HWY_RESTRICT out, std::int64_t n, __m512 xs) {
  HiF8RowWordsOf(out, n,
                 [&](std::int64_t j) HWY_ATTR { return HiF8Codes32<kScaled>(t, src + j, xs); });
}

// The codes of n float16 values (no x_scale) by HiF8CodesOfF16, worst as HiF8F16Magnitudes
// takes it.
HWY_INLINE void HiF8CodesF16RowWords(const HiF8F16WordRegs& t,
                                     const std::uint16_t* HWY_RESTRICT src,
                                     std::uint8_t* HWY_RESTRICT out, std::int64_t n,
                                     __m512i& worst) {
  HiF8RowWordsOf(out, n, [&](std::int64_t j) HWY_ATTR {
    const __m512i h = _mm512_loadu_si512(src + j);
    return HiF8CodesOfF16(t, h, HiF8F16Magnitudes(h, worst));
  });
}

// The byte tables of hifloat8_bf16_tables() in registers, for the VBMI form, and its constants,
// their values hidden from the compiler by an empty asm statement: GCC otherwise built three of
// them again for every row of the callers' loops (a move and a broadcast each). The indexer's
// hifloat8 rows 1.01-1.03 x faster (AMD Zen 5), the epilog's within noise.
struct HiF8ByteRegs {
  __m512i half, shift, offset, even;
  __m512i live_bias, live_span, by256, bit7, bias;
};

HWY_INLINE HiF8ByteRegs LoadHiF8ByteRegs() {
  const detail::HiFloat8Bf16Tables& t = detail::hifloat8_bf16_tables();
  HWY_ALIGN std::uint8_t even[64];
  for (int i = 0; i < 64; ++i) even[i] = static_cast<std::uint8_t>(2 * i);
  HiF8ByteRegs r{_mm512_load_si512(t.half8),
                 _mm512_load_si512(t.shift8),
                 _mm512_load_si512(t.offset8),
                 _mm512_load_si512(even),
                 HiF8LiveBias(),
                 HiF8LiveSpan(),
                 _mm512_set1_epi16(0x100),
                 _mm512_set1_epi16(0x80),
                 _mm512_set1_epi16(static_cast<short>(detail::kHiFloat8Bias & 0xFF00))};
  asm volatile(""
               : "+v"(r.live_bias), "+v"(r.live_span), "+v"(r.by256), "+v"(r.bit7), "+v"(r.bias));
  return r;
}

// HiF8CodesOfBf16 by the byte tables: a 64-entry byte permute reads an index byte's low six
// bits, the exponent mod 64 in each lane's low byte, and with the high bytes masked to zero it
// gives a 16-bit entry in one operation where the 16-bit permute over two registers takes two
// (on Intel, on the port of the other permutes). The shift replaces the multiply by scale; the
// codes are the lanes' low bytes (the high bytes are not zero).
// HiF8CodesOfMagnitudeBytes works from the magnitudes' bfloat16 bits a and takes the signs from
// bit 15 of s and the first table index from bits 7-14 of ex (a, or bfloat16 values themselves,
// whose signs land in the high bytes, which the permute ignores: then the index need not wait
// for the mask that forms a); HiF8CodesOfBf16Bytes from the bfloat16 values w.
KVS_VBMI_ATTR HWY_INLINE __m512i HiF8CodesOfMagnitudeBytes(const HiF8ByteRegs& t, __m512i a,
                                                           __m512i s, __m512i ex) {
  const __mmask64 low = 0x5555555555555555ull;
  const __m512i by128 = _mm512_set1_epi16(0x200);  // x >> 7
  // The shifts are multiplies, which keep Zen 4's two shift and shuffle pipes (shared with the
  // lookups) free. The first index heads each vector's chain: taken from the values themselves
  // where they are bfloat16, it runs beside the mask, which on AMD Zen 5 gained as much as a
  // shift in its place (1.03 x). The bias's high byte rides in the lanes the permute leaves,
  // and the add saturates (see HiFloat8Bf16Tables): one operation where an add and a cap took
  // two (1.06-1.07 x).
  const __m512i half =
      _mm512_mask_permutexvar_epi8(t.bias, low, _mm512_mulhi_epu16(ex, by128), t.half);
  const __m512i u = _mm512_adds_epu16(a, half);
  const __m512i re = _mm512_mulhi_epu16(u, by128);
  const __mmask32 live = HiF8Live(a, t.live_bias, t.live_span);
  const __m512i kept = _mm512_srlv_epi16(u, _mm512_maskz_permutexvar_epi8(low, re, t.shift));
  const __m512i c = _mm512_maskz_add_epi16(live, kept, _mm512_permutexvar_epi8(re, t.offset));
  const __m512i sign = _mm512_maskz_mulhi_epu16(live, s, t.by256);  // s >> 8
  return _mm512_ternarylogic_epi32(c, sign, t.bit7, 0xF8);
}

KVS_VBMI_ATTR HWY_INLINE __m512i HiF8CodesOfBf16Bytes(const HiF8ByteRegs& t, __m512i w) {
  return HiF8CodesOfMagnitudeBytes(t, _mm512_and_si512(w, _mm512_set1_epi16(0x7FFF)), w, w);
}

// The n codes of a row by the byte tables, codes(j) giving the code vector of values j to
// j + 31: the low bytes of two code vectors in order by one two-register byte permute.
template <class Codes>
KVS_VBMI_ATTR HWY_INLINE void HiF8RowBytesOf(const HiF8ByteRegs& t, std::uint8_t* HWY_RESTRICT out,
                                             std::int64_t n, const Codes& codes) {
  std::int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    _mm512_storeu_si512(out + j, _mm512_permutex2var_epi8(codes(j), t.even, codes(j + 32)));
  }
  if (j < n) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j),
                        _mm512_castsi512_si256(_mm512_permutexvar_epi8(t.even, codes(j))));
  }
}

// HiF8CodesBf16RowOf by the byte tables.
template <bool kScaled>
KVS_VBMI_ATTR HWY_INLINE void HiF8CodesBf16RowBytes(const HiF8ByteRegs& t,
                                                    const std::uint16_t* HWY_RESTRICT src,
                                                    std::uint8_t* HWY_RESTRICT out, std::int64_t n,
                                                    __m512 xs) {
  HiF8RowBytesOf(t, out, n, [&](std::int64_t j) KVS_VBMI_ATTR {
    return HiF8CodesOfBf16Bytes(
        t, kScaled ? Bf16ProductsTruncated(src + j, xs) : _mm512_loadu_si512(src + j));
  });
}

// The same for n float16 values (no x_scale) from their own bits, by the float16 tables
// (HiFloat8F16Tables): worst and the rounded sums by HiF8F16Magnitudes and HiF8F16Sum, and every
// normal value has a
// code other than 0x00, so the signs need no mask. Eleven operations a vector where truncating
// each to bfloat16 first (a shift, a mask and an add) and the bfloat16 form's mask of the lanes
// took sixteen. Rows holding a value that is not normal (HiF8F16AllNormal) are the caller's to
// take again (their codes here are not the encoder's).
struct HiF8F16Regs {
  __m512i half, shift, offset;
};
HWY_INLINE HiF8F16Regs LoadHiF8F16Regs() {
  const detail::HiFloat8F16Tables& t = detail::hifloat8_f16_tables();
  return HiF8F16Regs{_mm512_load_si512(t.half), _mm512_load_si512(t.shift8),
                     _mm512_load_si512(t.offset8)};
}
KVS_VBMI_ATTR HWY_INLINE void HiF8CodesF16RowBytes(const HiF8ByteRegs& t, const HiF8F16Regs& f,
                                                   const std::uint16_t* HWY_RESTRICT src,
                                                   std::uint8_t* HWY_RESTRICT out, std::int64_t n,
                                                   __m512i& worst) {
  const __mmask64 low = 0x5555555555555555ull;
  HiF8RowBytesOf(t, out, n, [&](std::int64_t j) KVS_VBMI_ATTR {
    const __m512i h = _mm512_loadu_si512(src + j);
    const __m512i u = HiF8F16Sum(h, HiF8F16Magnitudes(h, worst), f.half);
    const __m512i re = _mm512_mulhi_epu16(u, _mm512_set1_epi16(0x40));  // u >> 10
    const __m512i kept = _mm512_srlv_epi16(u, _mm512_maskz_permutexvar_epi8(low, re, f.shift));
    const __m512i c = _mm512_add_epi16(kept, _mm512_permutexvar_epi8(re, f.offset));
    const __m512i sign = _mm512_mulhi_epu16(h, t.by256);  // h >> 8
    return _mm512_ternarylogic_epi32(c, sign, t.bit7, 0xF8);
  });
}

// n bfloat16 values times x_scale (n a multiple of 32), their HiFloat8 codes: round half away
// from zero, saturating, NaN to 0x00, as the scalar encoder of each float32 product. Two code
// vectors narrow together (a pack and a qword permute) where vpmovwb takes two operations each.
HWY_INLINE void HiF8CodesBf16Row(const HiF8Bf16Regs& t, const std::uint16_t* HWY_RESTRICT src,
                                 std::uint8_t* HWY_RESTRICT out, std::int64_t n, float x_scale) {
  const __m512 xs = _mm512_set1_ps(x_scale);
  if (x_scale == 1.0f) {
    HiF8CodesBf16RowOf<false>(t, src, out, n, xs);
  } else {
    HiF8CodesBf16RowOf<true>(t, src, out, n, xs);
  }
}
#endif  // KVS_HIF8_BF16

// n bf16 values times x_scale, each product's HiFloat8 code looked up by the top bits of its
// float32 (src/quant/hifloat8_table.h), the products formed a vector at a time; n is a multiple of
// 8 and of the float lane count, `keys` n entries of scratch. False (nothing written) when a
// product is NaN, which the table does not cover. Eight codes per store, four keys per load: byte
// stores between the key loads stalled whenever a destination matched a key's address in its
// low 12 bits.
HWY_INLINE bool HiF8CodesByTable(const std::uint16_t* HWY_RESTRICT src,
                                 std::uint8_t* HWY_RESTRICT out, std::int64_t n, float x_scale,
                                 std::uint16_t* HWY_RESTRICT keys) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<std::uint16_t, decltype(df)> d16;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const auto xs = hn::Set(df, x_scale);
  auto nan = hn::FirstN(df, 0);
  for (std::int64_t j = 0; j < n; j += L) {
    const auto v = hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, src + j))));
    const auto prod = hn::Mul(v, xs);
    nan = hn::Or(nan, hn::IsNaN(prod));
    const auto key = hn::ShiftRight<detail::kHiFloat8TableShift>(hn::BitCast(du, prod));
    hn::StoreU(hn::TruncateTo(d16, key), d16, keys + j);
  }
  if (HWY_UNLIKELY(!hn::AllFalse(df, nan))) return false;
  const std::uint8_t* table = detail::hifloat8_sat_table();
  // One byte store per code: loads and stores have their own ports, where assembling eight
  // codes into a word first cost a shift and an or each on the integer ports.
  for (std::int64_t j = 0; j < n; ++j) out[j] = table[keys[j]];
  return true;
}

#if KVS_HIF8_LANES
// The tables of hifloat8_lane_tables() in registers, each 16 bytes in every 128-bit block, and
// the address of its other operands, which HiF8ByteCodes reads from memory. `keep` holds both
// answers of keep_and and keep_or in one byte: keep_and << 3 (bits 4-6) masks the rounded
// mantissa before it is shifted down by 3, and keep_or (bits 0-1) then sets the index's low
// bits; a byte shuffle ignores bits 4-6 of an index, so the mask's copy there does no harm.
struct HiF8LaneRegs {
  hn::Vec<hn::ScalableTag<std::uint8_t>> half2, keep, kept, pos, neg, big_top, small_top;
  const std::uint8_t (*operands)[32];  // detail::HiFloat8LaneTables::operands
};

HWY_INLINE HiF8LaneRegs LoadHiF8LaneRegs() {
  const hn::ScalableTag<std::uint8_t> d8;
  const detail::HiFloat8LaneTables& t = detail::hifloat8_lane_tables();
  const auto keep_and = hn::LoadDup128(d8, t.keep_and);
  const auto keep = hn::Or(hn::ShiftLeft<3>(keep_and), hn::LoadDup128(d8, t.keep_or));
  return {hn::LoadDup128(d8, t.half2),
          keep,
          hn::LoadDup128(d8, t.kept),
          hn::LoadDup128(d8, t.pos),
          hn::LoadDup128(d8, t.neg),
          hn::LoadDup128(d8, t.operands[detail::kLaneBigTop]),
          hn::LoadDup128(d8, t.operands[detail::kLaneSmallTop]),
          t.operands};
}

// What HiF8ByteCodes leaves to the table, as maxima over the bytes seen: the codes are all
// right while the exponents are below 142 (|x| < 2^15; NaNs and infinities have 255) and the
// neg window's indices below 0xF8 (R - 112 saturated is -8..-1 only for R in [104, 111]).
// low: the smallest exponent of float16 rows truncated in registers (HiF8ByteCodes' kF16),
// whose zeros and subnormals come out at 112, where every normal float16 value has at least 113.
template <class DB>
struct HiF8LaneFlags {
  explicit HiF8LaneFlags(DB d8)
      : big(hn::Zero(d8)), small(hn::Zero(d8)), low(hn::Set(d8, std::uint8_t{0xFF})) {}
  bool AllRight(DB d8, const HiF8LaneRegs& t) const {
    const auto over =
        hn::Or(hn::Or(hn::SaturatedSub(big, t.big_top), hn::SaturatedSub(small, t.small_top)),
               hn::SaturatedSub(hn::Set(d8, std::uint8_t{113}), low));
#if HWY_TARGET == HWY_AVX2
    (void)d8;
    return _mm256_testz_si256(over.raw, over.raw) != 0;  // one test, no compare and mask move
#else
    return hn::AllTrue(d8, hn::Eq(over, hn::Zero(d8)));
#endif
  }
  hn::Vec<DB> big, small, low;
};

// The HiFloat8 codes of the bfloat16 values of K pairs w0[k], w1[k] (as LoadOrderedPair leaves
// them, 2 * Lanes(d) values each) as 2 * Lanes(d) bytes in order at out + 2 * Lanes(d) * k (the
// encoding: docs/operators/indexer_quant_cache.md, "Quantization (bit-exact)"), by
// hifloat8_lane_tables() on one byte per value: about 29 operations per 32 values (and two blends
// in the loads) where 16-bit lanes took 23 per 16. Each step is taken for all K pairs before the
// next: the chain from a load to its store is some twenty operations long, and with one pair at a
// time the scheduler filled with operations waiting on it before the ports were. w + w splits into
// the exponent (high bytes) and the mantissa times 2 (low bytes).
// A byte shuffle zeroes a byte whose index has bit 7 set, which the indices below arrange for
// every byte that must read nothing:
// - ae >= 16 (|x| < 2^-15 or from 2^16): the ae tables read 0, so nothing rounds and no
//   kept bit is read; the lanes below 2^-23 then read no code (R < 112 in either window) and
//   come out 0x00, those from 2^-23 are counted in `small`, those from 2^15 in `big`.
// - R - 128 below 0 by the xor, R - 112 saturated below 0 outside [112, 127].
// The sign goes in bit 7 where the code is not 0x00 (the lanes below 2^-23 have none), by one
// mask: the windows' entries have bit 7 set. kFirst: the flags start from these bytes.
// kF16: w0 and w1 hold float16 values, each truncated to bfloat16 (HiF8LaneRow's kF16), and
// flags.low takes the bytes in too. Twice a normal value's truncated bfloat16, the sign dropped,
// is its bits shifted right by 2, masked to the exponent and the mantissa's top seven bits, plus
// 112 exponent steps: three operations per vector where the truncation and the doubling took
// four, and the signs are the float16 ones.
template <bool kFirst, int K, bool kF16 = false, class DB, class VW>
HWY_INLINE void HiF8ByteCodes(DB d8, const HiF8LaneRegs& t, const VW* w0, const VW* w1,
                              HiF8LaneFlags<DB>& flags, std::uint8_t* HWY_RESTRICT out) {
  const hn::Repartition<std::int8_t, DB> di8;
  const hn::Repartition<std::uint16_t, DB> d16;
  const hn::Repartition<std::uint64_t, DB> d64;
  using VB = hn::Vec<DB>;
  VB m2[K], e[K], ki[K], mr[K], r[K], ni[K], code[K];
  // The operands other than the five tables are read from memory by each instruction that takes
  // one. Left to itself, GCC keeps them all in registers across the row loop, and then spills and
  // reloads the tables in every pair (AVX2 has sixteen vector registers). The empty asm hides the
  // address's value, so that the loads stay where they are used: 1.02-1.03 x on AVX2 (AMD Zen 3).
  const std::uint8_t(*operands)[32] = t.operands;
  asm volatile("" : "+r"(operands));
  const auto operand = [d8, operands](int i) HWY_ATTR { return hn::Load(d8, operands[i]); };
  const auto doubled = [d16](VW w) HWY_ATTR {
    if constexpr (kF16) {
      return hn::Add(hn::And(hn::ShiftRight<2>(w), hn::Set(d16, std::uint16_t{0x1FFE})),
                     hn::Set(d16, std::uint16_t{0x7000}));
    } else {
      return hn::Add(w, w);
    }
  };
  for (int k = 0; k < K; ++k) {
    // w1's bytes split the other way round (high bytes first), so that a 64-bit blend, which
    // any port runs, gathers the mantissas where an unpack needed a shuffle port; a byte align
    // gathers the exponents.
    const auto s0 =
        hn::TableLookupBytes(hn::BitCast(d8, doubled(w0[k])), operand(detail::kLaneSplitLow));
    const auto s1 =
        hn::TableLookupBytes(hn::BitCast(d8, doubled(w1[k])), operand(detail::kLaneSplitHigh));
    m2[k] = hn::BitCast(d8, hn::OddEven(hn::BitCast(d64, s1), hn::BitCast(d64, s0)));
    e[k] = hn::CombineShiftRightBytes<8>(d8, s1, s0);  // E, the sign dropped
    flags.big = kFirst && k == 0 ? e[k] : hn::Max(flags.big, e[k]);
    if constexpr (kF16) flags.low = kFirst && k == 0 ? e[k] : hn::Min(flags.low, e[k]);
  }
  // 0x70 + ae: a shuffle reads the low four bits; from ae = 16 on, 0x80 or more (at most 240:
  // ae is at most 128, so no saturation is needed).
  for (int k = 0; k < K; ++k) {
    ki[k] = hn::Add(
        hn::BitCast(d8, hn::Abs(hn::BitCast(di8, hn::Add(e[k], operand(detail::kLane129))))),
        operand(detail::kLane112));
  }
  // m + half2 / 2 exactly ((2m + half2 + 1) >> 1 with 2m + half2 even): bit 7 the carry.
  for (int k = 0; k < K; ++k) {
    mr[k] = hn::AverageRound(m2[k], hn::TableLookupBytesOr0(t.half2, ki[k]));
  }
  for (int k = 0; k < K; ++k) {
    r[k] = hn::Sub(e[k], hn::BitCast(d8, hn::BroadcastSignBit(hn::BitCast(di8, mr[k]))));
    ni[k] = hn::BitCast(
        d8, hn::SaturatedSub(hn::BitCast(di8, r[k]), hn::BitCast(di8, operand(detail::kLane112))));
    flags.small = kFirst && k == 0 ? ni[k] : hn::Max(flags.small, ni[k]);
  }
  for (int k = 0; k < K; ++k) {
    const auto base =
        hn::Or(hn::TableLookupBytesOr0(t.pos, hn::Xor(r[k], operand(detail::kLane80))),
               hn::TableLookupBytesOr0(t.neg, ni[k]));
    // The rounded mantissa's top four bits, those below the kept ones masked off before the
    // shift (bit 2 of `keep` is clear, so a neighbour's bit 7 after it is too).
    const auto keep = hn::TableLookupBytesOr0(t.keep, ki[k]);
    const auto top = hn::BitCast(d8, hn::ShiftRight<3>(hn::BitCast(d16, hn::And(mr[k], keep))));
    const auto ti = hn::Or(top, keep);
    // Bit 7 set where the code is not 0x00 (the windows' entries carry it): the sign's bit there.
    code[k] = hn::Or(base, hn::TableLookupBytesOr0(t.kept, ti));
  }
  for (int k = 0; k < K; ++k) {
    std::uint8_t* HWY_RESTRICT at = out + 2 * hn::Lanes(d16) * k;
#if HWY_TARGET == HWY_AVX2
    // The signs in bit 7, packed as the bytes above (each 128-bit block: eight of w0, eight of
    // w1; a negative word saturates to a negative byte).
    const __m256i signs =
        _mm256_or_si256(_mm256_packs_epi16(w0[k].raw, w1[k].raw), operand(detail::kLane7F).raw);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), _mm256_and_si256(code[k].raw, signs));
#else
    const __m128i signs =
        _mm_or_si128(_mm_packs_epi16(w0[k].raw, w1[k].raw), operand(detail::kLane7F).raw);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(at), _mm_and_si128(code[k].raw, signs));
#endif
  }
}

// The bfloat16 values w times x_scale, each float32 product truncated to a bfloat16, which
// keeps its HiFloat8 code, infinities and NaNs (see Bf16ProductsTruncated).
template <class D, class VF>
HWY_INLINE hn::Vec<D> HiF8LaneProducts(D d, hn::Vec<D> w, VF xs) {
  const hn::Repartition<std::uint32_t, D> d32;
  const hn::Repartition<float, D> df;
  const auto w32 = hn::BitCast(d32, w);
  const auto even = hn::Mul(hn::BitCast(df, hn::ShiftLeft<16>(w32)), xs);
  const auto odd = hn::Mul(hn::BitCast(df, hn::And(w32, hn::Set(d32, 0xFFFF0000u))), xs);
  const auto even_high = hn::ShiftRight<16>(hn::BitCast(d32, even));
  return hn::OddEven(hn::BitCast(d, odd), hn::BitCast(d, even_high));
}

// n bfloat16 values times x_scale (n a multiple of 32; kN: n when known at compile time),
// their HiFloat8 codes as HiF8CodesByTable's where flags.AllRight() holds after the call: the
// flags take in the row's bytes, from its first vector on where kFresh (no max against a zero
// then), else on top of those of earlier rows. Two pairs of vectors at a time, where the row
// has them. kF16: n float16 values (x_scale 1), each truncated to bfloat16 in registers
// (HiF8ByteCodes' kF16), which keeps the four mantissa bits HiFloat8 reads: exact for normal
// values; flags.low tells of the others.
template <bool kScaled, std::int64_t kN = 0, bool kFresh = true, bool kF16 = false>
HWY_INLINE void HiF8LaneRow(const HiF8LaneRegs& t, const std::uint16_t* HWY_RESTRICT src,
                            std::uint8_t* HWY_RESTRICT out, std::int64_t n, float x_scale,
                            HiF8LaneFlags<hn::ScalableTag<std::uint8_t>>& flags) {
  if constexpr (kN != 0) n = kN;
  using D = hn::ScalableTag<std::uint16_t>;
  const D d;
  const hn::ScalableTag<std::uint8_t> d8;
  const hn::Repartition<float, D> df;
  const auto xs = hn::Set(df, x_scale);
  const std::int64_t P = 2 * static_cast<std::int64_t>(hn::Lanes(d));  // values per pair
  const auto codes = [&](std::int64_t j, auto first, auto pairs) HWY_ATTR {
    constexpr int K = decltype(pairs)::value;
    hn::Vec<D> w0[K], w1[K];
    for (int k = 0; k < K; ++k) {
      LoadOrderedPair(d, src + j + P * k, w0[k], w1[k]);
      static_assert(!(kF16 && kScaled), "float16 rows take this form with x_scale 1 only");
      if constexpr (kScaled) {
        w0[k] = HiF8LaneProducts(d, w0[k], xs);
        w1[k] = HiF8LaneProducts(d, w1[k], xs);
      }
    }
    HiF8ByteCodes<decltype(first)::value, K, kF16>(d8, t, w0, w1, flags, out + j);
  };
  using Two = std::integral_constant<int, 2>;
  using One = std::integral_constant<int, 1>;
  std::int64_t j = 0;
  if (n >= 2 * P) {
    codes(0, std::bool_constant<kFresh>(), Two());
    for (j = 2 * P; j + 2 * P <= n; j += 2 * P) codes(j, std::false_type(), Two());
  } else {
    codes(0, std::bool_constant<kFresh>(), One());
    j = P;
  }
  for (; j < n; j += P) codes(j, std::false_type(), One());
}

// HiF8LaneRow for one row on its own. False when the row holds a NaN product, one in
// [2^-23, 2^-15) or one from 2^15 (infinities too): the codes written are then not all right,
// and the caller takes the table.
template <bool kScaled, std::int64_t kN = 0>
HWY_INLINE bool HiF8CodesByLanes(const HiF8LaneRegs& t, const std::uint16_t* HWY_RESTRICT src,
                                 std::uint8_t* HWY_RESTRICT out, std::int64_t n, float x_scale) {
  const hn::ScalableTag<std::uint8_t> d8;
  HiF8LaneFlags<hn::ScalableTag<std::uint8_t>> flags(d8);
  HiF8LaneRow<kScaled, kN>(t, src, out, n, x_scale, flags);
  return flags.AllRight(d8, t);
}
#endif  // KVS_HIF8_LANES

#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace kvscatter::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVSCATTER_QUANT_SIMD_INL_H_
