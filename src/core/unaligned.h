// Typed loads and stores at any byte address (through memcpy, so never a misaligned typed
// access); the compiler turns each into one move.
#pragma once

#include <cstdint>
#include <cstring>

#include "kvscatter/dtype.h"
#include "kvscatter/formats.h"

namespace kvscatter::detail {

template <class T>
T load_as(const unsigned char* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
void store_as(unsigned char* p, T v) noexcept {
  std::memcpy(p, &v, sizeof(T));
}

// A float32, float16 or bfloat16 element at any byte address, widened to float.
inline float load_float(const unsigned char* p, DType dtype) noexcept {
  return formats::decode(
      dtype, dtype == DType::float32 ? load_as<std::uint32_t>(p) : load_as<std::uint16_t>(p));
}

}  // namespace kvscatter::detail
