// Scalar codecs for the number formats of docs/formats.md. Every encoder works on
// the float32 bit pattern with integer arithmetic, so the result does not depend on the FP
// environment, and the batch kernels in batch.cc can mirror it lane for lane.
#include "kvscatter/formats.h"

#include <bit>
#include <cmath>
#include <cstdint>

namespace kvscatter::formats {
namespace {

constexpr std::uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr std::uint32_t kF32Inf = 0x7F800000u;
constexpr std::uint32_t kF32QuietNaN = 0x7FC00000u;

inline std::uint32_t bits_of(float x) noexcept { return std::bit_cast<std::uint32_t>(x); }
inline float float_of(std::uint32_t b) noexcept { return std::bit_cast<float>(b); }

// Rounds the magnitude of a finite float32 (abs bit pattern `a`) to a small binary format with
// kMant mantissa bits and exponent bias kBias, round to nearest even, subnormals included.
// Returns the magnitude code (exponent field << kMant | mantissa) without any overflow
// handling: a result past the largest finite code means the value overflowed.
template <int kMant, int kBias>
std::uint32_t round_to_small_float(std::uint32_t a) noexcept {
  constexpr int kMinNormalExp = 1 - kBias;
  constexpr int kShift = 23 - kMant;
  const int e = static_cast<int>(a >> 23) - 127;
  if (e >= kMinNormalExp) {
    // Normal in the target: rebias the exponent in place, then round the dropped bits. A
    // carry out of the mantissa bumps the exponent, which is exactly the rounded value.
    const std::uint32_t r = a - (static_cast<std::uint32_t>(127 - kBias) << 23);
    return (r + ((1u << (kShift - 1)) - 1) + ((r >> kShift) & 1u)) >> kShift;
  }
  if ((a >> 23) == 0) return 0;  // float32 subnormals are far below half the target's minimum
  // Subnormal in the target: count units of 2^(kMinNormalExp - kMant), rounded to nearest even.
  const std::uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const int shift = kShift + kMinNormalExp - e;  // > kShift
  if (shift > 24) return 0;                      // below half the smallest subnormal
  return (m + ((1u << (shift - 1)) - 1) + ((m >> shift) & 1u)) >> shift;
}

// Value of a small float's magnitude code (no NaN/Inf handling), exact in float32.
template <int kMant, int kBias>
float small_float_value(std::uint32_t mag) noexcept {
  const int e = static_cast<int>(mag >> kMant);
  const int m = static_cast<int>(mag & ((1u << kMant) - 1));
  if (e == 0) return std::ldexp(static_cast<float>(m), 1 - kBias - kMant);
  return std::ldexp(static_cast<float>((1 << kMant) | m), e - kBias - kMant);
}

inline float with_sign(float v, bool negative) noexcept { return negative ? -v : v; }

}  // namespace

// ---- bfloat16 -------------------------------------------------------------------------------

std::uint16_t encode_bfloat16(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  if ((b & kAbsMask) > kF32Inf) return static_cast<std::uint16_t>((b >> 16) | 0x40u);
  return static_cast<std::uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

float decode_bfloat16(std::uint16_t code) noexcept {
  return float_of(static_cast<std::uint32_t>(code) << 16);
}

// ---- float16 (IEEE binary16) ----------------------------------------------------------------

std::uint16_t encode_float16(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t sign = (b >> 16) & 0x8000u;
  const std::uint32_t a = b & kAbsMask;
  std::uint32_t mag;
  if (a > kF32Inf) {
    mag = 0x7E00u | ((a >> 13) & 0x3FFu);  // quiet NaN, top payload bits kept
  } else if (a >= 0x38800000u) {           // |x| >= 2^-14: normal (or overflow)
    mag = round_to_small_float<10, 15>(a);
    if (mag > 0x7C00u) mag = 0x7C00u;  // overflow and Inf -> Inf
  } else {
    mag = round_to_small_float<10, 15>(a);  // subnormal; may round up to 2^-14 (0x0400)
  }
  return static_cast<std::uint16_t>(sign | mag);
}

float decode_float16(std::uint16_t code) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x8000u) << 16;
  const std::uint32_t e = (code >> 10) & 0x1Fu;
  const std::uint32_t m = code & 0x3FFu;
  if (e == 0x1F) return float_of(sign | kF32Inf | (m << 13));  // Inf, NaN with payload kept
  if (e == 0) return with_sign(std::ldexp(static_cast<float>(m), -24), sign != 0);
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

// ---- float8_e4m3fn --------------------------------------------------------------------------

std::uint8_t encode_float8_e4m3fn(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t sign = (b >> 24) & 0x80u;
  const std::uint32_t a = b & kAbsMask;
  if (a >= kF32Inf) return static_cast<std::uint8_t>(sign | 0x7Fu);  // NaN and Inf -> NaN
  std::uint32_t mag = round_to_small_float<3, 7>(a);
  if (mag > 0x7Eu) mag = 0x7Fu;  // rounds past 448 -> NaN
  return static_cast<std::uint8_t>(sign | mag);
}

float decode_float8_e4m3fn(std::uint8_t code) noexcept {
  const bool negative = (code & 0x80u) != 0;
  const std::uint32_t mag = code & 0x7Fu;
  if (mag == 0x7Fu) return float_of((negative ? 0x80000000u : 0u) | kF32QuietNaN);
  return with_sign(small_float_value<3, 7>(mag), negative);
}

// ---- float8_e5m2 ----------------------------------------------------------------------------

std::uint8_t encode_float8_e5m2(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t sign = (b >> 24) & 0x80u;
  const std::uint32_t a = b & kAbsMask;
  if (a > kF32Inf) return static_cast<std::uint8_t>(sign | 0x7Eu);  // canonical quiet NaN
  if (a == kF32Inf) return static_cast<std::uint8_t>(sign | 0x7Cu);
  std::uint32_t mag = round_to_small_float<2, 15>(a);
  if (mag > 0x7Cu) mag = 0x7Cu;  // overflow -> Inf (a tie at 61440 rounds to the even Inf)
  return static_cast<std::uint8_t>(sign | mag);
}

float decode_float8_e5m2(std::uint8_t code) noexcept {
  const bool negative = (code & 0x80u) != 0;
  const std::uint32_t mag = code & 0x7Fu;
  const std::uint32_t sign = negative ? 0x80000000u : 0u;
  if (mag == 0x7Cu) return float_of(sign | kF32Inf);
  if (mag > 0x7Cu) return float_of(sign | kF32QuietNaN);
  return with_sign(small_float_value<2, 15>(mag), negative);
}

// ---- saturating float8 ----------------------------------------------------------------------

// Clamping the magnitude to the largest finite value before rounding is the saturation rule:
// every magnitude above it (infinity included) becomes that value's code.
std::uint8_t encode_float8_e4m3fn_satfinite(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t a = b & kAbsMask;
  if (a > kF32Inf) return 0x7Fu;
  const std::uint32_t sign = (b >> 24) & 0x80u;
  const std::uint32_t mag = round_to_small_float<3, 7>(a < 0x43E00000u ? a : 0x43E00000u);
  return static_cast<std::uint8_t>(sign | mag);
}

std::uint8_t encode_float8_e5m2_satfinite(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t a = b & kAbsMask;
  if (a > kF32Inf) return 0x7Fu;
  const std::uint32_t sign = (b >> 24) & 0x80u;
  const std::uint32_t mag = round_to_small_float<2, 15>(a < 0x47600000u ? a : 0x47600000u);
  return static_cast<std::uint8_t>(sign | mag);
}

// ---- float8_e8m0 ----------------------------------------------------------------------------

// Matches ml_dtypes.float8_e8m0fnu: zero, negatives, Inf and NaN have no code and give NaN;
// a normal input rounds half up on the linear scale (mantissa >= 0.5 bumps the exponent);
// a float32 subnormal gives 2^-126 above 2^-127 and 2^-127 otherwise.
std::uint8_t encode_float8_e8m0(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  if ((b >> 31) != 0 || b == 0 || b >= kF32Inf) return 0xFFu;
  if (b < 0x800000u) return b > 0x400000u ? 1u : 0u;
  const std::uint32_t e = (b >> 23) + ((b >> 22) & 1u);
  return static_cast<std::uint8_t>(e >= 0xFFu ? 0xFFu : e);
}

float decode_float8_e8m0(std::uint8_t code) noexcept {
  if (code == 0xFFu) return float_of(kF32QuietNaN);
  if (code == 0) return float_of(0x400000u);  // 2^-127, a float32 subnormal
  return float_of(static_cast<std::uint32_t>(code) << 23);
}

// ---- float4_e2m1 ----------------------------------------------------------------------------

// Saturates to +-6 (Inf included). The format has no NaN; a NaN input gives the zero of the
// opposite sign, bit for bit what ml_dtypes.float4_e2m1fn produces.
std::uint8_t encode_float4_e2m1(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t sign = (b >> 28) & 0x8u;
  const std::uint32_t a = b & kAbsMask;
  if (a > kF32Inf) return static_cast<std::uint8_t>(sign ^ 0x8u);
  if (a == kF32Inf) return static_cast<std::uint8_t>(sign | 0x7u);
  std::uint32_t mag = round_to_small_float<1, 1>(a);
  if (mag > 0x7u) mag = 0x7u;
  return static_cast<std::uint8_t>(sign | mag);
}

float decode_float4_e2m1(std::uint8_t nibble) noexcept {
  return with_sign(small_float_value<1, 1>(nibble & 0x7u), (nibble & 0x8u) != 0);
}

// ---- float4_e1m2 ----------------------------------------------------------------------------

// Same conventions as float4_e2m1: saturates at +-1.75 (Inf included); NaN gives the zero of
// the opposite sign.
std::uint8_t encode_float4_e1m2(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t sign = (b >> 28) & 0x8u;
  const std::uint32_t a = b & kAbsMask;
  if (a > kF32Inf) return static_cast<std::uint8_t>(sign ^ 0x8u);
  if (a >= 0x40000000u) return static_cast<std::uint8_t>(sign | 0x7u);  // |x| >= 2, Inf too
  std::uint32_t mag = round_to_small_float<2, 1>(a);
  if (mag > 0x7u) mag = 0x7u;
  return static_cast<std::uint8_t>(sign | mag);
}

float decode_float4_e1m2(std::uint8_t nibble) noexcept {
  return with_sign(small_float_value<2, 1>(nibble & 0x7u), (nibble & 0x8u) != 0);
}

// ---- HiFloat8 -------------------------------------------------------------------------------

std::uint8_t encode_hifloat8(float x, bool saturate) noexcept {
  const std::uint32_t b = bits_of(x);
  const std::uint32_t a = b & kAbsMask;
  const std::uint32_t s = (b >> 31) != 0 ? 0x80u : 0u;
  const std::uint32_t overflow = s | (saturate ? 0x6Eu : 0x6Fu);
  if (a > kF32Inf) return saturate ? 0x00u : 0x80u;
  if (a == kF32Inf) return static_cast<std::uint8_t>(overflow);
  if (a < 0x34000000u) return 0x00u;  // |x| < 2^-23 rounds to the only zero
  const int e = static_cast<int>(a >> 23) - 127;
  if (e >= 16) return static_cast<std::uint8_t>(overflow);
  // Mantissa width follows from the input exponent; a rounding carry leaves mantissa 0 in the
  // next binade, which is still encoded correctly below.
  const int ae = e < 0 ? -e : e;
  const int mb = ae <= 3 ? 3 : ae <= 7 ? 2 : ae <= 15 ? 1 : 0;
  const int sh = 23 - mb;
  const std::uint32_t r = (a + (1u << (sh - 1))) & ~((1u << sh) - 1u);  // half away from zero
  const int e2 = static_cast<int>(r >> 23) - 127;
  const std::uint32_t m = (r >> sh) & ((1u << mb) - 1u);
  if (e2 > 15 || (e2 == 15 && m != 0)) return static_cast<std::uint8_t>(overflow);
  if (e2 <= -16) {  // denormal 2^(c-23); [2^-23, 2^-22) rounds (half away) up to 2^-22
    return static_cast<std::uint8_t>(s | (e2 == -23 ? 1u : static_cast<std::uint32_t>(e2 + 23)));
  }
  const std::uint32_t n = e2 < 0 ? 1u : 0u;
  const std::uint32_t ae2 = static_cast<std::uint32_t>(e2 < 0 ? -e2 : e2);
  std::uint32_t c;
  if (ae2 == 0) {
    c = 0x08u | m;
  } else if (ae2 == 1) {
    c = 0x10u | n << 3 | m;
  } else if (ae2 <= 3) {
    c = 0x20u | n << 4 | (ae2 - 2) << 3 | m;
  } else if (ae2 <= 7) {
    c = 0x40u | n << 4 | (ae2 - 4) << 2 | m;
  } else {
    c = 0x60u | n << 4 | (ae2 - 8) << 1 | m;
  }
  return static_cast<std::uint8_t>(s | c);
}

float decode_hifloat8(std::uint8_t code) noexcept {
  if (code == 0x80u) return float_of(kF32QuietNaN);
  const bool negative = (code & 0x80u) != 0;
  const unsigned c = code & 0x7Fu;
  if (c == 0x6Fu) return float_of((negative ? 0x80000000u : 0u) | kF32Inf);
  if (c == 0) return 0.0f;
  if (c < 0x08u) return with_sign(std::ldexp(1.0f, static_cast<int>(c) - 23), negative);
  // Prefix-coded dot field D, then D exponent bits (sign-magnitude, implicit leading 1 when
  // D > 0), then the mantissa.
  int exp_mag;
  unsigned exp_negative;
  int mant_bits;
  if (c < 0x10u) {  // 0001 mmm
    exp_mag = 0, exp_negative = 0, mant_bits = 3;
  } else if (c < 0x20u) {  // 001 s mmm
    exp_mag = 1, exp_negative = (c >> 3) & 1u, mant_bits = 3;
  } else if (c < 0x40u) {  // 01 s e mmm
    exp_mag = 2 + static_cast<int>((c >> 3) & 1u), exp_negative = (c >> 4) & 1u, mant_bits = 3;
  } else if (c < 0x60u) {  // 10 s ee mm
    exp_mag = 4 + static_cast<int>((c >> 2) & 3u), exp_negative = (c >> 4) & 1u, mant_bits = 2;
  } else {  // 11 s eee m
    exp_mag = 8 + static_cast<int>((c >> 1) & 7u), exp_negative = (c >> 4) & 1u, mant_bits = 1;
  }
  const int m = static_cast<int>(c & ((1u << mant_bits) - 1u));
  const int exponent = exp_negative != 0 ? -exp_mag : exp_mag;
  const float v = std::ldexp(static_cast<float>((1 << mant_bits) | m), exponent - mant_bits);
  return with_sign(v, negative);
}

// ---- by dtype -------------------------------------------------------------------------------

std::uint32_t encode(DType dtype, float x) noexcept {
  switch (dtype) {
    case DType::float32:
      return bits_of(x);
    case DType::float16:
      return encode_float16(x);
    case DType::bfloat16:
      return encode_bfloat16(x);
    case DType::hifloat8:
      return encode_hifloat8(x, true);
    case DType::float8_e5m2:
      return encode_float8_e5m2(x);
    case DType::float8_e4m3fn:
      return encode_float8_e4m3fn(x);
    case DType::float8_e8m0:
      return encode_float8_e8m0(x);
    case DType::float4_e2m1:
      return encode_float4_e2m1(x);
    case DType::float4_e1m2:
      return encode_float4_e1m2(x);
    default:
      return 0;  // not a floating dtype
  }
}

float decode(DType dtype, std::uint32_t code) noexcept {
  switch (dtype) {
    case DType::float32:
      return float_of(code);
    case DType::float16:
      return decode_float16(static_cast<std::uint16_t>(code));
    case DType::bfloat16:
      return decode_bfloat16(static_cast<std::uint16_t>(code));
    case DType::hifloat8:
      return decode_hifloat8(static_cast<std::uint8_t>(code));
    case DType::float8_e5m2:
      return decode_float8_e5m2(static_cast<std::uint8_t>(code));
    case DType::float8_e4m3fn:
      return decode_float8_e4m3fn(static_cast<std::uint8_t>(code));
    case DType::float8_e8m0:
      return decode_float8_e8m0(static_cast<std::uint8_t>(code));
    case DType::float4_e2m1:
      return decode_float4_e2m1(static_cast<std::uint8_t>(code));
    case DType::float4_e1m2:
      return decode_float4_e1m2(static_cast<std::uint8_t>(code));
    default:
      return float_of(kF32QuietNaN);  // not a floating dtype
  }
}

}  // namespace kvscatter::formats
