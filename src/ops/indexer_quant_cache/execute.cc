// IndexerQuantCache driver: every slot checked before the first write, then the rows quantized
// in token order on one thread, or split across threads after the earlier writers of a
// repeated slot are dropped (the last token wins, for the codes and the scales alike); no two
// chunks write the same row, so results never depend on the thread count.
#include <vector>

#include "core/index.h"
#include "core/slots.h"
#include "ops/indexer_quant_cache/internal.h"
#include "ops/indexer_quant_cache/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {

namespace {

void run(const IndexerQuantCachePlan& p) {
  // A row costs about as much as copying 4 d bytes (its 2 d bytes read, its codes written, a
  // few cycles of compute per element): chunks of about 256 KiB of that. A quantized row takes
  // about 10 ns on one core, so handing work to other threads, which costs microseconds, pays
  // only from a few chunks on.
  const std::int64_t grain = detail::grain_for_bytes(4 * p.d);
  // One pass in token order leaves every repeated slot with its last writer by itself: no
  // dedup pass, and the slots are read where they lie when they are contiguous int64.
  const bool one_pass = !detail::parallel_may_split(p.num_rows, 4 * grain);
  std::vector<std::int64_t> storage;
  const std::int64_t* slots = detail::indexer::checked_slots(p, storage, !one_pass);
  if (p.num_rows == 0) return;
  if (one_pass) {
    detail::indexer::quantize_rows(p, slots, 0, p.num_rows);
    return;
  }
  detail::keep_last_writers(storage, p.num_slots);
  detail::parallel_for(p.num_rows, grain, [&](std::int64_t begin, std::int64_t end) {
    detail::indexer::quantize_rows(p, slots, begin, end);
  });
}

}  // namespace

void execute(const IndexerQuantCachePlan& plan) {
  detail::indexer::check_bound_data(plan);
  // Overlapping outputs are rejected, overlapping inputs read from a copy (docs/semantics.md).
  detail::execute_staged(
      plan, [](auto& p) { return detail::indexer::operands(p); }, run);
}

}  // namespace kvscatter
