// `kvscatter bench scatter`: one table per ScatterPaKvCache mode with the time per call, GB/s
// (bytes read + written of the K/V elements, FlashInfer's convention) and the ratio to memcpy of
// the same bytes, timed alternately with the scatter in the same run.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "kvscatter/dtype.h"
#include "kvscatter/error.h"
#include "kvscatter/runtime.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "workload.h"

namespace kvscatter::cli {
namespace {

struct Options {
  std::int64_t heads = 8, head_size = 128, block_size = 128;
  std::string dtype = "bfloat16";
  std::string tokens = "1,16,64,256,1024,4096";
  std::string modes = "Norm,Nct,NHSD,PA_NZ,KeyOnly,Alibi,Rope,Omni";
  double min_time = 0.05;  // seconds per table row
};
Options g_opts;

using Clock = std::chrono::steady_clock;

// Buffers and a plan for one (mode, tokens) row.
struct Row {
  TensorVector<unsigned char> key, value, copy_k, copy_v, key_cache, value_cache;  // workload.h
  std::vector<std::int64_t> slots, lens, offs, seq;
  ScatterPaKvCachePlan plan;
  std::size_t written = 0;  // bytes written to the caches per call (= bytes read)
};

void fill(TensorVector<unsigned char>& v, std::mt19937& rng) {
  for (auto& x : v) x = static_cast<unsigned char>(rng());
}

Row make_row(const std::string& mode, std::int64_t tokens, DType dt) {
  const Options& o = g_opts;
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(dt));
  const std::int64_t row = o.heads * o.head_size;
  const std::int64_t bs = o.block_size;
  const bool compress = mode == "Alibi" || mode == "Rope" || mode == "Omni";
  const bool key_only = mode == "KeyOnly";
  const bool nct = mode == "Nct";
  Row r;
  std::mt19937 rng(7);
  // Nct reads every token from a fused [T, 3 * row] buffer (q, k, v), k at offset row.
  const std::int64_t pitch = nct ? 3 * row : row;
  r.key.resize(static_cast<std::size_t>(tokens * pitch * es));
  r.value.resize(r.key.size());
  fill(r.key, rng);
  fill(r.value, rng);
  ScatterPaKvCacheOptions opt;
  std::int64_t rows_written = tokens;
  if (compress) {
    // Four sequences (or fewer) sharing the tokens; per head: offset L/4, window L/2.
    const std::int64_t b = std::min<std::int64_t>(4, tokens);
    std::int64_t total = 0;
    rows_written = 0;
    for (std::int64_t i = 0; i < b; ++i) {
      const std::int64_t l = tokens / b + (i < tokens % b ? 1 : 0);
      r.seq.push_back(l);
      for (std::int64_t h = 0; h < o.heads; ++h) {
        const std::int64_t w = mode == "Alibi" ? (l + 1) / 2 : l / 2;
        const std::int64_t off = l / 4;
        r.lens.push_back(w);
        r.offs.push_back(off);
        r.slots.push_back(rows_written);
        rows_written += mode == "Alibi"        ? w
                        : (w == 0 || off == l) ? l
                        : mode == "Rope"       ? l - w + 1
                                               : l - w;
      }
      total += l;
    }
    opt.scatter_mode = parse_scatter_mode(mode);
  }
  const std::int64_t cache_rows = compress ? rows_written : tokens;
  const std::int64_t nb = std::max<std::int64_t>(64, (cache_rows + bs - 1) / bs + 1);
  const std::int64_t slot_bytes = compress ? o.head_size * es : row * es;
  r.key_cache.assign(static_cast<std::size_t>(nb * bs * slot_bytes), 0);
  r.value_cache.assign(r.key_cache.size(), 0);
  if (!compress) {
    // Prefill-sized batches fill shuffled blocks in order, decode-sized ones random slots.
    std::vector<std::int64_t> order(static_cast<std::size_t>(nb * (tokens >= 1024 ? 1 : bs)));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (std::int64_t i = 0; i < tokens; ++i) {
      r.slots.push_back(tokens >= 1024 ? order[i / bs] * bs + i % bs : order[i]);
    }
  }
  const DType idx = DType::int64;
  TensorView k, v, kc, vc;
  if (nct) {
    const std::array<std::int64_t, 3> shape{tokens, o.heads, o.head_size};
    const std::array<std::int64_t, 3> strides{pitch, o.head_size, 1};
    k = TensorView(r.key.data(), dt, shape, strides);
    v = TensorView(r.value.data(), dt, shape, strides);
    opt.scatter_mode = ScatterMode::Nct;
    opt.strides = std::array<std::int64_t, 2>{pitch, pitch};
    opt.offsets = std::array<std::int64_t, 2>{row, 2 * row};
  } else {
    k = TensorView(r.key.data(), dt, {tokens, o.heads, o.head_size});
    v = TensorView(r.value.data(), dt, {tokens, o.heads, o.head_size});
  }
  if (mode == "PA_NZ") {
    const std::int64_t l = 32 / es;
    opt.cache_mode = CacheMode::PA_NZ;
    kc = TensorView(r.key_cache.data(), dt, {nb, row / l, bs, l});
    vc = TensorView(r.value_cache.data(), dt, {nb, row / l, bs, l});
  } else if (mode == "NHSD") {
    opt.scatter_mode = ScatterMode::NHSD;
    kc = TensorView(r.key_cache.data(), dt, {nb, o.heads, bs, o.head_size});
    vc = TensorView(r.value_cache.data(), dt, {nb, o.heads, bs, o.head_size});
  } else if (compress) {
    kc = TensorView(r.key_cache.data(), dt, {nb, bs, 1, o.head_size});
    vc = TensorView(r.value_cache.data(), dt, {nb, bs, 1, o.head_size});
    opt.seq_lens = TensorView(r.seq.data(), idx, {static_cast<std::int64_t>(r.seq.size())});
    opt.compress_lens = TensorView(r.lens.data(), idx, {static_cast<std::int64_t>(r.lens.size())});
    if (mode != "Alibi") {
      opt.compress_seq_offsets =
          TensorView(r.offs.data(), idx, {static_cast<std::int64_t>(r.offs.size())});
    }
  } else {
    kc = TensorView(r.key_cache.data(), dt, {nb, bs, o.heads, o.head_size});
    vc = TensorView(r.value_cache.data(), dt, {nb, bs, o.heads, o.head_size});
  }
  const TensorView slot(r.slots.data(), idx, {static_cast<std::int64_t>(r.slots.size())});
  r.plan = plan_scatter_pa_kv_cache(k, key_only ? std::nullopt : std::optional(v), kc,
                                    key_only ? std::nullopt : std::optional(vc), slot, opt);
  r.written = static_cast<std::size_t>(rows_written * slot_bytes) * (key_only ? 1 : 2);
  r.copy_k.resize(r.written);
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string human_time(double s) {
  char buf[32];
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%8.2f us", s * 1e6);
  else
    std::snprintf(buf, sizeof buf, "%8.3f ms", s * 1e3);
  return buf;
}

int run_bench() {
  const Options& o = g_opts;
  const auto dt = dtype_from_name(o.dtype);
  if (!dt) {
    std::fprintf(stderr, "bench scatter: unknown --dtype %s\n", o.dtype.c_str());
    return 2;
  }
  std::printf("ScatterPaKvCache: %lld heads x %lld %s, block size %lld, %d threads, SIMD %s\n",
              static_cast<long long>(o.heads), static_cast<long long>(o.head_size), o.dtype.c_str(),
              static_cast<long long>(o.block_size), get_num_threads(), simd_target().c_str());
  std::printf(
      "GB/s counts bytes read + written of the K/V elements; x memcpy = memcpy time of "
      "the same bytes / scatter time (medians, timed alternately)\n");
  for (const std::string& mode : split(o.modes)) {
    std::printf("\n%s\n%8s  %12s  %9s  %12s  %9s\n", mode.c_str(), "tokens", "time/call", "GB/s",
                "memcpy", "x memcpy");
    for (const std::string& tok : split(o.tokens)) {
      const std::int64_t tokens = std::stoll(tok);
      Row r = make_row(mode, tokens, *dt);
      execute(r.plan);
      std::vector<double> ts, tm;
      const auto start = Clock::now();
      while (ts.size() < 3 ||
             std::chrono::duration<double>(Clock::now() - start).count() < o.min_time) {
        const auto t0 = Clock::now();
        execute(r.plan);
        const auto t1 = Clock::now();
        std::memcpy(r.copy_k.data(), r.key.data(), std::min(r.written, r.key.size()));
        if (r.written > r.key.size()) {
          std::memcpy(r.copy_k.data() + r.key.size(), r.value.data(), r.written - r.key.size());
        }
        const auto t2 = Clock::now();
        ts.push_back(std::chrono::duration<double>(t1 - t0).count());
        tm.push_back(std::chrono::duration<double>(t2 - t1).count());
      }
      const double s = median(ts), m = median(tm);
      std::printf("%8lld  %12s  %9.2f  %12s  %9.2f\n", static_cast<long long>(tokens),
                  human_time(s).c_str(), 2.0 * static_cast<double>(r.written) / s / 1e9,
                  human_time(m).c_str(), m / s);
    }
  }
  return 0;
}

const RegisterBench kRegister{BenchPart{
    "scatter", "ScatterPaKvCache per mode: time per call, GB/s, ratio to memcpy",
    [](Command& app) {
      using I = std::int64_t;
      app.add_option("--heads", g_opts.heads, "KV heads")
          ->check(Range(I{1}, I{1024}))
          ->capture_default_str();
      app.add_option("--head-size", g_opts.head_size, "head size")
          ->check(Range(I{1}, I{8192}))
          ->capture_default_str();
      app.add_option("--block-size", g_opts.block_size, "cache block size")
          ->check(Range(I{1}, I{4096}))
          ->capture_default_str();
      app.add_option("--dtype", g_opts.dtype, "element dtype")
          ->check(IsMember({"float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16",
                            "int32", "uint32", "hifloat8", "float8_e5m2", "float8_e4m3fn"}))
          ->capture_default_str();
      app.add_option("--tokens", g_opts.tokens, "comma-separated token counts")
          ->check(int_list(1, 1 << 20))
          ->capture_default_str();
      app.add_option("--modes", g_opts.modes,
                     "comma-separated: Norm,Nct,NHSD,PA_NZ,KeyOnly,Alibi,Rope,Omni")
          ->check(name_list({"Norm", "Nct", "NHSD", "PA_NZ", "KeyOnly", "Alibi", "Rope", "Omni"}))
          ->capture_default_str();
      app.add_option("--min-time", g_opts.min_time, "seconds per row")
          ->check(Range(0.0, 60.0))
          ->capture_default_str();
    },
    [] {
      try {
        return run_bench();
      } catch (const Error& e) {
        std::fprintf(stderr, "bench scatter: %s\n", e.what());
        return 2;
      }
    }}};

}  // namespace
}  // namespace kvscatter::cli
