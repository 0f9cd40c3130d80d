// One registration function per part of the extension (one file each).
#pragma once

#include <nanobind/nanobind.h>

namespace kvscatter::python {

void bind_formats(nanobind::module_& m);
void bind_kv_cache_update(nanobind::module_& m);
void bind_scatter_pa_kv_cache(nanobind::module_& m);
void bind_kv_compress_epilog(nanobind::module_& m);
void bind_scatter_pa_kv_cache_with_k_scale(nanobind::module_& m);
void bind_gather_pa_kv_cache(nanobind::module_& m);
void bind_scatter_pa_cache(nanobind::module_& m);
void bind_indexer_quant_cache(nanobind::module_& m);
void bind_paged_kv_write(nanobind::module_& m);
void bind_paged_cache_gather(nanobind::module_& m);
void bind_paged_latent_write(nanobind::module_& m);
// Sets has_jax_ffi and exposes the XLA FFI handlers as capsules (jax_ffi.cc).
void bind_jax_ffi(nanobind::module_& m);

}  // namespace kvscatter::python
