// Python array arguments -> kvscatter::TensorView, without copies.
//
// NumPy arrays (ml_dtypes' bfloat16 and float8 types included) are read through
// __array_struct__ (or __array_interface__) and their dtype, checked once per dtype object;
// anything else goes through DLPack (PyTorch tensors, CPU JAX arrays as inputs, ...). Caches
// must be writeable and are written in place.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtype_override.h"
#include "kvscatter/dtype.h"
#include "kvscatter/tensor.h"

namespace kvscatter::python {

namespace nb = nanobind;

enum class Access { read, write };

// Holds the DLPack imports made for one call, so the memory stays valid until the call returns.
// Must be destroyed with the GIL held (it is: ops release the GIL only around execution).
class ArgScope {
 public:
  // Resolves `obj` (argument `name`). Throws nb::type_error / nb::value_error with a message
  // that names the argument.
  TensorView tensor(nb::handle obj, std::string_view name, Access access);
  // None -> nullopt.
  std::optional<TensorView> optional_tensor(nb::handle obj, std::string_view name, Access access);

 private:
  std::vector<nb::ndarray<>> writable_;
  std::vector<nb::ndarray<nb::ro>> readonly_;
};

// The dtype= keyword: reinterprets the data arrays that carry raw bits. Every view in `views`
// whose dtype is a signed or unsigned integer of the same width as `dtype` takes `dtype`; views
// that already have `dtype` are fine; others (e.g. float32 new vectors next to bfloat16 caches)
// keep theirs. Raises ValueError when no view matches at all. `dtype` is None or a canonical
// kvscatter dtype name (the Python layer normalises aliases).
void apply_dtype_override(nb::handle dtype, std::initializer_list<NamedView> views);

// A mode-string argument: None -> default_value; anything but a str raises TypeError naming the
// argument. The text is parsed by the library's parse_* helper for the mode.
std::string str_arg(nb::handle obj, const char* name, const char* default_value);

// An integer argument (an int or anything with __index__, bools excepted); anything else raises
// TypeError naming the argument.
std::int64_t int_arg(nb::handle obj, const char* name);

// Canonical name -> DType; throws nb::value_error listing the known names.
DType parse_dtype_name(const std::string& name);

}  // namespace kvscatter::python
