// scatter_pa_kv_cache_with_k_scale on NumPy / DLPack arrays, in place.
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace kvscatter::python {

void bind_scatter_pa_kv_cache_with_k_scale(nb::module_& m) {
  m.def(
      "scatter_pa_kv_cache_with_k_scale",
      [](nb::handle key, nb::handle value, nb::handle key_cache, nb::handle value_cache,
         nb::handle slot_mapping, nb::handle key_scale, nb::handle key_scale_cache,
         nb::handle cache_layout, nb::handle dtype) {
        ArgScope scope;
        TensorView k = scope.tensor(key, "key", Access::read);
        TensorView v = scope.tensor(value, "value", Access::read);
        TensorView kc = scope.tensor(key_cache, "key_cache", Access::write);
        TensorView vc = scope.tensor(value_cache, "value_cache", Access::write);
        TensorView sm = scope.tensor(slot_mapping, "slot_mapping", Access::read);
        TensorView ks = scope.tensor(key_scale, "key_scale", Access::read);
        TensorView ksc = scope.tensor(key_scale_cache, "key_scale_cache", Access::write);
        apply_dtype_override(
            dtype, {{&k, "key"}, {&v, "value"}, {&kc, "key_cache"}, {&vc, "value_cache"}});
        const KScaleCacheLayout layout =
            parse_k_scale_cache_layout(str_arg(cache_layout, "cache_layout", "BNBD"));
        const ScatterPaKvCacheWithKScalePlan plan =
            plan_scatter_pa_kv_cache_with_k_scale(k, v, kc, vc, sm, ks, ksc, layout);
        nb::gil_scoped_release release;
        execute(plan);
      },
      nb::arg("key"), nb::arg("value"), nb::arg("key_cache"), nb::arg("value_cache"),
      nb::arg("slot_mapping"), nb::arg("key_scale"), nb::arg("key_scale_cache"),
      nb::arg("cache_layout").none(), nb::arg("dtype").none());
}

}  // namespace kvscatter::python
