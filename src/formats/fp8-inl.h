// Float8 conversions, lane-wise and for rows (Highway -inl.h pattern: included once per target from
// inside a foreach_target translation unit).
// - float32 -> float8 "satfinite", bit-identical to formats::encode_float8_e4m3fn_satfinite /
//   encode_float8_e5m2_satfinite: the magnitude is clamped to the largest finite value, rounded
//   to nearest even with integer arithmetic in the normal range and by one float addition in
//   the subnormal range, and NaN becomes 0x7F.
// - float8 -> float32, exact (the values of formats::decode_float8_*; NaN codes give a NaN).
// - QuantizeRun: a row of float32 / float16 / bfloat16 divided by a scale and encoded.
#if defined(KVSCATTER_FORMATS_FP8_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSCATTER_FORMATS_FP8_INL_H_
#undef KVSCATTER_FORMATS_FP8_INL_H_
#else
#define KVSCATTER_FORMATS_FP8_INL_H_
#endif

#include <hwy/highway.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "formats/f16-inl.h"
#include "kvscatter/dtype.h"
#include "kvscatter/formats.h"

// A mutable lambda with Highway's target attribute: gcc takes the attribute after `mutable`,
// clang only before it.
#ifndef KVS_MUTABLE_HWY_ATTR
#if defined(__clang__)
#define KVS_MUTABLE_HWY_ATTR HWY_ATTR mutable
#else
#define KVS_MUTABLE_HWY_ATTR mutable HWY_ATTR
#endif
#endif

HWY_BEFORE_NAMESPACE();
namespace kvscatter::formats::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// kMant mantissa bits, exponent bias kBias, largest finite magnitude kMaxBits (float32 bits).
template <int kMant, int kBias, std::uint32_t kMaxBits, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> EncodeFp8Satfinite(DF df, hn::Vec<DF> x) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  constexpr int kShift = 23 - kMant;
  constexpr int kMinNormalExp = 1 - kBias;
  // Adding 2^(kMinNormalExp - kMant + 23) puts a subnormal magnitude where the float32 ulp is
  // the target's subnormal step, so the (round-to-nearest-even) addition does the rounding.
  constexpr std::uint32_t kSubBias = static_cast<std::uint32_t>(127 + kMinNormalExp - kMant + 23)
                                     << 23;
  const auto b = hn::BitCast(du, x);
  const auto a = hn::BitCast(di, hn::And(b, hn::Set(du, 0x7FFFFFFFu)));
  const auto is_nan = hn::RebindMask(du, hn::Gt(a, hn::Set(di, 0x7F800000)));
  const auto ac = hn::BitCast(du, hn::Min(a, hn::Set(di, static_cast<std::int32_t>(kMaxBits))));
  const auto r = hn::Sub(ac, hn::Set(du, static_cast<std::uint32_t>(127 - kBias) << 23));
  const auto normal =
      hn::ShiftRight<kShift>(hn::Add(hn::Add(r, hn::Set(du, (1u << (kShift - 1)) - 1u)),
                                     hn::And(hn::ShiftRight<kShift>(r), hn::Set(du, 1u))));
  const auto sub =
      hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, ac), hn::BitCast(df, hn::Set(du, kSubBias)))),
              hn::Set(du, kSubBias));
  const auto is_sub = hn::RebindMask(
      du, hn::Lt(hn::BitCast(di, ac),
                 hn::Set(di, static_cast<std::int32_t>((127 + kMinNormalExp) << 23))));
  const auto mag = hn::IfThenElse(is_sub, sub, normal);
  const auto code = hn::Or(mag, hn::And(hn::ShiftRight<24>(b), hn::Set(du, 0x80u)));
  return hn::IfThenElse(is_nan, hn::Set(du, 0x7Fu), code);
}

template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> EncodeE4M3Satfinite(DF df, hn::Vec<DF> x) {
  return EncodeFp8Satfinite<3, 7, 0x43E00000u>(df, x);  // 448
}

template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> EncodeE5M2Satfinite(DF df, hn::Vec<DF> x) {
  return EncodeFp8Satfinite<2, 15, 0x47600000u>(df, x);  // 57344
}

// Magnitude codes (0..0x7F, one per u32 lane) -> float32 bits of the finite values, for kMant
// mantissa bits and bias kBias; the callers patch the special codes and add the sign.
template <int kMant, int kBias, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> DecodeFp8Finite(
    DF df, hn::Vec<hn::RebindToUnsigned<DF>> mag) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto normal = hn::Add(hn::ShiftLeft<23 - kMant>(mag),
                              hn::Set(du, static_cast<std::uint32_t>(127 - kBias) << 23));
  // Subnormal: m * 2^(1 - kBias - kMant), exact in float32.
  const auto sub =
      hn::BitCast(du, hn::Mul(hn::ConvertTo(df, hn::BitCast(di, mag)),
                              hn::Set(df, 1.0f / static_cast<float>(1u << (kBias - 1 + kMant)))));
  const auto is_sub =
      hn::RebindMask(du, hn::Lt(hn::BitCast(di, mag), hn::Set(di, std::int32_t{1} << kMant)));
  return hn::IfThenElse(is_sub, sub, normal);
}

template <class DF>
HWY_INLINE hn::Vec<DF> DecodeE4M3(DF df, hn::Vec<hn::RebindToUnsigned<DF>> c) {
  const hn::RebindToUnsigned<DF> du;
  const auto mag = hn::And(c, hn::Set(du, 0x7Fu));
  auto v = DecodeFp8Finite<3, 7>(df, mag);
  v = hn::IfThenElse(hn::Eq(mag, hn::Set(du, 0x7Fu)), hn::Set(du, 0x7FC00000u), v);
  return hn::BitCast(df, hn::Or(v, hn::ShiftLeft<24>(hn::And(c, hn::Set(du, 0x80u)))));
}

template <class DF>
HWY_INLINE hn::Vec<DF> DecodeE5M2(DF df, hn::Vec<hn::RebindToUnsigned<DF>> c) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto mag = hn::And(c, hn::Set(du, 0x7Fu));
  auto v = DecodeFp8Finite<2, 15>(df, mag);
  // 0x7C is infinity; 0x7D..0x7F are NaNs (a nonzero float32 mantissa).
  const auto special =
      hn::Or(hn::Set(du, 0x7F800000u), hn::ShiftLeft<21>(hn::Sub(mag, hn::Set(du, 0x7Cu))));
  const auto is_special =
      hn::RebindMask(du, hn::Gt(hn::BitCast(di, mag), hn::Set(di, std::int32_t{0x7B})));
  v = hn::IfThenElse(is_special, special, v);
  return hn::BitCast(df, hn::Or(v, hn::ShiftLeft<24>(hn::And(c, hn::Set(du, 0x80u)))));
}

// ---- rows of float32 / float16 / bfloat16 quantized to fp8 codes ---------------------------
// The row-level entry points (QuantizeRun, QuantizeRuns, QuantizeBF16Row, QuantizeBF16Runs,
// QuantizeBoundedBF16Run, QuantizeFp8F32) are not inlined: a call per row costs nothing next to the
// row, while inlining each group loop at every call site multiplied the code fivefold and made the
// sanitizer builds of the two kernels that use them take minutes each.

using QDF = hn::ScalableTag<float>;
using QDBytes = hn::Rebind<std::uint8_t, QDF>;

