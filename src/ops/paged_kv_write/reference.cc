// The scalar oracle of PagedKvWrite: the semantics as plain loops, one element
// at a time.
#include <cstring>

#include "core/unaligned.h"
#include "kvscatter/formats.h"
#include "ops/paged_kv_write/internal.h"

namespace kvscatter::reference {
namespace {

using detail::load_float;

void write_row(const PagedKvWritePlan& p, const TensorView& x, const TensorView& cache,
               const std::vector<float>& scales, std::int64_t t, std::int64_t slot) {
  const auto es = static_cast<std::int64_t>(x.element_size());
  const auto ces = static_cast<std::int64_t>(cache.element_size());
  const std::int64_t blk = slot / p.block_size, off = slot % p.block_size;
  for (std::int64_t h = 0; h < p.num_heads; ++h) {
    for (std::int64_t d = 0; d < p.head_size; ++d) {
      const auto* src = static_cast<const unsigned char*>(x.data) +
                        (t * x.stride(0) + h * x.stride(1) + d * x.stride(2)) * es;
      auto* dst =
          static_cast<unsigned char*>(cache.data) + (blk * cache.stride(0) + off * cache.stride(1) +
                                                     h * cache.stride(2) + d * cache.stride(3)) *
                                                        ces;
      if (p.format == KvCacheFormat::copy) {
        std::memcpy(dst, src, static_cast<std::size_t>(es));
        continue;
      }
      const float q = load_float(src, x.dtype) / scales[static_cast<std::size_t>(h)];
      *dst = p.format == KvCacheFormat::fp8_e4m3 ? formats::encode_float8_e4m3fn_satfinite(q)
                                                 : formats::encode_float8_e5m2_satfinite(q);
    }
  }
}

}  // namespace

void execute(const PagedKvWritePlan& plan) {
  using namespace detail::paged_kv_write;
  check_bound_data(plan);
  CheckedData data;
  check_data(plan, data);
  for (std::int64_t t = 0; t < plan.num_tokens; ++t) {
    const std::int64_t s = data.slots[static_cast<std::size_t>(t)];
    if (s < 0) continue;
    write_row(plan, plan.key, plan.key_cache, data.k_scale, t, s);
    write_row(plan, plan.value, plan.value_cache, data.v_scale, t, s);
  }
}

}  // namespace kvscatter::reference
