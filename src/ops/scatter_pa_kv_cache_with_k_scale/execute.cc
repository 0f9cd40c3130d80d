// execute(plan) of scatter_pa_kv_cache_with_k_scale: re-checks the bound pointers, reads the
// slots, keeps the last writer of each duplicated slot, and splits the tokens over the thread
// pool; kernel.cc copies the bytes.
#include <cstdint>
#include <vector>

#include "core/overlap.h"
#include "core/slots.h"
#include "core/streaming.h"
#include "ops/scatter_pa_kv_cache_with_k_scale/internal.h"
#include "ops/scatter_pa_kv_cache_with_k_scale/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {

void execute(const ScatterPaKvCacheWithKScalePlan& plan) {
  using namespace detail;
  k_scale::check_bound_data(plan);
  // Overlapping outputs are rejected, overlapping inputs read from a copy (docs/semantics.md).
  execute_staged(
      plan, [](auto& p) { return detail::k_scale::operands(p); },
      [](const ScatterPaKvCacheWithKScalePlan& p) {
        thread_local std::vector<std::int64_t> slots;
        k_scale::check_data(p, slots);
        if (p.num_tokens == 0 || p.num_heads == 0 || p.num_slots == 0) return;
        const std::int64_t bytes_per_token =
            2 * p.num_heads * (p.key_head_size + p.value_head_size + 4);
        const std::int64_t grain = grain_for_bytes(bytes_per_token);
        k_scale::TokenJob job;
        job.plan = &p;
        job.slots = slots.data();
        job.split = SlotSplitter(p.block_size);
        const std::int64_t written =
            p.num_tokens * p.num_heads * (p.key_head_size + p.value_head_size);
        const k_scale::Strategy how = k_scale::choose_strategy(
            written, stream_threshold_bytes().load(std::memory_order_relaxed),
            cache_bytes().load(std::memory_order_relaxed));
        job.stream = how.stream;
        job.tile = how.tile;
        parallel_for_last_writers(
            slots, p.num_slots, grain,
            [&](std::int64_t begin, std::int64_t end) { k_scale::token_range(job, begin, end); });
      });
}

}  // namespace kvscatter