// Elements widened per step from a float16 or unaligned source (a stack buffer of floats).
constexpr std::size_t kQuantizeChunk = 512;

// The walk over the full groups of 4N values of a row for BF16GroupsOver: src + i and dst + i
// for i = 0, 4N, ... while a whole group remains.
HWY_INLINE auto RowGroups(const std::uint16_t* src, std::size_t n, unsigned char* dst) {
  const std::size_t group = 4 * hn::Lanes(QDF());
  return [=, i = std::size_t{0}](const std::uint16_t*& s, unsigned char*& d) KVS_MUTABLE_HWY_ATTR {
    if (i + group > n) return false;
    s = src + i;
    d = dst + i;
    i += group;
    return true;
  };
}

template <bool kE4M3>
HWY_INLINE hn::Vec<QDBytes> EncodeFp8Bytes(QDF df, hn::Vec<QDF> q) {
  const hn::RebindToSigned<QDF> di;
  const auto code = kE4M3 ? EncodeE4M3Satfinite(df, q) : EncodeE5M2Satfinite(df, q);
  return hn::DemoteTo(QDBytes(), hn::BitCast(di, code));
}

// ---- the reciprocal shortcut -----------------------------------------------------------------
// A division costs several times the rest of the encoding, so full groups of 4 vectors are first
// quantized as fp8(x * r), r = 1/scale rounded to float. That product is within two float32
// ulps of x / scale (relative error below 2^-23 + 2^-48) and the correctly rounded quotient is
// within half an ulp of the exact one, so both round to the same fp8 code unless a float8
// rounding midpoint lies within three ulps of the product. The shortcut therefore decides only
// lanes whose product is a normal float8 magnitude (at least the smallest normal, not NaN) and
// lies at least four ulps from every midpoint, where it may round half up; a group with any
// other lane is encoded again by the exact path (division, then EncodeFp8Satfinite).
// For some scales the product is the correctly rounded quotient itself (kExact): then only the
// range is checked and the product rounds to nearest even, as the quotient would (see
// ShortcutMode). Bfloat16 products land on midpoints often, so this matters for common scales.

// Scales whose reciprocal keeps that error bound: positive, and both scale and 1/scale normal.
HWY_INLINE bool RecipShortcutScale(float scale) {
  std::uint32_t b;
  std::memcpy(&b, &scale, 4);
  return b >= 0x01000000u && b < 0x7E800000u;  // 2^-125 <= scale < 2^126
}

enum class Shortcut { none, checked, exact };

// How the shortcut may take a scale. kExact: either 1/scale is exact (a power of two), or the
// input is bfloat16 and r = 1/scale rounded has at most 16 significant bits with r * scale within
// 2^-26 of 1. A bfloat16 value has 8 significant bits, so x * r is then exact, and it is within
// a factor 1 +- 2^-26 (under half an ulp) of x / scale, so it is the rounded quotient.
HWY_INLINE Shortcut ShortcutMode(float scale, bool bf16) {
  if (!RecipShortcutScale(scale)) return Shortcut::none;
  const float r = 1.0f / scale;
  std::uint32_t rb, sb;
  std::memcpy(&rb, &r, 4);
  std::memcpy(&sb, &scale, 4);
  // 1/scale is exact only for a power of two: most scales leave here, without the residual.
  if ((sb & 0x7FFFFFu) != 0 && (!bf16 || (rb & 0xFFu) != 0)) return Shortcut::checked;
  const double d = static_cast<double>(r) * static_cast<double>(scale) - 1.0;  // exact
  if (d == 0.0 || (bf16 && (rb & 0xFFu) == 0 && std::fabs(d) <= 0x1p-26)) return Shortcut::exact;
  return Shortcut::checked;
}

// kExact with bfloat16 inputs: the smallest bfloat16 magnitude (bits, sign cleared) whose product
// with r is at least the smallest normal float8. The product is monotonic in x, so a group whose
// magnitudes all lie in [that, infinity] has only lanes the shortcut decides, and the check
// takes a few 16-bit operations on the loaded bits instead of two compares per vector. Infinity
// always qualifies: the result is at most 0x7F80.
template <bool kE4M3>
HWY_INLINE std::uint16_t ExactLowBF16(float r) {
  const float min_normal = 1.0f / static_cast<float>(1u << (kE4M3 ? 6 : 14));
  const auto passes = [&](std::uint32_t m) {
    const std::uint32_t b = m << 16;
    float x;
    std::memcpy(&x, &b, 4);
    return x * r >= min_normal;
  };
  const float guess = min_normal / r;
  std::uint32_t c;
  std::memcpy(&c, &guess, 4);
  c = (c >> 16) < 0x7F80u ? c >> 16 : 0x7F80u;
  while (c > 0 && passes(c - 1)) --c;
  while (!passes(c)) ++c;
  return static_cast<std::uint16_t>(c);
}

// The largest finite bfloat16 magnitude (bits) whose product with r is at most the largest
// finite float8 (448 or 57344), or 0 when there is none.
template <bool kE4M3>
HWY_INLINE std::uint16_t ExactHighBF16(float r) {
  const float max_finite = kE4M3 ? 448.0f : 57344.0f;
  const auto passes = [&](std::uint32_t m) {
    const std::uint32_t b = m << 16;
    float x;
    std::memcpy(&x, &b, 4);
    return x * r <= max_finite;
  };
  const float guess = max_finite / r;
  std::uint32_t c;
  std::memcpy(&c, &guess, 4);
  c = (c >> 16) < 0x7F7Fu ? c >> 16 : 0x7F7Fu;
  while (c < 0x7F7Fu && passes(c + 1)) ++c;
  while (c > 0 && !passes(c)) --c;
  return static_cast<std::uint16_t>(c);
}

// What the bfloat16 shortcut derives from one scale, computed once per scale.
struct BF16Shortcut {
  float scale = 1.0f, r = 1.0f;  // r: 1/scale rounded
  Shortcut mode = Shortcut::none;
  std::uint16_t exact_low = 0;  // kExact: ExactLowBF16
  // kExact on AVX-512 (see DecidedGroupAVX3): r * 2^(kBias - 127), 0 when that is not normal
  // or no finite magnitude qualifies; and the largest magnitude whose product is at most the
  // largest finite float8.
  float r_rebased = 0.0f;
  std::uint16_t exact_high = 0;
};

template <bool kE4M3>
HWY_INLINE BF16Shortcut MakeBF16Shortcut(float scale) {
  BF16Shortcut s;
  s.scale = scale;
  s.mode = ShortcutMode(scale, true);
  if (s.mode == Shortcut::none) return s;
  s.r = 1.0f / scale;
  if (s.mode == Shortcut::exact) {
    s.exact_low = ExactLowBF16<kE4M3>(s.r);
    const float rebased = s.r * (kE4M3 ? 0x1p-120f : 0x1p-112f);  // exact when normal
    s.exact_high = ExactHighBF16<kE4M3>(s.r);
    s.r_rebased = rebased >= 0x1p-126f && s.exact_high >= s.exact_low ? rebased : 0.0f;
  }
  return s;
}

