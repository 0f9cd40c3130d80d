// GatherPaKvCache driver: data-dependent checks over the whole batch, then the
// segments (one block's share of a sequence each) split across threads.
// Segments write disjoint output rows, so the result never depends on the
// thread count.
#include <cstdint>

#include "ops/gather_pa_kv_cache/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {
namespace {

detail::gather::GatherSide make_side(const GatherPaKvCachePlan& p, const TensorView& cache,
                                     const TensorView& out) {
  const auto es = static_cast<std::int64_t>(cache.element_size());
  detail::gather::GatherSide s;
  s.cache = static_cast<const unsigned char*>(cache.data);
  s.block_stride = cache.stride(0) * es;
  s.out = static_cast<unsigned char*>(out.data);
  s.row_pitch = out.stride(0) * es;
  if (p.cache_mode == CacheMode::Norm) {
    s.row_bytes = cache.dim(2) * cache.dim(3) * es;
    s.slot_pitch = s.row_bytes;
  } else {
    s.row_bytes = cache.dim(1) * 32;
    s.slot_pitch = 32;
    s.chunk_pitch = p.block_size * 32;
  }
  if (out.dim(0) <= 1) s.row_pitch = s.row_bytes;  // a single row's stride is never used
  return s;
}

}  // namespace

void execute(const GatherPaKvCachePlan& p) {
  detail::gather::check_bound_data(p);
  detail::gather::CheckedData checked;
  detail::gather::check_data(p, checked);  // every rule before the first write
  detail::gather::GatherJob job;
  job.num_sides = 0;
  std::int64_t row_bytes = 0;
  auto add_side = [&](const TensorView& cache, const TensorView& out) {
    const detail::gather::GatherSide s = make_side(p, cache, out);
    if (s.row_bytes == 0) return;  // empty rows: nothing to move (the views may be null)
    job.side[job.num_sides++] = s;
    row_bytes += s.row_bytes;
  };
  add_side(p.key_cache, p.key);
  if (p.value) add_side(*p.value_cache, *p.value);
  if (checked.segments.empty() || job.num_sides == 0) return;
  job.segments = checked.segments.data();
  const auto n = static_cast<std::int64_t>(checked.segments.size());
  // Segments hold up to block_size rows; each is read once and written once.
  const std::int64_t grain = detail::grain_for_bytes(2 * row_bytes * p.block_size);
  detail::parallel_for(n, grain, [&](std::int64_t begin, std::int64_t end) {
    detail::gather::gather_segment_range(job, begin, end);
  });
}

}  // namespace kvscatter
