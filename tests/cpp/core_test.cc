#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/index.h"
#include "core/slots.h"
#include "core/streaming.h"
#include "kvscatter/dtype.h"
#include "kvscatter/runtime.h"
#include "kvscatter/tensor.h"
#include "kvscatter/version.h"
#include "runtime/parallel.h"
#include "simd_targets.h"
#include "testing.h"

namespace kvscatter {
namespace {

TEST(DType, NamesRoundTripAndSizes) {
  const char* names[] = {"float32",  "float16",     "bfloat16",      "int8",        "uint8",
                         "int16",    "uint16",      "int32",         "uint32",      "int64",
                         "hifloat8", "float8_e5m2", "float8_e4m3fn", "float8_e8m0", "float4_e2m1",
                         "float4_e1m2"};
  const int bits[] = {32, 16, 16, 8, 8, 16, 16, 32, 32, 64, 8, 8, 8, 8, 4, 4};
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto d = static_cast<DType>(i);
    EXPECT_EQ(dtype_name(d), names[i]);
    EXPECT_EQ(dtype_from_name(names[i]), d);
    EXPECT_EQ(dtype_bits(d), bits[i]);
    EXPECT_EQ(dtype_size(d), static_cast<std::size_t>((bits[i] + 7) / 8));
  }
  EXPECT_FALSE(dtype_from_name("float8").has_value());
  EXPECT_FALSE(dtype_from_name("Float32").has_value());
  EXPECT_TRUE(dtype_is_floating(DType::hifloat8));
  EXPECT_FALSE(dtype_is_floating(DType::uint8));
}

TEST(TensorView, ContiguousStridesAndNumel) {
  float x = 0;
  TensorView t(&x, DType::float32, {2, 3, 4});
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.describe(), "[2, 3, 4] float32");
  const std::int64_t shape[] = {2, 3}, strides[] = {4, 1};
  EXPECT_FALSE(TensorView(&x, DType::float32, shape, strides).is_contiguous());
  // Caches over 2^31 elements are described with 64-bit extents.
  TensorView big(nullptr, DType::uint8, {1LL << 20, 1LL << 12});
  EXPECT_EQ(big.numel(), 1LL << 32);
}

