// `kvscatter bench` (no subcommand): every operator over token counts from 1 to 16,384 on
// realistic shapes, with 1 thread and with all cores, against memcpy of the same bytes measured
// alternately in the same run. `--json` feeds bench/compare.py (docs/performance.md); `--quick`
// is the regression guard: a reduced sweep that fails when an operator falls far below its
// target ratio to memcpy (never on absolute time, which a shared machine cannot promise).
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "kvscatter/error.h"
#include "kvscatter/formats.h"
#include "kvscatter/gather_pa_kv_cache.h"
#include "kvscatter/indexer_quant_cache.h"
#include "kvscatter/kv_cache_update.h"
#include "kvscatter/kv_compress_epilog.h"
#include "kvscatter/paged_cache_gather.h"
#include "kvscatter/paged_kv_write.h"
#include "kvscatter/paged_latent_write.h"
#include "kvscatter/runtime.h"
#include "kvscatter/scatter_pa_cache.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"
#include "measure.h"
#include "workload.h"

namespace kvscatter::cli {
namespace {

constexpr std::int64_t kBlockSize = 128;
constexpr std::int64_t kMinBlocks = 64;  // decode batches scatter over at least 8,192 slots

struct Options {
  bool quick = false;
  std::string json;
  std::string tokens;   // empty: the default list of the mode
  std::string ops;      // comma-separated substrings of "op variant shape"; empty: all
  std::string threads;  // comma-separated counts or "all"; empty: "1,all"
  int reps = 0;         // alternating batches per row; 0: 7 (5 with --quick)
  double batch_ms = 10;
};
Options g_opts;

// One call's buffers (owned by the closure) and its traffic.
struct Case {
  std::function<void()> run;
  std::int64_t traffic = 0;  // bytes read + bytes written per call
};

struct Workload {
  std::string op, variant, shape;
  std::function<Case(std::int64_t tokens)> make;
  std::string id() const { return op + " " + variant + " " + shape; }
};

using Bytes = TensorVector<unsigned char>;  // inputs and caches alike (workload.h)

// Random contents tiled from a 1 MiB pattern: the kernels' speed does not depend on the
// values, and generating hundreds of MiB of random numbers would dominate the sweep's time.
template <class T, class Pattern>
void fill_tiled(T* out, std::size_t n, const Pattern& pattern) {
  for (std::size_t i = 0; i < n; i += pattern.size()) {
    std::memcpy(out + i, pattern.data(), std::min(pattern.size(), n - i) * sizeof(T));
  }
}

Bytes random_bytes(std::size_t n, std::uint32_t seed) {
  std::vector<unsigned char> pattern(std::size_t{1} << 20);
  std::mt19937 rng(seed);
  for (auto& x : pattern) x = static_cast<unsigned char>(rng());
  Bytes b(n);
  fill_tiled(b.data(), n, pattern);
  return b;
}

// Normally distributed values (the quantizers' and converters' input), tiled likewise.
TensorVector<float> normal_floats(std::size_t n, float sigma, std::uint32_t seed) {
  std::vector<float> pattern(std::size_t{1} << 18);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  for (auto& x : pattern) x = nd(rng);
  TensorVector<float> out(n);
  fill_tiled(out.data(), n, pattern);
  return out;
}

std::int64_t blocks_for(std::int64_t tokens) {
  return std::max(kMinBlocks, (tokens + kBlockSize - 1) / kBlockSize);
}

// ScatterPaKvCache, bfloat16, Norm ([NB, BS, H, D]) or PA_NZ ([NB, H*D/16, BS, 16]); no value
// for key-only (MLA latent) caches.
Workload scatter_workload(const std::string& mode, std::int64_t heads, std::int64_t dim,
                          bool key_only) {
  Workload w{"scatter_pa_kv_cache", mode + (key_only ? " key-only" : "") + " bf16",
             std::to_string(heads) + "x" + std::to_string(dim), nullptr};
  w.make = [mode, heads, dim, key_only](std::int64_t tokens) {
    struct Buffers {
      Bytes key, value;
      Bytes key_cache, value_cache;
      std::vector<std::int64_t> slots;
      ScatterPaKvCachePlan plan;
    };
    auto b = std::make_shared<Buffers>();
    const std::int64_t row = heads * dim * 2, nb = blocks_for(tokens);
    b->key = random_bytes(static_cast<std::size_t>(tokens * row), 1);
    b->key_cache.assign(static_cast<std::size_t>(nb * kBlockSize * row), 0);
    if (!key_only) {
      b->value = random_bytes(b->key.size(), 2);
      b->value_cache = b->key_cache;
    }
    b->slots = realistic_slots(tokens, kBlockSize, nb);
    const DType dt = DType::bfloat16;
    ScatterPaKvCacheOptions opt;
    const auto cache = [&](Bytes& c) {
      if (mode == "PA_NZ") {
        return TensorView(c.data(), dt, {nb, heads * dim / 16, kBlockSize, 16});
      }
      return TensorView(c.data(), dt, {nb, kBlockSize, heads, dim});
    };
    opt.cache_mode = parse_cache_mode(mode);
    const TensorView k(b->key.data(), dt, {tokens, heads, dim});
    const TensorView slot(b->slots.data(), DType::int64, {tokens});
    if (key_only) {
      b->plan =
          plan_scatter_pa_kv_cache(k, std::nullopt, cache(b->key_cache), std::nullopt, slot, opt);
    } else {
      b->plan = plan_scatter_pa_kv_cache(k, TensorView(b->value.data(), dt, {tokens, heads, dim}),
                                         cache(b->key_cache), cache(b->value_cache), slot, opt);
    }
    const std::int64_t sides = key_only ? 1 : 2;
    return Case{[b] { execute(b->plan); }, written_tokens(tokens) * 2 * sides * row + 8 * tokens};
  };
  return w;
}

// ScatterPaKvCacheWithKScale: float8_e4m3fn K/V, one float32 key scale per (token, head), BNBD.
Workload k_scale_workload(std::int64_t heads, std::int64_t dim) {
  Workload w{"scatter_pa_kv_cache_with_k_scale", "fp8_e4m3 BNBD",
             std::to_string(heads) + "x" + std::to_string(dim), nullptr};
  w.make = [heads, dim](std::int64_t tokens) {
    struct Buffers {
      Bytes key, value;
      Bytes key_cache, value_cache;
      TensorVector<float> key_scale, scale_cache;
      std::vector<std::int64_t> slots;
      ScatterPaKvCacheWithKScalePlan plan;
    };
    auto b = std::make_shared<Buffers>();
    const std::int64_t nb = blocks_for(tokens);
    b->key = random_bytes(static_cast<std::size_t>(tokens * heads * dim), 3);
    b->value = random_bytes(b->key.size(), 4);
    b->key_scale.assign(static_cast<std::size_t>(tokens * heads), 0.5f);
    b->key_cache.assign(static_cast<std::size_t>(nb * heads * kBlockSize * dim), 0);
    b->value_cache = b->key_cache;
    b->scale_cache.assign(static_cast<std::size_t>(nb * heads * kBlockSize), 0.0f);
    b->slots = realistic_slots(tokens, kBlockSize, nb);
    const DType dt = DType::float8_e4m3fn;
    b->plan = plan_scatter_pa_kv_cache_with_k_scale(
        TensorView(b->key.data(), dt, {tokens, heads, dim}),
        TensorView(b->value.data(), dt, {tokens, heads, dim}),
        TensorView(b->key_cache.data(), dt, {nb, heads, kBlockSize, dim}),
        TensorView(b->value_cache.data(), dt, {nb, heads, kBlockSize, dim}),
        TensorView(b->slots.data(), DType::int64, {tokens}),
        TensorView(b->key_scale.data(), DType::float32, {tokens, heads}),
        TensorView(b->scale_cache.data(), DType::float32, {nb, heads, kBlockSize, 1}));
    // read: key, value, key scales; written: the same; plus the slot mapping.
    const std::int64_t per_token = 2 * (2 * heads * dim + 4 * heads);
    return Case{[b] { execute(b->plan); }, written_tokens(tokens) * per_token + 8 * tokens};
  };
  return w;
}

// "d576": appended rather than `"d" + std::to_string(d)`, where g++ 12 at -O3 warns of an
// overlapping copy that cannot happen (-Wrestrict, a false positive).
std::string d_shape(std::int64_t d) { return std::string("d").append(std::to_string(d)); }

// KvCompressEpilog: bfloat16 rows of d elements quantized into a paged uint8 cache.
Workload epilog_workload(QuantMode mode, const char* name, std::int64_t d) {
  Workload w{"kv_compress_epilog", name, d_shape(d), nullptr};
  w.make = [mode, d](std::int64_t tokens) {
    struct Buffers {
      TensorVector<std::uint16_t> x;
      Bytes cache;
      std::vector<std::int64_t> slots;
      KvCompressEpilogPlan plan;
    };
    auto b = std::make_shared<Buffers>();
    const std::int64_t nb = blocks_for(tokens);
    const TensorVector<float> pattern = normal_floats(std::size_t{1} << 16, 2.0f, 5);
    std::vector<std::uint16_t> bits(pattern.size());
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = formats::encode_bfloat16(pattern[i]);
    b->x.resize(static_cast<std::size_t>(tokens * d));
    fill_tiled(b->x.data(), b->x.size(), bits);
    b->slots = realistic_slots(tokens, kBlockSize, nb);
    const TensorView x(b->x.data(), DType::bfloat16, {tokens, d});
    const TensorView s(b->slots.data(), DType::int64, {tokens});
    // A first plan on an empty cache tells the row size; then the cache is sized exactly.
    const std::int64_t row =
        plan_kv_compress_epilog(TensorView(nullptr, DType::uint8, {0, kBlockSize, 1, 1 << 14}), x,
                                s, 64, mode, true, 1.0f)
            .row_bytes;
    b->cache.assign(static_cast<std::size_t>(nb * kBlockSize * row), 0);
    b->plan =
        plan_kv_compress_epilog(TensorView(b->cache.data(), DType::uint8, {nb, kBlockSize, 1, row}),
                                x, s, 64, mode, true, 1.0f);
    // read: the bfloat16 row and its slot; written: the cache row, padding included.
    return Case{[b] { execute(b->plan); }, written_tokens(tokens) * (2 * d + row) + 8 * tokens};
  };
  return w;
}

// kv_cache_update: float32 new tokens written at the end of (1, S, H, D) caches, S >= 4,096.
Workload update_workload(DType cache_dtype, std::int64_t heads, std::int64_t dim) {
  Workload w{"kv_cache_update",
             std::string("f32->") + (cache_dtype == DType::float32 ? "f32" : "bf16"),
             std::to_string(heads) + "x" + std::to_string(dim), nullptr};
  w.make = [cache_dtype, heads, dim](std::int64_t len) {
    struct Buffers {
      Bytes key_cache, value_cache;
      TensorVector<float> new_keys, new_values;
      KvCacheUpdatePlan plan;
    };
    auto b = std::make_shared<Buffers>();
    const std::int64_t seq = std::max<std::int64_t>(4096, len);
    const auto es = static_cast<std::int64_t>(dtype_size(cache_dtype));
    b->key_cache.assign(static_cast<std::size_t>(seq * heads * dim * es), 0);
    b->value_cache = b->key_cache;
    b->new_keys = normal_floats(static_cast<std::size_t>(len * heads * dim), 1.0f, 6);
    b->new_values = normal_floats(b->new_keys.size(), 1.0f, 7);
    b->plan = plan_kv_cache_update(
        TensorView(b->key_cache.data(), cache_dtype, {1, seq, heads, dim}),
        TensorView(b->value_cache.data(), cache_dtype, {1, seq, heads, dim}),
        TensorView(b->new_keys.data(), DType::float32, {1, len, heads, dim}),
        TensorView(b->new_values.data(), DType::float32, {1, len, heads, dim}), seq - len);
    return Case{[b] { execute(b->plan); }, 2 * len * heads * dim * (4 + es)};
  };
  return w;
}

// paged_kv_write (vLLM's reshape_and_cache_flash): bfloat16 K/V (or float16, float32) into NHD
// caches, or into HND caches interleaved in one [NB, 2, H, BS, D] allocation as vLLM allocates
// them; copy or fp8.
Workload paged_write_workload(KvCacheFormat format, bool hnd, std::int64_t heads, std::int64_t dim,
                              DType input = DType::bfloat16) {
  const char* dt = input == DType::float16 ? " f16" : input == DType::float32 ? " f32" : " bf16";
  Workload w{"paged_kv_write",
             std::string(format == KvCacheFormat::copy ? "copy" : "fp8_e4m3") +
                 (hnd ? " HND-kv" : " NHD") + dt,
             std::to_string(heads) + "x" + std::to_string(dim), nullptr};
  w.make = [format, hnd, heads, dim, input](std::int64_t tokens) {
    struct Buffers {
      Bytes key, value;
      Bytes key_cache, value_cache;
      std::vector<std::int64_t> slots;
      TensorVector<float> k_scale, v_scale;
      PagedKvWritePlan plan;
    };
    auto b = std::make_shared<Buffers>();
    const std::int64_t nb = blocks_for(tokens), bs = kBlockSize, elems = heads * dim;
    const auto es = static_cast<std::int64_t>(dtype_size(input));
    const TensorVector<float> pattern = normal_floats(std::size_t{1} << 16, 2.0f, 8);
    b->key.resize(static_cast<std::size_t>(tokens * elems * es));
    if (input == DType::float32) {
      fill_tiled(reinterpret_cast<float*>(b->key.data()), b->key.size() / 4, pattern);
    } else {
      std::vector<std::uint16_t> bits(pattern.size());
      for (std::size_t i = 0; i < bits.size(); ++i) {
        bits[i] = input == DType::float16 ? formats::encode_float16(pattern[i])
                                          : formats::encode_bfloat16(pattern[i]);
      }
      fill_tiled(reinterpret_cast<std::uint16_t*>(b->key.data()), b->key.size() / 2, bits);
    }
    b->value = b->key;
    const DType cdt = format == KvCacheFormat::copy ? input : DType::uint8;
    const auto ces = static_cast<std::int64_t>(dtype_size(cdt));
    const std::int64_t block = bs * elems;
    b->key_cache.assign(static_cast<std::size_t>(nb * block * ces * (hnd ? 2 : 1)), 0);
    if (!hnd) b->value_cache = b->key_cache;
    b->slots = realistic_slots(tokens, bs, nb);
    b->k_scale.assign(static_cast<std::size_t>(heads), 0.05f);
    b->v_scale = b->k_scale;
    PagedKvWriteOptions o;
    o.format = format;
    o.k_scale = TensorView(b->k_scale.data(), DType::float32, {heads});
    o.v_scale = TensorView(b->v_scale.data(), DType::float32, {heads});
    const std::vector<std::int64_t> shape{nb, bs, heads, dim};
    const std::vector<std::int64_t> strides =
        hnd ? std::vector<std::int64_t>{2 * block, dim, bs * dim, 1}
            : std::vector<std::int64_t>{block, elems, dim, 1};
    unsigned char* kc = b->key_cache.data();
    unsigned char* vc = hnd ? kc + block * ces : b->value_cache.data();
    b->plan = plan_paged_kv_write(TensorView(b->key.data(), input, {tokens, heads, dim}),
                                  TensorView(b->value.data(), input, {tokens, heads, dim}),
                                  TensorView(kc, cdt, shape, strides),
                                  TensorView(vc, cdt, shape, strides),
                                  TensorView(b->slots.data(), DType::int64, {tokens}), o);
    // read: key and value; written: their cache rows; plus the slot mapping.
    const std::int64_t per_token = 2 * elems * (es + ces);
    return Case{[b] { execute(b->plan); }, written_tokens(tokens) * per_token + 8 * tokens};
  };
  return w;
}

// ScatterPaCache, plain scenario: one bfloat16 cache (an MLA latent cache, or K and V cached
// separately), the key side of scatter_pa_kv_cache's Norm mode.
Workload scatter_pa_cache_workload(std::int64_t heads, std::int64_t dim) {
  Workload w{"scatter_pa_cache", "plain bf16", std::to_string(heads) + "x" + std::to_string(dim),
             nullptr};
  w.make = [heads, dim](std::int64_t tokens) {
    struct Buffers {
      Bytes key;
      Bytes key_cache;
      std::vector<std::int64_t> slots;
      ScatterPaCachePlan plan;
    };
    auto b = std::make_shared<Buffers>();
    const std::int64_t row = heads * dim * 2, nb = blocks_for(tokens);
    b->key = random_bytes(static_cast<std::size_t>(tokens * row), 1);
    b->key_cache.assign(static_cast<std::size_t>(nb * kBlockSize * row), 0);
    b->slots = realistic_slots(tokens, kBlockSize, nb);
    const DType dt = DType::bfloat16;
    const TensorView cache(b->key_cache.data(), dt, {nb, kBlockSize, heads, dim});
    b->plan = plan_scatter_pa_cache(TensorView(b->key.data(), dt, {tokens, heads, dim}), cache,
                                    TensorView(b->slots.data(), DType::int64, {tokens}));
    return Case{[b] { execute(b->plan); }, written_tokens(tokens) * 2 * row + 8 * tokens};
  };
  return w;
}

// paged_cache_gather (vLLM's cp_gather_cache / gather_and_maybe_dequant_cache): MLA entries of
// 576 elements, 8 sequences in shuffled blocks, copied (bfloat16) or dequantized (fp8 -> bf16,
// or f16 or f32 with `out`).
Workload paged_gather_workload(KvCacheFormat format, DType out = DType::bfloat16) {
  const char* to = out == DType::float16 ? "f16" : out == DType::float32 ? "f32" : "bf16";
  Workload w{"paged_cache_gather",
             format == KvCacheFormat::copy ? "copy bf16" : std::string("fp8_e4m3->") + to, "e576",
             nullptr};
  w.make = [format, out](std::int64_t tokens) {
    struct Buffers {
      Bytes cache;
      Bytes dst;
      std::vector<std::int64_t> block_table, cu;
      float scale = 0.25f;
      PagedCacheGatherPlan plan;
    };
    auto b = std::make_shared<Buffers>();
    const std::int64_t entry = 576, bs = 64, seqs = std::min<std::int64_t>(8, tokens);
    const std::int64_t per_seq = (tokens + seqs - 1) / seqs, cols = (per_seq + bs - 1) / bs;
    const std::int64_t nb = std::max<std::int64_t>(kMinBlocks, seqs * cols);
    const DType sdt = format == KvCacheFormat::copy ? DType::bfloat16 : DType::uint8;
    const auto ses = static_cast<std::int64_t>(dtype_size(sdt));
    Bytes codes = random_bytes(static_cast<std::size_t>(nb * bs * entry * ses), 9);
    for (auto& c : codes) c &= 0xBF;  // finite values, no NaN codes
    b->cache.assign(codes.begin(), codes.end());
    const auto des = static_cast<std::int64_t>(dtype_size(out));
    b->dst.assign(static_cast<std::size_t>(tokens * entry * des), 0);
    std::vector<std::int64_t> order(static_cast<std::size_t>(nb));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(11));
    b->block_table.assign(order.begin(), order.begin() + seqs * cols);
    b->cu.push_back(0);
    for (std::int64_t i = 0; i < seqs; ++i) b->cu.push_back(std::min(tokens, (i + 1) * per_seq));
    PagedCacheGatherOptions o;
    o.format = format;
    o.scale = TensorView(&b->scale, DType::float32, {1});
    b->plan = plan_paged_cache_gather(TensorView(b->cache.data(), sdt, {nb, bs, entry}),
                                      TensorView(b->dst.data(), out, {tokens, entry}),
                                      TensorView(b->block_table.data(), DType::int64, {seqs, cols}),
                                      TensorView(b->cu.data(), DType::int64, {seqs + 1}), o);
    // read: the cache entries; written: the rows.
    return Case{[b] { execute(b->plan); }, tokens * entry * (ses + des)};
  };
  return w;
}

// paged_latent_write (vLLM's concat_and_cache_mla): bfloat16 kv_c [T, 512] and k_pe [T, 64]
// into a [NB, 128, E] cache: copy (E = 576), fp8_e4m3 (E = 576 bytes) or fp8_ds_mla (656 bytes).
Workload latent_workload(LatentCacheFormat format, DType input = DType::bfloat16) {
  const bool f16 = input == DType::float16;
  Workload w{"paged_latent_write",
             std::string(latent_cache_format_name(format)) + (f16 ? " f16" : " bf16"), "512+64",
             nullptr};
  w.make = [format, input, f16](std::int64_t tokens) {
    struct Buffers {
      TensorVector<std::uint16_t> kv_c, k_pe;
      Bytes cache;
      std::vector<std::int64_t> slots;
      float scale = 0.05f;
      PagedLatentWritePlan plan;
    };
    auto b = std::make_shared<Buffers>();
    const std::int64_t nb = blocks_for(tokens);
    const TensorVector<float> pattern = normal_floats(std::size_t{1} << 16, 2.0f, 10);
    std::vector<std::uint16_t> bits(pattern.size());
    for (std::size_t i = 0; i < bits.size(); ++i) {
      bits[i] = f16 ? formats::encode_float16(pattern[i]) : formats::encode_bfloat16(pattern[i]);
    }
    b->kv_c.resize(static_cast<std::size_t>(tokens * 512));
    b->k_pe.resize(static_cast<std::size_t>(tokens * 64));
    fill_tiled(b->kv_c.data(), b->kv_c.size(), bits);
    fill_tiled(b->k_pe.data(), b->k_pe.size(), bits);
    const bool ds = format == LatentCacheFormat::fp8_ds_mla;
    const DType cdt = format == LatentCacheFormat::copy ? input : DType::uint8;
    const std::int64_t entry = ds ? 656 : 576;
    const std::int64_t entry_bytes = entry * static_cast<std::int64_t>(dtype_size(cdt));
    b->cache.assign(static_cast<std::size_t>(nb * kBlockSize * entry_bytes), 0);
    b->slots = realistic_slots(tokens, kBlockSize, nb);
    PagedLatentWriteOptions o;
    o.format = format;
    o.scale = TensorView(&b->scale, DType::float32, {1});
    b->plan = plan_paged_latent_write(TensorView(b->kv_c.data(), input, {tokens, 512}),
                                      TensorView(b->k_pe.data(), input, {tokens, 64}),
                                      TensorView(b->cache.data(), cdt, {nb, kBlockSize, entry}),
                                      TensorView(b->slots.data(), DType::int64, {tokens}), o);
    // read: 576 16-bit values; written: the entry; plus the slot mapping.
    return Case{[b] { execute(b->plan); },
                written_tokens(tokens) * (576 * 2 + entry_bytes) + 8 * tokens};
  };
  return w;
}

// IndexerQuantCache: bfloat16 indexer keys (d = 128, DeepSeek's lightning indexer) quantized
// into a float8_e4m3fn (hifloat8, float4_e2m1) paged cache with their scales.
Workload indexer_workload(IndexerQuantMode mode, const char* name, std::int64_t d,
                          DType input = DType::bfloat16) {
  const bool f16 = input == DType::float16;
  Workload w{"indexer_quant_cache", std::string(name) + (f16 ? " f16" : ""), d_shape(d), nullptr};
  w.make = [mode, d, input, f16](std::int64_t tokens) {
    struct Buffers {
      TensorVector<std::uint16_t> x;
      Bytes cache, scale;
      std::vector<std::int64_t> slots;
      IndexerQuantCachePlan plan;
    };
    auto b = std::make_shared<Buffers>();
    const std::int64_t nb = blocks_for(tokens);
    const bool fp4 = mode == IndexerQuantMode::mxfp4;
    const bool mx = mode == IndexerQuantMode::mxfp8 || fp4;
    const std::int64_t scale_bytes = mx ? d / 32 : 4;
    // hifloat8 writes no scale; FP4 rows are d / 2 bytes.
    const std::int64_t scale_written = mode == IndexerQuantMode::hifloat8 ? 0 : scale_bytes;
    const std::int64_t row = fp4 ? d / 2 : d;
    const DType cdt = fp4                                  ? DType::float4_e2m1
                      : mode == IndexerQuantMode::hifloat8 ? DType::hifloat8
                                                           : DType::float8_e4m3fn;
    const TensorVector<float> pattern = normal_floats(std::size_t{1} << 16, 2.0f, 5);
    std::vector<std::uint16_t> bits(pattern.size());
    for (std::size_t i = 0; i < bits.size(); ++i) {
      bits[i] = f16 ? formats::encode_float16(pattern[i]) : formats::encode_bfloat16(pattern[i]);
    }
    b->x.resize(static_cast<std::size_t>(tokens * d));
    fill_tiled(b->x.data(), b->x.size(), bits);
    b->cache.assign(static_cast<std::size_t>(nb * kBlockSize * row), 0);
    b->scale.assign(static_cast<std::size_t>(nb * kBlockSize * scale_bytes), 0);
    b->slots = realistic_slots(tokens, kBlockSize, nb);
    IndexerQuantCacheOptions opt;
    opt.quant_mode = mode;
    b->plan = plan_indexer_quant_cache(
        TensorView(b->cache.data(), cdt, {nb, kBlockSize, 1, d}),  // FP4: elements, not bytes
        mx ? TensorView(b->scale.data(), DType::float8_e8m0, {nb, kBlockSize, 1, d / 32})
           : TensorView(b->scale.data(), DType::float32, {nb, kBlockSize, 1, 1}),
        TensorView(b->x.data(), input, {tokens, d}),
        TensorView(b->slots.data(), DType::int64, {tokens}), opt);
    // read: the 16-bit row and its slot; written: the codes and the scale(s).
    return Case{[b] { execute(b->plan); },
                written_tokens(tokens) * (2 * d + row + scale_written) + 8 * tokens};
  };
  return w;
}

// GatherPaKvCache: bfloat16 Norm caches read back into dense key/value rows; sequences of up to
// 512 tokens each in shuffled blocks, as a paged allocator leaves them.
Workload gather_workload(std::int64_t heads, std::int64_t dim) {
  Workload w{"gather_pa_kv_cache", "Norm bf16", std::to_string(heads) + "x" + std::to_string(dim),
             nullptr};
  w.make = [heads, dim](std::int64_t tokens) {
    struct Buffers {
      Bytes key_cache, value_cache;
      Bytes key, value;
      std::vector<std::int64_t> tables, lens;
      GatherPaKvCachePlan plan;
    };
    auto b = std::make_shared<Buffers>();
    const std::int64_t row = heads * dim * 2, nb = blocks_for(tokens) + 4;
    const std::int64_t seq = 512, batch = (tokens + seq - 1) / seq;
    const std::int64_t width = (seq + kBlockSize - 1) / kBlockSize;
    const Bytes pattern = random_bytes(static_cast<std::size_t>(nb * kBlockSize * row), 8);
    b->key_cache.assign(pattern.begin(), pattern.end());
    b->value_cache = b->key_cache;
    b->key.assign(static_cast<std::size_t>(tokens * row), 0);
    b->value = b->key;
    std::vector<std::int64_t> blocks(static_cast<std::size_t>(nb));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(9));
    b->tables.assign(static_cast<std::size_t>(batch * width), -1);
    std::size_t next = 0;
    for (std::int64_t i = 0; i < batch; ++i) {
      const std::int64_t len = std::min(seq, tokens - i * seq);
      b->lens.push_back(len);
      for (std::int64_t k = 0; k * kBlockSize < len; ++k) {
        b->tables[static_cast<std::size_t>(i * width + k)] = blocks[next++];
      }
    }
    const DType dt = DType::bfloat16;
    b->plan =
        plan_gather_pa_kv_cache(TensorView(b->key_cache.data(), dt, {nb, kBlockSize, heads, dim}),
                                TensorView(b->value_cache.data(), dt, {nb, kBlockSize, heads, dim}),
                                TensorView(b->tables.data(), DType::int64, {batch, width}),
                                TensorView(b->lens.data(), DType::int64, {batch}),
                                TensorView(b->key.data(), dt, {tokens, heads, dim}),
                                TensorView(b->value.data(), dt, {tokens, heads, dim}));
    // read: the cache rows and the block tables; written: the same rows.
    return Case{[b] { execute(b->plan); }, 2 * 2 * tokens * row + 8 * batch * (width + 1)};
  };
  return w;
}

