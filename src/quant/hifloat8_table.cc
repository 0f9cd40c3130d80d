// The HiFloat8 lookup table, filled from the scalar encoder so both share one definition.
#include "quant/hifloat8_table.h"

#include <array>
#include <bit>

#include "kvscatter/formats.h"

namespace kvscatter::detail {

const std::uint8_t* hifloat8_sat_table() noexcept {
  static const std::array<std::uint8_t, 8192> table = [] {
    std::array<std::uint8_t, 8192> t{};
    for (std::uint32_t k = 0; k < t.size(); ++k) {
      t[k] = formats::encode_hifloat8(std::bit_cast<float>(k << kHiFloat8TableShift), true);
    }
    return t;
  }();
  return table.data();
}

}  // namespace kvscatter::detail
