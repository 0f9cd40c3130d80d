// Pieces of IndexerQuantCache shared by plan.cc, reference.cc and the optimized kernel: the
// constants by bit pattern, the scale rules (one place, so both paths agree on every input),
// row addressing and the data-dependent slot check.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/overlap.h"
#include "kvscatter/indexer_quant_cache.h"

namespace kvscatter::detail::indexer {

inline constexpr std::uint32_t kC448Bits = 0x3B124925u;    // f32(1 / 448)
inline constexpr std::uint32_t kC57344Bits = 0x37924925u;  // f32(1 / 57344)
inline constexpr std::uint32_t kEpsBits = 0x38D1B717u;     // f32(1e-4)

inline float f32(std::uint32_t bits) noexcept { return std::bit_cast<float>(bits); }
inline std::uint32_t bits(float f) noexcept { return std::bit_cast<std::uint32_t>(f); }

// The biased exponent of s rounded up to a power of two: Eb(s) + (mantissa != 0).
inline std::uint32_t exponent_rounded_up(float s) noexcept {
  const std::uint32_t b = bits(s);
  return ((b >> 23) & 0xFFu) + ((b & 0x7FFFFFu) != 0 ? 1u : 0u);
}

// 2^(127 - e) for e in [0, 255] (subnormal below 2^-126), exact.
inline float pow2_from(std::uint32_t e) noexcept {
  if (e >= 1 && e <= 253) return f32((254u - e) << 23);
  return std::ldexp(1.0f, 127 - static_cast<int>(e));
}

// FP8 cache coefficient: f32(1/448) for float8_e4m3fn, f32(1/57344) for float8_e5m2.
inline float fp8_coefficient(DType cache) noexcept {
  return f32(cache == DType::float8_e4m3fn ? kC448Bits : kC57344Bits);
}

// Largest magnitude bit pattern (sign cleared) at or below `limit` over n floats: ordered like
// the magnitudes, and an integer max loop without NaN rules.
inline float amax_below(const float* x, std::int64_t n, std::uint32_t limit) noexcept {
  // Signed 32-bit lanes: the magnitudes are non-negative, and baseline x86-64 vectorizes signed
  // compares where it has no unsigned max.
  const auto lim = static_cast<std::int32_t>(limit);
  std::int32_t m = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    const auto u = static_cast<std::int32_t>(bits(x[k]) & 0x7FFFFFFFu);
    const std::int32_t v = u <= lim ? u : 0;
    m = m > v ? m : v;
  }
  return f32(static_cast<std::uint32_t>(m));
}

// Mode fp8: |x| maximum over the row, non-finite elements left out.
inline float finite_amax(const float* x, std::int64_t n) noexcept {
  return amax_below(x, n, 0x7F7FFFFFu);
}

// Mode mxfp8: |x| maximum over a group (infinities included; NaN left out).
inline float group_amax(const float* x, std::int64_t n) noexcept {
  return amax_below(x, n, 0x7F800000u);
}

// Byte address of the cache row (or scale row) of a slot.
inline unsigned char* row_at(const TensorView& t, std::int64_t slot, std::int64_t block_size) {
  const std::int64_t e = (slot / block_size) * t.stride(0) + (slot % block_size) * t.stride(1);
  return static_cast<unsigned char*>(t.data) + e * static_cast<std::int64_t>(t.element_size());
}

// Element offset of row r of x (every axis but the last, flattened row-major).
inline std::int64_t x_row(const TensorView& x, std::int64_t r) noexcept {
  std::int64_t off = 0;
  for (int a = x.rank - 2; a >= 0; --a) {
    off += (r % x.dim(a)) * x.stride(a);
    r /= x.dim(a);
  }
  return off;
}

// Null data pointers of the bound views (161001).
void check_bound_data(const IndexerQuantCachePlan& plan);

// Every slot is -1 (skip) or in [0, num_slots); returns them widened, row-major.
std::vector<std::int64_t> checked_slots(const IndexerQuantCachePlan& plan);

// The same check without a copy where slot_mapping is contiguous int64 and `copy` is false:
// returns the mapping's own entries, else `storage` filled as above.
const std::int64_t* checked_slots(const IndexerQuantCachePlan& plan,
                                  std::vector<std::int64_t>& storage, bool copy);

// The operands of a call, outputs first (see core/overlap.h); P is the plan, const or not.
template <class P>
[[gnu::always_inline]] inline Operands operands(P& p) {
  // cache_scale is written only in the modes that store scales.
  return Operands{
      {{{&p.cache, "cache"}, {p.scale_count > 0 ? &p.cache_scale : nullptr, "cache_scale"}}},
      {{{&p.x, "x"}, {&p.slot_mapping, "slot_mapping"}}}};
}

}  // namespace kvscatter::detail::indexer
