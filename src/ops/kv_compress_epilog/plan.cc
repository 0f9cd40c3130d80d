// kv_compress_epilog validation: mode parsing, every shape, dtype, stride and mode rule in
// plan_kv_compress_epilog(), and the slot check (check_data) that execute() runs before writing.
#include <cctype>
#include <string>

#include "core/check.h"
#include "core/index.h"
#include "core/slots.h"
#include "ops/kv_compress_epilog/internal.h"

namespace kvscatter {

QuantMode parse_quant_mode(std::string_view text) {
  std::string s;
  std::size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  for (std::size_t i = b; i < e; ++i) {
    s += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  if (s == "fp8_bf16" || s == "0") return QuantMode::fp8_bf16;
  if (s == "fp8_e8m0" || s == "1") return QuantMode::fp8_e8m0;
  if (s == "hifloat8_fp4" || s == "2") return QuantMode::hifloat8_fp4;
  detail::invalid(
      "quant_mode should be one of [fp8_bf16, fp8_e8m0, hifloat8_fp4] (or 0, 1, 2), but got \"",
      text, "\"");
}

namespace detail::epilog {
namespace {

// x is [..., d] bfloat16 with d a multiple of 64 in (64, 8192]; slot_mapping is x's leading dims.
void check_x_and_slots(const TensorView& x, const TensorView& slot_mapping) {
  if (x.rank < 2) invalid("x must be at least 2-D [..., d], got ", x.rank, "-D ", shape_str(x));
  if (slot_mapping.rank != x.rank - 1) {
    invalid("slot_mapping must be ", x.rank - 1, "-D (the leading dims of x ", shape_str(x),
            "), got ", slot_mapping.rank, "-D ", shape_str(slot_mapping));
  }
  for (int a = 0; a < slot_mapping.rank; ++a) {
    require_dim(slot_mapping, "slot_mapping", a, x.dim(a), "leading dims of x");
  }
  const std::int64_t d = x.dim(x.rank - 1);
  if (d <= 64 || d > 8192 || d % 64 != 0) {
    invalid("x last dim d must be a multiple of 64 in (64, 8192], got d = ", d, " (x shape ",
            shape_str(x), ")");
  }
}

// Modes 0/1 always quantize groups of 64 (quant_group_size is ignored); mode 2 takes 16, 32 or
// 64 dividing d - 64.
std::int64_t resolve_group(QuantMode mode, std::int64_t quant_group_size, std::int64_t n) {
  if (mode != QuantMode::hifloat8_fp4) return 64;
  if (quant_group_size != 16 && quant_group_size != 32 && quant_group_size != 64) {
    invalid("quant_group_size must be 16, 32 or 64 in quant_mode hifloat8_fp4, got ",
            quant_group_size);
  }
  if (n % quant_group_size != 0) {
    invalid("d - 64 = ", n, " must be a multiple of quant_group_size ", quant_group_size);
  }
  return quant_group_size;
}

void check_layouts(const TensorView& cache, const TensorView& x, const TensorView& slot_mapping) {
  require_rank(cache, "cache", 4, "[num_blocks, block_size, 1, row_bytes]");
  require_dim(cache, "cache", 2, 1, "one compressed row per slot");
  require_sane_layout(cache, "cache");
  require_sane_layout(x, "x");
  require_sane_layout(slot_mapping, "slot_mapping");
  if (x.stride(x.rank - 1) != 1) {
    invalid("x must be contiguous in its last axis (stride 1), got stride ", x.stride(x.rank - 1),
            " (x shape ", shape_str(x), ")");
  }
  if (cache.dim(3) > 1 && cache.stride(3) != 1) {
    invalid("cache rows must be contiguous: cache.strides[3] must be 1, got ", cache.stride(3));
  }
  require_no_self_overlap(cache, "cache");
}

// Payload and padded row bytes of the mode (docs/operators/kv_compress_epilog.md, row layout).
void resolve_row_bytes(KvCompressEpilogPlan& p) {
  const std::int64_t n = p.d - kRopeDim;
  if (p.quant_mode == QuantMode::hifloat8_fp4) {
    p.payload_bytes = 64 + n / 2 + p.num_groups * 2;
  } else {
    p.payload_bytes = n + 128 + p.num_groups * (p.quant_mode == QuantMode::fp8_bf16 ? 2 : 1);
  }
  p.row_bytes =
      p.quant_mode == QuantMode::fp8_e8m0 ? p.payload_bytes : (p.payload_bytes + 31) / 32 * 32;
  if (p.cache.dim(3) < p.row_bytes) {
    invalid("cache.shape[3] (row_bytes) must be >= ", p.row_bytes,
            ", the bytes one row takes in quant_mode ", static_cast<int>(p.quant_mode),
            " with d = ", p.d,
            p.quant_mode == QuantMode::hifloat8_fp4 ? cat(" and quant_group_size ", p.group_size)
                                                    : std::string(),
            ", got ", p.cache.dim(3));
  }
}

}  // namespace

void check_bound_data(const KvCompressEpilogPlan& p) {
  require_data(p.cache, "cache");
  require_data(p.x, "x");
  require_data(p.slot_mapping, "slot_mapping");
}

void check_data(const KvCompressEpilogPlan& p, std::vector<std::int64_t>& slots) {
  read_indices(p.slot_mapping, slots);
  const std::int64_t i =
      first_bad_slot(slots.data(), static_cast<std::int64_t>(slots.size()), p.num_slots);
  if (i < 0) return;
  invalid("slot_mapping", index_str(p.slot_mapping, i), " = ", slots[static_cast<std::size_t>(i)],
          " is out of range [0, ", p.num_slots, ") (cache has ", p.num_blocks, " blocks of ",
          p.block_size, " slots); only -1 marks a token to skip");
}

}  // namespace detail::epilog

KvCompressEpilogPlan plan_kv_compress_epilog(const TensorView& cache, const TensorView& x,
                                             const TensorView& slot_mapping,
                                             std::int64_t quant_group_size, QuantMode quant_mode,
                                             bool round_scale, float x_scale) {
  using namespace detail::epilog;
  KvCompressEpilogPlan p;
  p.cache = cache;
  p.x = x;
  p.slot_mapping = slot_mapping;
  check_bound_data(p);
  const int mode = static_cast<int>(quant_mode);
  if (mode < 0 || mode > 2) {
    detail::invalid("quant_mode must be 0 (fp8_bf16), 1 (fp8_e8m0) or 2 (hifloat8_fp4), got ",
                    mode);
  }
  detail::require_dtype(cache, "cache", {DType::uint8});
  detail::require_dtype(x, "x", {DType::bfloat16});
  detail::require_index(slot_mapping, "slot_mapping");
  check_x_and_slots(x, slot_mapping);
  p.quant_mode = quant_mode;
  p.quant_group_size = quant_group_size;
  p.round_scale = round_scale;
  p.x_scale = x_scale;
  p.d = x.dim(x.rank - 1);
  p.group_size = resolve_group(quant_mode, quant_group_size, p.d - detail::kRopeDim);
  p.num_groups = (p.d - detail::kRopeDim) / p.group_size;
  check_layouts(cache, x, slot_mapping);
  resolve_row_bytes(p);
  p.rows = x.numel() / p.d;
  p.num_blocks = cache.dim(0);
  p.block_size = cache.dim(1);
  p.num_slots = detail::checked_mul(p.num_blocks, p.block_size, "cache num_blocks * block_size");
  p.extents = detail::extents_of(detail::epilog::operands(p));
  return p;
}

void kv_compress_epilog(const TensorView& cache, const TensorView& x,
                        const TensorView& slot_mapping, std::int64_t quant_group_size,
                        QuantMode quant_mode, bool round_scale, float x_scale) {
  execute(plan_kv_compress_epilog(cache, x, slot_mapping, quant_group_size, quant_mode, round_scale,
                                  x_scale));
}

}  // namespace kvscatter
