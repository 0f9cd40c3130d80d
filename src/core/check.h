// Validation helpers shared by every operator: messages that name the argument, what was
// expected and what was found (see docs/semantics.md, "Errors and status codes"), and
// overflow-checked arithmetic ("64-bit offsets").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/strings.h"
#include "kvscatter/dtype.h"
#include "kvscatter/error.h"
#include "kvscatter/tensor.h"

namespace kvscatter::detail {

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
// the result would depend on the thread count.
void require_no_self_overlap(const TensorView& t, std::string_view name);
// Two outputs may share one allocation (K and V interleaved per block) but never an element:
// writes of both to the same bytes would depend on the order of the writes. The test is
// may_overlap's (core/overlap.h): exact for views of one shape and strides, otherwise any
// meeting of their address ranges is rejected.
void require_disjoint(const TensorView& a, std::string_view a_name, const TensorView& b,
                      std::string_view b_name);
// A scale given as a tensor: float32 with exactly one element, bound to data.
void require_scalar_scale(const TensorView& t, std::string_view name);
// Index tensors: int32 or int64 (see docs/semantics.md, "Index tensors").
void require_index(const TensorView& t, std::string_view name);

// A packed float4 tensor as the kernels address it. The caller's shape and strides count
// elements, two to a byte with the even element in the low nibble (docs/formats.md); the view
// returned counts bytes. Rejects an odd last extent, a last axis that is not contiguous, and a
// stride that would start a row inside a byte.
TensorView packed_fp4_bytes(const TensorView& t, std::string_view name);

std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view what);
std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view what);

}  // namespace kvscatter::detail
