// scatter_pa_kv_cache validation: every shape, dtype, stride and mode rule in
// plan_scatter_pa_kv_cache() (one helper per rule group, one per cache layout), and the
// data-dependent rules (slot values, compress lengths and offsets) in check_data(), which
// execute() runs over all tokens before its first write.
#include <algorithm>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/index.h"
#include "core/slots.h"
#include "ops/scatter_pa_kv_cache/internal.h"

namespace kvscatter {

CacheMode parse_cache_mode(std::string_view s) {
  if (s.empty() || s == "Norm") return CacheMode::Norm;
  if (s == "PA_NZ") return CacheMode::PA_NZ;
  detail::invalid("cache_mode must be one of {\"Norm\", \"PA_NZ\"} (or empty for Norm), got \"", s,
                  "\"");
}

ScatterMode parse_scatter_mode(std::string_view s) {
  // One flat table: the enum's order.
  static constexpr std::pair<std::string_view, ScatterMode> kNames[] = {
      {"None", ScatterMode::None}, {"Nct", ScatterMode::Nct},   {"Alibi", ScatterMode::Alibi},
      {"Rope", ScatterMode::Rope}, {"Omni", ScatterMode::Omni}, {"NHSD", ScatterMode::NHSD}};
  if (s.empty()) return ScatterMode::None;
  for (const auto& [name, mode] : kNames) {
    if (s == name) return mode;
  }
  detail::invalid(
      "scatter_mode must be one of {\"None\", \"Nct\", \"Alibi\", \"Rope\", \"Omni\", \"NHSD\"} "
      "(or empty for None), got \"",
      s, "\"");
}

const char* cache_mode_name(CacheMode m) noexcept {
  return m == CacheMode::PA_NZ ? "PA_NZ" : m == CacheMode::Norm ? "Norm" : "?";
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

namespace detail::scatter {
namespace {

bool is_element_dtype(DType d) {
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

void require_element_dtype(const TensorView& t, const char* name) {
  if (!is_element_dtype(t.dtype)) {
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

// A cache: inner axes contiguous; blocks may be further apart than one block (a cache view
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

// Nct: row t is read at data + offset + t*stride; the buffer is key.shape[0] rows of
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

// The optional index tensors present in the plan, in argument order.
template <class F>
void for_each_optional(const ScatterPaKvCachePlan& p, F&& f) {
  const std::pair<const std::optional<TensorView>*, const char*> all[] = {
      {&p.compress_lens, "compress_lens"},
      {&p.compress_seq_offsets, "compress_seq_offsets"},
      {&p.seq_lens, "seq_lens"}};
  for (const auto& [t, name] : all) {
    if (*t) f(**t, name);
  }
}

// Key-only calls: value absent or 0-D; then value_cache must be absent or 0-D too.
bool has_value_side(const std::optional<TensorView>& value,
                    const std::optional<TensorView>& value_cache) {
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
  return has_value;
}

void check_ranks_and_dtypes(const ScatterPaKvCachePlan& p) {
  const TensorView& key = p.key;
  if (key.rank != 3 && key.rank != 4) {
    invalid(
        "key must be 3-D [num_tokens, num_head, head_size] or 4-D [batch, seq_len, num_head, "
        "head_size], got ",
        key.rank, "-D ", shape_str(key));
  }
  if (p.value && p.value->rank != key.rank) {
    invalid("value must have the same rank as key (", key.rank, "-D), got ", p.value->rank, "-D ",
            shape_str(*p.value));
  }
  require_element_dtype(key, "key");
  require_same_dtype(key, "key", p.key_cache, "key_cache");
  if (p.value) {
    require_element_dtype(*p.value, "value");
    require_same_dtype(*p.value, "value", *p.value_cache, "value_cache");
    if (p.cache_mode != CacheMode::PA_NZ) require_same_dtype(key, "key", *p.value, "value");
  }
  require_index(p.slot_mapping, "slot_mapping");
  for_each_optional(p, [&](const TensorView& t, const char* name) {
    require_index(t, name);
    require_same_dtype(p.slot_mapping, "slot_mapping", t, name);
  });
}

// Non-negative dims and strides, no 64-bit overflow.
void check_sane_layouts(const ScatterPaKvCachePlan& p) {
  require_sane_layout(p.key, "key");
  require_sane_layout(p.key_cache, "key_cache");
  require_sane_layout(p.slot_mapping, "slot_mapping");
  if (p.value) {
    require_sane_layout(*p.value, "value");
    require_sane_layout(*p.value_cache, "value_cache");
  }
  for_each_optional(p, [](const TensorView& t, const char* name) { require_sane_layout(t, name); });
}

// A 4-D key selects Alibi or Rope; PA_NZ combines with None only.
void resolve_scatter_mode(ScatterPaKvCachePlan& p) {
  if (p.cache_mode == CacheMode::PA_NZ && p.scatter_mode != ScatterMode::None) {
    invalid("cache_mode PA_NZ combines only with scatter_mode None, got scatter_mode \"",
            scatter_mode_name(p.scatter_mode), "\"");
  }
  if (p.key.rank != 4) return;
  if (p.cache_mode == CacheMode::PA_NZ) {
    invalid("a 4-D key (", shape_str(p.key),
            ") selects the compress scenario 3, which needs cache_mode Norm, got PA_NZ");
  }
  if (p.scatter_mode == ScatterMode::None) {
    if (!p.compress_lens || !p.seq_lens) {
      invalid("a 4-D key (", shape_str(p.key), ") needs compress_lens and seq_lens (",
              !p.compress_lens ? "compress_lens" : "seq_lens", " is missing)");
    }
    // Rope when compress_seq_offsets is given, Alibi when it is not.
    p.scatter_mode = p.compress_seq_offsets ? ScatterMode::Rope : ScatterMode::Alibi;
  } else if (p.scatter_mode != ScatterMode::Alibi && p.scatter_mode != ScatterMode::Rope) {
    invalid("scatter_mode ", scatter_mode_name(p.scatter_mode), " needs a 3-D key, got 4-D ",
            shape_str(p.key), " (a 4-D key serves Alibi and Rope only)");
  }
}

// Nct takes explicit row strides and offsets (default: the views' own); other modes accept
// only the values upstream front ends always send, since anything else would be ignored.
void resolve_nct(ScatterPaKvCachePlan& p, const ScatterPaKvCacheOptions& o) {
  if (p.scatter_mode == ScatterMode::Nct) {
    p.strides = o.strides.value_or(
        std::array<std::int64_t, 2>{p.key.stride(0), p.value ? p.value->stride(0) : 0});
    p.offsets = o.offsets.value_or(std::array<std::int64_t, 2>{0, 0});
    return;
  }
  if (o.strides && *o.strides != std::array<std::int64_t, 2>{1, 1}) {
    invalid("strides are used only by scatter_mode Nct, got strides [", (*o.strides)[0], ", ",
            (*o.strides)[1], "] with scatter_mode ", scatter_mode_name(p.scatter_mode));
  }
  if (o.offsets && *o.offsets != std::array<std::int64_t, 2>{0, 0}) {
    invalid("offsets are used only by scatter_mode Nct, got offsets [", (*o.offsets)[0], ", ",
            (*o.offsets)[1], "] with scatter_mode ", scatter_mode_name(p.scatter_mode));
  }
}

// compress_lens, compress_seq_offsets and seq_lens: required or forbidden by the mode.
void check_optional_presence(const ScatterPaKvCachePlan& p) {
  const char* mode = scatter_mode_name(p.scatter_mode);
  if (!is_compress(p.scatter_mode)) {
    for_each_optional(p, [&](const TensorView&, const char* name) {
      invalid(name, " is used only by scatter_mode Alibi, Rope and Omni, got it with scatter_mode ",
              mode);
    });
    return;
  }
  if (!p.seq_lens)
    fail(Status::null_pointer, cat("seq_lens is missing; scatter_mode ", mode, " requires it"));
  if (!p.compress_lens) {
    fail(Status::null_pointer,
         cat("compress_lens is missing; scatter_mode ", mode, " requires it"));
  }
  if (p.scatter_mode == ScatterMode::Alibi && p.compress_seq_offsets) {
    invalid(
        "compress_seq_offsets must not be given for scatter_mode Alibi (it keeps the last "
        "compress_lens tokens), got ",
        shape_str(*p.compress_seq_offsets));
  }
  if (p.scatter_mode != ScatterMode::Alibi && !p.compress_seq_offsets) {
    fail(Status::null_pointer,
         cat("compress_seq_offsets is missing; scatter_mode ", mode, " requires it"));
  }
}

// Token geometry from key (and value): tokens, heads, head sizes.
void resolve_tokens(ScatterPaKvCachePlan& p) {
  const TensorView& key = p.key;
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
  if (!p.value) return;
  const TensorView& value = *p.value;
  const int last = value.rank - 1;
  for (int i = 0; i < last; ++i) {
    require_dim(value, "value", i, key.dim(i), i == last - 1 ? "num_head, as key" : "as key");
  }
  p.value_head_size = value.dim(last);
  if (is_compress(p.scatter_mode) && key.rank == 3) {
    require_dim(value, "value", 2, p.key_head_size,
                "key head size: packed 3-D compress modes write rows of key.shape[2] elements "
                "to both caches");
  }
}

struct Blocks {
  std::int64_t num_blocks = 0, block_size = 0;
};

// One side's cache: [nb, bs, NH, D] (Norm), [nb, NH, bs, D] (NHSD) or [nb, bs, 1, D] (compress).
Blocks check_row_cache(const ScatterPaKvCachePlan& p, const TensorView& c, const char* name,
                       std::int64_t d, const char* head_size) {
  if (is_compress(p.scatter_mode)) {
    require_rank(c, name, 4, "[num_blocks, block_size, 1, head_size]");
    require_dim(c, name, 2, 1, "compress modes store one head per row");
    require_dim(c, name, 3, d, head_size);
    return {c.dim(0), c.dim(1)};
  }
  if (p.scatter_mode == ScatterMode::NHSD) {
    require_rank(c, name, 4, "[num_blocks, num_head, block_size, head_size] (NHSD)");
    require_dim(c, name, 1, p.num_heads, "num_head, NHSD layout");
    require_dim(c, name, 3, d, head_size);
    return {c.dim(0), c.dim(2)};
  }
  require_rank(c, name, 4, "[num_blocks, block_size, num_head, head_size]");
  require_dim(c, name, 2, p.num_heads, "num_head");
  require_dim(c, name, 3, d, head_size);
  return {c.dim(0), c.dim(1)};
}

// PA_NZ cache: 4-D [nb, NH*D/L, bs, L] or 5-D [nb, NH, D/L, bs, L], L = 32 / element size.
Blocks check_nz_cache(const TensorView& c, const char* name, const char* src_name, std::int64_t nh,
                      std::int64_t d) {
  const auto es = static_cast<std::int64_t>(dtype_size(c.dtype));
  const std::int64_t lanes = 32 / es;
  if ((d * es) % 32 != 0) {
    invalid(src_name, " head size ", d, " x ", es, " bytes = ", d * es,
            " bytes must be a multiple of 32 bytes for cache_mode PA_NZ");
  }
  if (c.rank == 4) {
    require_dim(c, name, 1, nh * d / lanes, "num_head * head_size / L for PA_NZ");
    require_dim(c, name, 3, lanes, "L = 32 bytes / element size for PA_NZ");
    return {c.dim(0), c.dim(2)};
  }
  if (c.rank == 5) {
    require_dim(c, name, 1, nh, "num_head for a 5-D PA_NZ cache");
    require_dim(c, name, 2, d / lanes, "head_size / L for a 5-D PA_NZ cache");
    require_dim(c, name, 4, lanes, "L = 32 bytes / element size for PA_NZ");
    return {c.dim(0), c.dim(3)};
  }
  invalid(name,
          " must be 4-D [num_blocks, num_head*head_size/L, block_size, L] or 5-D "
          "[num_blocks, num_head, head_size/L, block_size, L] for PA_NZ, got ",
          c.rank, "-D ", shape_str(c));
}

Blocks check_cache_shape(const ScatterPaKvCachePlan& p, bool value_side) {
  const TensorView& c = value_side ? *p.value_cache : p.key_cache;
  const char* name = value_side ? "value_cache" : "key_cache";
  const std::int64_t d = value_side ? p.value_head_size : p.key_head_size;
  if (p.cache_mode == CacheMode::PA_NZ) {
    return check_nz_cache(c, name, value_side ? "value" : "key", p.num_heads, d);
  }
  return check_row_cache(p, c, name, d, value_side ? "value head size" : "key head size");
}

// The compress modes' index tensors: seq_lens [batch], the others one entry per (batch, head).
void check_compress_indices(ScatterPaKvCachePlan& p) {
  const TensorView& seq = *p.seq_lens;
  if (seq.rank != 1) {
    invalid("seq_lens must be 1-D [batch], got ", seq.rank, "-D ", shape_str(seq));
  }
  const bool four = p.key.rank == 4;
  if (four) {
    require_dim(seq, "seq_lens", 0, p.batch, "batch = key.shape[0]");
  } else {
    p.batch = seq.dim(0);
  }
  require_per_head(p.slot_mapping, "slot_mapping", p.batch, p.num_heads, four);
  require_per_head(*p.compress_lens, "compress_lens", p.batch, p.num_heads, four);
  if (p.compress_seq_offsets) {
    require_per_head(*p.compress_seq_offsets, "compress_seq_offsets", p.batch, p.num_heads, four);
  }
}

// Index tensor shapes and both caches' shapes; the caches must agree on their blocks.
void resolve_blocks(ScatterPaKvCachePlan& p) {
  if (is_compress(p.scatter_mode)) {
    check_compress_indices(p);
  } else {
    require_shape(p.slot_mapping, "slot_mapping", {p.num_tokens}, "(one slot per token of key)");
  }
  const Blocks k = check_cache_shape(p, false);
  if (p.value) {
    const Blocks v = check_cache_shape(p, true);
    if (v.num_blocks != k.num_blocks) {
      invalid("value_cache has ", v.num_blocks, " blocks but key_cache has ", k.num_blocks,
              " (num_blocks must match; shapes ", shape_str(*p.value_cache), " and ",
              shape_str(p.key_cache), ")");
    }
    if (v.block_size != k.block_size) {
      invalid("value_cache block_size ", v.block_size, " must match key_cache block_size ",
              k.block_size, " (shapes ", shape_str(*p.value_cache), " and ", shape_str(p.key_cache),
              ")");
    }
  }
  p.num_blocks = k.num_blocks;
  p.block_size = k.block_size;
  p.num_slots = checked_mul(k.num_blocks, k.block_size, "num_blocks * block_size");
}

// The source views: last axis contiguous (row copies); other strides are honoured.
void check_source_rows(const ScatterPaKvCachePlan& p) {
  require_inner_contiguous(p.key, "key", p.key.rank - 1, "the last axis must be contiguous");
  if (p.value) {
    require_inner_contiguous(*p.value, "value", p.value->rank - 1,
                             "the last axis must be contiguous");
  }
}

void check_memory(const ScatterPaKvCachePlan& p) {
  const bool any_strides = p.cache_mode == CacheMode::Norm && !is_compress(p.scatter_mode);
  require_cache_layout(p.key_cache, "key_cache", any_strides);
  if (p.value) {
    require_cache_layout(*p.value_cache, "value_cache", any_strides);
    if (p.value_cache->data != nullptr && p.value_cache->data == p.key_cache.data) {
      invalid("key_cache and value_cache must be different memory, got the same data pointer");
    }
    if (any_strides) require_disjoint(p.key_cache, "key_cache", *p.value_cache, "value_cache");
  }
  if (p.scatter_mode == ScatterMode::Nct) {
    check_nct_side(p.key, "key", p.strides[0], p.offsets[0], "0", "0");
    if (p.value) check_nct_side(*p.value, "value", p.strides[1], p.offsets[1], "1", "1");
  }
}

// Enumerators outside the enums (a cast from an integer) are rejected like unknown names.
void check_mode_values(const ScatterPaKvCacheOptions& o) {
  if (static_cast<unsigned>(o.cache_mode) > static_cast<unsigned>(CacheMode::PA_NZ)) {
    invalid("cache_mode must be Norm or PA_NZ, got the value ",
            static_cast<unsigned>(o.cache_mode));
  }
  if (static_cast<unsigned>(o.scatter_mode) > static_cast<unsigned>(ScatterMode::NHSD)) {
    invalid("scatter_mode must be None, Nct, Alibi, Rope, Omni or NHSD, got the value ",
            static_cast<unsigned>(o.scatter_mode));
  }
}

// ---- data-dependent rules -------------------------------------------------------------------

// Slot-per-token modes: every slot below num_slots (negative slots are padding).
void check_slots(const ScatterPaKvCachePlan& p, CheckedData& out) {
  read_padded_slots(p.slot_mapping, p.num_slots, p.block_size, "key_cache", out.slots);
}

// seq_lens: non-negative, within the padded length of a 4-D key, summing to the tokens of a
// packed 3-D key.
void check_seq_lens(const ScatterPaKvCachePlan& p, const IndexReader& seq) {
  const bool packed = p.key.rank == 3;
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
}

// The window of run i (batch b, head h, l tokens) after its length and offset checks, with the
// "no compression" cases normalised: window 0 then writes all l tokens.
void resolve_window(const ScatterPaKvCachePlan& p, std::int64_t i, std::int64_t w, std::int64_t o,
                    CompressRun& r) {
  const std::int64_t b = r.b, h = r.h, l = r.seq_len;
  if (w < 0) invalid("compress_lens[", i, "] = ", w, " must be >= 0 (batch ", b, ", head ", h, ")");
  if (p.scatter_mode == ScatterMode::Alibi) {
    if (w > l) {
      invalid("compress_lens[", i, "] = ", w, " exceeds seq_lens[", b, "] = ", l,
              " (Alibi keeps the last compress_lens tokens; batch ", b, ", head ", h, ")");
    }
    r.window = w;
    r.rows = w;
    return;
  }
  const bool minus_one_ok = p.key.rank == 3;  // -1 means "do not compress" only for 3-D keys
  if (o > l || o < (minus_one_ok ? -1 : 0)) {
    invalid("compress_seq_offsets[", i, "] = ", o, " must be ", minus_one_ok ? "-1 or " : "",
            "in [0, seq_lens[", b, "] = ", l, "] (batch ", b, ", head ", h, ")");
  }
  if (o >= 0 && o + w > l) {
    invalid("compress_seq_offsets[", i, "] + compress_lens[", i, "] = ", o, " + ", w, " = ", o + w,
            " exceeds seq_lens[", b, "] = ", l, " (batch ", b, ", head ", h, ")");
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

// A run starting at a non-negative slot must fit in the cache; a negative start skips it.
void check_run_slots(const ScatterPaKvCachePlan& p, std::int64_t i, CompressRun& r) {
  const std::int64_t ns = p.num_slots;
  if (r.start < 0) {
    r.rows = 0;
    return;
  }
  if (r.start >= ns) {
    invalid("slot_mapping[", i, "] = ", r.start, " is out of range [0, ", ns, ") (batch ", r.b,
            ", head ", r.h, "; key_cache has ", p.num_blocks, " blocks of ", p.block_size,
            " slots; a negative start slot skips the run)");
  }
  if (r.start + r.rows > ns) {
    invalid("slot_mapping[", i, "] = ", r.start, " starts a run of ", r.rows, " rows (batch ", r.b,
            ", head ", r.h, ") that ends at row ", r.start + r.rows - 1, ", out of range [0, ", ns,
            ") (key_cache has ", p.num_blocks, " blocks of ", p.block_size, " slots)");
  }
}

// Compress modes: one run per (batch, head), in task order.
void check_runs(const ScatterPaKvCachePlan& p, CheckedData& out) {
  const IndexReader slot(p.slot_mapping);
  const IndexReader seq(*p.seq_lens);
  const IndexReader lens(*p.compress_lens);
  const IndexReader offs =
      p.compress_seq_offsets ? IndexReader(*p.compress_seq_offsets) : IndexReader();
  check_seq_lens(p, seq);  // first: packed 3-D keys need their prefix sums
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
      r.base = p.key.rank == 3 ? base : 0;
      r.start = slot[i];
      resolve_window(p, i, lens[i], p.scatter_mode == ScatterMode::Alibi ? 0 : offs[i], r);
      check_run_slots(p, i, r);
      out.runs[static_cast<std::size_t>(i)] = r;
    }
    base += l;
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
  for_each_optional(p, [](const TensorView& t, const char* name) { require_data(t, name); });
}

void check_data(const ScatterPaKvCachePlan& p, CheckedData& out) {
  out.slots.clear();
  out.runs.clear();
  if (is_compress(p.scatter_mode)) {
    check_runs(p, out);
  } else {
    check_slots(p, out);
  }
}

}  // namespace detail::scatter

ScatterPaKvCachePlan plan_scatter_pa_kv_cache(const TensorView& key,
                                              const std::optional<TensorView>& value,
                                              const TensorView& key_cache,
                                              const std::optional<TensorView>& value_cache,
                                              const TensorView& slot_mapping,
                                              const ScatterPaKvCacheOptions& options) {
  using namespace detail::scatter;
  check_mode_values(options);
  ScatterPaKvCachePlan p;
  p.cache_mode = options.cache_mode;
  p.scatter_mode = options.scatter_mode;
  p.key = key;
  p.key_cache = key_cache;
  p.slot_mapping = slot_mapping;
  if (has_value_side(value, value_cache)) {
    p.value = *value;
    p.value_cache = *value_cache;
  }
  p.compress_lens = options.compress_lens;
  p.compress_seq_offsets = options.compress_seq_offsets;
  p.seq_lens = options.seq_lens;

  check_bound_data(p);  // null pointers before anything looks at the data
  check_ranks_and_dtypes(p);
  check_sane_layouts(p);
  resolve_scatter_mode(p);
  resolve_nct(p, options);
  check_optional_presence(p);
  check_source_rows(p);
  resolve_tokens(p);
  resolve_blocks(p);
  check_memory(p);
  return p;
}

void scatter_pa_kv_cache(const TensorView& key, const std::optional<TensorView>& value,
                         const TensorView& key_cache, const std::optional<TensorView>& value_cache,
                         const TensorView& slot_mapping, const ScatterPaKvCacheOptions& options) {
  execute(plan_scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping, options));
}

}  // namespace kvscatter
