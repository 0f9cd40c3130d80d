// kvscatter.formats: the library's scalar number-format conversions, vectorised over 1-D NumPy
// arrays (the Python layer flattens and reshapes). Codes travel as unsigned integers: uint16
// for the 16-bit formats, uint8 for the 8-bit ones and for float4_e2m1 (one nibble per byte,
// low 4 bits, as ml_dtypes stores float4_e2m1fn), uint32 for float32.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "bindings.h"
#include "kvscatter/formats.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace kvscatter::python {
namespace {

using Floats = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <class T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> new_array(std::size_t n, T** data) {
  T* buf = new T[n ? n : 1];
  nb::capsule owner(buf, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  *data = buf;
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(buf, {n}, owner);
}

DType format_dtype(const std::string& name) {
  const DType d = parse_dtype_name(name);
  if (!dtype_is_floating(d)) {
    throw nb::value_error(("formats: " + name + " is not a number format").c_str());
  }
  return d;
}

template <class Code>
nb::object encode_as(const Floats& x, DType d, bool saturate) {
  const std::size_t n = x.shape(0);
  Code* out = nullptr;
  auto arr = new_array<Code>(n, &out);
  const float* in = x.data();
  {
    nb::gil_scoped_release release;
    if (d == DType::bfloat16) {
      formats::float32_to_bfloat16(in, reinterpret_cast<std::uint16_t*>(out), n);
    } else if (d == DType::float16) {
      formats::float32_to_float16(in, reinterpret_cast<std::uint16_t*>(out), n);
    } else if (d == DType::hifloat8) {
      for (std::size_t i = 0; i < n; ++i)
        out[i] = static_cast<Code>(formats::encode_hifloat8(in[i], saturate));
    } else {
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<Code>(formats::encode(d, in[i]));
    }
  }
  return nb::cast(arr);
}

template <class Code>
nb::object decode_as(nb::handle codes, DType d) {
  using Codes = nb::ndarray<const Code, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  Codes c;
  if (!nb::try_cast(codes, c, false)) {
    throw nb::type_error("formats.decode: codes must be a 1-D contiguous unsigned integer array");
  }
  const std::size_t n = c.shape(0);
  float* out = nullptr;
  auto arr = new_array<float>(n, &out);
  const Code* in = c.data();
  {
    nb::gil_scoped_release release;
    if (d == DType::bfloat16) {
      formats::bfloat16_to_float32(reinterpret_cast<const std::uint16_t*>(in), out, n);
    } else if (d == DType::float16) {
      formats::float16_to_float32(reinterpret_cast<const std::uint16_t*>(in), out, n);
    } else {
      for (std::size_t i = 0; i < n; ++i) out[i] = formats::decode(d, in[i]);
    }
  }
  return nb::cast(arr);
}

}  // namespace

void bind_formats(nb::module_& m) {
  m.def(
      "formats_encode",
      [](Floats x, const std::string& dtype, bool saturate) -> nb::object {
        const DType d = format_dtype(dtype);
        switch (dtype_bits(d)) {
          case 32:
            return encode_as<std::uint32_t>(x, d, saturate);
          case 16:
            return encode_as<std::uint16_t>(x, d, saturate);
          default:
            return encode_as<std::uint8_t>(x, d, saturate);
        }
      },
      nb::arg("x"), nb::arg("dtype"), nb::arg("saturate"));
  m.def(
      "formats_decode",
      [](nb::handle codes, const std::string& dtype) -> nb::object {
        const DType d = format_dtype(dtype);
        switch (dtype_bits(d)) {
          case 32:
            return decode_as<std::uint32_t>(codes, d);
          case 16:
            return decode_as<std::uint16_t>(codes, d);
          default:
            return decode_as<std::uint8_t>(codes, d);
        }
      },
      nb::arg("codes"), nb::arg("dtype"));
}

}  // namespace kvscatter::python
