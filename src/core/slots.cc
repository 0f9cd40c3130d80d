#include "core/slots.h"

#include <algorithm>
#include <bit>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/index.h"

namespace kvscatter::detail {

bool keep_last_writers(std::span<std::int64_t> slots, std::int64_t num_slots) {
  const std::size_t n = slots.size();
  if (n < 2) return false;
  // Strictly increasing slots (a prefill into fresh blocks) cannot repeat.
  std::int64_t prev = -1;
  bool increasing = true;
  for (std::int64_t s : slots) {
    if (s < 0) continue;
    if (s <= prev) {
      increasing = false;
      break;
    }
    prev = s;
  }
  if (increasing) return false;
  // A prefill into shuffled blocks: runs of consecutive slots whose ranges are pairwise disjoint
  // cannot repeat either. The runs are few there (one a block), so sorting them is cheap, where
  // the bitmap below is a chain of dependent read-modify-writes, one a token.
  thread_local std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  runs.clear();
  const std::size_t max_runs = n / 16 + 1;
  std::int64_t start = -1, next = -1;
  for (std::int64_t s : slots) {
    if (s < 0) continue;
    if (s == next) {
      ++next;
      continue;
    }
    if (start >= 0) runs.emplace_back(start, next);
    if (runs.size() > max_runs) break;
    start = s;
    next = s + 1;
  }
  if (runs.size() <= max_runs) {
    if (start >= 0) runs.emplace_back(start, next);
    std::sort(runs.begin(), runs.end());
    bool disjoint = true;
    for (std::size_t i = 1; i < runs.size() && disjoint; ++i) {
      disjoint = runs[i].first >= runs[i - 1].second;
    }
    if (disjoint) return false;
  }
  // Scanning from the last token backwards, the first sighting of a slot is its last writer
  // and later sightings are dropped. A bitmap over the slots is cheapest when the cache is not
  // much larger than the batch; otherwise an open-addressing table at most half full.
  thread_local std::vector<std::uint64_t> seen;
  thread_local std::vector<std::int64_t> table;
  bool dropped = false;
  if (num_slots > 0 && static_cast<std::uint64_t>(num_slots) <= 64u * n) {
    seen.assign((static_cast<std::size_t>(num_slots) + 63) / 64, 0);
    for (std::size_t t = n; t-- > 0;) {
      const std::int64_t s = slots[t];
      if (s < 0) continue;
      const std::uint64_t bit = 1ull << (s & 63);
      std::uint64_t& word = seen[static_cast<std::size_t>(s >> 6)];
      if (word & bit) {
        slots[t] = -1;
        dropped = true;
      } else {
        word |= bit;
      }
    }
    return dropped;
  }
  const std::size_t cap = std::bit_ceil(2 * n);
  const std::size_t mask = cap - 1;
  table.assign(cap, -1);
  for (std::size_t t = n; t-- > 0;) {
    const std::int64_t s = slots[t];
    if (s < 0) continue;
    std::size_t h =
        static_cast<std::size_t>((static_cast<std::uint64_t>(s) * 0x9E3779B97F4A7C15ull) >> 32) &
        mask;
    while (table[h] != -1 && table[h] != s) h = (h + 1) & mask;
    if (table[h] == s) {
      slots[t] = -1;
      dropped = true;
    } else {
      table[h] = s;
    }
  }
  return dropped;
}

void read_padded_slots(const TensorView& slot_mapping, std::int64_t num_slots,
                       std::int64_t block_size, std::string_view cache,
                       std::vector<std::int64_t>& slots) {
  read_indices(slot_mapping, slots);
  for (std::size_t t = 0; t < slots.size(); ++t) {
    if (slots[t] < num_slots) continue;
    if (block_size == 0) {  // blocks of zero slots: no slot exists
      invalid("slot_mapping[", t, "] = ", slots[t], " is out of range [0, 0) (", cache,
              " has blocks of 0 slots; negative slots mark padding)");
    }
    invalid("slot_mapping[", t, "] = ", slots[t], " is out of range [0, ", num_slots, ") (", cache,
            " has ", num_slots / block_size, " blocks of ", block_size,
            " slots; negative slots mark padding)");
  }
}

}  // namespace kvscatter::detail
