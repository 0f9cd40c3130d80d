// Validation of PagedKvWrite: every shape, dtype, stride and option rule,
// before any write.
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/index.h"
#include "core/slots.h"
#include "ops/paged_kv_write/internal.h"

namespace kvscatter {
namespace detail::paged_kv_write {
namespace {

bool is_activation(DType d) {
  return d == DType::float32 || d == DType::float16 || d == DType::bfloat16;
}

// [T, H, D] float rows with a unit stride on the last axis; returns nothing,
// fills H and D.
void check_inputs(const TensorView& key, const TensorView& value, PagedKvWritePlan& p) {
  require_rank(key, "key", 3, "[num_tokens, num_heads, head_size]");
  require_rank(value, "value", 3, "[num_tokens, num_heads, head_size]");
  if (!is_activation(key.dtype)) {
    invalid("key dtype must be one of {float32, float16, bfloat16}, got ", dtype_name(key.dtype));
  }
  if (value.dtype != key.dtype) {
    invalid("value dtype ", dtype_name(value.dtype), " differs from key dtype ",
            dtype_name(key.dtype));
  }
  p.num_heads = key.dim(1);
  p.head_size = key.dim(2);
  if (p.num_heads < 1 || p.head_size < 1) {
    invalid("key shape ", shape_str(key), " must have num_heads >= 1 and head_size >= 1");
  }
  if (value.dim(1) != p.num_heads || value.dim(2) != p.head_size) {
    invalid("value shape ", shape_str(value), " must be [num_tokens, ", p.num_heads, ", ",
            p.head_size, "] like key");
  }
  for (const auto* t : {&key, &value}) {
    const char* name = t == &key ? "key" : "value";
    require_sane_layout(*t, name);
    require_data(*t, name);
    if (p.head_size > 1 && t->stride(2) != 1) {
      invalid(name, " must have a unit stride on its head_size axis, got stride ", t->stride(2));
    }
  }
}

// The cache as an NHD view: an HND view has its head and slot axes swapped.
TensorView as_nhd(const TensorView& cache, KvCacheLayout layout) {
  TensorView v = cache;
  if (layout == KvCacheLayout::HND && v.rank == 4) {
    std::swap(v.shape[1], v.shape[2]);
    std::swap(v.strides[1], v.strides[2]);
  }
  return v;
}

void check_cache_dtype(const TensorView& c, const char* name, const PagedKvWritePlan& p,
                       DType input) {
  if (p.format == KvCacheFormat::copy) {
    if (c.dtype != input) {
      invalid(name, " dtype ", dtype_name(c.dtype), " must equal the key dtype ", dtype_name(input),
              " (format 'copy' stores the input type)");
    }
    return;
  }
  const DType fp8 = p.format == KvCacheFormat::fp8_e4m3 ? DType::float8_e4m3fn : DType::float8_e5m2;
  if (c.dtype != DType::uint8 && c.dtype != fp8) {
    invalid(name, " dtype ", dtype_name(c.dtype), " cannot hold the codes of format '",
            kv_cache_format_name(p.format), "' (expected uint8 or ", dtype_name(fp8), ")");
  }
}

void check_cache(const TensorView& c, const char* name, const PagedKvWritePlan& p, DType input) {
  require_rank(c, name, 4, "[num_blocks, block_size, num_heads, head_size]");
  if (c.dim(1) < 1 || c.dim(2) != p.num_heads || c.dim(3) != p.head_size) {
    invalid(name, " shape ", shape_str(c), " must be [num_blocks, block_size, ", p.num_heads, ", ",
            p.head_size, "] (NHD order) with block_size >= 1");
  }
  check_cache_dtype(c, name, p, input);
  require_sane_layout(c, name);
  require_data(c, name);
  if (p.head_size > 1 && c.stride(3) != 1) {
    invalid(name, " must have a unit stride on its head_size axis, got stride ", c.stride(3));
  }
  require_no_self_overlap(c, name);
}

void check_scales(const PagedKvWriteOptions& o, PagedKvWritePlan& p) {
  if (o.k_scale.has_value() != o.v_scale.has_value()) {
    invalid(o.k_scale ? "v_scale" : "k_scale", " is missing: k_scale and v_scale come together");
  }
  if (!o.k_scale) {
    if (p.format != KvCacheFormat::copy) {
      invalid("k_scale and v_scale are required by format '", kv_cache_format_name(p.format), "'");
    }
    return;
  }
  for (const TensorView* s : {&*o.k_scale, &*o.v_scale}) {
    const char* name = s == &*o.k_scale ? "k_scale" : "v_scale";
    if (s->dtype != DType::float32) {
      invalid(name, " must be float32, got ", dtype_name(s->dtype));
    }
    require_sane_layout(*s, name);
    const std::int64_t n = s->numel();
    if (n != 1 && n != p.num_heads) {
      invalid(name, " has ", n, " elements; expected 1 or ", p.num_heads);
    }
    require_data(*s, name);
  }
  const TensorView &k = *o.k_scale, &v = *o.v_scale;
  bool same = k.rank == v.rank;
  for (int i = 0; same && i < k.rank; ++i) same = k.dim(i) == v.dim(i);
  if (!same) {
    invalid("v_scale shape ", shape_str(v), " must equal k_scale shape ", shape_str(k));
  }
  p.k_scale = k;
  p.v_scale = v;
  p.per_head_scale = k.numel() == p.num_heads && p.num_heads > 1;
}

void check_slot_mapping(const TensorView& sm, PagedKvWritePlan& p) {
  require_rank(sm, "slot_mapping", 1, "[num_tokens]");
  require_index(sm, "slot_mapping");
  require_sane_layout(sm, "slot_mapping");
  require_data(sm, "slot_mapping");
  p.num_tokens = sm.dim(0);
  if (p.num_tokens > p.key.dim(0)) {
    invalid("slot_mapping has ", p.num_tokens, " entries but key has only ", p.key.dim(0), " rows");
  }
  if (p.num_tokens > p.value.dim(0)) {
    invalid("slot_mapping has ", p.num_tokens, " entries but value has only ", p.value.dim(0),
            " rows");
  }
}

}  // namespace

void check_bound_data(const PagedKvWritePlan& p) {
  require_data(p.key, "key");
  require_data(p.value, "value");
  require_data(p.key_cache, "key_cache");
  require_data(p.value_cache, "value_cache");
  require_data(p.slot_mapping, "slot_mapping");
  if (p.k_scale) require_data(*p.k_scale, "k_scale");
  if (p.v_scale) require_data(*p.v_scale, "v_scale");
}

void check_data(const PagedKvWritePlan& p, CheckedData& out) {
  read_padded_slots(p.slot_mapping, p.num_slots, p.block_size, "key_cache", out.slots);
  out.k_scale.clear();
  out.v_scale.clear();
  if (p.format == KvCacheFormat::copy) return;
  for (int side = 0; side < 2; ++side) {
    const TensorView& s = side == 0 ? *p.k_scale : *p.v_scale;
    std::vector<float>& dst = side == 0 ? out.k_scale : out.v_scale;
    const std::int64_t n = s.numel();
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      float v;
      const auto* base = static_cast<const unsigned char*>(s.data);
      std::memcpy(&v, base + flat_offset(s, n == 1 ? 0 : h) * 4, 4);
      dst.push_back(v);
    }
  }
}

}  // namespace detail::paged_kv_write

