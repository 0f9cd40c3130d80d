// The kernel of kv_compress_epilog: Highway SIMD with runtime dispatch, one row per token,
// bit-identical to the reference; the driver (execute.cc) splits rows over threads.
//
// - Inputs are read as 32-bit words holding two bf16 values: `w << 16` is the even element as
//   f32 and `w & 0xFFFF0000` the odd one, so one load feeds two vectors and the two code
//   vectors recombine in element order with a shift and an or.
// - Group amax is an unsigned 16-bit max over (bits & 0x7FFF): ordered like the magnitudes,
//   with every NaN above infinity, so "amax > 0x7F80" detects a NaN in the group.
// - Scales are computed per group in scalar f32 exactly as the reference does.
// - Groups whose quotients or products are all finite (the normal case) take fast encoders
//   that skip NaN handling; the rare others take careful encoders with the reference's NaN
//   rules. All encoders are lane forms of the scalar rules (tests sweep them).
// - hifloat8_fp4 rows go in batches: the group maxima, scales and multipliers of a few rows
//   first, then the codes of each (Hif8Fp4Rows).
// - hifloat8_fp4 rows look FP4 codes up in registers by the bucket tables of
//   quant/e2m1_buckets.h: 16-bit entries (vpermw) on AVX-512, byte entries (pshufb) on AVX2
//   (one byte per value for groups of 32 and 64) and SSE4. On AVX-512 the HiFloat8 rope goes by
//   exponent tables over the products truncated to bfloat16 (quant_simd-inl.h:
//   HiF8CodesBf16RowBytes by byte permutes where the CPU has VBMI, else HiF8CodesBf16Row); on AVX2
//   and SSE4 one byte per value (HiF8CodesByLanes), the HiFloat8 table for a rope that form does
//   not cover.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kv_compress_epilog/kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/bytes-inl.h"
#include "ops/kv_compress_epilog/internal.h"
#include "ops/kv_compress_epilog/kernel.h"
#include "quant/e2m1_buckets.h"
#include "quant/hifloat8_table.h"
#include "quant/quant_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 8 f32 lanes: one vector pair then covers at most 16 elements, the smallest group.
using DF = hn::CappedTag<float, 8>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using DU16 = hn::Rebind<std::uint16_t, DF>;   // two output bytes per f32 lane
using DU8 = hn::Rebind<std::uint8_t, DF>;     // one output byte per f32 lane
using DA = hn::CappedTag<std::uint16_t, 16>;  // amax over raw bf16 bits
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;

// 2L consecutive bf16 values as L u32 words; Even() and Odd() widen elements 2i and 2i+1 to
// f32. Functions rather than a struct of two vectors: SVE vectors are sizeless types, which
// cannot be struct members.
HWY_INLINE VU LoadPairs(const std::uint16_t* p) {
  return hn::LoadU(DU(), reinterpret_cast<const std::uint32_t*>(p));
}
HWY_INLINE VF Even(VU w) { return hn::BitCast(DF(), hn::ShiftLeft<16>(w)); }
HWY_INLINE VF Odd(VU w) { return hn::BitCast(DF(), hn::And(w, hn::Set(DU(), 0xFFFF0000u))); }

// Byte codes of the even and odd elements -> 2L bytes in element order.
HWY_INLINE void StoreBytePairs(VU even, VU odd, std::uint8_t* out) {
  const DU16 d16;
  hn::StoreU(hn::TruncateTo(d16, hn::Or(even, hn::ShiftLeft<8>(odd))), d16,
             reinterpret_cast<std::uint16_t*>(out));
}

// Nibble codes of the even and odd elements -> L bytes, the even element in the low nibble.
HWY_INLINE void StoreNibblePairs(VU even, VU odd, std::uint8_t* out) {
  const DU8 d8;
  hn::StoreU(hn::TruncateTo(d8, hn::Or(even, hn::ShiftLeft<4>(odd))), d8, out);
}

// Largest (bits & 0x7FFF) over count bf16 values.
HWY_INLINE std::uint32_t AmaxBits(const std::uint16_t* x, std::int64_t count) {
  const DA da;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(da));
  const auto mag = hn::Set(da, std::uint16_t{0x7FFF});
  auto m = hn::Zero(da);
  for (std::int64_t i = 0; i < count; i += L) m = hn::Max(m, hn::And(hn::LoadU(da, x + i), mag));
  return hn::GetLane(hn::MaxOfLanes(da, m));
}

// Scalar bf16 RNE (docs/formats.md), inlined here for the per-group scales.
HWY_INLINE std::uint16_t Bf16(float f) {
  const std::uint32_t b = bits_of(f);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((b >> 16) | 0x40u);
  return static_cast<std::uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// bf16 RNE codes (in the low 16 bits) of non-NaN lanes.
HWY_INLINE VU Bf16Lanes(VF f) {
  const DU du;
  const VU b = hn::BitCast(du, f);
  return hn::ShiftRight<16>(
      hn::Add(hn::Add(b, hn::And(hn::ShiftRight<16>(b), hn::Set(du, 1u))), hn::Set(du, 0x7FFFu)));
}

// ---- float8_e4m3fn --------------------------------------------------------------------------

// e4m3fn magnitude code (no sign) of min(|q|, 448), RNE; q must not be NaN.
HWY_INLINE VU EncodeE4M3Magnitude(VF q) {
  const DF df;
  const DU du;
  const VF af = hn::Min(hn::Abs(q), hn::Set(df, 448.0f));
  const VU a = hn::BitCast(du, af);
  // Normal (>= 2^-6): round the mantissa to 3 bits, nearest even, rebiasing 127 -> 7 on the way
  // (the bias difference 120 << 23 is a multiple of the rounding unit, so it commutes).
  const VU odd = hn::And(hn::ShiftRight<20>(a), hn::Set(du, 1u));
  const VU normal =
      hn::ShiftRight<20>(hn::Add(hn::Add(a, odd), hn::Set(du, 0x7FFFFu - (120u << 23))));
  // Subnormal: adding 2^14 leaves an ulp of 2^-9, the e4m3 subnormal step, so the f32 add
  // rounds to it (nearest even) and the low bits count the steps (8 = the smallest normal).
  const VU sub =
      hn::Sub(hn::BitCast(du, hn::Add(af, hn::Set(df, 16384.0f))), hn::Set(du, 0x46800000u));
  const auto is_sub = hn::RebindMask(du, hn::Lt(af, hn::Set(df, 0.015625f)));
  return hn::IfThenElse(is_sub, sub, normal);
}

// e4m3fn code of clamp(q, -448, 448), RNE; q must not be NaN.
HWY_INLINE VU EncodeE4M3Finite(VF q) {
  const DU du;
  const VU sign = hn::And(hn::ShiftRight<24>(hn::BitCast(du, q)), hn::Set(du, 0x80u));
  return hn::Or(EncodeE4M3Magnitude(q), sign);
}

// As above, and NaN lanes give 0x7F.
HWY_INLINE VU EncodeE4M3(VF q) {
  const DU du;
  const VF safe = hn::IfThenZeroElse(hn::IsNaN(q), q);
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(q)), hn::Set(du, 0x7Fu),
                        EncodeE4M3Finite(safe));
}

// ---- float4_e2m1 ----------------------------------------------------------------------------

// e2m1 nibble of clamp(bf16_RNE(p), -6, 6), RNE; p must not be NaN.
HWY_INLINE VU EncodeE2M1Finite(VF p) {
  const DF df;
  const DU du;
  const VU b = hn::BitCast(du, p);
  // bf16 round to nearest even (p is finite or infinite; overflow rounds to infinity).
  const VU r = hn::And(
      hn::Add(hn::Add(b, hn::And(hn::ShiftRight<16>(b), hn::Set(du, 1u))), hn::Set(du, 0x7FFFu)),
      hn::Set(du, 0xFFFF0000u));
  const VU sign = hn::ShiftLeft<3>(hn::ShiftRight<31>(r));
  const VF af = hn::Min(hn::BitCast(df, hn::And(r, hn::Set(du, 0x7FFFFFFFu))), hn::Set(df, 6.0f));
  const VU a = hn::BitCast(du, af);
  // Below 1: steps of 0.5; 2^22 + af rounds to them (ulp 0.5), codes 0..2.
  const VU small =
      hn::Sub(hn::BitCast(du, hn::Add(af, hn::Set(df, 4194304.0f))), hn::Set(du, 0x4A800000u));
  // [1, 6]: one mantissa bit, bias 1 (rebias 127 -> 1 is 126 << 23, i.e. 252 << 22).
  const VU odd = hn::And(hn::ShiftRight<22>(a), hn::Set(du, 1u));
  const VU big =
      hn::ShiftRight<22>(hn::Add(hn::Add(a, odd), hn::Set(du, 0x1FFFFFu - (126u << 23))));
  const auto is_small = hn::RebindMask(du, hn::Lt(af, hn::Set(df, 1.0f)));
  return hn::Or(hn::IfThenElse(is_small, small, big), sign);
}

