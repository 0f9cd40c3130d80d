// An independent model of which cache bytes a scatter_pa_kv_cache call may write, over the
// harness's generated cases: every byte outside the destination rows is unchanged, and in the slot
// modes each slot holds its last writer's row (heads in order, the Norm, NHSD and PA_NZ layouts
// undone by the model rather than by the library's own addressing).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "harness/scatter_pa_kv_cache_cases.h"

namespace kvscatter::harness {
namespace {

struct Side {
  const TensorRef* input;
  const TensorRef* cache;
  std::int64_t head_size;
};

// Rows a compress run writes, as the model states it: the window for Alibi; for Rope and Omni the
// prefix, the mean row (Rope) and the suffix, or the whole sequence when nothing is compressed.
std::int64_t run_rows(ScatterMode mode, std::int64_t l, std::int64_t w, std::int64_t o) {
  if (mode == ScatterMode::Alibi) return w;
  if (o == -1 || w == 0 || o == l) return l;
  return mode == ScatterMode::Omni ? l - w : l - w + 1;
}

// Marks the bytes of every destination row of one cache; in the slot modes also returns, per slot,
// the last token writing it.
std::vector<std::uint8_t> mark_written(const Case& c, const ScatterPaKvCacheCall& call,
                                       const ScatterPaKvCachePlan& p, const Side& side,
                                       std::vector<std::int64_t>& last_writer) {
  const TensorRef& cache = *side.cache;
  const auto es = static_cast<std::int64_t>(dtype_size(cache.dtype));
  const std::int64_t d = side.head_size, bs = p.block_size, nh = p.num_heads;
  const std::int64_t bstride = cache.strides[0] * es;
  std::vector<std::uint8_t> mask(c.buffers[static_cast<std::size_t>(cache.buffer)].size(), 0);
  auto mark = [&](std::int64_t off, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) mask[cache.offset + static_cast<std::size_t>(off + i)] = 1;
  };
  auto block_at = [&](std::int64_t s) { return (s / bs) * bstride; };
  last_writer.assign(static_cast<std::size_t>(p.num_slots), -1);
  if (call.seq_lens) {
    for (std::int64_t i = 0; i < p.batch * nh; ++i) {
      const std::int64_t l = read_index(c, *call.seq_lens, i / nh);
      const std::int64_t w = read_index(c, *call.compress_lens, i);
      const std::int64_t o =
          call.compress_seq_offsets ? read_index(c, *call.compress_seq_offsets, i) : 0;
      const std::int64_t start = read_index(c, call.slot_mapping, i);
      if (start < 0) continue;
      for (std::int64_t r = start; r < start + run_rows(p.scatter_mode, l, w, o); ++r) {
        mark(block_at(r) + (r % bs) * d * es, d * es);
      }
    }
    return mask;
  }
  for (std::int64_t t = 0; t < p.num_tokens; ++t) {
    const std::int64_t s = read_index(c, call.slot_mapping, t);
    if (s < 0) continue;
    last_writer[static_cast<std::size_t>(s)] = t;
    const std::int64_t o = s % bs;
    if (p.cache_mode == CacheMode::PA_NZ) {
      for (std::int64_t k = 0; k < nh * d * es / 32; ++k)
        mark(block_at(s) + k * bs * 32 + o * 32, 32);
    } else if (p.scatter_mode == ScatterMode::NHSD) {
      for (std::int64_t h = 0; h < nh; ++h)
        mark(block_at(s) + h * bs * d * es + o * d * es, d * es);
    } else {
      mark(block_at(s) + o * nh * d * es, nh * d * es);
    }
  }
  return mask;
}

// Byte `e` of head `h` of slot `s`'s row in the cache, as the layouts define it.
std::int64_t cache_byte(const ScatterPaKvCachePlan& p, const TensorRef& cache, std::int64_t d,
                        std::int64_t s, std::int64_t h, std::int64_t e) {
  const auto es = static_cast<std::int64_t>(dtype_size(cache.dtype));
  const std::int64_t bs = p.block_size;
  std::int64_t at = (s / bs) * cache.strides[0] * es;
  if (p.cache_mode == CacheMode::PA_NZ) {
    const std::int64_t f = h * d * es + e;
    return at + (f / 32) * bs * 32 + (s % bs) * 32 + f % 32;
  }
  if (p.scatter_mode == ScatterMode::NHSD) return at + h * bs * d * es + (s % bs) * d * es + e;
  return at + (s % bs) * p.num_heads * d * es + h * d * es + e;
}

TEST(ScatterPaKvCacheGuard, EveryByteOutsideTheWrittenRowsIsUnchanged) {
  const std::uint64_t seed = base_seed();
  for (std::uint64_t i = 0; i < 150; ++i) {
    std::seed_seq sq{seed, std::uint64_t{11}, i};
    std::mt19937_64 rng(sq);
    const ScatterPaKvCacheCase sc = scatter_pa_kv_cache_case(rng);
    if (sc.c.expect_error) continue;
    SCOPED_TRACE(::testing::Message()
                 << "case " << i << " '" << sc.c.name << "' (KVSCATTER_TEST_SEED=" << seed << ")");
    std::vector<std::vector<std::uint8_t>> after = sc.c.buffers;
    std::vector<std::uint8_t*> data;
    for (auto& b : after) data.push_back(b.data());
    sc.c.run(data, false);
    const ScatterPaKvCachePlan p = sc.call.plan(data);
    std::vector<Side> sides{{&sc.call.key, &sc.call.key_cache, p.key_head_size}};
    if (sc.call.value) sides.push_back({&*sc.call.value, &*sc.call.value_cache, p.value_head_size});
    for (const Side& side : sides) {
      const auto& before = sc.c.buffers[static_cast<std::size_t>(side.cache->buffer)];
      const auto& now = after[static_cast<std::size_t>(side.cache->buffer)];
      std::vector<std::int64_t> last;
      const std::vector<std::uint8_t> mask = mark_written(sc.c, sc.call, p, *&side, last);
      std::size_t changed_outside = 0;
      for (std::size_t b = 0; b < mask.size(); ++b) {
        changed_outside += mask[b] == 0 && before[b] != now[b];
      }
      EXPECT_EQ(changed_outside, 0u)
          << (side.cache == &sc.call.key_cache ? "key" : "value") << "_cache";
      if (sc.call.seq_lens || p.scatter_mode == ScatterMode::Nct) continue;
      const TensorRef& in = *side.input;
      const auto& src = sc.c.buffers[static_cast<std::size_t>(in.buffer)];
      const auto es = static_cast<std::int64_t>(dtype_size(in.dtype));
      for (std::int64_t s = 0; s < static_cast<std::int64_t>(last.size()); ++s) {
        const std::int64_t t = last[static_cast<std::size_t>(s)];
        if (t < 0) continue;
        for (std::int64_t h = 0; h < p.num_heads; ++h) {
          for (std::int64_t e = 0; e < side.head_size * es; ++e) {
            const std::uint8_t want =
                src[in.offset +
                    static_cast<std::size_t>((t * in.strides[0] + h * in.strides[1]) * es + e)];
            const std::int64_t at = cache_byte(p, *side.cache, side.head_size, s, h, e);
            ASSERT_EQ(now[side.cache->offset + static_cast<std::size_t>(at)], want)
                << "slot " << s << " token " << t << " head " << h << " byte " << e;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvscatter::harness
