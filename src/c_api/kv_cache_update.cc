// C ABI of the contiguous cache update (kvscatter/kv_cache_update.h).
#include "kvscatter/kv_cache_update.h"

#include <memory>

#include "c_api/c_api.h"

namespace kvscatter::capi {
namespace {

struct KvCacheUpdateExecutor final : kvsExecutor {
  KvCacheUpdateExecutor() : kvsExecutor(Op::kv_cache_update) {}
  void run() override { execute(plan); }
  TensorView* view(std::size_t index) noexcept override {
    switch (index) {
      case KVS_KV_CACHE_UPDATE_KEY_CACHE_INDEX:
        return &plan.key_cache;
      case KVS_KV_CACHE_UPDATE_VALUE_CACHE_INDEX:
        return &plan.value_cache;
      case KVS_KV_CACHE_UPDATE_NEW_KEYS_INDEX:
        return &plan.new_keys;
      case KVS_KV_CACHE_UPDATE_NEW_VALUES_INDEX:
        return &plan.new_values;
      default:
        return nullptr;
    }
  }
  KvCacheUpdatePlan plan;
};

}  // namespace
}  // namespace kvscatter::capi

using kvscatter::capi::begin_plan;
using kvscatter::capi::executor_for;
using kvscatter::capi::finish_plan;
using kvscatter::capi::guard;
using kvscatter::capi::KvCacheUpdateExecutor;
using kvscatter::capi::Op;
using kvscatter::capi::required;

extern "C" {

kvsStatus kvsKvCacheUpdateGetWorkspaceSize(kvsTensor* key_cache, kvsTensor* value_cache,
                                           const kvsTensor* new_keys, const kvsTensor* new_values,
                                           int64_t position, int64_t* new_length,
                                           uint64_t* workspace_size,
                                           kvsExecutor** executor) noexcept {
  return guard("kvsKvCacheUpdateGetWorkspaceSize", [&] {
    begin_plan(workspace_size, executor);
    // Checked one by one, in argument order, so the first NULL is the one reported.
    const kvscatter::TensorView& key_cache_view = required(key_cache, "key_cache");
    const kvscatter::TensorView& value_cache_view = required(value_cache, "value_cache");
    const kvscatter::TensorView& new_keys_view = required(new_keys, "new_keys");
    const kvscatter::TensorView& new_values_view = required(new_values, "new_values");
    auto created = std::make_unique<KvCacheUpdateExecutor>();
    created->plan = kvscatter::plan_kv_cache_update(key_cache_view, value_cache_view, new_keys_view,
                                                    new_values_view, position);
    created->bind(KVS_KV_CACHE_UPDATE_KEY_CACHE_INDEX, "key_cache", key_cache);
    created->bind(KVS_KV_CACHE_UPDATE_VALUE_CACHE_INDEX, "value_cache", value_cache);
    created->bind(KVS_KV_CACHE_UPDATE_NEW_KEYS_INDEX, "new_keys", new_keys);
    created->bind(KVS_KV_CACHE_UPDATE_NEW_VALUES_INDEX, "new_values", new_values);
    if (new_length != nullptr) *new_length = created->plan.position + created->plan.new_len;
    finish_plan(std::move(created), workspace_size, executor);
  });
}

kvsStatus kvsKvCacheUpdate(void* workspace, uint64_t workspace_size,
                           kvsExecutor* executor) noexcept {
  (void)workspace;
  (void)workspace_size;
  return guard("kvsKvCacheUpdate", [&] { executor_for(executor, Op::kv_cache_update).run(); });
}

}  // extern "C"
