// The optimized PagedKvWrite driver: data checks over every token, duplicate
// slots resolved to their last writer, then the tokens split over the thread
// pool (the bytes are moved by kernel.cc).
#include <algorithm>
#include <cstring>

#include "core/overlap.h"
#include "core/slots.h"
#include "core/streaming.h"
#include "ops/paged_kv_write/internal.h"
#include "ops/paged_kv_write/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {
namespace detail::paged_kv_write {
namespace {

Side make_side(const PagedKvWritePlan& p, const TensorView& x, const TensorView& cache,
               const std::vector<float>& scales) {
  const auto es = static_cast<std::int64_t>(x.element_size());
  const auto ces = static_cast<std::int64_t>(cache.element_size());
  Side s;
  s.src = static_cast<const unsigned char*>(x.data);
  s.src_token = x.stride(0) * es;
  s.src_head = x.stride(1) * es;
  s.dst = static_cast<unsigned char*>(cache.data);
  s.block_stride = cache.stride(0) * ces;
  s.slot_stride = cache.stride(1) * ces;
  s.head_stride = cache.stride(2) * ces;
  s.scales = scales.empty() ? nullptr : scales.data();
  s.merged = p.num_heads == 1 || (x.stride(1) == p.head_size && cache.stride(2) == p.head_size);
  return s;
}

}  // namespace
}  // namespace detail::paged_kv_write

namespace {

void run(const PagedKvWritePlan& plan) {
  using namespace detail;
  using namespace detail::paged_kv_write;
  CheckedData data;
  check_data(plan, data);
  if (plan.num_tokens == 0) return;

  Job job;
  job.side[0] = make_side(plan, plan.key, plan.key_cache, data.k_scale);
  job.side[1] = make_side(plan, plan.value, plan.value_cache, data.v_scale);
  job.num_heads = plan.num_heads;
  job.head_size = plan.head_size;
  job.split = SlotSplitter(plan.block_size);
  job.dtype = plan.key.dtype;
  job.format = plan.format;
  // Per-head scales that are all the same value quantize like one per-tensor scale.
  const auto same = [](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(),
                       [&](const float& x) { return std::memcmp(&x, v.data(), 4) == 0; });
  };
  job.uniform_scale = !plan.per_head_scale || (same(data.k_scale) && same(data.v_scale));
  const auto cache_es = static_cast<std::int64_t>(plan.key_cache.element_size());
  const std::int64_t token_bytes = 2 * plan.num_heads * plan.head_size * cache_es;
  job.stream =
      plan.format == KvCacheFormat::copy && use_streaming_stores(plan.num_tokens * token_bytes);
  const std::int64_t grain = grain_for_bytes(token_bytes);
  job.slots = data.slots.data();
  parallel_for_last_writers(data.slots, plan.num_slots, grain,
                            [&](std::int64_t b, std::int64_t e) { write_token_range(job, b, e); });
}

}  // namespace

void execute(const PagedKvWritePlan& plan) {
  detail::paged_kv_write::check_bound_data(plan);
  // Inputs that overlap an output are read from a copy (see docs/semantics.md, "Inputs that
  // overlap outputs").
  detail::execute_staged(
      plan, [](auto& p) { return detail::paged_kv_write::operands(p); }, run);
}

}  // namespace kvscatter
