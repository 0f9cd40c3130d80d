// XLA FFI handlers behind kvscatter.jax (CPU custom calls). The caches are aliased to the
// outputs (input_output_aliases in jax.ffi.ffi_call), so with donated caches XLA hands the
// handler the same buffer as input and output and the update happens in place; when XLA could
// not alias (it always can on the CPU, but the contract allows it) the handler copies first.
#include <nanobind/nanobind.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bindings.h"
#include "dtype_override.h"
#include "kvscatter/error.h"
#include "kvscatter/gather_pa_kv_cache.h"
#include "kvscatter/indexer_quant_cache.h"
#include "kvscatter/kv_cache_update.h"
#include "kvscatter/kv_compress_epilog.h"
#include "kvscatter/paged_cache_gather.h"
#include "kvscatter/paged_kv_write.h"
#include "kvscatter/paged_latent_write.h"
#include "kvscatter/scatter_pa_cache.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"
#include "xla/ffi/api/ffi.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace kvscatter::python {
namespace {

std::optional<DType> dtype_of(ffi::DataType t) {
  switch (t) {
    case static_cast<ffi::DataType>(XLA_FFI_DataType_F32):
      return DType::float32;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_F16):
      return DType::float16;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_BF16):
      return DType::bfloat16;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_S8):
      return DType::int8;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_U8):
      return DType::uint8;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_S16):
      return DType::int16;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_U16):
      return DType::uint16;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_S32):
      return DType::int32;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_U32):
      return DType::uint32;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_S64):
      return DType::int64;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_F8E5M2):
      return DType::float8_e5m2;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_F8E4M3FN):
      return DType::float8_e4m3fn;
    case static_cast<ffi::DataType>(XLA_FFI_DataType_F8E8M0FNU):
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

// The dtype= keyword of the Python functions ("" when absent): integer buffers of the named
// type's width are read as that type (HiFloat8 and packed 4-bit floats travel as uint8).
void apply_dtype(std::string_view dtype, std::initializer_list<NamedView> views) {
  if (dtype.empty()) return;
  const std::optional<DType> want = dtype_from_name(dtype);
  if (!want) throw Error(Status::invalid_parameter, unknown_dtype_message(dtype));
  const std::string error = override_dtypes(*want, views);
  if (!error.empty()) throw Error(Status::invalid_parameter, error);
}

// Operands and results taken in order from RemainingArgs / RemainingRets.
class Operands {
 public:
  Operands(ffi::RemainingArgs args, ffi::RemainingRets rets) : args_(args), rets_(rets) {}
  ffi::AnyBuffer arg(const char* name) {
    ffi::ErrorOr<ffi::AnyBuffer> b = args_.get<ffi::AnyBuffer>(next_arg_++);
    if (b.has_error()) throw Error(Status::invalid_parameter, std::string(name) + ": missing");
    return *b;
  }
  TensorView input(const char* name) { return view_of(arg(name), name); }
  // The next result, aliased to the next operand.
  TensorView output(const char* name) {
    const ffi::AnyBuffer in = arg(name);
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> r = rets_.get<ffi::AnyBuffer>(next_ret_++);
    if (r.has_error()) throw Error(Status::invalid_parameter, std::string(name) + ": missing");
    return output_view(in, *r, name);
  }

 private:
  ffi::RemainingArgs args_;
  ffi::RemainingRets rets_;
  std::size_t next_arg_ = 0, next_ret_ = 0;
};

// A batch row b of a (B, ...) view: one sequence of the ragged form.
TensorView batch_row(const TensorView& v, std::int64_t b) {
  TensorView row = v;
  row.shape[0] = 1;
  row.data =
      static_cast<char*>(v.data) + b * v.strides[0] * static_cast<std::int64_t>(v.element_size());
  return row;
}

