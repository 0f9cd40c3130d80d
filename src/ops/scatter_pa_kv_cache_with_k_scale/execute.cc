// execute(plan) of scatter_pa_kv_cache_with_k_scale: re-checks the bound pointers, reads the
// slots, keeps the last writer of each duplicated slot, and splits the tokens over the thread
// pool. The key, value and scale caches have the NHSD layout of scatter_pa_kv_cache ([blocks,
// heads, block_size, row]), so rows with unit element strides go through that operator's byte
// movers (a run of consecutive slots written head by head, in sequential lines); other strides
// take kernel.cc's element loop.
#include <cstdint>
#include <vector>

#include "core/slots.h"
#include "core/streaming.h"
#include "ops/scatter_pa_kv_cache/kernel.h"
#include "ops/scatter_pa_kv_cache_with_k_scale/internal.h"
#include "ops/scatter_pa_kv_cache_with_k_scale/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {
namespace {

// One side as an NHSD scatter job; es: bytes per element.
detail::scatter::SideJob nhsd_side(const TensorView& x, const TensorView& cache, std::int64_t row,
                                   std::int64_t es) {
  detail::scatter::SideJob j;
  j.src = static_cast<const unsigned char*>(x.data);
  j.src_token = x.stride(0) * es;
  j.src_head = x.stride(1) * es;
  j.dst = static_cast<unsigned char*>(cache.data);
  j.block_stride = cache.stride(0) * es;
  j.head_pitch = cache.stride(1) * es;
  j.slot_pitch = cache.stride(2) * es;
  j.head_bytes = row * es;
  j.num_heads = x.dim(1);
  return j;
}

// Whether every row is contiguous, and so a byte run for the scatter movers.
bool unit_rows(const ScatterPaKvCacheWithKScalePlan& p) {
  return p.key.stride(2) == 1 && p.value.stride(2) == 1 && p.key_cache.stride(3) == 1 &&
         p.value_cache.stride(3) == 1;
}

}  // namespace

void execute(const ScatterPaKvCacheWithKScalePlan& p) {
  using namespace detail;
  k_scale::check_bound_data(p);
  thread_local std::vector<std::int64_t> slots;
  k_scale::check_data(p, slots);
  if (p.num_tokens == 0 || p.num_heads == 0 || p.num_slots == 0) return;
  const std::int64_t token_bytes = p.num_heads * (p.key_head_size + p.value_head_size + 4);
  const std::int64_t grain = grain_for_bytes(2 * token_bytes);
  // Threads split tokens: dropping the earlier writers of a repeated slot makes the chunks write
  // disjoint rows, with the result of a sequential pass.
  if (p.num_tokens > grain) keep_last_writers(slots, p.num_slots);
  if (!unit_rows(p)) {
    k_scale::TokenJob job;
    job.plan = &p;
    job.slots = slots.data();
    job.split = SlotSplitter(p.block_size);
    parallel_for(p.num_tokens, grain, [&](std::int64_t begin, std::int64_t end) {
      k_scale::token_range(job, begin, end);
    });
    return;
  }
  scatter::RowJob rows, scales;
  rows.side[0] = nhsd_side(p.key, p.key_cache, p.key_head_size, 1);
  rows.side[1] = nhsd_side(p.value, p.value_cache, p.value_head_size, 1);
  rows.num_sides = 2;
  scales.side[0] = nhsd_side(p.key_scale, p.key_scale_cache, 1, 4);
  for (scatter::RowJob* j : {&rows, &scales}) {
    j->split = SlotSplitter(p.block_size);
    j->slots = slots.data();
    // Runs of consecutive slots are written head-major, which needs each head's rows of a block
    // back to back.
    j->group = true;
    for (int k = 0; k < j->num_sides; ++k) {
      j->group = j->group && j->side[k].slot_pitch == j->side[k].head_bytes;
    }
  }
  rows.stream = use_streaming_stores(p.num_tokens * token_bytes);
  parallel_for(p.num_tokens, grain, [&](std::int64_t begin, std::int64_t end) {
    scatter::scatter_token_range(rows, begin, end);
    scatter::scatter_token_range(scales, begin, end);
  });
}

}  // namespace kvscatter
