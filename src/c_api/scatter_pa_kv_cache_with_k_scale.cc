// C ABI of scatter_pa_kv_cache_with_k_scale (kvscatter/scatter_pa_kv_cache_with_k_scale.h).
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"

#include <memory>
#include <utility>

#include "c_api/c_api.h"
#include "core/check.h"

namespace kvscatter::capi {
namespace {

struct WithKScaleExecutor final : kvsExecutor {
  WithKScaleExecutor() : kvsExecutor(Op::scatter_pa_kv_cache_with_k_scale) {}
  void run() override { execute(plan); }
  TensorView* view(std::size_t index) noexcept override {
    switch (index) {
      case KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_INDEX:
        return &plan.key;
      case KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_VALUE_INDEX:
        return &plan.value;
      case KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_CACHE_INDEX:
        return &plan.key_cache;
      case KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_VALUE_CACHE_INDEX:
        return &plan.value_cache;
      case KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_SLOT_MAPPING_INDEX:
        return &plan.slot_mapping;
      case KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_SCALE_INDEX:
        return &plan.key_scale;
      case KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_SCALE_CACHE_INDEX:
        return &plan.key_scale_cache;
      default:
        return nullptr;
    }
  }
  ScatterPaKvCacheWithKScalePlan plan;
};

}  // namespace
}  // namespace kvscatter::capi

using kvscatter::capi::begin_plan;
using kvscatter::capi::executor_for;
using kvscatter::capi::finish_plan;
using kvscatter::capi::guard;
using kvscatter::capi::Op;
using kvscatter::capi::required;
using kvscatter::capi::WithKScaleExecutor;

extern "C" {

kvsStatus kvsScatterPaKvCacheWithKScaleGetWorkspaceSize(
    const kvsTensor* key, const kvsTensor* value, kvsTensor* key_cache, kvsTensor* value_cache,
    const kvsTensor* slot_mapping, const kvsTensor* key_scale, kvsTensor* key_scale_cache,
    const char* cache_layout, uint64_t* workspace_size, kvsExecutor** executor) noexcept {
  return guard("kvsScatterPaKvCacheWithKScaleGetWorkspaceSize", [&] {
    begin_plan(workspace_size, executor);
    // Checked one by one, in argument order, so the first NULL is the one reported.
    const kvscatter::TensorView& key_view = required(key, "key");
    const kvscatter::TensorView& value_view = required(value, "value");
    const kvscatter::TensorView& key_cache_view = required(key_cache, "key_cache");
    const kvscatter::TensorView& value_cache_view = required(value_cache, "value_cache");
    const kvscatter::TensorView& slot_view = required(slot_mapping, "slot_mapping");
    const kvscatter::TensorView& key_scale_view = required(key_scale, "key_scale");
    const kvscatter::TensorView& key_scale_cache_view =
        required(key_scale_cache, "key_scale_cache");
    // Null data pointers come before every other rule, the layout text included, as in
    // plan_scatter_pa_kv_cache_with_k_scale.
    for (const auto& [view, name] :
         {std::pair{&key_view, "key"}, std::pair{&value_view, "value"},
          std::pair{&key_cache_view, "key_cache"}, std::pair{&value_cache_view, "value_cache"},
          std::pair{&slot_view, "slot_mapping"}, std::pair{&key_scale_view, "key_scale"},
          std::pair{&key_scale_cache_view, "key_scale_cache"}}) {
      kvscatter::detail::require_data(*view, name);
    }
    const kvscatter::KScaleCacheLayout layout =
        cache_layout != nullptr ? kvscatter::parse_k_scale_cache_layout(cache_layout)
                                : kvscatter::KScaleCacheLayout::BNBD;
    auto created = std::make_unique<WithKScaleExecutor>();
    created->plan = kvscatter::plan_scatter_pa_kv_cache_with_k_scale(
        key_view, value_view, key_cache_view, value_cache_view, slot_view, key_scale_view,
        key_scale_cache_view, layout);
    created->bind(KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_INDEX, "key", key);
    created->bind(KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_VALUE_INDEX, "value", value);
    created->bind(KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_CACHE_INDEX, "key_cache", key_cache);
    created->bind(KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_VALUE_CACHE_INDEX, "value_cache",
                  value_cache);
    created->bind(KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_SLOT_MAPPING_INDEX, "slot_mapping",
                  slot_mapping);
    created->bind(KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_SCALE_INDEX, "key_scale", key_scale);
    created->bind(KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_SCALE_CACHE_INDEX, "key_scale_cache",
                  key_scale_cache);
    finish_plan(std::move(created), workspace_size, executor);
  });
}

kvsStatus kvsScatterPaKvCacheWithKScale(void* workspace, uint64_t workspace_size,
                                        kvsExecutor* executor) noexcept {
  (void)workspace;
  (void)workspace_size;
  return guard("kvsScatterPaKvCacheWithKScale",
               [&] { executor_for(executor, Op::scatter_pa_kv_cache_with_k_scale).run(); });
}

}  // extern "C"
