// IndexerQuantCache validation: every shape, dtype, stride and mode rule in
// plan_indexer_quant_cache(), and the slot check that execute() runs before writing.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/index.h"
#include "core/slots.h"
#include "ops/indexer_quant_cache/internal.h"

namespace kvscatter {
namespace detail::indexer {
namespace {

const char* mode_name(IndexerQuantMode m) {
  switch (m) {
    case IndexerQuantMode::mxfp8:
      return "mxfp8";
    case IndexerQuantMode::fp8:
      return "fp8";
    case IndexerQuantMode::hifloat8:
      return "hifloat8";
    case IndexerQuantMode::mxfp4:
      return "mxfp4";
  }
  return "?";
}

void check_x(const TensorView& x) {
  require_dtype(x, "x", {DType::float16, DType::bfloat16});
  if (x.rank < 2) invalid("x must have at least 2 dimensions [..., d], got shape ", shape_str(x));
  const std::int64_t d = x.dim(x.rank - 1);
  if (d <= 0 || d % 32 != 0 || d > 8192) {
    invalid("x last dim d = ", d, " must be a positive multiple of 32 and at most 8192");
  }
  if (x.stride(x.rank - 1) != 1) {
    invalid("x.strides[", x.rank - 1, "] must be 1 (rows are contiguous), got ",
            x.stride(x.rank - 1));
  }
}

void check_mode_dtypes(const TensorView& cache, const TensorView& scale, IndexerQuantMode m) {
  const char* name = mode_name(m);
  auto fits = [](DType d, std::initializer_list<DType> ok) {
    return std::find(ok.begin(), ok.end(), d) != ok.end();
  };
  bool cache_ok = false, scale_ok = false;
  const char *cache_want = "", *scale_want = "";
  if (m == IndexerQuantMode::mxfp8 || m == IndexerQuantMode::fp8) {
    cache_ok = fits(cache.dtype, {DType::float8_e4m3fn, DType::float8_e5m2});
    cache_want = "float8_e4m3fn or float8_e5m2";
  } else if (m == IndexerQuantMode::hifloat8) {
    cache_ok = fits(cache.dtype, {DType::uint8, DType::hifloat8});
    cache_want = "uint8 or hifloat8";
  } else {
    cache_ok = fits(cache.dtype, {DType::float4_e2m1, DType::float4_e1m2});
    cache_want = "float4_e2m1 or float4_e1m2, packed";
  }
  if (m == IndexerQuantMode::mxfp8 || m == IndexerQuantMode::mxfp4) {
    scale_ok = fits(scale.dtype, {DType::float8_e8m0, DType::uint8});
    scale_want = "float8_e8m0 or uint8";
  } else {
    scale_ok = scale.dtype == DType::float32;
    scale_want = "float32";
  }
  if (!cache_ok) {
    invalid("cache dtype ", dtype_name(cache.dtype), " does not fit quant_mode \"", name, "\" (",
            cache_want, ")");
  }
  if (!scale_ok) {
    invalid("cache_scale dtype ", dtype_name(scale.dtype), " does not fit quant_mode \"", name,
            "\" (", scale_want, ")");
  }
}

// [num_blocks, block_size, 1, W], contiguous inside a block; blocks may lie further apart.
void check_cache_shape(const TensorView& t, const char* name) {
  require_rank(t, name, 4, "[num_blocks, block_size, 1, row]");
  if (t.dim(2) != 1)
    invalid(name, ".shape[2] must be 1, got ", t.dim(2), " (shape ", shape_str(t), ")");
  if (t.dim(3) > 1 && t.stride(3) != 1) {
    invalid(name, ".strides[3] must be 1 (a row is contiguous), got ", t.stride(3));
  }
  if (t.dim(1) > 1 && t.stride(1) < t.dim(3)) {
    invalid(name, ".strides[1] must be >= ", t.dim(3), " (rows must not overlap), got ",
            t.stride(1));
  }
  if (t.dim(0) > 1 && t.stride(0) < t.dim(1) * std::max<std::int64_t>(t.stride(1), t.dim(3))) {
    invalid(name, ".strides[0] must cover one block (blocks must not overlap), got ", t.stride(0));
  }
}

void check_slot_shape(const TensorView& slots, const TensorView& x) {
  require_index(slots, "slot_mapping");
  bool ok = slots.rank == x.rank - 1;
  for (int a = 0; ok && a < slots.rank; ++a) ok = slots.dim(a) == x.dim(a);
  if (!ok) {
    TensorView lead = x;
    lead.rank = x.rank - 1;
    invalid("slot_mapping shape ", shape_str(slots),
            " must equal x.shape[:-1] = ", shape_str(lead));
  }
}

void check_geometry(IndexerQuantCachePlan& p) {
  check_cache_shape(p.cache, "cache");
  check_cache_shape(p.cache_scale, "cache_scale");
  p.num_blocks = p.cache.dim(0);
  p.block_size = p.cache.dim(1);
  if (p.block_size < 1) invalid("cache block_size must be >= 1, got ", p.block_size);
  if (p.cache_scale.dim(0) != p.num_blocks || p.cache_scale.dim(1) != p.block_size) {
    invalid("cache_scale has ", p.cache_scale.dim(0), " blocks of ", p.cache_scale.dim(1),
            " slots, cache has ", p.num_blocks, " blocks of ", p.block_size);
  }
  p.num_slots = checked_mul(p.num_blocks, p.block_size, "cache slots");
  const bool fp4 = p.options.quant_mode == IndexerQuantMode::mxfp4;
  if (p.cache.dim(3) < p.d) {
    invalid("cache row holds ", p.cache.dim(3), " elements", fp4 ? " (packed two per byte)" : "",
            ", needs ", p.d, " for d = ", p.d);
  }
  // The kernels address packed FP4 rows as bytes: d / 2 of them.
  p.code_bytes = fp4 ? p.d / 2 : p.d;
  if (fp4) p.cache = packed_fp4_bytes(p.cache, "cache");
  const bool mx = p.options.quant_mode == IndexerQuantMode::mxfp8 || fp4;
  const std::int64_t need = mx ? p.d / 32 : 1;  // hifloat8 writes none but needs the entry
  p.scale_count = p.options.quant_mode == IndexerQuantMode::hifloat8 ? 0 : need;
  if (p.cache_scale.dim(3) < need) {
    invalid("cache_scale row holds ", p.cache_scale.dim(3), " entries, needs ", need,
            " for d = ", p.d);
  }
}

}  // namespace

void check_bound_data(const IndexerQuantCachePlan& p) {
  require_data(p.cache, "cache");
  require_data(p.cache_scale, "cache_scale");
  require_data(p.x, "x");
  require_data(p.slot_mapping, "slot_mapping");
}

namespace {

// Throws for the first slot of s[0, n) that is neither -1 nor in [0, num_slots).
void check_slot_values(const IndexerQuantCachePlan& p, const std::int64_t* s, std::int64_t n) {
  const std::int64_t i = first_bad_slot(s, n, p.num_slots);
  if (i < 0) return;
  invalid("slot_mapping", index_str(p.slot_mapping, i), " = ", s[i],
          " is out of range: -1 (skip) or [0, ", p.num_slots, ")");
}

}  // namespace

std::vector<std::int64_t> checked_slots(const IndexerQuantCachePlan& p) {
  std::vector<std::int64_t> slots;
  read_indices(p.slot_mapping, slots);
  check_slot_values(p, slots.data(), static_cast<std::int64_t>(slots.size()));
  return slots;
}

const std::int64_t* checked_slots(const IndexerQuantCachePlan& p,
                                  std::vector<std::int64_t>& storage, bool copy) {
  const TensorView& m = p.slot_mapping;
  // In place only where the int64 entries are aligned: a view may start at any byte.
  if (copy || m.dtype != DType::int64 || !m.is_contiguous() ||
      reinterpret_cast<std::uintptr_t>(m.data) % alignof(std::int64_t) != 0) {
    storage = checked_slots(p);
    return storage.data();
  }
  const auto* s = static_cast<const std::int64_t*>(m.data);
  check_slot_values(p, s, p.num_rows);
  return s;
}

}  // namespace detail::indexer

IndexerQuantMode parse_indexer_quant_mode(std::string_view name) {
  std::string s(name);
  const auto first = s.find_first_not_of(" \t\n\r\f\v");
  s = first == std::string::npos ? ""
                                 : s.substr(first, s.find_last_not_of(" \t\n\r\f\v") - first + 1);
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s == "mxfp8" || s == "0") return IndexerQuantMode::mxfp8;
  if (s == "fp8" || s == "1") return IndexerQuantMode::fp8;
  if (s == "hifloat8" || s == "2") return IndexerQuantMode::hifloat8;
  if (s == "mxfp4" || s == "3") return IndexerQuantMode::mxfp4;
  detail::invalid("quant_mode should be one of [mxfp8, fp8, hifloat8, mxfp4], got '", name, "'");
}

