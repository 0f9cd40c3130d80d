// ScatterPaKvCacheWithKScale: the worked example of docs/operators/
// scatter_pa_kv_cache_with_k_scale.md, skipping of out-of-range slots, runs of slots that write
// no scale entry but their own, every rejection (status, message, caches untouched), and the last
// writer of duplicate slots, and how calls of each size go (tiles, streaming stores) for each
// cache size. Randomized optimized-versus-reference cases (strided views, slot
// patterns, threads) live in the shared harness
// (tests/cpp/harness/scatter_pa_kv_cache_with_k_scale_cases.cc).
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kvscatter/error.h"
#include "kvscatter/runtime.h"
#include "ops/scatter_pa_kv_cache_with_k_scale/kernel.h"
#include "simd_targets.h"

namespace kvscatter {
namespace {

using Bytes = std::vector<std::uint8_t>;

// Owns the seven tensors of one call: contiguous by default.
struct Problem {
  std::int64_t T, N, Dk, Dv, NB, BS;
  DType dtype = DType::float8_e4m3fn;
  Bytes key, value, key_cache, value_cache;
  std::vector<float> key_scale, scale_cache;
  std::vector<std::int64_t> slots;
  std::vector<std::int32_t> slots32;
  bool use_int32 = false;

  Problem(std::int64_t t, std::int64_t n, std::int64_t dk, std::int64_t dv, std::int64_t nb,
          std::int64_t bs)
      : T(t), N(n), Dk(dk), Dv(dv), NB(nb), BS(bs) {
    key.resize(static_cast<std::size_t>(T * N * Dk));
    value.resize(static_cast<std::size_t>(T * N * Dv));
    key_cache.resize(static_cast<std::size_t>(NB * N * BS * Dk));
    value_cache.resize(static_cast<std::size_t>(NB * N * BS * Dv));
    key_scale.resize(static_cast<std::size_t>(T * N));
    scale_cache.resize(static_cast<std::size_t>(NB * N * BS));
    slots.resize(static_cast<std::size_t>(T));
  }
  TensorView tkey() { return TensorView(key.data(), dtype, {T, N, Dk}); }
  TensorView tvalue() { return TensorView(value.data(), dtype, {T, N, Dv}); }
  TensorView tkc() { return TensorView(key_cache.data(), dtype, {NB, N, BS, Dk}); }
  TensorView tvc() { return TensorView(value_cache.data(), dtype, {NB, N, BS, Dv}); }
  TensorView tslots() {
    if (use_int32) {
      slots32.assign(slots.begin(), slots.end());
      return TensorView(slots32.data(), DType::int32, {T});
    }
    return TensorView(slots.data(), DType::int64, {T});
  }
  TensorView tks() { return TensorView(key_scale.data(), DType::float32, {T, N}); }
  TensorView tsc() { return TensorView(scale_cache.data(), DType::float32, {NB, N, BS, 1}); }
};

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The paths give the same bytes (the harness checks them all); which one a call takes is the
// documented rule: streamed once the call's footprint (twice what it writes) reaches three
// quarters of the last-level cache and it writes at least the threshold, else tiled while the
// footprint is under three quarters of the cache or under the threshold.
TEST(ScatterPaKvCacheWithKScaleStrategy, FollowsThresholdAndCacheSize) {
  constexpr std::int64_t MiB = std::int64_t{1} << 20;
  using detail::k_scale::choose_strategy;
  using detail::k_scale::kTile;
  struct Case {
    std::int64_t written, threshold, cache;
    bool stream;
    std::int64_t tile;
  };
  const Case cases[] = {
      // Unknown cache and 8 MiB: the threshold's rules (tiles under half of it).
      {2 * MiB, 8 * MiB, 0, false, kTile},
      {4 * MiB - 1, 8 * MiB, 0, false, kTile},
      {4 * MiB, 8 * MiB, 0, false, 1},
      {8 * MiB, 8 * MiB, 0, true, 1},
      {4 * MiB, 8 * MiB, 8 * MiB, false, 1},
      {8 * MiB, 8 * MiB, 8 * MiB, true, 1},
      // 16 MiB: tiles under a footprint of 12 MiB, streaming from 8 MiB written.
      {2 * MiB, 8 * MiB, 16 * MiB, false, kTile},
      {4 * MiB, 8 * MiB, 16 * MiB, false, kTile},
      {6 * MiB - 1, 8 * MiB, 16 * MiB, false, kTile},
      {6 * MiB, 8 * MiB, 16 * MiB, false, 1},
      {8 * MiB - 1, 8 * MiB, 16 * MiB, false, 1},
      {8 * MiB, 8 * MiB, 16 * MiB, true, 1},
      // 32 MiB: tiles under a footprint of 24 MiB (6,143 tokens of 8 heads of 128-byte key and
      // value rows), streaming from there.
      {4 * MiB, 8 * MiB, 32 * MiB, false, kTile},
      {8 * MiB, 8 * MiB, 32 * MiB, false, kTile},
      {8 * MiB + 2048, 8 * MiB, 32 * MiB, false, kTile},
      {12 * MiB - 1, 8 * MiB, 32 * MiB, false, kTile},
      {12 * MiB, 8 * MiB, 32 * MiB, true, 1},
      {64 * MiB, 8 * MiB, 32 * MiB, true, 1},
      // The tests' setting (threshold and cache 0): every call streams, empty ones included.
      {0, 0, 0, true, 1},
      {5, 0, 0, true, 1},
      // A raised threshold keeps small calls tiled and unstreamed whatever the cache.
      {16 * MiB - 1, 32 * MiB, 32 * MiB, false, kTile},
      {16 * MiB, 32 * MiB, 32 * MiB, false, 1},
      {32 * MiB, 32 * MiB, 32 * MiB, true, 1},
  };
  for (const Case& c : cases) {
    const detail::k_scale::Strategy how = choose_strategy(c.written, c.threshold, c.cache);
    EXPECT_EQ(how.stream, c.stream) << c.written << " " << c.threshold << " " << c.cache;
    EXPECT_EQ(how.tile, c.tile) << c.written << " " << c.threshold << " " << c.cache;
  }
}

TEST(ScatterPaKvCacheWithKScaleSpec, WorkedExample) {
  // NB=2, N=2, BS=4, D=4, T=3, slots [5, -1, 8], key[t][h] = [16(t+1) + 4h + i],
  // key_scale[t][h] = 0.5(t+1) + h; value = key + 0x40 here.
  for (bool reference_kernel : {false, true}) {
    Problem p(3, 2, 4, 4, 2, 4);
    for (std::int64_t t = 0; t < 3; ++t)
      for (std::int64_t h = 0; h < 2; ++h) {
        for (std::int64_t i = 0; i < 4; ++i) {
          p.key[static_cast<std::size_t>((t * 2 + h) * 4 + i)] =
              static_cast<std::uint8_t>(16 * (t + 1) + 4 * h + i);
          p.value[static_cast<std::size_t>((t * 2 + h) * 4 + i)] =
              static_cast<std::uint8_t>(16 * (t + 1) + 4 * h + i + 0x40);
        }
        p.key_scale[static_cast<std::size_t>(t * 2 + h)] =
            0.5f * static_cast<float>(t + 1) + static_cast<float>(h);
      }
    p.slots = {5, -1, 8};
    auto plan =
        plan_scatter_pa_kv_cache_with_k_scale(p.tkey(), p.tvalue(), p.tkc(), p.tvc(), p.tslots(),
                                              p.tks(), p.tsc(), KScaleCacheLayout::BNBD);
    if (reference_kernel) {
      reference::execute(plan);
    } else {
      execute(plan);
    }
    Bytes want_k(p.key_cache.size(), 0), want_v(p.value_cache.size(), 0);
    std::vector<float> want_s(p.scale_cache.size(), 0.0f);
    // Slot 5: block 1, offset 1. key_cache[1][h][1] at ((1 * 2 + h) * 4 + 1) * 4.
    const std::uint8_t k0[] = {0x10, 0x11, 0x12, 0x13}, k1[] = {0x14, 0x15, 0x16, 0x17};
    std::copy(k0, k0 + 4, want_k.begin() + ((1 * 2 + 0) * 4 + 1) * 4);
    std::copy(k1, k1 + 4, want_k.begin() + ((1 * 2 + 1) * 4 + 1) * 4);
    for (int i = 0; i < 4; ++i) {
      want_v[((1 * 2 + 0) * 4 + 1) * 4 + i] = static_cast<std::uint8_t>(k0[i] + 0x40);
      want_v[((1 * 2 + 1) * 4 + 1) * 4 + i] = static_cast<std::uint8_t>(k1[i] + 0x40);
    }
    want_s[(1 * 2 + 0) * 4 + 1] = 0.5f;
    want_s[(1 * 2 + 1) * 4 + 1] = 1.5f;
    EXPECT_EQ(p.key_cache, want_k);
    EXPECT_EQ(p.value_cache, want_v);
    EXPECT_EQ(p.scale_cache, want_s);
  }
}

TEST(ScatterPaKvCacheWithKScaleSpec, SkipsNegativeAndOutOfRangeSlots) {
  Problem p(6, 1, 2, 3, 2, 2);  // 4 slots
  for (std::size_t i = 0; i < p.key.size(); ++i) p.key[i] = static_cast<std::uint8_t>(i + 1);
  for (std::size_t i = 0; i < p.value.size(); ++i) p.value[i] = static_cast<std::uint8_t>(i + 101);
  for (std::size_t i = 0; i < p.key_scale.size(); ++i) p.key_scale[i] = static_cast<float>(i + 1);
  p.slots = {-1, 4, std::numeric_limits<std::int64_t>::min(), 1 << 20, -7, 3};
  p.use_int32 = false;
  scatter_pa_kv_cache_with_k_scale(p.tkey(), p.tvalue(), p.tkc(), p.tvc(), p.tslots(), p.tks(),
                                   p.tsc());
  // Only token 5 -> slot 3 (block 1, offset 1) is written.
  Bytes want_k(p.key_cache.size(), 0), want_v(p.value_cache.size(), 0);
  want_k[6] = 11;
  want_k[7] = 12;
  want_v[9] = 116;
  want_v[10] = 117;
  want_v[11] = 118;
  EXPECT_EQ(p.key_cache, want_k);
  EXPECT_EQ(p.value_cache, want_v);
  EXPECT_EQ(p.scale_cache, (std::vector<float>{0, 0, 0, 6}));
}

TEST(ScatterPaKvCacheWithKScaleSpec, ScalesAreRawBitCopies) {
  Problem p(1, 4, 1, 1, 1, 1);
  const std::uint32_t pats[] = {0x7FA00001u, 0xFFC12345u, 0x80000000u, 0x00000001u};
  for (int h = 0; h < 4; ++h) p.key_scale[h] = from_bits(pats[h]);
  p.slots = {0};
  p.dtype = DType::float8_e5m2;
  scatter_pa_kv_cache_with_k_scale(p.tkey(), p.tvalue(), p.tkc(), p.tvc(), p.tslots(), p.tks(),
                                   p.tsc(), parse_k_scale_cache_layout(""));
  for (int h = 0; h < 4; ++h) EXPECT_EQ(to_bits(p.scale_cache[h]), pats[h]);
}

TEST(ScatterPaKvCacheWithKScaleSpec, EmptyIsNoOp) {
  Problem p(0, 2, 4, 4, 2, 4);
  scatter_pa_kv_cache_with_k_scale(TensorView(nullptr, p.dtype, {0, 2, 4}),
                                   TensorView(nullptr, p.dtype, {0, 2, 4}), p.tkc(), p.tvc(),
                                   TensorView(nullptr, DType::int32, {0}),
                                   TensorView(nullptr, DType::float32, {0, 2}), p.tsc());
  EXPECT_EQ(p.key_cache, Bytes(p.key_cache.size(), 0));
}

// 64-bit offsets: block 1 of each cache lies past 4 GiB (one reserved range, a few
// touched pages).
TEST(ScatterPaKvCacheWithKScaleSpec, OffsetsPast4GiB) {
  const std::int64_t block_stride = (std::int64_t{1} << 32) + 8192;
  const std::size_t bytes = static_cast<std::size_t>(2 * block_stride) * 3;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) GTEST_SKIP() << "cannot reserve 24 GiB of address space";
  auto* base = static_cast<std::uint8_t*>(mem);
  const std::int64_t kshape[] = {2, 2, 4, 16}, kstrides[] = {block_stride, 64, 16, 1};
  const std::int64_t sshape[] = {2, 2, 4, 1}, sstrides[] = {block_stride / 4, 4, 1, 1};
  std::uint8_t* kc = base;
  std::uint8_t* vc = base + 2 * block_stride;
  auto* sc = reinterpret_cast<float*>(base + 4 * block_stride);
  Bytes key(2 * 16), value(2 * 16);
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(i + 1);
  for (std::size_t i = 0; i < value.size(); ++i) value[i] = static_cast<std::uint8_t>(i + 101);
  float scales[2] = {0.25f, 4.0f};
  std::int32_t slot = 7;  // block 1, offset 3
  const DType dt = DType::float8_e5m2;
  for (bool use_reference : {false, true}) {
    auto plan = plan_scatter_pa_kv_cache_with_k_scale(
        TensorView(key.data(), dt, {1, 2, 16}), TensorView(value.data(), dt, {1, 2, 16}),
        TensorView(kc, dt, kshape, kstrides), TensorView(vc, dt, kshape, kstrides),
        TensorView(&slot, DType::int32, {1}), TensorView(scales, DType::float32, {1, 2}),
        TensorView(sc, DType::float32, sshape, sstrides));
    if (use_reference) {
      reference::execute(plan);
    } else {
      execute(plan);
    }
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t* krow = kc + block_stride + h * 64 + 3 * 16;
      const std::uint8_t* vrow = vc + block_stride + h * 64 + 3 * 16;
      EXPECT_EQ(Bytes(krow, krow + 16), Bytes(key.begin() + 16 * h, key.begin() + 16 * (h + 1)));
      EXPECT_EQ(Bytes(vrow, vrow + 16),
                Bytes(value.begin() + 16 * h, value.begin() + 16 * (h + 1)));
      EXPECT_EQ(sc[block_stride / 4 + h * 4 + 3], scales[h]);
    }
  }
  munmap(mem, bytes);
}