// Position b of an integer buffer, widened; an unsigned value past int64 saturates (it clamps
// to S - L all the same).
std::int64_t read_position(const ffi::AnyBuffer& p, std::size_t b) {
  const void* d = p.untyped_data();
  switch (p.element_type()) {
    case static_cast<ffi::DataType>(XLA_FFI_DataType_S8):
      return static_cast<const std::int8_t*>(d)[b];
    case static_cast<ffi::DataType>(XLA_FFI_DataType_S16):
      return static_cast<const std::int16_t*>(d)[b];
    case static_cast<ffi::DataType>(XLA_FFI_DataType_S32):
      return static_cast<const std::int32_t*>(d)[b];
    case static_cast<ffi::DataType>(XLA_FFI_DataType_S64):
      return static_cast<const std::int64_t*>(d)[b];
    case static_cast<ffi::DataType>(XLA_FFI_DataType_U8):
      return static_cast<const std::uint8_t*>(d)[b];
    case static_cast<ffi::DataType>(XLA_FFI_DataType_U16):
      return static_cast<const std::uint16_t*>(d)[b];
    case static_cast<ffi::DataType>(XLA_FFI_DataType_U32):
      return static_cast<const std::uint32_t*>(d)[b];
    case static_cast<ffi::DataType>(XLA_FFI_DataType_U64): {
      const std::uint64_t v = static_cast<const std::uint64_t*>(d)[b];
      return v > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(v);
    }
    default:
      throw Error(Status::invalid_parameter, "position: must be an integer");
  }
}

// The start jax.lax.dynamic_update_slice uses: a negative (signed) start counts from the end,
// then the start is clamped into [0, S - L] so the update lies inside the cache. The native
// API rejects such positions instead.
std::int64_t clamped_start(std::int64_t start, const TensorView& cache, const TensorView& update) {
  const std::int64_t seq = cache.rank == 4 ? cache.dim(1) : 0;
  const std::int64_t limit = cache.rank == 4 && update.rank == 4 ? seq - update.dim(1) : 0;
  if (start < 0) start += seq;
  return std::clamp<std::int64_t>(start, 0, std::max<std::int64_t>(limit, 0));
}

// position: one start (any integer dtype) for every sequence, or one per batch row (the
// batched form that jax.vmap over a per-sequence position lowers to). Every row is planned
// before any is written.
ffi::Error kv_cache_update_impl(ffi::AnyBuffer key_cache, ffi::AnyBuffer value_cache,
                                ffi::AnyBuffer new_keys, ffi::AnyBuffer new_values,
                                ffi::AnyBuffer position, ffi::Result<ffi::AnyBuffer> key_out,
                                ffi::Result<ffi::AnyBuffer> value_out) {
  return guarded([&] {
    const TensorView kc = output_view(key_cache, key_out, "key_cache");
    const TensorView vc = output_view(value_cache, value_out, "value_cache");
    const TensorView nk = view_of(new_keys, "new_keys");
    const TensorView nv = view_of(new_values, "new_values");
    const std::int64_t count = static_cast<std::int64_t>(position.element_count());
    if (position.dimensions().size() == 0) {
      kv_cache_update(kc, vc, nk, nv, clamped_start(read_position(position, 0), kc, nk));
      return;
    }
    const std::int64_t batch = kc.rank == 4 ? kc.dim(0) : -1;
    if (count != batch || nk.rank != 4 || nv.rank != 4 || vc.rank != 4) {
      throw Error(Status::invalid_parameter,
                  "position: expected a scalar or B = " + std::to_string(batch) + " starts, got " +
                      std::to_string(count));
    }
    std::vector<KvCacheUpdatePlan> plans;
    plans.reserve(static_cast<std::size_t>(count));
    for (std::int64_t b = 0; b < count; ++b) {
      const std::int64_t start = read_position(position, static_cast<std::size_t>(b));
      plans.push_back(plan_kv_cache_update(batch_row(kc, b), batch_row(vc, b), batch_row(nk, b),
                                           batch_row(nv, b), clamped_start(start, kc, nk)));
    }
    for (const KvCacheUpdatePlan& plan : plans) execute(plan);
  });
}

