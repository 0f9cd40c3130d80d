// C ABI of ScatterPaKvCacheWithKScale and KvCompressEpilog (kvscatter/quant_ops.h).
#include "kvscatter/quant_ops.h"

#include <memory>

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

struct KvCompressEpilogExecutor final : kvsExecutor {
  KvCompressEpilogExecutor() : kvsExecutor(Op::kv_compress_epilog) {}
  void run() override { execute(plan); }
  TensorView* view(std::size_t index) noexcept override {
    switch (index) {
      case KVS_KV_COMPRESS_EPILOG_CACHE_INDEX:
        return &plan.cache;
      case KVS_KV_COMPRESS_EPILOG_X_INDEX:
        return &plan.x;
      case KVS_KV_COMPRESS_EPILOG_SLOT_MAPPING_INDEX:
        return &plan.slot_mapping;
      default:
        return nullptr;
    }
  }
  KvCompressEpilogPlan plan;
};

}  // namespace
}  // namespace kvscatter::capi

using kvscatter::capi::KvCompressEpilogExecutor;
using kvscatter::capi::Op;
using kvscatter::capi::WithKScaleExecutor;
using kvscatter::capi::begin_plan;
using kvscatter::capi::executor_for;
using kvscatter::capi::finish_plan;
using kvscatter::capi::guard;
using kvscatter::capi::required;

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
    auto created = std::make_unique<WithKScaleExecutor>();
    created->plan = kvscatter::plan_scatter_pa_kv_cache_with_k_scale(
        key_view, value_view, key_cache_view, value_cache_view, slot_view, key_scale_view,
        key_scale_cache_view, cache_layout != nullptr ? cache_layout : "BNBD");
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

kvsStatus kvsKvCompressEpilogGetWorkspaceSize(kvsTensor* cache, const kvsTensor* x,
                                              const kvsTensor* slot_mapping,
                                              int64_t quant_group_size, const char* quant_mode,
                                              bool round_scale, float x_scale,
                                              uint64_t* workspace_size,
                                              kvsExecutor** executor) noexcept {
  return guard("kvsKvCompressEpilogGetWorkspaceSize", [&] {
    begin_plan(workspace_size, executor);
    const kvscatter::TensorView& cache_view = required(cache, "cache");
    const kvscatter::TensorView& x_view = required(x, "x");
    const kvscatter::TensorView& slot_view = required(slot_mapping, "slot_mapping");
    // Null data pointers (161001) come before every other rule, the mode text included, as in
    // plan_kv_compress_epilog and aclnn.
    kvscatter::detail::require_data(cache_view, "cache");
    kvscatter::detail::require_data(x_view, "x");
    kvscatter::detail::require_data(slot_view, "slot_mapping");
    const kvscatter::QuantMode mode = quant_mode != nullptr
                                          ? kvscatter::parse_quant_mode(quant_mode)
                                          : kvscatter::QuantMode::fp8_e8m0;
    auto created = std::make_unique<KvCompressEpilogExecutor>();
    created->plan = kvscatter::plan_kv_compress_epilog(
        cache_view, x_view, slot_view, quant_group_size, mode, round_scale, x_scale);
    created->bind(KVS_KV_COMPRESS_EPILOG_CACHE_INDEX, "cache", cache);
    created->bind(KVS_KV_COMPRESS_EPILOG_X_INDEX, "x", x);
    created->bind(KVS_KV_COMPRESS_EPILOG_SLOT_MAPPING_INDEX, "slot_mapping", slot_mapping);
    finish_plan(std::move(created), workspace_size, executor);
  });
}

kvsStatus kvsKvCompressEpilog(void* workspace, uint64_t workspace_size,
                              kvsExecutor* executor) noexcept {
  (void)workspace;
  (void)workspace_size;
  return guard("kvsKvCompressEpilog",
               [&] { executor_for(executor, Op::kv_compress_epilog).run(); });
}

}  // extern "C"