TEST(TensorView, Rejections) {
  const std::int64_t nine[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  testing::expect_error([&] { TensorView(nullptr, DType::float32, nine); },
                        Status::invalid_parameter, {"rank must be <= 8", "got 9"});
  testing::expect_error(
      [&] {
        TensorView(nullptr, DType::float32, {2, -1});
      },
      Status::invalid_parameter, {"shape[1] must be >= 0, got -1"});
  testing::expect_error(
      [&] {
        TensorView(nullptr, DType::uint8, {1LL << 40, 1LL << 40}).numel();
      },
      Status::invalid_parameter, {"overflows 64 bits"});
}

TEST(Check, IndexAndOverflow) {
  std::int32_t i32[] = {5, -1, 7};
  std::int64_t i64[] = {1LL << 40, -1};
  EXPECT_EQ(detail::IndexReader(TensorView(i32, DType::int32, {3}))[2], 7);
  EXPECT_EQ(detail::IndexReader(TensorView(i64, DType::int64, {2}))[0], 1LL << 40);
  // Any rank, any strides, row-major order: a transposed [2, 3] view of six int32 values.
  std::int32_t m[] = {0, 1, 2, 3, 4, 5};
  const std::array<std::int64_t, 2> shape{2, 3}, strides{1, 2};
  const TensorView t(m, DType::int32, shape, strides);
  std::vector<std::int64_t> all;
  detail::read_indices(t, all);
  EXPECT_EQ(all, (std::vector<std::int64_t>{0, 2, 4, 1, 3, 5}));
  EXPECT_EQ(detail::index_str(t, 4), "[1, 1]");
  detail::read_indices(TensorView(i64, DType::int64, {2}), all);
  EXPECT_EQ(all, (std::vector<std::int64_t>{1LL << 40, -1}));
  testing::expect_error([] { detail::checked_mul(1LL << 62, 4, "x"); }, Status::invalid_parameter,
                        {"x: size", "overflows 64 bits"});
}

TEST(Slots, SplitterAddressesPowerOfTwoAndOtherBlockSizes) {
  for (std::int64_t bs : {1, 3, 16, 128}) {
    const detail::SlotSplitter split(bs);
    for (std::int64_t s : {0, 1, 5, 127, 128, 1000}) {
      EXPECT_EQ(split.block(s), s / bs);
      EXPECT_EQ(split.offset(s), s % bs);
      // A real buffer that holds every address below: arithmetic on a null pointer is undefined.
      static std::vector<unsigned char> buffer(64 + 1001 * 1000);
      unsigned char* base = buffer.data();
      EXPECT_EQ(split.address(base + 64, 1000, 10, s) - base, 64 + (s / bs) * 1000 + (s % bs) * 10);
    }
  }
}

TEST(Slots, KeepLastWritersDropsEarlierWriters) {
  std::vector<std::int64_t> increasing = {0, 1, -1, 5, 9};
  EXPECT_FALSE(detail::keep_last_writers(increasing, 10));
  EXPECT_EQ(increasing, (std::vector<std::int64_t>{0, 1, -1, 5, 9}));
  for (std::int64_t num_slots : {std::int64_t{10}, std::int64_t{1} << 40}) {
    std::vector<std::int64_t> slots = {4, 2, -1, 4, 7, 2, 4};
    EXPECT_TRUE(detail::keep_last_writers(slots, num_slots));
    EXPECT_EQ(slots, (std::vector<std::int64_t>{-1, -1, -1, -1, 7, 2, 4}));
  }
}

// A prefill into shuffled blocks (runs of consecutive slots, padding between them) repeats no
// slot; the same mapping with one slot of an earlier run written again drops that writer only.
TEST(Slots, KeepLastWritersShuffledRuns) {
  std::vector<std::int64_t> slots;
  for (std::int64_t block : {5, 2, 7, 0, 3}) {
    for (std::int64_t i = 0; i < 16; ++i) slots.push_back(block * 16 + i);
    slots.push_back(-1);
  }
  std::vector<std::int64_t> copy = slots;
  EXPECT_FALSE(detail::keep_last_writers(copy, 8 * 16));
  EXPECT_EQ(copy, slots);
  copy.push_back(2 * 16 + 5);  // block 2's sixth slot again, last
  EXPECT_TRUE(detail::keep_last_writers(copy, 8 * 16));
  std::vector<std::int64_t> want = slots;
  want[17 + 5] = -1;  // its earlier writer
  want.push_back(2 * 16 + 5);
  EXPECT_EQ(copy, want);
  // Runs that overlap without repeating a run's start: 10..19 and 15..24.
  std::vector<std::int64_t> overlap;
  for (std::int64_t s = 10; s < 20; ++s) overlap.push_back(s);
  for (std::int64_t s = 15; s < 25; ++s) overlap.push_back(s);
  EXPECT_TRUE(detail::keep_last_writers(overlap, 32));
  for (std::int64_t t = 5; t < 10; ++t) EXPECT_EQ(overlap[static_cast<std::size_t>(t)], -1);
}

// The slot scan runs a vector at a time with a scalar tail: a bad slot at every position of
// every length up to a few vectors, on every target, and the extremes of int64 among them.
TEST(Slots, FirstBadSlotEveryPositionOnEveryTarget) {
  constexpr std::int64_t kSlots = 12, kMax = std::numeric_limits<std::int64_t>::max();
  const std::int64_t bad[] = {kSlots, kSlots + 1, -2, -kSlots, kMax, -kMax, -kMax - 1};
  for (const std::int64_t target : simd_test::simd_targets()) {
    SCOPED_TRACE(simd_test::target_name(target));
    simd_test::PinTarget pin(target);
    for (std::int64_t n = 0; n <= 40; ++n) {
      std::vector<std::int64_t> s(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) s[i] = i % 5 == 4 ? -1 : (kSlots - 1 - i % kSlots);
      ASSERT_EQ(detail::first_bad_slot(s.data(), n, kSlots), -1) << n;
      for (std::int64_t at = 0; at < n; ++at) {
        for (const std::int64_t v : bad) {
          const std::int64_t keep = s[at];
          s[at] = v;
          EXPECT_EQ(detail::first_bad_slot(s.data(), n, kSlots), at)
              << "n " << n << " at " << at << " value " << v;
          s[at] = keep;
        }
      }
    }
  }
}

// The cache the streaming decisions start from: Linux's L3 of CPU 0 where it describes one
// ("32768K" on the AMD machines this project measures on), at most kMaxCacheBytes.
TEST(Streaming, CacheSizeFromLinuxCapped) {
  const std::int64_t bytes = detail::detected_cache_bytes();
  EXPECT_GE(bytes, 0);
  EXPECT_LE(bytes, detail::kMaxCacheBytes);
  const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index3/";
  std::ifstream level(dir + "level"), type(dir + "type"), size(dir + "size");
  std::string l, t, s;
  if (!(level >> l) || !(type >> t) || !(size >> s) || l != "3" || t == "Instruction") {
    GTEST_SKIP() << "no level 3 data cache described at " << dir;
  }
  std::int64_t expected = std::stoll(s);
  if (s.back() == 'K') expected <<= 10;
  if (s.back() == 'M') expected <<= 20;
  EXPECT_EQ(bytes, std::min(expected, detail::kMaxCacheBytes)) << s;
}

TEST(Streaming, CacheSizeSetAndRestored) {
  const std::int64_t saved = detail::set_cache_bytes(12345);
  EXPECT_EQ(detail::cache_bytes().load(), 12345);
  EXPECT_EQ(detail::set_cache_bytes(saved), 12345);
  EXPECT_EQ(detail::cache_bytes().load(), saved);
}

TEST(Runtime, ThreadsSetAndRestored) {
  set_num_threads(3);
  EXPECT_EQ(get_num_threads(), 3);
  set_num_threads(0);
  EXPECT_GE(get_num_threads(), 1);
  EXPECT_FALSE(simd_target().empty());
  EXPECT_NE(simd_targets_available().find(simd_target()), std::string::npos);
  EXPECT_STREQ(version_string(), KVSCATTER_VERSION);
}

// Every index is visited exactly once, for any thread count and grain.
TEST(Runtime, ParallelForCoversRangeOnce) {
  for (int threads : {1, 2, 3, 8}) {
    set_num_threads(threads);
    for (std::int64_t n : {0, 1, 7, 1000, 100003}) {
      for (std::int64_t grain : {1, 3, 64, 100000}) {
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        detail::parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
        });
        for (auto& h : hits) ASSERT_EQ(h.load(), 1);
      }
    }
  }
  set_num_threads(0);
}

// Callers on several threads share the pool (or run inline) without interference.
TEST(Runtime, ConcurrentCallersAndNesting) {
  set_num_threads(4);
  std::vector<std::thread> callers;
  std::atomic<std::int64_t> total{0};
  for (int t = 0; t < 6; ++t) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) {
        detail::parallel_for(1000, 10, [&](std::int64_t b, std::int64_t e) {
          // Nested parallel_for runs inline.
          detail::parallel_for(e - b, 1,
                               [&](std::int64_t b2, std::int64_t e2) { total += e2 - b2; });
        });
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 6 * 50 * 1000);
  set_num_threads(0);
}

}  // namespace
}  // namespace kvscatter
