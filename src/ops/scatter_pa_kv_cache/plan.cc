// ScatterPaKvCache validation: every shape, dtype, stride and mode rule (spec section 4.7,
// decisions G1-G11 and S1-S9) in plan_scatter_pa_kv_cache(), and the data-dependent rules
// (slot values, compress lengths and offsets) in check_data(), run by execute() before any write.
#include <algorithm>
#include <string>

#include "core/check.h"
#include "ops/scatter_pa_kv_cache/internal.h"

namespace kvscatter {
namespace detail::scatter {

const char* cache_mode_name(CacheMode m) noexcept {
  return m == CacheMode::PA_NZ ? "PA_NZ" : "Norm";
}

const char* scatter_mode_name(ScatterMode m) noexcept {
  switch (m) {
    case ScatterMode::None:
      return "None";
    case ScatterMode::Nct:
      return "Nct";
    case ScatterMode::Alibi:
      return "Alibi";
    case ScatterMode::Rope:
      return "Rope";
    case ScatterMode::Omni:
      return "Omni";
    case ScatterMode::NHSD:
      return "NHSD";
  }
  return "?";
}

namespace {

bool is_s8_dtype(DType d) {
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
    case DType::hifloat8:
    case DType::float8_e5m2:
    case DType::float8_e4m3fn:
      return true;
    default:
      return false;
  }
}

void require_s8_dtype(const TensorView& t, const char* name) {
  if (!is_s8_dtype(t.dtype)) {
    invalid(name,
            " dtype must be one of {float32, float16, bfloat16, int8, uint8, int16, uint16, "
            "int32, uint32, hifloat8, float8_e5m2, float8_e4m3fn}, got ",
            dtype_name(t.dtype));
  }
}

// Strides of axes [from, rank) must be row-major contiguous (size-1 axes may have any stride).
void require_inner_contiguous(const TensorView& t, const char* name, int from, const char* why) {
  std::int64_t expect = 1;
  for (int i = t.rank - 1; i >= from; --i) {
    if (t.dim(i) != 1 && t.stride(i) != expect) {
      invalid(name, ".strides[", i, "] must be ", expect, " (", why, "), got ", t.stride(i),
              " (shape ", shape_str(t), ")");
    }
    expect *= t.dim(i);
  }
}

// A cache: inner axes contiguous, blocks may be further apart than one block (G9: a cache view
// into a larger [num_blocks, 2, ...] tensor) but must not overlap. The slot-per-token Norm and
// NHSD layouts take any strides on their block, slot and head axes instead (an HND cache passed
// as a permuted view, K and V interleaved per block): only the head_size axis must be contiguous
// and no two elements may share memory.
void require_cache_layout(const TensorView& t, const char* name, bool any_strides) {
  if (any_strides) {
    require_inner_contiguous(t, name, t.rank - 1, "the head_size axis must be contiguous");
    require_no_self_overlap(t, name);
    return;
  }
  require_inner_contiguous(t, name, 1, "a cache may be strided only along its block axis");
  std::int64_t block = 1;
  for (int i = 1; i < t.rank; ++i) block = checked_mul(block, t.dim(i), name);
  if (t.dim(0) > 1 && t.stride(0) < block) {
    invalid(name, ".strides[0] must be >= ", block,
            " (one block's elements; blocks must not overlap), got ", t.stride(0));
  }
}

void require_shape(const TensorView& t, const char* name, std::initializer_list<std::int64_t> dims,
                   const char* what) {
  bool ok = t.rank == static_cast<int>(dims.size());
  int i = 0;
  for (std::int64_t d : dims) {
    ok = ok && t.dim(i) == d;
    ++i;
  }
  if (!ok) {
    std::string want = "[";
    i = 0;
    for (std::int64_t d : dims) want += cat(i++ ? ", " : "", d);
    invalid(name, " must have shape ", want, "] ", what, ", got ", shape_str(t));
  }
}

// Per-(batch, head) index tensor of the 4-D modes: [B, NH] or flat [B*NH].
void require_per_head(const TensorView& t, const char* name, std::int64_t b, std::int64_t nh,
                      bool allow_2d) {
  if (allow_2d && t.rank == 2 && t.dim(0) == b && t.dim(1) == nh) return;
  if (t.rank == 1 && t.dim(0) == checked_mul(b, nh, name)) return;
  if (allow_2d) {
    invalid(name, " must have shape [", b, ", ", nh, "] or [", b * nh, "] (batch x num_head), got ",
            shape_str(t));
  }
  invalid(name, " must have shape [", b * nh, "] (batch ", b, " x num_head ", nh, "), got ",
          shape_str(t));
}

CacheMode parse_cache_mode(const std::string& s) {
  if (s.empty() || s == "Norm") return CacheMode::Norm;
  if (s == "PA_NZ") return CacheMode::PA_NZ;
  invalid("cache_mode must be one of {\"Norm\", \"PA_NZ\"} (or empty for Norm), got \"", s, "\"");
}

ScatterMode parse_scatter_mode(const std::string& s) {
  if (s.empty() || s == "None") return ScatterMode::None;
  if (s == "Nct") return ScatterMode::Nct;
  if (s == "Alibi") return ScatterMode::Alibi;
  if (s == "Rope") return ScatterMode::Rope;
  if (s == "Omni") return ScatterMode::Omni;
  if (s == "NHSD") return ScatterMode::NHSD;
  invalid(
      "scatter_mode must be one of {\"None\", \"Nct\", \"Alibi\", \"Rope\", \"Omni\", \"NHSD\"} "
      "(or empty for None), got \"",
      s, "\"");
}

// PA_NZ cache (S7): 4-D [nb, NH*D/L, bs, L] or 5-D [nb, NH, D/L, bs, L], L = 32 / element size.
void check_nz_cache(const TensorView& c, const char* name, const char* src_name, std::int64_t nh,
                    std::int64_t d, std::int64_t& nb, std::int64_t& bs) {
  const auto es = static_cast<std::int64_t>(dtype_size(c.dtype));
  const std::int64_t lanes = 32 / es;
  if ((d * es) % 32 != 0) {
    invalid(src_name, " head size ", d, " x ", es, " bytes = ", d * es,
            " bytes must be a multiple of 32 bytes for cache_mode PA_NZ");
  }
  if (c.rank == 4) {
    require_dim(c, name, 1, nh * d / lanes, "num_head * head_size / L for PA_NZ");
    require_dim(c, name, 3, lanes, "L = 32 bytes / element size for PA_NZ");
    bs = c.dim(2);
  } else if (c.rank == 5) {
    require_dim(c, name, 1, nh, "num_head for a 5-D PA_NZ cache");
    require_dim(c, name, 2, d / lanes, "head_size / L for a 5-D PA_NZ cache");
    require_dim(c, name, 4, lanes, "L = 32 bytes / element size for PA_NZ");
    bs = c.dim(3);
  } else {
    invalid(name,
            " must be 4-D [num_blocks, num_head*head_size/L, block_size, L] or 5-D "
            "[num_blocks, num_head, head_size/L, block_size, L] for PA_NZ, got ",
            c.rank, "-D ", shape_str(c));
  }
  nb = c.dim(0);
}

// Nct (S6): row t is read at data + offset + t*stride; the buffer is key.shape[0] rows of
// key.strides[0] elements (at least the view's own extent). The last row must lie inside it.
void check_nct_side(const TensorView& x, const char* name, std::int64_t stride, std::int64_t offset,
                    const char* stride_name, const char* offset_name) {
  if (stride < 0) invalid("strides[", stride_name, "] must be >= 0, got ", stride);
  if (offset < 0) invalid("offsets[", offset_name, "] must be >= 0, got ", offset);
  require_inner_contiguous(x, name, 1,
                           "Nct reads each token's num_head*head_size elements as "
                           "one contiguous run");
  const std::int64_t t = x.dim(0);
  if (t == 0) return;
  const std::int64_t row = checked_mul(x.dim(1), x.dim(2), name);
  const std::int64_t extent =
      std::max(checked_mul(t, x.stride(0), name),
               checked_add(checked_mul(t - 1, x.stride(0), name), row, name));
  const std::int64_t last_end =
      checked_add(checked_add(offset, checked_mul(t - 1, stride, name), name), row, name);
  if (last_end > extent) {
    invalid(name, " Nct row ", t - 1, " reads elements [", last_end - row, ", ", last_end,
            ") = offsets[", offset_name, "] ", offset, " + ", t - 1, " x strides[", stride_name,
            "] ", stride, ", past the end of the buffer (", extent, " elements: ", t, " rows of ",
            name, ".strides[0] = ", x.stride(0), ")");
  }
}

}  // namespace

void check_bound_data(const ScatterPaKvCachePlan& p) {
  require_data(p.key, "key");
  require_data(p.key_cache, "key_cache");
  require_data(p.slot_mapping, "slot_mapping");
  if (p.value) {
    require_data(*p.value, "value");
    require_data(*p.value_cache, "value_cache");
  }
  if (p.compress_lens) require_data(*p.compress_lens, "compress_lens");
  if (p.compress_seq_offsets) require_data(*p.compress_seq_offsets, "compress_seq_offsets");
  if (p.seq_lens) require_data(*p.seq_lens, "seq_lens");
}

void check_data(const ScatterPaKvCachePlan& p, CheckedData& out) {
  const std::int64_t ns = p.num_slots;
  const IndexReader slot(p.slot_mapping);
  out.slots.clear();
  out.runs.clear();
  if (!is_compress(p.scatter_mode)) {
    out.slots.resize(static_cast<std::size_t>(p.num_tokens));
    for (std::int64_t t = 0; t < p.num_tokens; ++t) {
      const std::int64_t s = slot[t];
      if (s >= ns) {
        invalid("slot_mapping[", t, "] = ", s, " is out of range [0, ", ns, ") (key_cache has ",
                p.num_blocks, " blocks of ", p.block_size, " slots; negative slots mark padding)");
      }
      out.slots[static_cast<std::size_t>(t)] = s;
    }
    return;
  }

  const bool packed = p.key.rank == 3;
  const IndexReader seq(*p.seq_lens);
  const IndexReader lens(*p.compress_lens);
  const IndexReader offs =
      p.compress_seq_offsets ? IndexReader(*p.compress_seq_offsets) : IndexReader();
  // seq_lens first: packed 3-D keys need their prefix sums.
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t l = seq[b];
    if (l < 0) invalid("seq_lens[", b, "] = ", l, " must be >= 0");
    if (!packed && l > p.seq_len) {
      invalid("seq_lens[", b, "] = ", l, " exceeds key.shape[1] = ", p.seq_len,
              " (the padded sequence length)");
    }
    total = checked_add(total, l, "sum(seq_lens)");
  }
  if (packed && total != p.num_tokens) {
    invalid("sum(seq_lens) = ", total,
            " must equal the number of tokens key.shape[0] = ", p.num_tokens, " for scatter_mode ",
            scatter_mode_name(p.scatter_mode));
  }

