// GatherPaKvCache validation: every shape, dtype, stride and mode rule in
// plan_gather_pa_kv_cache(), and the data-dependent rules (lengths, offsets,
// table width, block ids, output rows) in check_data(), which execute() runs
// over the whole batch before writing.
#include <string>

#include "core/check.h"
#include "core/index.h"
#include "ops/gather_pa_kv_cache/internal.h"

namespace kvscatter {
namespace detail::gather {
namespace {

void require_cache_dtype(const TensorView& t, const char* name) {
  require_dtype(t, name,
                {DType::float32, DType::float16, DType::bfloat16, DType::int8, DType::uint8,
                 DType::int16, DType::uint16, DType::int32, DType::uint32, DType::hifloat8,
                 DType::float8_e5m2, DType::float8_e4m3fn});
}

// Axes [from, rank) row-major contiguous (size-1 axes may have any stride).
void require_inner_contiguous(const TensorView& t, const char* name, int from, const char* why) {
  std::int64_t expect = 1;
  for (int i = t.rank - 1; i >= from; --i) {
    if (t.dim(i) != 1 && t.stride(i) != expect) {
      invalid(name, ".strides[", i, "] must be ", expect, " (", why, "), got ", t.stride(i),
              " (shape ", shape_str(t), ")");
    }
    expect = checked_mul(expect, t.dim(i), name);
  }
}

// Caches: contiguous inside a block; blocks may lie further apart but must not
// overlap. Output tensors: each row contiguous; rows may lie further apart but
// must not overlap.
void require_outer_strided(const TensorView& t, const char* name, const char* what) {
  require_inner_contiguous(t, name, 1, what);
  std::int64_t inner = 1;
  for (int i = 1; i < t.rank; ++i) inner = checked_mul(inner, t.dim(i), name);
  if (t.dim(0) > 1 && t.stride(0) < inner) {
    invalid(name, ".strides[0] must be >= ", inner, " (", what, "; they must not overlap), got ",
            t.stride(0));
  }
}

void check_value_pairing(const std::optional<TensorView>& vc, const std::optional<TensorView>& v) {
  if (vc.has_value() != v.has_value()) {
    invalid("value and value_cache must both be given or both be None (got only ",
            v ? "value" : "value_cache", ")");
  }
}

void check_dtypes(const GatherPaKvCachePlan& p) {
  require_cache_dtype(p.key_cache, "key_cache");
  if (p.key.dtype != p.key_cache.dtype) {
    invalid("key dtype ", dtype_name(p.key.dtype), " differs from key_cache dtype ",
            dtype_name(p.key_cache.dtype));
  }
  if (!p.value_cache) return;
  require_cache_dtype(*p.value_cache, "value_cache");
  if (p.cache_mode == CacheMode::Norm && p.value_cache->dtype != p.key_cache.dtype) {
    invalid("value_cache dtype ", dtype_name(p.value_cache->dtype),
            " differs from key_cache dtype ", dtype_name(p.key_cache.dtype),
            " (allowed in PA_NZ only)");
  }
  if (p.value->dtype != p.value_cache->dtype) {
    invalid("value dtype ", dtype_name(p.value->dtype), " differs from value_cache dtype ",
            dtype_name(p.value_cache->dtype));
  }
}

void check_index_tensors(const GatherPaKvCachePlan& p) {
  require_index(p.block_tables, "block_tables");
  require_rank(p.block_tables, "block_tables", 2, "[batch, max_blocks_per_seq]");
  const std::int64_t b = p.block_tables.dim(0);
  auto same_dtype = [&](const TensorView& t, const char* name) {
    if (t.dtype != p.block_tables.dtype) {
      invalid(name, " dtype ", dtype_name(t.dtype), " differs from block_tables dtype ",
              dtype_name(p.block_tables.dtype), " (index tensors share one dtype)");
    }
  };
  same_dtype(p.seq_lens, "seq_lens");
  const std::int64_t want = p.is_seq_lens_cumsum ? b + 1 : b;
  if (p.seq_lens.rank != 1 || p.seq_lens.dim(0) != want) {
    invalid("seq_lens shape ", shape_str(p.seq_lens), " must be [", want, "] for batch ", b,
            " (is_seq_lens_cumsum=", p.is_seq_lens_cumsum ? "True" : "False", ")");
  }
  if (!p.seq_offset) return;
  same_dtype(*p.seq_offset, "seq_offset");
  if (p.seq_offset->rank != 1 || p.seq_offset->dim(0) != b) {
    invalid("seq_offset shape ", shape_str(*p.seq_offset), " must be [", b, "] for batch ", b);
  }
}

// One cache and its output. Returns the row length in elements (Norm: the head
// size).
std::int64_t check_side(const GatherPaKvCachePlan& p, const TensorView& c, const char* cname,
                        const TensorView& out, const char* oname) {
  const bool nz = p.cache_mode == CacheMode::PA_NZ;
  require_rank(c, cname, 4,
               nz ? "[num_blocks, num_heads*head_size/L, block_size, L]"
                  : "[num_blocks, block_size, num_heads, head_size]");
  require_outer_strided(c, cname, "a cache may be strided only along its block axis");
  if (nz) {
    const auto lanes = static_cast<std::int64_t>(32 / c.element_size());
    if (c.dim(3) != lanes) {
      invalid(cname, ".shape[3] must be ", lanes, " (32 bytes of ", dtype_name(c.dtype),
              ") in PA_NZ, got ", c.dim(3), " (shape ", shape_str(c), ")");
    }
    const std::int64_t row = checked_mul(c.dim(1), lanes, cname);
    if (out.rank != 2 || out.dim(1) != row) {
      invalid(oname, " shape ", shape_str(out), " must be [num_tokens, ", row, "] to match ", cname,
              " ", shape_str(c));
    }
  } else if (out.rank != 3 || out.dim(1) != c.dim(2) || out.dim(2) != c.dim(3)) {
    invalid(oname, " shape ", shape_str(out), " must be [num_tokens, ", c.dim(2), ", ", c.dim(3),
            "] to match ", cname, " ", shape_str(c));
  }
  require_outer_strided(out, oname, "rows are contiguous and may lie further apart");
  return nz ? out.dim(1) : c.dim(3);
}

void check_geometry(GatherPaKvCachePlan& p) {
  const bool nz = p.cache_mode == CacheMode::PA_NZ;
  p.key_head_size = check_side(p, p.key_cache, "key_cache", p.key, "key");
  p.num_blocks = p.key_cache.dim(0);
  p.block_size = p.key_cache.dim(nz ? 2 : 1);
  p.num_heads = nz ? 1 : p.key_cache.dim(2);
  if (p.block_size < 1) invalid("key_cache block_size must be >= 1, got ", p.block_size);
  p.num_rows = p.key.dim(0);
  if (!p.value_cache) return;
  const TensorView& vc = *p.value_cache;
  p.value_head_size = check_side(p, vc, "value_cache", *p.value, "value");
  const std::int64_t vbs = vc.dim(nz ? 2 : 1);
  if (vc.dim(0) != p.num_blocks || vbs != p.block_size) {
    invalid("value_cache has ", vc.dim(0), " blocks of ", vbs, " slots, key_cache has ",
            p.num_blocks, " blocks of ", p.block_size);
  }
  if (!nz && vc.dim(2) != p.num_heads) {
    invalid("value_cache has ", vc.dim(2), " heads, key_cache has ", p.num_heads);
  }
  if (p.value->dim(0) != p.num_rows) {
    invalid("value has ", p.value->dim(0), " rows, key has ", p.num_rows,
            " (one row per gathered token in both)");
  }
}

// Lengths (plain or cumulative) into `lens`; returns the total.
std::int64_t read_lengths(const GatherPaKvCachePlan& p, std::vector<std::int64_t>& lens) {
  const IndexReader sl(p.seq_lens);
  lens.resize(static_cast<std::size_t>(p.batch));
  if (p.is_seq_lens_cumsum && sl[0] != 0) {
    invalid("seq_lens[0] = ", sl[0], " must be 0 when is_seq_lens_cumsum is True");
  }
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    std::int64_t n = sl[b];
    if (p.is_seq_lens_cumsum) {
      if (sl[b + 1] < sl[b]) {
        invalid("seq_lens[", b + 1, "] = ", sl[b + 1], " is less than seq_lens[", b, "] = ", sl[b],
                " (cumulative lengths never decrease)");
      }
      n = sl[b + 1] - sl[b];
    } else if (n < 0) {
      invalid("seq_lens[", b, "] = ", n, " is negative");
    }
    lens[static_cast<std::size_t>(b)] = n;
    total = checked_add(total, n, "seq_lens total");
  }
  return total;
}

// Table columns of one sequence: range check (table width, block ids) and its
// segments.
void add_segments(const GatherPaKvCachePlan& p, const IndexReader& table, std::int64_t b,
                  std::int64_t len, std::int64_t offset, std::int64_t row, CheckedData& out) {
  const std::int64_t bs = p.block_size, w = p.table_width;
  const std::int64_t nblk = len / bs + (len % bs != 0);
  const std::int64_t shift = offset / bs;
  if (nblk > w || shift > w - nblk) {
    invalid("batch ", b, " needs block_tables[", b, "][", shift, ":", shift + nblk,
            "] (seq_offset ", offset, " // block_size ", bs, " = ", shift, ", ", nblk,
            " blocks) but block_tables has ", w, " columns");
  }
  for (std::int64_t k = 0; k < nblk; ++k) {
    const std::int64_t id = table[b * w + shift + k];
    if (id >= p.num_blocks) {
      invalid("block_tables[", b, "][", shift + k, "] = ", id, " is out of range [0, ",
              p.num_blocks, ") (key_cache has ", p.num_blocks, " blocks)");
    }
    const std::int64_t count = k + 1 < nblk ? bs : len - k * bs;
    out.segments.push_back({id < 0 ? -1 : id, row + k * bs, count});
  }
}

}  // namespace

void check_bound_data(const GatherPaKvCachePlan& p) {
  require_data(p.key_cache, "key_cache");
  require_data(p.block_tables, "block_tables");
  require_data(p.seq_lens, "seq_lens");
  require_data(p.key, "key");
  if (p.value_cache) require_data(*p.value_cache, "value_cache");
  if (p.value) require_data(*p.value, "value");
  if (p.seq_offset) require_data(*p.seq_offset, "seq_offset");
}

void check_data(const GatherPaKvCachePlan& p, CheckedData& out) {
  out.segments.clear();
  std::vector<std::int64_t> lens;
  out.total_rows = read_lengths(p, lens);
  if (out.total_rows > p.num_rows) {
    invalid("seq_lens cover ", out.total_rows, " tokens but key has only ", p.num_rows, " rows");
  }
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(p.batch), 0);
  if (p.seq_offset) {
    const IndexReader so(*p.seq_offset);
    for (std::int64_t b = 0; b < p.batch; ++b) {
      if (so[b] < 0) invalid("seq_offset[", b, "] = ", so[b], " is negative");
      offsets[static_cast<std::size_t>(b)] = so[b];
    }
  }
  const IndexReader table(p.block_tables);
  std::int64_t row = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t len = lens[static_cast<std::size_t>(b)];
    if (len > 0) add_segments(p, table, b, len, offsets[static_cast<std::size_t>(b)], row, out);
    row += len;
  }
}

}  // namespace detail::gather

