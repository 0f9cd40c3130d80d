// The IndexerQuantCache oracle: the quantization rules of docs/operators/indexer_quant_cache.md
// one element at a time with the scalar encoders of kvscatter::formats, rows in token order (a
// repeated slot ends up holding the last token's row and scales).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kvscatter/formats.h"
#include "ops/indexer_quant_cache/internal.h"

namespace kvscatter::reference {
namespace {

namespace ix = detail::indexer;

// An FP8 code of a value whose magnitude the scale rule keeps at or below the format's largest
// finite value; the clamp only decides what non-finite inputs (outside the contract) become.
std::uint8_t fp8_code(DType cache, float y) {
  if (cache == DType::float8_e4m3fn) {
    return std::isnan(y) ? 0x7F : formats::encode_float8_e4m3fn(std::clamp(y, -448.0f, 448.0f));
  }
  return formats::encode_float8_e5m2(y);
}

void fp8_row(const IndexerQuantCachePlan& p, const float* x, unsigned char* codes,
             unsigned char* scale) {
  const DType dt = p.cache.dtype;
  const float amax = ix::finite_amax(x, p.d);
  const float s = amax == 0.0f ? 0.0f : amax * ix::fp8_coefficient(dt);
  float stored = s;
  if (p.options.round_scale) {
    const std::uint32_t e = ix::exponent_rounded_up(s);
    stored = ix::f32(e << 23);
    const float mul = ix::pow2_from(e);
    for (std::int64_t k = 0; k < p.d; ++k) codes[k] = fp8_code(dt, x[k] * mul);
  } else {
    const float inv = 1.0f / s;
    for (std::int64_t k = 0; k < p.d; ++k) {
      float y = s == 0.0f ? x[k] : x[k] * inv;
      if (!std::isfinite(y)) y = x[k];
      codes[k] = fp8_code(dt, y);
    }
  }
  std::memcpy(scale, &stored, 4);
}

void mxfp8_row(const IndexerQuantCachePlan& p, const float* x, unsigned char* codes,
               unsigned char* scale) {
  const float eps = ix::f32(ix::kEpsBits), c = ix::fp8_coefficient(p.cache.dtype);
  for (std::int64_t g = 0; g < p.d / 32; ++g) {
    const float s = std::max(ix::group_amax(x + 32 * g, 32), eps) * c;
    const std::uint32_t e = ix::exponent_rounded_up(s);
    scale[g] = static_cast<unsigned char>(e);
    const float mul = ix::pow2_from(e);
    for (std::int64_t k = 32 * g; k < 32 * g + 32; ++k)
      codes[k] = fp8_code(p.cache.dtype, x[k] * mul);
  }
}

void hifloat8_row(const IndexerQuantCachePlan& p, const float* x, unsigned char* codes) {
  for (std::int64_t k = 0; k < p.d; ++k) {
    codes[k] = formats::encode_hifloat8(x[k] * p.options.x_scale, true);
  }
}

void mxfp4_row(const IndexerQuantCachePlan& p, const float* x, unsigned char* codes,
               unsigned char* scale) {
  const bool e2m1 = p.cache.dtype == DType::float4_e2m1;
  const std::uint32_t emax = e2m1 ? 2 : 0;
  for (std::int64_t g = 0; g < p.d / 32; ++g) {
    const float* xg = x + 32 * g;
    std::uint32_t m = 0;
    for (int k = 0; k < 32; ++k) m = std::max(m, (ix::bits(xg[k]) >> 23) & 0xFFu);
    const std::uint32_t s = m == 0 ? 0 : std::max(m, emax) - emax;
    scale[g] = static_cast<unsigned char>(s);
    const float mul = ix::pow2_from(s);
    unsigned char* out = codes + 16 * g;
    for (int k = 0; k < 32; ++k) {
      std::uint8_t code;
      if (m == 0) {
        code = std::signbit(xg[k]) ? 0x8 : 0x0;
      } else {
        const float y = xg[k] * mul;
        code = e2m1 ? formats::encode_float4_e2m1(y) : formats::encode_float4_e1m2(y);
      }
      out[k / 2] = static_cast<unsigned char>(k % 2 == 0 ? (out[k / 2] & 0xF0) | code
                                                         : (out[k / 2] & 0x0F) | (code << 4));
    }
  }
}

}  // namespace

void execute(const IndexerQuantCachePlan& p) {
  ix::check_bound_data(p);
  const std::vector<std::int64_t> slots = ix::checked_slots(p);  // every slot before any write
  std::vector<float> x(static_cast<std::size_t>(p.d));
  std::vector<unsigned char> codes(static_cast<std::size_t>(p.code_bytes));
  std::vector<unsigned char> scale(
      static_cast<std::size_t>(std::max<std::int64_t>(p.d / 32, 1) * 4));
  for (std::int64_t r = 0; r < p.num_rows; ++r) {
    const std::int64_t slot = slots[static_cast<std::size_t>(r)];
    if (slot < 0) continue;
    const auto* src = static_cast<const std::uint16_t*>(p.x.data) + ix::x_row(p.x, r);
    for (std::int64_t k = 0; k < p.d; ++k) {
      std::uint16_t h;
      std::memcpy(&h, src + k, 2);
      x[static_cast<std::size_t>(k)] =
          p.x.dtype == DType::float16 ? formats::decode_float16(h) : formats::decode_bfloat16(h);
    }
    switch (p.options.quant_mode) {
      case IndexerQuantMode::fp8:
        fp8_row(p, x.data(), codes.data(), scale.data());
        break;
      case IndexerQuantMode::mxfp8:
        mxfp8_row(p, x.data(), codes.data(), scale.data());
        break;
      case IndexerQuantMode::hifloat8:
        hifloat8_row(p, x.data(), codes.data());
        break;
      case IndexerQuantMode::mxfp4:
        mxfp4_row(p, x.data(), codes.data(), scale.data());
        break;
    }
    std::memcpy(ix::row_at(p.cache, slot, p.block_size), codes.data(), codes.size());
    const std::int64_t scale_bytes =
        p.scale_count * static_cast<std::int64_t>(p.cache_scale.element_size());
    std::memcpy(ix::row_at(p.cache_scale, slot, p.block_size), scale.data(),
                static_cast<std::size_t>(scale_bytes));
  }
}

}  // namespace kvscatter::reference