// The fp8 code of x * r (vr: the reciprocal) in bits 24..31 of each lane, lower bits undefined,
// rounded half up (kExact: to nearest even); `ok` is set in the lanes the shortcut may decide
// (see above).
template <bool kE4M3, bool kExact, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> RecipCode(DF df, hn::Vec<DF> x, hn::Vec<DF> vr,
                                                       hn::Mask<DF>& ok) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  constexpr int kMant = kE4M3 ? 3 : 2, kBias = kE4M3 ? 7 : 15, kShift = 23 - kMant;
  constexpr std::int32_t kMaxBits = kE4M3 ? 0x43E00000 : 0x47600000;  // 448, 57344
  // Rebiases the exponent and adds half a code step plus 3 ulps: the code is then the bits from
  // kShift up, and a product within [-3, +4] ulps of a midpoint has bits 3..kShift-1 all clear.
  constexpr std::uint32_t kRound =
      (1u << (kShift - 1)) + 3u - (static_cast<std::uint32_t>(127 - kBias) << 23);
  constexpr std::uint32_t kNearMid = ((1u << kShift) - 1u) & ~7u;
  // kExact: half a code step less one ulp, plus the lowest code bit (ties to even).
  constexpr std::uint32_t kRoundEven =
      (1u << (kShift - 1)) - 1u - (static_cast<std::uint32_t>(127 - kBias) << 23);
  const float min_normal = 1.0f / static_cast<float>(1u << (kBias - 1));
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (sizeof(hn::Vec<DF>) == 64) {
    // One range instruction (0x0A: the smaller magnitude, sign cleared) takes the magnitude and
    // clamps it; a NaN becomes the bound there, so NaNs are rejected by their own compare. The
    // checks are chained through masked compares.
    const __m512 q = _mm512_mul_ps(x.raw, vr.raw);
    const __m512 a = _mm512_range_ps(q, _mm512_castsi512_ps(_mm512_set1_epi32(kMaxBits)), 0x0A);
    const __m512i ai = _mm512_castps_si512(a);
    const __mmask16 ordered = _mm512_cmp_ps_mask(q, q, _CMP_ORD_Q);
    const __mmask16 normal =
        _mm512_mask_cmp_ps_mask(ordered, a, _mm512_set1_ps(min_normal), _CMP_GE_OQ);
    __m512i t;
    if constexpr (kExact) {
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(ai, kShift), _mm512_set1_epi32(1));
      t = _mm512_add_epi32(_mm512_add_epi32(ai, _mm512_set1_epi32(kRoundEven)), lsb);
      ok.raw = normal;
    } else {
      t = _mm512_add_epi32(ai, _mm512_set1_epi32(kRound));
      ok.raw = _mm512_mask_test_epi32_mask(normal, t, _mm512_set1_epi32(kNearMid));
    }
    const __m512i sign = _mm512_set1_epi32(static_cast<std::int32_t>(0x80000000u));
    const __m512i code = _mm512_slli_epi32(t, 24 - kShift);
    // 0xF8: code | (q & sign).
    return hn::Vec<decltype(du)>{
        _mm512_ternarylogic_epi32(code, _mm512_castps_si512(q), sign, 0xF8)};
  }
#endif
  const auto qb = hn::BitCast(du, hn::Mul(x, vr));
  const auto a = hn::And(qb, hn::Set(du, 0x7FFFFFFFu));
  const auto ac = hn::BitCast(du, hn::Min(hn::BitCast(di, a), hn::Set(di, kMaxBits)));
  const auto normal = hn::Ge(hn::BitCast(df, a), hn::Set(df, min_normal));
  if constexpr (kExact) {
    const auto lsb = hn::And(hn::ShiftRight<kShift>(ac), hn::Set(du, 1u));
    ok = normal;
    return hn::OrAnd(hn::ShiftLeft<24 - kShift>(hn::Add(hn::Add(ac, hn::Set(du, kRoundEven)), lsb)),
                     qb, hn::Set(du, 0x80000000u));
  }
  const auto t = hn::Add(ac, hn::Set(du, kRound));
  ok = hn::AndNot(hn::RebindMask(df, hn::Eq(hn::And(t, hn::Set(du, kNearMid)), hn::Zero(du))),
                  normal);
  return hn::OrAnd(hn::ShiftLeft<24 - kShift>(t), qb, hn::Set(du, 0x80000000u));
}

// c, from RecipCode, with the lanes outside `ok` replaced by the exact codes of x / scale.
// kExact: the product is the rounded quotient wherever it is a normal float32; below that both
// have the code of the same signed zero, and a NaN gives a NaN either way: no division.
template <bool kE4M3, bool kExact, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> ExactWhereNeeded(DF df,
                                                              hn::Vec<hn::RebindToUnsigned<DF>> c,
                                                              hn::Mask<DF> ok, hn::Vec<DF> x,
                                                              hn::Vec<DF> vr, float scale) {
  if (hn::AllTrue(df, ok)) return c;
  const hn::RebindToUnsigned<DF> du;
  const auto q = kExact ? hn::Mul(x, vr) : hn::Div(x, hn::Set(df, scale));
  const auto exact = kE4M3 ? EncodeE4M3Satfinite(df, q) : EncodeE5M2Satfinite(df, q);
  return hn::IfThenElse(hn::RebindMask(du, ok), c, hn::ShiftLeft<24>(exact));
}

// Four vectors of codes in bits 24..31 -> one vector of bytes: lane i of v[k] becomes byte
// 4 * i + k, to be put in order by CodeOrder.
template <class DU>
HWY_INLINE hn::Vec<DU> InterleaveCodeBytes(DU du, hn::Vec<DU> v0, hn::Vec<DU> v1, hn::Vec<DU> v2,
                                           hn::Vec<DU> v3) {
  auto w = hn::OrAnd(hn::ShiftRight<24>(v0), hn::ShiftRight<16>(v1), hn::Set(du, 0xFF00u));
  w = hn::OrAnd(w, hn::ShiftRight<8>(v2), hn::Set(du, 0xFF0000u));
  return hn::OrAnd(w, v3, hn::Set(du, 0xFF000000u));
}

#if HWY_TARGET != HWY_SCALAR
// Puts interleaved code bytes (InterleaveCodeBytes) in element order, for codes of element
// pairs (kPairs: lane i of v[0], v[1] holds elements 2i, 2i + 1 and of v[2], v[3] elements
// 2N + 2i, 2N + 2i + 1) or of consecutive vectors (lane i of v[k]: element kN + i). Within each
// 128-bit block the bytes are grouped by source, then a lane permutation gathers the blocks'
// groups (64-bit groups for pairs, 32-bit ones otherwise). The tables depend only on the
// target's vector length: built once per target.
template <bool kPairs>
class CodeOrder {
 public:
  using DU = hn::RebindToUnsigned<QDF>;
  using DBytes = hn::Repartition<std::uint8_t, DU>;
  using DP = hn::Repartition<hwy::UnsignedFromSize<kPairs ? 8 : 4>, DU>;
  using TI = hwy::MakeSigned<hn::TFromD<DP>>;
  using Idx = decltype(hn::SetTableIndices(DP(), static_cast<const TI*>(nullptr)));

  static const CodeOrder& Get() {
    static const CodeOrder order;
    return order;
  }
  hn::Vec<DBytes> Shuffle() const { return hn::Load(DBytes(), shuffle_); }
  Idx Lanes() const { return hn::SetTableIndices(DP(), lanes_); }

