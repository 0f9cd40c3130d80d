// The kernel of scatter_pa_kv_cache_with_k_scale, compiled once per SIMD target (Highway
// dynamic dispatch). The operator is a pure byte copy, so the fast path is one memcpy per
// (token, head) row; the driver (execute.cc) splits tokens over threads.
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/scatter_pa_kv_cache_with_k_scale/kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "ops/scatter_pa_kv_cache_with_k_scale/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::k_scale::HWY_NAMESPACE {

// Copies n one-byte elements between strided rows; memcpy when both are contiguous, with the
// common head sizes as compile-time sizes so the copy is a few inline vector moves.
HWY_INLINE void CopyRow(std::uint8_t* dst, std::int64_t dst_stride, const std::uint8_t* src,
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

void TokenRange(const TokenJob& job, std::int64_t begin, std::int64_t end) {
  const ScatterPaKvCacheWithKScalePlan& p = *job.plan;
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
  const SlotSplitter& split = job.split;
  const std::int64_t* slots = job.slots;

  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t slot = slots[t];
    if (slot < 0) continue;
    const std::uint8_t* krow = key + t * k[0];
    const std::uint8_t* vrow = value + t * v[0];
    std::uint8_t* kdst = split.address(key_cache, kc[0], kc[2], slot);
    std::uint8_t* vdst = split.address(value_cache, vc[0], vc[2], slot);
    for (std::int64_t h = 0; h < H; ++h) {
      CopyRow(kdst + h * kc[1], kc[3], krow + h * k[1], k[2], Dk);
      CopyRow(vdst + h * vc[1], vc[3], vrow + h * v[1], v[2], Dv);
    }
    // float32 scales move as raw bytes; element strides are scaled to bytes here.
    const std::uint8_t* srow = key_scale + 4 * t * ks[0];
    std::uint8_t* sdst = split.address(scale_cache, 4 * sc[0], 4 * sc[2], slot);
    for (std::int64_t h = 0; h < H; ++h) {
      std::memcpy(sdst + 4 * h * sc[1], srow + 4 * h * ks[1], 4);
    }
  }
}

}  // namespace kvscatter::detail::k_scale::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail::k_scale {

HWY_EXPORT(TokenRange);

void token_range(const TokenJob& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(TokenRange)(job, begin, end);
}

}  // namespace kvscatter::detail::k_scale
#endif  // HWY_ONCE
