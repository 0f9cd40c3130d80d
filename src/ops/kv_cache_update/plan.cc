// Contiguous cache update: validation (plan), reference kernel and optimized CPU kernel.
#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kvscatter/formats.h"
#include "kvscatter/kv_cache_update.h"
#include "runtime/parallel.h"

namespace kvscatter {
namespace {

using detail::invalid;

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
              ".shape[", axis, "] = ", cache.dim(axis), ", got ", input.dim(axis), " (",
              input_name, " ", detail::shape_str(input), ", ", cache_name, " ",
              detail::shape_str(cache), ")");
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

// Converts n elements from `in` dtype to `out` dtype; same dtype is a byte copy.
void convert_row(void* dst, DType out, const void* src, DType in, std::int64_t n) {
  const auto count = static_cast<std::size_t>(n);
  if (in == out) {
    std::memcpy(dst, src, count * dtype_size(in));
  } else if (out == DType::bfloat16) {
    formats::float32_to_bfloat16(static_cast<const float*>(src), static_cast<std::uint16_t*>(dst),
                                 count);
  } else {
    formats::float32_to_float16(static_cast<const float*>(src), static_cast<std::uint16_t*>(dst),
                                count);
  }
}

char* at(const TensorView& t, std::int64_t b, std::int64_t s, std::int64_t h) {
  const std::int64_t off = b * t.stride(0) + s * t.stride(1) + h * t.stride(2);
  return static_cast<char*>(t.data) + off * static_cast<std::int64_t>(t.element_size());
}

// The largest run of elements that is contiguous in both cache and input, starting at a
// (b, l, h) row: D, H*D when the head axis is dense, L*H*D when the sequence axis is too.
struct Runs {
  std::int64_t rows_l = 0, rows_h = 0, run = 0;  // rows per b along L and H, run length
};

Runs plan_runs(const TensorView& cache, const TensorView& input, std::int64_t len) {
  const std::int64_t h = cache.dim(2), d = cache.dim(3);
  const bool heads_dense = (h <= 1 || (cache.stride(2) == d && input.stride(2) == d));
  const bool seq_dense = heads_dense && (len <= 1 || (cache.stride(1) == h * d &&
                                                      input.stride(1) == h * d));
  if (seq_dense) return {1, 1, len * h * d};
  if (heads_dense) return {len, 1, h * d};
  return {len, h, d};
}

void run_pair(const TensorView& cache, const TensorView& input, std::int64_t position) {
  const std::int64_t batch = cache.dim(0), len = input.dim(1);
  if (batch == 0 || len == 0 || cache.dim(2) == 0 || cache.dim(3) == 0) return;
  const Runs r = plan_runs(cache, input, len);
  // Long runs are cut into pieces so a single-batch prefill still spreads over threads.
  constexpr std::int64_t kPiece = 32 * 1024;
  const std::int64_t pieces = (r.run + kPiece - 1) / kPiece;
  const std::int64_t piece_len = (r.run + pieces - 1) / pieces;
  const std::int64_t items = batch * r.rows_l * r.rows_h * pieces;
  const std::int64_t bytes = piece_len * static_cast<std::int64_t>(
                                             dtype_size(cache.dtype) + dtype_size(input.dtype));
  const std::int64_t in_esize = static_cast<std::int64_t>(dtype_size(input.dtype));
  const std::int64_t out_esize = static_cast<std::int64_t>(dtype_size(cache.dtype));
  detail::parallel_for(items, detail::grain_for_bytes(bytes), [&](std::int64_t i0,
                                                                  std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      std::int64_t rest = i;
      const std::int64_t p = rest % pieces;
      rest /= pieces;
      const std::int64_t h = rest % r.rows_h;
      rest /= r.rows_h;
      const std::int64_t l = rest % r.rows_l;
      const std::int64_t b = rest / r.rows_l;
      const std::int64_t first = p * piece_len;
      const std::int64_t n = std::min(piece_len, r.run - first);
      convert_row(at(cache, b, position + l, h) + first * out_esize, cache.dtype,
                  at(input, b, l, h) + first * in_esize, input.dtype, n);
    }
  });
}

}  // namespace

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

void execute(const KvCacheUpdatePlan& plan) {
  run_pair(plan.key_cache, plan.new_keys, plan.position);
  run_pair(plan.value_cache, plan.new_values, plan.position);
}

std::int64_t kv_cache_update(const TensorView& key_cache, const TensorView& value_cache,
                             const TensorView& new_keys, const TensorView& new_values,
                             std::int64_t position) {
  const KvCacheUpdatePlan plan =
      plan_kv_cache_update(key_cache, value_cache, new_keys, new_values, position);
  execute(plan);
  return position + plan.new_len;
}

namespace reference {

namespace {
void write_pair(const TensorView& cache, const TensorView& input, std::int64_t position) {
  for (std::int64_t b = 0; b < input.dim(0); ++b) {
    for (std::int64_t l = 0; l < input.dim(1); ++l) {
      for (std::int64_t h = 0; h < input.dim(2); ++h) {
        char* dst = at(cache, b, position + l, h);
        const char* src = at(input, b, l, h);
        for (std::int64_t d = 0; d < input.dim(3); ++d) {
          if (input.dtype == cache.dtype) {
            const std::size_t es = dtype_size(cache.dtype);
            std::memcpy(dst + static_cast<std::size_t>(d) * es,
                        src + static_cast<std::size_t>(d) * es, es);
            continue;
          }
          float x;
          std::memcpy(&x, src + d * 4, 4);
          const auto code = static_cast<std::uint16_t>(formats::encode(cache.dtype, x));
          std::memcpy(dst + d * 2, &code, 2);
        }
      }
    }
  }
}
}  // namespace

void execute(const KvCacheUpdatePlan& plan) {
  write_pair(plan.key_cache, plan.new_keys, plan.position);
  write_pair(plan.value_cache, plan.new_values, plan.position);
}

}  // namespace reference
}  // namespace kvscatter
