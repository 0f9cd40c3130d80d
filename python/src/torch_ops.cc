// kvscatter._torch_ops: the operators as native PyTorch operators, torch.ops.kvscatter.<op>.
//
// Each operator is one schema (mutated caches marked Tensor(a!), nothing returned), one CPU
// kernel that views the tensors' memory directly (data pointer, sizes, strides, dtype) and
// calls the C++ API, and one kernel for every other device that says kvscatter runs on CPU
// tensors. The fake (meta) kernels live in python/kvscatter/torch.py. Adding an operator: write
// its <op>_cpu function below and one add_op line in TORCH_LIBRARY; list it in torch.py.
//
// Every call into the C++ API of the library is in this file, in the "Operators" section.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <nanobind/nanobind.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

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
#include "kvscatter/tensor.h"

namespace kvscatter::torch_ops {
namespace {

using OptTensor = std::optional<at::Tensor>;
using OptStr = std::optional<c10::string_view>;

std::optional<DType> dtype_of(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return DType::float32;
    case c10::ScalarType::Half:
      return DType::float16;
    case c10::ScalarType::BFloat16:
      return DType::bfloat16;
    case c10::ScalarType::Char:
      return DType::int8;
    case c10::ScalarType::Byte:
      return DType::uint8;
    case c10::ScalarType::Short:
      return DType::int16;
    case c10::ScalarType::UInt16:
      return DType::uint16;
    case c10::ScalarType::Int:
      return DType::int32;
    case c10::ScalarType::UInt32:
      return DType::uint32;
    case c10::ScalarType::Long:
      return DType::int64;
    case c10::ScalarType::Float8_e5m2:
      return DType::float8_e5m2;
    case c10::ScalarType::Float8_e4m3fn:
      return DType::float8_e4m3fn;
    case c10::ScalarType::Float8_e8m0fnu:
      return DType::float8_e8m0;
    case c10::ScalarType::Float4_e2m1fn_x2:  // two elements per byte, as kvscatter packs them
      return DType::float4_e2m1;
    default:
      return std::nullopt;
  }
}

// A view of a CPU tensor's memory: no copy, no DLPack.
TensorView view(const at::Tensor& t, const char* name) {
  TORCH_CHECK_TYPE(t.defined(), name, " is required, got None");
  TORCH_CHECK(t.device().is_cpu(), "kvscatter runs on CPU tensors: ", name, " is on ",
              t.device().str());
  const std::optional<DType> d = dtype_of(t.scalar_type());
  TORCH_CHECK_TYPE(d.has_value(), name, ": dtype ", c10::toString(t.scalar_type()),
                   " is not supported by kvscatter");
  const std::int64_t rank = t.dim();
  TORCH_CHECK_VALUE(rank <= kMaxRank, name, ": rank must be <= ", kMaxRank, ", got ", rank);
  TensorView v;
  v.data = t.data_ptr();
  v.dtype = *d;
  v.rank = static_cast<int>(rank);
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  bool empty = false;
  for (std::size_t i = 0; i < static_cast<std::size_t>(rank); ++i) {
    v.shape[i] = sizes[i];
    v.strides[i] = strides[i];
    empty = empty || sizes[i] == 0;
  }
  // An empty tensor addresses no memory; its strides mean nothing to the checks.
  if (empty) {
    v.strides = contiguous_strides(
        std::span<const std::int64_t>(v.shape.data(), static_cast<std::size_t>(rank)));
  }
  if (dtype_bits(v.dtype) == 4) {  // torch.float4_e2m1fn_x2: one element per byte pair
    const std::string error = python::count_fp4_elements(v, name);
    TORCH_CHECK_VALUE(error.empty(), error);
  }
  return v;
}

std::optional<TensorView> view(const OptTensor& t, const char* name) {
  if (!t.has_value()) return std::nullopt;
  return view(*t, name);
}

std::string_view str_or(const OptStr& s, std::string_view fallback) {
  return s.has_value() ? std::string_view(s->data(), s->size()) : fallback;
}

void apply_dtype(const OptStr& dtype, std::initializer_list<python::NamedView> views) {
  if (!dtype.has_value()) return;
  const std::string_view name(dtype->data(), dtype->size());
  const std::optional<DType> want = dtype_from_name(name);
  TORCH_CHECK_VALUE(want.has_value(), python::unknown_dtype_message(name));
  const std::string error = python::override_dtypes(*want, views);
  TORCH_CHECK_VALUE(error.empty(), error);
}

std::optional<std::array<std::int64_t, 2>> pair(at::OptionalIntArrayRef list, const char* name) {
  if (!list.has_value()) return std::nullopt;
  TORCH_CHECK_VALUE(list->size() == 2, name, " must have 2 entries, got ", list->size());
  return std::array<std::int64_t, 2>{(*list)[0], (*list)[1]};
}

// The library's errors arrive in Python as ValueError with the library's message.
template <class F>
void guarded(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
}

// ---- Operators: the calls into the C++ API -----------------------------------------------

void scatter_pa_kv_cache_cpu(const at::Tensor& key, const OptTensor& value,
                             const at::Tensor& key_cache, const OptTensor& value_cache,
                             const at::Tensor& slot_mapping, const OptTensor& compress_lens,
                             const OptTensor& compress_seq_offsets, const OptTensor& seq_lens,
                             OptStr cache_mode, OptStr scatter_mode,
                             at::OptionalIntArrayRef strides, at::OptionalIntArrayRef offsets,
                             OptStr dtype) {
  TensorView k = view(key, "key");
  std::optional<TensorView> v = view(value, "value");
  TensorView kc = view(key_cache, "key_cache");
  std::optional<TensorView> vc = view(value_cache, "value_cache");
  const TensorView sm = view(slot_mapping, "slot_mapping");
  apply_dtype(dtype, {{&k, "key"},
                      {v ? &*v : nullptr, "value"},
                      {&kc, "key_cache"},
                      {vc ? &*vc : nullptr, "value_cache"}});
  ScatterPaKvCacheOptions options;
  options.compress_lens = view(compress_lens, "compress_lens");
  options.compress_seq_offsets = view(compress_seq_offsets, "compress_seq_offsets");
  options.seq_lens = view(seq_lens, "seq_lens");
  options.strides = pair(strides, "strides");
  options.offsets = pair(offsets, "offsets");
  guarded([&] {
    options.cache_mode = parse_cache_mode(str_or(cache_mode, "Norm"));
    options.scatter_mode = parse_scatter_mode(str_or(scatter_mode, "None"));
    execute(plan_scatter_pa_kv_cache(k, v, kc, vc, sm, options));
  });
}

void scatter_pa_kv_cache_with_k_scale_cpu(
    const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
    const at::Tensor& value_cache, const at::Tensor& slot_mapping, const at::Tensor& key_scale,
    const at::Tensor& key_scale_cache, OptStr cache_layout, OptStr dtype) {
  TensorView k = view(key, "key");
  TensorView v = view(value, "value");
  TensorView kc = view(key_cache, "key_cache");
  TensorView vc = view(value_cache, "value_cache");
  const TensorView sm = view(slot_mapping, "slot_mapping");
  const TensorView ks = view(key_scale, "key_scale");
  const TensorView ksc = view(key_scale_cache, "key_scale_cache");
  apply_dtype(dtype, {{&k, "key"}, {&v, "value"}, {&kc, "key_cache"}, {&vc, "value_cache"}});
  guarded([&] {
    const KScaleCacheLayout layout = parse_k_scale_cache_layout(str_or(cache_layout, "BNBD"));
    execute(plan_scatter_pa_kv_cache_with_k_scale(k, v, kc, vc, sm, ks, ksc, layout));
  });
}

void kv_compress_epilog_cpu(const at::Tensor& cache, const at::Tensor& x,
                            const at::Tensor& slot_mapping, std::int64_t quant_group_size,
                            c10::string_view quant_mode, bool round_scale, double x_scale,
                            OptStr dtype) {
  const TensorView c = view(cache, "cache");
  TensorView xv = view(x, "x");
  const TensorView sm = view(slot_mapping, "slot_mapping");
  apply_dtype(dtype, {{&xv, "x"}});
  guarded([&] {
    const QuantMode mode = parse_quant_mode(std::string_view(quant_mode.data(), quant_mode.size()));
    // The operator's x_scale is float32: round the double to nearest even, as torch does.
    execute(plan_kv_compress_epilog(c, xv, sm, quant_group_size, mode, round_scale,
                                    static_cast<float>(x_scale)));
  });
}

void kv_cache_update_cpu(const at::Tensor& key_cache, const at::Tensor& value_cache,
                         const at::Tensor& new_keys, const at::Tensor& new_values,
                         std::int64_t position, OptStr dtype) {
  TensorView kc = view(key_cache, "key_cache");
  TensorView vc = view(value_cache, "value_cache");
  TensorView nk = view(new_keys, "new_keys");
  TensorView nv = view(new_values, "new_values");
  apply_dtype(dtype,
              {{&kc, "key_cache"}, {&vc, "value_cache"}, {&nk, "new_keys"}, {&nv, "new_values"}});
  guarded([&] { execute(plan_kv_cache_update(kc, vc, nk, nv, position)); });
}

void gather_pa_kv_cache_cpu(const at::Tensor& key_cache, const OptTensor& value_cache,
                            const at::Tensor& block_tables, const at::Tensor& seq_lens,
                            const at::Tensor& key, const OptTensor& value,
                            const OptTensor& seq_offset, bool is_seq_lens_cumsum, OptStr cache_mode,
                            OptStr dtype) {
  TensorView kc = view(key_cache, "key_cache");
  std::optional<TensorView> vc = view(value_cache, "value_cache");
  const TensorView bt = view(block_tables, "block_tables");
  const TensorView sl = view(seq_lens, "seq_lens");
  TensorView k = view(key, "key");
  std::optional<TensorView> v = view(value, "value");
  apply_dtype(dtype, {{&kc, "key_cache"},
                      {vc ? &*vc : nullptr, "value_cache"},
                      {&k, "key"},
                      {v ? &*v : nullptr, "value"}});
  GatherPaKvCacheOptions options;
  options.seq_offset = view(seq_offset, "seq_offset");
  options.is_seq_lens_cumsum = is_seq_lens_cumsum;
  guarded([&] {
    options.cache_mode = parse_cache_mode(str_or(cache_mode, "Norm"));
    execute(plan_gather_pa_kv_cache(kc, vc, bt, sl, k, v, options));
  });
}

void scatter_pa_cache_cpu(const at::Tensor& key, const at::Tensor& key_cache,
                          const at::Tensor& slot_mapping, const OptTensor& compress_lens,
                          const OptTensor& compress_seq_offsets, const OptTensor& seq_lens,
                          OptStr dtype) {
  TensorView k = view(key, "key");
  TensorView kc = view(key_cache, "key_cache");
  const TensorView sm = view(slot_mapping, "slot_mapping");
  apply_dtype(dtype, {{&k, "key"}, {&kc, "key_cache"}});
  ScatterPaCacheOptions options;
  options.compress_lens = view(compress_lens, "compress_lens");
  options.compress_seq_offsets = view(compress_seq_offsets, "compress_seq_offsets");
  options.seq_lens = view(seq_lens, "seq_lens");
  guarded([&] { execute(plan_scatter_pa_cache(k, kc, sm, options)); });
}

void indexer_quant_cache_cpu(const at::Tensor& cache, const at::Tensor& cache_scale,
                             const at::Tensor& x, const at::Tensor& slot_mapping,
                             c10::string_view quant_mode, bool round_scale, double x_scale,
                             OptStr dtype) {
  TensorView c = view(cache, "cache");
  const TensorView s = view(cache_scale, "cache_scale");
  TensorView xv = view(x, "x");
  const TensorView sm = view(slot_mapping, "slot_mapping");
  apply_dtype(dtype, {{&xv, "x"}, {&c, "cache"}});
  IndexerQuantCacheOptions options;
  options.round_scale = round_scale;
  // The operator's x_scale is float32: round the double to nearest even, as torch does.
  options.x_scale = static_cast<float>(x_scale);
  guarded([&] {
    options.quant_mode =
        parse_indexer_quant_mode(std::string_view(quant_mode.data(), quant_mode.size()));
    execute(plan_indexer_quant_cache(c, s, xv, sm, options));
  });
}

void paged_kv_write_cpu(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                        const at::Tensor& value_cache, const at::Tensor& slot_mapping,
                        c10::string_view format, c10::string_view layout, const OptTensor& k_scale,
                        const OptTensor& v_scale) {
  PagedKvWriteOptions o;
  o.k_scale = view(k_scale, "k_scale");
  o.v_scale = view(v_scale, "v_scale");
  const TensorView k = view(key, "key");
  const TensorView v = view(value, "value");
  const TensorView kc = view(key_cache, "key_cache");
  const TensorView vc = view(value_cache, "value_cache");
  const TensorView sm = view(slot_mapping, "slot_mapping");
  guarded([&] {
    o.format = parse_kv_cache_format(std::string_view(format.data(), format.size()));
    o.layout = parse_kv_cache_layout(std::string_view(layout.data(), layout.size()));
    execute(plan_paged_kv_write(k, v, kc, vc, sm, o));
  });
}

void paged_cache_gather_cpu(const at::Tensor& src_cache, const at::Tensor& dst,
                            const at::Tensor& block_table, const at::Tensor& cu_seq_lens,
                            c10::string_view format, const OptTensor& scale,
                            std::int64_t batch_size, const OptTensor& seq_starts,
                            const OptTensor& token_to_seq, std::int64_t num_tokens) {
  PagedCacheGatherOptions o;
  o.scale = view(scale, "scale");
  o.batch_size = batch_size;
  o.seq_starts = view(seq_starts, "seq_starts");
  o.token_to_seq = view(token_to_seq, "token_to_seq");
  if (o.token_to_seq) o.num_tokens = num_tokens;
  const TensorView src = view(src_cache, "src_cache");
  const TensorView out = view(dst, "dst");
  const TensorView bt = view(block_table, "block_table");
  const TensorView cu = view(cu_seq_lens, "cu_seq_lens");
  guarded([&] {
    o.format = parse_kv_cache_format(std::string_view(format.data(), format.size()));
    execute(plan_paged_cache_gather(src, out, bt, cu, o));
  });
}

void paged_latent_write_cpu(const at::Tensor& kv_c, const at::Tensor& k_pe,
                            const at::Tensor& kv_cache, const at::Tensor& slot_mapping,
                            c10::string_view format, const OptTensor& scale) {
  PagedLatentWriteOptions o;
  o.scale = view(scale, "scale");
  const TensorView c = view(kv_c, "kv_c");
  const TensorView p = view(k_pe, "k_pe");
  const TensorView cache = view(kv_cache, "kv_cache");
  const TensorView sm = view(slot_mapping, "slot_mapping");
  guarded([&] {
    o.format = parse_latent_cache_format(std::string_view(format.data(), format.size()));
    execute(plan_paged_latent_write(c, p, cache, sm, o));
  });
}

// ---- vLLM's names (kvscatter.vllm): kv_cache_dtype strings mapped onto the native ops ------

// A vLLM kv_cache_dtype: the kvscatter format, and the input dtype the named 16-bit cache
// types promise ("" when any float input goes). The messages are kvscatter.vllm's.
std::pair<std::string_view, std::string_view> vllm_format(c10::string_view kv_cache_dtype,
                                                          const char* op, bool ds_mla) {
  const std::string_view t(kv_cache_dtype.data(), kv_cache_dtype.size());
  if (t == "auto") return {"copy", ""};
  if (t == "float16" || t == "bfloat16") return {"copy", t};
  if (t == "fp8" || t == "fp8_e4m3") return {"fp8_e4m3", ""};
  if (t == "fp8_e5m2") return {"fp8_e5m2", ""};
  if (ds_mla && t == "fp8_ds_mla") return {"fp8_ds_mla", ""};
  TORCH_CHECK_VALUE(false, "kv_cache_dtype '", t, "' is not supported by ", op,
                    " (expected one of 'auto', 'float16', 'bfloat16', 'fp8', 'fp8_e4m3', "
                    "'fp8_e5m2'",
                    ds_mla ? ", 'fp8_ds_mla'" : "", ")");
  return {};
}

std::string_view dtype_name_of(const at::Tensor& t) {
  const std::optional<DType> d = dtype_of(t.scalar_type());
  return d ? dtype_name(*d) : c10::toString(t.scalar_type());
}

void check_input_dtype(const at::Tensor& t, const char* name, std::string_view want) {
  if (want.empty()) return;
  TORCH_CHECK_VALUE(dtype_name_of(t) == want, name, " dtype ", dtype_name_of(t),
                    " does not match kv_cache_dtype '", want, "'");
}

c10::string_view sv(std::string_view s) { return c10::string_view(s.data(), s.size()); }

void reshape_and_cache_flash_cpu(const at::Tensor& key, const at::Tensor& value,
                                 const at::Tensor& key_cache, const at::Tensor& value_cache,
                                 const at::Tensor& slot_mapping, c10::string_view kv_cache_dtype,
                                 const at::Tensor& k_scale, const at::Tensor& v_scale) {
  const auto [format, input] = vllm_format(kv_cache_dtype, "reshape_and_cache_flash", false);
  check_input_dtype(key, "key", input);
  paged_kv_write_cpu(key, value, key_cache, value_cache, slot_mapping, sv(format), "NHD", k_scale,
                     v_scale);
}

void concat_and_cache_mla_cpu(const at::Tensor& kv_c, const at::Tensor& k_pe,
                              const at::Tensor& kv_cache, const at::Tensor& slot_mapping,
                              c10::string_view kv_cache_dtype, const at::Tensor& scale) {
  const auto [format, input] = vllm_format(kv_cache_dtype, "concat_and_cache_mla", true);
  check_input_dtype(kv_c, "kv_c", input);
  paged_latent_write_cpu(kv_c, k_pe, kv_cache, slot_mapping, sv(format), scale);
}

void gather_and_maybe_dequant_cache_cpu(const at::Tensor& src_cache, const at::Tensor& dst,
                                        const at::Tensor& block_table,
                                        const at::Tensor& cu_seq_lens,
                                        const at::Tensor& token_to_seq, std::int64_t num_tokens,
                                        c10::string_view kv_cache_dtype, const at::Tensor& scale,
                                        const OptTensor& seq_starts) {
  const auto [format, input] = vllm_format(kv_cache_dtype, "gather_and_maybe_dequant_cache", false);
  if (format == "copy" && input.empty()) {
    // "auto" stores the input type: dst is a float type and src_cache's.
    const c10::ScalarType t = dst.scalar_type();
    TORCH_CHECK_VALUE(
        t == c10::ScalarType::Float || t == c10::ScalarType::Half || t == c10::ScalarType::BFloat16,
        "dst dtype ", dtype_name_of(dst),
        " is not a float type (kv_cache_dtype 'auto' gathers float32, float16 or "
        "bfloat16 caches)");
    TORCH_CHECK_VALUE(t == src_cache.scalar_type(), "dst dtype ", dtype_name_of(dst),
                      " does not match src_cache dtype ", dtype_name_of(src_cache),
                      " (kv_cache_dtype 'auto' stores the input type)");
  } else {
    check_input_dtype(dst, "dst", input);
  }
  paged_cache_gather_cpu(src_cache, dst, block_table, cu_seq_lens, sv(format), scale, -1,
                         seq_starts, token_to_seq, num_tokens);
}

void cp_gather_cache_cpu(const at::Tensor& src_cache, const at::Tensor& dst,
                         const at::Tensor& block_table, const at::Tensor& cu_seq_lens,
                         std::int64_t batch_size, const OptTensor& seq_starts) {
  TORCH_CHECK_VALUE(batch_size >= 0, "batch_size must be >= 0, got ", batch_size);
  paged_cache_gather_cpu(src_cache, dst, block_table, cu_seq_lens, "copy", std::nullopt, batch_size,
                         seq_starts, std::nullopt, 0);
}

// ---- Registration ------------------------------------------------------------------------

// Any backend but the CPU (CUDA, XPU, ...): name the first tensor that is not on the CPU.
void other_device(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const std::size_t base = stack->size() - args.size();
  for (std::size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& arg = (*stack)[base + i];
    if (arg.isTensor() && !arg.toTensor().device().is_cpu()) {
      TORCH_CHECK(false, "kvscatter runs on CPU tensors: ", op.schema().name(), " got ",
                  args[i].name(), " on ", arg.toTensor().device().str());
    }
  }
  TORCH_CHECK(false, "kvscatter runs on CPU tensors: ", op.schema().name(),
              " was called with tensors on another device");
}

template <auto Fn>
void add_op(torch::Library& m, const char* schema) {
  m.def(schema);
  const std::string_view s(schema);
  const std::string name(s.substr(0, s.find('(')));
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(Fn)));
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::CompositeExplicitAutograd,
                                       torch::CppFunction::makeFromBoxedFunction<&other_device>()));
}

}  // namespace
}  // namespace kvscatter::torch_ops

