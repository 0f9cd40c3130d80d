// Internals of the C ABI (include/kvscatter/kvscatter.h): the opaque handle types, the
// exception firewall every entry point runs in, and argument helpers shared by the operator
// wrappers in this folder.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "kvscatter/error.h"
#include "kvscatter/kvscatter.h"
#include "kvscatter/tensor.h"

struct kvsTensor {
  kvscatter::TensorView view;
};

namespace kvscatter::capi {

enum class Op : std::uint8_t {
  scatter_pa_kv_cache,
  scatter_pa_kv_cache_with_k_scale,
  kv_compress_epilog,
  kv_cache_update,
  gather_pa_kv_cache,
  scatter_pa_cache,
  indexer_quant_cache,
  paged_kv_write,
  paged_cache_gather,
  paged_latent_write,
};

// Name of the GetWorkspaceSize function that creates an executor of `op`, and of the function
// that runs it.
const char* planner_name(Op op) noexcept;
const char* runner_name(Op op) noexcept;

}  // namespace kvscatter::capi

// Base of every operator's executor. It owns the plan (in the derived class) and remembers, per
// tensor argument, the address the caller bound, so that kvsExecutorSetTensorAddr can move the
// plan's view by the same amount even where the plan's data pointer is derived from the
// caller's (e.g. an element offset into a fused buffer).
struct kvsExecutor {
  static constexpr std::size_t kMaxTensors = 8;

  struct Binding {
    const char* name = "";
    bool given = false;          // a descriptor was passed (not NULL)
    std::uintptr_t address = 0;  // the caller's current address for it
  };

  explicit kvsExecutor(kvscatter::capi::Op op_) : op(op_) {}
  kvsExecutor(const kvsExecutor&) = delete;
  kvsExecutor& operator=(const kvsExecutor&) = delete;
  virtual ~kvsExecutor() = default;

  // Runs the plan (data-dependent checks first, then the writes).
  virtual void run() = 0;
  // The plan's view for tensor argument `index`, or nullptr when the plan does not use one.
  virtual kvscatter::TensorView* view(std::size_t index) noexcept = 0;

  // Records argument `index` (called once per tensor argument, in argument order).
  void bind(std::size_t index, const char* name, const kvsTensor* tensor) noexcept {
    bindings[index].name = name;
    bindings[index].given = tensor != nullptr;
    bindings[index].address =
        tensor != nullptr ? reinterpret_cast<std::uintptr_t>(tensor->view.data) : 0;
    num_tensors = index + 1 > num_tensors ? index + 1 : num_tensors;
  }

  kvscatter::capi::Op op;
  std::array<Binding, kMaxTensors> bindings{};
  std::size_t num_tensors = 0;
};

namespace kvscatter::capi {

// Stores "<function>: <prefix><what>" as the calling thread's last error; returns status.
kvsStatus record_error(kvsStatus status, const char* function, const char* prefix,
                       const char* what) noexcept;

// Runs body(); any exception becomes a status code plus the thread's last error message, so
// nothing ever propagates into C.
template <class Body>
kvsStatus guard(const char* function, Body&& body) noexcept {
  try {
    body();
    return KVS_SUCCESS;
  } catch (const Error& e) {
    const auto status = static_cast<kvsStatus>(e.status());
    return record_error(status == KVS_SUCCESS ? KVS_ERROR_INTERNAL : status, function, "",
                        e.what());
  } catch (const std::bad_alloc&) {
    return record_error(KVS_ERROR_INTERNAL, function, "", "out of memory");
  } catch (const std::exception& e) {
    return record_error(KVS_ERROR_INTERNAL, function, "internal error: ", e.what());
  } catch (...) {
    return record_error(KVS_ERROR_INTERNAL, function, "internal error: ", "unknown exception");
  }
}

// Throws null_pointer "<name> is NULL" when p is null.
void require_pointer(const void* p, const char* name);

// The view of a required tensor argument.
const TensorView& required(const kvsTensor* tensor, const char* name);
// The view of an optional tensor argument (NULL means absent).
std::optional<TensorView> optional(const kvsTensor* tensor);

// An optional pair of int64 attributes passed as (pointer, count): absent when NULL with count
// 0, otherwise exactly two entries.
std::optional<std::array<std::int64_t, 2>> int_pair(const std::int64_t* values, std::uint64_t count,
                                                    const char* name);

// Clears the caller's output slots first, so that a failed call never leaves stale values.
void begin_plan(std::uint64_t* workspace_size, kvsExecutor** executor);
// Hands a finished executor to the caller (no workspace is needed on the CPU).
void finish_plan(std::unique_ptr<kvsExecutor> created, std::uint64_t* workspace_size,
                 kvsExecutor** executor) noexcept;

// The executor passed to an execute call, checked to be non-null and made by `op`'s planner.
kvsExecutor& executor_for(kvsExecutor* executor, Op op);

}  // namespace kvscatter::capi
