#include "core/vbmi.h"

#include <atomic>

namespace kvscatter::detail {
namespace {
std::atomic<bool> g_vbmi_allowed{true};

bool cpu_has_vbmi() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx512vbmi");
  return has;
#else
  return false;
#endif
}
}  // namespace

void set_vbmi_allowed(bool allowed) { g_vbmi_allowed.store(allowed); }

bool vbmi_usable() { return cpu_has_vbmi() && g_vbmi_allowed.load(std::memory_order_relaxed); }

}  // namespace kvscatter::detail
