// C ABI of PagedCacheGather (kvscatter/paged_cache_gather.h).
#include "kvscatter/paged_cache_gather.h"

#include <memory>

#include "c_api/c_api.h"

namespace kvscatter::capi {
namespace {

TensorView* present(std::optional<TensorView>& v) noexcept { return v ? &*v : nullptr; }

struct PagedCacheGatherExecutor final : kvsExecutor {
  PagedCacheGatherExecutor() : kvsExecutor(Op::paged_cache_gather) {}
  void run() override { execute(plan); }
  TensorView* view(std::size_t index) noexcept override {
    switch (index) {
      case KVS_PAGED_CACHE_GATHER_SRC_CACHE_INDEX:
        return &plan.src_cache;
      case KVS_PAGED_CACHE_GATHER_DST_INDEX:
        return &plan.dst;
      case KVS_PAGED_CACHE_GATHER_BLOCK_TABLE_INDEX:
        return &plan.block_table;
      case KVS_PAGED_CACHE_GATHER_CU_SEQ_LENS_INDEX:
        return &plan.cu_seq_lens;
      case KVS_PAGED_CACHE_GATHER_SCALE_INDEX:
        return present(plan.scale);
      case KVS_PAGED_CACHE_GATHER_SEQ_STARTS_INDEX:
        return present(plan.seq_starts);
      case KVS_PAGED_CACHE_GATHER_TOKEN_TO_SEQ_INDEX:
        return present(plan.token_to_seq);
      default:
        return nullptr;
    }
  }
  PagedCacheGatherPlan plan;
};

}  // namespace
}  // namespace kvscatter::capi

using kvscatter::capi::begin_plan;
using kvscatter::capi::executor_for;
using kvscatter::capi::finish_plan;
using kvscatter::capi::guard;
using kvscatter::capi::Op;
using kvscatter::capi::optional;
using kvscatter::capi::PagedCacheGatherExecutor;
using kvscatter::capi::required;

extern "C" {

kvsStatus kvsPagedCacheGatherGetWorkspaceSize(
    const kvsTensor* src_cache, kvsTensor* dst, const kvsTensor* block_table,
    const kvsTensor* cu_seq_lens, const kvsTensor* scale, const kvsTensor* seq_starts,
    const kvsTensor* token_to_seq, int64_t batch_size, int64_t num_tokens, const char* format,
    uint64_t* workspace_size, kvsExecutor** executor) noexcept {
  return guard("kvsPagedCacheGatherGetWorkspaceSize", [&] {
    begin_plan(workspace_size, executor);
    const kvscatter::TensorView& src = required(src_cache, "src_cache");
    const kvscatter::TensorView& out = required(dst, "dst");
    const kvscatter::TensorView& bt = required(block_table, "block_table");
    const kvscatter::TensorView& cu = required(cu_seq_lens, "cu_seq_lens");
    kvscatter::PagedCacheGatherOptions o;
    if (format != nullptr) o.format = kvscatter::parse_kv_cache_format(format);
    o.scale = optional(scale);
    o.seq_starts = optional(seq_starts);
    o.token_to_seq = optional(token_to_seq);
    o.batch_size = batch_size;
    o.num_tokens = num_tokens;
    auto created = std::make_unique<PagedCacheGatherExecutor>();
    created->plan = kvscatter::plan_paged_cache_gather(src, out, bt, cu, o);
    created->bind(KVS_PAGED_CACHE_GATHER_SRC_CACHE_INDEX, "src_cache", src_cache);
    created->bind(KVS_PAGED_CACHE_GATHER_DST_INDEX, "dst", dst);
    created->bind(KVS_PAGED_CACHE_GATHER_BLOCK_TABLE_INDEX, "block_table", block_table);
    created->bind(KVS_PAGED_CACHE_GATHER_CU_SEQ_LENS_INDEX, "cu_seq_lens", cu_seq_lens);
    created->bind(KVS_PAGED_CACHE_GATHER_SCALE_INDEX, "scale", scale);
    created->bind(KVS_PAGED_CACHE_GATHER_SEQ_STARTS_INDEX, "seq_starts", seq_starts);
    created->bind(KVS_PAGED_CACHE_GATHER_TOKEN_TO_SEQ_INDEX, "token_to_seq", token_to_seq);
    finish_plan(std::move(created), workspace_size, executor);
  });
}

kvsStatus kvsPagedCacheGather(void* workspace, uint64_t workspace_size,
                              kvsExecutor* executor) noexcept {
  (void)workspace;
  (void)workspace_size;
  return guard("kvsPagedCacheGather",
               [&] { executor_for(executor, Op::paged_cache_gather).run(); });
}

}  // extern "C"
