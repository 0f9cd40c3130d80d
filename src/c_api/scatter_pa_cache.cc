// C ABI of ScatterPaCache (kvscatter/scatter_pa_cache.h).
#include "kvscatter/scatter_pa_cache.h"

#include <memory>

#include "c_api/c_api.h"

namespace kvscatter::capi {
namespace {

TensorView* present(std::optional<TensorView>& v) noexcept { return v ? &*v : nullptr; }

struct ScatterPaCacheExecutor final : kvsExecutor {
  ScatterPaCacheExecutor() : kvsExecutor(Op::scatter_pa_cache) {}
  void run() override { execute(plan); }
  TensorView* view(std::size_t index) noexcept override {
    switch (index) {
      case KVS_SCATTER_PA_CACHE_KEY_INDEX:
        return &plan.key;
      case KVS_SCATTER_PA_CACHE_KEY_CACHE_INDEX:
        return &plan.key_cache;
      case KVS_SCATTER_PA_CACHE_SLOT_MAPPING_INDEX:
        return &plan.slot_mapping;
      case KVS_SCATTER_PA_CACHE_COMPRESS_LENS_INDEX:
        return present(plan.compress_lens);
      case KVS_SCATTER_PA_CACHE_COMPRESS_SEQ_OFFSETS_INDEX:
        return present(plan.compress_seq_offsets);
      case KVS_SCATTER_PA_CACHE_SEQ_LENS_INDEX:
        return present(plan.seq_lens);
      default:
        return nullptr;
    }
  }
  ScatterPaCachePlan plan;
};

}  // namespace
}  // namespace kvscatter::capi

using kvscatter::capi::begin_plan;
using kvscatter::capi::executor_for;
using kvscatter::capi::finish_plan;
using kvscatter::capi::guard;
using kvscatter::capi::Op;
using kvscatter::capi::optional;
using kvscatter::capi::required;
using kvscatter::capi::ScatterPaCacheExecutor;

extern "C" {

kvsStatus kvsScatterPaCacheGetWorkspaceSize(const kvsTensor* key, kvsTensor* key_cache,
                                            const kvsTensor* slot_mapping,
                                            const kvsTensor* compress_lens,
                                            const kvsTensor* compress_seq_offsets,
                                            const kvsTensor* seq_lens, uint64_t* workspace_size,
                                            kvsExecutor** executor) noexcept {
  return guard("kvsScatterPaCacheGetWorkspaceSize", [&] {
    begin_plan(workspace_size, executor);
    const kvscatter::TensorView& key_view = required(key, "key");
    const kvscatter::TensorView& cache_view = required(key_cache, "key_cache");
    const kvscatter::TensorView& slot_view = required(slot_mapping, "slot_mapping");
    kvscatter::ScatterPaCacheOptions options;
    options.compress_lens = optional(compress_lens);
    options.compress_seq_offsets = optional(compress_seq_offsets);
    options.seq_lens = optional(seq_lens);
    auto created = std::make_unique<ScatterPaCacheExecutor>();
    created->plan = kvscatter::plan_scatter_pa_cache(key_view, cache_view, slot_view, options);
    created->bind(KVS_SCATTER_PA_CACHE_KEY_INDEX, "key", key);
    created->bind(KVS_SCATTER_PA_CACHE_KEY_CACHE_INDEX, "key_cache", key_cache);
    created->bind(KVS_SCATTER_PA_CACHE_SLOT_MAPPING_INDEX, "slot_mapping", slot_mapping);
    created->bind(KVS_SCATTER_PA_CACHE_COMPRESS_LENS_INDEX, "compress_lens", compress_lens);
    created->bind(KVS_SCATTER_PA_CACHE_COMPRESS_SEQ_OFFSETS_INDEX, "compress_seq_offsets",
                  compress_seq_offsets);
    created->bind(KVS_SCATTER_PA_CACHE_SEQ_LENS_INDEX, "seq_lens", seq_lens);
    finish_plan(std::move(created), workspace_size, executor);
  });
}

kvsStatus kvsScatterPaCache(void* workspace, uint64_t workspace_size,
                            kvsExecutor* executor) noexcept {
  (void)workspace;
  (void)workspace_size;
  return guard("kvsScatterPaCache", [&] { executor_for(executor, Op::scatter_pa_cache).run(); });
}

}  // extern "C"