std::vector<Workload> all_workloads() {
  return {
      scatter_workload("Norm", 8, 128, false),
      scatter_workload("Norm", 32, 128, false),
      scatter_workload("PA_NZ", 8, 128, false),
      scatter_workload("PA_NZ", 32, 128, false),
      scatter_workload("Norm", 1, 576, true),
      scatter_pa_cache_workload(8, 128),
      scatter_pa_cache_workload(1, 576),
      gather_workload(8, 128),
      indexer_workload(IndexerQuantMode::fp8, "fp8", 128),
      indexer_workload(IndexerQuantMode::mxfp8, "mxfp8", 128),
      indexer_workload(IndexerQuantMode::hifloat8, "hifloat8", 128),
      indexer_workload(IndexerQuantMode::mxfp4, "mxfp4", 128),
      indexer_workload(IndexerQuantMode::fp8, "fp8", 128, DType::float16),
      indexer_workload(IndexerQuantMode::mxfp8, "mxfp8", 128, DType::float16),
      indexer_workload(IndexerQuantMode::hifloat8, "hifloat8", 128, DType::float16),
      indexer_workload(IndexerQuantMode::mxfp4, "mxfp4", 128, DType::float16),
      k_scale_workload(8, 128),
      epilog_workload(QuantMode::fp8_bf16, "fp8_bf16", 576),
      epilog_workload(QuantMode::fp8_e8m0, "fp8_e8m0", 576),
      epilog_workload(QuantMode::hifloat8_fp4, "hifloat8_fp4", 576),
      update_workload(DType::float32, 8, 128),
      update_workload(DType::bfloat16, 8, 128),
      update_workload(DType::float32, 32, 128),
      update_workload(DType::bfloat16, 32, 128),
      paged_write_workload(KvCacheFormat::copy, false, 8, 128),
      paged_write_workload(KvCacheFormat::copy, true, 8, 128),
      paged_write_workload(KvCacheFormat::fp8_e4m3, false, 8, 128),
      paged_write_workload(KvCacheFormat::fp8_e4m3, true, 8, 128),
      paged_write_workload(KvCacheFormat::fp8_e4m3, false, 8, 128, DType::float16),
      paged_write_workload(KvCacheFormat::fp8_e4m3, true, 8, 128, DType::float16),
      paged_write_workload(KvCacheFormat::fp8_e4m3, false, 8, 128, DType::float32),
      paged_write_workload(KvCacheFormat::fp8_e4m3, true, 8, 128, DType::float32),
      paged_gather_workload(KvCacheFormat::copy),
      paged_gather_workload(KvCacheFormat::fp8_e4m3),
      paged_gather_workload(KvCacheFormat::fp8_e4m3, DType::float16),
      paged_gather_workload(KvCacheFormat::fp8_e4m3, DType::float32),
      latent_workload(LatentCacheFormat::copy),
      latent_workload(LatentCacheFormat::fp8_e4m3),
      latent_workload(LatentCacheFormat::fp8_e4m3, DType::float16),
      latent_workload(LatentCacheFormat::fp8_ds_mla),
      latent_workload(LatentCacheFormat::fp8_ds_mla, DType::float16),
  };
}

