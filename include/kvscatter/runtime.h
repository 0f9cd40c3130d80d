// Process-wide runtime settings: worker threads and the dispatched SIMD target.
#pragma once

#include <string>

#include "kvscatter/export.h"

namespace kvscatter {

// Worker threads used by the CPU kernels. The default is the environment variable
// KVSCATTER_NUM_THREADS when set, else the cores available to the process.
// n <= 0 restores that default. Results never depend on the thread count.
KVSCATTER_API void set_num_threads(int n);
KVSCATTER_API int get_num_threads();

// Name of the SIMD target the dispatched kernels run on, e.g. "AVX2".
KVSCATTER_API std::string simd_target();
// Every target compiled into this build that the CPU supports, best first.
KVSCATTER_API std::string simd_targets_available();

KVSCATTER_API const char* version_string() noexcept;

}  // namespace kvscatter