// As above, and NaN lanes give 0.
HWY_INLINE VU EncodeE2M1(VF p) {
  const DU du;
  const auto nan = hn::IsNaN(p);
  return hn::IfThenZeroElse(hn::RebindMask(du, nan), EncodeE2M1Finite(hn::IfThenZeroElse(nan, p)));
}

// ---- HiFloat8 -------------------------------------------------------------------------------

// HiFloat8 code, round half away from zero, saturating: the lane form of the scalar encoder.
HWY_INLINE VU EncodeHiF8(VF x) {
  const DU du;
  const DI di;
  using VI = hn::Vec<DI>;
  const VU b = hn::BitCast(du, x);
  const VU a = hn::And(b, hn::Set(du, 0x7FFFFFFFu));
  const VU s = hn::And(hn::ShiftRight<24>(b), hn::Set(du, 0x80u));
  const VI ai = hn::BitCast(di, a);
  const VI ae = hn::Abs(hn::Sub(hn::ShiftRight<23>(ai), hn::Set(di, 127)));
  // Mantissa bits from the input exponent: 3 (|e| <= 3), 2 (<= 7), 1 (<= 15), 0 (denormals);
  // half = 2^(22 - mb) is the rounding increment, 2*half - 1 the bits cleared.
  const auto le3 = hn::RebindMask(du, hn::Lt(ae, hn::Set(di, 4)));
  const auto le7 = hn::RebindMask(du, hn::Lt(ae, hn::Set(di, 8)));
  const auto le15 = hn::RebindMask(du, hn::Lt(ae, hn::Set(di, 16)));
  const VU half = hn::IfThenElse(
      le3, hn::Set(du, 1u << 19),
      hn::IfThenElse(le7, hn::Set(du, 1u << 20),
                     hn::IfThenElse(le15, hn::Set(du, 1u << 21), hn::Set(du, 1u << 22))));
  const VU r = hn::AndNot(hn::Sub(hn::Add(half, half), hn::Set(du, 1u)), hn::Add(a, half));
  const VI e2 = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(r)), hn::Set(di, 127));
  const VI ae2 = hn::Abs(e2);
  const VU ae2u = hn::BitCast(du, ae2);
  // After a carry into the next binade the mantissa is zero, so the field width can follow
  // the rounded exponent.
  const VU m3 = hn::And(hn::ShiftRight<20>(r), hn::Set(du, 7u));
  const VU m2 = hn::And(hn::ShiftRight<21>(r), hn::Set(du, 3u));
  const VU m1 = hn::And(hn::ShiftRight<22>(r), hn::Set(du, 1u));
  const VU neg = hn::ShiftRight<31>(hn::BitCast(du, e2));  // 1 if e2 < 0
  const VU n4 = hn::ShiftLeft<4>(neg);
  const VU c0 = hn::Or(hn::Set(du, 0x08u), m3);
  const VU c1 = hn::Or(hn::Or(hn::Set(du, 0x10u), hn::ShiftLeft<3>(neg)), m3);
  const VU c23 = hn::Or(hn::Or(hn::Set(du, 0x20u), n4),
                        hn::Or(hn::ShiftLeft<3>(hn::Sub(ae2u, hn::Set(du, 2u))), m3));
  const VU c47 = hn::Or(hn::Or(hn::Set(du, 0x40u), n4),
                        hn::Or(hn::ShiftLeft<2>(hn::Sub(ae2u, hn::Set(du, 4u))), m2));
  const VU c815 = hn::Or(hn::Or(hn::Set(du, 0x60u), n4),
                         hn::Or(hn::ShiftLeft<1>(hn::Sub(ae2u, hn::Set(du, 8u))), m1));
  VU c = hn::IfThenElse(hn::RebindMask(du, hn::Lt(ae2, hn::Set(di, 8))), c47, c815);
  c = hn::IfThenElse(hn::RebindMask(du, hn::Lt(ae2, hn::Set(di, 4))), c23, c);
  c = hn::IfThenElse(hn::RebindMask(du, hn::Eq(ae2, hn::Set(di, 1))), c1, c);
  c = hn::IfThenElse(hn::RebindMask(du, hn::Eq(ae2, hn::Set(di, 0))), c0, c);
  // Denormals 2^(c - 23) for e2 in [-23, -16] (2^-23 itself rounds away to code 1).
  const VU den = hn::BitCast(du, hn::Max(hn::Add(e2, hn::Set(di, 23)), hn::Set(di, 1)));
  c = hn::IfThenElse(hn::RebindMask(du, hn::Lt(e2, hn::Set(di, -15))), den, c);
  // Saturation: rounded magnitude >= 1.25 * 2^15 (or any e >= 16, infinities included).
  const auto ovf =
      hn::Or(hn::Gt(e2, hn::Set(di, 15)),
             hn::And(hn::Eq(e2, hn::Set(di, 15)), hn::RebindMask(di, hn::Ne(m1, hn::Zero(du)))));
  c = hn::IfThenElse(hn::RebindMask(du, ovf), hn::Set(du, 0x6Eu), c);
  c = hn::Or(c, s);
  // |x| < 2^-23 rounds to the only zero (no -0); NaN saturates to 0x00.
  const auto zero =
      hn::Or(hn::Lt(ai, hn::Set(di, 0x34000000)), hn::Gt(ai, hn::Set(di, 0x7F800000)));
  return hn::IfThenZeroElse(hn::RebindMask(du, zero), c);
}

// ---- rows -----------------------------------------------------------------------------------

HWY_INLINE void PutBf16(std::uint8_t* out, std::uint16_t code) {
  out[0] = static_cast<std::uint8_t>(code & 0xFF);
  out[1] = static_cast<std::uint8_t>(code >> 8);
}

// 2L elements (one 32-bit word pair): q = v / k (kDivide) or v * k, then e4m3.
template <bool kDivide, bool kFinite>
HWY_INLINE void Fp8Chunk(const std::uint16_t* HWY_RESTRICT x, std::uint8_t* HWY_RESTRICT out,
                         VF k) {
  const DF df;
  const DU du;
  const VU w = hn::LoadU(du, reinterpret_cast<const std::uint32_t*>(x));
  const VF ve = hn::BitCast(df, hn::ShiftLeft<16>(w));
  const VF vo = hn::BitCast(df, hn::And(w, hn::Set(du, 0xFFFF0000u)));
  const VF qe = kDivide ? hn::Div(ve, k) : hn::Mul(ve, k);
  const VF qo = kDivide ? hn::Div(vo, k) : hn::Mul(vo, k);
#if HWY_TARGET == HWY_SCALAR  // one lane cannot be split into halves
  if (kFinite) {
    StoreBytePairs(EncodeE4M3Finite(qe), EncodeE4M3Finite(qo), out);
  } else {
    StoreBytePairs(EncodeE4M3(qe), EncodeE4M3(qo), out);
  }
#else
  if (kFinite) {
    const hn::Repartition<std::uint16_t, DU> dw;
    const hn::Rebind<std::uint8_t, decltype(dw)> db;
    // s > 0, so each code takes the sign of its input: bits 15 and 31 of w land on bits 7
    // and 23, next to the even code (byte 0) and the odd code (byte 2).
    const VU sign = hn::And(hn::ShiftRight<8>(w), hn::Set(du, 0x00800080u));
    const VU both =
        hn::Or(hn::Or(EncodeE4M3Magnitude(qe), hn::ShiftLeft<16>(EncodeE4M3Magnitude(qo))), sign);
    hn::StoreU(hn::TruncateTo(db, hn::BitCast(dw, both)), db, out);
  } else {
    StoreBytePairs(EncodeE4M3(qe), EncodeE4M3(qo), out);
  }
#endif
}

