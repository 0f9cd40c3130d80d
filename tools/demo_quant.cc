// `kvscatter demo`, quantized part: two paged caches written the way an inference engine
// would, each replayed with the reference kernels and compared byte for byte.
//  1. An MLA-style latent cache (DeepSeek-like: d = 576 = 512 latent + 64 rope, bfloat16
//     activations) compressed by KvCompressEpilog in mode fp8_e8m0: 1,152 input bytes become a
//     648-byte row (rope bf16, 512 e4m3 codes, 8 power-of-two scales). The demo also decodes
//     the rows and reports the quantization error.
//  2. An FP8 BNBD cache (float8_e4m3fn K/V plus one float32 scale per token and head) written by
//     ScatterPaKvCacheWithKScale.
// Sequences get scattered blocks of a shared pool; prefill batches carry -1 padding tokens.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cli.h"
#include "kvscatter/formats.h"
#include "kvscatter/kv_compress_epilog.h"
#include "kvscatter/runtime.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"

namespace kvscatter::cli {
namespace {

struct QuantConfig {
  int layers = 4, batch = 4, prompt = 96, generate = 32, block_size = 64;
};
QuantConfig g_qcfg;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Block table of a paged allocator: sequence b owns blocks table[b][0..], drawn shuffled from a
// shared pool; the slot of position p of sequence b is block * block_size + p % block_size.
struct BlockTable {
  std::int64_t block_size, num_blocks;
  std::vector<std::vector<std::int64_t>> table;
  BlockTable(int batch, int max_len, std::int64_t bs) : block_size(bs) {
    const std::int64_t per_seq = (max_len + bs - 1) / bs;
    num_blocks = per_seq * batch + 3;  // a few blocks never used
    std::vector<std::int64_t> pool(static_cast<std::size_t>(num_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), std::mt19937_64(7));
    table.resize(static_cast<std::size_t>(batch));
    for (int b = 0; b < batch; ++b) {
      table[static_cast<std::size_t>(b)].assign(pool.begin() + b * per_seq,
                                                pool.begin() + (b + 1) * per_seq);
    }
  }
  std::int64_t slot(int b, std::int64_t pos) const {
    return table[static_cast<std::size_t>(b)][static_cast<std::size_t>(pos / block_size)] *
               block_size +
           pos % block_size;
  }
};

// Step 0 is the prefill ([batch, prompt] with the last sequence `pad` tokens shorter, padded
// with -1); later steps decode one token per sequence ([batch, 1]).
std::vector<std::int64_t> step_slots(const BlockTable& bt, const QuantConfig& c, int step,
                                     int pad) {
  std::vector<std::int64_t> slots;
  if (step == 0) {
    for (int b = 0; b < c.batch; ++b)
      for (int p = 0; p < c.prompt; ++p)
        slots.push_back(b == c.batch - 1 && p >= c.prompt - pad ? -1 : bt.slot(b, p));
  } else {
    for (int b = 0; b < c.batch; ++b) slots.push_back(bt.slot(b, c.prompt + step - 1));
  }
  return slots;
}

bool demo_mla() {
  const QuantConfig& c = g_qcfg;
  constexpr std::int64_t d = 576;
  const BlockTable bt(c.batch, c.prompt + c.generate, c.block_size);
  std::printf(
      "== MLA latent cache: %d layers, d = %lld (512 latent + 64 rope), fp8_e8m0, batch "
      "%d, prompt %d, generate %d, %lld blocks of %d, %d threads, %s ==\n",
      c.layers, static_cast<long long>(d), c.batch, c.prompt, c.generate,
      static_cast<long long>(bt.num_blocks), c.block_size, get_num_threads(),
      simd_target().c_str());
  // Activations: a pool of bfloat16 values with a per-channel spread, as latent vectors have.
  std::vector<std::uint16_t> pool(static_cast<std::size_t>(c.batch * c.prompt * d) + 8192);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::size_t i = 0; i < pool.size(); ++i) {
    const float channel_scale = 0.05f + static_cast<float>((i % d) % 37) * 0.1f;
    pool[i] = formats::encode_bfloat16(nd(rng) * channel_scale);
  }
  const std::int64_t row = 648;
  const std::size_t cache_bytes = static_cast<std::size_t>(bt.num_blocks * c.block_size * row);
  std::vector<std::vector<std::uint8_t>> fast(static_cast<std::size_t>(c.layers),
                                              std::vector<std::uint8_t>(cache_bytes, 0));
  auto ref = fast;
  double prefill_s = 0, decode_s = 0;
  std::int64_t written = 0;
  for (int step = 0; step <= c.generate; ++step) {
    std::vector<std::int64_t> slots = step_slots(bt, c, step, 5);
    const std::int64_t len = step == 0 ? c.prompt : 1;
    for (auto s : slots) written += s >= 0 ? c.layers : 0;
    // Pass 0 writes with the optimized kernel (step 0 twice: the first call warms the thread
    // pool and caches, the writes are idempotent), pass 1 replays with the reference.
    for (int pass = step == 0 ? -1 : 0; pass < 2; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int layer = 0; layer < c.layers; ++layer) {
        auto& cache = (pass <= 0 ? fast : ref)[static_cast<std::size_t>(layer)];
        const std::uint16_t* x = pool.data() + (layer * 977 + step * 131) % 8192;
        const auto plan = plan_kv_compress_epilog(
            TensorView(cache.data(), DType::uint8, {bt.num_blocks, c.block_size, 1, row}),
            TensorView(const_cast<std::uint16_t*>(x), DType::bfloat16, {c.batch, len, d}),
            TensorView(slots.data(), DType::int64, {c.batch, len}), 64, QuantMode::fp8_e8m0, true,
            1.0f);
        if (pass <= 0) {
          execute(plan);
        } else {
          reference::execute(plan);
        }
      }
      if (pass == 0) (step == 0 ? prefill_s : decode_s) += seconds_since(t0);
    }
  }
  const bool ok = fast == ref;

