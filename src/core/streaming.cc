// The cache size the streaming decisions of core/streaming.h start from.
#include "core/streaming.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kvscatter::detail {
namespace {

// Cache `index` of CPU 0 as Linux describes it: its level and size, or {0, 0} where it holds
// no data or is not described.
struct Cache {
  int level = 0;
  std::int64_t bytes = 0;
};
Cache sysfs_cache(int index) {
  const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
  auto read = [&](const char* name, char* buf, int n) {
    std::FILE* f = std::fopen((dir + name).c_str(), "r");
    if (f == nullptr) return false;
    const bool ok = std::fgets(buf, n, f) != nullptr;
    std::fclose(f);
    return ok;
  };
  char text[64];
  if (!read("type", text, sizeof text) || std::string(text).rfind("Instruction", 0) == 0) return {};
  Cache c;
  if (!read("level", text, sizeof text)) return {};
  c.level = std::atoi(text);
  if (!read("size", text, sizeof text)) return {};
  char* unit = nullptr;
  c.bytes = std::strtoll(text, &unit, 10);
  if (unit != nullptr && *unit == 'K') c.bytes <<= 10;
  if (unit != nullptr && *unit == 'M') c.bytes <<= 20;
  return c;
}

}  // namespace

std::int64_t detected_cache_bytes() {
  // Linux's figure first: it follows the CPU's own description of which cores share a cache,
  // where the C library's (sysconf) may report every L3 of the package as one.
  Cache last{2, 0};  // the highest level from L2 on
  for (int index = 0; index < 8; ++index) {
    const Cache c = sysfs_cache(index);
    if (c.bytes > 0 && c.level >= last.level) last = c;
  }
  std::int64_t bytes = last.bytes;
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (bytes <= 0) bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (bytes <= 0) bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return std::clamp<std::int64_t>(bytes, 0, kMaxCacheBytes);
}

}  // namespace kvscatter::detail