  static HWY_INLINE hn::Vec<DBytes> Apply(hn::Vec<DU> w, hn::Vec<DBytes> shuffle, Idx lanes) {
    const DBytes d8;
    const DP dp;
    const auto grouped = hn::TableLookupBytes(hn::BitCast(d8, w), shuffle);
    return hn::BitCast(d8, hn::TableLookupLanes(hn::BitCast(dp, grouped), lanes));
  }

 private:
  CodeOrder() {
    static constexpr std::uint8_t kPairBytes[16] = {0, 1, 4, 5, 8,  9,  12, 13,
                                                    2, 3, 6, 7, 10, 11, 14, 15};
    static constexpr std::uint8_t kQuadBytes[16] = {0, 4, 8,  12, 1, 5, 9,  13,
                                                    2, 6, 10, 14, 3, 7, 11, 15};
    const std::size_t bytes = hn::Lanes(DBytes()), groups = hn::Lanes(DP());
    const std::size_t per_block = kPairs ? 2 : 4, blocks = groups / per_block;
    for (std::size_t b = 0; b < bytes; ++b) {
      shuffle_[b] = (kPairs ? kPairBytes : kQuadBytes)[b % 16];
    }
    // Output group o = k * blocks + j is group k of block j.
    for (std::size_t o = 0; o < groups; ++o) {
      lanes_[o] = static_cast<TI>(o % blocks * per_block + o / blocks);
    }
  }

  HWY_ALIGN std::uint8_t shuffle_[HWY_MAX_BYTES];
  HWY_ALIGN TI lanes_[HWY_MAX_BYTES / sizeof(TI)];
};

// x[0..3] -> 4N codes at dst: RecipCode for every lane, then, in the rare vectors with lanes
// the shortcut cannot decide, those lanes again by the exact path.
template <bool kPairs, class VU>
HWY_INLINE void StoreCodeGroup(VU c0, VU c1, VU c2, VU c3,
                               hn::Vec<hn::Repartition<std::uint8_t, QDF>> shuffle,
                               typename CodeOrder<kPairs>::Idx lanes,
                               unsigned char* HWY_RESTRICT dst) {
  const hn::RebindToUnsigned<QDF> du;
  hn::StoreU(CodeOrder<kPairs>::Apply(InterleaveCodeBytes(du, c0, c1, c2, c3), shuffle, lanes),
             hn::Repartition<std::uint8_t, QDF>(), dst);
}

template <bool kE4M3, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> BoundedRecipCode(DF df, hn::Vec<DF> x, hn::Vec<DF> vr,
                                                              hn::Mask<DF>& ok);

// The shortcut's code of one vector: RecipCode, or BoundedRecipCode (kBounded) for products
// bounded as that requires.
template <bool kE4M3, bool kExact, bool kBounded, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> GroupCode(DF df, hn::Vec<DF> x, hn::Vec<DF> vr,
                                                       hn::Mask<DF>& ok) {
  if constexpr (kBounded) {
    return BoundedRecipCode<kE4M3>(df, x, vr, ok);
  } else {
    return RecipCode<kE4M3, kExact>(df, x, vr, ok);
  }
}

