// C ABI of kv_compress_epilog (kvscatter/kv_compress_epilog.h).
#include "kvscatter/kv_compress_epilog.h"

#include <memory>

#include "c_api/c_api.h"
#include "core/check.h"

namespace kvscatter::capi {
namespace {

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

using kvscatter::capi::begin_plan;
using kvscatter::capi::executor_for;
using kvscatter::capi::finish_plan;
using kvscatter::capi::guard;
using kvscatter::capi::KvCompressEpilogExecutor;
using kvscatter::capi::Op;
using kvscatter::capi::required;

extern "C" {

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
    // Null data pointers come before every other rule, the mode text included, as in
    // plan_kv_compress_epilog.
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
