// SIMD targets for tests that pin Highway's dispatch (hwy::SetSupportedTargetsForTest), so the
// SSE4 and scalar paths of the optimized kernels are checked on a machine that prefers AVX2, and
// the AVX-512 kernels' forms without VBMI (core/vbmi.h) on a CPU that has it.
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "core/vbmi.h"
#include "kvscatter/runtime.h"

namespace kvscatter::simd_test {

// Marks an AVX-512 target with the VBMI forms switched off.
inline constexpr std::int64_t kNoVbmi = std::int64_t{1} << 47;
static_assert((HWY_TARGETS & kNoVbmi) == 0, "kNoVbmi must not be a compiled target's bit");

// Every target the library was compiled for that this CPU can run; on a CPU with VBMI, each
// AVX-512 target a second time with kNoVbmi.
// KVSCATTER_TEST_SKIP_TARGETS (target names, space-separated) leaves targets out that another
// run already covers with the same vector length: the emulated Arm CPUs of
// scripts/test_aarch64.sh share NEON and some SVE lengths, and each would otherwise pin them
// again. The best target (the one dispatch picks unpinned) is never left out.
inline std::vector<std::int64_t> simd_targets() {
  std::istringstream lib(simd_targets_available());
  std::vector<std::string> names{std::istream_iterator<std::string>(lib), {}};
  const char* skip_env = std::getenv("KVSCATTER_TEST_SKIP_TARGETS");
  std::istringstream skip_in(skip_env != nullptr ? skip_env : "");
  const std::vector<std::string> skip{std::istream_iterator<std::string>(skip_in), {}};
  std::vector<std::int64_t> out;
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) {
    const char* name = hwy::TargetName(t);
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    if (!names.empty() && name != names.front() &&
        std::find(skip.begin(), skip.end(), name) != skip.end()) {
      continue;
    }
    out.push_back(t);
#if HWY_ARCH_X86
    if (t <= HWY_AVX3 && detail::vbmi_usable()) out.push_back(t | kNoVbmi);
#endif
  }
  return out;
}

// The target's name for messages.
inline std::string target_name(std::int64_t target) {
  return std::string(hwy::TargetName(target & ~kNoVbmi)) +
         ((target & kNoVbmi) != 0 ? " without VBMI" : "");
}

// Pins dispatch to one target (and whether the VBMI forms may run) for a scope.
class PinTarget {
 public:
  explicit PinTarget(std::int64_t target) {
    hwy::SetSupportedTargetsForTest(target & ~kNoVbmi);
    detail::set_vbmi_allowed((target & kNoVbmi) == 0);
  }
  ~PinTarget() {
    hwy::SetSupportedTargetsForTest(0);
    detail::set_vbmi_allowed(true);
  }
  PinTarget(const PinTarget&) = delete;
  PinTarget& operator=(const PinTarget&) = delete;
};

// Calls f(where) on every target of simd_targets(), pinned, at 1 and at 3 threads (where names
// both, for messages), then restores the default thread count. Stops at the first fatal
// failure, so that a broken target is reported once.
template <class F>
void for_each_target_and_thread_count(F&& f) {
  for (std::int64_t target : simd_targets()) {
    PinTarget pin(target);
    for (int threads : {1, 3}) {
      set_num_threads(threads);
      f(target_name(target) + " threads " + std::to_string(threads));
      if (::testing::Test::HasFatalFailure()) break;
    }
    if (::testing::Test::HasFatalFailure()) break;
  }
  set_num_threads(0);
}

}  // namespace kvscatter::simd_test