// One group of 64: q = v / k (kDivide) or v * k, then e4m3.
template <bool kDivide, bool kFinite>
HWY_INLINE void Fp8Group(const std::uint16_t* HWY_RESTRICT xg, std::uint8_t* HWY_RESTRICT data,
                         float scalar) {
  const DF df;
  const std::int64_t step = 2 * static_cast<std::int64_t>(hn::Lanes(df));
  const VF k = hn::Set(df, scalar);
  for (std::int64_t i = 0; i < 64; i += step) {
    Fp8Chunk<kDivide, kFinite>(xg + i, data + i, k);
  }
}

// One finite group of 64 with s = 2^(e - 127) (round_scale). q = v * 2^(127 - e) is exact,
// so wherever q lands in e4m3's normal range its bf16 bits are v's with the exponent field
// lowered by e - 127: the code is computed on 16-bit lanes, twice as many per vector. Chunks
// holding a nonzero q below 2^-6 (e4m3 subnormals, bf16 subnormal inputs) take the f32 path.
HWY_INLINE void Fp8GroupPow2(const std::uint16_t* HWY_RESTRICT xg, std::uint8_t* HWY_RESTRICT data,
                             std::uint32_t e) {
#if HWY_TARGET == HWY_SCALAR
  Fp8Group<false, true>(xg, data, f32_from_bits((254u - e) << 23));
#else
  const DF df;
  const hn::Repartition<std::uint16_t, DU> dw;  // 2L lanes: the elements of one f32 pair
  const hn::RebindToSigned<decltype(dw)> dwi;
  const hn::Rebind<std::uint8_t, decltype(dw)> db;
  const std::int64_t step = static_cast<std::int64_t>(hn::Lanes(dw));
  const VF inv = hn::Set(df, f32_from_bits((254u - e) << 23));
  // (e - 127) << 7 modulo 2^16; |e - 127| <= 127 keeps every finite q of the group in range.
  const auto shift = hn::Set(dw, static_cast<std::uint16_t>((e - 127u) << 7));
  const auto max448 = hn::Set(dwi, std::int16_t{0x43E0});      // bf16 bits of 448
  const auto min_normal = hn::Set(dwi, std::int16_t{0x3C7F});  // just below 2^-6
  for (std::int64_t i = 0; i < 64; i += step) {
    const auto w = hn::LoadU(dw, xg + i);
    const auto a = hn::And(w, hn::Set(dw, std::uint16_t{0x7FFF}));
    const auto is_zero = hn::Eq(a, hn::Zero(dw));
    const auto aq = hn::Min(hn::BitCast(dwi, hn::Sub(a, shift)), max448);  // |q|, clamped
    const auto ok = hn::Or(hn::RebindMask(dw, hn::Gt(aq, min_normal)), is_zero);
    if (HWY_UNLIKELY(!hn::AllTrue(dw, ok))) {
      Fp8Chunk<false, true>(xg + i, data + i, inv);
      continue;
    }
    // 7 mantissa bits -> 3, nearest even, rebiasing 127 -> 7 (a multiple of the unit).
    const auto u = hn::BitCast(dw, aq);
    const auto odd = hn::And(hn::ShiftRight<4>(u), hn::Set(dw, std::uint16_t{1}));
    const auto normal = hn::ShiftRight<4>(
        hn::Add(hn::Add(u, odd), hn::Set(dw, static_cast<std::uint16_t>(0x7u - (120u << 7)))));
    const auto sign = hn::ShiftRight<8>(hn::And(w, hn::Set(dw, std::uint16_t{0x8000})));
    const auto code = hn::Or(hn::IfThenZeroElse(is_zero, normal), sign);
    hn::StoreU(hn::TruncateTo(db, code), db, data + i);
  }
#endif
}

// Group amax of every group of a row first, eight groups per reduction: the scale of a group
// then never waits on its own reduction, and the data loops of consecutive groups overlap.
constexpr std::int64_t kMaxGroups = (8192 - 64) / 16;

// Magnitude bits (bits & 0x7FFF) of the largest |x| of every group of gs; groups + 8 entries.
// Vectors of at most kLanes lanes.
template <std::size_t kGs, std::size_t kLanes = 16>
HWY_INLINE void GroupAmax(const std::uint16_t* HWY_RESTRICT x, std::int64_t groups,
                          std::uint16_t* HWY_RESTRICT amax) {
#if HWY_TARGET != HWY_SCALAR
  quant::HWY_NAMESPACE::GroupMagnitudes<kGs, false, kLanes>(x, groups, amax, nullptr);
#else
  for (std::int64_t g = 0; g < groups; ++g) {
    amax[g] = static_cast<std::uint16_t>(AmaxBits(x + kGs * g, kGs));
  }
#endif
}

// One group of 64 in any case (NaN, infinities, e4m3 subnormals, round_scale false): the scale
// from its amax bits as the reference computes it, the codes, then the scale byte(s).
template <bool kMode0, bool kRoundScale>
HWY_INLINE void Fp8GroupAny(const std::uint16_t* HWY_RESTRICT xg, std::uint8_t* HWY_RESTRICT data,
                            std::uint8_t* HWY_RESTRICT scale, std::uint32_t amax_bits) {
  if (amax_bits > 0x7F80u) {  // a NaN in the group
    std::memset(data, 0x7F, 64);
    if (kMode0) {
      PutBf16(scale, kBf16CanonicalNaN);
    } else {
      scale[0] = 0xFF;
    }
    return;
  }
  float s =
      std::max(f32_from_bits(amax_bits << 16), f32_from_bits(kEpsBits)) * f32_from_bits(kC448Bits);
  const bool finite = amax_bits < 0x7F80u;  // then s is finite and nonzero, quotients finite
  if (kRoundScale) {
    std::uint32_t u = bits_of(s);
    std::uint32_t e = u >> 23;
    if (u & 0x7FFFFFu) e += 1;
    s = f32_from_bits(e << 23);
    // s = 2^(e - 127) (or +inf), so 1/s = 2^(127 - e) is exact (or 0) and v * (1/s) == v / s
    // bit for bit; forming it from the exponent avoids a scalar division per group.
    if (finite) {
      Fp8GroupPow2(xg, data, e);
    } else {
      Fp8Group<false, false>(xg, data, e >= 0xFFu ? 0.0f : f32_from_bits((254u - e) << 23));
    }
  } else if (finite) {
    Fp8Group<true, true>(xg, data, s);
  } else {
    Fp8Group<true, false>(xg, data, s);
  }
  if (kMode0) {
    PutBf16(scale, Bf16(s));
  } else {
    scale[0] = static_cast<std::uint8_t>((bits_of(s) >> 23) & 0xFF);
  }
}

#if HWY_TARGET != HWY_SCALAR
// The plan of an fp8 row with power-of-two scales (round_scale), in two steps that the row
// driver takes for all the rows of a batch in turn: the magnitudes of all the row's groups,
// eight at a time (GroupMagnitudes), then their scales (Fp8Pow2Scales): E4M3Pow2ScalesByKey8
// gives subw, e and fast by the scale rule in integer steps on 16-bit lanes (with a float
// multiply on 32-bit lanes the call took 1.06-1.09 x as long on AVX2, AMD Zen 2). The plan is a
// long dependency chain (loads, reductions, scale rule) with little work, so the driver plans
// several rows before quantizing any of them: the chains then overlap instead of following
// each other. The scale rule waits on the end of its row's reductions: issued right behind them,
// its operations waited in the core's scheduler while the row's loads and reductions ran (as
// builds that skip or move the rule tell; no counters were at hand), and issued after the
// batch's other rows' magnitudes they find their inputs ready: 1.07-1.12 x faster at
// 1,024-16,384 tokens on AMD Zen 5 (AVX-512), 1.03-1.05 x on AVX2.
HWY_INLINE void Fp8Pow2Scales(std::int64_t groups, const std::uint16_t* HWY_RESTRICT amax,
                              const std::uint16_t* HWY_RESTRICT min1,
                              std::uint32_t* HWY_RESTRICT subw, std::uint8_t* HWY_RESTRICT e,
                              std::uint8_t* HWY_RESTRICT fast) {
  for (std::int64_t g = 0; g < groups; g += 8) {
    quant::HWY_NAMESPACE::E4M3Pow2ScalesByKey8<105>(amax + g, min1 + g, subw + g, e + g, fast + g);
  }
}

