// C ABI of IndexerQuantCache (kvscatter/indexer_quant_cache.h).
#include "kvscatter/indexer_quant_cache.h"

#include <memory>

#include "c_api/c_api.h"

namespace kvscatter::capi {
namespace {

struct IndexerQuantCacheExecutor final : kvsExecutor {
  IndexerQuantCacheExecutor() : kvsExecutor(Op::indexer_quant_cache) {}
  void run() override { execute(plan); }
  TensorView* view(std::size_t index) noexcept override {
    switch (index) {
      case KVS_INDEXER_QUANT_CACHE_CACHE_INDEX:
        return &plan.cache;
      case KVS_INDEXER_QUANT_CACHE_CACHE_SCALE_INDEX:
        return &plan.cache_scale;
      case KVS_INDEXER_QUANT_CACHE_X_INDEX:
        return &plan.x;
      case KVS_INDEXER_QUANT_CACHE_SLOT_MAPPING_INDEX:
        return &plan.slot_mapping;
      default:
        return nullptr;
    }
  }
  IndexerQuantCachePlan plan;
};

}  // namespace
}  // namespace kvscatter::capi

using kvscatter::capi::begin_plan;
using kvscatter::capi::executor_for;
using kvscatter::capi::finish_plan;
using kvscatter::capi::guard;
using kvscatter::capi::IndexerQuantCacheExecutor;
using kvscatter::capi::Op;
using kvscatter::capi::required;

extern "C" {

kvsStatus kvsIndexerQuantCacheGetWorkspaceSize(kvsTensor* cache, kvsTensor* cache_scale,
                                               const kvsTensor* x, const kvsTensor* slot_mapping,
                                               const char* quant_mode, bool round_scale,
                                               float x_scale, uint64_t* workspace_size,
                                               kvsExecutor** executor) noexcept {
  return guard("kvsIndexerQuantCacheGetWorkspaceSize", [&] {
    begin_plan(workspace_size, executor);
    const kvscatter::TensorView& cache_view = required(cache, "cache");
    const kvscatter::TensorView& scale_view = required(cache_scale, "cache_scale");
    const kvscatter::TensorView& x_view = required(x, "x");
    const kvscatter::TensorView& slot_view = required(slot_mapping, "slot_mapping");
    kvscatter::IndexerQuantCacheOptions options;
    if (quant_mode != nullptr && quant_mode[0] != '\0') {
      options.quant_mode = kvscatter::parse_indexer_quant_mode(quant_mode);
    }
    options.round_scale = round_scale;
    options.x_scale = x_scale;
    auto created = std::make_unique<IndexerQuantCacheExecutor>();
    created->plan =
        kvscatter::plan_indexer_quant_cache(cache_view, scale_view, x_view, slot_view, options);
    created->bind(KVS_INDEXER_QUANT_CACHE_CACHE_INDEX, "cache", cache);
    created->bind(KVS_INDEXER_QUANT_CACHE_CACHE_SCALE_INDEX, "cache_scale", cache_scale);
    created->bind(KVS_INDEXER_QUANT_CACHE_X_INDEX, "x", x);
    created->bind(KVS_INDEXER_QUANT_CACHE_SLOT_MAPPING_INDEX, "slot_mapping", slot_mapping);
    finish_plan(std::move(created), workspace_size, executor);
  });
}

kvsStatus kvsIndexerQuantCache(void* workspace, uint64_t workspace_size,
                               kvsExecutor* executor) noexcept {
  (void)workspace;
  (void)workspace_size;
  return guard("kvsIndexerQuantCache",
               [&] { executor_for(executor, Op::indexer_quant_cache).run(); });
}

}  // extern "C"
