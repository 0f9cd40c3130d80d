// Typed loads and stores at any byte address (through memcpy, so never a misaligned typed
// access); the compiler turns each into one move.
#pragma once

#include <cstring>

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

}  // namespace kvscatter::detail
