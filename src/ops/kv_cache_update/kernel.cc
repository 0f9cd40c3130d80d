// The kernel of kv_cache_update, compiled once per SIMD target (Highway dynamic dispatch): row
// copies (non-temporal in calls that write at least the streaming threshold), or float32 ->
// bfloat16/float16 conversions through the batch converters of kvscatter::formats. The driver
// (execute.cc) splits the items over threads.
#include <algorithm>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kv_cache_update/kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/bytes-inl.h"
#include "kvscatter/formats.h"
#include "ops/kv_cache_update/internal.h"
#include "ops/kv_cache_update/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::update::HWY_NAMESPACE {

// Converts n elements from `in` dtype to `out` dtype; same dtype is a byte copy.
HWY_INLINE void ConvertRow(void* dst, DType out, const void* src, DType in, std::int64_t n) {
  const auto count = static_cast<std::size_t>(n);
  if (in == out) {
    std::memcpy(dst, src, count * dtype_size(in));
  } else if (out == DType::bfloat16) {
    formats::float32_to_bfloat16(static_cast<const float*>(src), static_cast<std::uint16_t*>(dst),
                                 count);
  } else {
    formats::float32_to_float16(static_cast<const float*>(src), static_cast<std::uint16_t*>(dst),
                                count);
  }
}

void UpdateRange(const PairJob& job, std::int64_t begin, std::int64_t end) {
  const TensorView& cache = *job.cache;
  const TensorView& input = *job.input;
  const std::int64_t in_esize = static_cast<std::int64_t>(dtype_size(input.dtype));
  const std::int64_t out_esize = static_cast<std::int64_t>(dtype_size(cache.dtype));
  for (std::int64_t i = begin; i < end; ++i) {
    std::int64_t rest = i;
    const std::int64_t p = rest % job.pieces;
    rest /= job.pieces;
    const std::int64_t h = rest % job.rows_h;
    rest /= job.rows_h;
    const std::int64_t l = rest % job.rows_l;
    const std::int64_t b = rest / job.rows_l;
    const std::int64_t first = p * job.piece_len;
    const std::int64_t n = std::min(job.piece_len, job.run - first);
    char* dst = row_at(cache, b, job.position + l, h) + first * out_esize;
    const char* src = row_at(input, b, l, h) + first * in_esize;
    if (job.stream) {
      detail::HWY_NAMESPACE::StreamBytes(reinterpret_cast<unsigned char*>(dst),
                                         reinterpret_cast<const unsigned char*>(src),
                                         static_cast<std::size_t>(n * in_esize));
    } else {
      ConvertRow(dst, cache.dtype, src, input.dtype, n);
    }
  }
  // Streaming stores are weakly ordered: drain them before the pool reports the chunk done.
  if (job.stream) hwy::FlushStream();
}

}  // namespace kvscatter::detail::update::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail::update {

HWY_EXPORT(UpdateRange);

void update_range(const PairJob& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(UpdateRange)(job, begin, end);
}

}  // namespace kvscatter::detail::update
#endif  // HWY_ONCE
