// C ABI of PagedLatentWrite (kvscatter/paged_latent_write.h).
#include "kvscatter/paged_latent_write.h"

#include <memory>

#include "c_api/c_api.h"
#include "core/check.h"

namespace kvscatter::capi {
namespace {

struct PagedLatentWriteExecutor final : kvsExecutor {
  PagedLatentWriteExecutor() : kvsExecutor(Op::paged_latent_write) {}
  void run() override { execute(plan); }
  TensorView* view(std::size_t index) noexcept override {
    switch (index) {
      case KVS_PAGED_LATENT_WRITE_KV_C_INDEX:
        return &plan.kv_c;
      case KVS_PAGED_LATENT_WRITE_K_PE_INDEX:
        return &plan.k_pe;
      case KVS_PAGED_LATENT_WRITE_KV_CACHE_INDEX:
        return &plan.kv_cache;
      case KVS_PAGED_LATENT_WRITE_SLOT_MAPPING_INDEX:
        return &plan.slot_mapping;
      case KVS_PAGED_LATENT_WRITE_SCALE_INDEX:
        return plan.scale ? &*plan.scale : nullptr;
      default:
        return nullptr;
    }
  }
  PagedLatentWritePlan plan;
};

}  // namespace
}  // namespace kvscatter::capi

using kvscatter::capi::begin_plan;
using kvscatter::capi::executor_for;
using kvscatter::capi::finish_plan;
using kvscatter::capi::guard;
using kvscatter::capi::Op;
using kvscatter::capi::optional;
using kvscatter::capi::PagedLatentWriteExecutor;
using kvscatter::capi::required;

extern "C" {

kvsStatus kvsPagedLatentWriteGetWorkspaceSize(const kvsTensor* kv_c, const kvsTensor* k_pe,
                                              kvsTensor* kv_cache, const kvsTensor* slot_mapping,
                                              const kvsTensor* scale, const char* format,
                                              uint64_t* workspace_size,
                                              kvsExecutor** executor) noexcept {
  return guard("kvsPagedLatentWriteGetWorkspaceSize", [&] {
    begin_plan(workspace_size, executor);
    const kvscatter::TensorView& c = required(kv_c, "kv_c");
    const kvscatter::TensorView& p = required(k_pe, "k_pe");
    const kvscatter::TensorView& cache = required(kv_cache, "kv_cache");
    const kvscatter::TensorView& sm = required(slot_mapping, "slot_mapping");
    kvscatter::PagedLatentWriteOptions o;
    if (format != nullptr) o.format = kvscatter::parse_latent_cache_format(format);
    o.scale = optional(scale);
    auto created = std::make_unique<PagedLatentWriteExecutor>();
    created->plan = kvscatter::plan_paged_latent_write(c, p, cache, sm, o);
    created->bind(KVS_PAGED_LATENT_WRITE_KV_C_INDEX, "kv_c", kv_c);
    created->bind(KVS_PAGED_LATENT_WRITE_K_PE_INDEX, "k_pe", k_pe);
    created->bind(KVS_PAGED_LATENT_WRITE_KV_CACHE_INDEX, "kv_cache", kv_cache);
    created->bind(KVS_PAGED_LATENT_WRITE_SLOT_MAPPING_INDEX, "slot_mapping", slot_mapping);
    created->bind(KVS_PAGED_LATENT_WRITE_SCALE_INDEX, "scale", scale);
    finish_plan(std::move(created), workspace_size, executor);
  });
}

kvsStatus kvsPagedLatentWrite(void* workspace, uint64_t workspace_size,
                              kvsExecutor* executor) noexcept {
  (void)workspace;
  (void)workspace_size;
  return guard("kvsPagedLatentWrite",
               [&] { executor_for(executor, Op::paged_latent_write).run(); });
}

}  // extern "C"
