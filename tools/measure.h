// Timing helpers for the demo and bench commands: a monotonic clock, the median time of a
// callable, the memcpy baseline that every figure is compared against, and the alternating
// operator-vs-memcpy measurement the bench tables are built from.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/parallel.h"
#include "workload.h"

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
// multiple of 4 KiB plus a few bytes, which two separate allocations can hit by accident. Both
// are 64-byte aligned, as the operators' tensors are (workload.h).
struct MemcpyBaseline {
  std::size_t n, gap;
  TensorVector<std::uint8_t> buf;
  explicit MemcpyBaseline(std::size_t traffic)
      : n(std::max<std::size_t>(traffic / 2, 1)),
        gap((n + 4095) / 4096 * 4096 + 1024),
        buf(gap + n, 1) {}
  void copy() { std::memcpy(buf.data() + gap, buf.data(), n); }
  // The same copy split into 256 KiB chunks over the library's thread pool: the roofline for
  // an operator running on get_num_threads() threads (one thread: plain memcpy).
  void copy_parallel() {
    constexpr std::int64_t kChunk = 256 * 1024;
    const auto total = static_cast<std::int64_t>(n);
    detail::parallel_for((total + kChunk - 1) / kChunk, 1, [&](std::int64_t b, std::int64_t e) {
      const std::int64_t lo = b * kChunk, hi = std::min(total, e * kChunk);
      std::memcpy(buf.data() + gap + lo, buf.data() + lo, static_cast<std::size_t>(hi - lo));
    });
  }
  double seconds(int reps = 7, int inner = 1) {
    return time_per_call([&] { copy(); }, reps, inner);
  }
};

// The core clock while busy, in GHz, from a chain of dependent integer additions (one per
// cycle on every x86-64 and Arm core this library targets): turns seconds into cycles per
// element for the quantizer tables. Best of five 5 ms runs, so a preemption only lowers one.
// The addend is a register: recent Intel cores fold additions of an immediate while renaming,
// which ran such a chain at five a cycle.
inline double estimate_clock_ghz() {
  constexpr int kAdds = 1 << 22;
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    std::uint64_t x = static_cast<std::uint64_t>(r), one = 1;
    const double t0 = now_seconds();
    for (int i = 0; i < kAdds; i += 8) {
#if defined(__x86_64__)
#define KVS_ADD asm volatile("add %1, %0" : "+r"(x) : "r"(one))
#elif defined(__aarch64__)
#define KVS_ADD asm volatile("add %0, %0, %1" : "+r"(x) : "r"(one))
#else
#define KVS_ADD x = x * 3 + one
#endif
      KVS_ADD; KVS_ADD; KVS_ADD; KVS_ADD; KVS_ADD; KVS_ADD; KVS_ADD; KVS_ADD;  // NOLINT
#undef KVS_ADD
    }
    best = std::min(best, now_seconds() - t0);
    if (x == 0) best += 1;  // keeps x alive for the portable fallback
  }
  return kAdds / best / 1e9;
}

// Picks an inner repetition count that makes one timed batch last about `target` seconds.
template <class F>
int calibrate(F&& fn, double target = 0.02) {
  fn();
  const double t0 = now_seconds();
  fn();
  const double dt = std::max(now_seconds() - t0, 1e-7);
  return static_cast<int>(std::clamp(target / dt, 1.0, 100000.0));
}

// Seconds per call of an operator and of its baseline, both from the same run.
struct Timing {
  double op_best, op_median, base_best, base_median;
};

// Times `op` and `base` in alternating batches (each sized to last about `batch_s`), so that on
// a shared machine both see the same background load; keeps the fastest and the median batch
// of each. One preemption inside a batch then moves the median, rarely the best.
template <class F, class G>
Timing time_alternating(F&& op, G&& base, int reps, double batch_s = 0.01) {
  const int op_inner = calibrate(op, batch_s), base_inner = calibrate(base, batch_s);
  std::vector<double> op_t, base_t;
  for (int r = 0; r < reps; ++r) {
    double t0 = now_seconds();
    for (int i = 0; i < op_inner; ++i) op();
    op_t.push_back((now_seconds() - t0) / op_inner);
    t0 = now_seconds();
    for (int i = 0; i < base_inner; ++i) base();
    base_t.push_back((now_seconds() - t0) / base_inner);
  }
  std::sort(op_t.begin(), op_t.end());
  std::sort(base_t.begin(), base_t.end());
  return {op_t.front(), op_t[op_t.size() / 2], base_t.front(), base_t[base_t.size() / 2]};
}

// An operator against memcpy of the same traffic (bytes read plus written; memcpy of half of
// it moves as much), the copy spread over as many threads as the operator may use.
template <class F>
Timing time_against_memcpy(F&& op, std::int64_t traffic, int reps, double batch_s = 0.01) {
  MemcpyBaseline base(static_cast<std::size_t>(traffic));
  return time_alternating(op, [&] { base.copy_parallel(); }, reps, batch_s);
}

}  // namespace kvscatter::cli
