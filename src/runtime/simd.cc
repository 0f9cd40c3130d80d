// Reports which Highway target the dynamically dispatched kernels run on.
#include <hwy/highway.h>
#include <hwy/targets.h>

#include "kvscatter/runtime.h"
#include "kvscatter/version.h"

namespace kvscatter {

std::string simd_target() {
  // HWY_DYNAMIC_DISPATCH picks the best target that is both compiled and supported.
  const std::vector<std::int64_t> targets = hwy::SupportedAndGeneratedTargets();
  return targets.empty() ? std::string("none") : std::string(hwy::TargetName(targets.front()));
}

std::string simd_targets_available() {
  std::string out;
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (!out.empty()) out += ' ';
    out += hwy::TargetName(t);
  }
  return out;
}

const char* version_string() noexcept { return KVSCATTER_VERSION; }

}  // namespace kvscatter
