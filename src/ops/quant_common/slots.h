// Helpers shared by the quantized cache writers: reading a slot tensor of any rank, resolving
// duplicate slots to their last writer (decision G4) and rejecting self-overlapping outputs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvscatter/tensor.h"

namespace kvscatter::detail {

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

// Rejects views whose distinct elements share memory (a zero stride on a dimension longer than
// one, or strides that interleave), which would make concurrent row writes race.
void require_no_self_overlap(const TensorView& t, std::string_view name);

}  // namespace kvscatter::detail
