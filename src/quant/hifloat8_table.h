// HiFloat8 encoding (round half away from zero, saturating) by table lookup. The code of a
// float32 depends only on its top 13 bits (sign, exponent, 4 mantissa bits: the kept ones and
// the rounding bit; ties go away from zero, so no lower bit breaks a tie), except for NaNs,
// which the caller maps to 0x00 itself (a NaN whose payload lies below bit 19 indexes the
// entry of infinity).
#pragma once

#include <cstdint>

namespace kvscatter::detail {

inline constexpr int kHiFloat8TableShift = 19;

// 8,192 entries: hifloat8_sat_table()[bits(x) >> 19] == encode_hifloat8(x, true) for every
// non-NaN float x. Built on first use, thread-safe.
const std::uint8_t* hifloat8_sat_table() noexcept;

// HiFloat8 codes of bfloat16 magnitudes a (15 bits) by exponent: with E = a >> 7 and
// i(E) = min(max(E - 103, 0), 63), the magnitude rounds (half away from zero) to
// r = (a + half[i(E)]) & keep[i(E)], and for 2^-23 <= |x| <= 1.25 * 2^15 (r capped at the bits
// of 2^15 saturates the rest) the code is code[i(R)] | (r & 0x7F) >> shift[i(R)] with
// R = r >> 7: the code of 2^(R - 127) plus the mantissa bits HiFloat8 keeps in that binade.
// Since a code depends only on the top 13 bits of a float32 (see above), the bfloat16 that
// truncates a float32 has the same code.
struct HiFloat8Bf16Tables {
  alignas(64) std::uint16_t half[64];
  alignas(64) std::uint16_t keep[64];
  alignas(64) std::uint16_t code[64];
  alignas(64) std::uint16_t shift[64];
};
const HiFloat8Bf16Tables& hifloat8_bf16_tables() noexcept;

}  // namespace kvscatter::detail
