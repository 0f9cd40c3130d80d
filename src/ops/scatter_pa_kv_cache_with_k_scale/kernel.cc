// Optimized CPU kernel of ScatterPaKvCacheWithKScale. The operator is a pure byte copy, so the
// fast path is one memcpy per (token, head) row; tokens are split across threads after earlier
// writers of a duplicated slot are dropped, which keeps "last writer wins" for any thread count.
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/slots.h"
#include "ops/scatter_pa_kv_cache_with_k_scale/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter::detail {
namespace {

// Copies n one-byte elements between strided rows; memcpy when both are contiguous, with the
// common head sizes as compile-time sizes so the copy is a few inline vector moves.
inline void copy_row(std::uint8_t* dst, std::int64_t dst_stride, const std::uint8_t* src,
                     std::int64_t src_stride, std::int64_t n) {
  if ((dst_stride == 1 && src_stride == 1) || n == 1) {
    switch (n) {
      case 64:
        std::memcpy(dst, src, 64);
        return;
      case 128:
        std::memcpy(dst, src, 128);
        return;
      case 192:
        std::memcpy(dst, src, 192);
        return;
      case 256:
        std::memcpy(dst, src, 256);
        return;
      case 512:
        std::memcpy(dst, src, 512);
        return;
      default:
        std::memcpy(dst, src, static_cast<std::size_t>(n));
        return;
    }
  }
  for (std::int64_t i = 0; i < n; ++i) dst[i * dst_stride] = src[i * src_stride];
}

}  // namespace

void scatter_pa_kv_cache_with_k_scale_cpu(const ScatterPaKvCacheWithKScalePlan& p) {
  if (p.num_tokens == 0 || p.num_heads == 0 || p.num_slots == 0) return;
  std::vector<std::int64_t> slots = read_slots(p.slot_mapping);
  for (auto& s : slots) {
    if (s >= p.num_slots) s = -1;  // out of range: skipped like a padding token
  }
  const std::int64_t bytes_per_token = 2 * p.num_heads * (p.key_head_size + p.value_head_size + 4);
  const std::int64_t grain = grain_for_bytes(bytes_per_token);
  if (p.num_tokens > grain) keep_last_writers(slots, p.num_slots);

  const auto* key = static_cast<const std::uint8_t*>(p.key.data);
  const auto* value = static_cast<const std::uint8_t*>(p.value.data);
  const auto* key_scale = static_cast<const std::uint8_t*>(p.key_scale.data);
  auto* key_cache = static_cast<std::uint8_t*>(p.key_cache.data);
  auto* value_cache = static_cast<std::uint8_t*>(p.value_cache.data);
  auto* scale_cache = static_cast<std::uint8_t*>(p.key_scale_cache.data);
  const auto k = p.key.strides;
  const auto v = p.value.strides;
  const auto kc = p.key_cache.strides;
  const auto vc = p.value_cache.strides;
  const auto ks = p.key_scale.strides;
  const auto sc = p.key_scale_cache.strides;
  const std::int64_t H = p.num_heads, Dk = p.key_head_size, Dv = p.value_head_size;
  const SlotSplitter split(p.block_size);

  parallel_for(p.num_tokens, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t slot = slots[static_cast<std::size_t>(t)];
      if (slot < 0) continue;
      const std::int64_t blk = split.block(slot), off = split.offset(slot);
      const std::uint8_t* krow = key + t * k[0];
      const std::uint8_t* vrow = value + t * v[0];
      std::uint8_t* kdst = key_cache + blk * kc[0] + off * kc[2];
      std::uint8_t* vdst = value_cache + blk * vc[0] + off * vc[2];
      for (std::int64_t h = 0; h < H; ++h) {
        copy_row(kdst + h * kc[1], kc[3], krow + h * k[1], k[2], Dk);
        copy_row(vdst + h * vc[1], vc[3], vrow + h * v[1], v[2], Dv);
      }
      // float32 scales move as raw bytes; element strides are scaled to bytes here.
      const std::uint8_t* srow = key_scale + 4 * t * ks[0];
      std::uint8_t* sdst = scale_cache + 4 * (blk * sc[0] + off * sc[2]);
      for (std::int64_t h = 0; h < H; ++h) {
        std::memcpy(sdst + 4 * h * sc[1], srow + 4 * h * ks[1], 4);
      }
    }
  });
}

}  // namespace kvscatter::detail
