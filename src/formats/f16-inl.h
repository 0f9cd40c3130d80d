// float16 rows in registers (Highway -inl.h pattern: included once per target from inside a
// foreach_target translation unit).
// - KVS_F16_IN_REGISTERS: whether this target widens float16 in registers. Targets whose float16
//   conversion is an instruction (x86 from AVX2 on, with F16C; Arm's NEON and SVE) are exact for
//   every code; Highway's emulation elsewhere (SSE4) takes infinities and NaNs for finite values,
//   so those targets convert through the formats module's batch conversion instead.
// - WidenF16: N float16 values (bits) as float32.
// - F16ToBF16Odd: float16 values as bfloat16 rounded to odd.
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

// dst[i] = float16 src[i] as bfloat16, rounded to odd: the float32 value's top 16 bits, the last
// one set where any of the 16 dropped bits was. Exact for every code (NaNs stay NaNs: a payload
// below the kept bits sets the last one). wide: room for n floats, where the target converts
// through a buffer.
HWY_INLINE void F16ToBF16Odd(const std::uint16_t* HWY_RESTRICT src, std::uint16_t* HWY_RESTRICT dst,
                             std::size_t n, float* HWY_RESTRICT wide) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<std::uint16_t, decltype(du)> d16;
  const std::size_t L = hn::Lanes(du);
  const auto odd = [&](hn::Vec<decltype(du)> u) HWY_ATTR {
    const auto sticky =
        hn::IfThenElseZero(hn::Ne(hn::And(u, hn::Set(du, 0xFFFFu)), hn::Zero(du)), hn::Set(du, 1u));
    return hn::TruncateTo(d16, hn::Or(hn::ShiftRight<16>(u), sticky));
  };
  std::size_t i = 0;
#if KVS_F16_IN_REGISTERS
  (void)wide;
  for (; i + L <= n; i += L) hn::StoreU(odd(hn::BitCast(du, WidenF16(df, src + i))), d16, dst + i);
#else
  float16_to_float32(src, wide, n);
  for (; i + L <= n; i += L) {
    hn::StoreU(odd(hn::LoadU(du, reinterpret_cast<const std::uint32_t*>(wide + i))), d16, dst + i);
  }
#endif
  for (; i < n; ++i) {
    std::uint32_t u;
    const float f = decode_float16(src[i]);
    std::memcpy(&u, &f, 4);
    dst[i] = static_cast<std::uint16_t>((u >> 16) | ((u & 0xFFFFu) != 0 ? 1u : 0u));
  }
}

}  // namespace kvscatter::formats::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVSCATTER_FORMATS_F16_INL_H_
