// Timing helpers for the demo and bench commands: a monotonic clock, the best-of-N time of a
// callable, and the memcpy baseline that every figure is compared against.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kvscatter::cli {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Median seconds per call of fn over `reps` timed batches of `inner` calls each.
template <class F>
double time_per_call(F&& fn, int reps = 7, int inner = 1) {
  fn();  // warm up caches and the thread pool
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_seconds();
    for (int i = 0; i < inner; ++i) fn();
    t.push_back((now_seconds() - t0) / inner);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Seconds per memcpy that moves `traffic` bytes (reads plus writes, so traffic / 2 copied),
// over buffers of that size, the same way the operators are timed.
// Source and destination share one buffer, the destination 1 KiB past a page boundary from the
// source: glibc's `rep movsb` path slows down by 100x on some CPUs when dst - src is a small
// multiple of 4 KiB plus a few bytes, which two separate allocations can hit by accident.
struct MemcpyBaseline {
  std::size_t n, gap;
  std::vector<std::uint8_t> buf;
  explicit MemcpyBaseline(std::size_t traffic)
      : n(std::max<std::size_t>(traffic / 2, 1)),
        gap((n + 4095) / 4096 * 4096 + 1024),
        buf(gap + n, 1) {}
  void copy() { std::memcpy(buf.data() + gap, buf.data(), n); }
  double seconds(int reps = 7, int inner = 1) {
    return time_per_call([&] { copy(); }, reps, inner);
  }
};

// Picks an inner repetition count that makes one timed batch last about `target` seconds.
template <class F>
int calibrate(F&& fn, double target = 0.02) {
  fn();
  const double t0 = now_seconds();
  fn();
  const double dt = std::max(now_seconds() - t0, 1e-7);
  return static_cast<int>(std::clamp(target / dt, 1.0, 100000.0));
}

}  // namespace kvscatter::cli
