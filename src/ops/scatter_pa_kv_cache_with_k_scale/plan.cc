// scatter_pa_kv_cache_with_k_scale validation. The operator moves bytes only, so every rule is
// a shape, dtype or layout rule checked by the plan; out-of-range slots are skipped, never
// rejected (see docs/semantics.md, "Out-of-range slots").
#include <vector>

#include "core/check.h"
#include "core/index.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"
#include "ops/scatter_pa_kv_cache_with_k_scale/internal.h"

namespace kvscatter {

KScaleCacheLayout parse_k_scale_cache_layout(std::string_view text) {
  if (text.empty() || text == "BNBD") return KScaleCacheLayout::BNBD;
  detail::invalid("cache_layout must be \"BNBD\" (or empty for BNBD), got \"", text, "\"");
}

namespace detail::k_scale {
namespace {

using Plan = ScatterPaKvCacheWithKScalePlan;

// Ranks come first: every later rule indexes dimensions.
void check_ranks(const Plan& p) {
  require_rank(p.key, "key", 3, "[num_tokens, num_heads, key_head_size]");
  require_rank(p.value, "value", 3, "[num_tokens, num_heads, value_head_size]");
  require_rank(p.key_cache, "key_cache", 4, "[num_blocks, num_heads, block_size, key_head_size]");
  require_rank(p.value_cache, "value_cache", 4,
               "[num_blocks, num_heads, block_size, value_head_size]");
  require_rank(p.slot_mapping, "slot_mapping", 1, "[num_tokens]");
  require_rank(p.key_scale, "key_scale", 2, "[num_tokens, num_heads]");
  require_rank(p.key_scale_cache, "key_scale_cache", 4, "[num_blocks, num_heads, block_size, 1]");
}

void check_dtypes(const Plan& p) {
  require_dtype(p.key, "key", {DType::float8_e5m2, DType::float8_e4m3fn});
  require_same_dtype(p.key, "key", p.value, "value");
  require_same_dtype(p.key, "key", p.key_cache, "key_cache");
  require_same_dtype(p.value, "value", p.value_cache, "value_cache");
  require_index(p.slot_mapping, "slot_mapping");
  require_dtype(p.key_scale, "key_scale", {DType::float32});
  require_dtype(p.key_scale_cache, "key_scale_cache", {DType::float32});
}

void require_head_size(const TensorView& t, const char* name, const char* what) {
  if (t.dim(2) == 0) {
    invalid(name, ".shape[2] (", what, ") must be > 0, got 0 (shape ", shape_str(t), ")");
  }
}

// Every dimension against key (tokens, heads, key head size), value (value head size) and
// key_cache (blocks, block size).
void check_dims(const Plan& p) {
  const std::int64_t T = p.key.dim(0), N = p.key.dim(1);
  require_head_size(p.key, "key", "key_head_size");
  require_dim(p.value, "value", 0, T, "num_tokens of key");
  require_dim(p.value, "value", 1, N, "num_heads of key");
  require_head_size(p.value, "value", "value_head_size");
  const std::int64_t NB = p.key_cache.dim(0), BS = p.key_cache.dim(2);
  require_dim(p.key_cache, "key_cache", 1, N, "num_heads of key");
  require_dim(p.key_cache, "key_cache", 3, p.key.dim(2), "key_head_size of key");
  require_dim(p.value_cache, "value_cache", 0, NB, "num_blocks of key_cache");
  require_dim(p.value_cache, "value_cache", 1, N, "num_heads of key");
  require_dim(p.value_cache, "value_cache", 2, BS, "block_size of key_cache");
  require_dim(p.value_cache, "value_cache", 3, p.value.dim(2), "value_head_size of value");
  require_dim(p.slot_mapping, "slot_mapping", 0, T, "num_tokens of key");
  require_dim(p.key_scale, "key_scale", 0, T, "num_tokens of key");
  require_dim(p.key_scale, "key_scale", 1, N, "num_heads of key");
  require_dim(p.key_scale_cache, "key_scale_cache", 0, NB, "num_blocks of key_cache");
  require_dim(p.key_scale_cache, "key_scale_cache", 1, N, "num_heads of key");
  require_dim(p.key_scale_cache, "key_scale_cache", 2, BS, "block_size of key_cache");
  require_dim(p.key_scale_cache, "key_scale_cache", 3, 1, "one scale per slot");
}

void check_layouts(const Plan& p) {
  const std::pair<const TensorView*, const char*> all[] = {{&p.key, "key"},
                                                           {&p.value, "value"},
                                                           {&p.key_cache, "key_cache"},
                                                           {&p.value_cache, "value_cache"},
                                                           {&p.slot_mapping, "slot_mapping"},
                                                           {&p.key_scale, "key_scale"},
                                                           {&p.key_scale_cache, "key_scale_cache"}};
  for (const auto& [t, name] : all) require_sane_layout(*t, name);
  // Caches are written row by row from several threads: distinct elements must be distinct
  // memory. Inputs are only read, so they may alias freely (e.g. broadcast scales).
  require_no_self_overlap(p.key_cache, "key_cache");
  require_no_self_overlap(p.value_cache, "value_cache");
  require_no_self_overlap(p.key_scale_cache, "key_scale_cache");
}

}  // namespace

void check_bound_data(const Plan& p) {
  require_data(p.key, "key");
  require_data(p.value, "value");
  require_data(p.key_cache, "key_cache");
  require_data(p.value_cache, "value_cache");
  require_data(p.slot_mapping, "slot_mapping");
  require_data(p.key_scale, "key_scale");
  require_data(p.key_scale_cache, "key_scale_cache");
}

void check_data(const Plan& p, std::vector<std::int64_t>& slots) {
  read_indices(p.slot_mapping, slots);
  for (auto& s : slots) {
    if (s >= p.num_slots) s = -1;  // out of range: skipped like a padding token
  }
}

}  // namespace detail::k_scale

ScatterPaKvCacheWithKScalePlan plan_scatter_pa_kv_cache_with_k_scale(
    const TensorView& key, const TensorView& value, const TensorView& key_cache,
    const TensorView& value_cache, const TensorView& slot_mapping, const TensorView& key_scale,
    const TensorView& key_scale_cache, KScaleCacheLayout cache_layout) {
  ScatterPaKvCacheWithKScalePlan p;
  p.key = key;
  p.value = value;
  p.key_cache = key_cache;
  p.value_cache = value_cache;
  p.slot_mapping = slot_mapping;
  p.key_scale = key_scale;
  p.key_scale_cache = key_scale_cache;
  p.cache_layout = cache_layout;
  // A null tensor that has elements is a null_pointer error, before any other rule.
  detail::k_scale::check_bound_data(p);
  if (cache_layout != KScaleCacheLayout::BNBD) {
    detail::invalid("cache_layout must be BNBD, got the value ",
                    static_cast<unsigned>(cache_layout));
  }
  detail::k_scale::check_ranks(p);
  detail::k_scale::check_dtypes(p);
  detail::k_scale::check_dims(p);
  detail::k_scale::check_layouts(p);
  p.num_tokens = key.dim(0);
  p.num_heads = key.dim(1);
  p.key_head_size = key.dim(2);
  p.value_head_size = value.dim(2);
  p.num_blocks = key_cache.dim(0);
  p.block_size = key_cache.dim(2);
  p.num_slots =
      detail::checked_mul(p.num_blocks, p.block_size, "key_cache num_blocks * block_size");
  return p;
}

void scatter_pa_kv_cache_with_k_scale(const TensorView& key, const TensorView& value,
                                      const TensorView& key_cache, const TensorView& value_cache,
                                      const TensorView& slot_mapping, const TensorView& key_scale,
                                      const TensorView& key_scale_cache,
                                      KScaleCacheLayout cache_layout) {
  execute(plan_scatter_pa_kv_cache_with_k_scale(key, value, key_cache, value_cache, slot_mapping,
                                                key_scale, key_scale_cache, cache_layout));
}

}  // namespace kvscatter
