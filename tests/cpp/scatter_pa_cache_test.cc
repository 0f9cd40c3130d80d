// ScatterPaCache: the worked examples byte for byte on both paths, every
// rejection with its message and untouched cache, the C ABI, and randomized
// checks that a single-cache call writes exactly the key side of the matching
// scatter_pa_kv_cache call.
#include "kvscatter/scatter_pa_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kvscatter/formats.h"
#include "kvscatter/kvscatter.h"
#include "kvscatter/runtime.h"
#include "simd_targets.h"
#include "testing.h"

namespace kvscatter {
namespace {

using testing::expect_error;
const Status kInv = Status::invalid_parameter;

void run(const ScatterPaCachePlan& p, bool ref) {
  if (ref)
    reference::execute(p);
  else
    execute(p);
}

std::vector<std::uint16_t> f16(std::initializer_list<float> xs) {
  std::vector<std::uint16_t> v;
  for (float x : xs) v.push_back(formats::encode_float16(x));
  return v;
}

class ScatterPaCacheExamples : public ::testing::TestWithParam<bool> {};

TEST_P(ScatterPaCacheExamples, PlainHifloat8) {
  std::vector<std::uint8_t> key{0x08, 0x88, 0x18, 0x14, 0x09, 0x4A, 0xB2, 0x6E, 1, 2, 3, 4};
  std::vector<std::uint8_t> cache(16, 0);
  std::vector<std::int32_t> slots{3, -1, 0};
  run(plan_scatter_pa_cache(TensorView(key.data(), DType::hifloat8, {3, 1, 4}),
                            TensorView(cache.data(), DType::hifloat8, {2, 2, 1, 4}),
                            TensorView(slots.data(), DType::int32, {3})),
      GetParam());
  EXPECT_EQ(cache, (std::vector<std::uint8_t>{1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x88, 0x18,
                                              0x14}));
}

// Every negative slot is padding, not only -1: a token (3-D key) or a whole run (4-D key).
TEST_P(ScatterPaCacheExamples, AnyNegativeSlotIsPadding) {
  std::vector<std::uint8_t> key{1, 2, 3, 4, 5, 6};
  std::vector<std::uint8_t> cache(8, 0xEE);
  std::vector<std::int64_t> slots{-7, 1, std::numeric_limits<std::int64_t>::min()};
  run(plan_scatter_pa_cache(TensorView(key.data(), DType::uint8, {3, 1, 2}),
                            TensorView(cache.data(), DType::uint8, {2, 2, 1, 2}),
                            TensorView(slots.data(), DType::int64, {3})),
      GetParam());
  EXPECT_EQ(cache, (std::vector<std::uint8_t>{0xEE, 0xEE, 3, 4, 0xEE, 0xEE, 0xEE, 0xEE}));
  std::vector<std::int32_t> starts{-2, 4}, seq{2, 2}, lens{2, 2};  // tail keep of 2 rows
  std::vector<std::uint8_t> runs(8, 0xEE);
  ScatterPaCacheOptions o;
  o.seq_lens = TensorView(seq.data(), DType::int32, {2});
  o.compress_lens = TensorView(lens.data(), DType::int32, {2});
  run(plan_scatter_pa_cache(TensorView(key.data(), DType::uint8, {2, 2, 1, 1}),
                            TensorView(runs.data(), DType::uint8, {2, 4, 1, 1}),
                            TensorView(starts.data(), DType::int32, {2, 1}), o),
      GetParam());
  EXPECT_EQ(runs, (std::vector<std::uint8_t>{0xEE, 0xEE, 0xEE, 0xEE, 3, 4, 0xEE, 0xEE}));
}

TEST_P(ScatterPaCacheExamples, PlainPackedFp4) {
  for (DType fp4 : {DType::float4_e2m1, DType::float4_e1m2}) {
    std::vector<std::uint8_t> key{0x21, 0x7F, 0x9A, 0x00};
    std::vector<std::uint8_t> cache(8, 0xEE);
    std::vector<std::int64_t> slots{2, 0};
    // Shapes count elements: two per byte.
    run(plan_scatter_pa_cache(TensorView(key.data(), fp4, {2, 1, 4}),
                              TensorView(cache.data(), fp4, {2, 2, 1, 4}),
                              TensorView(slots.data(), DType::int64, {2})),
        GetParam());
    EXPECT_EQ(cache, (std::vector<std::uint8_t>{0x9A, 0x00, 0xEE, 0xEE, 0x21, 0x7F, 0xEE, 0xEE}));
  }
  // Byte 0x21 holds element 0 (nibble 1 = 0.5) and element 1 (nibble 2 = 1.0).
  EXPECT_EQ(formats::decode_float4_e2m1(0x21 & 0xF), 0.5f);
  EXPECT_EQ(formats::decode_float4_e2m1(0x21 >> 4), 1.0f);
}

struct ReduceMean {  // The ReduceMean worked example: key [1, 5, 1, 2] float16 with key[0][k][0] =
                     // [k, 10k]
  std::vector<std::uint16_t> key = f16({0, 0, 1, 10, 2, 20, 3, 30, 4, 40});
  std::vector<std::uint16_t> cache = std::vector<std::uint16_t>(16, 0);
  std::vector<std::int32_t> seq{5}, offs{1}, lens{2}, slots{4};
  ScatterPaCachePlan plan() {
    ScatterPaCacheOptions o;
    o.seq_lens = TensorView(seq.data(), DType::int32, {1});
    o.compress_seq_offsets = TensorView(offs.data(), DType::int32, {1});
    o.compress_lens = TensorView(lens.data(), DType::int32, {1, 1});
    return plan_scatter_pa_cache(TensorView(key.data(), DType::float16, {1, 5, 1, 2}),
                                 TensorView(cache.data(), DType::float16, {2, 4, 1, 2}),
                                 TensorView(slots.data(), DType::int32, {1, 1}), o);
  }
};

TEST_P(ScatterPaCacheExamples, ReduceMeanFloat16) {
  ReduceMean e;
  const auto p = e.plan();
  EXPECT_EQ(p.scenario, ScatterPaCacheScenario::ReduceMean);
  run(p, GetParam());
  EXPECT_EQ(e.cache, (std::vector<std::uint16_t>{0, 0, 0, 0, 0, 0, 0, 0, 0x0000, 0x0000, 0x3E00,
                                                 0x4B80, 0x4200, 0x4F80, 0x4400, 0x5100}));
  // No compression: five rows from slot 3.
  ReduceMean f;
  f.lens = {0};
  f.slots = {3};
  run(f.plan(), GetParam());
  EXPECT_EQ(f.cache, (std::vector<std::uint16_t>{0, 0, 0, 0, 0, 0, f.key[0], f.key[1], f.key[2],
                                                 f.key[3], f.key[4], f.key[5], f.key[6], f.key[7],
                                                 f.key[8], f.key[9]}));
}

TEST_P(ScatterPaCacheExamples, TailKeepInt8) {
  std::vector<std::int8_t> key(16);
  for (int b = 0; b < 2; ++b)
    for (int k = 0; k < 4; ++k) {
      key[static_cast<std::size_t>((b * 4 + k) * 2)] = static_cast<std::int8_t>(10 * b + k);
      key[static_cast<std::size_t>((b * 4 + k) * 2 + 1)] = static_cast<std::int8_t>(-(10 * b + k));
    }
  std::vector<std::uint8_t> cache(16, 0);
  std::vector<std::int64_t> seq{3, 4}, lens{2, 3}, slots{0, 4};
  ScatterPaCacheOptions o;
  o.seq_lens = TensorView(seq.data(), DType::int64, {2});
  o.compress_lens = TensorView(lens.data(), DType::int64, {2});
  const auto p = plan_scatter_pa_cache(TensorView(key.data(), DType::int8, {2, 4, 1, 2}),
                                       TensorView(cache.data(), DType::int8, {2, 4, 1, 2}),
                                       TensorView(slots.data(), DType::int64, {2, 1}), o);
  EXPECT_EQ(p.scenario, ScatterPaCacheScenario::TailKeep);
  run(p, GetParam());
  EXPECT_EQ(cache, (std::vector<std::uint8_t>{0x01, 0xFF, 0x02, 0xFE, 0, 0, 0, 0, 0x0B, 0xF5, 0x0C,
                                              0xF4, 0x0D, 0xF3, 0, 0}));
}

// The means worked example: a 3-token window folded into one row (o = 0, w = 3, L = 3).
template <class T>
std::vector<T> mean_row(DType dt, std::vector<T> rows, std::int64_t d, bool ref) {
  std::vector<T> cache(static_cast<std::size_t>(d), T{});
  std::vector<std::int32_t> seq{3}, offs{0}, lens{3}, slots{0};
  ScatterPaCacheOptions o;
  o.seq_lens = TensorView(seq.data(), DType::int32, {1});
  o.compress_seq_offsets = TensorView(offs.data(), DType::int32, {1});
  o.compress_lens = TensorView(lens.data(), DType::int32, {1});
  run(plan_scatter_pa_cache(TensorView(rows.data(), dt, {1, 3, 1, d}),
                            TensorView(cache.data(), dt, {1, 1, 1, d}),
                            TensorView(slots.data(), DType::int32, {1, 1}), o),
      ref);
  return cache;
}

TEST_P(ScatterPaCacheExamples, MeansOfAThreeTokenWindow) {
  const bool ref = GetParam();
  EXPECT_EQ(mean_row<std::int8_t>(DType::int8, {1, -1, 2, -2, 2, -2}, 2, ref),
            (std::vector<std::int8_t>{1, -1}));
  EXPECT_EQ(mean_row<std::uint8_t>(DType::uint8, {255, 3, 255, 4, 1, 4}, 2, ref),
            (std::vector<std::uint8_t>{0xAA, 0x03}));
  EXPECT_EQ(mean_row<std::uint16_t>(DType::bfloat16, {0x3F80, 0x3F80, 0x4000}, 1, ref),
            (std::vector<std::uint16_t>{0x3FAB}));
  EXPECT_EQ(mean_row<std::uint16_t>(DType::float16, f16({2048, 1, 1}), 1, ref),
            (std::vector<std::uint16_t>{0x6157}));
}

TEST_P(ScatterPaCacheExamples, EmptyIsANoOp) {
  std::vector<std::uint8_t> cache(16, 7);
  std::vector<std::int32_t> slots;
  run(plan_scatter_pa_cache(TensorView(nullptr, DType::uint8, {0, 1, 4}),
                            TensorView(cache.data(), DType::uint8, {2, 2, 1, 4}),
                            TensorView(nullptr, DType::int32, {0})),
      GetParam());
  EXPECT_EQ(cache, std::vector<std::uint8_t>(16, 7));
}

INSTANTIATE_TEST_SUITE_P(Paths, ScatterPaCacheExamples, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Reference" : "Optimized"; });

// ---- rejections
// -------------------------------------------------------------------------------

// A 3-D call on caches of 3 blocks of 4 slots, or the ReduceMean worked example; `mutate`
// breaks it.
struct Call {
  std::vector<std::uint16_t> key = std::vector<std::uint16_t>(6 * 2 * 4, 0x3C00);
  std::vector<std::uint16_t> cache = std::vector<std::uint16_t>(3 * 4 * 2 * 4, 0x1111);
  std::vector<std::int32_t> slots{0, 1, 2, 3, 4, 5};
  std::vector<std::int64_t> wide{1};
  TensorView k = TensorView(key.data(), DType::float16, {6, 2, 4});
  TensorView kc = TensorView(cache.data(), DType::float16, {3, 4, 2, 4});
  TensorView sm = TensorView(slots.data(), DType::int32, {6});
  ScatterPaCacheOptions o;
};

void expect_rejected(const std::function<void(Call&)>& mutate, std::initializer_list<std::string> f,
                     Status status = kInv) {
  for (bool ref : {false, true}) {
    Call c;
    mutate(c);
    const auto before = c.cache;
    expect_error([&] { run(plan_scatter_pa_cache(c.k, c.kc, c.sm, c.o), ref); }, status, f);
    EXPECT_EQ(c.cache, before);
  }
}

// Packed FP4 shapes count elements; a row must start and end on whole bytes.
TEST(ScatterPaCacheRejects, PackedFp4Layout) {
  const auto fp4 = [](Call& c, std::int64_t d) {
    c.k = TensorView(c.key.data(), DType::float4_e2m1, {6, 2, d});
    c.kc = TensorView(c.cache.data(), DType::float4_e2m1, {3, 4, 2, d});
  };
  expect_rejected([&](Call& c) { fp4(c, 7); },
                  {"key.shape[2] = 7 must be even (float4_e2m1 packs two elements per byte)"});
  expect_rejected(
      [&](Call& c) {
        fp4(c, 8);
        c.kc.strides = {64, 16, 8, 2};
      },
      {"key_cache.strides[3] must be 1 (float4_e2m1 elements are packed two per byte), got 2"});
  expect_rejected(
      [&](Call& c) {
        fp4(c, 8);
        c.kc.strides = {66, 17, 8, 1};
      },
      {"key_cache.strides[1] = 17 must be even (a float4_e2m1 row starts on a whole byte)"});
}

TEST(ScatterPaCacheRejects, Dtypes) {
  expect_rejected([](Call& c) { c.kc.dtype = DType::float32; },
                  {"key_cache dtype float32 differs from key dtype float16"});
  expect_rejected([](Call& c) { c.k.dtype = c.kc.dtype = DType::int64; },
                  {"key dtype must be one of", "float4_e1m2}, got int64"});
  expect_rejected([](Call& c) { c.o.compress_lens = TensorView(c.wide.data(), DType::int64, {1}); },
                  {"compress_lens dtype int64 differs from slot_mapping dtype int32 (index "
                   "tensors share one "
                   "dtype)"});
  expect_rejected([](Call& c) { c.sm.dtype = DType::uint32; },
                  {"slot_mapping dtype must be one of {int32, int64}, got uint32"});
}

TEST(ScatterPaCacheRejects, Ranks) {
  expect_rejected(
      [](Call& c) {
        c.k = TensorView(c.key.data(), DType::float16, {6, 8});
      },
      {"key must be 3-D [tokens, num_heads, head_size] or 4-D [batch, seq_len, "
       "num_heads, head_size], got shape [6, 8]"});
  expect_rejected(
      [](Call& c) {
        c.kc = TensorView(c.cache.data(), DType::float16, {12, 2, 4});
      },
      {"key_cache must be 4-D"});
}

TEST(ScatterPaCacheRejects, PlainShapes) {
  expect_rejected([](Call& c) { c.o.seq_lens = TensorView(c.slots.data(), DType::int32, {1}); },
                  {"compress_lens, compress_seq_offsets and seq_lens must be None with a "
                   "3-D key"});
  expect_rejected(
      [](Call& c) {
        c.kc = TensorView(c.cache.data(), DType::float16, {3, 4, 1, 8});
      },
      {"key_cache shape [3, 4, 1, 8] must be [num_blocks, block_size, 2, 4] to "
       "match key [6, 2, "
       "4]"});
  expect_rejected([](Call& c) { c.sm = TensorView(c.slots.data(), DType::int32, {5}); },
                  {"slot_mapping shape [5] must be [6]"});
}

TEST(ScatterPaCacheRejects, SlotPastTheCache) {
  expect_rejected([](Call& c) { c.slots[5] = 12; },
                  {"slot_mapping[5] = 12 is out of range [0, 12) (key_cache "
                   "has 3 blocks of 4 "
                   "slots"});
  // Blocks of zero slots hold nothing: every slot is out of range, and the message still reads.
  expect_rejected(
      [](Call& c) { c.kc = TensorView(c.cache.data(), DType::float16, {3, 0, 2, 4}); },
      {"slot_mapping[0] = ", "is out of range [0, 0) (key_cache has blocks of 0 slots"});
}

// The ReduceMean worked example as a rejection fixture.
void expect_rejected_4d(const std::function<void(ReduceMean&, ScatterPaCacheOptions&, TensorView&,
                                                 TensorView&, TensorView&)>& mutate,
                        std::initializer_list<std::string> f) {
  for (bool ref : {false, true}) {
    ReduceMean e;
    ScatterPaCacheOptions o;
    o.seq_lens = TensorView(e.seq.data(), DType::int32, {1});
    o.compress_seq_offsets = TensorView(e.offs.data(), DType::int32, {1});
    o.compress_lens = TensorView(e.lens.data(), DType::int32, {1, 1});
    TensorView k(e.key.data(), DType::float16, {1, 5, 1, 2});
    TensorView kc(e.cache.data(), DType::float16, {2, 4, 1, 2});
    TensorView sm(e.slots.data(), DType::int32, {1, 1});
    mutate(e, o, k, kc, sm);
    const auto before = e.cache;
    expect_error([&] { run(plan_scatter_pa_cache(k, kc, sm, o), ref); }, kInv, f);
    EXPECT_EQ(e.cache, before);
  }
}

TEST(ScatterPaCacheRejects, CompressDtypesAndTensors) {
  expect_rejected_4d([](auto&, auto&, TensorView& k, TensorView& kc,
                        auto&) { k.dtype = kc.dtype = DType::float8_e4m3fn; },
                     {"key dtype float8_e4m3fn is not supported with a 4-D key "
                      "(compress scenarios take "
                      "float32, float16, bfloat16, int8, uint8, int16, uint16, "
                      "int32, uint32)"});
  expect_rejected_4d(
      [](auto&, ScatterPaCacheOptions& o, auto&, auto&, auto&) { o.seq_lens.reset(); },
      {"a 4-D key needs compress_lens and seq_lens (seq_lens is missing)"});
  expect_rejected_4d(
      [](auto&, ScatterPaCacheOptions& o, auto&, auto&, auto&) { o.compress_lens.reset(); },
      {"(compress_lens is missing)"});
}

TEST(ScatterPaCacheRejects, CompressShapes) {
  expect_rejected_4d(
      [](ReduceMean& e, auto&, auto&, TensorView& kc, auto&) {
        kc = TensorView(e.cache.data(), DType::float16, {4, 1, 2, 2});
      },
      {"key_cache shape [4, 1, 2, 2] must be [num_blocks, block_size, 1, 2] "
       "with a 4-D key"});
  expect_rejected_4d([](ReduceMean& e, auto&, auto&, auto&,
                        TensorView& sm) { sm = TensorView(e.slots.data(), DType::int32, {1}); },
                     {"slot_mapping shape [1] must be [1, 1] (batch 1 x num_heads 1)"});
  expect_rejected_4d(
      [](ReduceMean& e, ScatterPaCacheOptions& o, auto&, auto&, auto&) {
        o.compress_seq_offsets = TensorView(e.offs.data(), DType::int32, {1, 1});
      },
      {"compress_seq_offsets shape [1, 1] must be [1]"});
  expect_rejected_4d(
      [](ReduceMean& e, ScatterPaCacheOptions& o, auto&, auto&, auto&) {
        o.seq_lens = TensorView(e.seq.data(), DType::int32, {1, 1});
      },
      {"seq_lens shape [1, 1] must be [1] (one length per batch)"});
}

TEST(ScatterPaCacheRejects, CompressValues) {
  expect_rejected_4d([](ReduceMean& e, auto&, auto&, auto&, auto&) { e.offs = {-1}; },
                     {"compress_seq_offsets[0] = -1 must be in [0, seq_lens[0] = 5]"});
  expect_rejected_4d([](ReduceMean& e, auto&, auto&, auto&, auto&) { e.offs = {4}; },
                     {"compress_seq_offsets[0] + compress_lens[0] = 4 + 2 = 6 exceeds "
                      "seq_lens[0] "
                      "= 5"});
  expect_rejected_4d([](ReduceMean& e, auto&, auto&, auto&, auto&) { e.seq = {6}; },
                     {"seq_lens[0] = 6 exceeds key.shape[1] = 5"});
  expect_rejected_4d([](ReduceMean& e, auto&, auto&, auto&, auto&) { e.lens = {-1}; },
                     {"compress_lens[0] = -1 must be >= 0"});
  expect_rejected_4d(
      [](ReduceMean& e, ScatterPaCacheOptions& o, auto&, auto&, auto&) {
        o.compress_seq_offsets.reset();  // tail keep
        e.lens = {6};
      },
      {"compress_lens[0] = 6 exceeds seq_lens[0] = 5"});
  // A run ending past the cache (the ReduceMean example without compression at slot 4).
  expect_rejected_4d([](ReduceMean& e, auto&, auto&, auto&, auto&) { e.lens = {0}; },
                     {"slot_mapping[0] = 4 starts a run of 5 rows", "out of range [0, 8)"});
}

TEST(ScatterPaCacheRejects, NullData) {
  expect_rejected([](Call& c) { c.kc.data = nullptr; }, {"key_cache"}, Status::null_pointer);
}

// ---- C ABI
// ----------------------------------------------------------------------------------

TEST(ScatterPaCacheCApi, ExampleRebindingAndErrors) {
  std::vector<std::uint8_t> key{0x08, 0x88, 0x18, 0x14, 0x09, 0x4A, 0xB2, 0x6E, 1, 2, 3, 4};
  std::vector<std::uint8_t> cache(16, 0), cache2(16, 0x55);
  std::vector<std::int32_t> slots{3, -1, 0};
  const std::int64_t ks[] = {3, 1, 4}, cs[] = {2, 2, 1, 4}, ss[] = {3};
  kvsTensor *k = nullptr, *c = nullptr, *s = nullptr;
  ASSERT_EQ(kvsCreateTensor(key.data(), KVS_HIFLOAT8, 3, ks, nullptr, &k), KVS_SUCCESS);
  ASSERT_EQ(kvsCreateTensor(cache.data(), KVS_HIFLOAT8, 4, cs, nullptr, &c), KVS_SUCCESS);
  ASSERT_EQ(kvsCreateTensor(slots.data(), KVS_INT32, 1, ss, nullptr, &s), KVS_SUCCESS);
  std::uint64_t ws = 1;
  kvsExecutor* ex = nullptr;
  ASSERT_EQ(kvsScatterPaCacheGetWorkspaceSize(k, c, s, nullptr, nullptr, nullptr, &ws, &ex),
            KVS_SUCCESS)
      << kvsGetLastErrorMessage();
  EXPECT_EQ(ws, 0u);
  ASSERT_EQ(kvsScatterPaCache(nullptr, 0, ex), KVS_SUCCESS);
  EXPECT_EQ(cache, (std::vector<std::uint8_t>{1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x88, 0x18,
                                              0x14}));
  ASSERT_EQ(kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_CACHE_KEY_CACHE_INDEX, cache2.data()),
            KVS_SUCCESS);
  slots[0] = 4;  // past the 4 slots: checked at execution, nothing written
  EXPECT_EQ(kvsScatterPaCache(nullptr, 0, ex), KVS_ERROR_INVALID_PARAMETER);
  EXPECT_NE(std::string(kvsGetLastErrorMessage()).find("slot_mapping[0] = 4 is out of range"),
            std::string::npos);
  EXPECT_EQ(cache2, std::vector<std::uint8_t>(16, 0x55));
  slots[0] = 1;
  ASSERT_EQ(kvsScatterPaCache(nullptr, 0, ex), KVS_SUCCESS);
  EXPECT_EQ(std::vector<std::uint8_t>(cache2.begin() + 4, cache2.begin() + 8),
            (std::vector<std::uint8_t>{0x08, 0x88, 0x18, 0x14}));
  kvsDestroyExecutor(ex);
  ex = nullptr;
  EXPECT_EQ(kvsScatterPaCacheGetWorkspaceSize(k, c, nullptr, nullptr, nullptr, nullptr, &ws, &ex),
            KVS_ERROR_NULL_POINTER);
  EXPECT_EQ(ex, nullptr);
  EXPECT_EQ(kvsScatterPaCacheGetWorkspaceSize(k, c, s, s, nullptr, nullptr, &ws, &ex),
            KVS_ERROR_INVALID_PARAMETER);
  EXPECT_NE(std::string(kvsGetLastErrorMessage()).find("must be None with a 3-D key"),
            std::string::npos);
  kvsDestroyTensor(k);
  kvsDestroyTensor(c);
  kvsDestroyTensor(s);
}

// ---- randomized: the key side of scatter_pa_kv_cache, on every SIMD target
// -----------------

std::vector<std::uint8_t> bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

TEST(ScatterPaCacheRandom, EqualsTheKeySideOfScatterPaKvCache) {
  std::mt19937_64 rng(15);
  const DType plain[] = {DType::float16,     DType::int8,        DType::float8_e5m2,
                         DType::float4_e2m1, DType::float4_e1m2, DType::float32};
  for (int i = 0; i < 80; ++i) {
    const bool four = i % 2 == 1;
    const DType dt = four ? (i % 4 == 1 ? DType::bfloat16 : DType::uint16) : plain[rng() % 6];
    const std::size_t es = dtype_size(dt);
    const std::int64_t nb = (four ? 7 : 2) + static_cast<std::int64_t>(rng() % 6);
    const std::int64_t bs = 1 + static_cast<std::int64_t>(rng() % 9);
    const std::int64_t nh = 1 + static_cast<std::int64_t>(rng() % 3);
    const std::int64_t d = 1 + static_cast<std::int64_t>(rng() % 40);
    std::vector<std::int64_t> slots, seq, lens, offs;
    TensorView k, kc0;
    std::vector<std::uint8_t> key, cache0;
    ScatterPaCacheOptions o;
    ScatterPaKvCacheOptions so;
    std::int64_t slot_shape[2] = {0, 0};
    if (!four) {
      const std::int64_t t = static_cast<std::int64_t>(rng() % 20);
      key = bytes(rng, static_cast<std::size_t>(t * nh * d) * es);
      cache0 = bytes(rng, static_cast<std::size_t>(nb * bs * nh * d) * es);
      for (std::int64_t j = 0; j < t; ++j)
        slots.push_back(rng() % 5 == 0 ? -1
                                       : static_cast<std::int64_t>(
                                             rng() % static_cast<std::uint64_t>(nb * bs)));
      // A packed FP4 row of d bytes holds 2 d elements, which its shape counts.
      const std::int64_t de = dtype_bits(dt) == 4 ? 2 * d : d;
      k = TensorView(key.data(), dt, {t, nh, de});
      kc0 = TensorView(cache0.data(), dt, {nb, bs, nh, de});
      slot_shape[0] = t;
    } else {
      const std::int64_t b = 1 + static_cast<std::int64_t>(rng() % 3),
                         s = 1 + static_cast<std::int64_t>(rng() % 6);
      key = bytes(rng, static_cast<std::size_t>(b * s * nh * d) * es);
      // Finite bfloat16 / any uint16: clear the exponent's top bit so no NaN
      // enters a mean.
      for (std::size_t j = 1; j < key.size(); j += 2) key[j] &= 0x3F;
      cache0 = bytes(rng, static_cast<std::size_t>(nb * bs * d) * es);
      for (std::int64_t x = 0; x < b; ++x)
        seq.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(s + 1)));
      for (std::int64_t x = 0; x < b * nh; ++x) {
        const std::int64_t l = seq[static_cast<std::size_t>(x / nh)];
        const std::int64_t w = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(l + 1));
        lens.push_back(w);
        offs.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(l - w + 1)));
        slots.push_back(rng() % 4 == 0 ? -1
                                       : static_cast<std::int64_t>(
                                             rng() % static_cast<std::uint64_t>(nb * bs - s)));
      }
      k = TensorView(key.data(), dt, {b, s, nh, d});
      kc0 = TensorView(cache0.data(), dt, {nb, bs, 1, d});
      o.seq_lens = so.seq_lens = TensorView(seq.data(), DType::int64, {b});
      o.compress_lens = so.compress_lens = TensorView(lens.data(), DType::int64, {b * nh});
      if (i % 3 != 0) {
        o.compress_seq_offsets = so.compress_seq_offsets =
            TensorView(offs.data(), DType::int64, {b * nh});
      }
      slot_shape[0] = b;
      slot_shape[1] = nh;
    }
    const TensorView sm(slots.data(), DType::int64,
                        std::span<const std::int64_t>(slot_shape, four ? 2 : 1));
    // The matching scatter_pa_kv_cache call (FP4 as bytes) gives the expected
    // bytes.
    auto want = cache0;
    TensorView kw = k, kcw = kc0;
    kcw.data = want.data();
    if (dtype_bits(dt) == 4) {
      kw = TensorView(key.data(), DType::uint8, {k.dim(0), nh, d});
      kcw = TensorView(want.data(), DType::uint8, {nb, bs, nh, d});
    }
    reference::execute(plan_scatter_pa_kv_cache(kw, std::nullopt, kcw, std::nullopt, sm, so));
    simd_test::for_each_target_and_thread_count([&](const std::string& where) {
      for (bool ref : {false, true}) {
        auto got = cache0;
        TensorView kc = kc0;
        kc.data = got.data();
        run(plan_scatter_pa_cache(k, kc, sm, o), ref);
        ASSERT_EQ(got, want) << "case " << i << " " << dtype_name(dt) << " ref " << ref << " "
                             << where;
      }
    });
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace kvscatter