// The first comma-separated --ops filter that matches no workload, as an error text; "" if none.
std::string unmatched_filter(std::string& ops) {
  const std::vector<Workload> workloads = all_workloads();
  const std::vector<std::string> filters = split(ops);
  if (filters.empty()) return "expected a comma-separated list, got '" + ops + "'";
  for (const auto& f : filters) {
    if (std::none_of(workloads.begin(), workloads.end(),
                     [&](const Workload& w) { return w.id().find(f) != std::string::npos; })) {
      return "'" + f + "' matches no workload";
    }
  }
  return {};
}

// Ratio targets, 1 thread, each at its own token count: 1,024 and 4,096 tokens are in cache
// (the quantizers' and the read side's targets), 16,384 is a prefill that streams from memory.
// The quantizers' in-cache targets are for AVX-512; `avx2` is the lower one that holds for
// AVX2 and the narrower targets (0: the same). `floor` is what --quick (which measures 1, 64
// and 4,096 tokens) accepts before calling a regression: about half the target, or about half
// of what the slower of AVX-512 and AVX2 measures where that falls short of the target; the
// floors scale with `avx2` likewise, unless `narrow_floor` gives the floor of AVX2 and the
// narrower targets itself (where their kernel is a different one, far slower than AVX-512's).
// They catch a kernel that falls back to an old, slower path, not every loss a noisy run could
// hide.
struct Target {
  const char* name;
  const char* id;  // Workload::id()
  std::int64_t tokens;
  double ratio, avx2, floor;
  const char* source;
  double narrow_floor = -1;  // negative: `floor` scaled like the target
};
constexpr Target kTargets[] = {
    {"Norm scatter", "scatter_pa_kv_cache Norm bf16 8x128", 16384, 0.85, 0, 0.425,
     "performance issue"},
    {"PA_NZ scatter", "scatter_pa_kv_cache PA_NZ bf16 8x128", 16384, 0.7, 0, 0.35,
     "performance issue"},
    {"single-cache scatter", "scatter_pa_cache plain bf16 8x128", 16384, 0.85, 0, 0.425,
     "CANN family issue"},
    {"Norm gather", "gather_pa_kv_cache Norm bf16 8x128", 4096, 0.8, 0, 0.4, "CANN family issue"},
    {"indexer fp8", "indexer_quant_cache fp8 d128", 1024, 0.35, 0, 0, "quantizer issue"},
    {"indexer fp8", "indexer_quant_cache fp8 d128", 4096, 0.35, 0, 0.175, "quantizer issue"},
    {"indexer mxfp8", "indexer_quant_cache mxfp8 d128", 1024, 0.35, 0, 0, "quantizer issue"},
    {"indexer mxfp8", "indexer_quant_cache mxfp8 d128", 4096, 0.35, 0, 0.16, "quantizer issue"},
    {"indexer hifloat8", "indexer_quant_cache hifloat8 d128", 1024, 0.35, 0, 0, "quantizer issue"},
    {"indexer hifloat8", "indexer_quant_cache hifloat8 d128", 4096, 0.35, 0, 0.175,
     "quantizer issue", 0.12},
    {"indexer mxfp4", "indexer_quant_cache mxfp4 d128", 1024, 0.35, 0, 0, "quantizer issue"},
    {"indexer mxfp4", "indexer_quant_cache mxfp4 d128", 4096, 0.35, 0, 0.14, "quantizer issue",
     0.08},
    {"epilog fp8_e8m0", "kv_compress_epilog fp8_e8m0 d576", 1024, 0.35, 0.25, 0, "quantizer issue"},
    {"epilog fp8_e8m0", "kv_compress_epilog fp8_e8m0 d576", 4096, 0.35, 0.25, 0.175,
     "quantizer issue"},
    {"epilog fp8_e8m0", "kv_compress_epilog fp8_e8m0 d576", 16384, 0.8, 0, 0, "quantizer issue"},
    {"epilog fp8_bf16", "kv_compress_epilog fp8_bf16 d576", 1024, 0.35, 0.25, 0, "quantizer issue"},
    {"epilog fp8_bf16", "kv_compress_epilog fp8_bf16 d576", 4096, 0.35, 0.25, 0.175,
     "quantizer issue"},
    {"epilog fp8_bf16", "kv_compress_epilog fp8_bf16 d576", 16384, 0.8, 0, 0, "quantizer issue"},
    {"epilog hifloat8_fp4", "kv_compress_epilog hifloat8_fp4 d576", 1024, 0.2, 0.15, 0,
     "quantizer issue"},
    {"epilog hifloat8_fp4", "kv_compress_epilog hifloat8_fp4 d576", 4096, 0.2, 0.15, 0.1,
     "quantizer issue"},
    {"epilog hifloat8_fp4", "kv_compress_epilog hifloat8_fp4 d576", 16384, 0.5, 0, 0,
     "quantizer issue"},
    {"contiguous update", "kv_cache_update f32->f32 8x128", 16384, 0.8, 0, 0.4,
     "performance issue"},
    {"contiguous update, bf16 cache", "kv_cache_update f32->bf16 8x128", 16384, 0.6, 0, 0.3,
     "bench/kv_cache_update_bench.cc"},
    {"FP8 scatter with key scales", "scatter_pa_kv_cache_with_k_scale fp8_e4m3 BNBD 8x128", 1024,
     0.8, 0, 0, "quantizer issue"},
    {"FP8 scatter with key scales", "scatter_pa_kv_cache_with_k_scale fp8_e4m3 BNBD 8x128", 4096,
     0.8, 0, 0.4, "quantizer issue"},
    {"FP8 scatter with key scales", "scatter_pa_kv_cache_with_k_scale fp8_e4m3 BNBD 8x128", 16384,
     0.8, 0, 0, "quantizer issue"},
    {"paged write, copy", "paged_kv_write copy NHD bf16 8x128", 4096, 0.8, 0, 0.4,
     "vLLM operators issue"},
    {"paged write, copy, HND K/V", "paged_kv_write copy HND-kv bf16 8x128", 4096, 0.8, 0, 0.4,
     "vLLM operators issue"},
    {"paged write, fp8", "paged_kv_write fp8_e4m3 NHD bf16 8x128", 1024, 0.35, 0, 0,
     "quantizer issue"},
    {"paged write, fp8", "paged_kv_write fp8_e4m3 NHD bf16 8x128", 4096, 0.35, 0, 0.175,
     "vLLM operators issue"},
    {"paged write, fp8, HND K/V", "paged_kv_write fp8_e4m3 HND-kv bf16 8x128", 1024, 0.35, 0, 0,
     "quantizer issue"},
    {"paged write, fp8, HND K/V", "paged_kv_write fp8_e4m3 HND-kv bf16 8x128", 4096, 0.35, 0, 0.175,
     "vLLM operators issue"},
    // float16 input: floors that catch a fall back to the general paths (a quarter to a half of
    // these rows' speed); every target but the scalar one takes the float16 byte tables.
    {"paged write, fp8, f16", "paged_kv_write fp8_e4m3 NHD f16 8x128", 4096, 0.35, 0, 0.25,
     "quantizer issue"},
    {"paged write, fp8, f16 HND", "paged_kv_write fp8_e4m3 HND-kv f16 8x128", 4096, 0.35, 0, 0.22,
     "quantizer issue"},
    {"latent write, fp8, f16", "paged_latent_write fp8_e4m3 f16 512+64", 4096, 0.35, 0, 0.18,
     "quantizer issue"},
    {"indexer fp8, f16", "indexer_quant_cache fp8 f16 d128", 4096, 0.35, 0, 0.08,
     "quantizer issue"},
    {"indexer mxfp8, f16", "indexer_quant_cache mxfp8 f16 d128", 4096, 0.35, 0, 0.06,
     "quantizer issue"},
    {"indexer hifloat8, f16", "indexer_quant_cache hifloat8 f16 d128", 4096, 0.35, 0, 0.06,
     "quantizer issue"},
    {"indexer mxfp4, f16", "indexer_quant_cache mxfp4 f16 d128", 4096, 0.35, 0, 0.06,
     "quantizer issue"},
    {"paged gather, copy", "paged_cache_gather copy bf16 e576", 4096, 0.8, 0, 0.35,
     "vLLM operators issue"},
    {"paged gather, fp8 dequant", "paged_cache_gather fp8_e4m3->bf16 e576", 1024, 0.35, 0, 0,
     "quantizer issue"},
    {"paged gather, fp8 dequant", "paged_cache_gather fp8_e4m3->bf16 e576", 4096, 0.35, 0, 0.175,
     "quantizer issue"},
    {"latent write, copy", "paged_latent_write copy bf16 512+64", 4096, 0.8, 0, 0.4,
     "vLLM operators issue"},
    {"latent write, fp8", "paged_latent_write fp8_e4m3 bf16 512+64", 1024, 0.35, 0, 0,
     "quantizer issue"},
    {"latent write, fp8", "paged_latent_write fp8_e4m3 bf16 512+64", 4096, 0.35, 0, 0.175,
     "quantizer issue"},
    {"latent write, fp8_ds_mla", "paged_latent_write fp8_ds_mla bf16 512+64", 1024, 0.35, 0, 0,
     "quantizer issue"},
    {"latent write, fp8_ds_mla", "paged_latent_write fp8_ds_mla bf16 512+64", 4096, 0.35, 0, 0.17,
     "quantizer issue", 0.15},
    // float16 tiles: every target but the scalar one takes per-maximum tables.
    {"latent fp8_ds_mla, f16", "paged_latent_write fp8_ds_mla f16 512+64", 4096, 0.35, 0, 0.12,
     "quantizer issue"},
};
constexpr double kOverheadTargetUs = 2;  // decode: fixed cost per call (reported, not checked)

