// Lane-wise float32 -> float8 "satfinite" conversion (Highway -inl.h pattern:
// included once per target from inside a foreach_target translation unit).
// Bit-identical to formats::encode_float8_e4m3fn_satfinite /
// encode_float8_e5m2_satfinite: the magnitude is clamped to the largest finite
// value, rounded to nearest even with integer arithmetic in the normal range
// and by one float addition in the subnormal range, and NaN becomes 0x7F.
#if defined(KVSCATTER_FORMATS_FP8_SATFINITE_INL_H_) ==                         \
    defined(HWY_TARGET_TOGGLE)
#ifdef KVSCATTER_FORMATS_FP8_SATFINITE_INL_H_
#undef KVSCATTER_FORMATS_FP8_SATFINITE_INL_H_
#else
#define KVSCATTER_FORMATS_FP8_SATFINITE_INL_H_
#endif

#include <cstdint>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvscatter::formats::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// kMant mantissa bits, exponent bias kBias, largest finite magnitude kMaxBits
// (float32 bits).
template <int kMant, int kBias, std::uint32_t kMaxBits, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> EncodeFp8Satfinite(DF df,
                                                                hn::Vec<DF> x) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  constexpr int kShift = 23 - kMant;
  constexpr int kMinNormalExp = 1 - kBias;
  // Adding 2^(kMinNormalExp - kMant + 23) puts a subnormal magnitude where the
  // float32 ulp is the target's subnormal step, so the (round-to-nearest-even)
  // addition does the rounding.
  constexpr std::uint32_t kSubBias =
      static_cast<std::uint32_t>(127 + kMinNormalExp - kMant + 23) << 23;
  const auto b = hn::BitCast(du, x);
  const auto a = hn::BitCast(di, hn::And(b, hn::Set(du, 0x7FFFFFFFu)));
  const auto is_nan = hn::RebindMask(du, hn::Gt(a, hn::Set(di, 0x7F800000)));
  const auto ac = hn::BitCast(
      du, hn::Min(a, hn::Set(di, static_cast<std::int32_t>(kMaxBits))));
  const auto r =
      hn::Sub(ac, hn::Set(du, static_cast<std::uint32_t>(127 - kBias) << 23));
  const auto normal = hn::ShiftRight<kShift>(
      hn::Add(hn::Add(r, hn::Set(du, (1u << (kShift - 1)) - 1u)),
              hn::And(hn::ShiftRight<kShift>(r), hn::Set(du, 1u))));
  const auto sub =
      hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, ac),
                                      hn::BitCast(df, hn::Set(du, kSubBias)))),
              hn::Set(du, kSubBias));
  const auto is_sub =
      hn::RebindMask(du, hn::Lt(hn::BitCast(di, ac),
                                hn::Set(di, static_cast<std::int32_t>(
                                                (127 + kMinNormalExp) << 23))));
  const auto mag = hn::IfThenElse(is_sub, sub, normal);
  const auto code =
      hn::Or(mag, hn::And(hn::ShiftRight<24>(b), hn::Set(du, 0x80u)));
  return hn::IfThenElse(is_nan, hn::Set(du, 0x7Fu), code);
}

template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>>
EncodeE4M3Satfinite(DF df, hn::Vec<DF> x) {
  return EncodeFp8Satfinite<3, 7, 0x43E00000u>(df, x); // 448
}

template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>>
EncodeE5M2Satfinite(DF df, hn::Vec<DF> x) {
  return EncodeFp8Satfinite<2, 15, 0x47600000u>(df, x); // 57344
}

} // namespace kvscatter::formats::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // KVSCATTER_FORMATS_FP8_SATFINITE_INL_H_
