// Validation of PagedCacheGather: every shape, dtype, stride and option rule, then the
// data-dependent checks that execute() runs over every gathered row before writing.
#include <algorithm>
#include <string>

#include "core/check.h"
#include "ops/paged_cache_gather/internal.h"

namespace kvscatter {
namespace detail::paged_cache_gather {
namespace {

bool is_float(DType d) {
  return d == DType::float32 || d == DType::float16 || d == DType::bfloat16;
}

// Dims [first, rank) form one C-contiguous run (dims of length 1 may have any stride).
bool entry_contiguous(const TensorView& t, int first) {
  std::int64_t expect = 1;
  for (int i = t.rank - 1; i >= first; --i) {
    if (t.dim(i) != 1 && t.stride(i) != expect) return false;
    expect *= t.dim(i);
  }
  return true;
}

std::string entry_shape(const TensorView& t, int first) {
  std::string s = "[rows";
  for (int i = first; i < t.rank; ++i) s += ", " + std::to_string(t.dim(i));
  return s + "]";
}

void check_tensors(const TensorView& src, const TensorView& dst, PagedCacheGatherPlan& p) {
  if (src.rank < 3) {
    invalid("src_cache must have rank >= 3 [num_blocks, block_size, *entry], got ", src.rank, "-D ",
            shape_str(src));
  }
  if (src.dim(1) < 1) invalid("src_cache block_size must be >= 1, got ", src.dim(1));
  bool same = dst.rank == src.rank - 1;
  for (int i = 1; same && i < dst.rank; ++i) same = dst.dim(i) == src.dim(i + 1);
  if (!same) {
    invalid("dst shape ", shape_str(dst), " must be ", entry_shape(src, 2),
            " (the entry shape of src_cache ", shape_str(src), ")");
  }
  for (const auto* t : {&src, &dst}) {
    const char* name = t == &src ? "src_cache" : "dst";
    require_sane_layout(*t, name);
    require_data(*t, name);
    if (!entry_contiguous(*t, t == &src ? 2 : 1)) {
      invalid(name, " must have C-contiguous entries (the dims after ",
              t == &src ? "block_size" : "rows", "), got strides of shape ", shape_str(*t));
    }
  }
  require_no_self_overlap(dst, "dst");
  p.num_blocks = src.dim(0);
  p.block_size = src.dim(1);
  p.entry = 1;
  for (int i = 2; i < src.rank; ++i) p.entry = checked_mul(p.entry, src.dim(i), "src_cache entry");
}

void check_dtypes(const TensorView& src, const TensorView& dst, KvCacheFormat f) {
  if (f == KvCacheFormat::copy) {
    if (dst.dtype != src.dtype) {
      invalid("dst dtype ", dtype_name(dst.dtype), " differs from src_cache dtype ",
              dtype_name(src.dtype));
    }
    const std::size_t es = src.element_size();
    if ((es != 1 && es != 2 && es != 4) || dtype_bits(src.dtype) != static_cast<int>(8 * es)) {
      invalid("src_cache dtype ", dtype_name(src.dtype),
              " is not supported: copies move elements of 1, 2 or 4 bytes");
    }
    return;
  }
  const DType fp8 = f == KvCacheFormat::fp8_e4m3 ? DType::float8_e4m3fn : DType::float8_e5m2;
  if (src.dtype != DType::uint8 && src.dtype != fp8) {
    invalid("src_cache dtype ", dtype_name(src.dtype), " cannot hold the codes of format '",
            kv_cache_format_name(f), "' (expected uint8 or ", dtype_name(fp8), ")");
  }
  if (!is_float(dst.dtype)) {
    invalid("dst dtype must be one of {float32, float16, bfloat16} for format '",
            kv_cache_format_name(f), "', got ", dtype_name(dst.dtype));
  }
}

void check_index(const TensorView& t, const char* name, int rank, const TensorView& first) {
  require_rank(t, name, rank, rank == 2 ? "[batch, max_blocks]" : "[entries]");
  require_index(t, name);
  if (t.dtype != first.dtype) {
    invalid(name, " dtype ", dtype_name(t.dtype), " differs from block_table dtype ",
            dtype_name(first.dtype), " (index tensors share one dtype)");
  }
  require_sane_layout(t, name);
  require_data(t, name);
}

void check_options(const PagedCacheGatherOptions& o, PagedCacheGatherPlan& p) {
  const std::int64_t n_cu = p.cu_seq_lens.dim(0);
  if (n_cu < 1) invalid("cu_seq_lens must have at least 1 entry, got 0");
  p.batch_size = o.batch_size < 0 ? n_cu - 1 : o.batch_size;
  if (o.batch_size < -1) invalid("batch_size must be >= 0, got ", o.batch_size);
  if (n_cu < p.batch_size + 1) {
    invalid("cu_seq_lens has ", n_cu, " entries; batch_size = ", p.batch_size, " needs ",
            p.batch_size + 1);
  }
  if (p.block_table.dim(0) < p.batch_size) {
    invalid("block_table has ", p.block_table.dim(0), " rows; ", p.batch_size, " sequences need ",
            p.batch_size);
  }
  if (o.seq_starts) {
    check_index(*o.seq_starts, "seq_starts", 1, p.block_table);
    if (o.seq_starts->dim(0) < p.batch_size) {
      invalid("seq_starts has ", o.seq_starts->dim(0), " entries; needs at least ", p.batch_size);
    }
    p.seq_starts = o.seq_starts;
  }
  if (o.token_to_seq) {
    check_index(*o.token_to_seq, "token_to_seq", 1, p.block_table);
    if (o.num_tokens < 0) invalid("num_tokens must be >= 0, got ", o.num_tokens);
    if (o.num_tokens > o.token_to_seq->dim(0)) {
      invalid("num_tokens = ", o.num_tokens, " exceeds token_to_seq entries ",
              o.token_to_seq->dim(0));
    }
    if (o.num_tokens > p.dst.dim(0)) {
      invalid("num_tokens = ", o.num_tokens, " exceeds dst rows ", p.dst.dim(0));
    }
    p.token_to_seq = o.token_to_seq;
    p.num_tokens = o.num_tokens;
  }
}

void check_scale(const PagedCacheGatherOptions& o, PagedCacheGatherPlan& p) {
  if (!o.scale) {
    if (p.format != KvCacheFormat::copy) {
      invalid("scale is required by format '", kv_cache_format_name(p.format), "'");
    }
    return;
  }
  require_scalar_scale(*o.scale, "scale");
  p.scale = o.scale;
}

// cu_seq_lens[0] >= 0 and non-decreasing over the entries used.
void check_cu(const PagedCacheGatherPlan& p) {
  std::int64_t prev = index_at(p.cu_seq_lens, 0);
  if (prev < 0) invalid("cu_seq_lens[0] = ", prev, " is negative");
  for (std::int64_t b = 1; b <= p.batch_size; ++b) {
    const std::int64_t c = index_at(p.cu_seq_lens, b);
    if (c < prev) {
      invalid("cu_seq_lens must be non-decreasing: cu_seq_lens[", b, "] = ", c, " < cu_seq_lens[",
              b - 1, "] = ", prev);
    }
    prev = c;
  }
  if (!p.token_to_seq && prev > p.dst.dim(0)) {
    invalid("cu_seq_lens[", p.batch_size, "] = ", prev, " exceeds dst rows ", p.dst.dim(0));
  }
  for (std::int64_t b = 0; p.seq_starts && b < p.batch_size; ++b) {
    const std::int64_t s = index_at(*p.seq_starts, b);
    if (s < 0) invalid("seq_starts[", b, "] = ", s, " is negative");
  }
}

// The cache offset of position `p` (from its start) of sequence b, or an error.
std::int64_t locate(const PagedCacheGatherPlan& plan, std::int64_t b, std::int64_t p) {
  const std::int64_t start = plan.seq_starts ? index_at(*plan.seq_starts, b) : 0;
  std::int64_t pos;
  const std::int64_t w = plan.block_table.dim(1);
  if (__builtin_add_overflow(p, start, &pos) || pos / plan.block_size >= w) {
    invalid("block_table has ", w, " columns but sequence ", b, " needs column ",
            pos / plan.block_size, " (position ", pos, " with block_size ", plan.block_size, ")");
  }
  const std::int64_t col = pos / plan.block_size;
  const std::int64_t blk = index_at(plan.block_table, b, col);
  if (blk < 0 || blk >= plan.num_blocks) {
    invalid("block_table[", b, ", ", col, "] = ", blk, " is out of range [0, ", plan.num_blocks,
            ") (src_cache has ", plan.num_blocks, " blocks)");
  }
  return blk * plan.src_cache.stride(0) + (pos % plan.block_size) * plan.src_cache.stride(1);
}

// Every row of [cu_seq_lens[0], cu_seq_lens[batch_size]) in order. The rows of one sequence in
// one block share their block-table entry, so locate runs once per block, on the first such
// row (the row where a row-by-row check would stop first).
void rows_in_order(const PagedCacheGatherPlan& p, std::vector<Row>& rows) {
  const IndexReader cu(p.cu_seq_lens);
  const std::int64_t bs = p.block_size, row_stride = p.src_cache.stride(1);
  rows.reserve(static_cast<std::size_t>(cu[p.batch_size] - cu[0]));
  for (std::int64_t b = 0; b < p.batch_size; ++b) {
    const std::int64_t c0 = cu[b], c1 = cu[b + 1];
    const std::int64_t start = p.seq_starts ? index_at(*p.seq_starts, b) : 0;
    for (std::int64_t t = c0; t < c1;) {
      const std::int64_t first = locate(p, b, t - c0);  // so t - c0 + start did not overflow
      const std::int64_t n = std::min(c1 - t, bs - (t - c0 + start) % bs);
      for (std::int64_t k = 0; k < n; ++k) rows.push_back({t + k, first + k * row_stride});
      t += n;
    }
  }
}

}  // namespace

void check_bound_data(const PagedCacheGatherPlan& p) {
  require_data(p.src_cache, "src_cache");
  require_data(p.dst, "dst");
  require_data(p.block_table, "block_table");
  require_data(p.cu_seq_lens, "cu_seq_lens");
  if (p.scale) require_data(*p.scale, "scale");
  if (p.seq_starts) require_data(*p.seq_starts, "seq_starts");
  if (p.token_to_seq) require_data(*p.token_to_seq, "token_to_seq");
}

void check_data(const PagedCacheGatherPlan& p, CheckedData& out) {
  check_cu(p);
  out.rows.clear();
  if (p.scale) std::memcpy(&out.scale, p.scale->data, 4);
  if (!p.token_to_seq) {
    rows_in_order(p, out.rows);
    return;
  }
  for (std::int64_t t = 0; t < p.num_tokens; ++t) {
    const std::int64_t b = index_at(*p.token_to_seq, t);
    if (b < 0 || b >= p.batch_size) {
      invalid("token_to_seq[", t, "] = ", b, " is out of range [0, ", p.batch_size, ")");
    }
    const std::int64_t c0 = index_at(p.cu_seq_lens, b), c1 = index_at(p.cu_seq_lens, b + 1);
    if (t < c0) {
      invalid("token_to_seq[", t, "] = ", b, " but cu_seq_lens[", b, "] = ", c0, " > ", t,
              " (token precedes its sequence)");
    }
    if (t >= c1) continue;  // past its sequence: the row keeps its value
    out.rows.push_back({t, locate(p, b, t - c0)});
  }
}

}  // namespace detail::paged_cache_gather

PagedCacheGatherPlan plan_paged_cache_gather(const TensorView& src_cache, const TensorView& dst,
                                             const TensorView& block_table,
                                             const TensorView& cu_seq_lens,
                                             const PagedCacheGatherOptions& options) {
  using namespace detail;
  using namespace detail::paged_cache_gather;
  PagedCacheGatherPlan p;
  p.format = options.format;
  p.src_cache = src_cache;
  p.dst = dst;
  check_tensors(src_cache, dst, p);
  check_dtypes(src_cache, dst, p.format);
  check_index(block_table, "block_table", 2, block_table);
  check_index(cu_seq_lens, "cu_seq_lens", 1, block_table);
  p.block_table = block_table;
  p.cu_seq_lens = cu_seq_lens;
  check_options(options, p);
  check_scale(options, p);
  p.extents = detail::extents_of(detail::paged_cache_gather::operands(p));
  return p;
}

void paged_cache_gather(const TensorView& src_cache, const TensorView& dst,
                        const TensorView& block_table, const TensorView& cu_seq_lens,
                        const PagedCacheGatherOptions& options) {
  execute(plan_paged_cache_gather(src_cache, dst, block_table, cu_seq_lens, options));
}

}  // namespace kvscatter
