// kv_compress_epilog on NumPy / DLPack arrays, in place.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "bindings.h"
#include "kvscatter/kv_compress_epilog.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace kvscatter::python {
namespace {

// "fp8_bf16" | "fp8_e8m0" | "hifloat8_fp4" (any case) or 0 | 1 | 2 (an int or IntEnum).
QuantMode quant_mode_arg(nb::handle obj) {
  if (nb::isinstance<nb::str>(obj)) return parse_quant_mode(nb::cast<std::string>(obj));
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr())) {
    throw nb::type_error(
        ("quant_mode must be one of \"fp8_bf16\", \"fp8_e8m0\", \"hifloat8_fp4\" or an int 0, 1, "
         "2; got " +
         nb::cast<std::string>(nb::repr(obj)))
            .c_str());
  }
  nb::object index = nb::steal(PyNumber_Index(obj.ptr()));
  if (!index.is_valid()) throw nb::python_error();
  return parse_quant_mode(nb::cast<std::string>(nb::str(index)));
}

}  // namespace

void bind_kv_compress_epilog(nb::module_& m) {
  m.def(
      "kv_compress_epilog",
      [](nb::handle cache, nb::handle x, nb::handle slot_mapping, std::int64_t quant_group_size,
         nb::handle quant_mode, bool round_scale, double x_scale, nb::handle dtype) {
        ArgScope scope;
        TensorView c = scope.tensor(cache, "cache", Access::write);
        TensorView xv = scope.tensor(x, "x", Access::read);
        TensorView sm = scope.tensor(slot_mapping, "slot_mapping", Access::read);
        apply_dtype_override(dtype, {{&xv, "x"}});
        const QuantMode mode = quant_mode_arg(quant_mode);
        // A Python float is a double; the operator's x_scale is float32 (RNE, as torch does).
        const KvCompressEpilogPlan plan = plan_kv_compress_epilog(
            c, xv, sm, quant_group_size, mode, round_scale, static_cast<float>(x_scale));
        nb::gil_scoped_release release;
        execute(plan);
      },
      nb::arg("cache"), nb::arg("x"), nb::arg("slot_mapping"), nb::arg("quant_group_size"),
      nb::arg("quant_mode").none(), nb::arg("round_scale"), nb::arg("x_scale"),
      nb::arg("dtype").none());
}

}  // namespace kvscatter::python
