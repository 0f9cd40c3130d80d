// When the optimized kernels switch to non-temporal stores: calls writing at least this many
// bytes (about a quarter of a server's last-level cache) would not leave their rows cached for
// the next reader anyway, and streaming skips the read-for-ownership of every line they fill.
// Kernels whose streamed rows are short runs scattered over the cache also weigh the call's
// footprint against the last-level cache detected here.
#pragma once

#include <atomic>
#include <cstdint>

namespace kvscatter::detail {

inline std::atomic<std::int64_t>& stream_threshold_bytes() {
  static std::atomic<std::int64_t> bytes{std::int64_t{8} << 20};
  return bytes;
}

inline bool use_streaming_stores(std::int64_t bytes_written) {
  return bytes_written >= stream_threshold_bytes().load(std::memory_order_relaxed);
}

// Returns the previous threshold. Tests lower it to exercise the streaming paths on small caches.
inline std::int64_t set_stream_threshold(std::int64_t bytes) {
  return stream_threshold_bytes().exchange(bytes, std::memory_order_relaxed);
}

// A last-level cache larger than this counts as this much: beyond the 8-32 MiB of one AMD core
// complex, a large L3 is one that many cores share, and other work holds most of it.
inline constexpr std::int64_t kMaxCacheBytes = std::int64_t{32} << 20;

// The last-level data cache of CPU 0 (Linux's description, else the C library's), at most
// kMaxCacheBytes; 0 where neither knows.
std::int64_t detected_cache_bytes();

// The cache that decisions depending on whether a call's data stays cached start from: the
// detected one, read once; tests set it (0: no call fits).
inline std::atomic<std::int64_t>& cache_bytes() {
  static std::atomic<std::int64_t> bytes{detected_cache_bytes()};
  return bytes;
}

// Returns the previous size.
inline std::int64_t set_cache_bytes(std::int64_t bytes) {
  return cache_bytes().exchange(bytes, std::memory_order_relaxed);
}

}  // namespace kvscatter::detail