// Second phase: the rope, the codes and the scale bytes of the row. Groups with fast = 1
// (nearly all) are quantized on 16-bit lanes from the bf16 bits, sign and all (five operations
// per vector, where masking the magnitude and or-ing the sign back took eight); that form is
// wrong for zeros, so a group holding one is not fast (GroupMagnitudes' minimum counts zeros)
// and takes the general path with the reference's rules, as do the rest.
// kHigh: how the codes are narrowed (quant/quant_simd-inl.h, HighByte).
template <bool kMode0, quant::HWY_NAMESPACE::HighByte kHigh>
HWY_INLINE void Fp8Pow2Quantize(const std::uint16_t* HWY_RESTRICT x, std::uint8_t* HWY_RESTRICT out,
                                std::int64_t n, std::int64_t groups,
                                const std::uint16_t* HWY_RESTRICT amax,
                                const std::uint32_t* HWY_RESTRICT subw,
                                const std::uint8_t* HWY_RESTRICT e,
                                const std::uint8_t* HWY_RESTRICT fast) {
  std::memcpy(out, x + n, 128);  // rope: raw little-endian bf16
  std::uint8_t* data = out + 128;
  std::uint8_t* scale = out + 128 + n;
  constexpr std::int64_t kScaleBytes = kMode0 ? 2 : 1;
  for (std::int64_t g = 0; g < groups; ++g) {
    std::uint8_t* sg = scale + kScaleBytes * g;
    if (HWY_UNLIKELY(!fast[g])) {
      Fp8GroupAny<kMode0, true>(x + 64 * g, data + 64 * g, sg, amax[g]);
      continue;
    }
    // 64 codes per store: both vectors of the group narrowed together (see StoreCodePair).
    // Without the clamp to 448: the scale is the power of two at or above amax * f32(1/448),
    // which is below amax / 448 by float32 rounding at most, and no bfloat16 amax lies that
    // close above 448 times a power of two (the nearest is 2^-8 away), so no quotient passes
    // 448.
    quant::HWY_NAMESPACE::QuantizeE4M3Pow2RowUnmasked<false, kHigh>(x + 64 * g, data + 64 * g, 64,
                                                                    subw + g);
    if (kMode0) {
      PutBf16(sg, static_cast<std::uint16_t>(e[g] << 7));  // bf16 of 2^(e - 127), exact
    } else {
      sg[0] = static_cast<std::uint8_t>(e[g]);
    }
  }
}
#endif

// One row of an fp8 mode by the general path: the SIMD targets take calls with round_scale
// through Fp8Pow2Rows, so here only the scalar target's and those without it.
template <bool kMode0, bool kRoundScale>
void Fp8Row(const std::uint16_t* HWY_RESTRICT x, std::uint8_t* HWY_RESTRICT out, std::int64_t n,
            std::int64_t groups) {
  alignas(64) std::uint16_t amax[kMaxGroups + 8];
  std::memcpy(out, x + n, 128);  // rope: raw little-endian bf16
  std::uint8_t* data = out + 128;
  std::uint8_t* scale = out + 128 + n;
  constexpr std::int64_t kScaleBytes = kMode0 ? 2 : 1;
  GroupAmax<64>(x, groups, amax);
  for (std::int64_t g = 0; g < groups; ++g) {
    Fp8GroupAny<kMode0, kRoundScale>(x + 64 * g, data + 64 * g, scale + kScaleBytes * g, amax[g]);
  }
}

// The nope of a row: every vector pair lies inside one group (groups are >= 16 elements and
// a pair covers at most 16), so its multiplier is that group's broadcast.
template <bool kFinite>
HWY_INLINE void Fp4Nope(const std::uint16_t* HWY_RESTRICT x, std::uint8_t* HWY_RESTRICT data,
                        std::int64_t n, std::int64_t gs, const float* HWY_RESTRICT inv_b) {
  const DF df;
  const std::int64_t step = 2 * static_cast<std::int64_t>(hn::Lanes(df));
  for (std::int64_t i = 0; i < n; i += step) {
    const VF k = hn::Set(df, inv_b[i / gs]);
    const VU w = LoadPairs(x + i);
    if (kFinite) {
      StoreNibblePairs(EncodeE2M1Finite(hn::Mul(Even(w), k)),
                       EncodeE2M1Finite(hn::Mul(Odd(w), k)), data + i / 2);
    } else {
      StoreNibblePairs(EncodeE2M1(hn::Mul(Even(w), k)), EncodeE2M1(hn::Mul(Odd(w), k)),
                       data + i / 2);
    }
  }
}

#if HWY_TARGET != HWY_SCALAR
// The nope of a row whose multipliers are all finite: FP4 codes by bucket tables where the
// target has them and the group's multiplier allows (nearly always), else by per-group
// thresholds.
HWY_INLINE void Fp4NopeFinite(const std::uint16_t* HWY_RESTRICT x, std::uint8_t* HWY_RESTRICT data,
                              std::int64_t gs, std::int64_t groups,
                              const float* HWY_RESTRICT inv_b,
                              const std::uint16_t* HWY_RESTRICT amax) {
  namespace qn = quant::HWY_NAMESPACE;
  constexpr std::int64_t kStride = kMaxGroups + 8;
  std::int64_t rest[kMaxGroups];  // the groups left to the thresholds
  std::int64_t left = groups;
#if KVS_E2M1_BUCKETS
  if (gs != 16) {  // a bucket vector holds 32 values
    left = gs == 32 ? qn::QuantizeE2M1ByBuckets<32, true>(x, data, groups, inv_b, amax, rest)
                    : qn::QuantizeE2M1ByBuckets<64, true>(x, data, groups, inv_b, amax, rest);
  } else {
    for (std::int64_t g = 0; g < groups; ++g) rest[g] = g;
  }
#elif KVS_FP4_BYTES
  left = gs == 16   ? qn::QuantizeE2M1ByByteBuckets<16, true>(x, data, groups, inv_b, amax, rest)
         : gs == 32 ? qn::QuantizeE2M1ByBytePairs<32, true>(x, data, groups, inv_b, amax, rest)
                    : qn::QuantizeE2M1ByBytePairs<64, true>(x, data, groups, inv_b, amax, rest);
#elif KVS_E2M1_BYTE_BUCKETS
  left = gs == 16   ? qn::QuantizeE2M1ByByteBuckets<16, true>(x, data, groups, inv_b, amax, rest)
         : gs == 32 ? qn::QuantizeE2M1ByByteBuckets<32, true>(x, data, groups, inv_b, amax, rest)
                    : qn::QuantizeE2M1ByByteBuckets<64, true>(x, data, groups, inv_b, amax, rest);
#else
  (void)amax;
  for (std::int64_t g = 0; g < groups; ++g) rest[g] = g;
#endif
  if (left == 0) return;
  alignas(64) std::uint16_t thr[7 * kStride];
  qn::E2M1Thresholds(inv_b, groups, thr, kStride);
  for (std::int64_t k = 0; k < left; ++k) {
    const std::int64_t g = rest[k];
    const std::uint16_t* xg = x + gs * g;
    std::uint8_t* out = data + gs / 2 * g;
    if (gs == 16) {
      qn::QuantizeE2M1Group<16>(xg, out, thr + g, kStride);
    } else if (gs == 32) {
      qn::QuantizeE2M1Group<32>(xg, out, thr + g, kStride);
    } else {
      qn::QuantizeE2M1Group<64>(xg, out, thr + g, kStride);
    }
  }
}
#endif

#if HWY_TARGET != HWY_SCALAR
// The rope by the HiFloat8 table (detail::hifloat8_sat_table()) with x_scale 1: each input is
// its own product (x * 1 is x, and a NaN stays a NaN), so the table key, the top bits of the
// product's float32, is the bf16 bits shifted, 16 lanes at a time instead of a widening, a
// multiply and a narrowing per 8. The lookups read four keys per load and unroll: one load,
// one lookup and one store per code otherwise left the loop's own instructions a third of the
// work. False (nothing written) for a NaN.
HWY_INLINE bool HiF8RopeUnscaled(const std::uint16_t* HWY_RESTRICT rope,
                                 std::uint8_t* HWY_RESTRICT out,
                                 const std::uint8_t* HWY_RESTRICT table) {
  const hn::CappedTag<std::uint16_t, 16> d;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(d));
  alignas(64) std::uint16_t keys[64];
  auto nan = hn::Zero(d);
  for (std::int64_t j = 0; j < 64; j += L) {
    const auto w = hn::LoadU(d, rope + j);
    nan = hn::Max(nan, hn::And(w, hn::Set(d, std::uint16_t{0x7FFF})));
    hn::Store(hn::ShiftRight<detail::kHiFloat8TableShift - 16>(w), d, keys + j);
  }
  if (HWY_UNLIKELY(hn::GetLane(hn::MaxOfLanes(d, nan)) > 0x7F80)) return false;
  if constexpr (std::endian::native == std::endian::little) {
#pragma GCC unroll 16
    for (int j = 0; j < 64; j += 4) {
      std::uint64_t q;
      std::memcpy(&q, keys + j, sizeof(q));
      out[j] = table[q & 0xFFFF];
      out[j + 1] = table[(q >> 16) & 0xFFFF];
      out[j + 2] = table[(q >> 32) & 0xFFFF];
      out[j + 3] = table[q >> 48];
    }
  } else {
    for (int j = 0; j < 64; ++j) out[j] = table[keys[j]];
  }
  return true;
}
#endif

