// Pins Highway's runtime dispatch to one SIMD target by name (`kvscatter bench
// --simd AVX2`, KVSCATTER_SIMD=SSE4 for the Google Benchmark binaries), so one
// machine measures every target it can run side by side. Names are Highway's
// (AVX3_SPR, AVX3, AVX2, SSE4, SSE2, EMU128, SCALAR ...), matched
// case-insensitively against the targets this build has and this CPU runs.
#pragma once

#include <hwy/targets.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "kvscatter/runtime.h"

namespace kvscatter::cli {

inline std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

// Pins `name`; false (and a message naming the choices) when this build or CPU
// lacks it. Only the library's own targets count: this file's translation unit
// may list more.
inline bool pin_simd_target(const std::string& name) {
  const std::string choices = simd_targets_available();
  std::istringstream lib(choices);
  std::string have;
  while (lib >> have) {
    if (upper(have) != upper(name)) continue;
    for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) {
      if (hwy::TargetName(t) == have) {
        hwy::SetSupportedTargetsForTest(t);
        return true;
      }
    }
  }
  std::fprintf(stderr, "SIMD target %s is not available here; choose one of: %s\n", name.c_str(),
               choices.c_str());
  return false;
}

// KVSCATTER_SIMD from the environment, if set; exits when it names no available
// target.
inline bool pin_simd_target_from_env() {
  const char* name = std::getenv("KVSCATTER_SIMD");
  if (name == nullptr || *name == '\0') return false;
  if (!pin_simd_target(name)) std::exit(2);
  return true;
}

}  // namespace kvscatter::cli