// The paged scatter in every mode. Operands, in order: key, [value], key_cache, [value_cache],
// slot_mapping, [compress_lens], [compress_seq_offsets], [seq_lens]; `present` says which of
// the optional ones are there (bits 1, 2, 4, 8 in that order). Results: the caches.
ffi::Error scatter_pa_kv_cache_impl(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                    std::string_view cache_mode, std::string_view scatter_mode,
                                    std::int64_t present, ffi::Span<const std::int64_t> strides,
                                    ffi::Span<const std::int64_t> offsets) {
  return guarded([&] {
    std::size_t next = 0;
    auto arg = [&](const char* name) {
      ffi::ErrorOr<ffi::AnyBuffer> b = args.get<ffi::AnyBuffer>(next++);
      if (b.has_error()) throw Error(Status::invalid_parameter, std::string(name) + ": missing");
      return *b;
    };
    auto ret = [&](std::size_t i, const ffi::AnyBuffer& in, const char* name) {
      ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> r = rets.get<ffi::AnyBuffer>(i);
      if (r.has_error()) throw Error(Status::invalid_parameter, std::string(name) + ": missing");
      return output_view(in, *r, name);
    };
    const bool has_value = present & 1;
    const TensorView key = view_of(arg("key"), "key");
    std::optional<TensorView> value;
    if (has_value) value = view_of(arg("value"), "value");
    const TensorView kc = ret(0, arg("key_cache"), "key_cache");
    std::optional<TensorView> vc;
    if (has_value) vc = ret(1, arg("value_cache"), "value_cache");
    const TensorView slots = view_of(arg("slot_mapping"), "slot_mapping");
    ScatterPaKvCacheOptions options;
    if (present & 2) options.compress_lens = view_of(arg("compress_lens"), "compress_lens");
    if (present & 4) {
      options.compress_seq_offsets = view_of(arg("compress_seq_offsets"), "compress_seq_offsets");
    }
    if (present & 8) options.seq_lens = view_of(arg("seq_lens"), "seq_lens");
    options.cache_mode = parse_cache_mode(cache_mode);
    options.scatter_mode = parse_scatter_mode(scatter_mode);
    if (strides.size() == 2) options.strides = std::array<std::int64_t, 2>{strides[0], strides[1]};
    if (offsets.size() == 2) options.offsets = std::array<std::int64_t, 2>{offsets[0], offsets[1]};
    scatter_pa_kv_cache(key, value, kc, vc, slots, options);
  });
}

ffi::Error with_k_scale_impl(ffi::AnyBuffer key, ffi::AnyBuffer value, ffi::AnyBuffer key_cache,
                             ffi::AnyBuffer value_cache, ffi::AnyBuffer slot_mapping,
                             ffi::AnyBuffer key_scale, ffi::AnyBuffer key_scale_cache,
                             ffi::Result<ffi::AnyBuffer> key_out,
                             ffi::Result<ffi::AnyBuffer> value_out,
                             ffi::Result<ffi::AnyBuffer> scale_out, std::string_view cache_layout) {
  return guarded([&] {
    const TensorView kc = output_view(key_cache, key_out, "key_cache");
    const TensorView vc = output_view(value_cache, value_out, "value_cache");
    const TensorView ksc = output_view(key_scale_cache, scale_out, "key_scale_cache");
    scatter_pa_kv_cache_with_k_scale(
        view_of(key, "key"), view_of(value, "value"), kc, vc, view_of(slot_mapping, "slot_mapping"),
        view_of(key_scale, "key_scale"), ksc, parse_k_scale_cache_layout(cache_layout));
  });
}

ffi::Error kv_compress_epilog_impl(ffi::AnyBuffer cache, ffi::AnyBuffer x,
                                   ffi::AnyBuffer slot_mapping,
                                   ffi::Result<ffi::AnyBuffer> cache_out,
                                   std::int64_t quant_group_size, std::string_view quant_mode,
                                   bool round_scale, float x_scale) {
  return guarded([&] {
    const TensorView c = output_view(cache, cache_out, "cache");
    kv_compress_epilog(c, view_of(x, "x"), view_of(slot_mapping, "slot_mapping"), quant_group_size,
                       parse_quant_mode(quant_mode), round_scale, x_scale);
  });
}

