// C ABI: errors, version, runtime settings, tensor descriptors and executors. The operator
// entry points live next to this file, one per operator header.
#include "c_api/c_api.h"

#include <span>
#include <utility>

#include "core/check.h"
#include "kvscatter/dtype.h"
#include "kvscatter/runtime.h"
#include "kvscatter/version.h"

namespace kvscatter::capi {
namespace {

static_assert(KVS_SUCCESS == static_cast<int>(Status::ok));
static_assert(KVS_ERROR_NULL_POINTER == static_cast<int>(Status::null_pointer));
static_assert(KVS_ERROR_INVALID_PARAMETER == static_cast<int>(Status::invalid_parameter));
static_assert(KVS_ERROR_INTERNAL == static_cast<int>(Status::internal_error));
static_assert(KVS_MAX_RANK == kMaxRank);
static_assert(sizeof(kvsDataType) == 4);

// The C enumerators and the C++ dtypes, pair by pair. The C values are ABI: they must never
// change, so the table is checked to list every DType exactly once, in the same order.
struct DTypePair {
  kvsDataType c;
  DType cpp;
};
constexpr std::array<DTypePair, kNumDTypes> kDTypes{{
    {KVS_FLOAT32, DType::float32},
    {KVS_FLOAT16, DType::float16},
    {KVS_BFLOAT16, DType::bfloat16},
    {KVS_INT8, DType::int8},
    {KVS_UINT8, DType::uint8},
    {KVS_INT16, DType::int16},
    {KVS_UINT16, DType::uint16},
    {KVS_INT32, DType::int32},
    {KVS_UINT32, DType::uint32},
    {KVS_INT64, DType::int64},
    {KVS_HIFLOAT8, DType::hifloat8},
    {KVS_FLOAT8_E5M2, DType::float8_e5m2},
    {KVS_FLOAT8_E4M3FN, DType::float8_e4m3fn},
    {KVS_FLOAT8_E8M0, DType::float8_e8m0},
    {KVS_FLOAT4_E2M1, DType::float4_e2m1},
    {KVS_FLOAT4_E1M2, DType::float4_e1m2},
}};

constexpr bool dtype_table_is_complete() {
  for (std::size_t i = 0; i < kDTypes.size(); ++i) {
    if (static_cast<std::size_t>(kDTypes[i].c) != i) return false;
    if (static_cast<std::size_t>(kDTypes[i].cpp) != i) return false;
  }
  return true;
}
static_assert(dtype_table_is_complete(),
              "kvsDataType and kvscatter::DType must list the same types in the same order");

std::optional<DType> to_dtype(kvsDataType dtype) noexcept {
  for (const DTypePair& p : kDTypes) {
    if (p.c == dtype) return p.cpp;
  }
  return std::nullopt;
}

thread_local std::string t_last_error;
thread_local bool t_last_error_lost = false;

}  // namespace

const char* planner_name(Op op) noexcept {
  switch (op) {
    case Op::scatter_pa_kv_cache:
      return "kvsScatterPaKvCacheGetWorkspaceSize";
    case Op::scatter_pa_kv_cache_with_k_scale:
      return "kvsScatterPaKvCacheWithKScaleGetWorkspaceSize";
    case Op::kv_compress_epilog:
      return "kvsKvCompressEpilogGetWorkspaceSize";
    case Op::kv_cache_update:
      return "kvsKvCacheUpdateGetWorkspaceSize";
    case Op::gather_pa_kv_cache:
      return "kvsGatherPaKvCacheGetWorkspaceSize";
    case Op::scatter_pa_cache:
      return "kvsScatterPaCacheGetWorkspaceSize";
    case Op::indexer_quant_cache:
      return "kvsIndexerQuantCacheGetWorkspaceSize";
    case Op::paged_kv_write:
      return "kvsPagedKvWriteGetWorkspaceSize";
    case Op::paged_cache_gather:
      return "kvsPagedCacheGatherGetWorkspaceSize";
    case Op::paged_latent_write:
      return "kvsPagedLatentWriteGetWorkspaceSize";
  }
  return "?";
}

const char* runner_name(Op op) noexcept {
  switch (op) {
    case Op::scatter_pa_kv_cache:
      return "kvsScatterPaKvCache";
    case Op::scatter_pa_kv_cache_with_k_scale:
      return "kvsScatterPaKvCacheWithKScale";
    case Op::kv_compress_epilog:
      return "kvsKvCompressEpilog";
    case Op::kv_cache_update:
      return "kvsKvCacheUpdate";
    case Op::gather_pa_kv_cache:
      return "kvsGatherPaKvCache";
    case Op::scatter_pa_cache:
      return "kvsScatterPaCache";
    case Op::indexer_quant_cache:
      return "kvsIndexerQuantCache";
    case Op::paged_kv_write:
      return "kvsPagedKvWrite";
    case Op::paged_cache_gather:
      return "kvsPagedCacheGather";
    case Op::paged_latent_write:
      return "kvsPagedLatentWrite";
  }
  return "?";
}

kvsStatus record_error(kvsStatus status, const char* function, const char* prefix,
                       const char* what) noexcept {
  try {
    t_last_error.assign(function);
    t_last_error.append(": ");
    t_last_error.append(prefix);
    t_last_error.append(what);
    t_last_error_lost = false;
  } catch (...) {
    t_last_error_lost = true;
  }
  return status;
}

void require_pointer(const void* p, const char* name) {
  if (p == nullptr) detail::fail(Status::null_pointer, detail::cat(name, " is NULL"));
}

const TensorView& required(const kvsTensor* tensor, const char* name) {
  require_pointer(tensor, name);
  return tensor->view;
}

std::optional<TensorView> optional(const kvsTensor* tensor) {
  if (tensor == nullptr) return std::nullopt;
  return tensor->view;
}

std::optional<std::array<std::int64_t, 2>> int_pair(const std::int64_t* values, std::uint64_t count,
                                                    const char* name) {
  if (values == nullptr && count == 0) return std::nullopt;
  if (values == nullptr) {
    detail::fail(Status::null_pointer,
                 detail::cat(name, " is NULL but ", name, "_count is ", count));
  }
  if (count != 2) detail::invalid(name, " must have 2 entries, got ", name, "_count = ", count);
  return std::array<std::int64_t, 2>{values[0], values[1]};
}

void begin_plan(std::uint64_t* workspace_size, kvsExecutor** executor) {
  if (executor != nullptr) *executor = nullptr;
  if (workspace_size != nullptr) *workspace_size = 0;
  require_pointer(workspace_size, "workspace_size");
  require_pointer(executor, "executor");
}

void finish_plan(std::unique_ptr<kvsExecutor> created, std::uint64_t* workspace_size,
                 kvsExecutor** executor) noexcept {
  *workspace_size = 0;
  *executor = created.release();
}

kvsExecutor& executor_for(kvsExecutor* executor, Op op) {
  require_pointer(executor, "executor");
  if (executor->op != op) {
    detail::invalid("executor was created by ", planner_name(executor->op),
                    " and must be run with ", runner_name(executor->op), ", not ", runner_name(op));
  }
  return *executor;
}

}  // namespace kvscatter::capi