// A run of consecutive slots writes its own scale entries and no others, on every SIMD target:
// the entries after the run's last slot lie on a read-only page, so a store that rewrote a whole
// vector there (a masked store done as load, blend and store, which races with another thread
// writing those entries) faults. Runs of 2 to 8 tokens end inside a vector of 4 or 8 lanes.
TEST(ScatterPaKvCacheWithKScaleSpec, RunsWriteOnlyTheirOwnScaleEntries) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* base = static_cast<std::uint8_t*>(mem);
  constexpr std::int64_t kBS = 16, kD = 16;
  for (const std::int64_t target : simd_test::simd_targets()) {
    simd_test::PinTarget pin(target);
    for (std::int64_t run = 2; run <= 8; ++run) {
      SCOPED_TRACE(simd_test::target_name(target) + ", run of " + std::to_string(run));
      ASSERT_EQ(mprotect(base + page, page, PROT_READ | PROT_WRITE), 0);
      std::memset(base, 0, 2 * page);
      auto* sc = reinterpret_cast<float*>(base + page - 4 * run);  // entry `run` starts page 2
      ASSERT_EQ(mprotect(base + page, page, PROT_READ), 0);
      Bytes key(static_cast<std::size_t>(run * kD), 7), value = key;
      Bytes kc(static_cast<std::size_t>(kBS * kD)), vc = kc;
      std::vector<float> scales(static_cast<std::size_t>(run));
      std::vector<std::int64_t> slots(static_cast<std::size_t>(run));
      for (std::int64_t i = 0; i < run; ++i) {
        scales[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
        slots[static_cast<std::size_t>(i)] = i;
      }
      const DType dt = DType::float8_e4m3fn;
      scatter_pa_kv_cache_with_k_scale(
          TensorView(key.data(), dt, {run, 1, kD}), TensorView(value.data(), dt, {run, 1, kD}),
          TensorView(kc.data(), dt, {1, 1, kBS, kD}), TensorView(vc.data(), dt, {1, 1, kBS, kD}),
          TensorView(slots.data(), DType::int64, {run}),
          TensorView(scales.data(), DType::float32, {run, 1}),
          TensorView(sc, DType::float32, {1, 1, kBS, 1}));
      EXPECT_EQ(std::vector<float>(sc, sc + run), scales);
      EXPECT_EQ(std::vector<float>(sc + run, sc + kBS),
                std::vector<float>(static_cast<std::size_t>(kBS - run), 0.0f));
    }
  }
  munmap(mem, 2 * page);
}