template <bool kE4M3, bool kExact, bool kPairs, class VF, bool kBounded = false>
HWY_INLINE void QuantizeGroup(VF x0, VF x1, VF x2, VF x3, VF vr, float scale,
                              hn::Vec<hn::Repartition<std::uint8_t, QDF>> shuffle,
                              typename CodeOrder<kPairs>::Idx lanes,
                              unsigned char* HWY_RESTRICT dst) {
  const QDF df;
  hn::Mask<QDF> ok0, ok1, ok2, ok3;
  auto c0 = GroupCode<kE4M3, kExact, kBounded>(df, x0, vr, ok0);
  auto c1 = GroupCode<kE4M3, kExact, kBounded>(df, x1, vr, ok1);
  auto c2 = GroupCode<kE4M3, kExact, kBounded>(df, x2, vr, ok2);
  auto c3 = GroupCode<kE4M3, kExact, kBounded>(df, x3, vr, ok3);
  if (HWY_UNLIKELY(!hn::AllTrue(df, hn::And(hn::And(ok0, ok1), hn::And(ok2, ok3))))) {
    c0 = ExactWhereNeeded<kE4M3, kExact>(df, c0, ok0, x0, vr, scale);
    c1 = ExactWhereNeeded<kE4M3, kExact>(df, c1, ok1, x1, vr, scale);
    c2 = ExactWhereNeeded<kE4M3, kExact>(df, c2, ok2, x2, vr, scale);
    c3 = ExactWhereNeeded<kE4M3, kExact>(df, c3, ok3, x3, vr, scale);
  }
  StoreCodeGroup<kPairs>(c0, c1, c2, c3, shuffle, lanes, dst);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// kExact, AVX-512: the 64 bfloat16 values a, b (bits) when their magnitudes all lie in
// [low, low + span] (BF16Shortcut's exact_low and exact_high): their products with the
// reciprocal are then exact normal float8 magnitudes no larger than the largest finite one.
// vr is the reciprocal times 2^(kBias - 127), so the products carry the float8 exponent bias
// and stay exact normal float32 values; Veltkamp's split (c = q * (2^(23 - kMant) + 1),
// c - (c - q), each rounded) rounds each to kMant mantissa bits, to nearest even, leaving the
// code in bits 23 - kMant up and zeros below. The signs are the bfloat16 sign bits, in element
// order. Returns false, writing nothing, when some magnitude lies outside.
template <bool kE4M3>
HWY_INLINE bool DecidedGroupAVX3(__m512i a, __m512i b, __m512i low, __m512i span, __m512 vr,
                                 hn::Vec<hn::Repartition<std::uint8_t, QDF>> shuffle,
                                 typename CodeOrder<true>::Idx lanes,
                                 unsigned char* HWY_RESTRICT dst) {
  constexpr int kShift = kE4M3 ? 20 : 21;
  const __m512i abs_mask = _mm512_set1_epi16(0x7FFF);
  const __m512i ma = _mm512_and_si512(a, abs_mask), mb = _mm512_and_si512(b, abs_mask);
  // Magnitudes below low wrap above span.
  const __m512i far = _mm512_max_epu16(_mm512_sub_epi16(ma, low), _mm512_sub_epi16(mb, low));
  if (HWY_UNLIKELY(_mm512_cmpgt_epu16_mask(far, span) != 0)) return false;
  const __m512 split = _mm512_set1_ps(static_cast<float>(1u << kShift));
  const auto code = [&](__m512i m) HWY_ATTR {
    const __m512 q = _mm512_mul_ps(_mm512_castsi512_ps(m), vr);  // exact
    // q * 2^kShift + q, rounded once: written as a fused operation so that the compiler cannot
    // fuse the product into the subtraction below instead.
    const __m512 c = _mm512_fmadd_ps(q, split, q);
    return _mm512_castps_si512(_mm512_sub_ps(c, _mm512_sub_ps(c, q)));
  };
  const __m512i hi = _mm512_set1_epi32(static_cast<std::int32_t>(0xFFFF0000u));
  const __m512i c0 = code(_mm512_slli_epi32(ma, 16)), c1 = code(_mm512_and_si512(ma, hi));
  const __m512i c2 = code(_mm512_slli_epi32(mb, 16)), c3 = code(_mm512_and_si512(mb, hi));
  // Byte k of each lane from c_k (0xFE: a | b | c).
  const __m512i w = _mm512_or_si512(
      _mm512_ternarylogic_epi32(_mm512_srli_epi32(c0, kShift), _mm512_srli_epi32(c1, kShift - 8),
                                _mm512_srli_epi32(c2, kShift - 16), 0xFE),
      _mm512_slli_epi32(c3, 24 - kShift));
  const auto ordered =
      CodeOrder<true>::Apply(hn::Vec<hn::RebindToUnsigned<QDF>>{w}, shuffle, lanes);
  const __mmask64 neg = _mm512_kunpackd(_mm512_movepi16_mask(b), _mm512_movepi16_mask(a));
  _mm512_storeu_si512(dst,
                      _mm512_mask_add_epi8(ordered.raw, neg, ordered.raw, _mm512_set1_epi8(-128)));
  return true;
}
#endif

// Groups of 4N bfloat16 values quantized with the shortcut (vr = 1/scale), every constant set
// up once: next(src, dst) names the next group (src: 4N values, dst: 4N codes), returning false
// when there is none. Lets a caller walk several runs or rows without a setup per run.
template <bool kE4M3, bool kExact, class VBytes, class Idx, class Next>
HWY_INLINE void BF16GroupsOver(const BF16Shortcut& sc, VBytes shuffle, Idx lanes, Next next) {
  const QDF df;
  const hn::RebindToUnsigned<QDF> du;
  const hn::Repartition<std::uint16_t, QDF> d16;
  const std::size_t N = hn::Lanes(df);
  const auto hi = hn::Set(du, 0xFFFF0000u);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  const bool rebased_ok = sc.r_rebased != 0.0f;
  const __m512 vr_rebased = _mm512_set1_ps(sc.r_rebased);
  const __m512i vlow = _mm512_set1_epi16(static_cast<std::int16_t>(sc.exact_low));
  const __m512i vspan = _mm512_set1_epi16(static_cast<std::int16_t>(sc.exact_high - sc.exact_low));
#endif
  const float scale = sc.scale;
  const auto vr = hn::Set(df, sc.r);
  const auto low = hn::Set(d16, sc.exact_low);
  const auto span = hn::Set(d16, static_cast<std::uint16_t>(0x7F80 - sc.exact_low));
  const auto abs_mask = hn::Set(d16, 0x7FFF);
  const std::uint16_t* src;
  unsigned char* dst;
  while (next(src, dst)) {
    // Lane j of a holds elements 2j (low half) and 2j + 1: a shift and a mask widen both.
    const auto a16 = hn::LoadU(d16, src), b16 = hn::LoadU(d16, src + 2 * N);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    if constexpr (kExact && sizeof(hn::Vec<QDF>) == 64) {
      if (rebased_ok &&
          DecidedGroupAVX3<kE4M3>(a16.raw, b16.raw, vlow, vspan, vr_rebased, shuffle, lanes, dst)) {
        continue;
      }
    }
#endif
    const auto a = hn::BitCast(du, a16), b = hn::BitCast(du, b16);
    const auto x0 = hn::BitCast(df, hn::ShiftLeft<16>(a)), x1 = hn::BitCast(df, hn::And(a, hi));
    const auto x2 = hn::BitCast(df, hn::ShiftLeft<16>(b)), x3 = hn::BitCast(df, hn::And(b, hi));
    if constexpr (kExact) {
      // Magnitudes below `low` wrap above span, NaNs land above it too.
      const auto m =
          hn::Max(hn::Sub(hn::And(a16, abs_mask), low), hn::Sub(hn::And(b16, abs_mask), low));
      if (HWY_LIKELY(hn::AllFalse(d16, hn::Gt(m, span)))) {
        hn::Mask<QDF> ok;  // decided everywhere here: unused
        StoreCodeGroup<true>(RecipCode<kE4M3, true>(df, x0, vr, ok),
                             RecipCode<kE4M3, true>(df, x1, vr, ok),
                             RecipCode<kE4M3, true>(df, x2, vr, ok),
                             RecipCode<kE4M3, true>(df, x3, vr, ok), shuffle, lanes, dst);
        continue;
      }
    }
    QuantizeGroup<kE4M3, kExact, true>(x0, x1, x2, x3, vr, scale, shuffle, lanes, dst);
  }
}

// The full groups of 4N bfloat16 values of a row, quantized with the shortcut (vr = 1/scale);
// returns how many values it wrote.
template <bool kE4M3, bool kExact, class VBytes, class Idx>
HWY_INLINE std::size_t BF16Groups(const std::uint16_t* HWY_RESTRICT src, std::size_t n,
                                  const BF16Shortcut& sc, VBytes shuffle, Idx lanes,
                                  unsigned char* HWY_RESTRICT dst) {
  BF16GroupsOver<kE4M3, kExact>(sc, shuffle, lanes, RowGroups(src, n, dst));
  const std::size_t group = 4 * hn::Lanes(QDF());
  return n / group * group;
}

// RecipCode for products known to be neither NaN nor (beyond rounding) larger in magnitude than
// the largest finite float8, as when values are divided by a scale derived from their own finite
// largest magnitude: no clamp and no NaN check. Doubling the product's bits drops the sign, and
// the doubled rounded value t2, as int32, is at least kNormal2 exactly for the normal products.
template <bool kE4M3, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> BoundedRecipCode(DF df, hn::Vec<DF> x, hn::Vec<DF> vr,
                                                              hn::Mask<DF>& ok) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  constexpr int kMant = kE4M3 ? 3 : 2, kBias = kE4M3 ? 7 : 15, kShift = 23 - kMant;
  constexpr std::uint32_t kRound =
      (1u << (kShift - 1)) + 3u - (static_cast<std::uint32_t>(127 - kBias) << 23);
  constexpr std::uint32_t kNearMid2 = (((1u << kShift) - 1u) & ~7u) << 1;
  constexpr std::int32_t kNormal2 =
      static_cast<std::int32_t>(((static_cast<std::uint32_t>(128 - kBias) << 23) + kRound) << 1);
  const auto qb = hn::BitCast(du, hn::Mul(x, vr));
  const auto t2 = hn::Add(hn::ShiftLeft<1>(qb), hn::Set(du, kRound << 1));
  const auto normal = hn::Gt(hn::BitCast(di, t2), hn::Set(di, kNormal2 - 1));
  const auto off_mid = hn::Ne(hn::And(t2, hn::Set(du, kNearMid2)), hn::Zero(du));
  ok = hn::RebindMask(df, hn::And(hn::RebindMask(du, normal), off_mid));
  return hn::OrAnd(hn::ShiftLeft<23 - kShift>(t2), qb, hn::Set(du, 0x80000000u));
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// BoundedBF16Group on AVX-512 for the 64 bfloat16 values a, b (bits): the magnitudes are
// widened, so the rounded value t = product bits + kRound (see RecipCode) is, as int32, at least
// kNormal exactly for the normal products and holds the magnitude code from bit kShift up with
// zeros above. The checks are chained through masked compares; the undecided lanes (found again
// per vector, rarely) take the exact path. The signs are the bfloat16 sign bits, in element order.
template <bool kE4M3>
HWY_INLINE void BoundedGroupAVX3(__m512i a, __m512i b, __m512 vr, float scale,
                                 hn::Vec<hn::Repartition<std::uint8_t, QDF>> shuffle,
                                 typename CodeOrder<true>::Idx lanes,
                                 unsigned char* HWY_RESTRICT dst) {
  constexpr int kMant = kE4M3 ? 3 : 2, kBias = kE4M3 ? 7 : 15, kShift = 23 - kMant;
  constexpr std::uint32_t kRound =
      (1u << (kShift - 1)) + 3u - (static_cast<std::uint32_t>(127 - kBias) << 23);
  const __m512i near_mid =
      _mm512_set1_epi32(static_cast<std::int32_t>(((1u << kShift) - 1u) & ~7u));
  const __m512i below = _mm512_set1_epi32(
      static_cast<std::int32_t>((static_cast<std::uint32_t>(128 - kBias) << 23) + kRound - 1u));
  const __m512i abs_mask = _mm512_set1_epi16(0x7FFF);
  const __m512i hi = _mm512_set1_epi32(static_cast<std::int32_t>(0xFFFF0000u));
  const __m512i ma = _mm512_and_si512(a, abs_mask), mb = _mm512_and_si512(b, abs_mask);
  __m512 x[4] = {_mm512_castsi512_ps(_mm512_slli_epi32(ma, 16)),
                 _mm512_castsi512_ps(_mm512_and_si512(ma, hi)),
                 _mm512_castsi512_ps(_mm512_slli_epi32(mb, 16)),
                 _mm512_castsi512_ps(_mm512_and_si512(mb, hi))};
  __m512i t[4];
  __mmask16 ok = 0xFFFF;
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm512_add_epi32(_mm512_castps_si512(_mm512_mul_ps(x[k], vr)),
                            _mm512_set1_epi32(static_cast<std::int32_t>(kRound)));
    ok = _mm512_mask_test_epi32_mask(_mm512_mask_cmpgt_epi32_mask(ok, t[k], below), t[k], near_mid);
  }
  if (HWY_UNLIKELY(ok != 0xFFFF)) {
    const QDF df;
    for (int k = 0; k < 4; ++k) {
      const __mmask16 ok_k =
          _mm512_mask_test_epi32_mask(_mm512_cmpgt_epi32_mask(t[k], below), t[k], near_mid);
      if (ok_k == 0xFFFF) continue;
      const auto q = hn::Div(hn::Vec<QDF>{x[k]}, hn::Set(df, scale));
      const auto code = kE4M3 ? EncodeE4M3Satfinite(df, q) : EncodeE5M2Satfinite(df, q);
      t[k] = _mm512_mask_slli_epi32(t[k], static_cast<__mmask16>(~ok_k), code.raw, kShift);
    }
  }
  // Byte k of each lane from t[k] (0xF8: a | (b & c)); magnitudes stay below bit kShift + 7.
  __m512i w = _mm512_srli_epi32(t[0], kShift);
  w = _mm512_ternarylogic_epi32(w, _mm512_srli_epi32(t[1], kShift - 8), _mm512_set1_epi32(0xFF00),
                                0xF8);
  w = _mm512_ternarylogic_epi32(w, _mm512_srli_epi32(t[2], kShift - 16),
                                _mm512_set1_epi32(0xFF0000), 0xF8);
  w = _mm512_ternarylogic_epi32(w, _mm512_slli_epi32(t[3], 24 - kShift),
                                _mm512_set1_epi32(static_cast<std::int32_t>(0xFF000000u)), 0xF8);
  const auto ordered =
      CodeOrder<true>::Apply(hn::Vec<hn::RebindToUnsigned<QDF>>{w}, shuffle, lanes);
  const __mmask64 neg = _mm512_kunpackd(_mm512_movepi16_mask(b), _mm512_movepi16_mask(a));
  _mm512_storeu_si512(dst,
                      _mm512_mask_add_epi8(ordered.raw, neg, ordered.raw, _mm512_set1_epi8(-128)));
}
#endif

