#include "dtype_override.h"

#include <sstream>

namespace kvscatter::python {
namespace {

// A raw integer array of `bits` (sub-byte types travel packed in bytes).
bool raw_integer(DType d, int bits) {
  switch (d) {
    case DType::int8:
    case DType::uint8:
    case DType::int16:
    case DType::uint16:
    case DType::int32:
    case DType::uint32:
      return dtype_bits(d) == (bits < 8 ? 8 : bits);
    default:
      return false;
  }
}

}  // namespace

std::string count_fp4_elements(TensorView& view, std::string_view name) {
  if (view.rank < 1) return {};
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  const int last = view.rank - 1;
  bool overflow = __builtin_mul_overflow(view.dim(last), 2, &view.shape[at(last)]);
  for (int i = 0; i < view.rank; ++i) {
    if (i == last && view.stride(i) == 1) continue;
    overflow = __builtin_mul_overflow(view.stride(i), 2, &view.strides[at(i)]) || overflow;
  }
  if (!overflow) return {};
  return std::string(name) + ": sizes of " + std::string(dtype_name(view.dtype)) +
         " elements (two per byte) overflow 64 bits";
}

std::string override_dtypes(DType want, std::initializer_list<NamedView> views) {
  const int want_bits = dtype_bits(want);
  bool matched = false;
  std::string seen;
  for (const NamedView& nv : views) {
    if (nv.view == nullptr) continue;
    if (nv.view->dtype == want) {
      matched = true;
    } else if (raw_integer(nv.view->dtype, want_bits)) {
      nv.view->dtype = want;
      if (want_bits == 4) {
        std::string error = count_fp4_elements(*nv.view, nv.name);
        if (!error.empty()) return error;
      }
      matched = true;
    } else {
      if (!seen.empty()) seen += ", ";
      seen += std::string(nv.name) + " is " + std::string(dtype_name(nv.view->dtype));
    }
  }
  if (matched) return {};
  std::ostringstream os;
  os << "dtype=\"" << dtype_name(want) << "\" reinterprets arrays of raw "
     << (want_bits < 8 ? 8 : want_bits) << "-bit integers, but none of the data arrays is one ("
     << seen << ")";
  return os.str();
}

std::string unknown_dtype_message(std::string_view name) {
  std::string known;
  for (int i = 0; i < kNumDTypes; ++i) {
    if (i) known += ", ";
    known += dtype_name(static_cast<DType>(i));
  }
  return "dtype: unknown element type \"" + std::string(name) + "\" (known: " + known + ")";
}

}  // namespace kvscatter::python