// ---- rejections -----------------------------------------------------------------------------

struct Views {
  TensorView key, value, kc, vc, slots, ks, sc;
  std::string layout = "BNBD";  // parsed with parse_k_scale_cache_layout, as the C ABI does
  std::optional<KScaleCacheLayout> layout_value;  // given: passed as it is
};

template <class Mutate>
void expect_rejected(Mutate mutate, Status status, std::initializer_list<std::string> needles) {
  Problem p(3, 2, 4, 6, 2, 4);
  std::mt19937 rng(5);
  for (auto* b : {&p.key, &p.value, &p.key_cache, &p.value_cache})
    for (auto& x : *b) x = static_cast<std::uint8_t>(rng());
  for (auto& f : p.scale_cache) f = static_cast<float>(rng() % 100);
  p.slots = {1, 2, 3};
  const Bytes kc = p.key_cache, vc = p.value_cache;
  const std::vector<float> sc = p.scale_cache;
  Views v{p.tkey(), p.tvalue(), p.tkc(), p.tvc(), p.tslots(), p.tks(), p.tsc(), "BNBD", {}};
  mutate(p, v);
  try {
    scatter_pa_kv_cache_with_k_scale(
        v.key, v.value, v.kc, v.vc, v.slots, v.ks, v.sc,
        v.layout_value ? *v.layout_value : parse_k_scale_cache_layout(v.layout));
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const auto& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message lacks \"" << n << "\": " << e.what();
    }
  }
  EXPECT_TRUE(p.key_cache == kc && p.value_cache == vc && p.scale_cache == sc)
      << "a cache was modified by a failing call";
}

