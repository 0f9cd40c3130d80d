#include "core/check.h"

#include <algorithm>
#include <array>
#include <limits>
#include <string>

#include "core/overlap.h"

namespace kvscatter::detail {

void fail(Status status, const std::string& message) { throw Error(status, message); }

namespace {
// "[a, b, c]" of the first n entries.
std::string list_str(const std::array<std::int64_t, kMaxRank>& v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += cat(i ? ", " : "", v[static_cast<std::size_t>(i)]);
  return s + "]";
}
}  // namespace

std::string shape_str(const TensorView& t) { return list_str(t.shape, t.rank); }

void require_data(const TensorView& t, std::string_view name) {
  if (t.data != nullptr) return;
  bool empty = false;
  for (int i = 0; i < t.rank; ++i) empty = empty || t.dim(i) == 0;
  if (!empty) fail(Status::null_pointer, cat(name, " has a null data pointer"));
}

void require_rank(const TensorView& t, std::string_view name, int rank, std::string_view dims) {
  if (t.rank != rank) {
    invalid(name, " must be ", rank, "-D ", dims, ", got ", t.rank, "-D ", shape_str(t));
  }
}

void require_dtype(const TensorView& t, std::string_view name,
                   std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (t.dtype == d) return;
  }
  std::string list;
  for (DType d : allowed) {
    if (!list.empty()) list += ", ";
    list += dtype_name(d);
  }
  invalid(name, " dtype must be one of {", list, "}, got ", dtype_name(t.dtype));
}

void require_same_dtype(const TensorView& a, std::string_view a_name, const TensorView& b,
                        std::string_view b_name) {
  if (a.dtype != b.dtype) {
    invalid(b_name, " dtype must match ", a_name, " (", dtype_name(a.dtype), "), got ",
            dtype_name(b.dtype));
  }
}

void require_dim(const TensorView& t, std::string_view name, int axis, std::int64_t expected,
                 std::string_view why) {
  if (t.dim(axis) != expected) {
    invalid(name, ".shape[", axis, "] must be ", expected, " (", why, "), got ", t.dim(axis),
            " (shape ", shape_str(t), ")");
  }
}

void require_sane_layout(const TensorView& t, std::string_view name) {
  if (t.rank < 0 || t.rank > kMaxRank) invalid(name, " rank must be in [0, 8], got ", t.rank);
  std::int64_t last = 0;  // highest element offset
  bool empty = false;
  for (int i = 0; i < t.rank; ++i) {
    if (t.dim(i) < 0) invalid(name, ".shape[", i, "] must be >= 0, got ", t.dim(i));
    if (t.stride(i) < 0) invalid(name, ".strides[", i, "] must be >= 0, got ", t.stride(i));
    empty = empty || t.dim(i) == 0;
  }
  if (empty) return;
  for (int i = 0; i < t.rank; ++i) {
    last = checked_add(last, checked_mul(t.dim(i) - 1, t.stride(i), name), name);
  }
  checked_mul(checked_add(last, 1, name), static_cast<std::int64_t>(t.element_size()), name);
}

TensorView packed_fp4_bytes(const TensorView& t, std::string_view name) {
  const std::string_view type = dtype_name(t.dtype);
  if (t.rank < 1) invalid(name, " (", type, ") must have at least one dimension");
  const int last = t.rank - 1;
  if (t.dim(last) % 2 != 0) {
    invalid(name, ".shape[", last, "] = ", t.dim(last), " must be even (", type,
            " packs two elements per byte)");
  }
  bool empty = false;  // an empty view addresses no memory: its strides mean nothing
  for (int i = 0; i < t.rank; ++i) empty = empty || t.dim(i) == 0;
  if (!empty && t.dim(last) > 1 && t.stride(last) != 1) {
    invalid(name, ".strides[", last, "] must be 1 (", type,
            " elements are packed two per byte), got ", t.stride(last));
  }
  TensorView bytes = t;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  bytes.shape[at(last)] = t.dim(last) / 2;
  bytes.strides[at(last)] = 1;
  for (int i = 0; i < last; ++i) {
    if (!empty && t.dim(i) > 1 && t.stride(i) % 2 != 0) {
      invalid(name, ".strides[", i, "] = ", t.stride(i), " must be even (a ", type,
              " row starts on a whole byte)");
    }
    bytes.strides[at(i)] = t.stride(i) / 2;
  }
  return bytes;
}

void require_index(const TensorView& t, std::string_view name) {
  require_dtype(t, name, {DType::int32, DType::int64});
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    invalid(what, ": size ", a, " x ", b, " overflows 64 bits");
  }
  return r;
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    invalid(what, ": size ", a, " + ", b, " overflows 64 bits");
  }
  return r;
}

void require_no_self_overlap(const TensorView& t, std::string_view name) {
  // Sort the dimensions longer than one by stride; each stride must step over the whole extent
  // of the dimensions inside it.
  std::array<int, kMaxRank> order{};
  int m = 0;
  for (int a = 0; a < t.rank; ++a) {
    if (t.dim(a) > 1) order[static_cast<std::size_t>(m++)] = a;
  }
  for (int i = 1; i < m; ++i) {  // insertion sort: at most 8 entries
    for (int j = i; j > 0 && t.stride(order[static_cast<std::size_t>(j)]) <
                                 t.stride(order[static_cast<std::size_t>(j - 1)]);
         --j) {
      std::swap(order[static_cast<std::size_t>(j)], order[static_cast<std::size_t>(j - 1)]);
    }
  }
  std::int64_t extent = 1;  // elements spanned by the inner dimensions
  for (int k = 0; k < m; ++k) {
    const int a = order[static_cast<std::size_t>(k)];
    if (t.stride(a) < extent) {
      invalid(name, " must not overlap itself: strides ", list_str(t.strides, t.rank),
              " for shape ", shape_str(t), " make distinct elements share memory (dimension ", a,
              " has stride ", t.stride(a), ", needs at least ", extent, ")");
    }
    extent = t.stride(a) * (t.dim(a) - 1) + extent;
  }
}

void require_disjoint(const TensorView& k, std::string_view k_name, const TensorView& v,
                      std::string_view v_name) {
  if (!may_overlap(k, v)) return;
  // The wording of the execute-time check of outputs (core/overlap.cc), which this one precedes.
  invalid(k_name, " ", k.describe(), " and ", v_name, " ", v.describe(),
          " share memory; outputs of one call must not overlap");
}

void require_scalar_scale(const TensorView& t, std::string_view name) {
  if (t.dtype != DType::float32) invalid(name, " must be float32, got ", dtype_name(t.dtype));
  require_sane_layout(t, name);
  if (t.numel() != 1) invalid(name, " has ", t.numel(), " elements; expected 1");
  require_data(t, name);
}

}  // namespace kvscatter::detail