// The 4N bfloat16 values at src, taken in pairs as in BF16Groups, whose products with vr (the
// checked reciprocal of scale) are bounded as BoundedRecipCode requires; the lanes the shortcut
// cannot decide are encoded again by the exact path.
template <bool kE4M3, class VBytes, class Idx>
HWY_INLINE void BoundedBF16Group(const std::uint16_t* HWY_RESTRICT src, hn::Vec<QDF> vr,
                                 float scale, VBytes shuffle, Idx lanes,
                                 unsigned char* HWY_RESTRICT dst) {
  const QDF df;
  const hn::RebindToUnsigned<QDF> du;
  const hn::Repartition<std::uint16_t, QDF> d16;
  const std::size_t N = hn::Lanes(df);
  const auto hi = hn::Set(du, 0xFFFF0000u);
  const auto a = hn::BitCast(du, hn::LoadU(d16, src));
  const auto b = hn::BitCast(du, hn::LoadU(d16, src + 2 * N));
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (sizeof(hn::Vec<QDF>) == 64) {
    BoundedGroupAVX3<kE4M3>(a.raw, b.raw, vr.raw, scale, shuffle, lanes, dst);
    return;
  }
#endif
  const auto x0 = hn::BitCast(df, hn::ShiftLeft<16>(a)), x1 = hn::BitCast(df, hn::And(a, hi));
  const auto x2 = hn::BitCast(df, hn::ShiftLeft<16>(b)), x3 = hn::BitCast(df, hn::And(b, hi));
  QuantizeGroup<kE4M3, false, true, hn::Vec<QDF>, true>(x0, x1, x2, x3, vr, scale, shuffle, lanes,
                                                        dst);
}

// Quantizes the full groups of 4N bfloat16 values; returns how many values it wrote.
template <bool kE4M3>
HWY_INLINE std::size_t RecipQuantizeBF16(const std::uint16_t* HWY_RESTRICT src, std::size_t n,
                                         const BF16Shortcut& sc, unsigned char* HWY_RESTRICT dst) {
  if (n < 4 * hn::Lanes(QDF()) || sc.mode == Shortcut::none) return 0;
  const CodeOrder<true>& order = CodeOrder<true>::Get();
  if (sc.mode == Shortcut::exact) {
    return BF16Groups<kE4M3, true>(src, n, sc, order.Shuffle(), order.Lanes(), dst);
  }
  return BF16Groups<kE4M3, false>(src, n, sc, order.Shuffle(), order.Lanes(), dst);
}

// N values from x as float32: float32 as they are, float16 (bits) widened in registers.
HWY_INLINE hn::Vec<QDF> WideLoad(const float* HWY_RESTRICT x) { return hn::LoadU(QDF(), x); }
HWY_INLINE hn::Vec<QDF> WideLoad(const std::uint16_t* HWY_RESTRICT x) { return WidenF16(QDF(), x); }

// The full groups of 4N values of a float32 or float16 row (T: float, or std::uint16_t for
// float16 bits where KVS_F16_IN_REGISTERS), quantized with the shortcut (vr: 1 / scale; shuffle,
// lanes: CodeOrder<false>'s); returns how many values it wrote.
template <bool kE4M3, bool kExact, class T, class VBytes, class Idx>
HWY_INLINE std::size_t WideGroups(const T* HWY_RESTRICT src, std::size_t n, hn::Vec<QDF> vr,
                                  float scale, VBytes shuffle, Idx lanes,
                                  unsigned char* HWY_RESTRICT dst) {
  const std::size_t N = hn::Lanes(QDF());
  std::size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    QuantizeGroup<kE4M3, kExact, false>(WideLoad(src + i), WideLoad(src + i + N),
                                        WideLoad(src + i + 2 * N), WideLoad(src + i + 3 * N), vr,
                                        scale, shuffle, lanes, dst + i);
  }
  return i;
}

