// IndexerQuantCache driver: every slot checked before the first write, earlier writers of a
// repeated slot dropped (the last token wins, for the codes and the scales alike), then rows
// split across threads; no two chunks write the same row, so results never depend on the
// thread count.
#include <vector>

#include "core/index.h"
#include "core/slots.h"
#include "ops/indexer_quant_cache/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {

void execute(const IndexerQuantCachePlan& p) {
  detail::indexer::check_bound_data(p);
  std::vector<std::int64_t> slots = detail::indexer::checked_slots(p);
  if (p.num_rows == 0) return;
  const std::int64_t grain = detail::grain_for_bytes(8 * p.d, 64 * 1024);
  if (p.num_rows > grain) detail::keep_last_writers(slots, p.num_slots);
  detail::parallel_for(p.num_rows, grain, [&](std::int64_t begin, std::int64_t end) {
    detail::indexer::quantize_rows(p, slots.data(), begin, end);
  });
}

}  // namespace kvscatter