  out.runs.resize(static_cast<std::size_t>(p.batch * p.num_heads));
  std::int64_t base = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t l = seq[b];
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      const std::int64_t i = b * p.num_heads + h;
      CompressRun r;
      r.b = b;
      r.h = h;
      r.seq_len = l;
      r.base = packed ? base : 0;
      r.start = slot[i];
      const std::int64_t w = lens[i];
      if (w < 0)
        invalid("compress_lens[", i, "] = ", w, " must be >= 0 (batch ", b, ", head ", h, ")");
      if (p.scatter_mode == ScatterMode::Alibi) {
        if (w > l) {
          invalid("compress_lens[", i, "] = ", w, " exceeds seq_lens[", b, "] = ", l,
                  " (Alibi keeps the last compress_lens tokens; batch ", b, ", head ", h, ")");
        }
        r.window = w;
        r.rows = w;
      } else {
        const std::int64_t o = offs[i];
        const bool minus_one_ok = packed;  // -1 means "do not compress" only for 3-D keys
        if (o > l || o < (minus_one_ok ? -1 : 0)) {
          invalid("compress_seq_offsets[", i, "] = ", o, " must be ", minus_one_ok ? "-1 or " : "",
                  "in [0, seq_lens[", b, "] = ", l, "] (batch ", b, ", head ", h, ")");
        }
        if (o >= 0 && o + w > l) {
          invalid("compress_seq_offsets[", i, "] + compress_lens[", i, "] = ", o, " + ", w, " = ",
                  o + w, " exceeds seq_lens[", b, "] = ", l, " (batch ", b, ", head ", h, ")");
        }
        if (o == -1 || w == 0 || o == l) {
          r.offset = l;
          r.window = 0;
          r.rows = l;
        } else {
          r.offset = o;
          r.window = w;
          r.rows = p.scatter_mode == ScatterMode::Rope ? l - w + 1 : l - w;
        }
      }
      if (r.start >= 0) {
        if (r.start >= ns) {
          invalid("slot_mapping[", i, "] = ", r.start, " is out of range [0, ", ns, ") (batch ", b,
                  ", head ", h, "; key_cache has ", p.num_blocks, " blocks of ", p.block_size,
                  " slots; a negative start slot skips the run)");
        }
        if (r.start + r.rows > ns) {
          invalid("slot_mapping[", i, "] = ", r.start, " starts a run of ", r.rows, " rows (batch ",
                  b, ", head ", h, ") that ends at row ", r.start + r.rows - 1,
                  ", out of range [0, ", ns, ") (key_cache has ", p.num_blocks, " blocks of ",
                  p.block_size, " slots)");
        }
      } else {
        r.rows = 0;
      }
      out.runs[static_cast<std::size_t>(i)] = r;
    }
    base += l;
  }
}

}  // namespace detail::scatter

