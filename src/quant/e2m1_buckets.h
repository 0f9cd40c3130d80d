// FP4 (e2m1) codes of bf16 values times a bf16 multiplier, by bucket tables. The code of |v| in a
// group with multiplier m, e2m1_RNE(min(bf16_RNE(|v| * m), 6)), is the number of thresholds t_k
// (k = 0..6, the largest magnitude bits of each code) that |v|'s bits exceed. For m in [1, 2) the
// thresholds span fewer than 32 buckets of 32 consecutive bit patterns and no bucket holds two of
// them, so the code of a in bucket i is code[i] + (a > thr[i]): one table lookup and one compare
// instead of seven compares. A multiplier m = 2^(E - 127) * M (M in [1, 2)) scales every value
// exactly by a power of two, which moves the thresholds of M by 128 * (127 - E) bit patterns,
// a whole number of buckets, as long as they stay in the normal range; the tables of the 128
// mantissas of M then serve every multiplier.
//
// The lookup and the compare are one addition: with r = a - base * 32 clamped to [0, 1023] and
// T = thr[i] - base * 32 (1023 where the bucket holds none), entry[i] = code[i] * 4096 + 4094 - 2T
// plus 2r carries into bit 12 exactly when r > T, so (entry[i] + 2r) >> 12 is the code; bit 15
// stays clear for the sign.
#pragma once

#include <cstdint>

namespace kvscatter::detail {

// The smallest exponent field of a group's largest magnitude that E2M1Buckets' amax entries
// serve.
inline constexpr std::uint32_t kAmaxMinExp = 6;

struct E2M1Buckets {
  // For the mantissa j of M (M = 1 + j / 128) and bucket i (bit patterns (base[j] + i) * 32 ...
  // + 31): the entry above, from the threshold inside the bucket and the count of those below.
  alignas(64) std::uint16_t entry[128][32];
  // The same thresholds in 16 buckets of 64 patterns (base + i) * 64 ... + 63, base =
  // (t0 - 3) >> 6, at most two per bucket, as bytes for 16-entry byte lookups (targets without
  // vpermw): the number below bucket i, and its thresholds as the low byte of their r (63 past
  // the bucket's first pattern for none). A magnitude r = a - base * 64 in [0, 1023] has the
  // code below[i] + (r > lo[i]) + (r > hi[i]) with i = r / 64, the compares on r's low byte as
  // signed bytes: within a bucket that order is the order of r. The lookups of a 16-bit lane's
  // high byte (index 0) give entries 0: no count, and thresholds of at least 3, which r's high
  // byte (at most 3) does not exceed.
  alignas(16) std::uint8_t byte_lo[128][16];
  alignas(16) std::uint8_t byte_hi[128][16];
  alignas(16) std::uint8_t byte_below[128][16];
  alignas(16) std::uint8_t byte_below8[128][16];  // byte_below + 8: the sign bit of a nibble
  bool byte_usable[128];    // that layout holds (checked when the tables are built)
  std::uint16_t t0[128];    // the smallest threshold of M
  std::uint16_t base[128];  // t0 >> 5: bucket 0 holds t0
  bool usable[128];         // the layout above holds (always, checked when the tables are built)
  // For the parameter functions below, per mantissa: the first bucket at exponent E = 0 (less
  // 4 E, resp. 2 E, at E), and the largest exponent the tables serve (0 for none).
  std::uint16_t base_e0[128], byte_base_e0[128];
  std::uint8_t max_e[128], byte_max_e[128];
  // kv_compress_epilog's group plans from the group's largest magnitude a = E * 128 + m (bf16
  // bits) without the division 6 / a: for a = M * 2^(E - 127), the multiplier bf16(6 / a) is
  // bf16(6 / M) * 2^(127 - E) and the scale bf16(a / 6) is bf16(M / 6) * 2^(E - 127) wherever
  // they stay normal, so the mantissa m fixes the multiplier's bucket table and E shifts the
  // rest. For E in [kAmaxMinExp, 254]: the scale's bf16 bits are amax_scale[m] + 128 E, the
  // group's bucket table is the one at entry[0][amax_table[m]], and its first bucket * 64 is
  // amax_b64[m] + 256 E (both modulo 2^16), and the bucket tables serve the group
  // (e2m1_bucket_params holds and a lies within bucket 31). amax_usable: every m and E of that
  // range was checked against those scalar steps when the tables were built. Zeros, subnormals
  // (E 0), infinities and NaNs (E 255) and groups below 2^-121 lie outside it.
  alignas(64) std::uint16_t amax_table[128];
  alignas(64) std::uint16_t amax_scale[128];
  alignas(64) std::uint16_t amax_b64[128];
  bool amax_usable;
};

// Built on first use from the scalar formats, thread-safe.
const E2M1Buckets& e2m1_buckets() noexcept;

// Bucket parameters of a group with multiplier bits mb (a finite positive bf16): the mantissa
// index j and the first bucket `base` of the group's thresholds; false when the tables do not
// apply (a zero or subnormal multiplier, thresholds below the normal range). With E the exponent
// field, the thresholds of M move by 128 * (127 - E) patterns, 4 * (127 - E) buckets of 32, and
// they stay at or above 0x80 up to an exponent fixed per mantissa: a few operations per group
// from two entries.
inline bool e2m1_bucket_params(const E2M1Buckets& b, std::uint32_t mb, std::uint32_t& j,
                               std::uint32_t& base) noexcept {
  const std::uint32_t e = mb >> 7;
  j = mb & 0x7Fu;
  base = b.base_e0[j] - 4 * e;
  return e - 1 < b.max_e[j];  // 1 <= e <= max_e
}

// The same for the byte tables: base is their first 64-pattern bucket.
inline bool e2m1_byte_bucket_params(const E2M1Buckets& b, std::uint32_t mb, std::uint32_t& j,
                                    std::uint32_t& base) noexcept {
  const std::uint32_t e = mb >> 7;
  j = mb & 0x7Fu;
  base = b.byte_base_e0[j] - 2 * e;
  return e - 1 < b.byte_max_e[j];
}

}  // namespace kvscatter::detail
