// paged_kv_write on NumPy / DLPack arrays, in place.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "kvscatter/paged_kv_write.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace kvscatter::python {
namespace {

std::string str_arg(nb::handle obj, const char* name) {
  if (!nb::isinstance<nb::str>(obj)) {
    throw nb::type_error(
        (std::string(name) + " must be a str, got " + nb::cast<std::string>(nb::repr(obj)))
            .c_str());
  }
  return nb::cast<std::string>(obj);
}

}  // namespace

void bind_paged_kv_write(nb::module_& m) {
  m.def(
      "paged_kv_write",
      [](nb::handle key, nb::handle value, nb::handle key_cache, nb::handle value_cache,
         nb::handle slot_mapping, nb::handle format, nb::handle layout, nb::handle k_scale,
         nb::handle v_scale, nb::handle input_dtype) {
        ArgScope scope;
        PagedKvWriteOptions o;
        const std::string f = str_arg(format, "format");
        const auto parsed = parse_kv_cache_format(f.c_str());
        if (!parsed) {
          throw nb::value_error(
              ("format '" + f + "' is not supported (expected 'copy', 'fp8_e4m3' or 'fp8_e5m2')")
                  .c_str());
        }
        o.format = *parsed;
        const std::string l = str_arg(layout, "layout");
        const auto parsed_layout = parse_kv_cache_layout(l.c_str());
        if (!parsed_layout) {
          throw nb::value_error(
              ("layout '" + l + "' is not supported (expected 'NHD' or 'HND')").c_str());
        }
        o.layout = *parsed_layout;
        const TensorView k = scope.tensor(key, "key", Access::read);
        const TensorView v = scope.tensor(value, "value", Access::read);
        const TensorView kc = scope.tensor(key_cache, "key_cache", Access::write);
        const TensorView vc = scope.tensor(value_cache, "value_cache", Access::write);
        const TensorView sm = scope.tensor(slot_mapping, "slot_mapping", Access::read);
        o.k_scale = scope.optional_tensor(k_scale, "k_scale", Access::read);
        o.v_scale = scope.optional_tensor(v_scale, "v_scale", Access::read);
        // The vLLM adapter's "float16" / "bfloat16" cache types promise the
        // input dtype.
        if (!input_dtype.is_none()) {
          const std::string want = nb::cast<std::string>(input_dtype);
          if (dtype_name(k.dtype) != want) {
            throw nb::value_error(("key dtype " + std::string(dtype_name(k.dtype)) +
                                   " does not match kv_cache_dtype '" + want + "'")
                                      .c_str());
          }
        }
        const PagedKvWritePlan plan = plan_paged_kv_write(k, v, kc, vc, sm, o);
        nb::gil_scoped_release release;
        execute(plan);
      },
      nb::arg("key").none(), nb::arg("value").none(), nb::arg("key_cache").none(),
      nb::arg("value_cache").none(), nb::arg("slot_mapping").none(), nb::arg("format").none(),
      nb::arg("layout").none(), nb::arg("k_scale").none(), nb::arg("v_scale").none(),
      nb::arg("input_dtype").none());
}

}  // namespace kvscatter::python
