// KvCompressEpilog: mode parsing, validation (spec quant_ops.md sections 4.2, 4.3 and 4.9 plus
// decisions G1-G11), the data-dependent slot check, and the public entry points.
#include <algorithm>
#include <cctype>

#include "core/check.h"
#include "kvscatter/quant_ops.h"
#include "ops/kv_compress_epilog/kernel.h"
#include "core/slots.h"
#include "runtime/parallel.h"

namespace kvscatter {

using detail::invalid;

QuantMode parse_quant_mode(const std::string& text) {
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
  invalid("quant_mode should be one of [fp8_bf16, fp8_e8m0, hifloat8_fp4] (or 0, 1, 2), but got \"",
          text, "\"");
}

KvCompressEpilogPlan plan_kv_compress_epilog(const TensorView& cache, const TensorView& x,
                                             const TensorView& slot_mapping,
                                             std::int64_t quant_group_size, QuantMode quant_mode,
                                             bool round_scale, float x_scale) {
  detail::require_data(cache, "cache");
  detail::require_data(x, "x");
  detail::require_data(slot_mapping, "slot_mapping");

  const int mode = static_cast<int>(quant_mode);
  if (mode < 0 || mode > 2) {
    invalid("quant_mode must be 0 (fp8_bf16), 1 (fp8_e8m0) or 2 (hifloat8_fp4), got ", mode);
  }
  detail::require_dtype(cache, "cache", {DType::uint8});
  detail::require_dtype(x, "x", {DType::bfloat16});
  detail::require_index(slot_mapping, "slot_mapping");

  if (x.rank < 2) {
    invalid("x must be at least 2-D [..., d], got ", x.rank, "-D ", detail::shape_str(x));
  }
  if (slot_mapping.rank != x.rank - 1) {
    invalid("slot_mapping must be ", x.rank - 1, "-D (the leading dims of x ", detail::shape_str(x),
            "), got ", slot_mapping.rank, "-D ", detail::shape_str(slot_mapping));
  }
  for (int a = 0; a < slot_mapping.rank; ++a) {
    detail::require_dim(slot_mapping, "slot_mapping", a, x.dim(a), "leading dims of x");
  }
  const std::int64_t d = x.dim(x.rank - 1);
  if (d <= 64 || d > 8192 || d % 64 != 0) {
    invalid("x last dim d must be a multiple of 64 in (64, 8192], got d = ", d, " (x shape ",
            detail::shape_str(x), ")");
  }
  const std::int64_t n = d - detail::kRopeDim;
  std::int64_t group = 64;  // modes 0/1 always quantize groups of 64; quant_group_size ignored
  if (quant_mode == QuantMode::hifloat8_fp4) {
    if (quant_group_size != 16 && quant_group_size != 32 && quant_group_size != 64) {
      invalid("quant_group_size must be 16, 32 or 64 in quant_mode hifloat8_fp4, got ",
              quant_group_size);
    }
    group = quant_group_size;
    if (n % group != 0) {
      invalid("d - 64 = ", n, " must be a multiple of quant_group_size ", group);
    }
  }

  detail::require_rank(cache, "cache", 4, "[num_blocks, block_size, 1, row_bytes]");
  detail::require_dim(cache, "cache", 2, 1, "one compressed row per slot");
  detail::require_sane_layout(cache, "cache");
  detail::require_sane_layout(x, "x");
  detail::require_sane_layout(slot_mapping, "slot_mapping");
  if (x.stride(x.rank - 1) != 1) {
    invalid("x must be contiguous in its last axis (stride 1), got stride ", x.stride(x.rank - 1),
            " (x shape ", detail::shape_str(x), ")");
  }
  if (cache.dim(3) > 1 && cache.stride(3) != 1) {
    invalid("cache rows must be contiguous: cache.strides[3] must be 1, got ", cache.stride(3));
  }
  detail::require_no_self_overlap(cache, "cache");

  const std::int64_t groups = n / group;
  std::int64_t payload = 0, row = 0;
  if (quant_mode == QuantMode::hifloat8_fp4) {
    payload = 64 + n / 2 + groups * 2;
  } else {
    payload = n + 128 + groups * (quant_mode == QuantMode::fp8_bf16 ? 2 : 1);
  }
  row = quant_mode == QuantMode::fp8_e8m0 ? payload : (payload + 31) / 32 * 32;
  if (cache.dim(3) < row) {
    invalid("cache.shape[3] (row_bytes) must be >= ", row,
            ", the bytes one row takes in quant_mode ", mode, " with d = ", d,
            quant_mode == QuantMode::hifloat8_fp4 ? detail::cat(" and quant_group_size ", group)
                                                  : std::string(),
            ", got ", cache.dim(3));
  }

  KvCompressEpilogPlan plan;
  plan.cache = cache;
  plan.x = x;
  plan.slot_mapping = slot_mapping;
  plan.quant_mode = quant_mode;
  plan.quant_group_size = quant_group_size;
  plan.round_scale = round_scale;
  plan.x_scale = x_scale;
  plan.d = d;
  plan.rows = x.numel() / d;
  plan.num_blocks = cache.dim(0);
  plan.block_size = cache.dim(1);
  plan.row_bytes = row;
  plan.payload_bytes = payload;
  plan.group_size = group;
  plan.num_groups = groups;
  plan.num_slots =
      detail::checked_mul(plan.num_blocks, plan.block_size, "cache num_blocks * block_size");
  return plan;
}

namespace detail {

std::vector<std::int64_t> checked_epilog_slots(const KvCompressEpilogPlan& p) {
  std::vector<std::int64_t> slots = read_slots(p.slot_mapping);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const std::int64_t s = slots[i];
    if (s == -1 || (s >= 0 && s < p.num_slots)) continue;
    invalid("slot_mapping", index_str(p.slot_mapping, static_cast<std::int64_t>(i)), " = ", s,
            " is out of range [0, ", p.num_slots, ") (cache has ", p.num_blocks, " blocks of ",
            p.block_size, " slots); only -1 marks a token to skip");
  }
  return slots;
}

}  // namespace detail

void execute(const KvCompressEpilogPlan& plan) {
  if (plan.rows == 0) return;
  std::vector<std::int64_t> slots = detail::checked_epilog_slots(plan);
  const std::int64_t grain = detail::grain_for_bytes(2 * plan.d + plan.row_bytes);
  // Threads split rows; dropping earlier writers of a repeated slot makes the chunks write
  // disjoint rows and keeps the last writer in token order (G4).
  if (plan.rows > grain) detail::keep_last_writers(slots, plan.num_slots);
  detail::parallel_for(plan.rows, grain, [&](std::int64_t begin, std::int64_t end) {
    detail::kv_compress_epilog_cpu(plan, slots.data(), begin, end);
  });
}

void kv_compress_epilog(const TensorView& cache, const TensorView& x,
                        const TensorView& slot_mapping, std::int64_t quant_group_size,
                        QuantMode quant_mode, bool round_scale, float x_scale) {
  execute(plan_kv_compress_epilog(cache, x, slot_mapping, quant_group_size, quant_mode, round_scale,
                                  x_scale));
}

}  // namespace kvscatter
