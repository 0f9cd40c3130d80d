// Pieces of PagedLatentWrite shared by plan.cc, reference.cc and execute.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "core/overlap.h"
#include "kvscatter/paged_latent_write.h"

namespace kvscatter::detail::paged_latent_write {

// The fp8_ds_mla entry: 512 codes in 4 tiles of 128, then 4 float32 tile scales, then the 64
// 16-bit k_pe values.
inline constexpr std::int64_t kDsLatent = 512, kDsPe = 64, kDsTile = 128;
inline constexpr std::int64_t kDsScaleOffset = 512, kDsPeOffset = 528, kDsEntryBytes = 656;

struct CheckedData {
  std::vector<std::int64_t> slots;
  float scale = 1.0f;
};

void check_bound_data(const PagedLatentWritePlan& plan);

// Every slot checked before any write; the scale read.
void check_data(const PagedLatentWritePlan& plan, CheckedData& out);

// The operands of a call, outputs first (see core/overlap.h); P is the plan, const or not.
template <class P>
[[gnu::always_inline]] inline Operands operands(P& p) {
  return Operands{{{{&p.kv_cache, "kv_cache"}}},
                  {{{&p.kv_c, "kv_c"},
                    {&p.k_pe, "k_pe"},
                    {&p.slot_mapping, "slot_mapping"},
                    {opt(p.scale), "scale"}}}};
}

}  // namespace kvscatter::detail::paged_latent_write
