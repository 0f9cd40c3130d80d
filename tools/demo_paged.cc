// `kvscatter demo`, paged part: an engine-style loop over a block allocator. Sequences arrive,
// prefill, decode one token per step and finish; each step's slot_mapping is padded with -1 to
// a fixed bucket size (as a graph-captured engine does), validated once (plan) and executed for
// every layer, into Norm [blocks, block_size, heads, head_size] caches and PA_NZ
// [blocks, heads*head_size/16, block_size, 16] caches. Every step is checked against the
// reference kernel, and at the end every live sequence is read back through its block table
// with gather_pa_kv_cache and checked.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <list>
#include <random>
#include <vector>

#include "cli.h"
#include "kvscatter/error.h"
#include "kvscatter/gather_pa_kv_cache.h"
#include "kvscatter/scatter_pa_kv_cache.h"

namespace kvscatter::cli {
namespace {

struct Options {
  std::int64_t layers = 4, heads = 4, head_size = 64, block_size = 16, blocks = 96;
  std::int64_t steps = 40, max_seqs = 6;
  std::uint64_t seed = 1;
};
Options g_opts;
// Sequence lengths the engine draws: a prompt of 3..kMaxPrompt tokens, then 4..kMaxGenerate more.
constexpr std::int64_t kMaxPrompt = 40, kMaxGenerate = 30, kMaxSequence = kMaxPrompt + kMaxGenerate;

// Deterministic key/value bytes of (layer, sequence, position, side).
std::uint8_t token_byte(std::int64_t layer, std::int64_t seq, std::int64_t pos, int side,
                        std::int64_t i) {
  std::uint64_t x =
      static_cast<std::uint64_t>((((layer * 1000003 + seq) * 1000033 + pos) * 2 + side)) *
          0x9E3779B97F4A7C15ull +
      static_cast<std::uint64_t>(i) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  return static_cast<std::uint8_t>(x >> 56);
}

struct Sequence {
  std::int64_t id = 0, len = 0, target = 0;
  std::vector<std::int64_t> blocks;  // block table
};

class Engine {
 public:
  explicit Engine(const Options& o) : o_(o), rng_(o.seed) {
    row_ = o.heads * o.head_size * 2;  // bytes per token (bfloat16)
    const std::size_t cache = static_cast<std::size_t>(o.blocks * o.block_size * row_);
    for (auto* set : {&norm_, &nz_, &norm_ref_, &nz_ref_}) {
      set->assign(static_cast<std::size_t>(o.layers * 2), std::vector<std::uint8_t>(cache, 0));
    }
    // A fragmented free list, as after a while of serving.
    for (std::int64_t b = 0; b < o.blocks; ++b) free_.push_back(b);
    std::shuffle(free_.begin(), free_.end(), rng_);
  }

