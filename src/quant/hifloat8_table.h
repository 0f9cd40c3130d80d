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
// indexed mod 64 (a 64-entry lookup reads an index's low six bits, so no clamp is needed): for
// 2^-23 <= |x| <= 1.25 * 2^15, E lies in [104, 142], whose residues differ.
// - u' = a + half[E] (saturating at 0xFFFF) is the magnitude plus half a unit of the last
//   mantissa bit HiFloat8 keeps in binade E (round half away from zero), plus the bias
//   kHiFloat8Bias, which takes u = 0x477F to 0xFFFF: the add saturates where 2^15 does, and any
//   E above 142 saturates whatever entry it reads (the entries no E in range reads hold the bias
//   alone). The bias is a multiple of 128, so it leaves the shifts below exact.
// - With R' = u' >> 7, R + 0x171 for the rounded binade R (a carry out of the mantissa moves to
//   R = E + 1, where the bits below those kept stay below the next binade's unit), the code is
//   (u' * scale[R'] >> 16) + offset[R'] (mod 2^16), both indexed by R' mod 64 = (R + 49) mod 64:
//   scale = 2^(16 - dropped bits) shifts the kept bits down, and offset turns what remains of
//   R and of the bias into the code of 2^(R - 127).
// - Binade 142 keeps no mantissa bit: every u in [0x4700, 0x477F] codes as 2^15, and a saturated
//   u' (0xFFFF, any u from 0x4780 on) reads that entry with the same R' and kept bits.
// Lanes below 2^-23 (code 0) and NaNs (code 0) are the caller's. Since a code depends only on
// the top 13 bits of a float32 (see above), the bfloat16 that truncates a float32 has the same
// code.
// The byte forms, for 64-entry byte permutes: half8 the low byte of half (the bias's high byte
// comes from the lanes the permute does not write), the shift 16 - log2(scale) in place of the
// multiply, and the offset's low byte (the code is below 256, so the sum's low byte is the code
// whatever the high bytes hold).
inline constexpr std::uint16_t kHiFloat8Bias = 0xB880;  // 0xFFFF - 0x477F
struct HiFloat8Bf16Tables {
  alignas(64) std::uint16_t half[64];
  alignas(64) std::uint16_t scale[64];
  alignas(64) std::uint16_t offset[64];
  alignas(64) std::uint8_t half8[64];
  alignas(64) std::uint8_t shift8[64];
  alignas(64) std::uint8_t offset8[64];
};
const HiFloat8Bf16Tables& hifloat8_bf16_tables() noexcept;

// The same for normal float16 magnitudes a (15 bits) by exponent field E = a >> 10 (1 to 30):
// u' = a + half[E] with a bias of 0x8400 (a multiple of 1024, so that R' = u' >> 10 = R + 33
// names the rounded binade R exactly, 34 to 63), which leaves every u' of binades up to 29
// below 0xFFFF and saturates only within binade 30 (2^15, no mantissa bit kept), whose entry
// a saturated u' reads. The layout above: half by E (its first 32 entries; a 16-bit permute of
// one register reads them, so half8 is not used), scale and offset (the multiply form) and
// shift8 and offset8 (the byte form) by R', with ten mantissa bits. Values that are not normal
// (zeros, subnormals, infinities, NaNs) are the caller's.
inline constexpr std::uint16_t kHiFloat8F16Bias = 0x8400;
using HiFloat8F16Tables = HiFloat8Bf16Tables;
const HiFloat8F16Tables& hifloat8_f16_tables() noexcept;

// 16-entry byte tables for HiFloat8 codes of bfloat16 values with byte shuffles (targets
// without AVX-512), one value per byte: the biased exponent E and the mantissa m (7 bits) in
// bytes of their own, for 2^-15 <= |x| < 2^15 (E in [112, 141]).
// - by ae = |E - 127| (0..15): half2 = 2^(7 - kept), twice half a unit of the last mantissa
//   bit HiFloat8 keeps in binade E (kept 3, 2, 1), so that m + half2 / 2 rounds half away from
//   zero and carries into bit 7 (to binade R = E + 1) where the mantissa rounds up.
// - by the rounded binade R: pos[R - 128] (R in [128, 142]; entry 15 zero) and neg[R - 112]
//   (R in [112, 127]) are the codes of 2^(R - 127) with bit 7 set, which then marks the
//   lanes whose code is not 0x00 (those that take a sign).
// - the kept bits of the rounded mantissa m' (7 bits): with t = m' >> 3 (its top four bits),
//   kept[(t & keep_and[ae]) | keep_or[ae]] = t >> (4 - kept); the three widths read disjoint
//   entries (odd ones, multiples of 4, and 2 and 10), and the bits below those kept, whatever
//   they hold, are masked off. After a carry they are below the carried unit, so the kept bits
//   read zero as the code of 2^(R - 127) needs.
// Out of range (ae >= 16, which the index arranges to read 0) every table gives 0.
struct HiFloat8LaneTables {
  alignas(16) std::uint8_t half2[16];
  alignas(16) std::uint8_t keep_and[16];
  alignas(16) std::uint8_t keep_or[16];
  alignas(16) std::uint8_t kept[16];
  alignas(16) std::uint8_t pos[16];
  alignas(16) std::uint8_t neg[16];
  // The lane form's other operands, 32 bytes each (an AVX2 vector; SSE4 reads the first 16),
  // in HiF8LaneOperand's order: the byte shuffles that split 16-bit lanes into their low bytes
  // then their high bytes (and the other way round) in each 16-byte block, and 129 (-127), 112,
  // 0x7F and 0x80 in every byte, which its instructions read from memory; then the flags'
  // limits 141 and 0xF7, which a call loads once.
  alignas(32) std::uint8_t operands[8][32];
};
enum HiF8LaneOperand {
  kLaneSplitLow,
  kLaneSplitHigh,
  kLane129,
  kLane112,
  kLane7F,
  kLane80,
  kLaneBigTop,
  kLaneSmallTop
};
const HiFloat8LaneTables& hifloat8_lane_tables() noexcept;

}  // namespace kvscatter::detail
