// Shared by the Google Benchmark targets: runs the benchmark loop, then memcpy of the same
// traffic for as many iterations, and reports bytes/s plus the ratio to memcpy measured in the
// same run (the figure the project's targets are stated in).
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kvscatter::bench {

// `traffic` counts bytes read plus bytes written per call (FlashInfer's convention); memcpy of
// traffic / 2 bytes moves the same traffic.
template <class F>
void run_against_memcpy(benchmark::State& state, std::int64_t traffic, F&& op) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  for (auto _ : state) {
    op();
    benchmark::ClobberMemory();
  }
  const double op_s = std::chrono::duration<double>(clock::now() - t0).count();
  std::vector<std::uint8_t> src(static_cast<std::size_t>(traffic / 2) + 1, 1);
  std::vector<std::uint8_t> dst(src.size());
  std::memcpy(dst.data(), src.data(), src.size());
  const auto t1 = clock::now();
  for (benchmark::IterationCount i = 0; i < state.iterations(); ++i) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
  }
  const double mem_s = std::chrono::duration<double>(clock::now() - t1).count();
  state.SetBytesProcessed(state.iterations() * traffic);
  state.counters["vs_memcpy"] = op_s > 0 ? mem_s / op_s : 0;
  state.counters["memcpy_us"] =
      mem_s / static_cast<double>(state.iterations()) * 1e6;
}

}  // namespace kvscatter::bench