#if HWY_TARGET != HWY_SCALAR && !KVS_HIF8_BF16
// The rope's 64 HiFloat8 codes by the table; false (nothing written) where a NaN product sends
// the rope to the lane encoder.
HWY_INLINE bool HiF8Rope(const std::uint16_t* HWY_RESTRICT rope, std::uint8_t* HWY_RESTRICT out,
                         float x_scale) {
  alignas(64) std::uint16_t keys[64];
  return quant::HWY_NAMESPACE::HiF8CodesByTable(rope, out, 64, x_scale, keys);
}
#endif

static_assert((kMaxGroups + 31) / 32 * 32 <= kMaxGroups + 8, "E2M1PlansOfAmax's whole vectors");

// How a hifloat8_fp4 row's nope is coded, as its plan found it.
enum class Fp4Plan : std::uint8_t {
  kAny,     // some amax or multiplier is not finite: the encoder with the NaN rule
  kFinite,  // every amax and multiplier finite: the bucket tables or the thresholds
  kAmax,    // every group planned by the amax entries (E2M1PlansOfAmax): the bucket tables
};

// First phase of hifloat8_fp4 rows: per-group amax, then every group's scale and multiplier at
// once: the maxima (bits & 0x7FFF) to amax_bits, the scales' bf16 to scale_code (groups + 8
// entries each, and room for whole vectors of 32: kMaxGroups + 8 is enough). Where the target
// has the 16-bit bucket tables (groups of 32 and 64), the scale and the bucket table of a group
// come from its amax by the amax entries, three table lookups for 32 groups (of one row or of a
// batch's rows), with the tables to table and b64 (quant::E2M1PlansOfAmaxRows); a row with a
// group those entries do not serve (a zero, subnormal or non-finite amax, or one below 2^-121)
// takes the division (Hif8Fp4Divide). A dependency chain (loads, reductions, lookups or a
// division) with little work, which is why the batch driver plans several rows before coding
// any of them.
HWY_INLINE void Hif8Fp4Amax(const std::uint16_t* HWY_RESTRICT x, std::int64_t gs,
                            std::int64_t groups, std::uint16_t* HWY_RESTRICT amax_bits) {
  if (gs == 16) {
    GroupAmax<16>(x, groups, amax_bits);
  } else if (gs == 32) {
    GroupAmax<32, 32>(x, groups, amax_bits);
  } else {
    GroupAmax<64, 32>(x, groups, amax_bits);
  }
}

// The plan of a row by the division: the multipliers to inv_b (one vector division instead of a
// scalar one per group; the same IEEE operations as the reference) and the scales to scale_code.
HWY_INLINE Fp4Plan Hif8Fp4Divide(std::int64_t groups, std::uint16_t* HWY_RESTRICT amax_bits,
                                 float* HWY_RESTRICT inv_b,
                                 std::uint16_t* HWY_RESTRICT scale_code) {
  const DF df;
  const DU du;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const float c6 = f32_from_bits(kC6Bits);
  for (std::int64_t g = groups; g < groups + L; ++g) amax_bits[g] = 0;  // lanes past the end
  auto non_finite = hn::FirstN(df, 0);  // some amax or multiplier is NaN or infinite
  const DU16 d16;
  for (std::int64_t g = 0; g < groups; g += L) {
    const VF a =
        hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, amax_bits + g))));
    const VF inv = hn::IfThenZeroElse(hn::Eq(a, hn::Zero(df)), hn::Div(hn::Set(df, 6.0f), a));
    const VF ib = hn::BitCast(df, hn::ShiftLeft<16>(Bf16Lanes(inv)));
    // A NaN amax (NaN in the group) keeps a NaN multiplier, so all its products are NaN.
    hn::StoreU(hn::IfThenElse(hn::IsNaN(a), a, ib), df, inv_b + g);
    // The scale's bf16, the canonical NaN for a group holding a NaN.
    const VU code = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(a)),
                                   hn::Set(du, kBf16CanonicalNaN),
                                   Bf16Lanes(hn::Mul(a, hn::Set(df, c6))));
    hn::StoreU(hn::TruncateTo(d16, code), d16, scale_code + g);
    non_finite = hn::Or(non_finite, hn::Not(hn::IsFinite(a)));
    non_finite = hn::Or(non_finite, hn::Not(hn::IsFinite(ib)));
  }
  return hn::AllFalse(df, non_finite) ? Fp4Plan::kFinite : Fp4Plan::kAny;
}

// Second phase: the nope's codes, then the scales. Finite amax and multipliers (kFinite, kAmax)
// make every product finite (|v * inv_b| <= ~6); any other group sends the row through the
// encoder with the reference's NaN rule (NaN -> code 0). The scales are written after the codes,
// in row order: writing them in the first phase measured slower on large batches.
HWY_INLINE void Hif8Fp4Codes(const std::uint16_t* HWY_RESTRICT x, std::uint8_t* HWY_RESTRICT out,
                             std::int64_t n, std::int64_t gs, std::int64_t groups,
                             const std::uint16_t* HWY_RESTRICT amax_bits,
                             const float* HWY_RESTRICT inv_b,
                             const std::uint16_t* HWY_RESTRICT scale_code,
                             const std::uint16_t* HWY_RESTRICT table,
                             const std::uint32_t* HWY_RESTRICT b64, Fp4Plan plan) {
  if (plan == Fp4Plan::kAmax) {
#if KVS_E2M1_BUCKETS
    namespace qn = quant::HWY_NAMESPACE;
    if (gs == 32) {
      qn::QuantizeE2M1ByAmaxPlans<32>(x, out + 64, groups, table, b64);
    } else {
      qn::QuantizeE2M1ByAmaxPlans<64>(x, out + 64, groups, table, b64);
    }
#else
    (void)table;  // no target without the bucket tables plans by amax
    (void)b64;
#endif
  } else if (plan == Fp4Plan::kFinite) {
#if HWY_TARGET != HWY_SCALAR
    Fp4NopeFinite(x, out + 64, gs, groups, inv_b, amax_bits);
#else
    (void)amax_bits;
    Fp4Nope<true>(x, out + 64, n, gs, inv_b);
#endif
  } else {
    Fp4Nope<false>(x, out + 64, n, gs, inv_b);
  }
  std::uint8_t* scale_out = out + 64 + n / 2;  // little-endian bf16
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(scale_out, scale_code, static_cast<std::size_t>(2 * groups));
  } else {
    for (std::int64_t g = 0; g < groups; ++g) PutBf16(scale_out + 2 * g, scale_code[g]);
  }
}

// The rope by the lane encoder, where HiF8Rope wrote nothing.
HWY_INLINE void HiF8RopeByLanes(const std::uint16_t* HWY_RESTRICT rope,
                                std::uint8_t* HWY_RESTRICT out, float x_scale) {
  const DF df;
  const std::int64_t step = 2 * static_cast<std::int64_t>(hn::Lanes(df));
  const VF xs = hn::Set(df, x_scale);
  for (std::int64_t j = 0; j < 64; j += step) {
    const VU w = LoadPairs(rope + j);
    StoreBytePairs(EncodeHiF8(hn::Mul(Even(w), xs)), EncodeHiF8(hn::Mul(Odd(w), xs)), out + j);
  }
}

// One row of mode hifloat8_fp4 (the scalar target; the others take Hif8Fp4Rows).
void Hif8Fp4Row(const std::uint16_t* HWY_RESTRICT x, std::uint8_t* HWY_RESTRICT out, std::int64_t n,
                std::int64_t gs, std::int64_t groups, float x_scale) {
  HiF8RopeByLanes(x + n, out, x_scale);
  alignas(64) std::uint16_t amax_bits[kMaxGroups + 8];
  alignas(32) std::uint16_t scale_code[kMaxGroups + 8];
  alignas(32) float inv_b[kMaxGroups + 8];
  Hif8Fp4Amax(x, gs, groups, amax_bits);
  const Fp4Plan plan = Hif8Fp4Divide(groups, amax_bits, inv_b, scale_code);
  Hif8Fp4Codes(x, out, n, gs, groups, amax_bits, inv_b, scale_code, nullptr, nullptr, plan);
}

