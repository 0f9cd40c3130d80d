// reference::execute(plan) of scatter_pa_kv_cache_with_k_scale, the oracle: a sequential byte
// copy in token order, so a duplicated slot ends up holding the last token's rows.
#include <cstdint>
#include <cstring>

#include "core/index.h"
#include "ops/scatter_pa_kv_cache_with_k_scale/internal.h"

namespace kvscatter::reference {

void execute(const ScatterPaKvCacheWithKScalePlan& p) {
  detail::k_scale::check_bound_data(p);
  const detail::IndexReader slots(p.slot_mapping);
  const auto* key = static_cast<const std::uint8_t*>(p.key.data);
  const auto* value = static_cast<const std::uint8_t*>(p.value.data);
  const auto* key_scale = static_cast<const float*>(p.key_scale.data);
  auto* key_cache = static_cast<std::uint8_t*>(p.key_cache.data);
  auto* value_cache = static_cast<std::uint8_t*>(p.value_cache.data);
  auto* scale_cache = static_cast<float*>(p.key_scale_cache.data);
  const auto& k = p.key.strides;
  const auto& v = p.value.strides;
  const auto& kc = p.key_cache.strides;
  const auto& vc = p.value_cache.strides;
  const auto& ks = p.key_scale.strides;
  const auto& sc = p.key_scale_cache.strides;

  for (std::int64_t t = 0; t < p.num_tokens; ++t) {
    const std::int64_t slot = slots[t];
    if (slot < 0 || slot >= p.num_slots) continue;  // out of range: skipped
    const std::int64_t blk = slot / p.block_size;
    const std::int64_t off = slot % p.block_size;
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      for (std::int64_t i = 0; i < p.key_head_size; ++i) {
        key_cache[blk * kc[0] + h * kc[1] + off * kc[2] + i * kc[3]] =
            key[t * k[0] + h * k[1] + i * k[2]];
      }
      for (std::int64_t i = 0; i < p.value_head_size; ++i) {
        value_cache[blk * vc[0] + h * vc[1] + off * vc[2] + i * vc[3]] =
            value[t * v[0] + h * v[1] + i * v[2]];
      }
      // Raw 32-bit copy: NaN payloads and signalling bits survive.
      std::memcpy(&scale_cache[blk * sc[0] + h * sc[1] + off * sc[2]],
                  &key_scale[t * ks[0] + h * ks[1]], sizeof(float));
    }
  }
}

}  // namespace kvscatter::reference