struct Result {
  const Workload* w;
  std::int64_t tokens, bytes;
  int threads;
  Timing t;
  double ratio() const { return t.base_best / t.op_best; }
};

int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    return CPU_COUNT(&set);
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Whether the dispatched SIMD target has 512-bit vectors (AVX3 and its successors), where the
// quantizers' AVX-512 targets apply.
bool wide_simd() { return simd_target().rfind("AVX3", 0) == 0 || simd_target() == "AVX10_2"; }

Result measure(const Workload& w, std::int64_t tokens, int threads, int reps) {
  set_num_threads(threads);
  Case c = w.make(tokens);
  c.run();  // first touch of every page, and the thread pool started
  Result r{&w, tokens, c.traffic, threads,
           time_against_memcpy(c.run, c.traffic, reps, g_opts.batch_ms / 1e3)};
  return r;
}

void print_header() {
  std::printf("%-34s %-20s %-7s %7s %3s %12s %9s %9s %7s\n", "op", "variant", "shape", "tokens",
              "thr", "time/call us", "GB/s", "memcpy", "ratio");
}

void print_row(const Result& r) {
  std::printf("%-34s %-20s %-7s %7lld %3d %12.2f %9.2f %9.2f %7.3f\n", r.w->op.c_str(),
              r.w->variant.c_str(), r.w->shape.c_str(), static_cast<long long>(r.tokens), r.threads,
              r.t.op_best * 1e6, static_cast<double>(r.bytes) / r.t.op_best / 1e9,
              static_cast<double>(r.bytes) / r.t.base_best / 1e9, r.ratio());
  std::fflush(stdout);
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

struct TargetResult {
  const Target* target;
  const Result* result;  // null when the run did not measure the workload
  double ratio;          // best of the re-measurements in --quick
  double want, floor;    // the target and floor for this run's SIMD target
};

int write_json(const std::string& path, const std::vector<Result>& results,
               const std::vector<TargetResult>& targets, const std::vector<int>& threads,
               int reps) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "bench: cannot write %s\n", path.c_str());
    return 2;
  }
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::fprintf(f, "{\n  \"version\": \"%s\",\n  \"simd_target\": \"%s\",\n", version_string(),
               simd_target().c_str());
  std::fprintf(f, "  \"simd_targets_available\": \"%s\",\n  \"cores\": %d,\n",
               simd_targets_available().c_str(), cores_available());
  std::fprintf(f, "  \"date\": \"%s\",\n  \"quick\": %s,\n  \"reps\": %d,\n", date,
               g_opts.quick ? "true" : "false", reps);
  std::fprintf(f, "  \"batch_ms\": %g,\n  \"block_size\": %lld,\n  \"threads\": [", g_opts.batch_ms,
               static_cast<long long>(kBlockSize));
  for (std::size_t i = 0; i < threads.size(); ++i) {
    std::fprintf(f, "%s%d", i ? ", " : "", threads[i]);
  }
  std::fprintf(f, "],\n  \"cpu_ghz\": %.3f,\n", estimate_clock_ghz());
  std::fprintf(f, "  \"overhead_target_us\": %g,\n  \"decode_padding\": \"1 in 8 tokens (-1)\",\n",
               kOverheadTargetUs);
  std::fprintf(f, "  \"rows\": [\n");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::fprintf(f,
                 "    {\"op\": \"%s\", \"variant\": \"%s\", \"shape\": \"%s\", \"tokens\": %lld, "
                 "\"threads\": %d, \"bytes\": %lld, \"time_us\": %.4f, \"time_us_median\": %.4f, "
                 "\"memcpy_us\": %.4f, \"memcpy_us_median\": %.4f, \"gbps\": %.4f, "
                 "\"memcpy_gbps\": %.4f, \"ratio\": %.4f, \"ratio_median\": %.4f}%s\n",
                 json_escape(r.w->op).c_str(), json_escape(r.w->variant).c_str(),
                 json_escape(r.w->shape).c_str(), static_cast<long long>(r.tokens), r.threads,
                 static_cast<long long>(r.bytes), r.t.op_best * 1e6, r.t.op_median * 1e6,
                 r.t.base_best * 1e6, r.t.base_median * 1e6,
                 static_cast<double>(r.bytes) / r.t.op_best / 1e9,
                 static_cast<double>(r.bytes) / r.t.base_best / 1e9, r.ratio(),
                 r.t.base_median / r.t.op_median, i + 1 < results.size() ? "," : "");
  }
  std::fprintf(f, "  ],\n  \"targets\": [\n");
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const TargetResult& t = targets[i];
    std::fprintf(f,
                 "    {\"name\": \"%s\", \"id\": \"%s\", \"tokens\": %lld, \"target\": %g, "
                 "\"floor\": %g, \"source\": \"%s\", \"measured\": ",
                 t.target->name, t.target->id, static_cast<long long>(t.result->tokens), t.want,
                 t.floor, t.target->source);
    if (t.result) {
      // A floor checked at another token count than the target's judges no target.
      const bool judged = t.result->tokens == t.target->tokens;
      std::fprintf(f, "%.4f, \"met\": %s}", t.ratio,
                   !judged ? "null" : t.ratio >= t.want ? "true" : "false");
    } else {
      std::fprintf(f, "null, \"met\": null}");
    }
    std::fprintf(f, "%s\n", i + 1 < targets.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
  return 0;
}

