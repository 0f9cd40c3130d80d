// Batch float32 <-> bfloat16/float16 conversions with Highway dynamic dispatch. Each kernel is
// the lane-wise transcription of the scalar integer algorithm in formats.cc (no DemoteTo or
// F16C rounding), so every target gives the scalar result bit for bit, NaN payloads included.
// Tails run through the same vector code on a zero-padded stack buffer.
#include <cstddef>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "formats/batch.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "formats/batch_internal.h"
#include "kvscatter/formats.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::formats::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using DU16 = hn::Rebind<std::uint16_t, DF>;
using VU = hn::Vec<DU>;

// Narrows lanes that hold values in [0, 0xFFFF]; the signed-to-unsigned saturating demotion
// never saturates for them.
HWY_INLINE hn::Vec<DU16> Narrow(VU v) { return hn::DemoteTo(DU16(), hn::BitCast(DI(), v)); }

HWY_INLINE hn::Vec<DU16> EncodeBF16(hn::Vec<DF> x) {
  const DU du;
  const DI di;
  const VU b = hn::BitCast(du, x);
  const VU a = hn::And(b, hn::Set(du, 0x7FFFFFFFu));
  // a <= 0x7FFFFFFF, so the signed comparison is the unsigned one.
  const auto is_nan = hn::RebindMask(
      du, hn::Gt(hn::BitCast(di, a), hn::Set(di, 0x7F800000)));
  const VU hi = hn::ShiftRight<16>(b);
  const VU rne = hn::ShiftRight<16>(
      hn::Add(hn::Add(b, hn::Set(du, 0x7FFFu)), hn::And(hi, hn::Set(du, 1u))));
  const VU nan = hn::Or(hi, hn::Set(du, 0x40u));
  return Narrow(hn::IfThenElse(is_nan, nan, rne));
}

HWY_INLINE hn::Vec<DU16> EncodeF16(hn::Vec<DF> x) {
  const DF df;
  const DU du;
  const DI di;
  const VU b = hn::BitCast(du, x);
  const VU a = hn::And(b, hn::Set(du, 0x7FFFFFFFu));
  const auto ai = hn::BitCast(di, a);
  const VU sign = hn::And(hn::ShiftRight<16>(b), hn::Set(du, 0x8000u));
  // Normal range: rebias the exponent (127 -> 15), round the 13 dropped bits to nearest even,
  // then clamp to Inf (covers overflow and Inf inputs).
  const VU r = hn::Sub(a, hn::Set(du, 112u << 23));
  const VU rounded = hn::ShiftRight<13>(hn::Add(
      hn::Add(r, hn::Set(du, 0xFFFu)), hn::And(hn::ShiftRight<13>(r), hn::Set(du, 1u))));
  const VU normal = hn::BitCast(du, hn::Min(hn::BitCast(di, rounded), hn::Set(di, 0x7C00)));
  // Below 2^-14: adding 0.5 puts |x| in [0.5, 1) where the float32 ulp is 2^-24, the float16
  // subnormal step, so the hardware's round-to-nearest-even addition does the rounding.
  const VU sub = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, a), hn::Set(df, 0.5f))),
                         hn::Set(du, 0x3F000000u));
  const VU nan = hn::Or(hn::And(hn::ShiftRight<13>(a), hn::Set(du, 0x3FFu)),
                        hn::Set(du, 0x7E00u));
  const auto is_sub = hn::RebindMask(du, hn::Lt(ai, hn::Set(di, 0x38800000)));
  const auto is_nan = hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x7F800000)));
  const VU mag = hn::IfThenElse(is_nan, nan, hn::IfThenElse(is_sub, sub, normal));
  return Narrow(hn::Or(mag, sign));
}

HWY_INLINE hn::Vec<DF> DecodeBF16(hn::Vec<DU16> h) {
  return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU(), h)));
}

HWY_INLINE hn::Vec<DF> DecodeF16(hn::Vec<DU16> h16) {
  const DF df;
  const DU du;
  const VU h = hn::PromoteTo(du, h16);
  const VU sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  const VU mag = hn::And(h, hn::Set(du, 0x7FFFu));
  const VU e = hn::And(h, hn::Set(du, 0x7C00u));
  const VU shifted = hn::ShiftLeft<13>(mag);
  const VU normal = hn::Add(shifted, hn::Set(du, 112u << 23));
  const VU special = hn::Add(shifted, hn::Set(du, 0x70000000u));  // Inf/NaN, payload kept
  // Subnormal m * 2^-24 = (0.5 + m * 2^-24) - 0.5, both steps exact.
  const VU sub = hn::BitCast(
      du, hn::Sub(hn::BitCast(df, hn::Or(mag, hn::Set(du, 0x3F000000u))), hn::Set(df, 0.5f)));
  const VU v = hn::IfThenElse(hn::Eq(e, hn::Zero(du)), sub,
                              hn::IfThenElse(hn::Eq(e, hn::Set(du, 0x7C00u)), special, normal));
  return hn::BitCast(df, hn::Or(v, sign));
}

