// ScatterPaCache validation: the single-cache rules (dtypes, ranks, scenario
// shapes) here, then the key-only scatter_pa_kv_cache plan of the same call,
// which checks the rest (strides, slot values, compress lengths and offsets)
// with the messages both operators share.
#include <string>

#include "core/check.h"
#include "ops/scatter_pa_cache/internal.h"

namespace kvscatter {
namespace detail::scatter_cache {
namespace {

bool is_plain_dtype(DType d) {
  switch (d) {
    case DType::hifloat8:
    case DType::float8_e5m2:
    case DType::float8_e4m3fn:
    case DType::float4_e2m1:
    case DType::float4_e1m2:
      return true;
    default:
      return false;
  }
}

bool is_compress_dtype(DType d) {
  switch (d) {
    case DType::float32:
    case DType::float16:
    case DType::bfloat16:
    case DType::int8:
    case DType::uint8:
    case DType::int16:
    case DType::uint16:
    case DType::int32:
    case DType::uint32:
      return true;
    default:
      return false;
  }
}

bool is_fp4(DType d) { return d == DType::float4_e2m1 || d == DType::float4_e1m2; }

void check_dtypes(const TensorView& key, const TensorView& cache) {
  if (!is_plain_dtype(key.dtype) && !is_compress_dtype(key.dtype)) {
    invalid(
        "key dtype must be one of {float32, float16, bfloat16, int8, "
        "uint8, int16, uint16, "
        "int32, uint32, hifloat8, float8_e5m2, float8_e4m3fn, float4_e2m1, "
        "float4_e1m2}, got ",
        dtype_name(key.dtype));
  }
  if (cache.dtype != key.dtype) {
    invalid("key_cache dtype ", dtype_name(cache.dtype), " differs from key dtype ",
            dtype_name(key.dtype));
  }
}

void check_index_dtypes(const TensorView& slots, const ScatterPaCacheOptions& o) {
  require_index(slots, "slot_mapping");
  for (auto [t, name] : {std::pair{&o.compress_lens, "compress_lens"},
                         std::pair{&o.compress_seq_offsets, "compress_seq_offsets"},
                         std::pair{&o.seq_lens, "seq_lens"}}) {
    if (*t && (*t)->dtype != slots.dtype) {
      invalid(name, " dtype ", dtype_name((*t)->dtype), " differs from slot_mapping dtype ",
              dtype_name(slots.dtype), " (index tensors share one dtype)");
    }
  }
}

void check_plain(const TensorView& key, const TensorView& cache, const TensorView& slots,
                 const ScatterPaCacheOptions& o) {
  if (o.compress_lens || o.compress_seq_offsets || o.seq_lens) {
    invalid(
        "compress_lens, compress_seq_offsets and seq_lens must be None "
        "with a 3-D key");
  }
  if (cache.dim(2) != key.dim(1) || cache.dim(3) != key.dim(2)) {
    invalid("key_cache shape ", shape_str(cache), " must be [num_blocks, block_size, ", key.dim(1),
            ", ", key.dim(2), "] to match key ", shape_str(key));
  }
  if (slots.rank != 1 || slots.dim(0) != key.dim(0)) {
    invalid("slot_mapping shape ", shape_str(slots), " must be [", key.dim(0),
            "] (one slot per token of key)");
  }
}

// slot_mapping [batch, heads]; compress_lens also flat [batch * heads];
// compress_seq_offsets flat only.
void check_per_head(const TensorView& t, const char* name, std::int64_t b, std::int64_t nh,
                    bool two_d, bool flat) {
  if (two_d && t.rank == 2 && t.dim(0) == b && t.dim(1) == nh) return;
  if (flat && t.rank == 1 && t.dim(0) == b * nh) return;
  const std::string want = two_d && flat ? cat("[", b, ", ", nh, "] or [", b * nh, "]")
                           : two_d       ? cat("[", b, ", ", nh, "]")
                                         : cat("[", b * nh, "]");
  invalid(name, " shape ", shape_str(t), " must be ", want, " (batch ", b, " x num_heads ", nh,
          ")");
}

void check_compress(const TensorView& key, const TensorView& cache, const TensorView& slots,
                    const ScatterPaCacheOptions& o) {
  if (!is_compress_dtype(key.dtype)) {
    invalid("key dtype ", dtype_name(key.dtype),
            " is not supported with a 4-D key (compress scenarios take "
            "float32, float16, "
            "bfloat16, int8, uint8, int16, uint16, int32, uint32)");
  }
  if (!o.compress_lens || !o.seq_lens) {
    invalid("a 4-D key needs compress_lens and seq_lens (",
            !o.compress_lens ? "compress_lens" : "seq_lens", " is missing)");
  }
  if (cache.dim(2) != 1 || cache.dim(3) != key.dim(3)) {
    invalid("key_cache shape ", shape_str(cache), " must be [num_blocks, block_size, 1, ",
            key.dim(3), "] with a 4-D key");
  }
  const std::int64_t b = key.dim(0), nh = key.dim(2);
  check_per_head(slots, "slot_mapping", b, nh, true, false);
  check_per_head(*o.compress_lens, "compress_lens", b, nh, true, true);
  if (o.compress_seq_offsets) {
    check_per_head(*o.compress_seq_offsets, "compress_seq_offsets", b, nh, false, true);
  }
  if (o.seq_lens->rank != 1 || o.seq_lens->dim(0) != b) {
    invalid("seq_lens shape ", shape_str(*o.seq_lens), " must be [", b, "] (one length per batch)");
  }
}

}  // namespace

ScatterPaKvCachePlan bound_scatter_plan(const ScatterPaCachePlan& p) {
  ScatterPaKvCachePlan s = p.scatter;
  s.key.data = p.key.data;
  s.key_cache.data = p.key_cache.data;
  s.slot_mapping.data = p.slot_mapping.data;
  if (p.compress_lens) s.compress_lens->data = p.compress_lens->data;
  if (p.compress_seq_offsets) s.compress_seq_offsets->data = p.compress_seq_offsets->data;
  if (p.seq_lens) s.seq_lens->data = p.seq_lens->data;
  return s;
}

}  // namespace detail::scatter_cache

ScatterPaCachePlan plan_scatter_pa_cache(const TensorView& key, const TensorView& key_cache,
                                         const TensorView& slot_mapping,
                                         const ScatterPaCacheOptions& options) {
  using namespace detail;
  using namespace detail::scatter_cache;
  check_dtypes(key, key_cache);
  check_index_dtypes(slot_mapping, options);
  if (key.rank != 3 && key.rank != 4) {
    invalid(
        "key must be 3-D [tokens, num_heads, head_size] or 4-D [batch, "
        "seq_len, num_heads, "
        "head_size], got shape ",
        shape_str(key));
  }
  require_rank(key_cache, "key_cache", 4, "[num_blocks, block_size, num_heads, head_size]");
  ScatterPaCachePlan p;
  p.key = key;
  p.key_cache = key_cache;
  p.slot_mapping = slot_mapping;
  p.compress_lens = options.compress_lens;
  p.compress_seq_offsets = options.compress_seq_offsets;
  p.seq_lens = options.seq_lens;
  if (key.rank == 3) {
    check_plain(key, key_cache, slot_mapping, options);
  } else {
    check_compress(key, key_cache, slot_mapping, options);
    p.scenario = options.compress_seq_offsets ? ScatterPaCacheScenario::ReduceMean
                                              : ScatterPaCacheScenario::TailKeep;
  }
  // Packed FP4 rows are bytes to the copy kernels; the caller's views count elements.
  TensorView k = key, kc = key_cache;
  if (is_fp4(key.dtype)) {
    k = packed_fp4_bytes(key, "key");
    kc = packed_fp4_bytes(key_cache, "key_cache");
    k.dtype = kc.dtype = DType::uint8;
  }
  ScatterPaKvCacheOptions inner;
  inner.compress_lens = options.compress_lens;
  inner.compress_seq_offsets = options.compress_seq_offsets;
  inner.seq_lens = options.seq_lens;
  p.scatter = plan_scatter_pa_kv_cache(k, std::nullopt, kc, std::nullopt, slot_mapping, inner);
  return p;
}

void scatter_pa_cache(const TensorView& key, const TensorView& key_cache,
                      const TensorView& slot_mapping, const ScatterPaCacheOptions& options) {
  execute(plan_scatter_pa_cache(key, key_cache, slot_mapping, options));
}

}  // namespace kvscatter
