// kv_cache_update validation: every shape, dtype, stride and position rule in
// plan_kv_cache_update(); the operator has no data-dependent rule.
#include "core/check.h"
#include "ops/kv_cache_update/internal.h"

namespace kvscatter {
namespace {

using detail::invalid;

// One cache and its input; null pointers first, in argument order.
void check_pair(const TensorView& cache, const char* cache_name, const TensorView& input,
                const char* input_name) {
  detail::require_data(cache, cache_name);
  detail::require_data(input, input_name);
  detail::require_rank(cache, cache_name, 4, "(B, S, H, D)");
  detail::require_rank(input, input_name, 4, "(B, L, H, D)");
  detail::require_sane_layout(cache, cache_name);
  detail::require_sane_layout(input, input_name);
  detail::require_no_self_overlap(cache, cache_name);
  detail::require_dtype(cache, cache_name, {DType::float32, DType::bfloat16, DType::float16});
  if (input.dtype != DType::float32 && input.dtype != cache.dtype) {
    invalid(input_name, " dtype must be float32 or the cache dtype (", dtype_name(cache.dtype),
            "), got ", dtype_name(input.dtype));
  }
  for (int axis : {0, 2, 3}) {
    if (input.dim(axis) != cache.dim(axis)) {
      static constexpr const char* kAxis[] = {"B", "S", "H", "D"};
      invalid(input_name, ".shape[", axis, "] (", kAxis[axis], ") must equal ", cache_name,
              ".shape[", axis, "] = ", cache.dim(axis), ", got ", input.dim(axis), " (", input_name,
              " ", detail::shape_str(input), ", ", cache_name, " ", detail::shape_str(cache), ")");
    }
  }
  // Rows of D elements are read and written as contiguous runs.
  for (const TensorView* t : {&cache, &input}) {
    if (t->dim(3) > 1 && t->stride(3) != 1) {
      invalid(t == &cache ? cache_name : input_name,
              " must be contiguous in its last axis (stride 1), got stride ", t->stride(3));
    }
  }
}

}  // namespace

namespace detail::update {

void check_bound_data(const KvCacheUpdatePlan& p) {
  require_data(p.key_cache, "key_cache");
  require_data(p.new_keys, "new_keys");
  require_data(p.value_cache, "value_cache");
  require_data(p.new_values, "new_values");
}

}  // namespace detail::update

KvCacheUpdatePlan plan_kv_cache_update(const TensorView& key_cache, const TensorView& value_cache,
                                       const TensorView& new_keys, const TensorView& new_values,
                                       std::int64_t position) {
  check_pair(key_cache, "key_cache", new_keys, "new_keys");
  check_pair(value_cache, "value_cache", new_values, "new_values");
  for (int axis : {0, 1, 2}) {
    if (value_cache.dim(axis) != key_cache.dim(axis)) {
      invalid("value_cache.shape[", axis, "] must equal key_cache.shape[", axis,
              "] = ", key_cache.dim(axis), ", got ", value_cache.dim(axis), " (value_cache ",
              detail::shape_str(value_cache), ", key_cache ", detail::shape_str(key_cache), ")");
    }
  }
  if (new_values.dim(1) != new_keys.dim(1)) {
    invalid("new_values.shape[1] (L) must equal new_keys.shape[1] = ", new_keys.dim(1), ", got ",
            new_values.dim(1));
  }
  const std::int64_t seq = key_cache.dim(1), len = new_keys.dim(1);
  if (len > seq) {
    invalid("new_keys.shape[1] (L) = ", len, " exceeds the cache length S = ", seq);
  }
  if (position < 0 || position > seq - len) {
    invalid("position = ", position, " is out of range [0, ", seq - len, "] (S = ", seq,
            " cache slots, L = ", len, " new tokens)");
  }
  KvCacheUpdatePlan plan;
  plan.batch = key_cache.dim(0);
  plan.seq = seq;
  plan.heads = key_cache.dim(2);
  plan.head_size = key_cache.dim(3);
  plan.new_len = len;
  plan.cache_dtype = key_cache.dtype;
  plan.input_dtype = new_keys.dtype;
  plan.key_cache = key_cache;
  plan.value_cache = value_cache;
  plan.new_keys = new_keys;
  plan.new_values = new_values;
  plan.position = position;
  return plan;
}

std::int64_t kv_cache_update(const TensorView& key_cache, const TensorView& value_cache,
                             const TensorView& new_keys, const TensorView& new_values,
                             std::int64_t position) {
  const KvCacheUpdatePlan plan =
      plan_kv_cache_update(key_cache, value_cache, new_keys, new_values, position);
  execute(plan);
  return position + plan.new_len;
}

}  // namespace kvscatter
