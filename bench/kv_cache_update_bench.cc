// kv_cache_update at decode (L = 1, 16) and prefill (L = 2048) sizes on 8 KV heads x 128,
// S = 4096, batch 1. Run: build/release/bench/kv_cache_update_bench
//   counters: bytes_per_second (read + written) and vs_memcpy (memcpy of the same traffic, same
//   run; targets at L = 2048: float32->float32 >= 0.8, float32->bfloat16 >= 0.6).
#include <vector>

#include "bench_util.h"
#include "kvscatter/kv_cache_update.h"
#include "kvscatter/runtime.h"

namespace kvscatter {
namespace {

void BM_KvCacheUpdate(benchmark::State& state, DType cache_dtype) {
  const std::int64_t len = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  constexpr std::int64_t kSeq = 4096, kHeads = 8, kDim = 128;
  set_num_threads(threads);
  const auto esize = static_cast<std::int64_t>(dtype_size(cache_dtype));
  std::vector<std::uint8_t> kc(static_cast<std::size_t>(kSeq * kHeads * kDim * esize), 0);
  std::vector<std::uint8_t> vc = kc;
  std::vector<float> nk(static_cast<std::size_t>(len * kHeads * kDim), 0.5f), nv = nk;
  const KvCacheUpdatePlan plan = plan_kv_cache_update(
      TensorView(kc.data(), cache_dtype, {1, kSeq, kHeads, kDim}),
      TensorView(vc.data(), cache_dtype, {1, kSeq, kHeads, kDim}),
      TensorView(nk.data(), DType::float32, {1, len, kHeads, kDim}),
      TensorView(nv.data(), DType::float32, {1, len, kHeads, kDim}), kSeq - len);
  const std::int64_t traffic = 2 * len * kHeads * kDim * (4 + esize);
  bench::run_against_memcpy(state, traffic, [&] { execute(plan); });
  set_num_threads(0);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int len : {1, 16, 2048}) b->Args({len, threads});
  }
  b->ArgNames({"L", "threads"})->UseRealTime();
}

BENCHMARK_CAPTURE(BM_KvCacheUpdate, f32_to_f32, DType::float32)->Apply(Args);
BENCHMARK_CAPTURE(BM_KvCacheUpdate, f32_to_bf16, DType::bfloat16)->Apply(Args);
BENCHMARK_CAPTURE(BM_KvCacheUpdate, f32_to_f16, DType::float16)->Apply(Args);

}  // namespace
}  // namespace kvscatter

BENCHMARK_MAIN();