TEST(ScatterPaKvCacheWithKScaleErrors, NullPointers) {
  expect_rejected([](Problem&, Views& v) { v.key.data = nullptr; }, Status::null_pointer, {"key"});
  expect_rejected([](Problem&, Views& v) { v.value.data = nullptr; }, Status::null_pointer,
                  {"value"});
  expect_rejected([](Problem&, Views& v) { v.kc.data = nullptr; }, Status::null_pointer,
                  {"key_cache"});
  expect_rejected([](Problem&, Views& v) { v.vc.data = nullptr; }, Status::null_pointer,
                  {"value_cache"});
  expect_rejected([](Problem&, Views& v) { v.slots.data = nullptr; }, Status::null_pointer,
                  {"slot_mapping"});
  expect_rejected([](Problem&, Views& v) { v.ks.data = nullptr; }, Status::null_pointer,
                  {"key_scale"});
  expect_rejected([](Problem&, Views& v) { v.sc.data = nullptr; }, Status::null_pointer,
                  {"key_scale_cache"});
}

TEST(ScatterPaKvCacheWithKScaleErrors, CacheLayout) {
  for (const char* bad : {"BSND", "bnbd", "NZ", " BNBD"}) {
    expect_rejected([bad](Problem&, Views& v) { v.layout = bad; }, Status::invalid_parameter,
                    {"cache_layout", std::string("\"") + bad + "\""});
  }
  expect_rejected([](Problem&, Views& v) { v.layout_value = static_cast<KScaleCacheLayout>(3); },
                  Status::invalid_parameter, {"cache_layout must be BNBD", "3"});
  EXPECT_EQ(parse_k_scale_cache_layout(""), KScaleCacheLayout::BNBD);
}