// Operands: key_cache, [value_cache], block_tables, seq_lens, key, [value], [seq_offset];
// `present` bit 1: the value pair, bit 2: seq_offset. Results: key, [value].
ffi::Error gather_pa_kv_cache_impl(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                   std::string_view cache_mode, bool is_seq_lens_cumsum,
                                   std::int64_t present, std::string_view dtype) {
  return guarded([&] {
    Operands io(args, rets);
    const bool has_value = present & 1;
    TensorView kc = io.input("key_cache");
    std::optional<TensorView> vc;
    if (has_value) vc = io.input("value_cache");
    const TensorView bt = io.input("block_tables");
    const TensorView sl = io.input("seq_lens");
    TensorView k = io.output("key");
    std::optional<TensorView> v;
    if (has_value) v = io.output("value");
    GatherPaKvCacheOptions options;
    if (present & 2) options.seq_offset = io.input("seq_offset");
    options.is_seq_lens_cumsum = is_seq_lens_cumsum;
    options.cache_mode = parse_cache_mode(cache_mode);
    apply_dtype(dtype, {{&kc, "key_cache"},
                        {vc ? &*vc : nullptr, "value_cache"},
                        {&k, "key"},
                        {v ? &*v : nullptr, "value"}});
    gather_pa_kv_cache(kc, vc, bt, sl, k, v, options);
  });
}

// Operands: key, key_cache, slot_mapping, [compress_lens], [compress_seq_offsets], [seq_lens]
// (`present` bits 1, 2, 4). Result: key_cache.
ffi::Error scatter_pa_cache_impl(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                 std::int64_t present, std::string_view dtype) {
  return guarded([&] {
    Operands io(args, rets);
    TensorView k = io.input("key");
    TensorView kc = io.output("key_cache");
    const TensorView sm = io.input("slot_mapping");
    ScatterPaCacheOptions options;
    if (present & 1) options.compress_lens = io.input("compress_lens");
    if (present & 2) options.compress_seq_offsets = io.input("compress_seq_offsets");
    if (present & 4) options.seq_lens = io.input("seq_lens");
    apply_dtype(dtype, {{&k, "key"}, {&kc, "key_cache"}});
    scatter_pa_cache(k, kc, sm, options);
  });
}

ffi::Error indexer_quant_cache_impl(ffi::AnyBuffer cache, ffi::AnyBuffer cache_scale,
                                    ffi::AnyBuffer x, ffi::AnyBuffer slot_mapping,
                                    ffi::Result<ffi::AnyBuffer> cache_out,
                                    ffi::Result<ffi::AnyBuffer> scale_out,
                                    std::string_view quant_mode, bool round_scale, float x_scale,
                                    std::string_view dtype) {
  return guarded([&] {
    TensorView c = output_view(cache, cache_out, "cache");
    const TensorView s = output_view(cache_scale, scale_out, "cache_scale");
    TensorView xv = view_of(x, "x");
    apply_dtype(dtype, {{&xv, "x"}, {&c, "cache"}});
    IndexerQuantCacheOptions options;
    options.quant_mode = parse_indexer_quant_mode(quant_mode);
    options.round_scale = round_scale;
    options.x_scale = x_scale;
    indexer_quant_cache(c, s, xv, view_of(slot_mapping, "slot_mapping"), options);
  });
}

// Operands: key, value, key_cache, value_cache, slot_mapping, [k_scale, v_scale] (`present`
// bit 1). Results: the caches.
ffi::Error paged_kv_write_impl(ffi::RemainingArgs args, ffi::RemainingRets rets,
                               std::string_view format, std::string_view layout,
                               std::int64_t present) {
  return guarded([&] {
    Operands io(args, rets);
    const TensorView k = io.input("key");
    const TensorView v = io.input("value");
    const TensorView kc = io.output("key_cache");
    const TensorView vc = io.output("value_cache");
    const TensorView sm = io.input("slot_mapping");
    PagedKvWriteOptions o;
    if (present & 1) {
      o.k_scale = io.input("k_scale");
      o.v_scale = io.input("v_scale");
    }
    o.format = parse_kv_cache_format(format);
    o.layout = parse_kv_cache_layout(layout);
    paged_kv_write(k, v, kc, vc, sm, o);
  });
}

// Operands: src_cache, dst, block_table, cu_seq_lens, [scale], [seq_starts], [token_to_seq]
// (`present` bits 1, 2, 4). Result: dst.
ffi::Error paged_cache_gather_impl(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                   std::string_view format, std::int64_t batch_size,
                                   std::int64_t num_tokens, std::int64_t present) {
  return guarded([&] {
    Operands io(args, rets);
    const TensorView src = io.input("src_cache");
    const TensorView dst = io.output("dst");
    const TensorView bt = io.input("block_table");
    const TensorView cu = io.input("cu_seq_lens");
    PagedCacheGatherOptions o;
    if (present & 1) o.scale = io.input("scale");
    if (present & 2) o.seq_starts = io.input("seq_starts");
    if (present & 4) {
      o.token_to_seq = io.input("token_to_seq");
      o.num_tokens = num_tokens;
    }
    o.format = parse_kv_cache_format(format);
    o.batch_size = batch_size;
    paged_cache_gather(src, dst, bt, cu, o);
  });
}

