// ScatterPaKvCache throughput against memcpy of the same bytes, on 8 KV heads x 128 bfloat16
// keys and values (block size 128).
//
// Each iteration times one scatter call and, right after, memcpy of the same key and value
// bytes into separate buffers, so both see the same machine state; the counters report
//   GB/s        bytes read + written of the K/V elements per second (FlashInfer's convention)
//   memcpy_us   the memcpy time per call, us
//   vs_memcpy   memcpy time / scatter time (1.0 = as fast as memcpy)
//   bound_ok    1 if scatter time <= 2 x memcpy time + 2 us (the small-batch target)
// BM_Memcpy runs the baseline alone. Run with --benchmark_repetitions=N and read the medians.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kvscatter/scatter_pa_kv_cache.h"
#include "workload.h"

namespace {

using namespace kvscatter;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kHeads = 8, kHead = 128, kBlock = 128;

struct Setup {
  std::int64_t tokens, blocks;
  std::vector<std::uint16_t> key, value;
  cli::TensorVector<std::uint16_t> key_cache, value_cache;
  std::vector<std::int64_t> slots;
  std::vector<unsigned char> copy_k, copy_v;  // memcpy destinations

  Setup(std::int64_t t, bool nz) : tokens(t) {
    // A cache of at least 8,192 slots; prefill-sized batches fill shuffled blocks in order
    // (an engine's block table), decode-sized ones scatter to random slots.
    const std::int64_t row = kHeads * kHead;
    blocks = std::max<std::int64_t>(64, (t + kBlock - 1) / kBlock);
    key.resize(static_cast<std::size_t>(t * row));
    value.resize(key.size());
    std::mt19937 rng(42);
    for (auto& x : key) x = static_cast<std::uint16_t>(rng());
    for (auto& x : value) x = static_cast<std::uint16_t>(rng());
    // Stored as NumPy stores large arrays (huge pages advised; see tools/workload.h).
    key_cache.assign(static_cast<std::size_t>(blocks * kBlock * row), 0);
    value_cache.assign(key_cache.size(), 0);
    std::vector<std::int64_t> order(static_cast<std::size_t>(blocks));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    slots.resize(static_cast<std::size_t>(t));
    if (t >= 1024) {
      for (std::int64_t i = 0; i < t; ++i) slots[i] = order[i / kBlock] * kBlock + i % kBlock;
    } else {
      std::vector<std::int64_t> all(static_cast<std::size_t>(blocks * kBlock));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::copy(all.begin(), all.begin() + t, slots.begin());
    }
    copy_k.resize(key.size() * 2);
    copy_v.resize(value.size() * 2);
    (void)nz;
  }

  ScatterPaKvCachePlan plan(bool nz, bool with_value) {
    ScatterPaKvCacheOptions o;
    const TensorView k(key.data(), DType::bfloat16, {tokens, kHeads, kHead});
    const TensorView v(value.data(), DType::bfloat16, {tokens, kHeads, kHead});
    TensorView kc, vc;
    if (nz) {
      o.cache_mode = CacheMode::PA_NZ;
      kc = TensorView(key_cache.data(), DType::bfloat16, {blocks, kHeads * kHead / 16, kBlock, 16});
      vc = TensorView(value_cache.data(), DType::bfloat16,
                      {blocks, kHeads * kHead / 16, kBlock, 16});
    } else {
      kc = TensorView(key_cache.data(), DType::bfloat16, {blocks, kBlock, kHeads, kHead});
      vc = TensorView(value_cache.data(), DType::bfloat16, {blocks, kBlock, kHeads, kHead});
    }
    return plan_scatter_pa_kv_cache(k, with_value ? std::optional<TensorView>(v) : std::nullopt, kc,
                                    with_value ? std::optional<TensorView>(vc) : std::nullopt,
                                    TensorView(slots.data(), DType::int64, {tokens}), o);
  }

  std::size_t bytes(bool with_value) const { return key.size() * 2 * (with_value ? 2 : 1); }

