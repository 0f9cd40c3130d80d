// indexer_quant_cache on NumPy / DLPack arrays: cache and cache_scale written in place. The
// Python layer (kvscatter/__init__.py) normalises quant_mode and x_scale.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.h"
#include "kvscatter/indexer_quant_cache.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace kvscatter::python {

void bind_indexer_quant_cache(nb::module_& m) {
  m.def(
      "indexer_quant_cache",
      [](nb::handle cache, nb::handle cache_scale, nb::handle x, nb::handle slot_mapping,
         const std::string& quant_mode, bool round_scale, double x_scale, nb::handle dtype) {
        ArgScope scope;
        TensorView c = scope.tensor(cache, "cache", Access::write);
        TensorView s = scope.tensor(cache_scale, "cache_scale", Access::write);
        TensorView xv = scope.tensor(x, "x", Access::read);
        TensorView sm = scope.tensor(slot_mapping, "slot_mapping", Access::read);
        apply_dtype_override(dtype, {{&xv, "x"}, {&c, "cache"}});
        IndexerQuantCacheOptions options;
        options.quant_mode = parse_indexer_quant_mode(quant_mode);
        options.round_scale = round_scale;
        options.x_scale = static_cast<float>(x_scale);
        const IndexerQuantCachePlan plan = plan_indexer_quant_cache(c, s, xv, sm, options);
        nb::gil_scoped_release release;
        execute(plan);
      },
      nb::arg("cache"), nb::arg("cache_scale"), nb::arg("x"), nb::arg("slot_mapping"),
      nb::arg("quant_mode"), nb::arg("round_scale"), nb::arg("x_scale"), nb::arg("dtype").none());
}

}  // namespace kvscatter::python
