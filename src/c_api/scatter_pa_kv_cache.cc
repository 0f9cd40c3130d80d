// C ABI of scatter_pa_kv_cache (kvscatter/scatter_pa_kv_cache.h).
#include "kvscatter/scatter_pa_kv_cache.h"

#include <memory>

#include "c_api/c_api.h"

namespace kvscatter::capi {
namespace {

TensorView* present(std::optional<TensorView>& v) noexcept { return v ? &*v : nullptr; }

struct ScatterPaKvCacheExecutor final : kvsExecutor {
  ScatterPaKvCacheExecutor() : kvsExecutor(Op::scatter_pa_kv_cache) {}
  void run() override { execute(plan); }
  TensorView* view(std::size_t index) noexcept override {
    switch (index) {
      case KVS_SCATTER_PA_KV_CACHE_KEY_INDEX:
        return &plan.key;
      case KVS_SCATTER_PA_KV_CACHE_VALUE_INDEX:
        return present(plan.value);
      case KVS_SCATTER_PA_KV_CACHE_KEY_CACHE_INDEX:
        return &plan.key_cache;
      case KVS_SCATTER_PA_KV_CACHE_VALUE_CACHE_INDEX:
        return present(plan.value_cache);
      case KVS_SCATTER_PA_KV_CACHE_SLOT_MAPPING_INDEX:
        return &plan.slot_mapping;
      case KVS_SCATTER_PA_KV_CACHE_COMPRESS_LENS_INDEX:
        return present(plan.compress_lens);
      case KVS_SCATTER_PA_KV_CACHE_COMPRESS_SEQ_OFFSETS_INDEX:
        return present(plan.compress_seq_offsets);
      case KVS_SCATTER_PA_KV_CACHE_SEQ_LENS_INDEX:
        return present(plan.seq_lens);
      default:
        return nullptr;
    }
  }
  ScatterPaKvCachePlan plan;
};

}  // namespace
}  // namespace kvscatter::capi

using kvscatter::capi::begin_plan;
using kvscatter::capi::executor_for;
using kvscatter::capi::finish_plan;
using kvscatter::capi::guard;
using kvscatter::capi::int_pair;
using kvscatter::capi::Op;
using kvscatter::capi::optional;
using kvscatter::capi::required;
using kvscatter::capi::ScatterPaKvCacheExecutor;

extern "C" {

kvsStatus kvsScatterPaKvCacheGetWorkspaceSize(
    const kvsTensor* key, const kvsTensor* value, kvsTensor* key_cache, kvsTensor* value_cache,
    const kvsTensor* slot_mapping, const kvsTensor* compress_lens,
    const kvsTensor* compress_seq_offsets, const kvsTensor* seq_lens, const char* cache_mode,
    const char* scatter_mode, const int64_t* strides, uint64_t strides_count,
    const int64_t* offsets, uint64_t offsets_count, uint64_t* workspace_size,
    kvsExecutor** executor) noexcept {
  return guard("kvsScatterPaKvCacheGetWorkspaceSize", [&] {
    begin_plan(workspace_size, executor);
    const kvscatter::TensorView& key_view = required(key, "key");
    const kvscatter::TensorView& key_cache_view = required(key_cache, "key_cache");
    const kvscatter::TensorView& slot_view = required(slot_mapping, "slot_mapping");
    kvscatter::ScatterPaKvCacheOptions options;
    options.compress_lens = optional(compress_lens);
    options.compress_seq_offsets = optional(compress_seq_offsets);
    options.seq_lens = optional(seq_lens);
    options.strides = int_pair(strides, strides_count, "strides");
    options.offsets = int_pair(offsets, offsets_count, "offsets");
    // Mode names are parsed before the plan's rules; NULL and "" select the default.
    if (cache_mode != nullptr) options.cache_mode = kvscatter::parse_cache_mode(cache_mode);
    if (scatter_mode != nullptr) options.scatter_mode = kvscatter::parse_scatter_mode(scatter_mode);

    auto created = std::make_unique<ScatterPaKvCacheExecutor>();
    created->plan = kvscatter::plan_scatter_pa_kv_cache(key_view, optional(value), key_cache_view,
                                                        optional(value_cache), slot_view, options);
    created->bind(KVS_SCATTER_PA_KV_CACHE_KEY_INDEX, "key", key);
    created->bind(KVS_SCATTER_PA_KV_CACHE_VALUE_INDEX, "value", value);
    created->bind(KVS_SCATTER_PA_KV_CACHE_KEY_CACHE_INDEX, "key_cache", key_cache);
    created->bind(KVS_SCATTER_PA_KV_CACHE_VALUE_CACHE_INDEX, "value_cache", value_cache);
    created->bind(KVS_SCATTER_PA_KV_CACHE_SLOT_MAPPING_INDEX, "slot_mapping", slot_mapping);
    created->bind(KVS_SCATTER_PA_KV_CACHE_COMPRESS_LENS_INDEX, "compress_lens", compress_lens);
    created->bind(KVS_SCATTER_PA_KV_CACHE_COMPRESS_SEQ_OFFSETS_INDEX, "compress_seq_offsets",
                  compress_seq_offsets);
    created->bind(KVS_SCATTER_PA_KV_CACHE_SEQ_LENS_INDEX, "seq_lens", seq_lens);
    finish_plan(std::move(created), workspace_size, executor);
  });
}

kvsStatus kvsScatterPaKvCache(void* workspace, uint64_t workspace_size,
                              kvsExecutor* executor) noexcept {
  (void)workspace;
  (void)workspace_size;
  return guard("kvsScatterPaKvCache",
               [&] { executor_for(executor, Op::scatter_pa_kv_cache).run(); });
}

}  // extern "C"
