// The HiFloat8 lookup tables, filled from the scalar encoder and the format's layout.
#include "quant/hifloat8_table.h"

#include <array>
#include <bit>
#include <cmath>

#include "kvscatter/formats.h"

namespace kvscatter::detail {

const std::uint8_t* hifloat8_sat_table() noexcept {
  static const std::array<std::uint8_t, 8192> table = [] {
    std::array<std::uint8_t, 8192> t{};
    for (std::uint32_t k = 0; k < t.size(); ++k) {
      t[k] = formats::encode_hifloat8(std::bit_cast<float>(k << kHiFloat8TableShift), true);
    }
    return t;
  }();
  return table.data();
}

const HiFloat8Bf16Tables& hifloat8_bf16_tables() noexcept {
  static const HiFloat8Bf16Tables tables = [] {
    HiFloat8Bf16Tables t{};
    for (std::uint16_t& h : t.half) h = kHiFloat8Bias;
    for (std::uint8_t& h : t.half8) h = kHiFloat8Bias & 0xFF;
    for (int biased = 104; biased <= 142; ++biased) {
      const int i = biased % 64, e = biased - 127;
      const int ae = e < 0 ? -e : e;
      // Mantissa bits HiFloat8 keeps: 3, 2, 1 in the binades up to 2^+-3, 2^+-7, 2^+-15; none
      // for the denormals below, nor (see the header) in binade 142.
      const int kept = biased == 142 ? 0 : ae <= 3 ? 3 : ae <= 7 ? 2 : ae <= 15 ? 1 : 0;
      const unsigned code = formats::encode_hifloat8(std::ldexp(1.0f, e), true);
      const unsigned top = static_cast<unsigned>(biased) << 7;
      const int r = (biased + 49) % 64;  // (top + bias) >> 7, mod 64
      t.half[i] = static_cast<std::uint16_t>((1u << (6 - kept)) + kHiFloat8Bias);
      t.scale[r] = static_cast<std::uint16_t>(1u << (9 + kept));
      t.offset[r] = static_cast<std::uint16_t>(code - ((top + kHiFloat8Bias) >> (7 - kept)));
      t.half8[i] = static_cast<std::uint8_t>(t.half[i] & 0xFF);
      t.shift8[r] = static_cast<std::uint8_t>(7 - kept);
      t.offset8[r] = static_cast<std::uint8_t>(t.offset[r] & 0xFF);
    }
    return t;
  }();
  return tables;
}

const HiFloat8F16Tables& hifloat8_f16_tables() noexcept {
  static const HiFloat8F16Tables tables = [] {
    HiFloat8F16Tables t{};
    for (std::uint16_t& h : t.half) h = kHiFloat8F16Bias;
    for (int biased = 1; biased <= 30; ++biased) {
      const int e = biased - 15, ae = e < 0 ? -e : e;
      // Mantissa bits kept as in hifloat8_bf16_tables(); binade 30 is 2^15, the bfloat16 142.
      const int kept = biased == 30 ? 0 : ae <= 3 ? 3 : ae <= 7 ? 2 : 1;
      const unsigned code = formats::encode_hifloat8(std::ldexp(1.0f, e), true);
      const unsigned top = static_cast<unsigned>(biased) << 10;
      const int r = biased + 33;  // (top + bias) >> 10
      t.half[biased] = static_cast<std::uint16_t>((1u << (9 - kept)) + kHiFloat8F16Bias);
      t.scale[r] = static_cast<std::uint16_t>(1u << (6 + kept));
      t.offset[r] = static_cast<std::uint16_t>(code - ((top + kHiFloat8F16Bias) >> (10 - kept)));
      t.shift8[r] = static_cast<std::uint8_t>(10 - kept);
      t.offset8[r] = static_cast<std::uint8_t>(t.offset[r] & 0xFF);
    }
    return t;
  }();
  return tables;
}

const HiFloat8LaneTables& hifloat8_lane_tables() noexcept {
  static const HiFloat8LaneTables tables = [] {
    HiFloat8LaneTables t{};
    // The kept-bit index of each width (3, 2, 1): its mask and the bits that tell it apart.
    constexpr std::uint8_t kAnd[4] = {0, 8, 12, 14}, kOr[4] = {0, 2, 0, 1};
    const auto encode = [](int e) { return formats::encode_hifloat8(std::ldexp(1.0f, e), true); };
    for (int ae = 0; ae < 16; ++ae) {
      const int kept = ae <= 3 ? 3 : ae <= 7 ? 2 : 1;
      t.half2[ae] = static_cast<std::uint8_t>(1u << (7 - kept));
      t.keep_and[ae] = kAnd[kept];
      t.keep_or[ae] = kOr[kept];
      t.neg[ae] = static_cast<std::uint8_t>(0x80 | encode(ae - 15));
      if (ae < 15) t.pos[ae] = static_cast<std::uint8_t>(0x80 | encode(ae + 1));
    }
    for (int i = 0; i < 32; ++i) {
      const int lane = i % 8, high = i % 16 / 8;  // the i-th byte of a 16-byte block
      t.operands[kLaneSplitLow][i] = static_cast<std::uint8_t>(2 * lane + high);
      t.operands[kLaneSplitHigh][i] = static_cast<std::uint8_t>(2 * lane + 1 - high);
    }
    constexpr std::uint8_t kSplat[6] = {129, 112, 0x7F, 0x80, 141, 0xF7};  // from kLane129 on
    for (int i = 0; i < 6; ++i) {
      for (std::uint8_t& b : t.operands[kLane129 + i]) b = kSplat[i];
    }
    for (int kept = 1; kept <= 3; ++kept) {
      for (unsigned top = 0; top < 16; ++top) {
        t.kept[(top & kAnd[kept]) | kOr[kept]] = static_cast<std::uint8_t>(top >> (4 - kept));
      }
    }
    return t;
  }();
  return tables;
}

}  // namespace kvscatter::detail
