// gather_pa_kv_cache (Norm, bfloat16, 8 heads x 128), scatter_pa_cache (plain, bfloat16, 8 x 128)
// and indexer_quant_cache (fp8 and mxfp8, bfloat16 d = 128 into float8_e4m3fn) at 1, 64 and 4096
// tokens; indexer_quant_cache mxfp4 (into float4_e2m1) at 64-4096 tokens.
// Run: build/release/bench/cann_family_bench
//   counters: bytes_per_second (read + written) and vs_memcpy (memcpy of the same traffic, same
//   run; targets at 4096 tokens, 1 thread: gather >= 0.8, scatter_pa_cache as scatter_pa_kv_cache,
//   indexer fp8 and mxfp8 >= 0.3).
#include <numeric>
#include <random>
#include <vector>

#include "bench_util.h"
#include "kvscatter/formats.h"
#include "kvscatter/gather_pa_kv_cache.h"
#include "kvscatter/indexer_quant_cache.h"
#include "kvscatter/runtime.h"
#include "kvscatter/scatter_pa_cache.h"

namespace kvscatter {
namespace {

constexpr std::int64_t kHeads = 8, kDim = 128, kBlock = 128;

std::int64_t blocks_for(std::int64_t tokens) {
  return std::max<std::int64_t>(64, (tokens + kBlock - 1) / kBlock + 1);
}

// Shuffled blocks, consecutive tokens sharing a block.
std::vector<std::int64_t> shuffled_blocks(std::int64_t nb) {
  std::vector<std::int64_t> blocks(static_cast<std::size_t>(nb));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(42));
  return blocks;
}

void BM_Gather(benchmark::State& state) {
  const std::int64_t tokens = state.range(0), nb = blocks_for(tokens), row = kHeads * kDim;
  set_num_threads(static_cast<int>(state.range(1)));
  std::vector<std::uint16_t> kc(static_cast<std::size_t>(nb * kBlock * row), 0x3F80), vc = kc;
  std::vector<std::uint16_t> key(static_cast<std::size_t>(tokens * row)), value = key;
  const std::vector<std::int64_t> blocks = shuffled_blocks(nb);
  const std::int64_t width = (tokens + kBlock - 1) / kBlock;
  std::vector<std::int64_t> table(blocks.begin(), blocks.begin() + width), lens{tokens};
  const GatherPaKvCachePlan plan =
      plan_gather_pa_kv_cache(TensorView(kc.data(), DType::bfloat16, {nb, kBlock, kHeads, kDim}),
                              TensorView(vc.data(), DType::bfloat16, {nb, kBlock, kHeads, kDim}),
                              TensorView(table.data(), DType::int64, {1, width}),
                              TensorView(lens.data(), DType::int64, {1}),
                              TensorView(key.data(), DType::bfloat16, {tokens, kHeads, kDim}),
                              TensorView(value.data(), DType::bfloat16, {tokens, kHeads, kDim}));
  bench::run_against_memcpy(state, 2 * 2 * tokens * row * 2, [&] { execute(plan); });
  set_num_threads(0);
}

void BM_ScatterPaCache(benchmark::State& state) {
  const std::int64_t tokens = state.range(0), nb = blocks_for(tokens), row = kHeads * kDim;
  set_num_threads(static_cast<int>(state.range(1)));
  std::vector<std::uint16_t> key(static_cast<std::size_t>(tokens * row), 0x3F80);
  std::vector<std::uint16_t> cache(static_cast<std::size_t>(nb * kBlock * row));
  const std::vector<std::int64_t> blocks = shuffled_blocks(nb);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) {
    slots[static_cast<std::size_t>(t)] =
        blocks[static_cast<std::size_t>(t / kBlock)] * kBlock + t % kBlock;
  }
  const ScatterPaCachePlan plan =
      plan_scatter_pa_cache(TensorView(key.data(), DType::bfloat16, {tokens, kHeads, kDim}),
                            TensorView(cache.data(), DType::bfloat16, {nb, kBlock, kHeads, kDim}),
                            TensorView(slots.data(), DType::int64, {tokens}));
  bench::run_against_memcpy(state, 2 * tokens * row * 2 + 8 * tokens, [&] { execute(plan); });
  set_num_threads(0);
}

void BM_Indexer(benchmark::State& state, IndexerQuantMode mode) {
  const std::int64_t tokens = state.range(0), nb = blocks_for(tokens), d = kDim;
  set_num_threads(static_cast<int>(state.range(1)));
  const bool fp4 = mode == IndexerQuantMode::mxfp4;
  const bool mx = mode == IndexerQuantMode::mxfp8 || fp4;
  const std::int64_t row = fp4 ? d / 2 : d;  // code bytes per row
  std::vector<std::uint16_t> x(static_cast<std::size_t>(tokens * d));
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (auto& v : x) v = formats::encode_bfloat16(nd(rng));
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(nb * kBlock * row));
  std::vector<std::uint8_t> scale(static_cast<std::size_t>(nb * kBlock * (mx ? d / 32 : 4)));
  std::vector<std::int64_t> slots(static_cast<std::size_t>(tokens));
  std::iota(slots.begin(), slots.end(), 0);
  IndexerQuantCacheOptions opt;
  opt.quant_mode = mode;
  const IndexerQuantCachePlan plan = plan_indexer_quant_cache(
      TensorView(cache.data(), fp4 ? DType::float4_e2m1 : DType::float8_e4m3fn,
                 {nb, kBlock, 1, d}),  // FP4: elements, not bytes
      mx ? TensorView(scale.data(), DType::float8_e8m0, {nb, kBlock, 1, d / 32})
         : TensorView(scale.data(), DType::float32, {nb, kBlock, 1, 1}),
      TensorView(x.data(), DType::bfloat16, {tokens, d}),
      TensorView(slots.data(), DType::int64, {tokens}), opt);
  const std::int64_t traffic = tokens * (2 * d + row + (mx ? d / 32 : 4) + 8);
  bench::run_against_memcpy(state, traffic, [&] { execute(plan); });
  set_num_threads(0);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int tokens : {1, 64, 4096}) b->Args({tokens, threads});
  }
  b->ArgNames({"tokens", "threads"})->UseRealTime();
}

BENCHMARK(BM_Gather)->Apply(Args);
BENCHMARK(BM_ScatterPaCache)->Apply(Args);
BENCHMARK_CAPTURE(BM_Indexer, fp8, IndexerQuantMode::fp8)->Apply(Args);
BENCHMARK_CAPTURE(BM_Indexer, mxfp8, IndexerQuantMode::mxfp8)->Apply(Args);
// mxfp4, one thread, from rows that fit in L1 between calls (64 tokens: 16 KiB of input) to rows
// read from L2.
BENCHMARK_CAPTURE(BM_Indexer, mxfp4, IndexerQuantMode::mxfp4)
    ->ArgNames({"tokens", "threads"})
    ->Args({64, 1})
    ->Args({128, 1})
    ->Args({256, 1})
    ->Args({1024, 1})
    ->Args({4096, 1})
    ->UseRealTime();

}  // namespace
}  // namespace kvscatter

BENCHMARK_MAIN();