const char* kv_cache_format_name(KvCacheFormat format) noexcept {
  switch (format) {
    case KvCacheFormat::fp8_e4m3:
      return "fp8_e4m3";
    case KvCacheFormat::fp8_e5m2:
      return "fp8_e5m2";
    default:
      return "copy";
  }
}

KvCacheFormat parse_kv_cache_format(std::string_view text) {
  if (text.empty()) return KvCacheFormat::copy;
  for (KvCacheFormat f : {KvCacheFormat::copy, KvCacheFormat::fp8_e4m3, KvCacheFormat::fp8_e5m2}) {
    if (text == kv_cache_format_name(f)) return f;
  }
  detail::invalid("format '", text, "' is not supported (expected 'copy', 'fp8_e4m3' or ",
                  "'fp8_e5m2')");
}

KvCacheLayout parse_kv_cache_layout(std::string_view text) {
  if (text.empty() || text == "NHD") return KvCacheLayout::NHD;
  if (text == "HND") return KvCacheLayout::HND;
  detail::invalid("layout '", text, "' is not supported (expected 'NHD' or 'HND')");
}

PagedKvWritePlan plan_paged_kv_write(const TensorView& key, const TensorView& value,
                                     const TensorView& key_cache, const TensorView& value_cache,
                                     const TensorView& slot_mapping,
                                     const PagedKvWriteOptions& options) {
  using namespace detail;
  using namespace detail::paged_kv_write;
  PagedKvWritePlan p;
  p.format = options.format;
  check_inputs(key, value, p);
  p.key = key;
  p.value = value;
  p.key_cache = as_nhd(key_cache, options.layout);
  p.value_cache = as_nhd(value_cache, options.layout);
  check_cache(p.key_cache, "key_cache", p, key.dtype);
  check_cache(p.value_cache, "value_cache", p, key.dtype);
  if (p.value_cache.dtype != p.key_cache.dtype || p.value_cache.dim(0) != p.key_cache.dim(0) ||
      p.value_cache.dim(1) != p.key_cache.dim(1)) {
    invalid("value_cache (", shape_str(p.value_cache), " ", dtype_name(p.value_cache.dtype),
            ") must have the shape and dtype of key_cache (", shape_str(p.key_cache), " ",
            dtype_name(p.key_cache.dtype), ")");
  }
  require_disjoint(p.key_cache, "key_cache", p.value_cache, "value_cache");
  check_scales(options, p);
  p.slot_mapping = slot_mapping;
  check_slot_mapping(slot_mapping, p);
  p.num_blocks = p.key_cache.dim(0);
  p.block_size = p.key_cache.dim(1);
  p.num_slots = checked_mul(p.num_blocks, p.block_size, "key_cache slots");
  return p;
}

void paged_kv_write(const TensorView& key, const TensorView& value, const TensorView& key_cache,
                    const TensorView& value_cache, const TensorView& slot_mapping,
                    const PagedKvWriteOptions& options) {
  execute(plan_paged_kv_write(key, value, key_cache, value_cache, slot_mapping, options));
}

}  // namespace kvscatter
