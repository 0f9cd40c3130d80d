// The cache size the streaming decisions of core/streaming.h start from.
#include "core/streaming.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kvscatter::detail {
namespace {

// The size of cache `index` of CPU 0 as Linux describes it, if it holds data and sits at
// `level` or above; 0 otherwise.
std::int64_t sysfs_cache_bytes(int index, int& level) {
  const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
  auto read = [&](const char* name, char* buf, int n) {
    std::FILE* f = std::fopen((dir + name).c_str(), "r");
    if (f == nullptr) return false;
    const bool ok = std::fgets(buf, n, f) != nullptr;
    std::fclose(f);
    return ok;
  };
  char text[64];
  if (!read("type", text, sizeof text) || std::string(text).rfind("Instruction", 0) == 0) return 0;
  if (!read("level", text, sizeof text)) return 0;
  const int this_level = std::atoi(text);
  if (this_level < level || !read("size", text, sizeof text)) return 0;
  char* unit = nullptr;
  std::int64_t bytes = std::strtoll(text, &unit, 10);
  if (unit != nullptr && *unit == 'K') bytes <<= 10;
  if (unit != nullptr && *unit == 'M') bytes <<= 20;
  level = this_level;
  return bytes;
}

}  // namespace

std::int64_t detected_cache_bytes() {
  // Linux's figure first: it follows the CPU's own description of which cores share a cache,
  // where the C library's (sysconf) may report every L3 of the package as one.
  std::int64_t bytes = 0;
  int level = 2;
  for (int index = 0; index < 8; ++index) {
    const std::int64_t b = sysfs_cache_bytes(index, level);
    if (b > 0) bytes = b;
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (bytes <= 0) bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (bytes <= 0) bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return std::clamp<std::int64_t>(bytes, 0, kMaxCacheBytes);
}

}  // namespace kvscatter::detail
