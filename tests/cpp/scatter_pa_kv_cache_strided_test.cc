// ScatterPaKvCache Norm and NHSD caches addressed through their own strides: HND-style permuted
// views, K and V interleaved in one allocation, padded slots and blocks. The optimized kernel
// must match the reference on every SIMD target at 1, 2 and 3 threads, including prefill runs of
// consecutive slots (the grouped NHSD path) and duplicate slots.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvscatter/error.h"
#include "kvscatter/runtime.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "simd_targets.h"

namespace kvscatter {
namespace {

struct Layout {
  bool nhsd, permuted, interleaved;
  std::int64_t pad;
};

std::string describe(const Layout& l, std::int64_t h, std::int64_t d, std::int64_t bs) {
  return std::string(l.nhsd ? "NHSD" : "Norm") + (l.permuted ? " permuted" : "") +
         (l.interleaved ? " interleaved" : "") + " pad=" + std::to_string(l.pad) +
         " H=" + std::to_string(h) + " D=" + std::to_string(d) + " bs=" + std::to_string(bs);
}

TEST(ScatterPaKvCacheStrided, MatchesReferenceEveryTargetAndThreadCount) {
  std::mt19937_64 rng(77);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (int iter = 0; iter < 120; ++iter) {
    const Layout l{uniform(0, 1) == 1, uniform(0, 1) == 1, uniform(0, 1) == 1, uniform(0, 3)};
    const std::int64_t H = uniform(1, 4), D = uniform(0, 1) ? 16 : uniform(1, 9);
    const std::int64_t bs = uniform(1, 5), nb = uniform(1, 4), T = uniform(0, 40);
    // The logical cache is [nb, bs, H, D] (Norm) or [nb, H, bs, D] (NHSD); "permuted" stores it
    // with the slot and head axes swapped in memory.
    const std::int64_t inner = bs * H * D + l.pad;
    const std::int64_t block_stride = l.interleaved ? 2 * inner : inner;
    const bool slot_outer = l.nhsd == l.permuted;  // the slot axis is the outer of the two
    const std::int64_t slot_stride = slot_outer ? H * D : D, head_stride = slot_outer ? D : bs * D;
    std::vector<std::int64_t> shape{nb, l.nhsd ? H : bs, l.nhsd ? bs : H, D};
    std::vector<std::int64_t> strides{block_stride, l.nhsd ? head_stride : slot_stride,
                                      l.nhsd ? slot_stride : head_stride, 1};
    std::vector<std::uint16_t> key(static_cast<std::size_t>(T * H * D)), value(key.size());
    for (auto& x : key) x = static_cast<std::uint16_t>(rng());
    for (auto& x : value) x = static_cast<std::uint16_t>(rng());
    std::vector<std::int64_t> slots(static_cast<std::size_t>(T));
    const std::int64_t start = uniform(0, nb * bs - 1);
    for (std::int64_t t = 0; t < T; ++t) {  // runs of consecutive slots, padding, repeats
      slots[static_cast<std::size_t>(t)] = uniform(0, 3) == 0   ? uniform(-1, nb * bs - 1)
                                           : uniform(0, 5) == 0 ? -1
                                                                : (start + t) % (nb * bs);
    }
    const std::size_t alloc = static_cast<std::size_t>(nb * block_stride + inner);
    std::vector<std::uint16_t> init(alloc);
    for (auto& x : init) x = static_cast<std::uint16_t>(rng());
    std::vector<std::uint16_t> vinit(alloc);
    for (auto& x : vinit) x = static_cast<std::uint16_t>(rng());
    auto call = [&](std::vector<std::uint16_t>& kbuf, std::vector<std::uint16_t>& vbuf,
                    bool reference) {
      ScatterPaKvCacheOptions o;
      if (l.nhsd) o.scatter_mode = ScatterMode::NHSD;
      std::uint16_t* vbase = l.interleaved ? kbuf.data() + inner : vbuf.data();
      const auto plan =
          plan_scatter_pa_kv_cache(TensorView(key.data(), DType::bfloat16, {T, H, D}),
                                   TensorView(value.data(), DType::bfloat16, {T, H, D}),
                                   TensorView(kbuf.data(), DType::bfloat16, shape, strides),
                                   TensorView(vbase, DType::bfloat16, shape, strides),
                                   TensorView(slots.data(), DType::int64, {T}), o);
      if (reference)
        reference::execute(plan);
      else
        execute(plan);
    };
    std::vector<std::uint16_t> rk = init, rv = vinit;
    call(rk, rv, true);
    for (std::int64_t target : simd_test::simd_targets()) {
      simd_test::PinTarget pin(target);
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        std::vector<std::uint16_t> k = init, v = vinit;
        call(k, v, false);
        ASSERT_EQ(k, rk) << describe(l, H, D, bs) << " target " << simd_test::target_name(target)
                         << " threads " << threads;
        ASSERT_EQ(v, rv) << describe(l, H, D, bs);
      }
    }
    set_num_threads(0);
  }
}

TEST(ScatterPaKvCacheStrided, InterleavedCachesSharingElementsAreRejected) {
  std::vector<std::uint16_t> key(2 * 2 * 4, 1), kv(64, 7);
  std::vector<std::int64_t> slots{0, 1};
  const std::vector<std::int64_t> shape{2, 2, 2, 4}, strides{16, 8, 4, 1};
  const auto before = kv;
  try {
    scatter_pa_kv_cache(TensorView(key.data(), DType::bfloat16, {2, 2, 4}),
                        TensorView(key.data(), DType::bfloat16, {2, 2, 4}),
                        TensorView(kv.data(), DType::bfloat16, shape, strides),
                        TensorView(kv.data() + 8, DType::bfloat16, shape, strides),
                        TensorView(slots.data(), DType::int64, {2}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("share memory; outputs of one call must not overlap"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(kv, before);
}

}  // namespace
}  // namespace kvscatter