// WideGroups in the shortcut's mode (exact or checked).
template <bool kE4M3, class T, class VBytes, class Idx>
HWY_INLINE std::size_t WideGroupsIn(Shortcut mode, const T* HWY_RESTRICT src, std::size_t n,
                                    hn::Vec<QDF> vr, float scale, VBytes shuffle, Idx lanes,
                                    unsigned char* HWY_RESTRICT dst) {
  return mode == Shortcut::exact ? WideGroups<kE4M3, true>(src, n, vr, scale, shuffle, lanes, dst)
                                 : WideGroups<kE4M3, false>(src, n, vr, scale, shuffle, lanes, dst);
}

// Quantizes the full groups of 4N float32 or float16 values (see WideGroups); returns how many
// values it wrote.
template <bool kE4M3, class T>
HWY_INLINE std::size_t RecipQuantizeWide(const T* HWY_RESTRICT src, std::size_t n, float scale,
                                         unsigned char* HWY_RESTRICT dst) {
  const Shortcut mode = ShortcutMode(scale, false);
  if (n < 4 * hn::Lanes(QDF()) || mode == Shortcut::none) return 0;
  const CodeOrder<false>& order = CodeOrder<false>::Get();
  return WideGroupsIn<kE4M3>(mode, src, n, hn::Set(QDF(), 1.0f / scale), scale, order.Shuffle(),
                             order.Lanes(), dst);
}
#else
template <bool kE4M3>
HWY_INLINE std::size_t RecipQuantizeBF16(const std::uint16_t*, std::size_t, const BF16Shortcut&,
                                         unsigned char*) {
  return 0;
}
template <bool kE4M3, class T>
HWY_INLINE std::size_t RecipQuantizeWide(const T*, std::size_t, float, unsigned char*) {
  return 0;
}
#endif  // HWY_TARGET != HWY_SCALAR

// dst[i] = fp8(src[i] / scale) for n float32 values.
template <bool kE4M3>
HWY_NOINLINE void QuantizeFp8F32(const float* HWY_RESTRICT src, std::size_t n, float scale,
                                 unsigned char* HWY_RESTRICT dst) {
  const QDF df;
  const QDBytes d8;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale);
  std::size_t i = RecipQuantizeWide<kE4M3>(src, n, scale, dst);
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto a = hn::Div(hn::LoadU(df, src + i), vs);
    const auto b = hn::Div(hn::LoadU(df, src + i + N), vs);
    hn::StoreU(EncodeFp8Bytes<kE4M3>(df, a), d8, dst + i);
    hn::StoreU(EncodeFp8Bytes<kE4M3>(df, b), d8, dst + i + N);
  }
  for (; i < n; i += N) {
    const std::size_t count = n - i < N ? n - i : N;
    HWY_ALIGN float in[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN std::uint8_t out[HWY_MAX_BYTES / sizeof(float)];
    std::memcpy(in, src + i, count * sizeof(float));
    hn::Store(EncodeFp8Bytes<kE4M3>(df, hn::Div(hn::Load(df, in), vs)), d8, out);
    std::memcpy(dst + i, out, count);
  }
}

// dst[i] = fp8(bfloat16 src[i] / sc.scale), sc from MakeBF16Shortcut: the widening is a shift,
// done in registers.
template <bool kE4M3>
HWY_NOINLINE void QuantizeBF16Row(const std::uint16_t* HWY_RESTRICT src, std::size_t n,
                                  const BF16Shortcut& sc, unsigned char* HWY_RESTRICT dst) {
  const float scale = sc.scale;
  const QDF df;
  const QDBytes d8;
  const hn::Rebind<std::uint16_t, QDF> d16;
  const hn::RebindToUnsigned<QDF> du;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale);
  const auto widen = [&](auto v) HWY_ATTR {
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, v)));
  };
  std::size_t i = RecipQuantizeBF16<kE4M3>(src, n, sc, dst);
  for (; i + N <= n; i += N) {
    hn::StoreU(EncodeFp8Bytes<kE4M3>(df, hn::Div(widen(hn::LoadU(d16, src + i)), vs)), d8, dst + i);
  }
  if (i < n) {
    HWY_ALIGN std::uint16_t in[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN std::uint8_t out[HWY_MAX_BYTES / sizeof(float)];
    std::memcpy(in, src + i, (n - i) * 2);
    hn::Store(EncodeFp8Bytes<kE4M3>(df, hn::Div(widen(hn::Load(d16, in)), vs)), d8, out);
    std::memcpy(dst + i, out, n - i);
  }
}

// dst[i] = fp8(bfloat16 src[i] / scale).
template <bool kE4M3>
HWY_INLINE void QuantizeFp8BF16(const std::uint16_t* HWY_RESTRICT src, std::size_t n, float scale,
                                unsigned char* HWY_RESTRICT dst) {
  QuantizeBF16Row<kE4M3>(src, n, MakeBF16Shortcut<kE4M3>(scale), dst);
}

// dst[i] = fp8(x[i] / scale) for n elements x of `dtype` (float32, float16 or bfloat16) at src
// (any address); saturating, as EncodeFp8Satfinite.
template <bool kE4M3>
HWY_NOINLINE void QuantizeRun(DType dtype, const unsigned char* src, std::size_t n, float scale,
                              unsigned char* dst) {
  const auto addr = reinterpret_cast<std::uintptr_t>(src);
  if (dtype == DType::float32 && addr % alignof(float) == 0) {
    QuantizeFp8F32<kE4M3>(reinterpret_cast<const float*>(src), n, scale, dst);
    return;
  }
  if (dtype == DType::bfloat16 && addr % alignof(std::uint16_t) == 0) {
    QuantizeFp8BF16<kE4M3>(reinterpret_cast<const std::uint16_t*>(src), n, scale, dst);
    return;
  }
  if (KVS_F16_IN_REGISTERS && dtype == DType::float16 && addr % alignof(std::uint16_t) == 0) {
    const std::size_t done =
        RecipQuantizeWide<kE4M3>(reinterpret_cast<const std::uint16_t*>(src), n, scale, dst);
    src += done * 2;
    dst += done;
    n -= done;
  }
  // The rest of a float16 row, and unaligned rows: widened by the formats module's batch
  // conversion.
  HWY_ALIGN float buf[kQuantizeChunk];
  HWY_ALIGN std::uint16_t codes[kQuantizeChunk];
  const std::size_t es = dtype == DType::float32 ? 4 : 2;
  for (std::size_t i = 0; i < n; i += kQuantizeChunk) {
    const std::size_t m = n - i < kQuantizeChunk ? n - i : kQuantizeChunk;
    if (dtype == DType::float32) {
      std::memcpy(buf, src + i * es, m * 4);
    } else {
      const std::uint16_t* in = reinterpret_cast<const std::uint16_t*>(src + i * es);
      if (addr % alignof(std::uint16_t) != 0) {
        std::memcpy(codes, src + i * es, m * 2);
        in = codes;
      }
      if (dtype == DType::bfloat16)
        bfloat16_to_float32(in, buf, m);
      else
        float16_to_float32(in, buf, m);
    }
    QuantizeFp8F32<kE4M3>(buf, m, scale, dst + i);
  }
}

