// Reading index tensors (slot mappings, lengths, offsets): int32 or int64 of any rank, read at
// their true width and in row-major order (see docs/semantics.md, "Index tensors"). Values go
// through memcpy, so an unaligned buffer is never accessed through a typed pointer.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvscatter/tensor.h"

namespace kvscatter::detail {

// Offset in elements of flat (row-major) index i over the first `axes` axes of t.
std::int64_t flat_offset(const TensorView& t, std::int64_t i, int axes) noexcept;
inline std::int64_t flat_offset(const TensorView& t, std::int64_t i) noexcept {
  return flat_offset(t, i, t.rank);
}

// "[1, 2]" for flat element i of a tensor of t's shape (the tensor's own index syntax).
std::string index_str(const TensorView& t, std::int64_t i);

// Element i (flat, row-major) of an int32/int64 index tensor, widened to int64.
class IndexReader {
 public:
  IndexReader() = default;
  explicit IndexReader(const TensorView& t)
      : view_(t),
        data_(static_cast<const unsigned char*>(t.data)),
        wide_(t.dtype == DType::int64),
        one_axis_(t.rank <= 1 || t.is_contiguous()),
        s0_(t.rank > 1    ? 1
            : t.rank == 1 ? t.stride(0)
                          : 0) {}

  std::int64_t operator[](std::int64_t i) const noexcept {
    const std::int64_t off = one_axis_ ? i * s0_ : flat_offset(view_, i);
    if (wide_) {
      std::int64_t v;
      std::memcpy(&v, data_ + off * 8, 8);
      return v;
    }
    std::int32_t v;
    std::memcpy(&v, data_ + off * 4, 4);
    return v;
  }

 private:
  TensorView view_;
  const unsigned char* data_ = nullptr;
  bool wide_ = false, one_axis_ = true;
  std::int64_t s0_ = 0;
};

// Every element of an index tensor, in row-major order, widened (out is resized).
void read_indices(const TensorView& t, std::vector<std::int64_t>& out);

}  // namespace kvscatter::detail
