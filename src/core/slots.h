// Slot addressing and duplicate slots, shared by every paged-cache kernel.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kvscatter/tensor.h"
#include "runtime/parallel.h"

namespace kvscatter::detail {

// slot -> (block, offset) for a fixed block size; a shift and a mask when the block size is a
// power of two (the usual case), which spares a 64-bit division per token.
class SlotSplitter {
 public:
  SlotSplitter() = default;
  explicit SlotSplitter(std::int64_t block_size) noexcept
      : block_size_(block_size),
        shift_(block_size > 0 && (block_size & (block_size - 1)) == 0
                   ? __builtin_ctzll(static_cast<unsigned long long>(block_size))
                   : -1) {}
  std::int64_t block_size() const noexcept { return block_size_; }
  std::int64_t block(std::int64_t slot) const noexcept {
    return shift_ >= 0 ? slot >> shift_ : slot / block_size_;
  }
  std::int64_t offset(std::int64_t slot) const noexcept {
    return shift_ >= 0 ? slot & (block_size_ - 1) : slot % block_size_;
  }
  // Address of `slot` in a cache whose blocks are block_stride and whose slots are slot_pitch
  // units apart (bytes for byte pointers, elements for typed ones).
  template <class T>
  T* address(T* base, std::int64_t block_stride, std::int64_t slot_pitch,
             std::int64_t slot) const noexcept {
    return base + block(slot) * block_stride + offset(slot) * slot_pitch;
  }

 private:
  std::int64_t block_size_ = 1;
  int shift_ = 0;
};

// The last-writer rule (see docs/semantics.md, "Determinism and duplicate slots"): sets
// slots[t] = -1 for every token whose slot a later token writes again, so that the remaining
// writes touch pairwise distinct slots and may run in any order, on any thread, with the
// result of a sequential pass in token order. Entries must be negative (skipped) or in
// [0, num_slots). Returns whether any entry was dropped. Allocates nothing once warm.
bool keep_last_writers(std::span<std::int64_t> slots, std::int64_t num_slots);

// parallel_for over the tokens of `slots` (which may repeat) with the last-writer rule: a job
// the pool would split runs keep_last_writers first, so that no two chunks write the same row;
// any other runs as one pass in token order, which keeps the last writer by itself, with n as
// its grain, so that a change of the pool's size in between cannot split it.
template <class F>
void parallel_for_last_writers(std::span<std::int64_t> slots, std::int64_t num_slots,
                               std::int64_t grain, F&& f) {
  const auto n = static_cast<std::int64_t>(slots.size());
  const bool split = parallel_may_split(n, grain);
  if (split) keep_last_writers(slots, num_slots);
  parallel_for(n, split ? grain : n, f);
}

// The index of the first slot of slots[0, n) that is neither -1 (skip) nor in [0, num_slots),
// or -1 when there is none: the check of the operators whose only padding is -1. A vector scan
// tells whether there is one; only a failing call looks for it slot by slot.
std::int64_t first_bad_slot(const std::int64_t* slots, std::int64_t n, std::int64_t num_slots);

// Reads a slot-per-token slot_mapping into `slots` and rejects any entry at or past num_slots
// (negative entries are padding; see docs/semantics.md, "Out-of-range slots"). The message
// names `cache` and its blocks of block_size slots.
void read_padded_slots(const TensorView& slot_mapping, std::int64_t num_slots,
                       std::int64_t block_size, std::string_view cache,
                       std::vector<std::int64_t>& slots);

}  // namespace kvscatter::detail
