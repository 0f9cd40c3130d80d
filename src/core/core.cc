// dtype table, error type and tensor view.
#include <array>

#include "core/check.h"
#include "kvscatter/dtype.h"
#include "kvscatter/error.h"
#include "kvscatter/tensor.h"

namespace kvscatter {
namespace {

struct DTypeInfo {
  std::string_view name;
  int bits;
  bool floating;
};

constexpr std::array<DTypeInfo, kNumDTypes> kInfo{{
    {"float32", 32, true},      {"float16", 16, true},      {"bfloat16", 16, true},
    {"int8", 8, false},         {"uint8", 8, false},        {"int16", 16, false},
    {"uint16", 16, false},      {"int32", 32, false},       {"uint32", 32, false},
    {"int64", 64, false},       {"hifloat8", 8, true},      {"float8_e5m2", 8, true},
    {"float8_e4m3fn", 8, true}, {"float8_e8m0", 8, true},   {"float4_e2m1", 4, true},
    {"float4_e1m2", 4, true},
}};

const DTypeInfo& info(DType d) noexcept { return kInfo[static_cast<std::size_t>(d)]; }

}  // namespace

std::string_view dtype_name(DType dtype) noexcept {
  const auto i = static_cast<std::size_t>(dtype);
  return i < kInfo.size() ? kInfo[i].name : std::string_view("<invalid dtype>");
}

std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kInfo.size(); ++i) {
    if (kInfo[i].name == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

int dtype_bits(DType dtype) noexcept { return info(dtype).bits; }

std::size_t dtype_size(DType dtype) noexcept {
  return static_cast<std::size_t>((info(dtype).bits + 7) / 8);
}

bool dtype_is_floating(DType dtype) noexcept { return info(dtype).floating; }

Error::Error(Status status, const std::string& message)
    : std::runtime_error(message), status_(status) {}

std::array<std::int64_t, kMaxRank> contiguous_strides(std::span<const std::int64_t> shape) {
  std::array<std::int64_t, kMaxRank> strides{};
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s = detail::checked_mul(s, shape[i] > 0 ? shape[i] : 1, "contiguous strides");
  }
  return strides;
}

namespace {
// Copies a shape into a view, checking rank and signs.
void set_shape(TensorView& v, std::span<const std::int64_t> s) {
  if (s.size() > kMaxRank) detail::invalid("tensor rank must be <= 8, got ", s.size());
  v.rank = static_cast<int>(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] < 0) detail::invalid("tensor shape[", i, "] must be >= 0, got ", s[i]);
    v.shape[i] = s[i];
  }
}
}  // namespace

TensorView::TensorView(void* d, DType t, std::span<const std::int64_t> s) : data(d), dtype(t) {
  set_shape(*this, s);
  strides = contiguous_strides(s);
}

TensorView::TensorView(void* d, DType t, std::initializer_list<std::int64_t> s)
    : TensorView(d, t, std::span<const std::int64_t>(s.begin(), s.size())) {}

TensorView::TensorView(void* d, DType t, std::span<const std::int64_t> s,
                       std::span<const std::int64_t> st)
    : data(d), dtype(t) {
  set_shape(*this, s);
  if (st.size() != s.size()) {
    detail::invalid("tensor strides must have ", s.size(), " entries, got ", st.size());
  }
  for (std::size_t i = 0; i < st.size(); ++i) strides[i] = st[i];
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank; ++i) n = detail::checked_mul(n, dim(i), "tensor element count");
  return n;
}

bool TensorView::is_contiguous() const noexcept {
  for (int i = 0; i < rank; ++i) {
    if (dim(i) == 0) return true;
  }
  std::int64_t expect = 1;
  for (int i = rank; i-- > 0;) {
    if (dim(i) != 1 && stride(i) != expect) return false;
    expect *= dim(i);
  }
  return true;
}

std::string TensorView::describe() const {
  return detail::cat(detail::shape_str(*this), " ", dtype_name(dtype));
}

}  // namespace kvscatter