// The rows of x: dense ones by a multiply, others through the view's strides (x_row_offset, out
// of line, a 64-bit division per axis). The prefetch of calls from memory used to take every
// row the second way; through this helper the fp8 modes measured 1.08-1.13 x faster at 16,384
// rows on AMD Zen 2, hifloat8_fp4 1.06-1.08 x. Other forms that skip the division as well
// measured 1.03-1.15 x in the same runs: part of the gain is the code the compiler makes of
// the loops, which this form served best.
class XRows {
 public:
  explicit XRows(const KvCompressEpilogPlan& p)
      : x_(static_cast<const std::uint16_t*>(p.x.data)),
        view_(p.x),
        d_(p.d),
        dense_(p.x.is_contiguous()) {}
  const std::uint16_t* operator[](std::int64_t r) const {
    return x_ + (dense_ ? r * d_ : x_row_offset(view_, r));
  }
  bool dense() const { return dense_; }

 private:
  const std::uint16_t* x_;
  const TensorView& view_;
  std::int64_t d_;
  bool dense_;
};

// Rows are read rope first (the row's end), then the nope from its start: the backward jump
// defeats the hardware stream prefetcher, so the next row is prefetched by hand (16,384 rows
// of 576 values, one thread: fp8_e8m0 1.3 x faster, hifloat8_fp4 1.8-1.9 x).
constexpr std::int64_t kAheadRows = 1;

#if HWY_TARGET != HWY_SCALAR
// Prefetches x rows ahead of the batched kernels, one per row of the current batch: they read a
// batch's rows in the plan loop and then only compute on them, so without this the hardware
// prefetcher, which follows demand misses, stalls for the whole code loop and calls from memory
// run compute and memory one after the other. Each row prefetches the row kPrefetchLead rows
// after the next batch's (three batches ahead). One batch ahead, as first measured on AMD Zen 2
// and 3, left the loads waiting on Zen 5, which reads memory faster: three batches made calls of
// 16,384-32,768 rows 1.2-1.47 x faster there on AVX-512 and AVX2 (two to five batches all
// gained, three the most), while on Zen 3 other distances measured 0.95-1.02 x. kLocality is
// the prefetch's, given by each mode.
template <int kLocality>
HWY_INLINE void PrefetchRow(const XRows& x, std::int64_t d, std::int64_t r, std::int64_t end) {
  if (r >= end) return;
  const auto* row = reinterpret_cast<const char*>(x[r]);
  for (std::int64_t b = 0; b < 2 * d; b += 64) __builtin_prefetch(row + b, 0, kLocality);
}
constexpr std::int64_t kPrefetchLead = 8;

// Rows per batch of the fp8 modes with power-of-two scales: the magnitudes of all of them, their
// scales, then the codes of each in token order (so duplicate slots still end with the last
// writer).
constexpr int kFp8BatchRows = 4;

// Rows [begin, end) of an fp8 mode with round_scale, in batches of kFp8BatchRows live rows.
template <bool kMode0, quant::HWY_NAMESPACE::HighByte kHigh>
void Fp8Pow2Rows(const KvCompressEpilogPlan& p, const std::int64_t* slots, std::int64_t begin,
                 std::int64_t end, bool stream, bool prefetch) {
  constexpr std::int64_t kStride = kMaxGroups + 8;
  const XRows x(p);
  auto* cache = static_cast<std::uint8_t*>(p.cache.data);
  const std::int64_t n = p.d - kRopeDim;
  const std::int64_t groups = p.num_groups;
  const std::size_t pad = static_cast<std::size_t>(p.row_bytes - p.payload_bytes);
  const SlotSplitter split(p.block_size);
  alignas(64) std::uint16_t amax[kFp8BatchRows * kStride], min1[kFp8BatchRows * kStride];
  alignas(64) std::uint32_t subw[kFp8BatchRows * kStride];
  alignas(64) std::uint8_t e[kFp8BatchRows * kStride], fast[kFp8BatchRows * kStride];
  const std::uint16_t* xb[kFp8BatchRows];
  std::uint8_t* ob[kFp8BatchRows];
  // Calls past the caches build their rows in L1 and stream their whole lines out, 2 KiB at a
  // time (StagedRows in core/bytes-inl.h).
  StagedRows staged(stream, static_cast<std::size_t>(p.row_bytes));
  for (std::int64_t r = begin; r < end;) {
    int rows = 0;
    for (; r < end && rows < kFp8BatchRows; ++r) {
      if (slots[r] == -1) continue;
      xb[rows] = x[r];
      ob[rows] = split.address(cache, p.cache.stride(0), p.cache.stride(1), slots[r]);
      const std::int64_t k = rows * kStride;
      quant::HWY_NAMESPACE::GroupMagnitudes<64, true, 16>(xb[rows], groups, amax + k, min1 + k);
      ++rows;
    }
    for (int i = 0; i < rows; ++i) {
      const std::int64_t k = i * kStride;
      Fp8Pow2Scales(groups, amax + k, min1 + k, subw + k, e + k, fast + k);
    }
    for (int i = 0; i < rows; ++i) {
      const std::int64_t k = i * kStride;
      // Into L1 (prefetcht0): on Zen 5 1.04-1.14 x the speed of prefetching into L2 three
      // batches ahead; on Zen 2, one batch ahead, L2 was 1.03-1.07 x faster.
      if (prefetch) PrefetchRow<3>(x, p.d, r + i + kPrefetchLead, end);
      std::uint8_t* out = staged.Row(ob[i]);
      Fp8Pow2Quantize<kMode0, kHigh>(xb[i], out, n, groups, amax + k, subw + k, e + k, fast + k);
      if (pad) std::memset(out + p.payload_bytes, 0, pad);
      staged.Done();
    }
  }
}

// Fp8Pow2Rows of the plan's mode.
template <quant::HWY_NAMESPACE::HighByte kHigh>
void Fp8Pow2RowsOfMode(const KvCompressEpilogPlan& p, const std::int64_t* slots, std::int64_t begin,
                       std::int64_t end, bool stream, bool prefetch) {
  if (p.quant_mode == QuantMode::fp8_bf16) {
    Fp8Pow2Rows<true, kHigh>(p, slots, begin, end, stream, prefetch);
  } else {
    Fp8Pow2Rows<false, kHigh>(p, slots, begin, end, stream, prefetch);
  }
}

// Rows per batch of mode hifloat8_fp4: the plans of all of them, then the rope, codes and scales
// of each in token order (the plans write nothing to the cache, so duplicate slots still end
// with the last writer). The plans' dependency chains then overlap instead of following each
// other (1.2x at 1,024 tokens on AVX-512).
constexpr int kFp4BatchRows = 4;

