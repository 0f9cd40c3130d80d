// SIMD targets for tests that pin Highway's dispatch (hwy::SetSupportedTargetsForTest), so the
// SSE4 and scalar paths of the optimized kernels are checked on a machine that prefers AVX2.
#pragma once

#include <hwy/targets.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "kvscatter/runtime.h"

namespace kvscatter::simd_test {

// Every target the library was compiled for that this CPU can run.
inline std::vector<std::int64_t> simd_targets() {
  std::istringstream lib(simd_targets_available());
  std::vector<std::string> names{std::istream_iterator<std::string>(lib), {}};
  std::vector<std::int64_t> out;
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (std::find(names.begin(), names.end(), hwy::TargetName(t)) != names.end()) out.push_back(t);
  }
  return out;
}

// Pins dispatch to one target for a scope.
class PinTarget {
 public:
  explicit PinTarget(std::int64_t target) { hwy::SetSupportedTargetsForTest(target); }
  ~PinTarget() { hwy::SetSupportedTargetsForTest(0); }
  PinTarget(const PinTarget&) = delete;
  PinTarget& operator=(const PinTarget&) = delete;
};

}  // namespace kvscatter::simd_test