TEST(ScatterPaKvCacheWithKScaleErrors, Dtypes) {
  expect_rejected(
      [](Problem&, Views& v) {
        v.key.dtype = v.value.dtype = v.kc.dtype = v.vc.dtype = DType::bfloat16;
      },
      Status::invalid_parameter, {"key", "bfloat16", "float8_e4m3fn"});
  expect_rejected([](Problem&, Views& v) { v.value.dtype = DType::float8_e5m2; },
                  Status::invalid_parameter, {"value", "float8_e5m2", "float8_e4m3fn"});
  expect_rejected([](Problem&, Views& v) { v.kc.dtype = DType::float8_e5m2; },
                  Status::invalid_parameter, {"key_cache", "float8_e5m2"});
  expect_rejected([](Problem&, Views& v) { v.vc.dtype = DType::uint8; }, Status::invalid_parameter,
                  {"value_cache", "uint8"});
  expect_rejected([](Problem&, Views& v) { v.slots.dtype = DType::int16; },
                  Status::invalid_parameter, {"slot_mapping", "int16"});
  expect_rejected([](Problem&, Views& v) { v.ks.dtype = DType::float16; },
                  Status::invalid_parameter, {"key_scale", "float16", "float32"});
  expect_rejected([](Problem&, Views& v) { v.sc.dtype = DType::bfloat16; },
                  Status::invalid_parameter, {"key_scale_cache", "bfloat16"});
}