// Rows [begin, end) of mode hifloat8_fp4 in batches of kFp4BatchRows live rows; rope(src, out)
// writes the 64 rope codes of a row, or returns false to leave them to the lane encoder.
template <class Rope>
HWY_INLINE void Hif8Fp4Rows(const KvCompressEpilogPlan& p, const std::int64_t* slots,
                            std::int64_t begin, std::int64_t end, bool stream, bool prefetch,
                            const Rope& rope) {
  constexpr std::int64_t kStride = kMaxGroups + 8;
  const XRows x(p);
  auto* cache = static_cast<std::uint8_t*>(p.cache.data);
  const std::int64_t n = p.d - kRopeDim;
  const std::int64_t gs = p.group_size;
  const std::int64_t groups = p.num_groups;
  const std::size_t pad = static_cast<std::size_t>(p.row_bytes - p.payload_bytes);
  const SlotSplitter split(p.block_size);
  alignas(64) std::uint16_t amax[kFp4BatchRows * kStride];
  alignas(32) float inv_b[kFp4BatchRows * kStride];
  alignas(32) std::uint16_t scale_code[kFp4BatchRows * kStride];
  alignas(64) std::uint16_t table[kFp4BatchRows * kStride];
  alignas(64) std::uint32_t b64[kFp4BatchRows * kStride];
  Fp4Plan plan[kFp4BatchRows];
  const std::uint16_t* xb[kFp4BatchRows];
  std::uint8_t* ob[kFp4BatchRows];
  StagedRows staged(stream, static_cast<std::size_t>(p.row_bytes));
  for (std::int64_t r = begin; r < end;) {
    int rows = 0;
    for (; r < end && rows < kFp4BatchRows; ++r) {
      if (slots[r] == -1) continue;
      xb[rows] = x[r];
      ob[rows] = split.address(cache, p.cache.stride(0), p.cache.stride(1), slots[r]);
      // The plan reads the nope only: the rope's two cache lines are fetched meanwhile.
      __builtin_prefetch(xb[rows] + n, 0, 3);
      __builtin_prefetch(xb[rows] + n + 32, 0, 3);
      Hif8Fp4Amax(xb[rows], gs, groups, amax + rows * kStride);
      ++rows;
    }
    bool by_amax[kFp4BatchRows] = {};
#if KVS_E2M1_BUCKETS
    if (gs != 16) {
      quant::HWY_NAMESPACE::E2M1PlansOfAmaxRows(amax, kStride, rows, groups, scale_code, table, b64,
                                                by_amax);
    }
#endif
    for (int i = 0; i < rows; ++i) {
      const std::int64_t k = i * kStride;
      plan[i] =
          by_amax[i] ? Fp4Plan::kAmax : Hif8Fp4Divide(groups, amax + k, inv_b + k, scale_code + k);
    }
    for (int i = 0; i < rows; ++i) {
      const std::int64_t k = i * kStride;
      // Non-temporal (prefetchnta): 1.05-1.15 x the speed of prefetching into L2 or L1 on Zen
      // 2; level with L1 on Zen 5.
      if (prefetch) PrefetchRow<0>(x, p.d, r + i + kPrefetchLead, end);
      std::uint8_t* out = staged.Row(ob[i]);
      // The pad (under 32 bytes, row_bytes a multiple of 32) by one store of zeros over the
      // row's last 32 bytes before the codes and scales rewrite the payload among them, where a
      // memset call per row took longer.
      if (pad) std::memset(out + p.row_bytes - 32, 0, 32);
      if (!rope(xb[i] + n, out)) HiF8RopeByLanes(xb[i] + n, out, p.x_scale);
      Hif8Fp4Codes(xb[i], out, n, gs, groups, amax + k, inv_b + k, scale_code + k, table + k,
                   b64 + k, plan[i]);
      staged.Done();
    }
  }
}

#if KVS_HIF8_BF16
// Mode hifloat8_fp4 with the rope by the byte tables (core/vbmi.h).
KVS_VBMI_ATTR void Hif8Fp4RowsBytes(const KvCompressEpilogPlan& p, const std::int64_t* slots,
                                    std::int64_t begin, std::int64_t end, bool stream,
                                    bool prefetch) {
  namespace qn = quant::HWY_NAMESPACE;
  const qn::HiF8ByteRegs t = qn::LoadHiF8ByteRegs();
  const __m512 xs = _mm512_set1_ps(p.x_scale);
  // x * 1 is x, and a NaN stays a NaN: with x_scale 1 the inputs are their own products.
  if (p.x_scale == 1.0f) {
    Hif8Fp4Rows(p, slots, begin, end, stream, prefetch,
                [&](const std::uint16_t* rope, std::uint8_t* out) KVS_VBMI_ATTR {
                  qn::HiF8CodesBf16RowBytes<false>(t, rope, out, 64, xs);
                  return true;
                });
  } else {
    Hif8Fp4Rows(p, slots, begin, end, stream, prefetch,
                [&](const std::uint16_t* rope, std::uint8_t* out) KVS_VBMI_ATTR {
                  qn::HiF8CodesBf16RowBytes<true>(t, rope, out, 64, xs);
                  return true;
                });
  }
}
#endif
#endif

void QuantizeRows(const KvCompressEpilogPlan& p, const std::int64_t* slots, std::int64_t begin,
                  std::int64_t end, bool stream, bool prefetch) {
  const XRows x(p);
  auto* cache = static_cast<std::uint8_t*>(p.cache.data);
  const std::int64_t n = p.d - kRopeDim;
  const std::size_t pad = static_cast<std::size_t>(p.row_bytes - p.payload_bytes);
  const SlotSplitter split(p.block_size);
#if HWY_TARGET != HWY_SCALAR
  if (p.quant_mode == QuantMode::hifloat8_fp4) {
#if KVS_HIF8_BF16
    if (vbmi_usable()) {
      Hif8Fp4RowsBytes(p, slots, begin, end, stream, prefetch);
    } else {
      const quant::HWY_NAMESPACE::HiF8Bf16Regs t = quant::HWY_NAMESPACE::LoadHiF8Bf16Regs();
      const float x_scale = p.x_scale;
      Hif8Fp4Rows(p, slots, begin, end, stream, prefetch,
                  [&](const std::uint16_t* rope, std::uint8_t* out) HWY_ATTR {
                    quant::HWY_NAMESPACE::HiF8CodesBf16Row(t, rope, out, 64, x_scale);
                    return true;
                  });
    }
#elif KVS_HIF8_LANES
    // The rope by 16-bit lanes; a rope with a NaN product or one in [2^-23, 2^-15) by the
    // table (then, with a NaN, by the lane encoder).
    namespace qn = quant::HWY_NAMESPACE;
    const qn::HiF8LaneRegs t = qn::LoadHiF8LaneRegs();
    const float x_scale = p.x_scale;
    if (x_scale == 1.0f) {
      const std::uint8_t* table = detail::hifloat8_sat_table();
      Hif8Fp4Rows(p, slots, begin, end, stream, prefetch,
                  [&](const std::uint16_t* rope, std::uint8_t* out) HWY_ATTR {
                    return qn::HiF8CodesByLanes<false, 64>(t, rope, out, 64, x_scale) ||
                           HiF8RopeUnscaled(rope, out, table);
                  });
    } else {
      Hif8Fp4Rows(p, slots, begin, end, stream, prefetch,
                  [&](const std::uint16_t* rope, std::uint8_t* out) HWY_ATTR {
                    return qn::HiF8CodesByLanes<true, 64>(t, rope, out, 64, x_scale) ||
                           HiF8Rope(rope, out, x_scale);
                  });
    }
#else
    const float x_scale = p.x_scale;
    if (x_scale == 1.0f) {
      const std::uint8_t* table = detail::hifloat8_sat_table();
      Hif8Fp4Rows(p, slots, begin, end, stream, prefetch,
                  [&](const std::uint16_t* rope, std::uint8_t* out)
                      HWY_ATTR { return HiF8RopeUnscaled(rope, out, table); });
    } else {
      Hif8Fp4Rows(p, slots, begin, end, stream, prefetch,
                  [&](const std::uint16_t* rope, std::uint8_t* out)
                      HWY_ATTR { return HiF8Rope(rope, out, x_scale); });
    }
#endif
    return;
  }
  if (p.round_scale) {
    using quant::HWY_NAMESPACE::HighByte;
#if KVS_HIGH_BYTE_PERMUTE
    if (vbmi_usable()) {
      Fp8Pow2RowsOfMode<HighByte::kBytePermute>(p, slots, begin, end, stream, prefetch);
      return;
    }
#endif
    Fp8Pow2RowsOfMode<HighByte::kShift>(p, slots, begin, end, stream, prefetch);
    return;
  }
#else
  (void)stream;  // the one-row loop below writes in place and prefetches its own rows
  (void)prefetch;
#endif
  for (std::int64_t r = begin; r < end; ++r) {
    const std::int64_t slot = slots[r];
    if (slot == -1) continue;
    const std::uint16_t* xr = x[r];
    std::uint8_t* out = split.address(cache, p.cache.stride(0), p.cache.stride(1), slot);
    if (x.dense() && r + kAheadRows < end) {
      const auto* next = reinterpret_cast<const char*>(xr + kAheadRows * p.d);
      for (std::int64_t b = 0; b < 2 * p.d; b += 64) __builtin_prefetch(next + b, 0, 3);
    }
    switch (p.quant_mode) {
      case QuantMode::fp8_bf16:
        if (p.round_scale) {
          Fp8Row<true, true>(xr, out, n, p.num_groups);
        } else {
          Fp8Row<true, false>(xr, out, n, p.num_groups);
        }
        break;
      case QuantMode::fp8_e8m0:
        if (p.round_scale) {
          Fp8Row<false, true>(xr, out, n, p.num_groups);
        } else {
          Fp8Row<false, false>(xr, out, n, p.num_groups);
        }
        break;
      case QuantMode::hifloat8_fp4:
        Hif8Fp4Row(xr, out, n, p.group_size, p.num_groups, p.x_scale);
        break;
    }
    if (pad) std::memset(out + p.payload_bytes, 0, pad);
  }
}

