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

// Packed float4 data travels as bytes (uint8 arrays, torch.float4_e2m1fn_x2), while the
// library's float4 views count elements: the last extent doubles, and so do the strides (a
// contiguous last axis stays 1; any other stride there stays not 1, for the library to reject).
// Returns "" or the error when a doubled size overflows.
std::string count_fp4_elements(TensorView& view, std::string_view name);

// The message for an unknown dtype name, listing the known ones.
std::string unknown_dtype_message(std::string_view name);

}  // namespace kvscatter::python
