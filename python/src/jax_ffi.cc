// XLA FFI handlers behind kvscatter.jax (CPU custom calls). The caches are aliased to the
// outputs (input_output_aliases in jax.ffi.ffi_call), so with donated caches XLA hands the
// handler the same buffer as input and output and the update happens in place; when XLA could
// not alias (it always can on the CPU, but the contract allows it) the handler copies first.
#include <nanobind/nanobind.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "bindings.h"
#include "kvscatter/error.h"
#include "kvscatter/kv_cache_update.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "xla/ffi/api/ffi.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace kvscatter::python {
namespace {

std::optional<DType> dtype_of(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32:
      return DType::float32;
    case ffi::DataType::F16:
      return DType::float16;
    case ffi::DataType::BF16:
      return DType::bfloat16;
    case ffi::DataType::S8:
      return DType::int8;
    case ffi::DataType::U8:
      return DType::uint8;
    case ffi::DataType::S16:
      return DType::int16;
    case ffi::DataType::U16:
      return DType::uint16;
    case ffi::DataType::S32:
      return DType::int32;
    case ffi::DataType::U32:
      return DType::uint32;
    case ffi::DataType::S64:
      return DType::int64;
    case ffi::DataType::F8E5M2:
      return DType::float8_e5m2;
    case ffi::DataType::F8E4M3FN:
      return DType::float8_e4m3fn;
    case ffi::DataType::F8E8M0FNU:
      return DType::float8_e8m0;
    default:
      return std::nullopt;
  }
}

// A dense row-major view of an XLA buffer (custom-call operands use the default layout).
TensorView view_of(const ffi::AnyBuffer& b, const char* name) {
  const std::optional<DType> d = dtype_of(b.element_type());
  if (!d) {
    throw Error(Status::invalid_parameter,
                std::string(name) + ": element type not supported by kvscatter");
  }
  const auto dims = b.dimensions();
  return TensorView(b.untyped_data(), *d, std::span<const std::int64_t>(dims.begin(), dims.size()));
}

// The output buffer aliased to input `in`: same memory when XLA aliased them, else a copy.
TensorView output_view(const ffi::AnyBuffer& in, ffi::Result<ffi::AnyBuffer>& out,
                       const char* name) {
  if (out->untyped_data() != in.untyped_data() && in.size_bytes() > 0) {
    std::memcpy(out->untyped_data(), in.untyped_data(), in.size_bytes());
  }
  return view_of(*out, name);
}

template <class F>
ffi::Error guarded(F&& f) {
  try {
    f();
    return ffi::Error::Success();
  } catch (const Error& e) {
    return ffi::Error::InvalidArgument(e.what());
  } catch (const std::exception& e) {
    return ffi::Error::Internal(e.what());
  }
}

ffi::Error kv_cache_update_impl(ffi::AnyBuffer key_cache, ffi::AnyBuffer value_cache,
                                ffi::AnyBuffer new_keys, ffi::AnyBuffer new_values,
                                ffi::BufferR0<ffi::S32> position,
                                ffi::Result<ffi::AnyBuffer> key_out,
                                ffi::Result<ffi::AnyBuffer> value_out) {
  return guarded([&] {
    const TensorView kc = output_view(key_cache, key_out, "key_cache");
    const TensorView vc = output_view(value_cache, value_out, "value_cache");
    const TensorView nk = view_of(new_keys, "new_keys");
    const TensorView nv = view_of(new_values, "new_values");
    // jax.lax.dynamic_update_slice semantics: a negative start counts from the end (start + S),
    // then the start is clamped to [0, S - L] so the update lies inside the cache. The native
    // API rejects such positions instead (docs/operators/kv_cache_update.md).
    const std::int64_t seq = kc.rank == 4 ? kc.dim(1) : 0;
    const std::int64_t limit = kc.rank == 4 && nk.rank == 4 ? seq - nk.dim(1) : 0;
    std::int64_t start = position.typed_data()[0];
    if (start < 0) start += seq;
    start = std::clamp<std::int64_t>(start, 0, std::max<std::int64_t>(limit, 0));
    kv_cache_update(kc, vc, nk, nv, start);
  });
}

ffi::Error scatter_pa_kv_cache_impl(ffi::AnyBuffer key, ffi::AnyBuffer value,
                                    ffi::AnyBuffer key_cache, ffi::AnyBuffer value_cache,
                                    ffi::AnyBuffer slot_mapping,
                                    ffi::Result<ffi::AnyBuffer> key_out,
                                    ffi::Result<ffi::AnyBuffer> value_out) {
  return guarded([&] {
    const TensorView kc = output_view(key_cache, key_out, "key_cache");
    const TensorView vc = output_view(value_cache, value_out, "value_cache");
    scatter_pa_kv_cache(view_of(key, "key"), view_of(value, "value"), kc, vc,
                        view_of(slot_mapping, "slot_mapping"));
  });
}

ffi::Error scatter_pa_kv_cache_key_impl(ffi::AnyBuffer key, ffi::AnyBuffer key_cache,
                                        ffi::AnyBuffer slot_mapping,
                                        ffi::Result<ffi::AnyBuffer> key_out) {
  return guarded([&] {
    const TensorView kc = output_view(key_cache, key_out, "key_cache");
    scatter_pa_kv_cache(view_of(key, "key"), std::nullopt, kc, std::nullopt,
                        view_of(slot_mapping, "slot_mapping"));
  });
}

}  // namespace
}  // namespace kvscatter::python

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterKvCacheUpdate, kvscatter::python::kv_cache_update_impl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::BufferR0<ffi::S32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterScatterPaKvCache,
                              kvscatter::python::scatter_pa_kv_cache_impl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterScatterPaKvCacheKey,
                              kvscatter::python::scatter_pa_kv_cache_key_impl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

namespace kvscatter::python {

void bind_jax_ffi(nb::module_& m) {
  m.attr("has_jax_ffi") = true;
  nb::dict handlers;
  handlers["kvscatter_kv_cache_update"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterKvCacheUpdate));
  handlers["kvscatter_scatter_pa_kv_cache"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterScatterPaKvCache));
  handlers["kvscatter_scatter_pa_kv_cache_key"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterScatterPaKvCacheKey));
  m.attr("jax_ffi_handlers") = handlers;
}

}  // namespace kvscatter::python
