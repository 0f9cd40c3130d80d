// kvscatter.h compiled as C++: the declarations are extern "C" and noexcept.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "kvscatter/kvscatter.h"

static_assert(std::is_same_v<kvsStatus, std::int32_t>);
static_assert(noexcept(kvsGetLastErrorMessage()));
static_assert(noexcept(kvsCreateTensor(nullptr, KVS_FLOAT32, 0, nullptr, nullptr, nullptr)));

int main() {
  kvsTensor* tensor = nullptr;
  const std::int64_t shape[2] = {2, 3};
  float data[6] = {};
  int failures = 0;
  if (kvsCreateTensor(data, KVS_FLOAT32, 2, shape, nullptr, &tensor) != KVS_SUCCESS) ++failures;
  if (kvsDestroyTensor(tensor) != KVS_SUCCESS) ++failures;
  if (kvsCreateTensor(data, KVS_FLOAT32, 2, nullptr, nullptr, &tensor) != KVS_ERROR_NULL_POINTER) {
    ++failures;
  }
  if (std::strstr(kvsGetLastErrorMessage(), "shape is NULL") == nullptr) ++failures;
  std::printf("%d passed, %d failed\n", failures == 0 ? 1 : 0, failures == 0 ? 0 : 1);
  return failures == 0 ? 0 : 1;
}
