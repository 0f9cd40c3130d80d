// The FP4 bucket tables, built from the scalar formats so that they share one definition with
// the reference.
#include "quant/e2m1_buckets.h"

#include <algorithm>

#include "kvscatter/formats.h"
#include "quant/constants.h"

namespace kvscatter::detail {
namespace {

// e2m1 magnitude code of bits a (a finite non-negative bf16) times mult, as the reference
// computes it.
int code_of(std::uint32_t a, float mult) {
  const float p = formats::decode_bfloat16(static_cast<std::uint16_t>(a)) * mult;
  const float xq = formats::decode_bfloat16(formats::encode_bfloat16(p));
  return formats::encode_float4_e2m1(std::min(xq, 6.0f)) & 0x7;
}

// Largest a in [0, 0x7F7F] whose code is at most k (codes grow with a).
std::uint32_t threshold(int k, float mult) {
  std::uint32_t lo = 0, hi = 0x7F7F;  // code_of(lo) <= k < code_of(hi + 1), searched
  if (code_of(hi, mult) <= k) return hi;
  while (lo + 1 < hi) {
    const std::uint32_t mid = (lo + hi) / 2;
    (code_of(mid, mult) <= k ? lo : hi) = mid;
  }
  return lo;
}

void build_mantissa(E2M1Buckets& b, std::uint32_t j) {
  const float mult = f32_from_bits((127u << 23) | (j << 16));
  std::uint32_t t[7];
  for (int k = 0; k < 7; ++k) t[k] = threshold(k, mult);
  b.t0[j] = static_cast<std::uint16_t>(t[0]);
  b.base[j] = static_cast<std::uint16_t>(t[0] >> 5);
  // Every threshold in buckets 0..31, below the bucket's last pattern (the largest relative
  // pattern 1023 stands for everything above bucket 31, which is past every threshold).
  bool usable = t[6] < (b.base[j] + 31u) * 32u + 31u;
  for (std::uint32_t i = 0; i < 32; ++i) {
    const std::uint32_t lo = (b.base[j] + i) * 32;
    int below = 0, inside = 0;
    std::uint32_t thr = 1023;  // none inside: above every pattern of the bucket
    for (int k = 0; k < 7; ++k) {
      if (t[k] < lo) {
        ++below;
      } else if (t[k] <= lo + 31) {
        ++inside;
        thr = t[k] - b.base[j] * 32u;
      }
    }
    usable = usable && inside <= 1;
    b.entry[j][i] = static_cast<std::uint16_t>((below << 12) + 4094 - 2 * thr);
  }
  b.usable[j] = usable;
  // The byte tables: 64-pattern buckets from (t0 - 3) >> 6, so that entry 0 of both threshold
  // tables is at least 3 (see the header).
  const std::uint32_t base64 = (t[0] - 3) >> 6;
  bool byte_usable = t[0] >= 3 && t[6] < base64 * 64u + 1023u;
  for (std::uint32_t i = 0; i < 16; ++i) {
    const std::uint32_t lo = (base64 + i) * 64;
    int below = 0, inside = 0;
    std::uint32_t thr[2] = {63, 63};  // none: the bucket's last pattern, never exceeded
    for (int k = 0; k < 7; ++k) {
      if (t[k] < lo) {
        ++below;
      } else if (t[k] <= lo + 63) {
        if (inside < 2) thr[inside] = t[k] - lo;
        ++inside;
      }
    }
    byte_usable = byte_usable && inside <= 2;
    b.byte_lo[j][i] = static_cast<std::uint8_t>((i % 4) * 64 + thr[0]);
    b.byte_hi[j][i] = static_cast<std::uint8_t>((i % 4) * 64 + thr[1]);
    b.byte_below[j][i] = static_cast<std::uint8_t>(below);
    b.byte_below8[j][i] = static_cast<std::uint8_t>(below + 8);
  }
  byte_usable = byte_usable && b.byte_lo[j][0] >= 3 && b.byte_hi[j][0] >= 3;
  b.byte_usable[j] = byte_usable;
  // The parameter functions' entries: thresholds at or above 0x80 while 128 * (127 - E) >=
  // 0x80 - t0, i.e. E <= 127 + (t0 - 0x80) / 128; exponents 1..254 (0 and 255 are not finite
  // normal multipliers).
  const std::uint32_t top = t[0] >= 0x80 ? std::min(254u, 127u + (t[0] - 0x80) / 128) : 0u;
  b.base_e0[j] = static_cast<std::uint16_t>((t[0] >> 5) + 4 * 127);
  b.byte_base_e0[j] = static_cast<std::uint16_t>(((t[0] - 3) >> 6) + 2 * 127);
  b.max_e[j] = static_cast<std::uint8_t>(usable ? top : 0);
  b.byte_max_e[j] = static_cast<std::uint8_t>(byte_usable ? top : 0);
}

// A group's plan as kv_compress_epilog's reference takes it from its largest magnitude bits a
// (the multiplier bf16(6 / a), the scale bf16(a * f32(1 / 6))), with the bucket parameters of
// the multiplier; false where the bucket tables do not serve the group.
struct AmaxPlan {
  std::uint16_t scale;
  std::uint32_t j, base;
};
bool amax_plan(const E2M1Buckets& b, std::uint32_t a, AmaxPlan& plan) {
  const float amax = formats::decode_bfloat16(static_cast<std::uint16_t>(a));
  const std::uint16_t mult = formats::encode_bfloat16(6.0f / amax);
  plan.scale = formats::encode_bfloat16(amax * f32_from_bits(kC6Bits));
  return a != 0 && a < 0x7F80 && e2m1_bucket_params(b, mult, plan.j, plan.base) &&
         a <= plan.base * 32u + 1023u;
}

// The amax entries of mantissa m from E = 127; false unless they serve every exponent of
// [kAmaxMinExp, 254].
bool build_amax_entries(E2M1Buckets& b, std::uint32_t m) {
  AmaxPlan p0;
  if (!amax_plan(b, 127u * 128u + m, p0)) return false;
  b.amax_table[m] = static_cast<std::uint16_t>(p0.j * 32);
  b.amax_scale[m] = static_cast<std::uint16_t>(p0.scale - 127u * 128u);
  b.amax_b64[m] = static_cast<std::uint16_t>(p0.base * 64u - 127u * 256u);
  for (std::uint32_t e = kAmaxMinExp; e <= 254; ++e) {
    AmaxPlan p;
    if (!amax_plan(b, e * 128u + m, p) || p.j * 32 != b.amax_table[m] ||
        p.scale != static_cast<std::uint16_t>(b.amax_scale[m] + 128u * e) ||
        static_cast<std::uint16_t>(p.base * 64u) !=
            static_cast<std::uint16_t>(b.amax_b64[m] + 256u * e)) {
      return false;
    }
  }
  return true;
}

}  // namespace

const E2M1Buckets& e2m1_buckets() noexcept {
  static const E2M1Buckets* tables = [] {
    static E2M1Buckets b{};
    for (std::uint32_t j = 0; j < 128; ++j) build_mantissa(b, j);
    b.amax_usable = true;
    for (std::uint32_t m = 0; m < 128; ++m) b.amax_usable &= build_amax_entries(b, m);
    return &b;
  }();
  return *tables;
}

}  // namespace kvscatter::detail
