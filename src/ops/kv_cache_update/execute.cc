// execute(plan) of kv_cache_update: re-checks the bound pointers, cuts each cache/input pair into
// the largest runs contiguous in both, and splits them over the thread pool; kernel.cc copies.
#include <cstdint>

#include "core/overlap.h"
#include "core/streaming.h"
#include "ops/kv_cache_update/internal.h"
#include "ops/kv_cache_update/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {
namespace detail::update {
namespace {

PairJob pair_job(const TensorView& cache, const TensorView& input, std::int64_t position) {
  const std::int64_t h = cache.dim(2), d = cache.dim(3), len = input.dim(1);
  const bool heads_dense = (h <= 1 || (cache.stride(2) == d && input.stride(2) == d));
  const bool seq_dense =
      heads_dense && (len <= 1 || (cache.stride(1) == h * d && input.stride(1) == h * d));
  PairJob job;
  job.cache = &cache;
  job.input = &input;
  job.position = position;
  if (seq_dense) {
    job.rows_l = 1, job.rows_h = 1, job.run = len * h * d;
  } else if (heads_dense) {
    job.rows_l = len, job.rows_h = 1, job.run = h * d;
  } else {
    job.rows_l = len, job.rows_h = h, job.run = d;
  }
  constexpr std::int64_t kPiece = 32 * 1024;
  job.pieces = (job.run + kPiece - 1) / kPiece;
  job.piece_len = (job.run + job.pieces - 1) / job.pieces;
  return job;
}

// stream: whether the call (both pairs) writes at least the streaming threshold.
void run_pair(const TensorView& cache, const TensorView& input, std::int64_t position,
              bool stream) {
  const std::int64_t batch = cache.dim(0), len = input.dim(1);
  if (batch == 0 || len == 0 || cache.dim(2) == 0 || cache.dim(3) == 0) return;
  PairJob job = pair_job(cache, input, position);
  job.stream = stream && cache.dtype == input.dtype;  // conversions keep ordinary stores
  const std::int64_t items = batch * job.rows_l * job.rows_h * job.pieces;
  const std::int64_t bytes =
      job.piece_len * static_cast<std::int64_t>(dtype_size(cache.dtype) + dtype_size(input.dtype));
  parallel_for(items, grain_for_bytes(bytes),
               [&](std::int64_t i0, std::int64_t i1) { update_range(job, i0, i1); });
}

}  // namespace
}  // namespace detail::update

void execute(const KvCacheUpdatePlan& plan) {
  detail::update::check_bound_data(plan);
  // Overlapping outputs are rejected, overlapping inputs read from a copy (docs/semantics.md).
  detail::execute_staged(
      plan, [](auto& p) { return detail::update::operands(p); },
      [](const KvCacheUpdatePlan& p) {
        const auto written = [](const TensorView& cache, const TensorView& input) {
          return cache.dim(0) * input.dim(1) * cache.dim(2) * cache.dim(3) *
                 static_cast<std::int64_t>(dtype_size(cache.dtype));
        };
        const bool stream = detail::use_streaming_stores(written(p.key_cache, p.new_keys) +
                                                         written(p.value_cache, p.new_values));
        detail::update::run_pair(p.key_cache, p.new_keys, p.position, stream);
        detail::update::run_pair(p.value_cache, p.new_values, p.position, stream);
      });
}

}  // namespace kvscatter