TEST(ScatterPaKvCacheWithKScaleErrors, Ranks) {
  expect_rejected(
      [](Problem& p, Views& v) {
        v.key = TensorView(p.key.data(), p.dtype, {3, 8});
      },
      Status::invalid_parameter, {"key", "3-D", "2-D"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.value = TensorView(p.value.data(), p.dtype, {3, 2, 6, 1});
      },
      Status::invalid_parameter, {"value", "3-D", "4-D"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.kc = TensorView(p.key_cache.data(), p.dtype, {2, 2, 16});
      },
      Status::invalid_parameter, {"key_cache", "4-D", "3-D"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.vc = TensorView(p.value_cache.data(), p.dtype, {2, 2, 24});
      },
      Status::invalid_parameter, {"value_cache", "4-D"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.slots = TensorView(p.slots.data(), DType::int64, {3, 1});
      },
      Status::invalid_parameter, {"slot_mapping", "1-D", "2-D"});
  expect_rejected(
      [](Problem& p, Views& v) { v.ks = TensorView(p.key_scale.data(), DType::float32, {6}); },
      Status::invalid_parameter, {"key_scale", "2-D", "1-D"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.sc = TensorView(p.scale_cache.data(), DType::float32, {2, 2, 4});
      },
      Status::invalid_parameter, {"key_scale_cache", "4-D", "3-D"});
}

TEST(ScatterPaKvCacheWithKScaleErrors, Shapes) {
  // Problem: T=3, N=2, Dk=4, Dv=6, NB=2, BS=4.
  expect_rejected(
      [](Problem& p, Views& v) {
        v.key = TensorView(p.key.data(), p.dtype, {3, 2, 0});
      },
      Status::invalid_parameter, {"key.shape[2]", "0"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.value = TensorView(p.value.data(), p.dtype, {2, 2, 6});
      },
      Status::invalid_parameter, {"value.shape[0]", "3", "2"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.value = TensorView(p.value.data(), p.dtype, {3, 1, 6});
      },
      Status::invalid_parameter, {"value.shape[1]", "2", "1"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.value = TensorView(p.value.data(), p.dtype, {3, 2, 0});
      },
      Status::invalid_parameter, {"value.shape[2]", "0"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.kc = TensorView(p.key_cache.data(), p.dtype, {2, 1, 4, 4});
      },
      Status::invalid_parameter, {"key_cache.shape[1]", "2", "1"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.kc = TensorView(p.key_cache.data(), p.dtype, {2, 2, 2, 8});
      },
      Status::invalid_parameter, {"key_cache.shape[3]", "4", "8"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.vc = TensorView(p.value_cache.data(), p.dtype, {1, 2, 4, 6});
      },
      Status::invalid_parameter, {"value_cache.shape[0]", "2", "1"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.vc = TensorView(p.value_cache.data(), p.dtype, {2, 2, 2, 6});
      },
      Status::invalid_parameter, {"value_cache.shape[2]", "4", "2"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.vc = TensorView(p.value_cache.data(), p.dtype, {2, 2, 4, 4});
      },
      Status::invalid_parameter, {"value_cache.shape[3]", "6", "4"});
  expect_rejected(
      [](Problem& p, Views& v) { v.slots = TensorView(p.slots.data(), DType::int64, {2}); },
      Status::invalid_parameter, {"slot_mapping.shape[0]", "3", "2"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.ks = TensorView(p.key_scale.data(), DType::float32, {3, 1});
      },
      Status::invalid_parameter, {"key_scale.shape[1]", "2", "1"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.ks = TensorView(p.key_scale.data(), DType::float32, {2, 2});
      },
      Status::invalid_parameter, {"key_scale.shape[0]", "3", "2"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.sc = TensorView(p.scale_cache.data(), DType::float32, {2, 2, 2, 2});
      },
      Status::invalid_parameter, {"key_scale_cache.shape[2]", "4", "2"});
  expect_rejected(
      [](Problem& p, Views& v) {
        v.sc = TensorView(p.scale_cache.data(), DType::float32, {1, 2, 4, 2});
      },
      Status::invalid_parameter, {"key_scale_cache.shape[0]", "2", "1"});
}

