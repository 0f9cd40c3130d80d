// first_bad_slot (core/slots.h), the slot check of the operators whose only padding is -1: its
// scan compiled once per SIMD target, one pass over every slot of a call before its first write.
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/slot_scan.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/slots.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// s + 1 and num_slots - 1 - s are both at least 0 exactly for s = -1 and s in [0, num_slots)
// (s + 1 wraps only for the largest s, to a negative value): their sign bits or-ed together, a
// vector at a time.
bool SkipOrInRange(const std::int64_t* s, std::int64_t n, std::int64_t num_slots) {
  const hn::ScalableTag<std::int64_t> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1), last = hn::Set(d, num_slots - 1);
  auto signs = hn::Zero(d);
  std::int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto v = hn::LoadU(d, s + i);
    signs = hn::Or(signs, hn::Or(hn::Add(v, one), hn::Sub(last, v)));
  }
  std::uint64_t tail = 0;
  for (; i < n; ++i) {
    const auto v = static_cast<std::uint64_t>(s[i]);
    tail |= (v + 1) | (static_cast<std::uint64_t>(num_slots) - 1 - v);
  }
  return tail >> 63 == 0 && hn::AllFalse(d, hn::Lt(signs, hn::Zero(d)));
}

}  // namespace kvscatter::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail {

HWY_EXPORT(SkipOrInRange);

std::int64_t first_bad_slot(const std::int64_t* slots, std::int64_t n, std::int64_t num_slots) {
  if (HWY_DYNAMIC_DISPATCH(SkipOrInRange)(slots, n, num_slots)) return -1;
  for (std::int64_t i = 0; i < n; ++i) {
    if (slots[i] != -1 && (slots[i] < 0 || slots[i] >= num_slots)) return i;
  }
  return -1;  // not reached: the scan found one
}

}  // namespace kvscatter::detail
#endif  // HWY_ONCE
