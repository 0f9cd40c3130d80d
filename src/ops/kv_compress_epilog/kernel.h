// Internal pieces of KvCompressEpilog shared by the plan, the reference and the CPU kernel:
// the constants of spec section 4.5/4.7 by bit pattern, row addressing, and the optimized
// kernel's entry points (the batch encoders are exposed so tests can sweep them directly).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvscatter/quant_ops.h"
#include "ops/quant_common/slots.h"

namespace kvscatter::detail {

inline constexpr std::uint32_t kC448Bits = 0x3B124925u;  // (float)(1.0f / 448.0f)
inline constexpr std::uint32_t kEpsBits = 0x38D1B717u;   // (float)1e-4
inline constexpr std::uint32_t kC6Bits = 0x3E2AAAABu;    // (float)(1.0f / 6.0f)
inline constexpr std::int64_t kRopeDim = 64;             // last 64 columns of x
inline constexpr std::uint16_t kBf16CanonicalNaN = 0x7FC0;

inline float f32_from_bits(std::uint32_t u) noexcept { return std::bit_cast<float>(u); }
inline std::uint32_t bits_of(float f) noexcept { return std::bit_cast<std::uint32_t>(f); }

// Element offset of row r of x (all dimensions but the last flattened row-major).
inline std::int64_t x_row_offset(const TensorView& x, std::int64_t r) noexcept {
  std::int64_t off = 0;
  for (int a = x.rank - 2; a >= 0; --a) {
    const std::int64_t n = x.dim(a);
    off += (r % n) * x.stride(a);
    r /= n;
  }
  return off;
}

// Byte offset of the cache row of `slot` (spec section 4.3).
inline std::int64_t cache_row_offset(const KvCompressEpilogPlan& p, const SlotSplitter& split,
                                     std::int64_t slot) noexcept {
  return split.block(slot) * p.cache.stride(0) + split.offset(slot) * p.cache.stride(1);
}

// Reads slot_mapping and checks every value before anything is written (G1): -1 is kept as
// a skip marker, anything else outside [0, num_slots) throws kvscatter::Error (161002).
std::vector<std::int64_t> checked_epilog_slots(const KvCompressEpilogPlan& p);

// Optimized kernel: rows [begin, end) of x into the cache rows named by slots (-1 = skip).
void kv_compress_epilog_cpu(const KvCompressEpilogPlan& p, const std::int64_t* slots,
                            std::int64_t begin, std::int64_t end);

// The SIMD element encoders of the optimized kernel (runtime dispatched), for tests:
// q -> e4m3fn code after the clamp to [-448, 448], NaN -> 0x7F (modes 0/1);
// p -> e2m1 nibble of clamp(bf16_RNE(p), -6, 6), NaN -> 0 (mode 2 nope);
// x -> HiFloat8 code, round half away, saturating (mode 2 rope).
// finite_only selects the fast variants the kernel uses for groups without NaN results (their
// output for NaN inputs is unspecified).
void simd_encode_e4m3_clamped(const float* q, std::uint8_t* out, std::size_t n, bool finite_only);
void simd_encode_e2m1_from_product(const float* p, std::uint8_t* out, std::size_t n,
                                   bool finite_only);
void simd_encode_hifloat8_sat(const float* x, std::uint8_t* out, std::size_t n);
// The FP4 thresholds of the kernel's fast path (quant::E2M1Thresholds) for n multipliers
// (finite bf16 values >= 0, as f32; n a multiple of 8): thr[k * n + i], k = 0..6. Writes
// nothing on the scalar target, which has no such path.
void simd_e2m1_thresholds(const float* mult, std::int64_t n, std::uint16_t* thr);

}  // namespace kvscatter::detail
