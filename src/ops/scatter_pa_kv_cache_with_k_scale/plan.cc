// ScatterPaKvCacheWithKScale: validation (spec quant_ops.md section 3.4 plus decisions G1-G11)
// and the public entry points. The operator moves bytes only, so every rule is a shape, dtype or
// layout rule checked here; out-of-range slots are skipped, never rejected (G6 exception).
#include "core/check.h"
#include "kvscatter/quant_ops.h"
#include "core/slots.h"
#include "ops/scatter_pa_kv_cache_with_k_scale/kernel.h"

namespace kvscatter {

using detail::invalid;

ScatterPaKvCacheWithKScalePlan plan_scatter_pa_kv_cache_with_k_scale(
    const TensorView& key, const TensorView& value, const TensorView& key_cache,
    const TensorView& value_cache, const TensorView& slot_mapping, const TensorView& key_scale,
    const TensorView& key_scale_cache, const std::string& cache_layout) {
  // A null tensor that has elements is 161001, before any other rule (spec section 3.4).
  detail::require_data(key, "key");
  detail::require_data(value, "value");
  detail::require_data(key_cache, "key_cache");
  detail::require_data(value_cache, "value_cache");
  detail::require_data(slot_mapping, "slot_mapping");
  detail::require_data(key_scale, "key_scale");
  detail::require_data(key_scale_cache, "key_scale_cache");
  if (!cache_layout.empty() && cache_layout != "BNBD") {
    invalid("cache_layout must be \"BNBD\" (or empty for BNBD), got \"", cache_layout, "\"");
  }

  // Ranks come first: every later rule indexes dimensions.
  detail::require_rank(key, "key", 3, "[num_tokens, num_heads, key_head_size]");
  detail::require_rank(value, "value", 3, "[num_tokens, num_heads, value_head_size]");
  detail::require_rank(key_cache, "key_cache", 4,
                       "[num_blocks, num_heads, block_size, key_head_size]");
  detail::require_rank(value_cache, "value_cache", 4,
                       "[num_blocks, num_heads, block_size, value_head_size]");
  detail::require_rank(slot_mapping, "slot_mapping", 1, "[num_tokens]");
  detail::require_rank(key_scale, "key_scale", 2, "[num_tokens, num_heads]");
  detail::require_rank(key_scale_cache, "key_scale_cache", 4,
                       "[num_blocks, num_heads, block_size, 1]");

  detail::require_dtype(key, "key", {DType::float8_e5m2, DType::float8_e4m3fn});
  detail::require_same_dtype(key, "key", value, "value");
  detail::require_same_dtype(key, "key", key_cache, "key_cache");
  detail::require_same_dtype(value, "value", value_cache, "value_cache");
  detail::require_index(slot_mapping, "slot_mapping");
  detail::require_dtype(key_scale, "key_scale", {DType::float32});
  detail::require_dtype(key_scale_cache, "key_scale_cache", {DType::float32});

  const std::int64_t T = key.dim(0), N = key.dim(1), Dk = key.dim(2);
  if (Dk == 0)
    invalid("key.shape[2] (key_head_size) must be > 0, got 0 (shape ", detail::shape_str(key), ")");
  detail::require_dim(value, "value", 0, T, "num_tokens of key");
  detail::require_dim(value, "value", 1, N, "num_heads of key");
  const std::int64_t Dv = value.dim(2);
  if (Dv == 0)
    invalid("value.shape[2] (value_head_size) must be > 0, got 0 (shape ", detail::shape_str(value),
            ")");

  const std::int64_t NB = key_cache.dim(0), BS = key_cache.dim(2);
  detail::require_dim(key_cache, "key_cache", 1, N, "num_heads of key");
  detail::require_dim(key_cache, "key_cache", 3, Dk, "key_head_size of key");
  detail::require_dim(value_cache, "value_cache", 0, NB, "num_blocks of key_cache");
  detail::require_dim(value_cache, "value_cache", 1, N, "num_heads of key");
  detail::require_dim(value_cache, "value_cache", 2, BS, "block_size of key_cache");
  detail::require_dim(value_cache, "value_cache", 3, Dv, "value_head_size of value");
  detail::require_dim(slot_mapping, "slot_mapping", 0, T, "num_tokens of key");
  detail::require_dim(key_scale, "key_scale", 0, T, "num_tokens of key");
  detail::require_dim(key_scale, "key_scale", 1, N, "num_heads of key");
  detail::require_dim(key_scale_cache, "key_scale_cache", 0, NB, "num_blocks of key_cache");
  detail::require_dim(key_scale_cache, "key_scale_cache", 1, N, "num_heads of key");
  detail::require_dim(key_scale_cache, "key_scale_cache", 2, BS, "block_size of key_cache");
  detail::require_dim(key_scale_cache, "key_scale_cache", 3, 1, "one scale per slot");

  const struct {
    const TensorView& t;
    const char* name;
  } all[] = {{key, "key"},
             {value, "value"},
             {key_cache, "key_cache"},
             {value_cache, "value_cache"},
             {slot_mapping, "slot_mapping"},
             {key_scale, "key_scale"},
             {key_scale_cache, "key_scale_cache"}};
  for (const auto& a : all) detail::require_sane_layout(a.t, a.name);
  // Caches are written row by row from several threads: distinct elements must be distinct
  // memory. Inputs are only read, so they may alias freely (e.g. broadcast scales).
  detail::require_no_self_overlap(key_cache, "key_cache");
  detail::require_no_self_overlap(value_cache, "value_cache");
  detail::require_no_self_overlap(key_scale_cache, "key_scale_cache");

  ScatterPaKvCacheWithKScalePlan plan;
  plan.key = key;
  plan.value = value;
  plan.key_cache = key_cache;
  plan.value_cache = value_cache;
  plan.slot_mapping = slot_mapping;
  plan.key_scale = key_scale;
  plan.key_scale_cache = key_scale_cache;
  plan.num_tokens = T;
  plan.num_heads = N;
  plan.key_head_size = Dk;
  plan.value_head_size = Dv;
  plan.num_blocks = NB;
  plan.block_size = BS;
  plan.num_slots = detail::checked_mul(NB, BS, "key_cache num_blocks * block_size");
  return plan;
}

void execute(const ScatterPaKvCacheWithKScalePlan& plan) {
  detail::scatter_pa_kv_cache_with_k_scale_cpu(plan);
}

void scatter_pa_kv_cache_with_k_scale(const TensorView& key, const TensorView& value,
                                      const TensorView& key_cache, const TensorView& value_cache,
                                      const TensorView& slot_mapping, const TensorView& key_scale,
                                      const TensorView& key_scale_cache,
                                      const std::string& cache_layout) {
  execute(plan_scatter_pa_kv_cache_with_k_scale(key, value, key_cache, value_cache, slot_mapping,
                                                key_scale, key_scale_cache, cache_layout));
}

}  // namespace kvscatter
