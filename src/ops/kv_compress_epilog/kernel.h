// The dispatched entry points of the kv_compress_epilog kernel (kernel.cc). The batch encoders
// are exposed so that tests can sweep them directly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/slots.h"
#include "kvscatter/kv_compress_epilog.h"

namespace kvscatter::detail {

// Rows [begin, end) of x into the cache rows named by slots (-1 = skip). stream: the call
// writes more than the caches hold (core/streaming.h), so whole cache lines may be written with
// non-temporal stores; prefetch: it reads and writes more than they hold, so the rows of x are
// prefetched ahead of the kernel.
void quantize_rows(const KvCompressEpilogPlan& p, const std::int64_t* slots, std::int64_t begin,
                   std::int64_t end, bool stream, bool prefetch);

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
// The fast paths by tables, for n a multiple of 64; false (nothing defined written) where the
// target has none or the input is outside the path's domain. HiFloat8 codes of bfloat16 inputs
// (the rope with x_scale 1; NaN gives 0x00); FP4 codes, packed, of bfloat16 inputs (finite)
// times the bf16 multiplier mult, by bucket tables (false when the tables do not apply to mult),
// in the form the operator takes for groups of `group` (16 or 64): on AVX2 64 takes the byte
// pairs and 16 the 16-bit lanes; AVX-512 has no bucket form for 16.
bool simd_encode_hifloat8_bf16(const std::uint16_t* x, std::uint8_t* out, std::size_t n);
bool simd_encode_e2m1_by_buckets(float mult, const std::uint16_t* x, std::uint8_t* out,
                                 std::size_t n, std::int64_t group);
// The group plans of mode hifloat8_fp4 from the groups' largest magnitudes (bf16 bits & 0x7FFF)
// by the amax entries of the bucket tables, for `rows` rows (1 to 4) of `groups` groups as the
// kernel's batches take them, row r's maxima amax[r * stride + g] (g < groups) and its outputs at
// the same offsets of every array (stride at least groups rounded up to 32): each group's scale
// bits, bucket table (its first index in the flat entry array) and first bucket * 64 (twice, in a
// 32-bit word); ok[r] tells whether row r was planned (else its outputs are undefined). False
// where the target has no such path.
bool simd_e2m1_plans_of_amax_rows(const std::uint16_t* amax, std::int64_t stride, int rows,
                                  std::int64_t groups, std::uint16_t* scale, std::uint16_t* table,
                                  std::uint32_t* b64, bool* ok);

}  // namespace kvscatter::detail