  bool run() {
    std::int64_t next_id = 0, written = 0, padded = 0, calls = 0;
    for (std::int64_t step = 0; step < o_.steps; ++step) {
      // Admit new sequences while blocks remain; each arrives with its prompt (prefill).
      std::vector<std::pair<Sequence*, std::int64_t>> batch;  // (sequence, first new position)
      std::vector<std::int64_t> new_tokens;
      while (static_cast<std::int64_t>(live_.size()) < o_.max_seqs && step % 5 == 0) {
        Sequence s;
        s.id = next_id++;
        const std::int64_t prompt =
            std::uniform_int_distribution<std::int64_t>(3, kMaxPrompt)(rng_);
        s.target = prompt + std::uniform_int_distribution<std::int64_t>(4, kMaxGenerate)(rng_);
        if (!reserve(s, prompt)) break;
        s.len = prompt;
        live_.push_back(s);
        batch.push_back({&live_.back(), 0});
        new_tokens.push_back(prompt);
      }
      // Decode: every other live sequence appends one token.
      for (Sequence& s : live_) {
        if (std::any_of(batch.begin(), batch.end(), [&](auto& b) { return b.first == &s; }))
          continue;
        if (!reserve(s, s.len + 1)) continue;  // out of blocks: skip this step
        batch.push_back({&s, s.len});
        new_tokens.push_back(1);
        ++s.len;
      }
      std::int64_t tokens = 0;
      for (auto n : new_tokens) tokens += n;
      if (tokens == 0) continue;
      const std::int64_t bucket = std::max<std::int64_t>(8, (tokens + 7) / 8 * 8);
      if (!scatter_step(batch, new_tokens, bucket)) return false;
      written += tokens;
      padded += bucket - tokens;
      calls += 2 * o_.layers;
      // Finished sequences return their blocks.
      for (auto it = live_.begin(); it != live_.end();) {
        if (it->len >= it->target) {
          for (auto b : it->blocks) free_.push_back(b);
          it = live_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (written == 0) {
      std::printf("paged demo: no token was written in %lld steps\n",
                  static_cast<long long>(o_.steps));
      return false;
    }
    const bool gathered = gather_check(live_);
    std::printf(
        "paged demo: %lld layers, %lld steps, %lld sequences (%zu live), %lld tokens "
        "written with %lld padding slots, %lld calls (one plan per step and layout, executed per "
        "layer; key and value per call)\n",
        static_cast<long long>(o_.layers), static_cast<long long>(o_.steps),
        static_cast<long long>(next_id), live_.size(), static_cast<long long>(written),
        static_cast<long long>(padded), static_cast<long long>(calls));
    std::printf("  every step matches the reference kernel byte for byte: yes\n");
    std::printf("  every live sequence gathered back through its block table with gather_pa_kv_cache "
        "(Norm and PA_NZ): %s\n",
                gathered ? "yes" : "NO");
    return gathered;
  }

 private:
  // Makes sure s has blocks for `len` tokens.
  bool reserve(Sequence& s, std::int64_t len) {
    const std::int64_t need = (len + o_.block_size - 1) / o_.block_size;
    if (need - static_cast<std::int64_t>(s.blocks.size()) >
        static_cast<std::int64_t>(free_.size())) {
      return false;
    }
    while (static_cast<std::int64_t>(s.blocks.size()) < need) {
      s.blocks.push_back(free_.back());
      free_.pop_back();
    }
    return true;
  }

  std::int64_t slot_of(const Sequence& s, std::int64_t pos) const {
    return s.blocks[static_cast<std::size_t>(pos / o_.block_size)] * o_.block_size +
           pos % o_.block_size;
  }

  bool scatter_step(const std::vector<std::pair<Sequence*, std::int64_t>>& batch,
                    const std::vector<std::int64_t>& counts, std::int64_t bucket) {
    std::vector<std::int64_t> slots(static_cast<std::size_t>(bucket), -1);  // padding
    std::vector<std::vector<std::uint8_t>> keys(
        static_cast<std::size_t>(o_.layers * 2),
        std::vector<std::uint8_t>(static_cast<std::size_t>(bucket * row_), 0));
    std::int64_t t = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const Sequence& s = *batch[i].first;
      for (std::int64_t k = 0; k < counts[i]; ++k, ++t) {
        const std::int64_t pos = batch[i].second + k;
        slots[static_cast<std::size_t>(t)] = slot_of(s, pos);
        for (std::int64_t l = 0; l < o_.layers; ++l) {
          for (int side = 0; side < 2; ++side) {
            auto& buf = keys[static_cast<std::size_t>(l * 2 + side)];
            for (std::int64_t b = 0; b < row_; ++b)
              buf[t * row_ + b] = token_byte(l, s.id, pos, side, b);
          }
        }
      }
    }
    const std::int64_t h = o_.heads, d = o_.head_size, nb = o_.blocks, bs = o_.block_size;
    auto view = [&](std::vector<std::uint8_t>& v, std::initializer_list<std::int64_t> shape) {
      return TensorView(v.data(), DType::bfloat16, shape);
    };
    const TensorView slot(slots.data(), DType::int64, {bucket});
    for (int layout = 0; layout < 2; ++layout) {
      auto& caches = layout == 0 ? norm_ : nz_;
      auto& refs = layout == 0 ? norm_ref_ : nz_ref_;
      ScatterPaKvCacheOptions opt;
      if (layout == 1) opt.cache_mode = CacheMode::PA_NZ;
      auto cache_view = [&](std::vector<std::uint8_t>& v) {
        return layout == 0 ? view(v, {nb, bs, h, d}) : view(v, {nb, h * d / 16, bs, 16});
      };
      // Validate once for the step's shapes, then execute every layer by rebinding pointers.
      ScatterPaKvCachePlan plan =
          plan_scatter_pa_kv_cache(view(keys[0], {bucket, h, d}), view(keys[1], {bucket, h, d}),
                                   cache_view(caches[0]), cache_view(caches[1]), slot, opt);
      for (std::int64_t l = 0; l < o_.layers; ++l) {
        const auto k = static_cast<std::size_t>(l * 2), v = k + 1;
        plan.key.data = keys[k].data();
        plan.value->data = keys[v].data();
        plan.key_cache.data = caches[k].data();
        plan.value_cache->data = caches[v].data();
        execute(plan);
        plan.key_cache.data = refs[k].data();
        plan.value_cache->data = refs[v].data();
        reference::execute(plan);
        if (caches[k] != refs[k] || caches[v] != refs[v]) {
          std::printf("paged demo: layer %lld %s cache differs from the reference\n",
                      static_cast<long long>(l), layout == 0 ? "Norm" : "PA_NZ");
          return false;
        }
      }
    }
    return true;
  }

  // Gathers every live sequence back through its block table with gather_pa_kv_cache, from
  // both layouts and every layer (one plan per layout, rebound per layer), and checks each
  // token's bytes.
  bool gather_check(const std::list<Sequence>& seqs) {
    if (seqs.empty()) return true;
    const std::int64_t h = o_.heads, d = o_.head_size, nb = o_.blocks, bs = o_.block_size;
    std::int64_t width = 0, total = 0;
    for (const Sequence& s : seqs) {
      width = std::max(width, static_cast<std::int64_t>(s.blocks.size()));
      total += s.len;
    }
    const auto batch = static_cast<std::int64_t>(seqs.size());
    std::vector<std::int64_t> tables(static_cast<std::size_t>(batch * width), -1), lens;
    std::int64_t b = 0;
    for (const Sequence& s : seqs) {
      std::copy(s.blocks.begin(), s.blocks.end(), tables.begin() + b++ * width);
      lens.push_back(s.len);
    }
    std::vector<std::uint8_t> key(static_cast<std::size_t>(total * row_)), value(key.size());
    auto view = [](std::vector<std::uint8_t>& v, std::initializer_list<std::int64_t> shape) {
      return TensorView(v.data(), DType::bfloat16, shape);
    };
    for (int layout = 0; layout < 2; ++layout) {
      auto& caches = layout == 0 ? norm_ : nz_;
      GatherPaKvCacheOptions opt;
      opt.cache_mode = layout == 0 ? CacheMode::Norm : CacheMode::PA_NZ;
      auto cache_view = [&](std::vector<std::uint8_t>& v) {
        return layout == 0 ? view(v, {nb, bs, h, d}) : view(v, {nb, h * d / 16, bs, 16});
      };
      auto out_view = [&](std::vector<std::uint8_t>& v) {
        return layout == 0 ? view(v, {total, h, d}) : view(v, {total, h * d});
      };
      GatherPaKvCachePlan plan = plan_gather_pa_kv_cache(
          cache_view(caches[0]), cache_view(caches[1]),
          TensorView(tables.data(), DType::int64, {batch, width}),
          TensorView(lens.data(), DType::int64, {batch}), out_view(key), out_view(value), opt);
      for (std::int64_t l = 0; l < o_.layers; ++l) {
        plan.key_cache.data = caches[static_cast<std::size_t>(l * 2)].data();
        plan.value_cache->data = caches[static_cast<std::size_t>(l * 2 + 1)].data();
        execute(plan);
        if (!tokens_match(seqs, l, key, 0) || !tokens_match(seqs, l, value, 1)) return false;
      }
    }
    return true;
  }

  // Row r of `rows` holds token r of the sequences laid end to end.
  bool tokens_match(const std::list<Sequence>& seqs, std::int64_t layer,
                    const std::vector<std::uint8_t>& rows, int side) const {
    std::int64_t r = 0;
    for (const Sequence& s : seqs) {
      for (std::int64_t pos = 0; pos < s.len; ++pos, ++r) {
        for (std::int64_t i = 0; i < row_; ++i) {
          if (rows[static_cast<std::size_t>(r * row_ + i)] != token_byte(layer, s.id, pos, side, i))
            return false;
        }
      }
    }
    return true;
  }

  Options o_;
  std::mt19937_64 rng_;
  std::int64_t row_ = 0;
  std::vector<std::int64_t> free_;
  std::list<Sequence> live_;  // stable addresses: a step's batch points into it
  std::vector<std::vector<std::uint8_t>> norm_, nz_, norm_ref_, nz_ref_;  // [layer * 2 + side]
};

// The cache must hold one sequence of the longest kind (so that the demo writes tokens), and all
// caches stay within a few GiB.
void check_options() {
  const Options& o = g_opts;
  if (o.blocks * o.block_size < kMaxSequence) {
    throw UsageError("--paged-blocks x --paged-block-size",
                     std::to_string(o.blocks * o.block_size) +
                         " cache slots, fewer than one sequence needs (" +
                         std::to_string(kMaxSequence) + ")");
  }
  if (o.layers * o.blocks * o.block_size > (std::int64_t{1} << 20)) {
    throw UsageError(
        "--paged-layers x --paged-blocks x --paged-block-size",
        std::to_string(o.layers * o.blocks * o.block_size) + " layer slots, more than 1048576");
  }
}

const RegisterDemo kRegister{DemoPart{
    "paged", 20,
    [](Command& app) {
      using I = std::int64_t;
      app.add_option("--paged-layers", g_opts.layers, "paged demo: layers")
          ->check(Range(I{1}, I{256}))
          ->capture_default_str();
      app.add_option("--paged-steps", g_opts.steps, "paged demo: engine steps")
          ->check(Range(I{1}, I{1} << 20))
          ->capture_default_str();
      app.add_option("--paged-seqs", g_opts.max_seqs, "paged demo: concurrent sequences")
          ->check(Range(I{1}, I{4096}))
          ->capture_default_str();
      app.add_option("--paged-blocks", g_opts.blocks, "paged demo: cache blocks")
          ->check(Range(I{1}, I{1} << 20))
          ->capture_default_str();
      app.add_option("--paged-block-size", g_opts.block_size, "paged demo: block size")
          ->check(Range(I{1}, I{4096}))
          ->capture_default_str();
      app.add_option("--paged-seed", g_opts.seed, "paged demo: random seed")
          ->check(int_list(0, INT64_MAX))
          ->capture_default_str();
    },
    [] {
      if (g_opts.heads * g_opts.head_size % 16 != 0) return false;
      try {
        return Engine(g_opts).run();
      } catch (const Error& e) {
        std::printf("paged demo: error %d: %s\n", static_cast<int>(e.status()), e.what());
        return false;
      }
    },
    check_options}};

}  // namespace
}  // namespace kvscatter::cli
