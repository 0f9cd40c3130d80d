// float16 rows in registers (Highway -inl.h pattern: included once per target from inside a
// foreach_target translation unit).
// - KVS_F16_IN_REGISTERS: whether this target widens float16 in registers. Targets whose float16
//   conversion is an instruction (x86 from AVX2 on, with F16C; Arm's NEON and SVE) are exact for
//   every code; Highway's emulation elsewhere (SSE4) takes infinities and NaNs for finite values,
//   so those targets convert through the formats module's batch conversion instead (or, for
//   F16ToBF16Odd, work on the bits).
// - WidenF16: N float16 values (bits) as float32.
// - F16ToBF16Odd: float16 values as bfloat16 rounded to odd (in registers, or on the bits where
//   the target's conversion is not exact).
#if defined(KVSCATTER_FORMATS_F16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSCATTER_FORMATS_F16_INL_H_
#undef KVSCATTER_FORMATS_F16_INL_H_
#else
#define KVSCATTER_FORMATS_F16_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvscatter/formats.h"

#undef KVS_F16_IN_REGISTERS
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)) || \
    (HWY_ARCH_ARM_A64 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR)
#define KVS_F16_IN_REGISTERS 1
#else
#define KVS_F16_IN_REGISTERS 0
#endif

HWY_BEFORE_NAMESPACE();
namespace kvscatter::formats::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes(df) float16 values at x (bits) as float32: exact only where KVS_F16_IN_REGISTERS, which
// callers check before they call it.
template <class DF>
HWY_INLINE hn::Vec<DF> WidenF16(DF df, const std::uint16_t* HWY_RESTRICT x) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(x)));
}

// The bfloat16 bits of float16 h rounded to odd (the float32 value's top 16 bits, the last one
// set where any of the 16 dropped bits was).
HWY_INLINE std::uint16_t F16ToBF16OddScalar(std::uint16_t h) {
  std::uint32_t u;
  const float f = decode_float16(h);
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>((u >> 16) | ((u & 0xFFFFu) != 0 ? 1u : 0u));
}

// F16ToBF16OddNormalBits: one vector of normal float16 values h (either sign) as bfloat16 rounded
// to odd.
// F16ToBF16OddNormal: F16ToBF16Odd by it where n is a multiple of the lanes and every value is
// normal (false, with dst partly written, where one is zero, subnormal, infinite or NaN): a normal
// value's bfloat16 is its bits shifted right by 3 with the sign kept (an arithmetic shift, the
// sign's copies masked off), the dropped bits' sticky bit or-ed in, and 112 exponent steps
// (0x3800) added: five operations per vector on AVX-512, six elsewhere, and three for the test (2h
// - 0x0800 wraps to 0xF000 or more exactly for the other values, and its maximum is tested once),
// where AVX2's float32 route takes about fourteen per two vectors' worth and the bits route below a
// test and a branch per vector. The sticky bit is or-ed in before the 112 steps are added (bit 0,
// which the add leaves alone), so that the mask and the or are one operation on AVX-512 (a ternary
// logic op).
template <class DU>
HWY_INLINE hn::Vec<DU> F16ToBF16OddNormalBits(DU du, hn::Vec<DU> h) {
  const hn::RebindToSigned<DU> d;
  const auto sticky = hn::Min(hn::And(h, hn::Set(du, 7)), hn::Set(du, 1));
  const auto r =
      hn::OrAnd(sticky, hn::BitCast(du, hn::ShiftRight<3>(hn::BitCast(d, h))), hn::Set(du, 0x8FFF));
  return hn::Add(r, hn::Set(du, 0x3800));
}

HWY_INLINE bool F16ToBF16OddNormal(const std::uint16_t* HWY_RESTRICT src,
                                   std::uint16_t* HWY_RESTRICT dst, std::size_t n) {
  const hn::ScalableTag<std::uint16_t> du;
  const std::size_t L = hn::Lanes(du);
  if (n % L != 0) return false;
  auto worst = hn::Zero(du);
  for (std::size_t i = 0; i < n; i += L) {
    const auto h = hn::LoadU(du, src + i);
    worst = hn::Max(worst, hn::Sub(hn::Add(h, h), hn::Set(du, 0x0800)));
    hn::StoreU(F16ToBF16OddNormalBits(du, h), du, dst + i);
  }
  return hn::AllTrue(du, hn::Lt(worst, hn::Set(du, 0xF000)));
}