IndexerQuantCachePlan plan_indexer_quant_cache(const TensorView& cache,
                                               const TensorView& cache_scale, const TensorView& x,
                                               const TensorView& slot_mapping,
                                               const IndexerQuantCacheOptions& options) {
  using namespace detail;
  using namespace detail::indexer;
  IndexerQuantCachePlan p;
  p.cache = cache;
  p.cache_scale = cache_scale;
  p.x = x;
  p.slot_mapping = slot_mapping;
  p.options = options;
  if (static_cast<int>(options.quant_mode) > 3) {
    invalid("quant_mode should be one of [mxfp8, fp8, hifloat8, mxfp4], got enum value ",
            static_cast<int>(options.quant_mode));
  }
  require_sane_layout(cache, "cache");
  require_sane_layout(cache_scale, "cache_scale");
  require_sane_layout(x, "x");
  require_sane_layout(slot_mapping, "slot_mapping");
  check_bound_data(p);
  check_x(x);
  check_mode_dtypes(cache, cache_scale, options.quant_mode);
  check_slot_shape(slot_mapping, x);
  p.d = x.dim(x.rank - 1);
  p.num_rows = 1;
  for (int a = 0; a + 1 < x.rank; ++a) p.num_rows = checked_mul(p.num_rows, x.dim(a), "x rows");
  check_geometry(p);
  p.extents = detail::extents_of(detail::indexer::operands(p));
  return p;
}

void indexer_quant_cache(const TensorView& cache, const TensorView& cache_scale,
                         const TensorView& x, const TensorView& slot_mapping,
                         const IndexerQuantCacheOptions& options) {
  execute(plan_indexer_quant_cache(cache, cache_scale, x, slot_mapping, options));
}

}  // namespace kvscatter