  // Decode the prefill rows of layer 0 and compare with the bfloat16 input: per group, the
  // error relative to the group's largest magnitude.
  double worst = 0, sum = 0;
  std::int64_t count = 0;
  const std::vector<std::int64_t> slots0 = step_slots(bt, c, 0, 5);
  for (std::size_t t = 0; t < slots0.size(); ++t) {
    if (slots0[t] < 0) continue;
    const std::uint8_t* r = fast[0].data() + slots0[t] * row;
    const std::uint16_t* x = pool.data() + t * d;
    for (int g = 0; g < 8; ++g) {
      const float scale = std::ldexp(1.0f, static_cast<int>(r[128 + 512 + g]) - 127);
      float amax = 0;
      for (int k = 0; k < 64; ++k)
        amax = std::max(amax, std::fabs(formats::decode_bfloat16(x[64 * g + k])));
      for (int k = 0; k < 64; ++k) {
        const float back = formats::decode_float8_e4m3fn(r[128 + 64 * g + k]) * scale;
        const double err = std::fabs(back - formats::decode_bfloat16(x[64 * g + k])) / amax;
        worst = std::max(worst, err);
        sum += err;
        ++count;
      }
    }
  }
  const double in_bytes = 2.0 * d + 8, out_bytes = static_cast<double>(row);
  std::printf("prefill: %d tokens x %d layers in %.3f ms (%.2f GB/s read + written)\n",
              c.batch * c.prompt - 5, c.layers, prefill_s * 1e3,
              (c.batch * c.prompt - 5) * c.layers * (in_bytes + out_bytes) / prefill_s / 1e9);
  std::printf("decode:  %d steps, %.2f us per step for %d layers\n", c.generate,
              decode_s / c.generate * 1e6, c.layers);
  std::printf(
      "size:    %lld bytes of bfloat16 per token -> %lld-byte rows (%.1f%%), %lld rows "
      "written\n",
      static_cast<long long>(2 * d), static_cast<long long>(row), 100.0 * row / (2.0 * d),
      static_cast<long long>(written));
  std::printf(
      "error:   dequantized latent vs input, relative to the group amax: mean %.4f, max "
      "%.4f\n",
      sum / static_cast<double>(count), worst);
  std::printf("verify:  caches %s the reference kernel (%d layers x %zu bytes)\n",
              ok ? "match" : "DIFFER FROM", c.layers, cache_bytes);
  return ok;
}

