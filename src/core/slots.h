// Helpers shared by the quantized cache writers: reading a slot tensor of any rank, resolving
// duplicate slots to their last writer (decision G4) and rejecting self-overlapping outputs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvscatter/tensor.h"

namespace kvscatter::detail {

// slot -> (block, offset) for a fixed block size; a shift and a mask when the block size is a
// power of two (the usual case), which spares a 64-bit division per token.
class SlotSplitter {
 public:
  explicit SlotSplitter(std::int64_t block_size) noexcept
      : block_size_(block_size),
        shift_(block_size > 0 && (block_size & (block_size - 1)) == 0
                   ? __builtin_ctzll(static_cast<unsigned long long>(block_size))
                   : -1) {}
  std::int64_t block(std::int64_t slot) const noexcept {
    return shift_ >= 0 ? slot >> shift_ : slot / block_size_;
  }
  std::int64_t offset(std::int64_t slot) const noexcept {
    return shift_ >= 0 ? slot & (block_size_ - 1) : slot % block_size_;
  }

 private:
  std::int64_t block_size_;
  int shift_;
};

// Offset in elements of flat (row-major) element i of t, honouring every stride.
std::int64_t flat_offset(const TensorView& t, std::int64_t i) noexcept;

// Every element of an int32/int64 index tensor of any rank, in row-major order, widened.
std::vector<std::int64_t> read_slots(const TensorView& slot_mapping);

// "[1, 2]" for flat element i of a tensor of shape t.shape (the tensor's own index syntax).
std::string index_str(const TensorView& t, std::int64_t i);

// Sets slots[t] = -1 for every token whose slot is written again by a later token, so that
// the remaining writes touch pairwise distinct rows and may run in any order or on any thread
// while the result stays "last writer in token order wins". Entries must be negative (skip)
// or in [0, num_slots).
void keep_last_writers(std::vector<std::int64_t>& slots, std::int64_t num_slots);

}  // namespace kvscatter::detail
