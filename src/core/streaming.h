// When the optimized kernels switch to non-temporal stores: calls writing at least this many
// bytes (about a quarter of a server's last-level cache) would not leave their rows cached for
// the next reader anyway, and streaming skips the read-for-ownership of every line they fill.
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

}  // namespace kvscatter::detail
