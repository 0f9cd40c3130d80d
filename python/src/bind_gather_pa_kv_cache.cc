// gather_pa_kv_cache on NumPy / DLPack arrays: key and value written in place.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "kvscatter/gather_pa_kv_cache.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace kvscatter::python {
namespace {

CacheMode cache_mode_arg(nb::handle obj) {
  if (obj.is_none()) return CacheMode::Norm;
  if (!nb::isinstance<nb::str>(obj)) {
    throw nb::type_error(
        ("cache_mode must be a str or None, got " + nb::cast<std::string>(nb::repr(obj))).c_str());
  }
  return parse_cache_mode(nb::cast<std::string>(obj));
}

bool bool_arg(nb::handle obj, const char* name) {
  if (!PyBool_Check(obj.ptr())) {
    throw nb::type_error(
        (std::string(name) + " must be a bool, got " + nb::cast<std::string>(nb::repr(obj)))
            .c_str());
  }
  return obj.ptr() == Py_True;
}

}  // namespace

void bind_gather_pa_kv_cache(nb::module_& m) {
  m.def(
      "gather_pa_kv_cache",
      [](nb::handle key_cache, nb::handle value_cache, nb::handle block_tables, nb::handle seq_lens,
         nb::handle key, nb::handle value, nb::handle seq_offset, nb::handle is_seq_lens_cumsum,
         nb::handle cache_mode, nb::handle dtype) {
        ArgScope scope;
        TensorView kc = scope.tensor(key_cache, "key_cache", Access::read);
        std::optional<TensorView> vc =
            scope.optional_tensor(value_cache, "value_cache", Access::read);
        TensorView bt = scope.tensor(block_tables, "block_tables", Access::read);
        TensorView sl = scope.tensor(seq_lens, "seq_lens", Access::read);
        TensorView k = scope.tensor(key, "key", Access::write);
        std::optional<TensorView> v = scope.optional_tensor(value, "value", Access::write);
        apply_dtype_override(dtype, {{&kc, "key_cache"},
                                     {vc ? &*vc : nullptr, "value_cache"},
                                     {&k, "key"},
                                     {v ? &*v : nullptr, "value"}});
        GatherPaKvCacheOptions options;
        options.seq_offset = scope.optional_tensor(seq_offset, "seq_offset", Access::read);
        options.is_seq_lens_cumsum = bool_arg(is_seq_lens_cumsum, "is_seq_lens_cumsum");
        options.cache_mode = cache_mode_arg(cache_mode);
        const GatherPaKvCachePlan plan = plan_gather_pa_kv_cache(kc, vc, bt, sl, k, v, options);
        nb::gil_scoped_release release;
        execute(plan);
      },
      nb::arg("key_cache"), nb::arg("value_cache").none(), nb::arg("block_tables"),
      nb::arg("seq_lens"), nb::arg("key"), nb::arg("value").none(), nb::arg("seq_offset").none(),
      nb::arg("is_seq_lens_cumsum"), nb::arg("cache_mode").none(), nb::arg("dtype").none());
}

}  // namespace kvscatter::python
