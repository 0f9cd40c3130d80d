// scatter_pa_kv_cache on NumPy / DLPack arrays, in place.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "bindings.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace kvscatter::python {
namespace {

// strides / offsets: None or a sequence of two ints.
std::optional<std::array<std::int64_t, 2>> pair_arg(nb::handle obj, const char* name) {
  if (obj.is_none()) return std::nullopt;
  if (nb::isinstance<nb::str>(obj) || !PySequence_Check(obj.ptr())) {
    throw nb::type_error((std::string(name) + " must be a sequence of two ints or None, got " +
                          nb::cast<std::string>(nb::repr(obj)))
                             .c_str());
  }
  nb::sequence seq = nb::borrow<nb::sequence>(obj);
  const std::size_t n = nb::len(seq);
  if (n != 2) {
    throw nb::value_error(
        (std::string(name) + " must have 2 entries, got " + std::to_string(n)).c_str());
  }
  std::array<std::int64_t, 2> out{};
  for (std::size_t i = 0; i < 2; ++i) {
    out[i] = int_arg(seq[i], (std::string(name) + "[" + std::to_string(i) + "]").c_str());
  }
  return out;
}

}  // namespace

void bind_scatter_pa_kv_cache(nb::module_& m) {
  m.def(
      "scatter_pa_kv_cache",
      [](nb::handle key, nb::handle value, nb::handle key_cache, nb::handle value_cache,
         nb::handle slot_mapping, nb::handle compress_lens, nb::handle compress_seq_offsets,
         nb::handle seq_lens, nb::handle cache_mode, nb::handle scatter_mode, nb::handle strides,
         nb::handle offsets, nb::handle dtype) {
        ArgScope scope;
        TensorView k = scope.tensor(key, "key", Access::read);
        std::optional<TensorView> v = scope.optional_tensor(value, "value", Access::read);
        TensorView kc = scope.tensor(key_cache, "key_cache", Access::write);
        std::optional<TensorView> vc =
            scope.optional_tensor(value_cache, "value_cache", Access::write);
        TensorView sm = scope.tensor(slot_mapping, "slot_mapping", Access::read);
        apply_dtype_override(dtype, {{&k, "key"},
                                     {v ? &*v : nullptr, "value"},
                                     {&kc, "key_cache"},
                                     {vc ? &*vc : nullptr, "value_cache"}});
        ScatterPaKvCacheOptions options;
        options.compress_lens = scope.optional_tensor(compress_lens, "compress_lens", Access::read);
        options.compress_seq_offsets =
            scope.optional_tensor(compress_seq_offsets, "compress_seq_offsets", Access::read);
        options.seq_lens = scope.optional_tensor(seq_lens, "seq_lens", Access::read);
        const std::string cache_mode_text = str_arg(cache_mode, "cache_mode", "Norm");
        const std::string scatter_mode_text = str_arg(scatter_mode, "scatter_mode", "None");
        options.strides = pair_arg(strides, "strides");
        options.offsets = pair_arg(offsets, "offsets");
        options.cache_mode = parse_cache_mode(cache_mode_text);
        options.scatter_mode = parse_scatter_mode(scatter_mode_text);
        const ScatterPaKvCachePlan plan = plan_scatter_pa_kv_cache(k, v, kc, vc, sm, options);
        nb::gil_scoped_release release;
        execute(plan);
      },
      nb::arg("key"), nb::arg("value").none(), nb::arg("key_cache"), nb::arg("value_cache").none(),
      nb::arg("slot_mapping"), nb::arg("compress_lens").none(),
      nb::arg("compress_seq_offsets").none(), nb::arg("seq_lens").none(),
      nb::arg("cache_mode").none(), nb::arg("scatter_mode").none(), nb::arg("strides").none(),
      nb::arg("offsets").none(), nb::arg("dtype").none());
}

}  // namespace kvscatter::python