GatherPaKvCachePlan plan_gather_pa_kv_cache(const TensorView& key_cache,
                                            const std::optional<TensorView>& value_cache,
                                            const TensorView& block_tables,
                                            const TensorView& seq_lens, const TensorView& key,
                                            const std::optional<TensorView>& value,
                                            const GatherPaKvCacheOptions& options) {
  using namespace detail;
  using namespace detail::gather;
  check_value_pairing(value_cache, value);
  GatherPaKvCachePlan p;
  p.key_cache = key_cache;
  p.value_cache = value_cache;
  p.block_tables = block_tables;
  p.seq_lens = seq_lens;
  p.key = key;
  p.value = value;
  p.seq_offset = options.seq_offset;
  p.is_seq_lens_cumsum = options.is_seq_lens_cumsum;
  p.cache_mode = options.cache_mode;
  if (p.cache_mode != CacheMode::Norm && p.cache_mode != CacheMode::PA_NZ) {
    invalid("cache_mode must be Norm or PA_NZ, got enum value ", static_cast<int>(p.cache_mode));
  }
  const std::pair<const TensorView*, const char*> all[] = {
      {&key_cache, "key_cache"},
      {&block_tables, "block_tables"},
      {&seq_lens, "seq_lens"},
      {&key, "key"},
      {value_cache ? &*value_cache : nullptr, "value_cache"},
      {value ? &*value : nullptr, "value"},
      {options.seq_offset ? &*options.seq_offset : nullptr, "seq_offset"}};
  for (const auto& [t, name] : all) {
    if (t != nullptr) require_sane_layout(*t, name);
  }
  check_bound_data(p);
  check_dtypes(p);
  check_index_tensors(p);
  check_geometry(p);
  p.batch = block_tables.dim(0);
  p.table_width = block_tables.dim(1);
  return p;
}

void gather_pa_kv_cache(const TensorView& key_cache, const std::optional<TensorView>& value_cache,
                        const TensorView& block_tables, const TensorView& seq_lens,
                        const TensorView& key, const std::optional<TensorView>& value,
                        const GatherPaKvCacheOptions& options) {
  execute(
      plan_gather_pa_kv_cache(key_cache, value_cache, block_tables, seq_lens, key, value, options));
}

}  // namespace kvscatter
