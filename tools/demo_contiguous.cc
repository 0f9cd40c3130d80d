// `kvscatter demo`, contiguous part: a simulated decode loop on a Llama-3-8B-like model
// (32 layers, 8 KV heads of 128, bfloat16 caches). A batch of prompts is prefilled, then tokens
// are generated one at a time; every layer's K/V goes through one validated plan per step,
// executed per layer with the layer's cache pointers. The final caches are checked against the
// reference kernel replaying the same writes.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cli.h"
#include "kvscatter/kv_cache_update.h"
#include "kvscatter/runtime.h"
#include "measure.h"

namespace kvscatter::cli {
namespace {

struct Config {
  int layers = 32, heads = 8, head_size = 128, batch = 4, prompt = 128, generate = 64;
  std::string dtype = "bfloat16";
};
Config g_cfg;

struct Model {
  Config c;
  DType dtype;
  std::int64_t seq;
  std::vector<std::vector<std::uint8_t>> k, v;  // per layer (B, S, H, D)
  Model(const Config& cfg, DType dt) : c(cfg), dtype(dt), seq(cfg.prompt + cfg.generate) {
    const auto bytes = static_cast<std::size_t>(c.batch * seq * c.heads * c.head_size) *
                       dtype_size(dtype);
    k.assign(static_cast<std::size_t>(c.layers), std::vector<std::uint8_t>(bytes, 0));
    v = k;
  }
  TensorView cache(std::vector<std::uint8_t>& buf) {
    return TensorView(buf.data(), dtype, {c.batch, seq, c.heads, c.head_size});
  }
};

// Deterministic float32 activations: a pool sliced differently per layer and step.
struct Activations {
  std::vector<float> pool;
  explicit Activations(std::size_t n) : pool(n + 4096) {
    std::mt19937 rng(2024);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : pool) x = nd(rng);
  }
  float* at(int layer, int step, int which) {
    return pool.data() + (static_cast<std::size_t>(layer) * 131 + static_cast<std::size_t>(step) * 17 +
                          static_cast<std::size_t>(which) * 1031) % 4096;
  }
};

// Runs prefill + decode on `m`; `use_reference` replays it with the reference kernel.
double run(Model& m, Activations& act, bool use_reference, double* prefill_s) {
  const Config& c = m.c;
  double decode_s = 0;
  for (int step = 0; step <= c.generate; ++step) {
    const std::int64_t len = step == 0 ? c.prompt : 1;
    const std::int64_t pos = step == 0 ? 0 : c.prompt + step - 1;
    const double t0 = now_seconds();
    KvCacheUpdatePlan plan = plan_kv_cache_update(
        m.cache(m.k[0]), m.cache(m.v[0]),
        TensorView(act.at(0, step, 0), DType::float32, {c.batch, len, c.heads, c.head_size}),
        TensorView(act.at(0, step, 1), DType::float32, {c.batch, len, c.heads, c.head_size}), pos);
    for (int layer = 0; layer < c.layers; ++layer) {
      plan.key_cache.data = m.k[static_cast<std::size_t>(layer)].data();
      plan.value_cache.data = m.v[static_cast<std::size_t>(layer)].data();
      plan.new_keys.data = act.at(layer, step, 0);
      plan.new_values.data = act.at(layer, step, 1);
      if (use_reference) {
        reference::execute(plan);
      } else {
        execute(plan);
      }
    }
    const double dt = now_seconds() - t0;
    (step == 0 ? *prefill_s : decode_s) += dt;
  }
  return decode_s;
}

bool demo() {
  const Config& c = g_cfg;
  const auto dtype = dtype_from_name(c.dtype);
  if (!dtype || (*dtype != DType::bfloat16 && *dtype != DType::float16 &&
                 *dtype != DType::float32)) {
    std::printf("contiguous demo: --cache-dtype must be float32, bfloat16 or float16\n");
    return false;
  }
  std::printf("== contiguous KV cache: %d layers, %d KV heads x %d, %s cache, batch %d, "
              "prompt %d, generate %d, %d threads, %s ==\n",
              c.layers, c.heads, c.head_size, c.dtype.c_str(), c.batch, c.prompt, c.generate,
              get_num_threads(), simd_target().c_str());
  const std::size_t tokens = static_cast<std::size_t>(c.batch) * static_cast<std::size_t>(c.prompt);
  Activations act(tokens * static_cast<std::size_t>(c.heads * c.head_size));
  Model fast(c, *dtype), ref(c, *dtype);
  double prefill_s = 0, ref_prefill = 0;
  const double decode_s = run(fast, act, false, &prefill_s);
  run(ref, act, true, &ref_prefill);
  const bool ok = fast.k == ref.k && fast.v == ref.v;

  const double elems_per_token = 2.0 * c.layers * c.heads * c.head_size;  // K and V, all layers
  const double bytes_per_elem = 4.0 + static_cast<double>(dtype_size(*dtype));  // read + write
  const double prefill_bytes = elems_per_token * c.batch * c.prompt * bytes_per_elem;
  const double decode_bytes = elems_per_token * c.batch * c.generate * bytes_per_elem;
  MemcpyBaseline prefill_copy(static_cast<std::size_t>(prefill_bytes / c.layers / 2));
  const double memcpy_prefill = prefill_copy.seconds() * c.layers * 2;
  MemcpyBaseline step_copy(static_cast<std::size_t>(elems_per_token * c.batch * bytes_per_elem /
                                                    c.layers / 2));
  const double memcpy_step = step_copy.seconds(7, 200) * c.layers * 2;
  std::printf("prefill: %d tokens in %.3f ms, %.2f GB/s, %.2fx memcpy of the same bytes\n",
              c.batch * c.prompt, prefill_s * 1e3, prefill_bytes / prefill_s / 1e9,
              memcpy_prefill / prefill_s);
  {
    const double per_step = decode_s / c.generate;
    std::printf("decode:  %.0f tokens/s (%d sequences), %.2f us per step for %d layers, "
                "%.2f GB/s, %.2fx memcpy of the same bytes\n",
                c.batch * c.generate / decode_s, c.batch, per_step * 1e6, c.layers,
                decode_bytes / decode_s / 1e9, memcpy_step / per_step);
  }
  std::printf("verify:  final caches %s the reference kernel (%zu bytes per cache per layer)\n",
              ok ? "match" : "DIFFER FROM", fast.k[0].size());
  return ok;
}

// The caches of both runs stay within a few GiB (and every product within int).
void check_options() {
  const Config& c = g_cfg;
  const std::int64_t elems =
      std::int64_t{c.layers} * c.batch * (c.prompt + c.generate) * c.heads * c.head_size;
  if (elems > (std::int64_t{1} << 28)) {
    throw UsageError(
        "--layers x --batch x (--prompt + --generate) x --kv-heads x --head-size",
        std::to_string(elems) + " cache elements, more than the demo's limit of 268435456");
  }
}

const RegisterDemo kRegister{DemoPart{
    "contiguous", 10,
    [](Command& app) {
      app.add_option("--layers", g_cfg.layers, "model layers")->check(Range(1, 1024));
      app.add_option("--kv-heads", g_cfg.heads, "KV heads")->check(Range(1, 1024));
      app.add_option("--head-size", g_cfg.head_size, "head size")->check(Range(1, 4096));
      app.add_option("--batch", g_cfg.batch, "sequences")->check(Range(1, 4096));
      app.add_option("--prompt", g_cfg.prompt, "prompt tokens")->check(Range(1, 1 << 20));
      app.add_option("--generate", g_cfg.generate, "generated tokens")->check(Range(1, 1 << 20));
      app.add_option("--cache-dtype", g_cfg.dtype, "float32 | bfloat16 | float16")
          ->check(IsMember({"float32", "bfloat16", "float16"}));
    },
    demo, check_options}};

}  // namespace
}  // namespace kvscatter::cli
