#include "tensor_arg.h"

#include <array>
#include <cstdint>

#include "core/strings.h"

namespace kvscatter::python {
namespace {

using detail::cat;

// numpy.ndarray, looked up once. Deliberately leaked: no Python object may be released
// during interpreter teardown from a C++ static destructor.
PyObject* numpy_ndarray_type() {
  static PyObject* type = [] {
    nb::object np = nb::module_::import_("numpy");
    return nb::object(np.attr("ndarray")).release().ptr();
  }();
  return type;
}

std::string python_type_name(nb::handle obj) {
  nb::handle type = obj.type();
  std::string module;
  if (nb::hasattr(type, "__module__"))
    module = nb::cast<std::string>(nb::str(type.attr("__module__")));
  std::string name = nb::cast<std::string>(nb::str(type.attr("__qualname__")));
  return module.empty() || module == "builtins" ? name : module + "." + name;
}

bool from_module(nb::handle obj, std::string_view prefix) {
  nb::handle type = obj.type();
  if (!nb::hasattr(type, "__module__")) return false;
  const std::string module = nb::cast<std::string>(nb::str(type.attr("__module__")));
  return module.compare(0, prefix.size(), prefix) == 0 &&
         (module.size() == prefix.size() || module[prefix.size()] == '.' ||
          module[prefix.size()] == '_');
}

// NumPy dtype names (ml_dtypes' included) -> kvscatter dtypes.
std::optional<DType> dtype_from_numpy_name(std::string_view n) {
  struct Entry {
    std::string_view name;
    DType dtype;
  };
  static constexpr std::array<Entry, 13> kTable{{
      {"float32", DType::float32},
      {"float16", DType::float16},
      {"bfloat16", DType::bfloat16},
      {"int8", DType::int8},
      {"uint8", DType::uint8},
      {"int16", DType::int16},
      {"uint16", DType::uint16},
      {"int32", DType::int32},
      {"uint32", DType::uint32},
      {"int64", DType::int64},
      {"float8_e5m2", DType::float8_e5m2},
      {"float8_e4m3fn", DType::float8_e4m3fn},
      {"float8_e8m0fnu", DType::float8_e8m0},
  }};
  for (const auto& e : kTable) {
    if (e.name == n) return e.dtype;
  }
  return std::nullopt;
}

[[noreturn]] void unsupported_dtype(std::string_view name, std::string_view found) {
  if (found == "float4_e2m1fn") {
    throw nb::type_error(
        cat(name,
            ": ml_dtypes.float4_e2m1fn arrays hold one element per byte, while kvscatter's "
            "float4_e2m1 packs two per byte (even element in the low nibble); pass the "
            "packed bytes as uint8 with dtype=\"float4_e2m1\"")
            .c_str());
  }
  throw nb::type_error(
      cat(name, ": unsupported element type ", found,
          " (kvscatter takes float32, float16, bfloat16, int8, uint8, int16, uint16, int32, "
          "uint32, int64, float8_e5m2, float8_e4m3fn, float8_e8m0fnu; hifloat8 travels as uint8 "
          "with dtype=\"hifloat8\")")
          .c_str());
}

TensorView make_view(void* data, DType dtype, int ndim, const std::int64_t* shape,
                     const std::int64_t* strides, std::string_view name) {
  if (ndim > kMaxRank) {
    throw nb::value_error(cat(name, ": rank must be <= ", kMaxRank, ", got ", ndim).c_str());
  }
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = ndim;
  bool empty = false;
  for (int i = 0; i < ndim; ++i) {
    v.shape[static_cast<std::size_t>(i)] = shape[i];
    v.strides[static_cast<std::size_t>(i)] = strides[i];
    empty = empty || shape[i] == 0;
  }
  // An empty array addresses no memory, so its strides mean nothing (NumPy and DLPack
  // producers leave arbitrary values there, 0 included): give it row-major ones.
  if (empty) {
    v.strides = contiguous_strides(
        std::span<const std::int64_t>(v.shape.data(), static_cast<std::size_t>(ndim)));
  }
  return v;
}

// The C structure behind NumPy's __array_struct__ capsule (array interface protocol, version 2).
struct ArrayInterface {
  int two;  // always 2
  int nd;
  char typekind;
  int itemsize;
  int flags;
  Py_intptr_t* shape;
  Py_intptr_t* strides;  // in bytes
  void* data;
  PyObject* descr;
};
constexpr int kArrayWriteable = 0x0400;

// The kvscatter dtype of a NumPy dtype object, checked once per distinct dtype object: NumPy
// hands out the same object for every array of a builtin or registered (ml_dtypes) type, so a
// decode-size call does not pay for name lookups. The cache keeps its dtypes alive.
DType numpy_dtype(nb::handle dtype, std::string_view name) {
  struct Entry {
    PyObject* descr;
    DType dtype;
  };
  static std::array<Entry, 32> cache{};
  static std::size_t used = 0;
  for (std::size_t i = 0; i < used; ++i) {
    if (cache[i].descr == dtype.ptr()) return cache[i].dtype;
  }
  const std::string dname = nb::cast<std::string>(dtype.attr("name"));
  const std::optional<DType> dt = dtype_from_numpy_name(dname);
  if (!dt) unsupported_dtype(name, dname);
  if (!nb::cast<bool>(dtype.attr("isnative"))) {
    throw nb::type_error(
        cat(name, ": byte-swapped (non-native byte order) ", dname, " arrays are not supported")
            .c_str());
  }
  if (used < cache.size()) cache[used++] = {nb::borrow(dtype).release().ptr(), *dt};
  return *dt;
}

[[noreturn]] void read_only_error(std::string_view name) {
  throw nb::value_error(
      cat(name,
          " is read-only; kvscatter writes the caches in place, so pass a writeable "
          "array")
          .c_str());
}

// The view of a NumPy array described by its data pointer, writeability and, per axis, shape
// and stride in bytes (read through shape_at(i) / stride_at(i)), whichever protocol gave them.
template <class ShapeAt, class StrideAt>
TensorView numpy_layout_view(std::string_view name, Access access, nb::handle dtype, DType dt,
                             void* data, bool writeable, std::int64_t itemsize, int ndim,
                             ShapeAt shape_at, StrideAt stride_at) {
  if (access == Access::write && !writeable) read_only_error(name);
  if (ndim > kMaxRank) {
    throw nb::value_error(cat(name, ": rank must be <= ", kMaxRank, ", got ", ndim).c_str());
  }
  std::array<std::int64_t, kMaxRank> shape{}, strides{};
  for (int i = 0; i < ndim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    shape[k] = shape_at(i);
    const std::int64_t bytes = stride_at(i);
    if (bytes % itemsize != 0) {
      throw nb::value_error(cat(name, ": stride of axis ", i, " is ", bytes,
                                " bytes, not a multiple of the element size (", itemsize,
                                " bytes of ", nb::cast<std::string>(dtype.attr("name")), ")")
                                .c_str());
    }
    strides[k] = bytes / itemsize;
  }
  return make_view(data, dt, ndim, shape.data(), strides.data(), name);
}

TensorView numpy_view(nb::handle arr, std::string_view name, Access access) {
  nb::object dtype = arr.attr("dtype");
  const DType dt = numpy_dtype(dtype, name);
  // Fast path: the __array_struct__ capsule gives data, flags, shape and strides in one C
  // structure (the dictionary of __array_interface__ costs microseconds per array).
  nb::object capsule = nb::steal(PyObject_GetAttrString(arr.ptr(), "__array_struct__"));
  const auto* st =
      capsule.is_valid() && PyCapsule_CheckExact(capsule.ptr())
          ? static_cast<const ArrayInterface*>(PyCapsule_GetPointer(capsule.ptr(), nullptr))
          : nullptr;
  if (st == nullptr) PyErr_Clear();
  if (st != nullptr && st->two == 2 && st->itemsize > 0 && st->strides != nullptr) {
    return numpy_layout_view(
        name, access, dtype, dt, st->data, (st->flags & kArrayWriteable) != 0, st->itemsize, st->nd,
        [&](int i) { return std::int64_t{st->shape[i]}; },
        [&](int i) { return std::int64_t{st->strides[i]}; });
  }
  nb::dict ai = nb::cast<nb::dict>(arr.attr("__array_interface__"));
  nb::tuple data = nb::cast<nb::tuple>(ai["data"]);
  nb::tuple shape_t = nb::cast<nb::tuple>(arr.attr("shape"));
  nb::tuple strides_t = nb::cast<nb::tuple>(arr.attr("strides"));
  return numpy_layout_view(
      name, access, dtype, dt, reinterpret_cast<void*>(nb::cast<std::uintptr_t>(data[0])),
      !nb::cast<bool>(data[1]), nb::cast<std::int64_t>(dtype.attr("itemsize")),
      static_cast<int>(shape_t.size()),
      [&](int i) { return nb::cast<std::int64_t>(shape_t[static_cast<std::size_t>(i)]); },
      [&](int i) { return nb::cast<std::int64_t>(strides_t[static_cast<std::size_t>(i)]); });
}

std::optional<DType> dtype_from_dlpack(nb::dlpack::dtype d) {
  using Code = nb::dlpack::dtype_code;
  if (d.lanes != 1) return std::nullopt;
  switch (static_cast<Code>(d.code)) {
    case Code::Int:
      switch (d.bits) {
        case 8:
          return DType::int8;
        case 16:
          return DType::int16;
        case 32:
          return DType::int32;
        case 64:
          return DType::int64;
        default:
          return std::nullopt;
      }
    case Code::UInt:
      switch (d.bits) {
        case 8:
          return DType::uint8;
        case 16:
          return DType::uint16;
        case 32:
          return DType::uint32;
        default:
          return std::nullopt;
      }
    case Code::Float:
      if (d.bits == 16) return DType::float16;
      if (d.bits == 32) return DType::float32;
      return std::nullopt;
    case Code::Bfloat:
      return d.bits == 16 ? std::optional<DType>(DType::bfloat16) : std::nullopt;
    case Code::Float8_E4M3FN:
      return DType::float8_e4m3fn;
    case Code::Float8_E5M2:
      return DType::float8_e5m2;
    case Code::Float8_E8M0FNU:
      return DType::float8_e8m0;
    default:
      return std::nullopt;
  }
}

std::string dlpack_dtype_str(nb::dlpack::dtype d) {
  using Code = nb::dlpack::dtype_code;
  const char* kind = "code ";
  switch (static_cast<Code>(d.code)) {
    case Code::Int:
      kind = "int";
      break;
    case Code::UInt:
      kind = "uint";
      break;
    case Code::Float:
      kind = "float";
      break;
    case Code::Bfloat:
      kind = "bfloat";
      break;
    case Code::Complex:
      kind = "complex";
      break;
    case Code::Bool:
      return "bool";
    default:
      return cat("DLPack type code ", int(d.code), " of ", int(d.bits), " bits");
  }
  return cat(kind, int(d.bits), d.lanes != 1 ? cat("x", d.lanes) : std::string());
}

template <class Array>
TensorView dlpack_view(const Array& a, std::string_view name) {
  if (a.device_type() != nb::device::cpu::value) {
    throw nb::type_error(cat(name, " lives on a non-CPU device (DLPack device type ",
                             a.device_type(), "); this kvscatter build runs on the CPU")
                             .c_str());
  }
  const std::optional<DType> dt = dtype_from_dlpack(a.dtype());
  if (!dt) unsupported_dtype(name, dlpack_dtype_str(a.dtype()));
  const int ndim = static_cast<int>(a.ndim());
  return make_view(const_cast<void*>(static_cast<const void*>(a.data())), *dt, ndim, a.shape_ptr(),
                   a.stride_ptr(), name);
}

// Why a DLPack export failed, for the error message.
std::string dlpack_failure(nb::handle obj) {
  if (!nb::hasattr(obj, "__dlpack__")) return "it supports neither NumPy nor DLPack";
  try {
    obj.attr("__dlpack__")();
  } catch (nb::python_error& e) {
    return cat("__dlpack__() raised: ", e.what());
  }
  return "its DLPack export could not be read";
}

}  // namespace

DType parse_dtype_name(const std::string& name) {
  if (auto d = dtype_from_name(name)) return *d;
  throw nb::value_error(unknown_dtype_message(name).c_str());
}

TensorView ArgScope::tensor(nb::handle obj, std::string_view name, Access access) {
  if (obj.is_none()) {
    throw nb::type_error(cat(name, " is required, got None").c_str());
  }
  if (PyObject_IsInstance(obj.ptr(), numpy_ndarray_type()) == 1) {
    return numpy_view(obj, name, access);
  }
  if (access == Access::write && (from_module(obj, "jax") || from_module(obj, "jaxlib"))) {
    throw nb::type_error(cat(name,
                             " is a JAX array, which is immutable; use kvscatter.jax (functional, "
                             "in place with donated buffers) to update JAX caches")
                             .c_str());
  }
  if (access == Access::write) {
    nb::ndarray<> a;
    if (nb::try_cast(obj, a, /*convert=*/false)) {
      writable_.push_back(a);
      return dlpack_view(a, name);
    }
    nb::ndarray<nb::ro> r;
    if (nb::try_cast(obj, r, false)) {
      throw nb::value_error(
          cat(name,
              " is read-only; kvscatter writes the caches in place, so pass a writeable "
              "tensor")
              .c_str());
    }
  } else {
    nb::ndarray<nb::ro> r;
    if (nb::try_cast(obj, r, false)) {
      readonly_.push_back(r);
      return dlpack_view(r, name);
    }
  }
  throw nb::type_error(cat(name, ": expected a NumPy array or a DLPack-capable CPU tensor, got ",
                           python_type_name(obj), " (", dlpack_failure(obj), ")")
                           .c_str());
}

std::optional<TensorView> ArgScope::optional_tensor(nb::handle obj, std::string_view name,
                                                    Access access) {
  if (obj.is_none()) return std::nullopt;
  return tensor(obj, name, access);
}

void apply_dtype_override(nb::handle dtype, std::initializer_list<NamedView> views) {
  if (dtype.is_none()) return;
  const std::string error = override_dtypes(parse_dtype_name(nb::cast<std::string>(dtype)), views);
  if (!error.empty()) throw nb::value_error(error.c_str());
}

std::string str_arg(nb::handle obj, const char* name, const char* default_value) {
  if (obj.is_none()) return default_value;
  if (!nb::isinstance<nb::str>(obj)) {
    throw nb::type_error(
        cat(name, " must be a str or None, got ", nb::cast<std::string>(nb::repr(obj))).c_str());
  }
  return nb::cast<std::string>(obj);
}

std::int64_t int_arg(nb::handle obj, const char* name) {
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr())) {
    throw nb::type_error(
        cat(name, " must be an int, got ", nb::cast<std::string>(nb::repr(obj))).c_str());
  }
  return nb::cast<std::int64_t>(nb::steal(PyNumber_Index(obj.ptr())));
}

}  // namespace kvscatter::python
