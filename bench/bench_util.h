// Shared by the Google Benchmark targets: runs the benchmark loop, then alternates batches of
// the operator and of memcpy of the same traffic, and reports bytes/s plus the ratio to memcpy
// measured in the same run (the figure the project's targets are stated in).
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "simd_pin.h"

namespace kvscatter::bench {

// KVSCATTER_SIMD=AVX2 (or any target `kvscatter info` lists) pins every benchmark of the binary.
inline const bool kSimdPinned = cli::pin_simd_target_from_env();

// `traffic` counts bytes read plus bytes written per call (FlashInfer's convention); memcpy of
// traffic / 2 bytes moves the same traffic.
template <class F>
void run_against_memcpy(benchmark::State& state, std::int64_t traffic, F&& op) {
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    op();
    benchmark::ClobberMemory();
  }
  // One buffer, destination 1 KiB past a page boundary from the source: glibc's `rep movsb`
  // path slows down by 100x on some CPUs when dst - src is a small multiple of 4 KiB plus a few
  // bytes, which two back-to-back vectors can hit by accident.
  const auto n = static_cast<std::size_t>(traffic / 2) + 1;
  const std::size_t gap = (n + 4095) / 4096 * 4096 + 1024;
  std::vector<std::uint8_t> buf(gap + n, 1);
  std::uint8_t* src = buf.data();
  std::uint8_t* dst = buf.data() + gap;
  auto copy = [&] {
    std::memcpy(dst, src, n);
    benchmark::ClobberMemory();
  };
  copy();
  // The ratio comes from alternating batches of the operator and memcpy, keeping the fastest
  // batch of each: on a shared machine one preemption inside a short timed loop would
  // otherwise decide the figure.
  const auto batch = std::max<benchmark::IterationCount>(1, state.iterations() / 8);
  double best_op = 1e30, best_mem = 1e30;
  for (int round = 0; round < 8; ++round) {
    auto t = clock::now();
    for (benchmark::IterationCount i = 0; i < batch; ++i) {
      op();
      benchmark::ClobberMemory();
    }
    best_op = std::min(best_op, std::chrono::duration<double>(clock::now() - t).count());
    t = clock::now();
    for (benchmark::IterationCount i = 0; i < batch; ++i) copy();
    best_mem = std::min(best_mem, std::chrono::duration<double>(clock::now() - t).count());
  }
  state.SetBytesProcessed(state.iterations() * traffic);
  state.counters["vs_memcpy"] = best_mem / best_op;
  state.counters["memcpy_us"] = best_mem / static_cast<double>(batch) * 1e6;
}

}  // namespace kvscatter::bench
