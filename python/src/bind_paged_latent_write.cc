// paged_latent_write on NumPy / DLPack arrays, in place.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.h"
#include "kvscatter/paged_latent_write.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace kvscatter::python {

void bind_paged_latent_write(nb::module_& m) {
  m.def(
      "paged_latent_write",
      [](nb::handle kv_c, nb::handle k_pe, nb::handle kv_cache, nb::handle slot_mapping,
         nb::handle format, nb::handle scale, nb::handle input_dtype) {
        PagedLatentWriteOptions o;
        o.format = parse_latent_cache_format(str_arg(format, "format", "copy"));
        ArgScope scope;
        const TensorView c = scope.tensor(kv_c, "kv_c", Access::read);
        const TensorView p = scope.tensor(k_pe, "k_pe", Access::read);
        const TensorView cache = scope.tensor(kv_cache, "kv_cache", Access::write);
        const TensorView sm = scope.tensor(slot_mapping, "slot_mapping", Access::read);
        o.scale = scope.optional_tensor(scale, "scale", Access::read);
        // The vLLM adapter's "float16" / "bfloat16" cache types promise the input dtype.
        if (!input_dtype.is_none()) {
          const std::string want = nb::cast<std::string>(input_dtype);
          if (dtype_name(c.dtype) != want) {
            throw nb::value_error(("kv_c dtype " + std::string(dtype_name(c.dtype)) +
                                   " does not match kv_cache_dtype '" + want + "'")
                                      .c_str());
          }
        }
        const PagedLatentWritePlan plan = plan_paged_latent_write(c, p, cache, sm, o);
        nb::gil_scoped_release release;
        execute(plan);
      },
      nb::arg("kv_c").none(), nb::arg("k_pe").none(), nb::arg("kv_cache").none(),
      nb::arg("slot_mapping").none(), nb::arg("format").none(), nb::arg("scale").none(),
      nb::arg("input_dtype").none());
}

}  // namespace kvscatter::python
