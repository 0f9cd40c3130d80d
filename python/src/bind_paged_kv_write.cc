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
void bind_paged_kv_write(nb::module_& m) {
  m.def(
      "paged_kv_write",
      [](nb::handle key, nb::handle value, nb::handle key_cache, nb::handle value_cache,
         nb::handle slot_mapping, nb::handle format, nb::handle layout, nb::handle k_scale,
         nb::handle v_scale, nb::handle input_dtype) {
        ArgScope scope;
        PagedKvWriteOptions o;
        o.format = parse_kv_cache_format(str_arg(format, "format", "copy"));
        o.layout = parse_kv_cache_layout(str_arg(layout, "layout", "NHD"));
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
