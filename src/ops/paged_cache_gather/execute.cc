// The optimized PagedCacheGather driver: every data rule checked over all gathered rows, then
// the rows (each dst row written at most once) split over the thread pool.
#include "core/overlap.h"
#include "core/streaming.h"
#include "ops/paged_cache_gather/internal.h"
#include "ops/paged_cache_gather/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {

namespace {

void run(const PagedCacheGatherPlan& plan) {
  using namespace detail;
  using namespace detail::paged_cache_gather;
  CheckedData data;
  check_data(plan, data);
  if (data.rows.empty()) return;
  Job job;
  job.src = static_cast<const unsigned char*>(plan.src_cache.data);
  job.dst = static_cast<unsigned char*>(plan.dst.data);
  job.src_es = static_cast<std::int64_t>(plan.src_cache.element_size());
  const auto des = static_cast<std::int64_t>(plan.dst.element_size());
  job.dst_row_bytes = plan.dst.stride(0) * des;
  job.entry = plan.entry;
  job.dst_dtype = plan.dst.dtype;
  job.format = plan.format;
  job.scale = data.scale;
  job.rows = data.rows.data();
  const std::int64_t row_bytes = plan.entry * (job.src_es + des);
  job.stream = plan.format == KvCacheFormat::copy &&
               use_streaming_stores(static_cast<std::int64_t>(data.rows.size()) * plan.entry * des);
  parallel_for(static_cast<std::int64_t>(data.rows.size()), grain_for_bytes(row_bytes),
               [&](std::int64_t b, std::int64_t e) { gather_rows(job, b, e); });
}

}  // namespace

void execute(const PagedCacheGatherPlan& plan) {
  detail::paged_cache_gather::check_bound_data(plan);
  // Inputs that overlap an output are read from a copy (see docs/semantics.md, "Inputs that
  // overlap outputs").
  detail::execute_staged(
      plan, [](auto& p) { return detail::paged_cache_gather::operands(p); }, run);
}

}  // namespace kvscatter