// QuantizeRuns for bfloat16 runs whose length n is a multiple of the group (4N), with the
// shortcut of each run's scale computed beforehand (shortcuts[k], from MakeBF16Shortcut); run k
// starts src_step elements after run k - 1, and its codes dst_step bytes after.
template <bool kE4M3>
HWY_NOINLINE void QuantizeBF16Runs(const std::uint16_t* src, std::int64_t src_step, std::size_t n,
                                   std::int64_t count, const BF16Shortcut* shortcuts,
                                   unsigned char* dst, std::int64_t dst_step) {
#if HWY_TARGET == HWY_SCALAR
  for (std::int64_t k = 0; k < count; ++k) {
    QuantizeBF16Row<kE4M3>(src + k * src_step, n, shortcuts[k], dst + k * dst_step);
  }
#else
  const CodeOrder<true>& order = CodeOrder<true>::Get();
  const auto shuffle = order.Shuffle();
  const auto lanes = order.Lanes();
  for (std::int64_t k = 0; k < count; ++k) {
    const std::uint16_t* x = src + k * src_step;
    const BF16Shortcut& sc = shortcuts[k];
    if (sc.mode == Shortcut::exact) {
      BF16Groups<kE4M3, true>(x, n, sc, shuffle, lanes, dst + k * dst_step);
    } else if (sc.mode == Shortcut::checked) {
      BF16Groups<kE4M3, false>(x, n, sc, shuffle, lanes, dst + k * dst_step);
    } else {
      QuantizeBF16Row<kE4M3>(x, n, sc, dst + k * dst_step);
    }
  }
#endif
}

// The values per group of the bfloat16 shortcut: the run lengths QuantizeBF16HeadRuns
// (fp8_table-inl.h) takes are multiples of it.
HWY_INLINE std::size_t BF16GroupSize() { return 4 * hn::Lanes(QDF()); }

// Every group of BF16GroupSize() values that next(src, dst) names (see BF16GroupsOver),
// quantized with the one shortcut sc, its setup done once.
template <bool kE4M3, class Next>
HWY_INLINE void QuantizeBF16Groups(const BF16Shortcut& sc, Next next) {
  const std::uint16_t* src;
  unsigned char* dst;
#if HWY_TARGET != HWY_SCALAR
  const CodeOrder<true>& order = CodeOrder<true>::Get();
  if (sc.mode == Shortcut::exact) {
    BF16GroupsOver<kE4M3, true>(sc, order.Shuffle(), order.Lanes(), next);
    return;
  }
  if (sc.mode == Shortcut::checked) {
    BF16GroupsOver<kE4M3, false>(sc, order.Shuffle(), order.Lanes(), next);
    return;
  }
#endif
  while (next(src, dst)) QuantizeBF16Row<kE4M3>(src, BF16GroupSize(), sc, dst);
}

#if HWY_TARGET != HWY_SCALAR
// QuantizeBF16Runs for one run of n values (a multiple of 4N) without NaNs whose scale (sc's)
// is at least its largest magnitude divided by the largest finite float8, rounded: the products
// with the reciprocal are bounded (see BoundedRecipCode). shuffle and lanes: CodeOrder<true>'s.
template <bool kE4M3, class VBytes, class Idx>
HWY_NOINLINE void QuantizeBoundedBF16Run(const std::uint16_t* HWY_RESTRICT src, std::size_t n,
                                         const BF16Shortcut& sc, VBytes shuffle, Idx lanes,
                                         unsigned char* HWY_RESTRICT dst) {
  if (sc.mode != Shortcut::checked) {
    QuantizeBF16Runs<kE4M3>(src, 0, n, 1, &sc, dst, 0);
    return;
  }
  const QDF df;
  const auto vr = hn::Set(df, sc.r);
  for (std::size_t i = 0; i < n; i += 4 * hn::Lanes(df)) {
    BoundedBF16Group<kE4M3>(src + i, vr, sc.scale, shuffle, lanes, dst + i);
  }
}
#endif

// count runs of n values of `dtype`: run k is read at src + k * src_step, divided by scales[k]
// and written at dst + k * dst_step (steps in bytes). The same codes as QuantizeRun per run;
// runs of aligned bfloat16 whose length is a multiple of the group share the shortcut's setup.
template <bool kE4M3>
HWY_NOINLINE void QuantizeRuns(DType dtype, const unsigned char* src, std::int64_t src_step,
                               std::size_t n, std::int64_t count, const float* scales,
                               unsigned char* dst, std::int64_t dst_step) {
#if HWY_TARGET != HWY_SCALAR
  const bool aligned = reinterpret_cast<std::uintptr_t>(src) % 2 == 0 && src_step % 2 == 0;
  if (dtype == DType::bfloat16 && aligned && n % (4 * hn::Lanes(QDF())) == 0) {
    for (std::int64_t k = 0; k < count; ++k) {
      const BF16Shortcut sc = MakeBF16Shortcut<kE4M3>(scales[k]);
      QuantizeBF16Runs<kE4M3>(reinterpret_cast<const std::uint16_t*>(src + k * src_step), 0, n, 1,
                              &sc, dst + k * dst_step, 0);
    }
    return;
  }
  // float32 and float16 runs: the shortcut's setup once for each new scale, not once per run.
  const bool wide = (dtype == DType::float32 && reinterpret_cast<std::uintptr_t>(src) % 4 == 0 &&
                     src_step % 4 == 0) ||
                    (KVS_F16_IN_REGISTERS && dtype == DType::float16 && aligned);
  if (wide && n % (4 * hn::Lanes(QDF())) == 0) {
    const CodeOrder<false>& order = CodeOrder<false>::Get();
    const auto shuffle = order.Shuffle();
    const auto lanes = order.Lanes();
    float scale = 0.0f;
    Shortcut mode = Shortcut::none;
    auto vr = hn::Zero(QDF());
    for (std::int64_t k = 0; k < count; ++k) {
      if (k == 0 || scales[k] != scale) {
        scale = scales[k];
        mode = ShortcutMode(scale, false);
        vr = hn::Set(QDF(), 1.0f / scale);
      }
      const unsigned char* x = src + k * src_step;
      unsigned char* out = dst + k * dst_step;
      if (mode == Shortcut::none) {
        QuantizeRun<kE4M3>(dtype, x, n, scale, out);
      } else if (dtype == DType::float32) {
        WideGroupsIn<kE4M3>(mode, reinterpret_cast<const float*>(x), n, vr, scale, shuffle, lanes,
                            out);
      } else {
        WideGroupsIn<kE4M3>(mode, reinterpret_cast<const std::uint16_t*>(x), n, vr, scale, shuffle,
                            lanes, out);
      }
    }
    return;
  }
#endif
  for (std::int64_t k = 0; k < count; ++k) {
    QuantizeRun<kE4M3>(dtype, src + k * src_step, n, scales[k], dst + k * dst_step);
  }
}

}  // namespace kvscatter::formats::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVSCATTER_FORMATS_FP8_INL_H_
