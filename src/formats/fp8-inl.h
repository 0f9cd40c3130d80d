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

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvscatter/dtype.h"
#include "kvscatter/formats.h"

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

using QDF = hn::ScalableTag<float>;
using QD8 = hn::Rebind<std::uint8_t, QDF>;

// Elements widened per step from a float16 or unaligned source (a stack buffer of floats).
constexpr std::size_t kQuantizeChunk = 512;

template <bool kE4M3>
HWY_INLINE hn::Vec<QD8> EncodeFp8Bytes(QDF df, hn::Vec<QDF> q) {
  const hn::RebindToSigned<QDF> di;
  const auto code = kE4M3 ? EncodeE4M3Satfinite(df, q) : EncodeE5M2Satfinite(df, q);
  return hn::DemoteTo(QD8(), hn::BitCast(di, code));
}

// dst[i] = fp8(src[i] / scale) for n float32 values.
template <bool kE4M3>
HWY_INLINE void QuantizeFp8F32(const float* HWY_RESTRICT src, std::size_t n, float scale,
                               unsigned char* HWY_RESTRICT dst) {
  const QDF df;
  const QD8 d8;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale);
  std::size_t i = 0;
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

// dst[i] = fp8(bfloat16 src[i] / scale): the widening is a shift, done in registers.
template <bool kE4M3>
HWY_INLINE void QuantizeFp8BF16(const std::uint16_t* HWY_RESTRICT src, std::size_t n, float scale,
                                unsigned char* HWY_RESTRICT dst) {
  const QDF df;
  const QD8 d8;
  const hn::Rebind<std::uint16_t, QDF> d16;
  const hn::RebindToUnsigned<QDF> du;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale);
  const auto widen = [&](auto v) HWY_ATTR {
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, v)));
  };
  std::size_t i = 0;
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

// dst[i] = fp8(x[i] / scale) for n elements x of `dtype` (float32, float16 or bfloat16) at src
// (any address); saturating, as EncodeFp8Satfinite.
template <bool kE4M3>
HWY_INLINE void QuantizeRun(DType dtype, const unsigned char* src, std::size_t n, float scale,
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
  // float16 (widened by the formats module's batch conversion) and unaligned rows.
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

}  // namespace kvscatter::formats::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVSCATTER_FORMATS_FP8_INL_H_
