// The scalar oracle of PagedLatentWrite: the semantics as plain loops.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/unaligned.h"
#include "kvscatter/formats.h"
#include "ops/paged_latent_write/internal.h"

namespace kvscatter::reference {
namespace {

using detail::paged_latent_write::CheckedData;

using detail::load_float;

const unsigned char* row_of(const TensorView& t, std::int64_t token) {
  return static_cast<const unsigned char*>(t.data) +
         token * t.stride(0) * static_cast<std::int64_t>(t.element_size());
}

// One tile of the fp8_ds_mla entry: the scale from the largest magnitude (NaNs ignored, at least
// the smallest normal float), then the codes.
float write_tile(const unsigned char* src, DType dtype, unsigned char* codes) {
  float amax = 0.0f;
  const std::int64_t es = dtype == DType::float32 ? 4 : 2;
  for (std::int64_t k = 0; k < detail::paged_latent_write::kDsTile; ++k) {
    const float x = load_float(src + k * es, dtype);
    if (!std::isnan(x) && std::fabs(x) > amax) amax = std::fabs(x);
  }
  const float q = amax / 448.0f;
  const float scale = q > FLT_MIN ? q : FLT_MIN;
  for (std::int64_t k = 0; k < detail::paged_latent_write::kDsTile; ++k) {
    codes[k] = formats::encode_float8_e4m3fn_satfinite(load_float(src + k * es, dtype) / scale);
  }
  return scale;
}

void write_ds_mla(const PagedLatentWritePlan& p, std::int64_t t, unsigned char* row) {
  using namespace detail::paged_latent_write;
  const DType dt = p.kv_c.dtype;
  const auto es = static_cast<std::int64_t>(p.kv_c.element_size());
  for (std::int64_t i = 0; i < kDsLatent / kDsTile; ++i) {
    const float scale = write_tile(row_of(p.kv_c, t) + i * kDsTile * es, dt, row + i * kDsTile);
    std::memcpy(row + kDsScaleOffset + 4 * i, &scale, 4);
  }
  std::memcpy(row + kDsPeOffset, row_of(p.k_pe, t), static_cast<std::size_t>(kDsPe * 2));
}

void write_row(const PagedLatentWritePlan& p, const CheckedData& d, std::int64_t t,
               unsigned char* row) {
  if (p.format == LatentCacheFormat::fp8_ds_mla) {
    write_ds_mla(p, t, row);
    return;
  }
  const DType dt = p.kv_c.dtype;
  const auto es = static_cast<std::int64_t>(p.kv_c.element_size());
  const auto ces = static_cast<std::int64_t>(p.kv_cache.element_size());
  for (std::int64_t j = 0; j < p.latent_dim + p.pe_dim; ++j) {
    const unsigned char* src =
        j < p.latent_dim ? row_of(p.kv_c, t) + j * es : row_of(p.k_pe, t) + (j - p.latent_dim) * es;
    if (p.format == LatentCacheFormat::copy) {
      std::memcpy(row + j * ces, src, static_cast<std::size_t>(es));
      continue;
    }
    const float q = load_float(src, dt) / d.scale;
    row[j] = p.format == LatentCacheFormat::fp8_e4m3 ? formats::encode_float8_e4m3fn_satfinite(q)
                                                     : formats::encode_float8_e5m2_satfinite(q);
  }
}

}  // namespace

void execute(const PagedLatentWritePlan& plan) {
  using namespace detail::paged_latent_write;
  check_bound_data(plan);
  CheckedData data;
  check_data(plan, data);
  const auto ces = static_cast<std::int64_t>(plan.kv_cache.element_size());
  for (std::int64_t t = 0; t < plan.num_tokens; ++t) {
    const std::int64_t s = data.slots[static_cast<std::size_t>(t)];
    if (s < 0) continue;
    auto* row = static_cast<unsigned char*>(plan.kv_cache.data) +
                ((s / plan.block_size) * plan.kv_cache.stride(0) +
                 (s % plan.block_size) * plan.kv_cache.stride(1)) *
                    ces;
    write_row(plan, data, t, row);
  }
}

}  // namespace kvscatter::reference
