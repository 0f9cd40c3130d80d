// Element types understood by kvscatter, with their canonical lower-case names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "kvscatter/export.h"

namespace kvscatter {

enum class DType : std::uint8_t {
  float32,
  float16,
  bfloat16,
  int8,
  uint8,
  int16,
  uint16,
  int32,
  uint32,
  int64,
  hifloat8,
  float8_e5m2,
  float8_e4m3fn,
  float8_e8m0,
  float4_e2m1,
  float4_e1m2,
};

inline constexpr int kNumDTypes = 16;

// Canonical name, e.g. "bfloat16".
KVSCATTER_API std::string_view dtype_name(DType dtype) noexcept;
// Parses a canonical name; nullopt when unknown.
KVSCATTER_API std::optional<DType> dtype_from_name(std::string_view name) noexcept;
// Bits per element: 4 for float4_e2m1 and float4_e1m2 (two elements packed per byte, even
// element in the low nibble), otherwise 8 * dtype_size.
KVSCATTER_API int dtype_bits(DType dtype) noexcept;
// Bytes per element; 1 for the float4 types, whose views count elements packed two to a byte
// (shape and strides in elements, as aclnn's; the operators take them to bytes).
KVSCATTER_API std::size_t dtype_size(DType dtype) noexcept;
KVSCATTER_API bool dtype_is_floating(DType dtype) noexcept;

}  // namespace kvscatter