  void memcpy_once(bool with_value) {
    std::memcpy(copy_k.data(), key.data(), key.size() * 2);
    if (with_value) std::memcpy(copy_v.data(), value.data(), value.size() * 2);
    benchmark::ClobberMemory();
  }
};

// Times op() alternately with memcpy of the same key (and value) bytes.
template <class Op>
void time_against_memcpy(benchmark::State& state, Setup& s, bool with_value, Op op) {
  op();  // warm the pages once
  s.memcpy_once(with_value);
  double scatter_s = 0, memcpy_s = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    op();
    benchmark::ClobberMemory();
    const auto t1 = Clock::now();
    s.memcpy_once(with_value);
    const auto t2 = Clock::now();
    const double a = std::chrono::duration<double>(t1 - t0).count();
    scatter_s += a;
    memcpy_s += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(a);
  }
  const double n = static_cast<double>(state.iterations());
  const double moved = 2.0 * static_cast<double>(s.bytes(with_value));  // read + write
  state.counters["GB/s"] = benchmark::Counter(moved * n / scatter_s / 1e9);
  state.counters["memcpy_us"] = benchmark::Counter(memcpy_s / n * 1e6);
  state.counters["vs_memcpy"] = benchmark::Counter(memcpy_s / scatter_s);
  state.counters["bound_ok"] =
      benchmark::Counter(scatter_s / n <= 2 * memcpy_s / n + 2e-6 ? 1.0 : 0.0);
  state.SetBytesProcessed(static_cast<std::int64_t>(moved * n));
}

void run(benchmark::State& state, bool nz, bool with_value) {
  Setup s(state.range(0), nz);
  const ScatterPaKvCachePlan plan = s.plan(nz, with_value);
  time_against_memcpy(state, s, with_value, [&] { execute(plan); });
}

// Lower bound for PA_NZ with scattered slots: the same 32-byte stores (chunk-major, as the
// kernel orders them) of constant bytes, without reading keys, values or slots. Prefill-sized
// batches write whole lines instead and are not bound by this.
void BM_PaNzStoreFloor(benchmark::State& state) {
  Setup s(state.range(0), true);
  const std::int64_t chunks = kHeads * kHead * 2 / 32, pitch = kBlock * 32;
  unsigned char* caches[2] = {reinterpret_cast<unsigned char*>(s.key_cache.data()),
                              reinterpret_cast<unsigned char*>(s.value_cache.data())};
  alignas(32) unsigned char fill[32] = {1};
  time_against_memcpy(state, s, true, [&] {
    for (unsigned char* cache : caches) {
      for (std::int64_t c = 0; c < chunks; ++c) {
        for (std::int64_t slot : s.slots) {
          std::memcpy(cache + (slot / kBlock) * chunks * pitch + c * pitch + (slot % kBlock) * 32,
                      fill, 32);
        }
      }
    }
  });
}

void BM_Norm(benchmark::State& state) { run(state, false, true); }
void BM_PaNz(benchmark::State& state) { run(state, true, true); }
void BM_NormKeyOnly(benchmark::State& state) { run(state, false, false); }

void BM_Memcpy(benchmark::State& state) {
  Setup s(state.range(0), false);
  s.memcpy_once(true);
  for (auto _ : state) {
    const auto t0 = Clock::now();
    s.memcpy_once(true);
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(2.0 * static_cast<double>(s.bytes(true)) *
                                                    static_cast<double>(state.iterations())));
}

BENCHMARK(BM_Norm)->ArgName("tokens")->Arg(64)->Arg(1024)->Arg(8192)->UseManualTime();
BENCHMARK(BM_PaNz)->ArgName("tokens")->Arg(64)->Arg(1024)->Arg(8192)->UseManualTime();
BENCHMARK(BM_PaNzStoreFloor)->ArgName("tokens")->Arg(64)->UseManualTime();
BENCHMARK(BM_NormKeyOnly)->ArgName("tokens")->Arg(64)->Arg(8192)->UseManualTime();
BENCHMARK(BM_Memcpy)->ArgName("tokens")->Arg(64)->Arg(1024)->Arg(8192)->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
