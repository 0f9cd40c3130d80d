// `kvscatter bench quant`: one table per operator and mode (KvCompressEpilog in each quant_mode,
// ScatterPaKvCacheWithKScale) with tokens, time per call, GB/s of bytes read plus written, and
// the ratio to memcpy of the same traffic measured in the same run (memcpy of half the traffic
// between buffers of that size; > 1 means faster than memcpy). Medians of alternating batches.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cli.h"
#include "kvscatter/formats.h"
#include "kvscatter/kv_compress_epilog.h"
#include "kvscatter/runtime.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"
#include "measure.h"
#include "workload.h"

namespace kvscatter::cli {
namespace {

struct BenchQuantConfig {
  std::vector<std::int64_t> tokens{1, 16, 256, 4096, 16384};
  std::int64_t d = 576, group = 64, heads = 8, head_size = 128, block_size = 128;
  bool round_scale = true;
  int reps = 7;
};
BenchQuantConfig g_bq;

void print_header() {
  std::printf("  %8s  %12s  %9s  %9s\n", "tokens", "time/call", "GB/s", "x memcpy");
}

void print_row(std::int64_t tokens, double s, std::int64_t traffic, double mem_s) {
  const double us = s * 1e6;
  std::printf("  %8lld  %9.2f %s  %9.2f  %9.2f\n", static_cast<long long>(tokens),
              us >= 1000 ? us / 1000 : us, us >= 1000 ? "ms" : "us",
              static_cast<double>(traffic) / s / 1e9, mem_s / s);
}

void bench_epilog(QuantMode mode) {
  const BenchQuantConfig& c = g_bq;
  const std::int64_t gs = mode == QuantMode::hifloat8_fp4 ? c.group : 64;
  const char* names[] = {"fp8_bf16", "fp8_e8m0", "hifloat8_fp4"};
  bool header = false;
  for (std::int64_t tokens : c.tokens) {
    const std::int64_t blocks = (tokens + c.block_size - 1) / c.block_size;
    TensorVector<std::uint16_t> x(static_cast<std::size_t>(tokens * c.d));
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (auto& v : x) v = formats::encode_bfloat16(nd(rng));
    std::vector<std::int64_t> slots = paged_slots(tokens, c.block_size, blocks);
    TensorView tx(x.data(), DType::bfloat16, {tokens, c.d});
    TensorView ts(slots.data(), DType::int64, {tokens});
    const std::int64_t row =
        plan_kv_compress_epilog(TensorView(nullptr, DType::uint8, {0, c.block_size, 1, 1 << 14}),
                                tx, ts, gs, mode, c.round_scale, 1.0f)
            .row_bytes;
    if (!header) {
      std::printf("kv_compress_epilog  quant_mode %s%s, d = %lld, %lld-byte rows, threads %d, %s\n",
                  names[static_cast<int>(mode)],
                  mode == QuantMode::hifloat8_fp4
                      ? (" (group " + std::to_string(gs) + ")").c_str()
                      : (c.round_scale ? " (round_scale)" : " (round_scale false)"),
                  static_cast<long long>(c.d), static_cast<long long>(row), get_num_threads(),
                  simd_target().c_str());
      print_header();
      header = true;
    }
    TensorVector<std::uint8_t> cache(static_cast<std::size_t>(blocks * c.block_size * row));
    const auto plan = plan_kv_compress_epilog(
        TensorView(cache.data(), DType::uint8, {blocks, c.block_size, 1, row}), tx, ts, gs, mode,
        c.round_scale, 1.0f);
    const std::int64_t traffic = tokens * (2 * c.d + 8 + row);
    const Timing t = time_against_memcpy([&] { execute(plan); }, traffic, c.reps, 0.02);
    print_row(tokens, t.op_median, traffic, t.base_median);
  }
  std::printf("\n");
}

void bench_scatter() {
  const BenchQuantConfig& c = g_bq;
  const std::int64_t H = c.heads, D = c.head_size;
  std::printf(
      "scatter_pa_kv_cache_with_k_scale  float8_e4m3fn, %lld heads x %lld, BNBD blocks "
      "of %lld, threads %d\n",
      static_cast<long long>(H), static_cast<long long>(D), static_cast<long long>(c.block_size),
      get_num_threads());
  print_header();
  for (std::int64_t tokens : c.tokens) {
    const std::int64_t blocks = (tokens + c.block_size - 1) / c.block_size;
    TensorVector<std::uint8_t> key(static_cast<std::size_t>(tokens * H * D), 0x38), value = key;
    TensorVector<float> key_scale(static_cast<std::size_t>(tokens * H), 0.5f);
    TensorVector<std::uint8_t> kc(static_cast<std::size_t>(blocks * H * c.block_size * D)), vc = kc;
    TensorVector<float> sc(static_cast<std::size_t>(blocks * H * c.block_size));
    std::vector<std::int64_t> slots = paged_slots(tokens, c.block_size, blocks);
    const DType dt = DType::float8_e4m3fn;
    const auto plan = plan_scatter_pa_kv_cache_with_k_scale(
        TensorView(key.data(), dt, {tokens, H, D}), TensorView(value.data(), dt, {tokens, H, D}),
        TensorView(kc.data(), dt, {blocks, H, c.block_size, D}),
        TensorView(vc.data(), dt, {blocks, H, c.block_size, D}),
        TensorView(slots.data(), DType::int64, {tokens}),
        TensorView(key_scale.data(), DType::float32, {tokens, H}),
        TensorView(sc.data(), DType::float32, {blocks, H, c.block_size, 1}));
    const std::int64_t traffic = tokens * (2 * (2 * H * D + 4 * H) + 8);
    const Timing t = time_against_memcpy([&] { execute(plan); }, traffic, c.reps, 0.02);
    print_row(tokens, t.op_median, traffic, t.base_median);
  }
  std::printf("\n");
}

std::string multiple_of_64(std::string& text) {
  std::int64_t v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v % 64 == 0 ? "" : "must be a multiple of 64";
}

const RegisterBench kRegisterQuantBench{BenchPart{
    "quant", "KvCompressEpilog (each quant_mode) and ScatterPaKvCacheWithKScale vs memcpy",
    [](Command& app) {
      app.add_option("--tokens", g_bq.tokens, "comma-separated token counts (rows of the tables)")
          ->delimiter(',')
          ->check(Range(std::int64_t{1}, std::int64_t{1} << 22));
      app.add_option("--d", g_bq.d, "KvCompressEpilog row length (multiple of 64, 128..8192)")
          ->check(Range(std::int64_t{128}, std::int64_t{8192}))
          ->check(Validator(multiple_of_64, "MULTIPLE OF 64", "multiple_of_64"));
      app.add_option("--group", g_bq.group, "hifloat8_fp4 group size (16, 32, 64)")
          ->check(IsMember({std::int64_t{16}, std::int64_t{32}, std::int64_t{64}}));
      app.add_option("--round-scale", g_bq.round_scale, "fp8 modes: power-of-two scales");
      app.add_option("--heads", g_bq.heads, "ScatterPaKvCacheWithKScale heads")
          ->check(Range(1, 1024));
      app.add_option("--head-size", g_bq.head_size, "ScatterPaKvCacheWithKScale head size")
          ->check(Range(1, 65536));
      app.add_option("--reps", g_bq.reps, "timed batches per cell (median)")->check(Range(1, 1000));
    },
    [] {
      bench_epilog(QuantMode::fp8_bf16);
      bench_epilog(QuantMode::fp8_e8m0);
      bench_epilog(QuantMode::hifloat8_fp4);
      bench_scatter();
      return 0;
    }}};

}  // namespace
}  // namespace kvscatter::cli
