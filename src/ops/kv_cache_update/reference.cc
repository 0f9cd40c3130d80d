// reference::execute(plan) of kv_cache_update, the oracle: element by element, rounding float32
// input with the scalar encoders of kvscatter::formats.
#include <cstring>

#include "kvscatter/formats.h"
#include "ops/kv_cache_update/internal.h"

namespace kvscatter::reference {
namespace {

using detail::update::row_at;

void write_pair(const TensorView& cache, const TensorView& input, std::int64_t position) {
  // Rows of zero elements write nothing, and their views may have no data to address.
  if (input.numel() == 0) return;
  for (std::int64_t b = 0; b < input.dim(0); ++b) {
    for (std::int64_t l = 0; l < input.dim(1); ++l) {
      for (std::int64_t h = 0; h < input.dim(2); ++h) {
        char* dst = row_at(cache, b, position + l, h);
        const char* src = row_at(input, b, l, h);
        for (std::int64_t d = 0; d < input.dim(3); ++d) {
          if (input.dtype == cache.dtype) {
            const std::size_t es = dtype_size(cache.dtype);
            std::memcpy(dst + static_cast<std::size_t>(d) * es,
                        src + static_cast<std::size_t>(d) * es, es);
            continue;
          }
          float x;
          std::memcpy(&x, src + d * 4, 4);
          const auto code = static_cast<std::uint16_t>(formats::encode(cache.dtype, x));
          std::memcpy(dst + d * 2, &code, 2);
        }
      }
    }
  }
}

}  // namespace

void execute(const KvCacheUpdatePlan& plan) {
  detail::update::check_bound_data(plan);
  write_pair(plan.key_cache, plan.new_keys, plan.position);
  write_pair(plan.value_cache, plan.new_values, plan.position);
}

}  // namespace kvscatter::reference
