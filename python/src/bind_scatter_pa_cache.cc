// scatter_pa_cache on NumPy / DLPack arrays: key_cache written in place.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <optional>

#include "bindings.h"
#include "kvscatter/scatter_pa_cache.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace kvscatter::python {

void bind_scatter_pa_cache(nb::module_& m) {
  m.def(
      "scatter_pa_cache",
      [](nb::handle key, nb::handle key_cache, nb::handle slot_mapping, nb::handle compress_lens,
         nb::handle compress_seq_offsets, nb::handle seq_lens, nb::handle dtype) {
        ArgScope scope;
        TensorView k = scope.tensor(key, "key", Access::read);
        TensorView kc = scope.tensor(key_cache, "key_cache", Access::write);
        TensorView sm = scope.tensor(slot_mapping, "slot_mapping", Access::read);
        apply_dtype_override(dtype, {{&k, "key"}, {&kc, "key_cache"}});
        ScatterPaCacheOptions options;
        options.compress_lens = scope.optional_tensor(compress_lens, "compress_lens", Access::read);
        options.compress_seq_offsets =
            scope.optional_tensor(compress_seq_offsets, "compress_seq_offsets", Access::read);
        options.seq_lens = scope.optional_tensor(seq_lens, "seq_lens", Access::read);
        const ScatterPaCachePlan plan = plan_scatter_pa_cache(k, kc, sm, options);
        nb::gil_scoped_release release;
        execute(plan);
      },
      nb::arg("key"), nb::arg("key_cache"), nb::arg("slot_mapping"),
      nb::arg("compress_lens").none(), nb::arg("compress_seq_offsets").none(),
      nb::arg("seq_lens").none(), nb::arg("dtype").none());
}

}  // namespace kvscatter::python
