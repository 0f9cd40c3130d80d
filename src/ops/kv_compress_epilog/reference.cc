// reference::execute(plan) of kv_compress_epilog, the oracle: written from the row layout of
// docs/operators/kv_compress_epilog.md with the scalar encoders of kvscatter::formats. Rows are
// processed one at a time in token order, so a repeated slot ends up holding the last token's
// row. Slow on purpose.
//
// Non-finite inputs (see docs/semantics.md, "kv_compress_epilog"): a group whose amax is NaN
// stores a NaN scale (bf16 0x7FC0, e8m0 0xFF) and all-NaN codes (e4m3 0x7F) or zero codes (e2m1,
// which has no NaN); any other quotient or product that is NaN (an infinity divided by an
// infinite scale, or times a zero multiplier) encodes as e4m3 0x7F or e2m1 0x0.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvscatter/formats.h"
#include "ops/kv_compress_epilog/internal.h"

namespace kvscatter::reference {
namespace {

using detail::bits_of;
using detail::f32_from_bits;
namespace fmt = formats;

// max |v| over a group; a NaN anywhere makes it NaN.
float group_amax(const std::uint16_t* x, std::int64_t count) {
  float amax = 0.0f;
  for (std::int64_t k = 0; k < count; ++k) {
    const float a = std::fabs(fmt::decode_bfloat16(x[k]));
    if (std::isnan(a) || a > amax) amax = a;
    if (std::isnan(amax)) break;
  }
  return amax;
}

void put_bf16(std::uint8_t* out, std::uint16_t code) {
  out[0] = static_cast<std::uint8_t>(code & 0xFF);  // little-endian
  out[1] = static_cast<std::uint8_t>(code >> 8);
}

// Modes 0 and 1: rope bf16 first, then fp8 data, then one scale per group.
void fp8_row(const KvCompressEpilogPlan& p, const std::uint16_t* x, std::uint8_t* out) {
  const float C448 = f32_from_bits(detail::kC448Bits);
  const float EPS = f32_from_bits(detail::kEpsBits);
  const std::int64_t n = p.d - 64;
  const bool mode0 = p.quant_mode == QuantMode::fp8_bf16;
  for (std::int64_t j = 0; j < 64; ++j) put_bf16(out + 2 * j, x[n + j]);
  for (std::int64_t g = 0; g < p.num_groups; ++g) {
    const std::uint16_t* xg = x + 64 * g;
    std::uint8_t* data = out + 128 + 64 * g;
    std::uint8_t* scale = mode0 ? out + 128 + n + 2 * g : out + 128 + n + g;
    const float amax = group_amax(xg, 64);
    if (std::isnan(amax)) {
      std::fill(data, data + 64, std::uint8_t{0x7F});
      if (mode0) {
        put_bf16(scale, detail::kBf16CanonicalNaN);
      } else {
        scale[0] = 0xFF;
      }
      continue;
    }
    float s = std::max(amax, EPS) * C448;  // one f32 multiply, not amax / 448
    if (p.round_scale) {                   // ceil to a power of two by the exponent bits
      std::uint32_t u = bits_of(s);
      std::uint32_t e = u >> 23;
      if (u & 0x7FFFFFu) e += 1;
      s = f32_from_bits(e << 23);
    }
    for (std::int64_t k = 0; k < 64; ++k) {
      const float q = fmt::decode_bfloat16(xg[k]) / s;
      data[k] = std::isnan(q) ? std::uint8_t{0x7F}
                              : fmt::encode_float8_e4m3fn(std::min(std::max(q, -448.0f), 448.0f));
    }
    if (mode0) {
      put_bf16(scale, fmt::encode_bfloat16(s));
    } else {
      scale[0] = static_cast<std::uint8_t>((bits_of(s) >> 23) & 0xFF);
    }
  }
}

// Mode 2: HiFloat8 rope, packed e2m1 nope, bf16 scale per group.
void hif8_fp4_row(const KvCompressEpilogPlan& p, const std::uint16_t* x, std::uint8_t* out) {
  const float c6 = f32_from_bits(detail::kC6Bits);
  const std::int64_t n = p.d - 64;
  const std::int64_t gs = p.group_size;
  const float xs = p.x_scale;
  for (std::int64_t j = 0; j < 64; ++j) {
    out[j] = fmt::encode_hifloat8(fmt::decode_bfloat16(x[n + j]) * xs, /*saturate=*/true);
  }
  std::vector<std::uint8_t> code(static_cast<std::size_t>(n));
  for (std::int64_t g = 0; g < p.num_groups; ++g) {
    const std::uint16_t* xg = x + gs * g;
    std::uint8_t* scale = out + 64 + n / 2 + 2 * g;
    const float amax = group_amax(xg, gs);
    if (std::isnan(amax)) {
      for (std::int64_t i = 0; i < gs; ++i) code[static_cast<std::size_t>(gs * g + i)] = 0;
      put_bf16(scale, detail::kBf16CanonicalNaN);
      continue;
    }
    const float sc = amax * c6;
    const float inv = amax != 0.0f ? 6.0f / amax : 0.0f;
    const float inv_b = fmt::decode_bfloat16(fmt::encode_bfloat16(inv));
    put_bf16(scale, fmt::encode_bfloat16(sc));
    for (std::int64_t i = 0; i < gs; ++i) {
      const float xq =
          fmt::decode_bfloat16(fmt::encode_bfloat16(fmt::decode_bfloat16(xg[i]) * inv_b));
      code[static_cast<std::size_t>(gs * g + i)] =
          std::isnan(xq) ? std::uint8_t{0}
                         : fmt::encode_float4_e2m1(std::min(std::max(xq, -6.0f), 6.0f));
    }
  }
  for (std::int64_t k = 0; k < n / 2; ++k) {  // element 2k in the low nibble
    out[64 + k] = static_cast<std::uint8_t>((code[static_cast<std::size_t>(2 * k)] & 0xF) |
                                            (code[static_cast<std::size_t>(2 * k + 1)] & 0xF) << 4);
  }
}

}  // namespace

void execute(const KvCompressEpilogPlan& p) {
  detail::epilog::check_bound_data(p);
  if (p.rows == 0) return;
  std::vector<std::int64_t> slots;
  detail::epilog::check_data(p, slots);  // before any write
  const auto* x = static_cast<const std::uint16_t*>(p.x.data);
  auto* cache = static_cast<std::uint8_t*>(p.cache.data);
  std::vector<std::uint8_t> row(static_cast<std::size_t>(p.row_bytes));
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const std::int64_t slot = slots[static_cast<std::size_t>(r)];
    if (slot == -1) continue;
    std::fill(row.begin(), row.end(), std::uint8_t{0});  // the pad [payload, row_bytes) is zero
    const std::uint16_t* xr = x + detail::x_row_offset(p.x, r);
    if (p.quant_mode == QuantMode::hifloat8_fp4) {
      hif8_fp4_row(p, xr, row.data());
    } else {
      fp8_row(p, xr, row.data());
    }
    const std::int64_t offset =
        (slot / p.block_size) * p.cache.stride(0) + (slot % p.block_size) * p.cache.stride(1);
    std::memcpy(cache + offset, row.data(), row.size());
  }
}

}  // namespace kvscatter::reference
