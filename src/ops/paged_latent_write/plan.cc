// Validation of PagedLatentWrite: every shape, dtype, stride and option rule before any write.
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/slots.h"
#include "ops/paged_latent_write/internal.h"

namespace kvscatter {
namespace detail::paged_latent_write {
namespace {

void check_inputs(const TensorView& kv_c, const TensorView& k_pe, PagedLatentWritePlan& p) {
  require_rank(kv_c, "kv_c", 2, "[num_tokens, kv_lora_rank]");
  require_rank(k_pe, "k_pe", 2, "[num_tokens, pe_dim]");
  require_dtype(kv_c, "kv_c", {DType::float32, DType::float16, DType::bfloat16});
  if (k_pe.dtype != kv_c.dtype) {
    invalid("k_pe dtype ", dtype_name(k_pe.dtype), " differs from kv_c dtype ",
            dtype_name(kv_c.dtype));
  }
  p.latent_dim = kv_c.dim(1);
  p.pe_dim = k_pe.dim(1);
  if (p.latent_dim < 1 || p.pe_dim < 1) {
    invalid("kv_c shape ", shape_str(kv_c), " and k_pe shape ", shape_str(k_pe),
            " need kv_lora_rank >= 1 and pe_dim >= 1");
  }
  for (const auto* t : {&kv_c, &k_pe}) {
    const char* name = t == &kv_c ? "kv_c" : "k_pe";
    require_sane_layout(*t, name);
    require_data(*t, name);
    if (t->dim(1) > 1 && t->stride(1) != 1) {
      invalid(name, " must have a unit stride on its last axis, got stride ", t->stride(1));
    }
  }
}

void check_entry(const TensorView& c, const PagedLatentWritePlan& p, DType input) {
  if (p.format == LatentCacheFormat::fp8_ds_mla) {
    if (p.latent_dim != kDsLatent || p.pe_dim != kDsPe) {
      invalid("fp8_ds_mla needs kv_lora_rank = 512 and pe_dim = 64, got ", p.latent_dim, " and ",
              p.pe_dim);
    }
    if (input == DType::float32)
      invalid("fp8_ds_mla needs float16 or bfloat16 inputs, got float32");
    if (c.dtype != DType::uint8) {
      invalid("kv_cache dtype must be uint8 for fp8_ds_mla, got ", dtype_name(c.dtype));
    }
    if (c.dim(2) != kDsEntryBytes) {
      invalid("kv_cache.shape[2] must be 656 bytes for fp8_ds_mla, got ", c.dim(2));
    }
    return;
  }
  if (c.dim(2) != p.latent_dim + p.pe_dim) {
    invalid("kv_cache.shape[2] = ", c.dim(2),
            " must equal kv_lora_rank + pe_dim = ", p.latent_dim + p.pe_dim);
  }
  if (p.format == LatentCacheFormat::copy) {
    if (c.dtype != input) {
      invalid("kv_cache dtype ", dtype_name(c.dtype), " must equal the kv_c dtype ",
              dtype_name(input), " (format 'copy' stores the input type)");
    }
    return;
  }
  const DType fp8 =
      p.format == LatentCacheFormat::fp8_e4m3 ? DType::float8_e4m3fn : DType::float8_e5m2;
  if (c.dtype != DType::uint8 && c.dtype != fp8) {
    invalid("kv_cache dtype ", dtype_name(c.dtype), " cannot hold the codes of format '",
            latent_cache_format_name(p.format), "' (expected uint8 or ", dtype_name(fp8), ")");
  }
}

void check_cache(const TensorView& c, PagedLatentWritePlan& p, DType input) {
  require_rank(c, "kv_cache", 3, "[num_blocks, block_size, entry]");
  if (c.dim(1) < 1) invalid("kv_cache block_size must be >= 1, got shape ", shape_str(c));
  check_entry(c, p, input);
  require_sane_layout(c, "kv_cache");
  require_data(c, "kv_cache");
  if (c.stride(2) != 1) {
    invalid("kv_cache must have a unit stride on its entry axis, got stride ", c.stride(2));
  }
  require_no_self_overlap(c, "kv_cache");
  p.num_blocks = c.dim(0);
  p.block_size = c.dim(1);
  p.num_slots = checked_mul(p.num_blocks, p.block_size, "kv_cache slots");
}

void check_scale(const PagedLatentWriteOptions& o, PagedLatentWritePlan& p) {
  if (!o.scale) {
    if (p.format == LatentCacheFormat::fp8_e4m3 || p.format == LatentCacheFormat::fp8_e5m2) {
      invalid("scale is required by format '", latent_cache_format_name(p.format), "'");
    }
    return;
  }
  require_scalar_scale(*o.scale, "scale");
  p.scale = o.scale;
}

void check_slot_mapping(const TensorView& sm, PagedLatentWritePlan& p) {
  require_rank(sm, "slot_mapping", 1, "[num_tokens]");
  require_index(sm, "slot_mapping");
  require_sane_layout(sm, "slot_mapping");
  require_data(sm, "slot_mapping");
  p.num_tokens = sm.dim(0);
  for (const auto* t : {&p.kv_c, &p.k_pe}) {
    if (p.num_tokens > t->dim(0)) {
      invalid("slot_mapping has ", p.num_tokens, " entries but ", t == &p.kv_c ? "kv_c" : "k_pe",
              " has only ", t->dim(0), " rows");
    }
  }
}

}  // namespace

void check_bound_data(const PagedLatentWritePlan& p) {
  require_data(p.kv_c, "kv_c");
  require_data(p.k_pe, "k_pe");
  require_data(p.kv_cache, "kv_cache");
  require_data(p.slot_mapping, "slot_mapping");
  if (p.scale) require_data(*p.scale, "scale");
}

void check_data(const PagedLatentWritePlan& p, CheckedData& out) {
  read_padded_slots(p.slot_mapping, p.num_slots, p.block_size, "kv_cache", out.slots);
  if (p.scale) std::memcpy(&out.scale, p.scale->data, 4);
}

}  // namespace detail::paged_latent_write

const char* latent_cache_format_name(LatentCacheFormat format) noexcept {
  switch (format) {
    case LatentCacheFormat::fp8_e4m3:
      return "fp8_e4m3";
    case LatentCacheFormat::fp8_e5m2:
      return "fp8_e5m2";
    case LatentCacheFormat::fp8_ds_mla:
      return "fp8_ds_mla";
    default:
      return "copy";
  }
}

LatentCacheFormat parse_latent_cache_format(std::string_view text) {
  if (text.empty()) return LatentCacheFormat::copy;
  for (LatentCacheFormat f : {LatentCacheFormat::copy, LatentCacheFormat::fp8_e4m3,
                              LatentCacheFormat::fp8_e5m2, LatentCacheFormat::fp8_ds_mla}) {
    if (text == latent_cache_format_name(f)) return f;
  }
  detail::invalid("format '", text,
                  "' is not supported (expected 'copy', 'fp8_e4m3', 'fp8_e5m2' or 'fp8_ds_mla')");
}

PagedLatentWritePlan plan_paged_latent_write(const TensorView& kv_c, const TensorView& k_pe,
                                             const TensorView& kv_cache,
                                             const TensorView& slot_mapping,
                                             const PagedLatentWriteOptions& options) {
  using namespace detail;
  using namespace detail::paged_latent_write;
  PagedLatentWritePlan p;
  p.format = options.format;
  check_inputs(kv_c, k_pe, p);
  p.kv_c = kv_c;
  p.k_pe = k_pe;
  p.kv_cache = kv_cache;
  check_cache(kv_cache, p, kv_c.dtype);
  check_scale(options, p);
  p.slot_mapping = slot_mapping;
  check_slot_mapping(slot_mapping, p);
  return p;
}

void paged_latent_write(const TensorView& kv_c, const TensorView& k_pe, const TensorView& kv_cache,
                        const TensorView& slot_mapping, const PagedLatentWriteOptions& options) {
  execute(plan_paged_latent_write(kv_c, k_pe, kv_cache, slot_mapping, options));
}

}  // namespace kvscatter
