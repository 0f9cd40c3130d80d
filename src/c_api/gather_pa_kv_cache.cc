// C ABI of GatherPaKvCache (kvscatter/gather_pa_kv_cache.h).
#include "kvscatter/gather_pa_kv_cache.h"

#include <memory>

#include "c_api/c_api.h"

namespace kvscatter::capi {
namespace {

TensorView* present(std::optional<TensorView>& v) noexcept { return v ? &*v : nullptr; }

struct GatherPaKvCacheExecutor final : kvsExecutor {
  GatherPaKvCacheExecutor() : kvsExecutor(Op::gather_pa_kv_cache) {}
  void run() override { execute(plan); }
  TensorView* view(std::size_t index) noexcept override {
    switch (index) {
      case KVS_GATHER_PA_KV_CACHE_KEY_CACHE_INDEX:
        return &plan.key_cache;
      case KVS_GATHER_PA_KV_CACHE_VALUE_CACHE_INDEX:
        return present(plan.value_cache);
      case KVS_GATHER_PA_KV_CACHE_BLOCK_TABLES_INDEX:
        return &plan.block_tables;
      case KVS_GATHER_PA_KV_CACHE_SEQ_LENS_INDEX:
        return &plan.seq_lens;
      case KVS_GATHER_PA_KV_CACHE_KEY_INDEX:
        return &plan.key;
      case KVS_GATHER_PA_KV_CACHE_VALUE_INDEX:
        return present(plan.value);
      case KVS_GATHER_PA_KV_CACHE_SEQ_OFFSET_INDEX:
        return present(plan.seq_offset);
      default:
        return nullptr;
    }
  }
  GatherPaKvCachePlan plan;
};

}  // namespace
}  // namespace kvscatter::capi

using kvscatter::capi::begin_plan;
using kvscatter::capi::executor_for;
using kvscatter::capi::finish_plan;
using kvscatter::capi::GatherPaKvCacheExecutor;
using kvscatter::capi::guard;
using kvscatter::capi::Op;
using kvscatter::capi::optional;
using kvscatter::capi::required;

extern "C" {

kvsStatus kvsGatherPaKvCacheGetWorkspaceSize(
    const kvsTensor* key_cache, const kvsTensor* value_cache, const kvsTensor* block_tables,
    const kvsTensor* seq_lens, kvsTensor* key, kvsTensor* value, const kvsTensor* seq_offset,
    const char* cache_mode, bool is_seq_lens_cumsum, uint64_t* workspace_size,
    kvsExecutor** executor) noexcept {
  return guard("kvsGatherPaKvCacheGetWorkspaceSize", [&] {
    begin_plan(workspace_size, executor);
    const kvscatter::TensorView& key_cache_view = required(key_cache, "key_cache");
    const kvscatter::TensorView& tables_view = required(block_tables, "block_tables");
    const kvscatter::TensorView& lens_view = required(seq_lens, "seq_lens");
    const kvscatter::TensorView& key_view = required(key, "key");
    kvscatter::GatherPaKvCacheOptions options;
    options.seq_offset = optional(seq_offset);
    options.is_seq_lens_cumsum = is_seq_lens_cumsum;
    options.cache_mode = kvscatter::parse_cache_mode(cache_mode != nullptr ? cache_mode : "");

    auto created = std::make_unique<GatherPaKvCacheExecutor>();
    created->plan =
        kvscatter::plan_gather_pa_kv_cache(key_cache_view, optional(value_cache), tables_view,
                                           lens_view, key_view, optional(value), options);
    created->bind(KVS_GATHER_PA_KV_CACHE_KEY_CACHE_INDEX, "key_cache", key_cache);
    created->bind(KVS_GATHER_PA_KV_CACHE_VALUE_CACHE_INDEX, "value_cache", value_cache);
    created->bind(KVS_GATHER_PA_KV_CACHE_BLOCK_TABLES_INDEX, "block_tables", block_tables);
    created->bind(KVS_GATHER_PA_KV_CACHE_SEQ_LENS_INDEX, "seq_lens", seq_lens);
    created->bind(KVS_GATHER_PA_KV_CACHE_KEY_INDEX, "key", key);
    created->bind(KVS_GATHER_PA_KV_CACHE_VALUE_INDEX, "value", value);
    created->bind(KVS_GATHER_PA_KV_CACHE_SEQ_OFFSET_INDEX, "seq_offset", seq_offset);
    finish_plan(std::move(created), workspace_size, executor);
  });
}

kvsStatus kvsGatherPaKvCache(void* workspace, uint64_t workspace_size,
                             kvsExecutor* executor) noexcept {
  (void)workspace;
  (void)workspace_size;
  return guard("kvsGatherPaKvCache", [&] { executor_for(executor, Op::gather_pa_kv_cache).run(); });
}

}  // extern "C"
