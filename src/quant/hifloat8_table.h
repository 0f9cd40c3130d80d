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

}  // namespace kvscatter::detail
