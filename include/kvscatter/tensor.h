// A non-owning view of a strided tensor: data pointer, dtype, rank <= 8, shape and strides in
// elements (64-bit). Operators never allocate or free the memory behind a view.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "kvscatter/dtype.h"
#include "kvscatter/export.h"

namespace kvscatter {

inline constexpr int kMaxRank = 8;

struct KVSCATTER_API TensorView {
  void* data = nullptr;
  DType dtype = DType::float32;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  // in elements; may be 0 or negative only where
                                                 // an operator says so (validation rejects it)

  TensorView() = default;
  // Row-major contiguous view. Throws kvscatter::Error for rank > 8 or negative dims.
  TensorView(void* data, DType dtype, std::span<const std::int64_t> shape);
  TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape);
  // Explicitly strided view (strides in elements).
  TensorView(void* data, DType dtype, std::span<const std::int64_t> shape,
             std::span<const std::int64_t> strides);

  // Product of the shape; throws on 64-bit overflow.
  std::int64_t numel() const;
  bool is_contiguous() const noexcept;
  std::int64_t dim(int i) const noexcept { return shape[static_cast<std::size_t>(i)]; }
  std::int64_t stride(int i) const noexcept { return strides[static_cast<std::size_t>(i)]; }
  std::size_t element_size() const noexcept { return dtype_size(dtype); }
  // "[2, 3, 4] bfloat16" style description used in messages.
  std::string describe() const;
};

// Where each operand of a planned call can touch memory: byte offsets [lo, hi) from its data
// pointer (lo == hi: nothing), outputs in slots 0-7 and inputs in 8-15 in the order execute()
// lists them. plan_<op>() fills it; offsets hold across rebound data pointers, so execute()'s
// overlap test is a few address comparisons (see docs/semantics.md, "Inputs that overlap
// outputs"). A plan without it (ready false) gets the full test.
struct OperandExtents {
  std::array<std::int64_t, 16> lo{}, hi{};
  std::uint16_t present = 0;  // bit i: operand i was given
  bool ready = false;
};

// Row-major strides for `shape`.
KVSCATTER_API std::array<std::int64_t, kMaxRank> contiguous_strides(
    std::span<const std::int64_t> shape);

}  // namespace kvscatter