// dst[i] = float16 src[i] as bfloat16, rounded to odd (F16ToBF16OddScalar). Exact for every code
// (NaNs stay NaNs: a payload below the kept bits sets the last one).
HWY_INLINE void F16ToBF16Odd(const std::uint16_t* HWY_RESTRICT src, std::uint16_t* HWY_RESTRICT dst,
                             std::size_t n) {
  std::size_t i = 0;
#if HWY_ARCH_X86 || !KVS_F16_IN_REGISTERS
  // Values that are all normal (the usual rows) on the bits; otherwise again by the route below.
  // On x86 the bits beat the float32 route: 1.10-1.16 x on AVX2 (AMD Zen 3), 1.15-1.22 x on
  // AVX-512 (AMD Zen 5), for the indexer's float16 rows that take this pass.
  if (F16ToBF16OddNormal(src, dst, n)) return;
#endif
#if KVS_F16_IN_REGISTERS
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::int16_t, decltype(di)> d16;
  const std::size_t L = hn::Lanes(di);
  // The top 16 bits by an arithmetic shift, so that the narrowing's signed saturation keeps
  // them; the sticky bit as min(the low 16 bits, 1).
  const auto odd = [&](hn::Vec<decltype(di)> u) HWY_ATTR {
    return hn::Or(hn::ShiftRight<16>(u), hn::Min(hn::And(u, hn::Set(di, 0xFFFF)), hn::Set(di, 1)));
  };
  auto* out = reinterpret_cast<std::int16_t*>(dst);
#if HWY_TARGET == HWY_AVX2
  // Two vectors a step: one pack and one permute narrow both.
  for (; i + 2 * L <= n; i += 2 * L) {
    const __m256i a = odd(hn::BitCast(di, WidenF16(df, src + i))).raw;
    const __m256i b = odd(hn::BitCast(di, WidenF16(df, src + i + L))).raw;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8));
  }
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // The same on AVX-512, where each narrowing alone takes two operations of the shuffle port.
  const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  for (; i + 2 * L <= n; i += 2 * L) {
    const __m512i a = odd(hn::BitCast(di, WidenF16(df, src + i))).raw;
    const __m512i b = odd(hn::BitCast(di, WidenF16(df, src + i + L))).raw;
    _mm512_storeu_si512(out + i, _mm512_permutexvar_epi64(order, _mm512_packs_epi32(a, b)));
  }
#endif
  for (; i + L <= n; i += L) {
    hn::StoreU(hn::DemoteTo(d16, odd(hn::BitCast(di, WidenF16(df, src + i)))), d16, out + i);
  }
#else
  // Without an exact float16 conversion, on the bits: a normal value's bfloat16 is its magnitude
  // shifted right by 3 plus 112 exponent steps (0x3800), the dropped bits' sticky bit or-ed in,
  // and its sign; zeros keep only their sign. A vector with a subnormal, an infinity or a NaN is
  // done value by value.
  const hn::ScalableTag<std::int16_t> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const std::size_t L = hn::Lanes(d);
  for (; i + L <= n; i += L) {
    const auto h = hn::BitCast(d, hn::LoadU(du, src + i));
    const auto a = hn::And(h, hn::Set(d, 0x7FFF));
    const auto zero = hn::Eq(a, hn::Zero(d));
    const auto special =
        hn::AndNot(zero, hn::Or(hn::Lt(a, hn::Set(d, 0x400)), hn::Gt(a, hn::Set(d, 0x7BFF))));
    if (HWY_UNLIKELY(!hn::AllFalse(d, special))) {
      for (std::size_t k = i; k < i + L; ++k) dst[k] = F16ToBF16OddScalar(src[k]);
      continue;
    }
    auto r = hn::Add(hn::ShiftRight<3>(a), hn::Set(d, 0x3800));
    r = hn::IfThenZeroElse(zero, hn::Or(r, hn::Min(hn::And(h, hn::Set(d, 7)), hn::Set(d, 1))));
    r = hn::Or(r, hn::And(h, hn::Set(d, static_cast<std::int16_t>(-0x8000))));
    hn::StoreU(hn::BitCast(du, r), du, dst + i);
  }
#endif
  for (; i < n; ++i) dst[i] = F16ToBF16OddScalar(src[i]);
}

}  // namespace kvscatter::formats::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVSCATTER_FORMATS_F16_INL_H_
