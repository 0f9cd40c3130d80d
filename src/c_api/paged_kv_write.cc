// C ABI of PagedKvWrite (kvscatter/paged_kv_write.h).
#include "kvscatter/paged_kv_write.h"

#include <memory>

#include "c_api/c_api.h"
#include "core/check.h"

namespace kvscatter::capi {
namespace {

struct PagedKvWriteExecutor final : kvsExecutor {
  PagedKvWriteExecutor() : kvsExecutor(Op::paged_kv_write) {}
  void run() override { execute(plan); }
  TensorView* view(std::size_t index) noexcept override {
    switch (index) {
      case KVS_PAGED_KV_WRITE_KEY_INDEX:
        return &plan.key;
      case KVS_PAGED_KV_WRITE_VALUE_INDEX:
        return &plan.value;
      case KVS_PAGED_KV_WRITE_KEY_CACHE_INDEX:
        return &plan.key_cache;
      case KVS_PAGED_KV_WRITE_VALUE_CACHE_INDEX:
        return &plan.value_cache;
      case KVS_PAGED_KV_WRITE_SLOT_MAPPING_INDEX:
        return &plan.slot_mapping;
      case KVS_PAGED_KV_WRITE_K_SCALE_INDEX:
        return plan.k_scale ? &*plan.k_scale : nullptr;
      case KVS_PAGED_KV_WRITE_V_SCALE_INDEX:
        return plan.v_scale ? &*plan.v_scale : nullptr;
      default:
        return nullptr;
    }
  }
  PagedKvWritePlan plan;
};

}  // namespace
}  // namespace kvscatter::capi

using kvscatter::capi::begin_plan;
using kvscatter::capi::executor_for;
using kvscatter::capi::finish_plan;
using kvscatter::capi::guard;
using kvscatter::capi::Op;
using kvscatter::capi::optional;
using kvscatter::capi::PagedKvWriteExecutor;
using kvscatter::capi::required;

extern "C" {

kvsStatus kvsPagedKvWriteGetWorkspaceSize(const kvsTensor* key, const kvsTensor* value,
                                          kvsTensor* key_cache, kvsTensor* value_cache,
                                          const kvsTensor* slot_mapping, const kvsTensor* k_scale,
                                          const kvsTensor* v_scale, const char* format,
                                          const char* layout, uint64_t* workspace_size,
                                          kvsExecutor** executor) noexcept {
  return guard("kvsPagedKvWriteGetWorkspaceSize", [&] {
    begin_plan(workspace_size, executor);
    const kvscatter::TensorView& k = required(key, "key");
    const kvscatter::TensorView& v = required(value, "value");
    const kvscatter::TensorView& kc = required(key_cache, "key_cache");
    const kvscatter::TensorView& vc = required(value_cache, "value_cache");
    const kvscatter::TensorView& sm = required(slot_mapping, "slot_mapping");
    kvscatter::PagedKvWriteOptions options;
    if (format != nullptr) options.format = kvscatter::parse_kv_cache_format(format);
    if (layout != nullptr) options.layout = kvscatter::parse_kv_cache_layout(layout);
    options.k_scale = optional(k_scale);
    options.v_scale = optional(v_scale);
    auto created = std::make_unique<PagedKvWriteExecutor>();
    created->plan = kvscatter::plan_paged_kv_write(k, v, kc, vc, sm, options);
    created->bind(KVS_PAGED_KV_WRITE_KEY_INDEX, "key", key);
    created->bind(KVS_PAGED_KV_WRITE_VALUE_INDEX, "value", value);
    created->bind(KVS_PAGED_KV_WRITE_KEY_CACHE_INDEX, "key_cache", key_cache);
    created->bind(KVS_PAGED_KV_WRITE_VALUE_CACHE_INDEX, "value_cache", value_cache);
    created->bind(KVS_PAGED_KV_WRITE_SLOT_MAPPING_INDEX, "slot_mapping", slot_mapping);
    created->bind(KVS_PAGED_KV_WRITE_K_SCALE_INDEX, "k_scale", k_scale);
    created->bind(KVS_PAGED_KV_WRITE_V_SCALE_INDEX, "v_scale", v_scale);
    finish_plan(std::move(created), workspace_size, executor);
  });
}

kvsStatus kvsPagedKvWrite(void* workspace, uint64_t workspace_size,
                          kvsExecutor* executor) noexcept {
  (void)workspace;
  (void)workspace_size;
  return guard("kvsPagedKvWrite", [&] { executor_for(executor, Op::paged_kv_write).run(); });
}

}  // extern "C"