TORCH_LIBRARY(kvscatter, m) {
  using namespace kvscatter::torch_ops;
  add_op<&scatter_pa_kv_cache_cpu>(
      m,
      "scatter_pa_kv_cache(Tensor key, Tensor? value, Tensor(a!) key_cache, "
      "Tensor(b!)? value_cache, Tensor slot_mapping, *, Tensor? compress_lens=None, "
      "Tensor? compress_seq_offsets=None, Tensor? seq_lens=None, str? cache_mode=None, "
      "str? scatter_mode=None, int[]? strides=None, int[]? offsets=None, str? dtype=None) -> ()");
  add_op<&scatter_pa_kv_cache_with_k_scale_cpu>(
      m,
      "scatter_pa_kv_cache_with_k_scale(Tensor key, Tensor value, Tensor(a!) key_cache, "
      "Tensor(b!) value_cache, Tensor slot_mapping, Tensor key_scale, "
      "Tensor(c!) key_scale_cache, *, str? cache_layout=None, str? dtype=None) -> ()");
  add_op<&kv_compress_epilog_cpu>(
      m,
      "kv_compress_epilog(Tensor(a!) cache, Tensor x, Tensor slot_mapping, *, "
      "int quant_group_size=64, str quant_mode=\"fp8_e8m0\", bool round_scale=True, "
      "float x_scale=1.0, str? dtype=None) -> ()");
  add_op<&kv_cache_update_cpu>(
      m,
      "kv_cache_update(Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor new_keys, "
      "Tensor new_values, int position, *, str? dtype=None) -> ()");
  add_op<&gather_pa_kv_cache_cpu>(
      m,
      "gather_pa_kv_cache(Tensor key_cache, Tensor? value_cache, Tensor "
      "block_tables, "
      "Tensor seq_lens, Tensor(a!) key, Tensor(b!)? value, *, Tensor? "
      "seq_offset=None, "
      "bool is_seq_lens_cumsum=False, str? cache_mode=None, str? "
      "dtype=None) -> ()");
  add_op<&scatter_pa_cache_cpu>(m,
                                "scatter_pa_cache(Tensor key, Tensor(a!) key_cache, Tensor "
                                "slot_mapping, *, "
                                "Tensor? compress_lens=None, Tensor? compress_seq_offsets=None, "
                                "Tensor? seq_lens=None, "
                                "str? dtype=None) -> ()");
  add_op<&indexer_quant_cache_cpu>(
      m,
      "indexer_quant_cache(Tensor(a!) cache, Tensor(b!) cache_scale, Tensor x, "
      "Tensor slot_mapping, *, str quant_mode=\"fp8\", bool round_scale=True, "
      "float x_scale=1.0, str? dtype=None) -> ()");
  add_op<&paged_kv_write_cpu>(
      m,
      "paged_kv_write(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
      "Tensor slot_mapping, str format=\"copy\", str layout=\"NHD\", Tensor? k_scale=None, "
      "Tensor? v_scale=None) -> ()");
  add_op<&paged_cache_gather_cpu>(
      m,
      "paged_cache_gather(Tensor src_cache, Tensor(a!) dst, Tensor block_table, "
      "Tensor cu_seq_lens, str format=\"copy\", Tensor? scale=None, int batch_size=-1, "
      "Tensor? seq_starts=None, Tensor? token_to_seq=None, int num_tokens=0) -> ()");
  add_op<&paged_latent_write_cpu>(
      m,
      "paged_latent_write(Tensor kv_c, Tensor k_pe, Tensor(a!) kv_cache, Tensor slot_mapping, "
      "str format=\"copy\", Tensor? scale=None) -> ()");
  add_op<&reshape_and_cache_flash_cpu>(
      m,
      "reshape_and_cache_flash(Tensor key, Tensor value, Tensor(a!) key_cache, "
      "Tensor(b!) value_cache, Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, "
      "Tensor v_scale) -> ()");
  add_op<&concat_and_cache_mla_cpu>(
      m,
      "concat_and_cache_mla(Tensor kv_c, Tensor k_pe, Tensor(a!) kv_cache, Tensor slot_mapping, "
      "str kv_cache_dtype, Tensor scale) -> ()");
  add_op<&gather_and_maybe_dequant_cache_cpu>(
      m,
      "gather_and_maybe_dequant_cache(Tensor src_cache, Tensor(a!) dst, Tensor block_table, "
      "Tensor cu_seq_lens, Tensor token_to_seq, int num_tokens, str kv_cache_dtype, "
      "Tensor scale, Tensor? seq_starts=None) -> ()");
  add_op<&cp_gather_cache_cpu>(
      m,
      "cp_gather_cache(Tensor src_cache, Tensor(a!) dst, Tensor block_table, "
      "Tensor cu_seq_lens, int batch_size, Tensor? seq_starts=None) -> ()");
}

// Importing kvscatter._torch_ops (after torch) runs the registrations above.
NB_MODULE(_torch_ops, m) {
  m.doc() = "kvscatter's PyTorch operators (torch.ops.kvscatter); import kvscatter.torch";
}