template <class Encode>
HWY_INLINE void EncodeLoop(const float* HWY_RESTRICT src, std::uint16_t* HWY_RESTRICT dst,
                           std::size_t n, Encode encode) {
  const DF df;
  const DU16 d16;
  const std::size_t N = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto v0 = hn::LoadU(df, src + i);
    const auto v1 = hn::LoadU(df, src + i + N);
    hn::StoreU(encode(v0), d16, dst + i);
    hn::StoreU(encode(v1), d16, dst + i + N);
  }
  for (; i < n; i += N) {
    const std::size_t count = n - i < N ? n - i : N;
    HWY_ALIGN float in[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN std::uint16_t out[HWY_MAX_BYTES / sizeof(float)];
    std::memcpy(in, src + i, count * sizeof(float));
    hn::Store(encode(hn::Load(df, in)), d16, out);
    std::memcpy(dst + i, out, count * sizeof(std::uint16_t));
  }
}

template <class Decode>
HWY_INLINE void DecodeLoop(const std::uint16_t* HWY_RESTRICT src, float* HWY_RESTRICT dst,
                           std::size_t n, Decode decode) {
  const DF df;
  const DU16 d16;
  const std::size_t N = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto v0 = hn::LoadU(d16, src + i);
    const auto v1 = hn::LoadU(d16, src + i + N);
    hn::StoreU(decode(v0), df, dst + i);
    hn::StoreU(decode(v1), df, dst + i + N);
  }
  for (; i < n; i += N) {
    const std::size_t count = n - i < N ? n - i : N;
    HWY_ALIGN std::uint16_t in[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN float out[HWY_MAX_BYTES / sizeof(float)];
    std::memcpy(in, src + i, count * sizeof(std::uint16_t));
    hn::Store(decode(hn::Load(d16, in)), df, out);
    std::memcpy(dst + i, out, count * sizeof(float));
  }
}

void F32ToBF16(const float* HWY_RESTRICT src, std::uint16_t* HWY_RESTRICT dst, std::size_t n) {
  EncodeLoop(src, dst, n, [](hn::Vec<DF> v) HWY_ATTR { return EncodeBF16(v); });
}
void F32ToF16(const float* HWY_RESTRICT src, std::uint16_t* HWY_RESTRICT dst, std::size_t n) {
  EncodeLoop(src, dst, n, [](hn::Vec<DF> v) HWY_ATTR { return EncodeF16(v); });
}
void BF16ToF32(const std::uint16_t* HWY_RESTRICT src, float* HWY_RESTRICT dst, std::size_t n) {
  DecodeLoop(src, dst, n, [](hn::Vec<DU16> v) HWY_ATTR { return DecodeBF16(v); });
}
void F16ToF32(const std::uint16_t* HWY_RESTRICT src, float* HWY_RESTRICT dst, std::size_t n) {
  DecodeLoop(src, dst, n, [](hn::Vec<DU16> v) HWY_ATTR { return DecodeF16(v); });
}
std::int64_t Target() { return HWY_TARGET; }

}  // namespace kvscatter::formats::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::formats {

HWY_EXPORT(F32ToBF16);
HWY_EXPORT(F32ToF16);
HWY_EXPORT(BF16ToF32);
HWY_EXPORT(F16ToF32);
HWY_EXPORT(Target);

void float32_to_bfloat16(const float* src, std::uint16_t* dst, std::size_t n) noexcept {
  HWY_DYNAMIC_DISPATCH(F32ToBF16)(src, dst, n);
}
void float32_to_float16(const float* src, std::uint16_t* dst, std::size_t n) noexcept {
  HWY_DYNAMIC_DISPATCH(F32ToF16)(src, dst, n);
}
void bfloat16_to_float32(const std::uint16_t* src, float* dst, std::size_t n) noexcept {
  HWY_DYNAMIC_DISPATCH(BF16ToF32)(src, dst, n);
}
void float16_to_float32(const std::uint16_t* src, float* dst, std::size_t n) noexcept {
  HWY_DYNAMIC_DISPATCH(F16ToF32)(src, dst, n);
}

namespace detail {
std::int64_t batch_dispatch_target() noexcept { return HWY_DYNAMIC_DISPATCH(Target)(); }
}  // namespace detail

}  // namespace kvscatter::formats
#endif  // HWY_ONCE