// Operands: kv_c, k_pe, kv_cache, slot_mapping, [scale] (`present` bit 1). Result: kv_cache.
ffi::Error paged_latent_write_impl(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                   std::string_view format, std::int64_t present) {
  return guarded([&] {
    Operands io(args, rets);
    const TensorView c = io.input("kv_c");
    const TensorView p = io.input("k_pe");
    const TensorView cache = io.output("kv_cache");
    const TensorView sm = io.input("slot_mapping");
    PagedLatentWriteOptions o;
    if (present & 1) o.scale = io.input("scale");
    o.format = parse_latent_cache_format(format);
    paged_latent_write(c, p, cache, sm, o);
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
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterScatterPaKvCache,
                              kvscatter::python::scatter_pa_kv_cache_impl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("cache_mode")
                                  .Attr<std::string_view>("scatter_mode")
                                  .Attr<std::int64_t>("present")
                                  .Attr<ffi::Span<const std::int64_t>>("strides")
                                  .Attr<ffi::Span<const std::int64_t>>("offsets"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterScatterPaKvCacheWithKScale,
                              kvscatter::python::with_k_scale_impl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<std::string_view>("cache_layout"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterKvCompressEpilog, kvscatter::python::kv_compress_epilog_impl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<std::int64_t>("quant_group_size")
                                  .Attr<std::string_view>("quant_mode")
                                  .Attr<bool>("round_scale")
                                  .Attr<float>("x_scale"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterGatherPaKvCache, kvscatter::python::gather_pa_kv_cache_impl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("cache_mode")
                                  .Attr<bool>("is_seq_lens_cumsum")
                                  .Attr<std::int64_t>("present")
                                  .Attr<std::string_view>("dtype"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterScatterPaCache, kvscatter::python::scatter_pa_cache_impl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::int64_t>("present")
                                  .Attr<std::string_view>("dtype"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterIndexerQuantCache,
                              kvscatter::python::indexer_quant_cache_impl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<std::string_view>("quant_mode")
                                  .Attr<bool>("round_scale")
                                  .Attr<float>("x_scale")
                                  .Attr<std::string_view>("dtype"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterPagedKvWrite, kvscatter::python::paged_kv_write_impl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("format")
                                  .Attr<std::string_view>("layout")
                                  .Attr<std::int64_t>("present"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterPagedCacheGather, kvscatter::python::paged_cache_gather_impl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("format")
                                  .Attr<std::int64_t>("batch_size")
                                  .Attr<std::int64_t>("num_tokens")
                                  .Attr<std::int64_t>("present"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(KvscatterPagedLatentWrite, kvscatter::python::paged_latent_write_impl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<std::string_view>("format")
                                  .Attr<std::int64_t>("present"));

namespace kvscatter::python {

void bind_jax_ffi(nb::module_& m) {
  m.attr("has_jax_ffi") = true;
  nb::dict handlers;
  handlers["kvscatter_kv_cache_update"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterKvCacheUpdate));
  handlers["kvscatter_scatter_pa_kv_cache"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterScatterPaKvCache));
  handlers["kvscatter_scatter_pa_kv_cache_with_k_scale"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterScatterPaKvCacheWithKScale));
  handlers["kvscatter_kv_compress_epilog"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterKvCompressEpilog));
  handlers["kvscatter_gather_pa_kv_cache"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterGatherPaKvCache));
  handlers["kvscatter_scatter_pa_cache"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterScatterPaCache));
  handlers["kvscatter_indexer_quant_cache"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterIndexerQuantCache));
  handlers["kvscatter_paged_kv_write"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterPagedKvWrite));
  handlers["kvscatter_paged_cache_gather"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterPagedCacheGather));
  handlers["kvscatter_paged_latent_write"] =
      nb::capsule(reinterpret_cast<void*>(&KvscatterPagedLatentWrite));
  m.attr("jax_ffi_handlers") = handlers;
}

}  // namespace kvscatter::python
