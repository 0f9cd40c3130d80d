// Optimized IndexerQuantCache rows, built from the library's runtime-dispatched SIMD pieces:
// the batch float16/bfloat16 widening of src/formats and the float8_e4m3fn and HiFloat8 batch
// encoders of the quantizers (shared with kv_compress_epilog). The scale rules are the shared
// ones of internal.h, so the result is bit-identical to the reference on every input.
#include "ops/indexer_quant_cache/kernel.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kvscatter/formats.h"
#include "ops/kv_compress_epilog/kernel.h"  // the shared float8 / HiFloat8 batch encoders

namespace kvscatter::detail::indexer {
namespace {

struct Scratch {
  std::vector<float> x, y;
  std::vector<std::uint8_t> codes;
};

void scale_by(const float* x, float mul, float* y, std::int64_t n) {
  for (std::int64_t k = 0; k < n; ++k) y[k] = x[k] * mul;
}

// FP8 codes of y (|y| within the format unless the input was not finite).
void encode_fp8(DType cache, const float* y, std::uint8_t* out, std::int64_t n) {
  if (cache == DType::float8_e4m3fn) {
    simd_encode_e4m3_clamped(y, out, static_cast<std::size_t>(n), false);
    return;
  }
  for (std::int64_t k = 0; k < n; ++k) out[k] = formats::encode_float8_e5m2(y[k]);
}

void fp8_row(const IndexerQuantCachePlan& p, Scratch& s, std::uint8_t* codes, std::uint8_t* scale) {
  const float* x = s.x.data();
  float* y = s.y.data();
  const float amax = finite_amax(x, p.d);
  const float sc = amax == 0.0f ? 0.0f : amax * fp8_coefficient(p.cache.dtype);
  float stored = sc;
  if (p.options.round_scale) {
    const std::uint32_t e = exponent_rounded_up(sc);
    stored = f32(e << 23);
    scale_by(x, pow2_from(e), y, p.d);
  } else if (sc == 0.0f) {
    std::copy(x, x + p.d, y);
  } else {
    const float inv = 1.0f / sc;
    for (std::int64_t k = 0; k < p.d; ++k) {
      const float v = x[k] * inv;
      y[k] = std::isfinite(v) ? v : x[k];
    }
  }
  encode_fp8(p.cache.dtype, y, codes, p.d);
  std::memcpy(scale, &stored, 4);
}

void mxfp8_row(const IndexerQuantCachePlan& p, Scratch& s, std::uint8_t* codes,
               std::uint8_t* scale) {
  const float eps = f32(kEpsBits), c = fp8_coefficient(p.cache.dtype);
  for (std::int64_t g = 0; g < p.d / 32; ++g) {
    const std::uint32_t e = exponent_rounded_up(std::max(group_amax(&s.x[32 * g], 32), eps) * c);
    scale[g] = static_cast<std::uint8_t>(e);
    scale_by(&s.x[32 * g], pow2_from(e), &s.y[32 * g], 32);
  }
  encode_fp8(p.cache.dtype, s.y.data(), codes, p.d);
}

void mxfp4_row(const IndexerQuantCachePlan& p, Scratch& s, std::uint8_t* codes,
               std::uint8_t* scale) {
  const bool e2m1 = p.cache.dtype == DType::float4_e2m1;
  const std::uint32_t emax = e2m1 ? 2 : 0;
  std::uint8_t nib[32];
  for (std::int64_t g = 0; g < p.d / 32; ++g) {
    const float* xg = &s.x[32 * g];
    std::uint32_t m = 0;
    for (int k = 0; k < 32; ++k) m = std::max(m, (bits(xg[k]) >> 23) & 0xFFu);
    const std::uint32_t sg = m == 0 ? 0 : std::max(m, emax) - emax;
    scale[g] = static_cast<std::uint8_t>(sg);
    const float mul = pow2_from(sg);
    for (int k = 0; k < 32; ++k) {
      const float y = xg[k] * mul;
      nib[k] = m == 0 ? (std::signbit(xg[k]) ? 0x8 : 0x0)
               : e2m1 ? formats::encode_float4_e2m1(y)
                      : formats::encode_float4_e1m2(y);
    }
    for (int j = 0; j < 16; ++j) {
      codes[16 * g + j] = static_cast<std::uint8_t>(nib[2 * j] | nib[2 * j + 1] << 4);
    }
  }
}

void widen(const IndexerQuantCachePlan& p, std::int64_t r, float* out) {
  const auto* src = static_cast<const std::uint16_t*>(p.x.data) + x_row(p.x, r);
  if (p.x.dtype == DType::float16) {
    formats::float16_to_float32(src, out, static_cast<std::size_t>(p.d));
  } else {
    formats::bfloat16_to_float32(src, out, static_cast<std::size_t>(p.d));
  }
}

}  // namespace

void quantize_rows(const IndexerQuantCachePlan& p, const std::int64_t* slots, std::int64_t begin,
                   std::int64_t end) {
  Scratch s;
  s.x.resize(static_cast<std::size_t>(p.d));
  s.y.resize(static_cast<std::size_t>(p.d));
  const std::size_t scale_bytes =
      static_cast<std::size_t>(p.scale_count) * p.cache_scale.element_size();
  for (std::int64_t r = begin; r < end; ++r) {
    const std::int64_t slot = slots[r];
    if (slot < 0) continue;
    widen(p, r, s.x.data());
    std::uint8_t* codes = row_at(p.cache, slot, p.block_size);
    std::uint8_t scale[8192 / 32 * 4];
    switch (p.options.quant_mode) {
      case IndexerQuantMode::fp8:
        fp8_row(p, s, codes, scale);
        break;
      case IndexerQuantMode::mxfp8:
        mxfp8_row(p, s, codes, scale);
        break;
      case IndexerQuantMode::hifloat8:
        scale_by(s.x.data(), p.options.x_scale, s.y.data(), p.d);
        simd_encode_hifloat8_sat(s.y.data(), codes, static_cast<std::size_t>(p.d));
        break;
      case IndexerQuantMode::mxfp4:
        mxfp4_row(p, s, codes, scale);
        break;
    }
    if (scale_bytes != 0)
      std::memcpy(row_at(p.cache_scale, slot, p.block_size), scale, scale_bytes);
  }
}

}  // namespace kvscatter::detail::indexer