bool demo_fp8_bnbd() {
  const QuantConfig& c = g_qcfg;
  constexpr std::int64_t heads = 8, head = 128;
  const BlockTable bt(c.batch, c.prompt + c.generate, c.block_size);
  std::printf(
      "== FP8 BNBD cache: %d layers, %lld KV heads x %lld, float8_e4m3fn K/V + float32 "
      "scales, batch %d, prompt %d, generate %d ==\n",
      c.layers, static_cast<long long>(heads), static_cast<long long>(head), c.batch, c.prompt,
      c.generate);
  const std::int64_t NB = bt.num_blocks, BS = c.block_size;
  const std::size_t kv_bytes = static_cast<std::size_t>(NB * heads * BS * head);
  const std::size_t sc_elems = static_cast<std::size_t>(NB * heads * BS);
  struct Caches {
    std::vector<std::uint8_t> k, v;
    std::vector<float> s;
  };
  std::vector<Caches> fast(
      static_cast<std::size_t>(c.layers),
      Caches{std::vector<std::uint8_t>(kv_bytes, 0), std::vector<std::uint8_t>(kv_bytes, 0),
             std::vector<float>(sc_elems, 0.0f)});
  auto ref = fast;
  // New keys/values arrive already in e4m3 with a per-(token, head) scale.
  const std::size_t max_tokens = static_cast<std::size_t>(c.batch * c.prompt);
  std::vector<std::uint8_t> kv_pool(max_tokens * heads * head + 4096);
  std::vector<float> scale_pool(max_tokens * heads + 512);
  std::mt19937 rng(5);
  for (auto& b : kv_pool)
    b = formats::encode_float8_e4m3fn(std::normal_distribution<float>(0, 64)(rng));
  for (auto& f : scale_pool) f = std::uniform_real_distribution<float>(0.001f, 0.05f)(rng);
  double prefill_s = 0, decode_s = 0;
  for (int step = 0; step <= c.generate; ++step) {
    std::vector<std::int64_t> slots = step_slots(bt, c, step, 3);
    const std::int64_t T = static_cast<std::int64_t>(slots.size());
    // Pass 0 writes with the optimized kernel (step 0 twice: the first call warms the thread
    // pool and caches, the writes are idempotent), pass 1 replays with the reference.
    for (int pass = step == 0 ? -1 : 0; pass < 2; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int layer = 0; layer < c.layers; ++layer) {
        Caches& cc = (pass <= 0 ? fast : ref)[static_cast<std::size_t>(layer)];
        std::uint8_t* k = kv_pool.data() + (layer * 409 + step * 61) % 4096;
        std::uint8_t* v = kv_pool.data() + (layer * 211 + step * 97 + 7) % 4096;
        float* s = scale_pool.data() + (layer * 37 + step * 11) % 512;
        const auto plan = plan_scatter_pa_kv_cache_with_k_scale(
            TensorView(k, DType::float8_e4m3fn, {T, heads, head}),
            TensorView(v, DType::float8_e4m3fn, {T, heads, head}),
            TensorView(cc.k.data(), DType::float8_e4m3fn, {NB, heads, BS, head}),
            TensorView(cc.v.data(), DType::float8_e4m3fn, {NB, heads, BS, head}),
            TensorView(slots.data(), DType::int64, {T}), TensorView(s, DType::float32, {T, heads}),
            TensorView(cc.s.data(), DType::float32, {NB, heads, BS, 1}));
        if (pass <= 0) {
          execute(plan);
        } else {
          reference::execute(plan);
        }
      }
      if (pass == 0) (step == 0 ? prefill_s : decode_s) += seconds_since(t0);
    }
  }
  bool ok = true;
  for (std::size_t l = 0; l < fast.size(); ++l) {
    ok = ok && fast[l].k == ref[l].k && fast[l].v == ref[l].v &&
         std::memcmp(fast[l].s.data(), ref[l].s.data(), sc_elems * sizeof(float)) == 0;
  }
  const double bytes_per_token = 2.0 * (2.0 * heads * head + 4.0 * heads);
  std::printf("prefill: %d tokens x %d layers in %.3f ms (%.2f GB/s read + written)\n",
              c.batch * c.prompt - 3, c.layers, prefill_s * 1e3,
              (c.batch * c.prompt - 3) * c.layers * bytes_per_token / prefill_s / 1e9);
  std::printf("decode:  %d steps, %.2f us per step for %d layers\n", c.generate,
              decode_s / c.generate * 1e6, c.layers);
  std::printf("verify:  K, V and scale caches %s the reference kernel\n",
              ok ? "match" : "DIFFER FROM");
  return ok;
}

// The caches of both runs stay within a few GiB (and every product within int).
void check_options() {
  const QuantConfig& c = g_qcfg;
  const std::int64_t rows = std::int64_t{c.layers} * c.batch * (c.prompt + c.generate);
  if (rows > (std::int64_t{1} << 20)) {
    throw UsageError("--quant-layers x --quant-batch x (--quant-prompt + --quant-generate)",
                     std::to_string(rows) + " cache rows, more than 1048576");
  }
}

const RegisterDemo kRegisterQuant{DemoPart{
    "quant", 30,
    [](Command& app) {
      app.add_option("--quant-layers", g_qcfg.layers, "layers of the quantized caches")
          ->check(Range(1, 256));
      app.add_option("--quant-batch", g_qcfg.batch, "sequences in the quantized demos")
          ->check(Range(1, 1024));
      app.add_option("--quant-prompt", g_qcfg.prompt, "prompt tokens in the quantized demos")
          ->check(Range(8, 1 << 16));
      app.add_option("--quant-generate", g_qcfg.generate, "generated tokens in the quantized demos")
          ->check(Range(1, 1 << 16));
    },
    [] {
      const bool mla = demo_mla();
      const bool fp8 = demo_fp8_bnbd();
      return mla && fp8;
    },
    check_options}};

}  // namespace
}  // namespace kvscatter::cli
