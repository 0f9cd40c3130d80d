#include "core/slots.h"

#include <algorithm>
#include <array>
#include <bit>
#include <numeric>

#include "core/check.h"

namespace kvscatter::detail {

std::int64_t flat_offset(const TensorView& t, std::int64_t i) noexcept {
  std::int64_t off = 0;
  for (int a = t.rank - 1; a >= 0; --a) {
    const std::int64_t n = t.dim(a);
    off += (i % n) * t.stride(a);
    i /= n;
  }
  return off;
}

std::vector<std::int64_t> read_slots(const TensorView& slot_mapping) {
  const std::int64_t n = slot_mapping.numel();
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  if (n == 0) return out;
  if (slot_mapping.is_contiguous()) {
    if (slot_mapping.dtype == DType::int32) {
      const auto* p = static_cast<const std::int32_t*>(slot_mapping.data);
      std::copy(p, p + n, out.begin());
    } else {
      const auto* p = static_cast<const std::int64_t*>(slot_mapping.data);
      std::copy(p, p + n, out.begin());
    }
    return out;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t off = flat_offset(slot_mapping, i);
    out[static_cast<std::size_t>(i)] =
        slot_mapping.dtype == DType::int32
            ? static_cast<const std::int32_t*>(slot_mapping.data)[off]
            : static_cast<const std::int64_t*>(slot_mapping.data)[off];
  }
  return out;
}

std::string index_str(const TensorView& t, std::int64_t i) {
  if (t.rank <= 1) return cat("[", i, "]");
  std::array<std::int64_t, kMaxRank> idx{};
  for (int a = t.rank - 1; a >= 0; --a) {
    idx[static_cast<std::size_t>(a)] = i % t.dim(a);
    i /= t.dim(a);
  }
  std::string s = "[";
  for (int a = 0; a < t.rank; ++a) {
    if (a) s += ", ";
    s += std::to_string(idx[static_cast<std::size_t>(a)]);
  }
  return s + "]";
}

void keep_last_writers(std::vector<std::int64_t>& slots, std::int64_t num_slots) {
  const std::size_t n = slots.size();
  if (n < 2) return;
  // Scanning from the last token backwards, the first sighting of a slot is its last writer
  // and later sightings are dropped. A bitmap over the slots is cheapest when the cache is not
  // much larger than the batch; otherwise an open-addressing table at most half full.
  if (num_slots > 0 && static_cast<std::uint64_t>(num_slots) <= 64u * n) {
    std::vector<std::uint64_t> seen((static_cast<std::size_t>(num_slots) + 63) / 64, 0);
    for (std::size_t t = n; t-- > 0;) {
      const std::int64_t s = slots[t];
      if (s < 0) continue;
      const std::uint64_t bit = 1ull << (s & 63);
      std::uint64_t& word = seen[static_cast<std::size_t>(s >> 6)];
      if (word & bit) {
        slots[t] = -1;
      } else {
        word |= bit;
      }
    }
    return;
  }
  const std::size_t cap = std::bit_ceil(2 * n);
  const std::size_t mask = cap - 1;
  std::vector<std::int64_t> table(cap, -1);
  for (std::size_t t = n; t-- > 0;) {
    const std::int64_t s = slots[t];
    if (s < 0) continue;
    std::size_t h =
        static_cast<std::size_t>((static_cast<std::uint64_t>(s) * 0x9E3779B97F4A7C15ull) >> 32) &
        mask;
    while (true) {
      if (table[h] == -1) {
        table[h] = s;
        break;
      }
      if (table[h] == s) {
        slots[t] = -1;
        break;
      }
      h = (h + 1) & mask;
    }
  }
}

}  // namespace kvscatter::detail