int run_sweep() {
  const Options& o = g_opts;
  const std::string tokens_text = !o.tokens.empty() ? o.tokens
                                  : o.quick         ? "1,64,4096"
                                                    : "1,4,16,64,256,1024,4096,16384";
  std::vector<std::int64_t> tokens;
  for (const auto& t : split(tokens_text)) {
    const long long v = std::stoll(t);
    if (v < 1 || v > (1 << 20)) {
      std::fprintf(stderr, "bench: token count %s out of [1, 1048576]\n", t.c_str());
      return 2;
    }
    tokens.push_back(v);
  }
  std::vector<int> threads;
  const int cores = cores_available();
  for (const auto& t : split(o.threads.empty() ? "1,all" : o.threads)) {
    const int n = t == "all" ? cores : std::stoi(t);
    if (n < 1) {
      std::fprintf(stderr, "bench: thread count %s must be >= 1 or 'all'\n", t.c_str());
      return 2;
    }
    if (std::find(threads.begin(), threads.end(), n) == threads.end()) threads.push_back(n);
  }
  const int reps = o.reps > 0 ? o.reps : o.quick ? 5 : 7;
  const std::vector<Workload> workloads = all_workloads();
  std::vector<const Workload*> selected;
  for (const auto& w : workloads) {
    bool keep = o.ops.empty();
    for (const auto& f : split(o.ops)) keep = keep || w.id().find(f) != std::string::npos;
    if (keep) selected.push_back(&w);
  }
  if (selected.empty()) {
    std::fprintf(stderr, "bench: --ops %s matches no workload\n", o.ops.c_str());
    return 2;
  }

  std::printf("kvscatter %s, SIMD %s, %d cores; block size %lld; %s\n", version_string(),
              simd_target().c_str(), cores, static_cast<long long>(kBlockSize),
              o.quick ? "quick mode" : "full sweep");
  std::printf(
      "GB/s: bytes read + written per call (keys/values/rows read, slot_mapping, scales; cache "
      "bytes written) / time.\nmemcpy: memcpy of the same bytes on as many threads, timed in "
      "alternating batches with the operator; ratio = memcpy time / operator time (best "
      "batches).\n\n");
  print_header();
  std::vector<Result> results;
  results.reserve(selected.size() * tokens.size() * threads.size());
  const double start = now_seconds();
  for (const Workload* w : selected) {
    for (std::int64_t t : tokens) {
      for (int n : threads) {
        results.push_back(measure(*w, t, n, reps));
        print_row(results.back());
      }
    }
  }
  std::printf("\nswept %zu rows in %.1f s\n", results.size(), now_seconds() - start);

  // Every target whose workload and token count this run measured with 1 thread. --quick
  // stops at 4,096 tokens: it checks the floors of the 16,384-token targets there.
  std::int64_t guard_tokens = 0;
  for (std::int64_t t : tokens) {
    if (t >= 1024) guard_tokens = std::max(guard_tokens, t);
  }
  const bool wide = wide_simd();
  std::vector<TargetResult> targets;
  int failures = 0;
  for (const Target& tg : kTargets) {
    const bool measured = std::find(tokens.begin(), tokens.end(), tg.tokens) != tokens.end();
    const std::int64_t at = measured ? tg.tokens : o.quick && tg.floor > 0 ? guard_tokens : 0;
    const Result* found = nullptr;
    for (const Result& r : results) {
      if (r.w->id() == tg.id && r.threads == 1 && r.tokens == at) found = &r;
    }
    if (!found) continue;
    if (targets.empty()) {
      std::printf("\ntargets (ratio to memcpy, 1 thread; %s)%s\n",
                  wide ? "AVX-512 targets" : "the in-cache targets of AVX2 and narrower",
                  o.quick ? "; --quick fails below the floor" : "");
    }
    const double scale = !wide && tg.avx2 > 0 ? tg.avx2 / tg.ratio : 1.0;
    const double want = tg.ratio * scale;
    const double floor = !wide && tg.narrow_floor >= 0 ? tg.narrow_floor : tg.floor * scale;
    double ratio = found->ratio();
    // A shared machine can stall any one measurement: re-measure before calling a regression.
    for (int retry = 0; o.quick && ratio < floor && retry < 2; ++retry) {
      ratio = std::max(ratio, measure(*found->w, at, 1, reps).ratio());
    }
    targets.push_back({&tg, found, ratio, want, floor});
    const bool floor_ok = ratio >= floor;
    if (o.quick && !floor_ok) ++failures;
    std::printf("  %-28s %6lld tok %7.3f  target %.2f%s  floor %.3f  %s%s\n", tg.name,
                static_cast<long long>(at), ratio, want,
                measured ? "" : (" at " + std::to_string(tg.tokens)).c_str(), floor,
                measured ? (ratio >= want ? "met" : "missed") : "floor only",
                o.quick ? (floor_ok ? "" : "  REGRESSION (below the floor)") : "");
  }
  if (!o.json.empty()) {
    const int rc = write_json(o.json, results, targets, threads, reps);
    if (rc != 0) return rc;
    std::printf("\nwrote %s\n", o.json.c_str());
  }
  set_num_threads(0);
  if (o.quick) {
    std::printf("\nregression guard: %s\n", failures ? "FAILED" : "ok");
  }
  return failures ? 1 : 0;
}

}  // namespace

