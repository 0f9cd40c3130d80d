// A uint8 cache larger than 2^31 elements (64-bit offsets), written at its last slot by every
// layout. The cache is an anonymous mapping: untouched pages are never materialised, so the
// test costs a few pages of memory.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kvscatter/scatter_pa_kv_cache.h"

namespace kvscatter {
namespace {

constexpr std::int64_t kHeads = 8, kHead = 128, kBlock = 128;
constexpr std::int64_t kBlocks = 16385;  // 16385 * 128 * 1024 bytes > 2^31
constexpr std::int64_t kSlots = kBlocks * kBlock;
constexpr std::int64_t kBytes = kSlots * kHeads * kHead;
static_assert(kBytes > (std::int64_t{1} << 31));

class LargeCache : public ::testing::Test {
 protected:
  void SetUp() override {
    void* p = mmap(nullptr, static_cast<std::size_t>(kBytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) GTEST_SKIP() << "cannot map " << kBytes << " bytes";
    cache_ = static_cast<std::uint8_t*>(p);
  }
  void TearDown() override {
    if (cache_ != nullptr) munmap(cache_, static_cast<std::size_t>(kBytes));
  }
  // Drops every page written so far: the mapping reads as zeros again.
  void reset() { madvise(cache_, static_cast<std::size_t>(kBytes), MADV_DONTNEED); }

  std::uint8_t* cache_ = nullptr;
};

std::vector<std::uint8_t> pattern(std::size_t n, int salt) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + 1 + salt);
  return v;
}

TEST_F(LargeCache, LastSlotInEveryLayout) {
  // Tokens: the last slot, a slot whose row starts past 2^31 bytes, and padding.
  const std::int64_t last = kSlots - 1;
  const std::int64_t mid = (std::int64_t{1} << 31) / (kHeads * kHead) + 3;
  std::vector<std::int64_t> slots = {last, -1, mid};
  const TensorView slot(slots.data(), DType::int64, {3});
  auto key = pattern(3 * kHeads * kHead, 0);
  const TensorView k(key.data(), DType::uint8, {3, kHeads, kHead});
  // A small value side (head size 1) shares the block geometry.
  std::vector<std::uint8_t> value(3 * kHeads), value_cache(kSlots * kHeads, 0);
  for (std::size_t i = 0; i < value.size(); ++i) value[i] = static_cast<std::uint8_t>(200 + i);
  const TensorView v(value.data(), DType::uint8, {3, kHeads, 1});

  const std::int64_t row = kHeads * kHead;
  for (int layout = 0; layout < 3; ++layout) {
    SCOPED_TRACE(layout);
    for (bool use_reference : {false, true}) {
      reset();
      std::fill(value_cache.begin(), value_cache.end(), 0);
      ScatterPaKvCacheOptions o;
      TensorView kc, vc;
      if (layout == 0) {  // Norm [nb, bs, NH, D]
        kc = TensorView(cache_, DType::uint8, {kBlocks, kBlock, kHeads, kHead});
        vc = TensorView(value_cache.data(), DType::uint8, {kBlocks, kBlock, kHeads, 1});
      } else if (layout == 1) {  // NHSD [nb, NH, bs, D]
        o.scatter_mode = ScatterMode::NHSD;
        kc = TensorView(cache_, DType::uint8, {kBlocks, kHeads, kBlock, kHead});
        vc = TensorView(value_cache.data(), DType::uint8, {kBlocks, kHeads, kBlock, 1});
      } else {  // PA_NZ [nb, NH*D/32, bs, 32], key only (value head size must be 32-byte aligned)
        o.cache_mode = CacheMode::PA_NZ;
        kc = TensorView(cache_, DType::uint8, {kBlocks, kHeads * kHead / 32, kBlock, 32});
      }
      const bool with_value = layout != 2;
      const auto plan = plan_scatter_pa_kv_cache(
          k, with_value ? std::optional<TensorView>(v) : std::nullopt, kc,
          with_value ? std::optional<TensorView>(vc) : std::nullopt, slot, o);
      if (use_reference)
        reference::execute(plan);
      else
        execute(plan);
      for (int t : {0, 2}) {
        const std::int64_t s = slots[t];
        const std::int64_t blk = s / kBlock, off = s % kBlock;
        for (std::int64_t e = 0; e < row; ++e) {
          const std::int64_t h = e / kHead, d = e % kHead;
          std::int64_t at = 0;
          if (layout == 0) at = s * row + e;
          if (layout == 1) at = ((blk * kHeads + h) * kBlock + off) * kHead + d;
          if (layout == 2) at = ((blk * (row / 32) + e / 32) * kBlock + off) * 32 + e % 32;
          ASSERT_EQ(cache_[at], key[t * row + e]) << "slot " << s << " element " << e;
        }
        if (with_value) {
          for (std::int64_t h = 0; h < kHeads; ++h) {
            const std::int64_t at =
                layout == 0 ? s * kHeads + h : (blk * kHeads + h) * kBlock + off;
            ASSERT_EQ(value_cache[at], value[t * kHeads + h]);
          }
        }
      }
      // The very last byte of the cache belongs to the last slot in Norm and PA_NZ.
      if (layout != 1) {
        EXPECT_EQ(cache_[kBytes - 1], key[row - 1]);
      }
      // A byte of an untouched block stays zero.
      EXPECT_EQ(cache_[kBytes / 2], 0);
    }
  }
}

TEST_F(LargeCache, CompressRunEndingAtTheLastRow) {
  // Alibi rows of 1024 bytes ([nb, bs, 1, 1024]); the run of 3 rows ends at the last slot.
  const std::int64_t d = kHeads * kHead;
  auto key = pattern(5 * d, 3);
  const TensorView k(key.data(), DType::uint8, {5, 1, d});
  std::vector<std::int32_t> seq = {5}, lens = {3}, start = {static_cast<std::int32_t>(kSlots - 3)};
  ScatterPaKvCacheOptions o;
  o.scatter_mode = ScatterMode::Alibi;
  o.seq_lens = TensorView(seq.data(), DType::int32, {1});
  o.compress_lens = TensorView(lens.data(), DType::int32, {1});
  const TensorView kc(cache_, DType::uint8, {kBlocks, kBlock, 1, d});
  scatter_pa_kv_cache(k, std::nullopt, kc, std::nullopt,
                      TensorView(start.data(), DType::int32, {1}), o);
  for (std::int64_t r = 0; r < 3; ++r) {
    for (std::int64_t e = 0; e < d; ++e) {
      ASSERT_EQ(cache_[(kSlots - 3 + r) * d + e], key[(2 + r) * d + e]);
    }
  }
}

}  // namespace
}  // namespace kvscatter
