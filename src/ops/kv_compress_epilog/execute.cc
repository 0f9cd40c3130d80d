// execute(plan) of kv_compress_epilog: re-checks the bound pointers and every slot, keeps the
// last writer of each duplicated slot, and splits the rows over the thread pool; kernel.cc
// quantizes and writes them.
#include <cstdint>
#include <vector>

#include "core/overlap.h"
#include "core/slots.h"
#include "core/streaming.h"
#include "ops/kv_compress_epilog/internal.h"
#include "ops/kv_compress_epilog/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {

void execute(const KvCompressEpilogPlan& plan) {
  using namespace detail;
  epilog::check_bound_data(plan);
  if (plan.rows == 0) return;
  // Overlapping inputs are read from a copy (docs/semantics.md).
  execute_staged(
      plan, [](auto& p) { return detail::epilog::operands(p); },
      [](const KvCompressEpilogPlan& p) {
        thread_local std::vector<std::int64_t> slots;
        epilog::check_data(p, slots);
        const std::int64_t grain = grain_for_bytes(2 * p.d + p.row_bytes);
        const std::int64_t* rows_slots = slots.data();
        const bool stream = use_streaming_stores(p.rows * p.row_bytes);
        const bool prefetch = use_streaming_stores(p.rows * (2 * p.d + p.row_bytes));
        // A call that runs as one pass skips the last-writer pass over its slots (1.01-1.04 x
        // at 1,024-16,384 rows).
        parallel_for_last_writers(slots, p.num_slots, grain,
                                  [&](std::int64_t begin, std::int64_t end) {
                                    quantize_rows(p, rows_slots, begin, end, stream, prefetch);
                                  });
      });
}

}  // namespace kvscatter
