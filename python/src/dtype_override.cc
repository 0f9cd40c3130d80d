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
