// Quantizer building blocks shared by the quantizing kernels and their references: the scalar
// constants by bit pattern (so every build uses the same float), and float <-> bits helpers.
#pragma once

#include <bit>
#include <cstdint>

namespace kvscatter::detail {

inline constexpr std::uint32_t kC448Bits = 0x3B124925u;  // (float)(1.0f / 448.0f)
inline constexpr std::uint32_t kEpsBits = 0x38D1B717u;   // (float)1e-4
inline constexpr std::uint32_t kC6Bits = 0x3E2AAAABu;    // (float)(1.0f / 6.0f)
inline constexpr std::uint16_t kBf16CanonicalNaN = 0x7FC0;

inline float f32_from_bits(std::uint32_t u) noexcept { return std::bit_cast<float>(u); }
inline std::uint32_t bits_of(float f) noexcept { return std::bit_cast<std::uint32_t>(f); }

}  // namespace kvscatter::detail
