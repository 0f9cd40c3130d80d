// kv_cache_update on NumPy / DLPack arrays, in place.
#include <nanobind/nanobind.h>

#include <cstdint>

#include "bindings.h"
#include "kvscatter/kv_cache_update.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace kvscatter::python {

void bind_kv_cache_update(nb::module_& m) {
  m.def(
      "kv_cache_update",
      [](nb::handle key_cache, nb::handle value_cache, nb::handle new_keys, nb::handle new_values,
         std::int64_t position, nb::handle dtype) {
        ArgScope scope;
        TensorView kc = scope.tensor(key_cache, "key_cache", Access::write);
        TensorView vc = scope.tensor(value_cache, "value_cache", Access::write);
        TensorView nk = scope.tensor(new_keys, "new_keys", Access::read);
        TensorView nv = scope.tensor(new_values, "new_values", Access::read);
        apply_dtype_override(
            dtype,
            {{&kc, "key_cache"}, {&vc, "value_cache"}, {&nk, "new_keys"}, {&nv, "new_values"}});
        const KvCacheUpdatePlan plan = plan_kv_cache_update(kc, vc, nk, nv, position);
        {
          nb::gil_scoped_release release;
          execute(plan);
        }
        return position + plan.new_len;
      },
      nb::arg("key_cache"), nb::arg("value_cache"), nb::arg("new_keys"), nb::arg("new_values"),
      nb::arg("position"), nb::arg("dtype").none());
}

}  // namespace kvscatter::python