void add_bench_sweep_flags(Command& app) {
  app.add_flag("--quick", g_opts.quick,
               "reduced sweep (< 60 s); exit 1 when a target ratio falls below its floor");
  app.add_option("--json", g_opts.json, "also write every row and the targets to this file");
  app.add_option("--tokens", g_opts.tokens,
                 "comma-separated token counts (default 1,4,16,64,256,1024,4096,16384; "
                 "--quick: 1,64,4096)")
      ->check(int_list(1, 1 << 20));
  app.add_option("--ops", g_opts.ops,
                 "comma-separated filters on 'op variant shape', e.g. PA_NZ,kv_cache_update")
      ->check(Validator(unmatched_filter, "FILTERS", "ops"));
  app.add_option("--threads-list", g_opts.threads, "thread counts to sweep (default 1,all)")
      ->check(int_list(1, 4096, "all"));
  app.add_option("--reps", g_opts.reps, "alternating batches per row (default 7, --quick 5)")
      ->check(Range(1, 1000));
  app.add_option("--batch-ms", g_opts.batch_ms, "length of one timed batch, ms")
      ->check(Range(0.1, 1000.0))
      ->capture_default_str();
}

int run_bench_sweep() {
  try {
    return run_sweep();
  } catch (const Error& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return 2;
  }
}

}  // namespace kvscatter::cli