using namespace detail;
using namespace detail::scatter;

ScatterPaKvCachePlan plan_scatter_pa_kv_cache(const TensorView& key, const TensorView& key_cache,
                                              const TensorView& slot_mapping,
                                              const std::optional<TensorView>& value,
                                              const std::optional<TensorView>& value_cache,
                                              const ScatterPaKvCacheOptions& options) {
  ScatterPaKvCachePlan p;
  p.cache_mode = parse_cache_mode(options.cache_mode);
  p.scatter_mode = parse_scatter_mode(options.scatter_mode);

  // Key-only calls (S5): value absent or 0-D; then value_cache must be absent or 0-D too.
  const bool has_value = value.has_value() && value->rank != 0;
  if (has_value) {
    if (!value_cache) {
      fail(Status::null_pointer, cat("value_cache is missing; it is required when value is given "
                                     "(value is ",
                                     value->describe(), ")"));
    }
    if (value_cache->rank == 0) {
      invalid("value_cache must be a 4-D or 5-D tensor when value is given, got a 0-D tensor");
    }
  } else if (value_cache && value_cache->rank != 0) {
    invalid("value_cache is given (", value_cache->describe(),
            ") but value is absent; pass neither for a key-only call");
  }

  // Null pointers (161001) before anything else looks at the data.
  require_data(key, "key");
  require_data(key_cache, "key_cache");
  require_data(slot_mapping, "slot_mapping");
  if (has_value) {
    require_data(*value, "value");
    require_data(*value_cache, "value_cache");
  }
  for (auto [t, name] : {std::pair{&options.compress_lens, "compress_lens"},
                         std::pair{&options.compress_seq_offsets, "compress_seq_offsets"},
                         std::pair{&options.seq_lens, "seq_lens"}}) {
    if (*t) require_data(**t, name);
  }

  // Ranks and dtypes.
  if (key.rank != 3 && key.rank != 4) {
    invalid(
        "key must be 3-D [num_tokens, num_head, head_size] or 4-D [batch, seq_len, num_head, "
        "head_size], got ",
        key.rank, "-D ", shape_str(key));
  }
  if (has_value && value->rank != key.rank) {
    invalid("value must have the same rank as key (", key.rank, "-D), got ", value->rank, "-D ",
            shape_str(*value));
  }
  require_s8_dtype(key, "key");
  require_same_dtype(key, "key", key_cache, "key_cache");
  if (has_value) {
    require_s8_dtype(*value, "value");
    require_same_dtype(*value, "value", *value_cache, "value_cache");
    if (p.cache_mode != CacheMode::PA_NZ) require_same_dtype(key, "key", *value, "value");
  }
  require_index(slot_mapping, "slot_mapping");
  for (auto [t, name] : {std::pair{&options.compress_lens, "compress_lens"},
                         std::pair{&options.compress_seq_offsets, "compress_seq_offsets"},
                         std::pair{&options.seq_lens, "seq_lens"}}) {
    if (*t) {
      require_index(**t, name);
      require_same_dtype(slot_mapping, "slot_mapping", **t, name);
    }
  }

  // Layout sanity: non-negative dims and strides, no 64-bit overflow (G8).
  require_sane_layout(key, "key");
  require_sane_layout(key_cache, "key_cache");
  require_sane_layout(slot_mapping, "slot_mapping");
  if (has_value) {
    require_sane_layout(*value, "value");
    require_sane_layout(*value_cache, "value_cache");
  }
  for (auto [t, name] : {std::pair{&options.compress_lens, "compress_lens"},
                         std::pair{&options.compress_seq_offsets, "compress_seq_offsets"},
                         std::pair{&options.seq_lens, "seq_lens"}}) {
    if (*t) require_sane_layout(**t, name);
  }

  // Mode combinations (S1, S2).
  if (p.cache_mode == CacheMode::PA_NZ && p.scatter_mode != ScatterMode::None) {
    invalid("cache_mode PA_NZ combines only with scatter_mode None, got scatter_mode \"",
            options.scatter_mode, "\"");
  }
  if (key.rank == 4) {
    if (p.cache_mode == CacheMode::PA_NZ) {
      invalid("a 4-D key (", shape_str(key),
              ") selects the compress scenario 3, which needs "
              "cache_mode Norm, got PA_NZ");
    }
    if (p.scatter_mode == ScatterMode::None) {
      if (!options.compress_lens || !options.seq_lens) {
        invalid("a 4-D key (", shape_str(key), ") needs compress_lens and seq_lens (",
                !options.compress_lens ? "compress_lens" : "seq_lens", " is missing)");
      }
      // Scenario 3: Rope when compress_seq_offsets is given, Alibi when it is not.
      p.scatter_mode = options.compress_seq_offsets ? ScatterMode::Rope : ScatterMode::Alibi;
    } else if (p.scatter_mode != ScatterMode::Alibi && p.scatter_mode != ScatterMode::Rope) {
      invalid("scatter_mode ", scatter_mode_name(p.scatter_mode), " needs a 3-D key, got 4-D ",
              shape_str(key), " (a 4-D key serves Alibi and Rope only)");
    }
  }
  if (p.scatter_mode == ScatterMode::Nct) {
    p.strides = options.strides.value_or(
        std::array<std::int64_t, 2>{key.stride(0), has_value ? value->stride(0) : 0});
    p.offsets = options.offsets.value_or(std::array<std::int64_t, 2>{0, 0});
  } else {
    // Upstream front ends always send strides [1, 1] and offsets [0, 0]; anything else would be
    // silently ignored, so it is an error.
    if (options.strides && *options.strides != std::array<std::int64_t, 2>{1, 1}) {
      invalid("strides are used only by scatter_mode Nct, got strides [", (*options.strides)[0],
              ", ", (*options.strides)[1], "] with scatter_mode ",
              scatter_mode_name(p.scatter_mode));
    }
    if (options.offsets && *options.offsets != std::array<std::int64_t, 2>{0, 0}) {
      invalid("offsets are used only by scatter_mode Nct, got offsets [", (*options.offsets)[0],
              ", ", (*options.offsets)[1], "] with scatter_mode ",
              scatter_mode_name(p.scatter_mode));
    }
  }
  const bool compress = is_compress(p.scatter_mode);
  if (!compress) {
    for (auto [t, name] : {std::pair{&options.compress_lens, "compress_lens"},
                           std::pair{&options.compress_seq_offsets, "compress_seq_offsets"},
                           std::pair{&options.seq_lens, "seq_lens"}}) {
      if (*t) {
        invalid(name,
                " is used only by scatter_mode Alibi, Rope and Omni, got it with "
                "scatter_mode ",
                scatter_mode_name(p.scatter_mode));
      }
    }
  } else {
    if (!options.seq_lens) {
      fail(Status::null_pointer, cat("seq_lens is missing; scatter_mode ",
                                     scatter_mode_name(p.scatter_mode), " requires it"));
    }
    if (!options.compress_lens) {
      fail(Status::null_pointer, cat("compress_lens is missing; scatter_mode ",
                                     scatter_mode_name(p.scatter_mode), " requires it"));
    }
    if (p.scatter_mode == ScatterMode::Alibi && options.compress_seq_offsets) {
      invalid(
          "compress_seq_offsets must not be given for scatter_mode Alibi (it keeps the last "
          "compress_lens tokens), got ",
          shape_str(*options.compress_seq_offsets));
    }
    if (p.scatter_mode != ScatterMode::Alibi && !options.compress_seq_offsets) {
      fail(Status::null_pointer, cat("compress_seq_offsets is missing; scatter_mode ",
                                     scatter_mode_name(p.scatter_mode), " requires it"));
    }
  }

  // The source views: last axis contiguous (row copies); other strides are honoured.
  require_inner_contiguous(key, "key", key.rank - 1, "the last axis must be contiguous");
  if (has_value) {
    require_inner_contiguous(*value, "value", value->rank - 1, "the last axis must be contiguous");
  }

  // Shapes per mode.
  std::int64_t nb = 0, bs = 0, vnb = 0, vbs = 0;
  if (key.rank == 3) {
    p.num_tokens = key.dim(0);
    p.num_heads = key.dim(1);
    p.key_head_size = key.dim(2);
  } else {
    p.batch = key.dim(0);
    p.seq_len = key.dim(1);
    p.num_heads = key.dim(2);
    p.key_head_size = key.dim(3);
    p.num_tokens = checked_mul(p.batch, p.seq_len, "key");
  }
  const std::int64_t nh = p.num_heads;
  const std::int64_t dk = p.key_head_size;
  if (has_value) {
    const int last = value->rank - 1;
    for (int i = 0; i < last; ++i) {
      require_dim(*value, "value", i, key.dim(i), i == last - 1 ? "num_head, as key" : "as key");
    }
    p.value_head_size = value->dim(last);
    if (compress && key.rank == 3) {
      require_dim(*value, "value", 2, dk,
                  "key head size: packed 3-D compress modes write rows of key.shape[2] elements "
                  "to both caches");
    }
  }
  const std::int64_t dv = p.value_head_size;

  if (!compress) {
    require_shape(slot_mapping, "slot_mapping", {p.num_tokens}, "(one slot per token of key)");
    if (p.cache_mode == CacheMode::PA_NZ) {
      check_nz_cache(key_cache, "key_cache", "key", nh, dk, nb, bs);
      if (has_value) check_nz_cache(*value_cache, "value_cache", "value", nh, dv, vnb, vbs);
    } else if (p.scatter_mode == ScatterMode::NHSD) {
      require_rank(key_cache, "key_cache", 4,
                   "[num_blocks, num_head, block_size, head_size] (NHSD)");
      require_dim(key_cache, "key_cache", 1, nh, "num_head, NHSD layout");
      require_dim(key_cache, "key_cache", 3, dk, "key head size");
      nb = key_cache.dim(0);
      bs = key_cache.dim(2);
      if (has_value) {
        require_rank(*value_cache, "value_cache", 4,
                     "[num_blocks, num_head, block_size, head_size] (NHSD)");
        require_dim(*value_cache, "value_cache", 1, nh, "num_head, NHSD layout");
        require_dim(*value_cache, "value_cache", 3, dv, "value head size");
        vnb = value_cache->dim(0);
        vbs = value_cache->dim(2);
      }
    } else {
      require_rank(key_cache, "key_cache", 4, "[num_blocks, block_size, num_head, head_size]");
      require_dim(key_cache, "key_cache", 2, nh, "num_head");
      require_dim(key_cache, "key_cache", 3, dk, "key head size");
      nb = key_cache.dim(0);
      bs = key_cache.dim(1);
      if (has_value) {
        require_rank(*value_cache, "value_cache", 4,
                     "[num_blocks, block_size, num_head, head_size]");
        require_dim(*value_cache, "value_cache", 2, nh, "num_head");
        require_dim(*value_cache, "value_cache", 3, dv, "value head size");
        vnb = value_cache->dim(0);
        vbs = value_cache->dim(1);
      }
    }
  } else {
    const TensorView& seq = *options.seq_lens;
    if (seq.rank != 1) {
      invalid("seq_lens must be 1-D [batch], got ", seq.rank, "-D ", shape_str(seq));
    }
    if (key.rank == 4) {
      require_dim(seq, "seq_lens", 0, p.batch, "batch = key.shape[0]");
    } else {
      p.batch = seq.dim(0);
    }
    const bool four = key.rank == 4;
    require_per_head(slot_mapping, "slot_mapping", p.batch, nh, four);
    require_per_head(*options.compress_lens, "compress_lens", p.batch, nh, four);
    if (options.compress_seq_offsets) {
      require_per_head(*options.compress_seq_offsets, "compress_seq_offsets", p.batch, nh, four);
    }
    require_rank(key_cache, "key_cache", 4, "[num_blocks, block_size, 1, head_size]");
    require_dim(key_cache, "key_cache", 2, 1, "compress modes store one head per row");
    require_dim(key_cache, "key_cache", 3, dk, "key head size");
    nb = key_cache.dim(0);
    bs = key_cache.dim(1);
    if (has_value) {
      require_rank(*value_cache, "value_cache", 4, "[num_blocks, block_size, 1, head_size]");
      require_dim(*value_cache, "value_cache", 2, 1, "compress modes store one head per row");
      require_dim(*value_cache, "value_cache", 3, dv, "value head size");
      vnb = value_cache->dim(0);
      vbs = value_cache->dim(1);
    }
  }
  if (has_value) {
    if (vnb != nb) {
      invalid("value_cache has ", vnb, " blocks but key_cache has ", nb,
              " (num_blocks must match; shapes ", shape_str(*value_cache), " and ",
              shape_str(key_cache), ")");
    }
    if (vbs != bs) {
      invalid("value_cache block_size ", vbs, " must match key_cache block_size ", bs, " (shapes ",
              shape_str(*value_cache), " and ", shape_str(key_cache), ")");
    }
  }
  p.num_blocks = nb;
  p.block_size = bs;
  p.num_slots = checked_mul(nb, bs, "num_blocks * block_size");

  const bool any_strides = p.cache_mode == CacheMode::Norm && !is_compress(p.scatter_mode);
  require_cache_layout(key_cache, "key_cache", any_strides);
  if (has_value) {
    require_cache_layout(*value_cache, "value_cache", any_strides);
    if (value_cache->data != nullptr && value_cache->data == key_cache.data) {
      invalid("key_cache and value_cache must be different memory, got the same data pointer");
    }
    if (any_strides) require_disjoint(key_cache, "key_cache", *value_cache, "value_cache");
  }
  if (p.scatter_mode == ScatterMode::Nct) {
    check_nct_side(key, "key", p.strides[0], p.offsets[0], "0", "0");
    if (has_value) check_nct_side(*value, "value", p.strides[1], p.offsets[1], "1", "1");
  }

  p.key = key;
  p.key_cache = key_cache;
  p.slot_mapping = slot_mapping;
  if (has_value) {
    p.value = *value;
    p.value_cache = *value_cache;
  }
  p.compress_lens = options.compress_lens;
  p.compress_seq_offsets = options.compress_seq_offsets;
  p.seq_lens = options.seq_lens;
  return p;
}

void scatter_pa_kv_cache(const TensorView& key, const TensorView& key_cache,
                         const TensorView& slot_mapping, const std::optional<TensorView>& value,
                         const std::optional<TensorView>& value_cache,
                         const ScatterPaKvCacheOptions& options) {
  execute(plan_scatter_pa_kv_cache(key, key_cache, slot_mapping, value, value_cache, options));
}

}  // namespace kvscatter
