// The optimized PagedLatentWrite driver: slot checks over every token, duplicate slots resolved
// to their last writer, then the tokens split over the thread pool (kernel.cc moves the bytes).
#include "core/overlap.h"
#include "core/slots.h"
#include "core/streaming.h"
#include "ops/paged_latent_write/internal.h"
#include "ops/paged_latent_write/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {

namespace {

void run(const PagedLatentWritePlan& plan) {
  using namespace detail;
  using namespace detail::paged_latent_write;
  CheckedData data;
  check_data(plan, data);
  if (plan.num_tokens == 0) return;
  const auto es = static_cast<std::int64_t>(plan.kv_c.element_size());
  const auto ces = static_cast<std::int64_t>(plan.kv_cache.element_size());
  Job job;
  job.kv_c = static_cast<const unsigned char*>(plan.kv_c.data);
  job.k_pe = static_cast<const unsigned char*>(plan.k_pe.data);
  job.kv_c_token = plan.kv_c.stride(0) * es;
  job.k_pe_token = plan.k_pe.stride(0) * es;
  job.cache = static_cast<unsigned char*>(plan.kv_cache.data);
  job.block_stride = plan.kv_cache.stride(0) * ces;
  job.slot_stride = plan.kv_cache.stride(1) * ces;
  job.split = SlotSplitter(plan.block_size);
  job.latent_dim = plan.latent_dim;
  job.pe_dim = plan.pe_dim;
  job.dtype = plan.kv_c.dtype;
  job.format = plan.format;
  job.scale = data.scale;
  const std::int64_t token_bytes = (plan.latent_dim + plan.pe_dim) * (es + ces);
  // Copies, and the fp8_ds_mla entries built from bfloat16 (kernel.cc, StagedRows), of calls that
  // write more than the caches hold.
  job.stream = (plan.format == LatentCacheFormat::copy &&
                use_streaming_stores(plan.num_tokens * (plan.latent_dim + plan.pe_dim) * ces)) ||
               (plan.format == LatentCacheFormat::fp8_ds_mla &&
                use_streaming_stores(plan.num_tokens * kDsEntryBytes));
  const std::int64_t grain = grain_for_bytes(token_bytes);
  job.slots = data.slots.data();
  parallel_for_last_writers(data.slots, plan.num_slots, grain,
                            [&](std::int64_t b, std::int64_t e) { write_token_range(job, b, e); });
}

}  // namespace

void execute(const PagedLatentWritePlan& plan) {
  detail::paged_latent_write::check_bound_data(plan);
  // Inputs that overlap an output are read from a copy (see docs/semantics.md, "Inputs that
  // overlap outputs").
  detail::execute_staged(
      plan, [](auto& p) { return detail::paged_latent_write::operands(p); }, run);
}

}  // namespace kvscatter
