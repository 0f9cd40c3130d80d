// The dtype= keyword shared by the NumPy/DLPack bindings and the PyTorch operators: no Python
// or framework types here, so both front ends apply one rule.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "kvscatter/dtype.h"
#include "kvscatter/tensor.h"

namespace kvscatter::python {

struct NamedView {
  TensorView* view;  // nullptr: an absent optional argument
  std::string_view name;
};

// Every view whose dtype is a signed or unsigned integer of the same width as `want` takes
// `want`; views that already have `want` are fine; others (e.g. float32 new vectors next to
// bfloat16 caches) keep theirs. Returns the error message when no view matches at all, else "".
std::string override_dtypes(DType want, std::initializer_list<NamedView> views);

// The message for an unknown dtype name, listing the known ones.
std::string unknown_dtype_message(std::string_view name);

}  // namespace kvscatter::python
