// Number formats: scalar encode from float32 and decode to
// float32, plus batch conversions for the hot pairs. Every batch routine is bit-identical to
// its scalar counterpart; docs/formats.md states the rounding, saturation, NaN and signed-zero
// rule of each format.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvscatter/dtype.h"
#include "kvscatter/export.h"

namespace kvscatter::formats {

// bfloat16: round to nearest even; overflow to infinity; NaN stays NaN (quiet bit set).
KVSCATTER_API std::uint16_t encode_bfloat16(float x) noexcept;
KVSCATTER_API float decode_bfloat16(std::uint16_t code) noexcept;

// float16 (IEEE binary16): round to nearest even, subnormals kept, overflow to infinity,
// NaN stays NaN (quiet bit set, top payload bits kept).
KVSCATTER_API std::uint16_t encode_float16(float x) noexcept;
KVSCATTER_API float decode_float16(std::uint16_t code) noexcept;

// float8_e4m3fn (OCP): round to nearest even; magnitudes that round past 448 become NaN
// (0x7F with the sign), as ml_dtypes does; callers that need saturation clamp first.
KVSCATTER_API std::uint8_t encode_float8_e4m3fn(float x) noexcept;
KVSCATTER_API float decode_float8_e4m3fn(std::uint8_t code) noexcept;

// float8_e5m2: round to nearest even; overflow to infinity; NaN stays NaN.
KVSCATTER_API std::uint8_t encode_float8_e5m2(float x) noexcept;
KVSCATTER_API float decode_float8_e5m2(std::uint8_t code) noexcept;

// The saturating ("satfinite") float8 conversions of GPU KV caches: round to nearest even,
// subnormals kept, the sign of zero kept; a magnitude above the largest finite value (infinity
// included) gives the signed largest finite code (0x7E/0xFE for e4m3fn, 0x7B/0xFB for e5m2);
// NaN gives 0x7F whatever its sign.
KVSCATTER_API std::uint8_t encode_float8_e4m3fn_satfinite(float x) noexcept;
KVSCATTER_API std::uint8_t encode_float8_e5m2_satfinite(float x) noexcept;

// float8_e8m0 (OCP MX scale, unsigned exponent only): see docs/formats.md for the rounding of
// a general float32 input; 0xFF is NaN.
KVSCATTER_API std::uint8_t encode_float8_e8m0(float x) noexcept;
KVSCATTER_API float decode_float8_e8m0(std::uint8_t code) noexcept;

// float4_e2m1 (one nibble, low 4 bits of the result): round to nearest even, see
// docs/formats.md for saturation.
KVSCATTER_API std::uint8_t encode_float4_e2m1(float x) noexcept;
KVSCATTER_API float decode_float4_e2m1(std::uint8_t nibble) noexcept;

// float4_e1m2 (one nibble: sign, 1 exponent bit, 2 mantissa bits, bias 1; values 0, 0.25 ...
// 1.75): round to nearest even, saturating at +-1.75 like float4_e2m1 (no Inf, no NaN).
KVSCATTER_API std::uint8_t encode_float4_e1m2(float x) noexcept;
KVSCATTER_API float decode_float4_e1m2(std::uint8_t nibble) noexcept;

// HiFloat8: round half away from zero. saturate=true (what KvCompressEpilog uses): overflow
// and infinities give the largest finite code (0x6E/0xEE) and NaN gives 0x00; saturate=false:
// overflow gives infinity (0x6F/0xEF) and NaN gives 0x80.
KVSCATTER_API std::uint8_t encode_hifloat8(float x, bool saturate = true) noexcept;
KVSCATTER_API float decode_hifloat8(std::uint8_t code) noexcept;

// Generic scalar entry points over the floating dtypes (float32, float16, bfloat16, hifloat8,
// float8_e5m2, float8_e4m3fn, float8_e8m0, float4_e2m1, float4_e1m2). Codes are returned zero-extended.
KVSCATTER_API std::uint32_t encode(DType dtype, float x) noexcept;
KVSCATTER_API float decode(DType dtype, std::uint32_t code) noexcept;

// Batch conversions (SIMD, runtime-dispatched), bit-identical to the scalar ones.
KVSCATTER_API void float32_to_bfloat16(const float* src, std::uint16_t* dst,
                                       std::size_t n) noexcept;
KVSCATTER_API void float32_to_float16(const float* src, std::uint16_t* dst, std::size_t n) noexcept;
KVSCATTER_API void bfloat16_to_float32(const std::uint16_t* src, float* dst,
                                       std::size_t n) noexcept;
KVSCATTER_API void float16_to_float32(const std::uint16_t* src, float* dst, std::size_t n) noexcept;

}  // namespace kvscatter::formats
