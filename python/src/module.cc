// kvscatter._kvscatter: the compiled part of the Python package. The public, documented
// functions live in python/kvscatter/__init__.py and call the ones defined here.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "kvscatter/error.h"
#include "kvscatter/runtime.h"

namespace nb = nanobind;

namespace kvscatter::python {
namespace {

// kvscatter.Error: a ValueError carrying the library's status code.
PyObject* g_error_type = nullptr;

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const kvscatter::Error& e) {
    nb::object exc = nb::steal(PyObject_CallFunction(g_error_type, "s", e.what()));
    if (!exc.is_valid()) return;  // the call set its own exception
    nb::setattr(exc, "status", nb::int_(static_cast<long>(e.status())));
    PyErr_SetObject(g_error_type, exc.ptr());
  }
}

}  // namespace
}  // namespace kvscatter::python

NB_MODULE(_kvscatter, m) {
  using namespace kvscatter;
  m.doc() = "kvscatter native extension (use the kvscatter package, not this module)";

  nb::dict attrs;
  attrs["__doc__"] =
      "Error raised by the kvscatter library: a ValueError whose `status` attribute holds the "
      "library's status code (161001 null pointer, 161002 invalid parameter, 561000 internal).";
  attrs["status"] = 0;
  python::g_error_type = PyErr_NewException("kvscatter.Error", PyExc_ValueError, attrs.ptr());
  m.attr("Error") = nb::borrow(python::g_error_type);
  nb::register_exception_translator(python::translate);

  m.attr("__version__") = version_string();
  m.def("set_num_threads", &set_num_threads, nb::arg("n"));
  m.def("get_num_threads", &get_num_threads);
  m.def("simd_target", &simd_target);
  m.def("simd_targets_available", &simd_targets_available);

  python::bind_formats(m);
  python::bind_kv_cache_update(m);
  python::bind_scatter_pa_kv_cache(m);
  python::bind_scatter_pa_kv_cache_with_k_scale(m);
  python::bind_kv_compress_epilog(m);
  python::bind_gather_pa_kv_cache(m);
  python::bind_scatter_pa_cache(m);
  python::bind_indexer_quant_cache(m);
  python::bind_paged_kv_write(m);
  python::bind_paged_cache_gather(m);
  python::bind_paged_latent_write(m);
#ifdef KVSCATTER_HAVE_XLA_FFI
  python::bind_jax_ffi(m);
#else
  m.attr("has_jax_ffi") = false;
#endif
}
