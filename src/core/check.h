// Validation helpers shared by every operator: messages that name the argument, what was
// expected and what was found (decision G2), and overflow-checked arithmetic (G8).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>

#include "kvscatter/dtype.h"
#include "kvscatter/error.h"
#include "kvscatter/tensor.h"

namespace kvscatter::detail {

template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

[[noreturn]] void fail(Status status, const std::string& message);

template <class... Parts>
[[noreturn]] void invalid(const Parts&... parts) {
  fail(Status::invalid_parameter, cat(parts...));
}

// "[2, 3, 4]"
std::string shape_str(const TensorView& t);

// Throws null_pointer when t.data is null and t has elements (an empty tensor may be null).
void require_data(const TensorView& t, std::string_view name);
void require_rank(const TensorView& t, std::string_view name, int rank, std::string_view dims);
void require_dtype(const TensorView& t, std::string_view name,
                   std::initializer_list<DType> allowed);
void require_same_dtype(const TensorView& a, std::string_view a_name, const TensorView& b,
                        std::string_view b_name);
void require_dim(const TensorView& t, std::string_view name, int axis, std::int64_t expected,
                 std::string_view why);
// Rejects negative dims/strides and checks that the highest addressed byte fits in 64 bits.
void require_sane_layout(const TensorView& t, std::string_view name);
// Rejects views whose distinct elements share memory (a zero stride on a dimension longer than
// one, or strides that interleave): concurrent row writes into such an output would race and
// the result would depend on the thread count (G4).
void require_no_self_overlap(const TensorView& t, std::string_view name);
// Two outputs may share one allocation (K and V interleaved per block) but never an element:
// writes of both to the same bytes would depend on the order of the writes. Checks address
// ranges, then, for views of equal shape and strides, the pair as one view with a leading axis
// of two; anything else whose ranges meet is rejected.
void require_disjoint(const TensorView& a, std::string_view a_name, const TensorView& b,
                      std::string_view b_name);
// Index tensors (G7): int32 or int64, 1-D unless told otherwise, contiguous.
void require_index(const TensorView& t, std::string_view name);

std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view what);
std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view what);

// Reads element i of an int32/int64 index tensor at its true width (G7); honours its stride.
inline std::int64_t read_index(const TensorView& t, std::int64_t i) noexcept {
  const std::int64_t off = i * t.strides[0];
  if (t.dtype == DType::int32) return static_cast<const std::int32_t*>(t.data)[off];
  return static_cast<const std::int64_t*>(t.data)[off];
}

}  // namespace kvscatter::detail