TEST(ScatterPaKvCacheWithKScaleErrors, Layouts) {
  // Negative strides are never accepted; caches may not overlap themselves.
  expect_rejected(
      [](Problem& p, Views& v) {
        const std::int64_t shape[] = {3, 2}, strides[] = {2, -1};
        v.ks = TensorView(p.key_scale.data() + 1, DType::float32, shape, strides);
      },
      Status::invalid_parameter, {"key_scale", "strides[1]", "-1"});
  expect_rejected(
      [](Problem& p, Views& v) {
        const std::int64_t shape[] = {2, 2, 4, 4}, strides[] = {16, 8, 0, 1};
        v.kc = TensorView(p.key_cache.data(), p.dtype, shape, strides);
      },
      Status::invalid_parameter, {"key_cache", "overlap"});
  expect_rejected(
      [](Problem& p, Views& v) {
        const std::int64_t shape[] = {2, 2, 4, 1}, strides[] = {4, 4, 1, 1};
        v.sc = TensorView(p.scale_cache.data(), DType::float32, shape, strides);
      },
      Status::invalid_parameter, {"key_scale_cache", "overlap"});
}

// ---- duplicate slots -----------------------------------------------------------------------

// Many tokens on few slots, enough work to split over threads: each slot holds the scale and
// key row of the last token naming it, on the reference and on the optimized path at every
// thread count (see docs/semantics.md, "Determinism and duplicate slots").
TEST(ScatterPaKvCacheWithKScaleDuplicates, LastWriterWins) {
  std::mt19937_64 rng(7);
  const std::int64_t T = 20000, N = 2, D = 64, NB = 2, BS = 4;
  Problem p(T, N, D, D, NB, BS);
  for (auto& b : p.key) b = static_cast<std::uint8_t>(rng());
  for (auto& b : p.value) b = static_cast<std::uint8_t>(rng());
  for (std::size_t i = 0; i < p.key_scale.size(); ++i) p.key_scale[i] = static_cast<float>(i);
  for (auto& s : p.slots) s = static_cast<std::int64_t>(rng() % 10) - 1;  // -1 .. 8 (8 skipped)
  std::vector<std::int64_t> last(static_cast<std::size_t>(NB * BS), -1);
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t s = p.slots[static_cast<std::size_t>(t)];
    if (s >= 0 && s < NB * BS) last[static_cast<std::size_t>(s)] = t;
  }
  auto plan = plan_scatter_pa_kv_cache_with_k_scale(p.tkey(), p.tvalue(), p.tkc(), p.tvc(),
                                                    p.tslots(), p.tks(), p.tsc());
  for (int threads : {0, 1, 2, 3}) {  // 0: the reference
    Problem got = p;
    plan.key_cache.data = got.key_cache.data();
    plan.value_cache.data = got.value_cache.data();
    plan.key_scale_cache.data = got.scale_cache.data();
    if (threads == 0) {
      reference::execute(plan);
    } else {
      set_num_threads(threads);
      execute(plan);
    }
    for (std::int64_t s = 0; s < NB * BS; ++s) {
      const std::int64_t t = last[static_cast<std::size_t>(s)];
      ASSERT_GE(t, 0);
      for (std::int64_t h = 0; h < N; ++h) {
        const std::int64_t row = (s / BS) * N * BS + h * BS + s % BS;  // [NB, N, BS] index
        EXPECT_EQ(got.scale_cache[static_cast<std::size_t>(row)],
                  p.key_scale[static_cast<std::size_t>(t * N + h)])
            << "slot " << s << " head " << h << " threads " << threads;
        EXPECT_EQ(0, std::memcmp(&got.key_cache[static_cast<std::size_t>(row * D)],
                                 &p.key[static_cast<std::size_t>((t * N + h) * D)], D))
            << "slot " << s << " head " << h << " threads " << threads;
      }
    }
  }
  set_num_threads(0);
}

}  // namespace
}  // namespace kvscatter
