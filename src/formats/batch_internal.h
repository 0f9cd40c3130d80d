// Internal hooks of the batch conversions, for tests.
#pragma once

#include <cstdint>

namespace kvscatter::formats::detail {

// The Highway target (HWY_AVX2, HWY_EMU128, ...) the batch conversions dispatch to right now;
// tests pin targets with hwy::SetSupportedTargetsForTest and check this.
std::int64_t batch_dispatch_target() noexcept;

}  // namespace kvscatter::formats::detail