using kvscatter::capi::guard;
using kvscatter::capi::require_pointer;
namespace detail = kvscatter::detail;

extern "C" {

const char* kvsGetLastErrorMessage(void) noexcept {
  if (kvscatter::capi::t_last_error_lost) return "out of memory while recording the error message";
  return kvscatter::capi::t_last_error.c_str();
}

const char* kvsGetVersionString(void) noexcept { return kvscatter::version_string(); }

kvsStatus kvsGetVersion(int32_t* major, int32_t* minor, int32_t* patch) noexcept {
  if (major != nullptr) *major = KVSCATTER_VERSION_MAJOR;
  if (minor != nullptr) *minor = KVSCATTER_VERSION_MINOR;
  if (patch != nullptr) *patch = KVSCATTER_VERSION_PATCH;
  return KVS_SUCCESS;
}

kvsStatus kvsSetNumThreads(int32_t n) noexcept {
  return guard("kvsSetNumThreads", [&] { kvscatter::set_num_threads(n); });
}

kvsStatus kvsGetNumThreads(int32_t* n) noexcept {
  return guard("kvsGetNumThreads", [&] {
    require_pointer(n, "n");
    *n = kvscatter::get_num_threads();
  });
}

kvsStatus kvsCreateTensor(void* data, kvsDataType dtype, int64_t rank, const int64_t* shape,
                          const int64_t* strides, kvsTensor** tensor) noexcept {
  return guard("kvsCreateTensor", [&] {
    if (tensor != nullptr) *tensor = nullptr;
    require_pointer(tensor, "tensor");
    if (rank < 0 || rank > KVS_MAX_RANK) {
      detail::invalid("rank must be in [0, ", KVS_MAX_RANK, "], got ", rank);
    }
    if (rank > 0) require_pointer(shape, "shape");
    const std::optional<kvscatter::DType> cpp_dtype = kvscatter::capi::to_dtype(dtype);
    if (!cpp_dtype) {
      detail::invalid("dtype = ", static_cast<std::int32_t>(dtype),
                      " is not a kvsDataType (expected 0..", kvscatter::kNumDTypes - 1, ")");
    }
    const auto n = static_cast<std::size_t>(rank);
    kvscatter::TensorView view;
    view.data = data;
    view.dtype = *cpp_dtype;
    view.rank = static_cast<int>(rank);
    for (std::size_t i = 0; i < n; ++i) {
      if (shape[i] < 0) detail::invalid("shape[", i, "] must be >= 0, got ", shape[i]);
      view.shape[i] = shape[i];
    }
    if (strides != nullptr) {
      for (std::size_t i = 0; i < n; ++i) view.strides[i] = strides[i];
    } else {
      // Row-major; the running product is checked so that huge shapes fail cleanly.
      std::int64_t step = 1;
      for (std::size_t i = n; i-- > 0;) {
        view.strides[i] = step;
        step = detail::checked_mul(step, shape[i] > 0 ? shape[i] : 1, "shape");
      }
    }
    *tensor = new kvsTensor{view};
  });
}

kvsStatus kvsDestroyTensor(kvsTensor* tensor) noexcept {
  delete tensor;
  return KVS_SUCCESS;
}

kvsStatus kvsDestroyExecutor(kvsExecutor* executor) noexcept {
  delete executor;
  return KVS_SUCCESS;
}

kvsStatus kvsExecutorSetTensorAddr(kvsExecutor* executor, uint64_t index, void* addr) noexcept {
  return guard("kvsExecutorSetTensorAddr", [&] {
    require_pointer(executor, "executor");
    const char* planner = kvscatter::capi::planner_name(executor->op);
    if (index >= executor->num_tensors) {
      detail::invalid("index = ", index, " is out of range [0, ", executor->num_tensors, ") (",
                      planner, " takes ", executor->num_tensors, " tensors)");
    }
    kvsExecutor::Binding& binding = executor->bindings[index];
    if (!binding.given) {
      detail::invalid("tensor ", index, " (", binding.name, ") was passed as NULL to ", planner,
                      ", so there is no address to set");
    }
    const auto new_address = reinterpret_cast<std::uintptr_t>(addr);
    if (kvscatter::TensorView* view = executor->view(index); view != nullptr) {
      bool empty = false;
      for (int i = 0; i < view->rank; ++i) empty = empty || view->dim(i) == 0;
      if (addr == nullptr && !empty) {
        detail::fail(kvscatter::Status::null_pointer,
                     detail::cat("addr is NULL for tensor ", index, " (", binding.name,
                                 "), which has elements"));
      }
      // Move the plan's pointer by the same distance as the caller's buffer moved (wrapping
      // unsigned arithmetic, no pointer arithmetic across allocations).
      view->data = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(view->data) +
                                           (new_address - binding.address));
    }
    binding.address = new_address;
  });
}

}  // extern "C"