// Batch forms of the lane encoders for the tests; n need not be a multiple of the lanes.
template <class Encode>
void EncodeBatch(const float* in, std::uint8_t* out, std::size_t n, Encode encode) {
  const DF df;
  const DU8 d8;
  const std::size_t L = hn::Lanes(df);
  float tail_in[8] = {};
  std::uint8_t tail_out[8] = {};
  std::size_t i = 0;
  for (; i + L <= n; i += L)
    hn::StoreU(hn::TruncateTo(d8, encode(hn::LoadU(df, in + i))), d8, out + i);
  if (i < n) {
    std::memcpy(tail_in, in + i, (n - i) * sizeof(float));
    hn::StoreU(hn::TruncateTo(d8, encode(hn::LoadU(df, tail_in))), d8, tail_out);
    std::memcpy(out + i, tail_out, n - i);
  }
}

void EncodeE4M3Batch(const float* q, std::uint8_t* out, std::size_t n) {
  EncodeBatch(q, out, n, [](VF v) { return EncodeE4M3(v); });
}
void EncodeE4M3FiniteBatch(const float* q, std::uint8_t* out, std::size_t n) {
  EncodeBatch(q, out, n, [](VF v) { return EncodeE4M3Finite(v); });
}
void EncodeE2M1Batch(const float* p, std::uint8_t* out, std::size_t n) {
  EncodeBatch(p, out, n, [](VF v) { return EncodeE2M1(v); });
}
void EncodeE2M1FiniteBatch(const float* p, std::uint8_t* out, std::size_t n) {
  EncodeBatch(p, out, n, [](VF v) { return EncodeE2M1Finite(v); });
}
void EncodeHiF8Batch(const float* x, std::uint8_t* out, std::size_t n) {
  EncodeBatch(x, out, n, [](VF v) { return EncodeHiF8(v); });
}

bool HiF8Bf16Batch(const std::uint16_t* x, std::uint8_t* out, std::size_t n) {
#if KVS_HIF8_BF16
  quant::HWY_NAMESPACE::HiF8CodesBf16Row(quant::HWY_NAMESPACE::LoadHiF8Bf16Regs(), x, out,
                                         static_cast<std::int64_t>(n), 1.0f);
  return true;
#else
  (void)x;
  (void)out;
  (void)n;
  return false;
#endif
}

bool E2M1BucketsBatch(float mult, const std::uint16_t* x, std::uint8_t* out, std::size_t n,
                      std::int64_t group) {
#if KVS_E2M1_BUCKETS || KVS_E2M1_BYTE_BUCKETS
  namespace qn = quant::HWY_NAMESPACE;
  const std::int64_t groups = static_cast<std::int64_t>(n) / group;
  std::vector<float> mults(static_cast<std::size_t>(groups), mult);
  std::vector<std::int64_t> rest(static_cast<std::size_t>(groups));
#if KVS_E2M1_BUCKETS
  // Groups of 16 take the thresholds on AVX-512 (a bucket vector holds 32 values).
  return group == 64 && qn::QuantizeE2M1ByBuckets<64, false>(x, out, groups, mults.data(), nullptr,
                                                             rest.data()) == 0;
#else
#if KVS_FP4_BYTES
  if (group == 64) {
    return qn::QuantizeE2M1ByBytePairs<64, false>(x, out, groups, mults.data(), nullptr,
                                                  rest.data()) == 0;
  }
#endif
  return (group == 64 ? qn::QuantizeE2M1ByByteBuckets<64, false>(x, out, groups, mults.data(),
                                                                 nullptr, rest.data())
                      : qn::QuantizeE2M1ByByteBuckets<16, false>(x, out, groups, mults.data(),
                                                                 nullptr, rest.data())) == 0;
#endif
#else
  (void)mult;
  (void)x;
  (void)out;
  (void)n;
  (void)group;
  return false;
#endif
}

bool E2M1PlansOfAmaxRowsBatch(const std::uint16_t* amax, std::int64_t stride, int rows,
                              std::int64_t groups, std::uint16_t* scale, std::uint16_t* table,
                              std::uint32_t* b64, bool* ok) {
#if KVS_E2M1_BUCKETS
  // Whole blocks of 8 per row, repeating the row's last group, as GroupMagnitudes writes them.
  std::vector<std::uint16_t> blocks(static_cast<std::size_t>(rows * stride), 0);
  for (int r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < (groups + 7) / 8 * 8; ++g) {
      blocks[static_cast<std::size_t>(r * stride + g)] = amax[r * stride + std::min(g, groups - 1)];
    }
  }
  quant::HWY_NAMESPACE::E2M1PlansOfAmaxRows(blocks.data(), stride, rows, groups, scale, table, b64,
                                            ok);
  return true;
#else
  (void)amax;
  (void)stride;
  (void)rows;
  (void)groups;
  (void)scale;
  (void)table;
  (void)b64;
  (void)ok;
  return false;
#endif
}

void E2M1ThresholdsBatch(const float* mult, std::int64_t n, std::uint16_t* thr) {
#if HWY_TARGET != HWY_SCALAR
  quant::HWY_NAMESPACE::E2M1Thresholds(mult, n, thr, n);
#else
  (void)mult;
  (void)n;
  (void)thr;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace kvscatter::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail {

HWY_EXPORT(QuantizeRows);
HWY_EXPORT(EncodeE4M3Batch);
HWY_EXPORT(EncodeE4M3FiniteBatch);
HWY_EXPORT(EncodeE2M1Batch);
HWY_EXPORT(EncodeE2M1FiniteBatch);
HWY_EXPORT(EncodeHiF8Batch);
HWY_EXPORT(E2M1ThresholdsBatch);
HWY_EXPORT(HiF8Bf16Batch);
HWY_EXPORT(E2M1BucketsBatch);
HWY_EXPORT(E2M1PlansOfAmaxRowsBatch);

void quantize_rows(const KvCompressEpilogPlan& p, const std::int64_t* slots, std::int64_t begin,
                   std::int64_t end, bool stream, bool prefetch) {
  HWY_DYNAMIC_DISPATCH(QuantizeRows)(p, slots, begin, end, stream, prefetch);
}

void simd_encode_e4m3_clamped(const float* q, std::uint8_t* out, std::size_t n, bool finite_only) {
  if (finite_only) {
    HWY_DYNAMIC_DISPATCH(EncodeE4M3FiniteBatch)(q, out, n);
  } else {
    HWY_DYNAMIC_DISPATCH(EncodeE4M3Batch)(q, out, n);
  }
}
void simd_encode_e2m1_from_product(const float* p, std::uint8_t* out, std::size_t n,
                                   bool finite_only) {
  if (finite_only) {
    HWY_DYNAMIC_DISPATCH(EncodeE2M1FiniteBatch)(p, out, n);
  } else {
    HWY_DYNAMIC_DISPATCH(EncodeE2M1Batch)(p, out, n);
  }
}
void simd_encode_hifloat8_sat(const float* x, std::uint8_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(EncodeHiF8Batch)(x, out, n);
}
void simd_e2m1_thresholds(const float* mult, std::int64_t n, std::uint16_t* thr) {
  HWY_DYNAMIC_DISPATCH(E2M1ThresholdsBatch)(mult, n, thr);
}
bool simd_encode_hifloat8_bf16(const std::uint16_t* x, std::uint8_t* out, std::size_t n) {
  return HWY_DYNAMIC_DISPATCH(HiF8Bf16Batch)(x, out, n);
}
bool simd_encode_e2m1_by_buckets(float mult, const std::uint16_t* x, std::uint8_t* out,
                                 std::size_t n, std::int64_t group) {
  return HWY_DYNAMIC_DISPATCH(E2M1BucketsBatch)(mult, x, out, n, group);
}
bool simd_e2m1_plans_of_amax_rows(const std::uint16_t* amax, std::int64_t stride, int rows,
                                  std::int64_t groups, std::uint16_t* scale, std::uint16_t* table,
                                  std::uint32_t* b64, bool* ok) {
  return HWY_DYNAMIC_DISPATCH(E2M1PlansOfAmaxRowsBatch)(amax, stride, rows, groups, scale, table,
                                                        b64, ok);
}

}  // namespace kvscatter::detail
#endif  // HWY_ONCE
