// The scalar oracle of PagedCacheGather: the semantics as plain loops, element by element.
#include <bit>
#include <cmath>
#include <cstring>

#include "kvscatter/formats.h"
#include "ops/paged_cache_gather/internal.h"

namespace kvscatter::reference {
namespace {

// float(code) * scale in float32, written as dst's type; NaN as that type's canonical NaN.
void dequant(KvCacheFormat f, std::uint8_t code, float scale, DType dtype, unsigned char* dst) {
  const float v = f == KvCacheFormat::fp8_e4m3 ? formats::decode_float8_e4m3fn(code)
                                               : formats::decode_float8_e5m2(code);
  const float p = v * scale;
  if (dtype == DType::float32) {
    const std::uint32_t bits = std::isnan(p) ? 0x7FFFFFFFu : std::bit_cast<std::uint32_t>(p);
    std::memcpy(dst, &bits, 4);
    return;
  }
  std::uint16_t h =
      dtype == DType::float16 ? formats::encode_float16(p) : formats::encode_bfloat16(p);
  if (std::isnan(p)) h = 0x7FFF;
  std::memcpy(dst, &h, 2);
}

}  // namespace

void execute(const PagedCacheGatherPlan& plan) {
  using namespace detail::paged_cache_gather;
  check_bound_data(plan);
  CheckedData data;
  check_data(plan, data);
  const auto ses = static_cast<std::int64_t>(plan.src_cache.element_size());
  const auto des = static_cast<std::int64_t>(plan.dst.element_size());
  for (const Row& r : data.rows) {
    const auto* src = static_cast<const unsigned char*>(plan.src_cache.data) + r.src_offset * ses;
    auto* dst = static_cast<unsigned char*>(plan.dst.data) + r.dst_row * plan.dst.stride(0) * des;
    for (std::int64_t j = 0; j < plan.entry; ++j) {
      if (plan.format == KvCacheFormat::copy) {
        std::memcpy(dst + j * des, src + j * ses, static_cast<std::size_t>(des));
      } else {
        dequant(plan.format, src[j], data.scale, plan.dst.dtype, dst + j * des);
      }
    }
  }
}

}  // namespace kvscatter::reference
