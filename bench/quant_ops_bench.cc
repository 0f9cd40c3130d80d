// KvCompressEpilog and ScatterPaKvCacheWithKScale against memcpy of the same traffic (bytes read
// plus bytes written per call; memcpy of half that many bytes moves the same traffic), measured
// in the same run. Run: build/release/bench/quant_ops_bench --benchmark_repetitions=5
//   --benchmark_report_aggregates_only=true
// Targets: kv_compress_epilog fp8_e8m0, d = 576, 16,384 tokens: vs_memcpy >= 0.5;
//          scatter_pa_kv_cache_with_k_scale, 8,192 tokens: vs_memcpy >= 0.8.
#include <random>
#include <vector>

#include "bench_util.h"
#include "kvscatter/formats.h"
#include "kvscatter/kv_compress_epilog.h"
#include "kvscatter/runtime.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"
#include "workload.h"

namespace kvscatter {
namespace {

using cli::paged_slots;

void BM_KvCompressEpilog(benchmark::State& state, QuantMode mode, bool round_scale,
                         std::int64_t gs) {
  const std::int64_t tokens = state.range(0), d = state.range(1);
  set_num_threads(static_cast<int>(state.range(2)));
  constexpr std::int64_t kBlock = 128;
  const std::int64_t blocks = (tokens + kBlock - 1) / kBlock;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(tokens * d));
  for (auto& v : x) v = formats::encode_bfloat16(nd(rng));
  std::vector<std::int64_t> slots = paged_slots(tokens, kBlock, blocks);
  TensorView tx(x.data(), DType::bfloat16, {tokens, d});
  TensorView ts(slots.data(), DType::int64, {tokens});
  // Ask a plan for the row size, then size the cache rows exactly.
  const std::int64_t row =
      plan_kv_compress_epilog(TensorView(nullptr, DType::uint8, {0, kBlock, 1, 1 << 14}), tx, ts,
                              gs, mode, round_scale, 1.0f)
          .row_bytes;
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(blocks * kBlock * row), 0);
  const KvCompressEpilogPlan plan =
      plan_kv_compress_epilog(TensorView(cache.data(), DType::uint8, {blocks, kBlock, 1, row}), tx,
                              ts, gs, mode, round_scale, 1.0f);
  const std::int64_t traffic = tokens * (2 * d + 8 + row);
  bench::run_against_memcpy(state, traffic, [&] { execute(plan); });
  state.counters["row_bytes"] = static_cast<double>(row);
  set_num_threads(0);
}

void BM_ScatterPaKvCacheWithKScale(benchmark::State& state) {
  const std::int64_t tokens = state.range(0);
  set_num_threads(static_cast<int>(state.range(1)));
  constexpr std::int64_t kHeads = 8, kDim = 128, kBlock = 128;
  const std::int64_t blocks = (tokens + kBlock - 1) / kBlock;
  std::vector<std::uint8_t> key(static_cast<std::size_t>(tokens * kHeads * kDim), 0x38);
  std::vector<std::uint8_t> value = key;
  std::vector<float> key_scale(static_cast<std::size_t>(tokens * kHeads), 0.5f);
  std::vector<std::uint8_t> key_cache(static_cast<std::size_t>(blocks * kHeads * kBlock * kDim));
  std::vector<std::uint8_t> value_cache = key_cache;
  std::vector<float> scale_cache(static_cast<std::size_t>(blocks * kHeads * kBlock));
  std::vector<std::int64_t> slots = paged_slots(tokens, kBlock, blocks);
  const DType dt = DType::float8_e4m3fn;
  const auto plan = plan_scatter_pa_kv_cache_with_k_scale(
      TensorView(key.data(), dt, {tokens, kHeads, kDim}),
      TensorView(value.data(), dt, {tokens, kHeads, kDim}),
      TensorView(key_cache.data(), dt, {blocks, kHeads, kBlock, kDim}),
      TensorView(value_cache.data(), dt, {blocks, kHeads, kBlock, kDim}),
      TensorView(slots.data(), DType::int64, {tokens}),
      TensorView(key_scale.data(), DType::float32, {tokens, kHeads}),
      TensorView(scale_cache.data(), DType::float32, {blocks, kHeads, kBlock, 1}));
  // read: key, value, scales, slot; written: the same K/V bytes and scales.
  const std::int64_t traffic = tokens * (2 * (2 * kHeads * kDim + 4 * kHeads) + 8);
  bench::run_against_memcpy(state, traffic, [&] { execute(plan); });
  set_num_threads(0);
}

void EpilogArgs(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int tokens : {1, 64, 16384}) b->Args({tokens, 576, threads});
    b->Args({16384, 128, threads});
  }
  b->ArgNames({"tokens", "d", "threads"})->UseRealTime();
}

void ScatterArgs(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int tokens : {1, 64, 8192}) b->Args({tokens, threads});
  }
  b->ArgNames({"tokens", "threads"})->UseRealTime();
}

BENCHMARK_CAPTURE(BM_KvCompressEpilog, fp8_bf16, QuantMode::fp8_bf16, true, 64)->Apply(EpilogArgs);
BENCHMARK_CAPTURE(BM_KvCompressEpilog, fp8_e8m0, QuantMode::fp8_e8m0, true, 64)->Apply(EpilogArgs);
BENCHMARK_CAPTURE(BM_KvCompressEpilog, fp8_e8m0_noround, QuantMode::fp8_e8m0, false, 64)
    ->Apply(EpilogArgs);
BENCHMARK_CAPTURE(BM_KvCompressEpilog, hifloat8_fp4_g16, QuantMode::hifloat8_fp4, true, 16)
    ->Apply(EpilogArgs);
BENCHMARK_CAPTURE(BM_KvCompressEpilog, hifloat8_fp4_g64, QuantMode::hifloat8_fp4, true, 64)
    ->Apply(EpilogArgs);
BENCHMARK(BM_ScatterPaKvCacheWithKScale)->Apply(ScatterArgs);

}  // namespace
}  // namespace kvscatter

BENCHMARK_MAIN();
