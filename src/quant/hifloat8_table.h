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

// HiFloat8 codes of bfloat16 magnitudes a (15 bits) by exponent field E = a >> 7, each table
// indexed by E mod 64 (a 64-entry lookup reads an index's low six bits, so no clamp is needed):
// for 2^-23 <= |x| <= 1.25 * 2^15, E lies in [104, 142], whose residues differ. The magnitude
// rounds (half away from zero) to r = (a + half[E]) & keep[E]; with r capped at 0x4700 (the bits
// of 2^15, which saturates everything above) and R = r >> 7, the code is
// (r >> shift[R]) + offset[R] (mod 2^16): shift[R] drops the mantissa bits HiFloat8 does not keep
// in that binade (r has them clear), and offset[R] turns R's bits that remain into the code of
// 2^(R - 127). Any E above 142 rounds to an r above the cap, whatever entry it reads; lanes below
// 2^-23 (code 0) and NaNs (code 0) are the caller's. Since a code depends only on the top 13 bits
// of a float32 (see above), the bfloat16 that truncates a float32 has the same code.
struct HiFloat8Bf16Tables {
  alignas(64) std::uint16_t half[64];
  alignas(64) std::uint16_t keep[64];
  alignas(64) std::uint16_t offset[64];
  alignas(64) std::uint16_t shift[64];
};
const HiFloat8Bf16Tables& hifloat8_bf16_tables() noexcept;

}  // namespace kvscatter::detail
