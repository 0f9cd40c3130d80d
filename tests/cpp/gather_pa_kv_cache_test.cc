// GatherPaKvCache: the worked examples byte for byte (optimized and reference
// paths), every rejection with its message and untouched outputs, the C ABI,
// and randomized optimized-versus-reference runs over layouts, dtypes, SIMD
// targets and thread counts.
#include "kvscatter/gather_pa_kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
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

std::uint16_t h(float x) { return formats::encode_float16(x); }

std::vector<std::uint16_t> halves(std::initializer_list<float> xs) {
  std::vector<std::uint16_t> v;
  for (float x : xs) v.push_back(h(x));
  return v;
}

void run(const GatherPaKvCachePlan& plan, bool ref) {
  if (ref)
    reference::execute(plan);
  else
    execute(plan);
}

// The worked example of docs/operators/gather_pa_kv_cache.md: key_cache [4, 2, 1, 2] float16,
// value_cache [4, 2, 1, 1], two sequences.
struct Example {
  std::vector<std::uint16_t> kc = std::vector<std::uint16_t>(16),
                             vc = std::vector<std::uint16_t>(8);
  std::vector<std::int32_t> tables{2, 0, 3, 1, 3, -1}, lens{3, 2}, offsets;
  std::vector<std::uint16_t> key = std::vector<std::uint16_t>(12, 0xBC00);
  std::vector<std::uint16_t> value = std::vector<std::uint16_t>(6, 0xBC00);
  GatherPaKvCacheOptions opt;
  bool with_value = true;
  struct Views {
    TensorView kc, tables, lens, key;
    std::optional<TensorView> vc, value;
  };
  std::function<void(Views&)> tweak;  // edits the views before planning (rejection tests)

  Example() {
    for (int b = 0; b < 4; ++b) {
      for (int o = 0; o < 2; ++o) {
        kc[static_cast<std::size_t>((b * 2 + o) * 2)] = h(static_cast<float>(10 * b + o));
        kc[static_cast<std::size_t>((b * 2 + o) * 2 + 1)] =
            h(static_cast<float>(10 * b + o) + 0.5f);
        vc[static_cast<std::size_t>(b * 2 + o)] = h(static_cast<float>(100 + 10 * b + o));
      }
    }
  }
  TensorView kcv() { return TensorView(kc.data(), DType::float16, {4, 2, 1, 2}); }
  TensorView vcv() { return TensorView(vc.data(), DType::float16, {4, 2, 1, 1}); }
  TensorView tv() { return TensorView(tables.data(), DType::int32, {2, 3}); }
  TensorView lv() {
    return TensorView(lens.data(), DType::int32, {static_cast<std::int64_t>(lens.size())});
  }
  TensorView kv() { return TensorView(key.data(), DType::float16, {6, 1, 2}); }
  TensorView vv() { return TensorView(value.data(), DType::float16, {6, 1, 1}); }
  GatherPaKvCachePlan plan() {
    if (!offsets.empty()) {
      opt.seq_offset =
          TensorView(offsets.data(), DType::int32, {static_cast<std::int64_t>(offsets.size())});
    }
    Views v{kcv(), tv(), lv(), kv(), std::nullopt, std::nullopt};
    if (with_value) {
      v.vc = vcv();
      v.value = vv();
    }
    if (tweak) tweak(v);
    return plan_gather_pa_kv_cache(v.kc, v.vc, v.tables, v.lens, v.key, v.value, opt);
  }
};

const std::vector<std::uint16_t> kExampleKey =
    halves({20, 20.5, 21, 21.5, 0, 0.5, 10, 10.5, 11, 11.5, -1, -1});
const std::vector<std::uint16_t> kExampleValue = halves({120, 121, 100, 110, 111, -1});

class GatherExamples : public ::testing::TestWithParam<bool> {};

TEST_P(GatherExamples, NormKeyAndValue) {
  Example e;
  run(e.plan(), GetParam());
  EXPECT_EQ(e.key, kExampleKey);
  EXPECT_EQ(e.value, kExampleValue);
}

TEST_P(GatherExamples, CumulativeSeqLens) {
  Example e;
  e.lens = {0, 3, 5};
  e.opt.is_seq_lens_cumsum = true;
  run(e.plan(), GetParam());
  EXPECT_EQ(e.key, kExampleKey);
  EXPECT_EQ(e.value, kExampleValue);
}

TEST_P(GatherExamples, SeqOffsetShiftsWholeBlocks) {
  Example e;
  e.offsets = {2, 3};
  run(e.plan(), GetParam());
  EXPECT_EQ(e.key, halves({0, 0.5, 1, 1.5, 30, 30.5, 30, 30.5, 31, 31.5, -1, -1}));
  EXPECT_EQ(e.value, halves({100, 101, 130, 130, 131, -1}));
}

TEST_P(GatherExamples, NegativeBlockIsZeroFilledAndUnreadColumnsAreFree) {
  Example e;
  e.tables = {2, 0, 3, -1, 3, 99};
  run(e.plan(), GetParam());
  std::vector<std::uint16_t> key = kExampleKey, value = kExampleValue;
  for (int i = 6; i < 10; ++i) key[static_cast<std::size_t>(i)] = 0x0000;
  value[3] = value[4] = 0x0000;
  EXPECT_EQ(e.key, key);
  EXPECT_EQ(e.value, value);
}

TEST_P(GatherExamples, KeyOnly) {
  Example e;
  e.with_value = false;
  run(e.plan(), GetParam());
  EXPECT_EQ(e.key, kExampleKey);
  EXPECT_EQ(e.value, std::vector<std::uint16_t>(6, 0xBC00));
}

TEST_P(GatherExamples, PaNzFloat16) {
  // key_cache [2, 2, 2, 16]: element [b][c][o][e] = 1000b + 100o + 16c + e.
  std::vector<std::uint16_t> kc(2 * 2 * 2 * 16);
  for (int b = 0; b < 2; ++b)
    for (int c = 0; c < 2; ++c)
      for (int o = 0; o < 2; ++o)
        for (int e = 0; e < 16; ++e)
          kc[static_cast<std::size_t>(((b * 2 + c) * 2 + o) * 16 + e)] =
              h(static_cast<float>(1000 * b + 100 * o + 16 * c + e));
  std::vector<std::int32_t> tables{1, 0}, lens{3};
  std::vector<std::uint16_t> key(3 * 32, 0xFFFF);
  GatherPaKvCacheOptions opt;
  opt.cache_mode = CacheMode::PA_NZ;
  run(plan_gather_pa_kv_cache(TensorView(kc.data(), DType::float16, {2, 2, 2, 16}), std::nullopt,
                              TensorView(tables.data(), DType::int32, {1, 2}),
                              TensorView(lens.data(), DType::int32, {1}),
                              TensorView(key.data(), DType::float16, {3, 32}), std::nullopt, opt),
      GetParam());
  for (int e = 0; e < 32; ++e) {
    EXPECT_EQ(key[static_cast<std::size_t>(e)], h(static_cast<float>(1000 + e)));
    EXPECT_EQ(key[static_cast<std::size_t>(32 + e)], h(static_cast<float>(1100 + e)));
    EXPECT_EQ(key[static_cast<std::size_t>(64 + e)], h(static_cast<float>(e)));
  }
  EXPECT_EQ(key[0], 0x63D0);
  EXPECT_EQ(key[1], 0x63D2);
  EXPECT_EQ(key[16], 0x63F0);
  EXPECT_EQ(key[17], 0x63F2);
}

TEST_P(GatherExamples, EmptyCallsAreNoOps) {
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<std::uint16_t> kc(16), key(4, 0xBC00);
    std::vector<std::int32_t> lens;
    GatherPaKvCacheOptions opt;
    std::int64_t batch = 0;
    if (variant == 1) {  // cumulative, batch 0
      lens = {0};
      opt.is_seq_lens_cumsum = true;
    }
    if (variant == 2) {  // every sequence empty
      lens = {0, 0};
      batch = 2;
    }
    std::vector<std::int32_t> tab(static_cast<std::size_t>(batch),
                                  5);  // never read
    run(plan_gather_pa_kv_cache(
            TensorView(kc.data(), DType::float16, {4, 2, 1, 2}), std::nullopt,
            TensorView(tab.data(), DType::int32, {batch, 1}),
            TensorView(lens.data(), DType::int32, {static_cast<std::int64_t>(lens.size())}),
            TensorView(key.data(), DType::float16, {2, 1, 2}), std::nullopt, opt),
        GetParam());
    EXPECT_EQ(key, std::vector<std::uint16_t>(4, 0xBC00)) << variant;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, GatherExamples, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Reference" : "Optimized"; });

// ---- rejections
// ---------------------------------------------------------------------------

// Runs `mutate` on a fresh worked-example setup, expects plan + execute (optimized and
// reference) to fail with `fragments`, and checks that key and value kept their
// bytes.
void expect_rejected(const std::function<void(Example&)>& mutate, Status status,
                     std::initializer_list<std::string> fragments) {
  for (bool ref : {false, true}) {
    Example e;
    mutate(e);
    const auto key0 = e.key;
    const auto value0 = e.value;
    expect_error([&] { run(e.plan(), ref); }, status, fragments);
    EXPECT_EQ(e.key, key0);
    EXPECT_EQ(e.value, value0);
  }
}

const Status kInv = Status::invalid_parameter;

TEST(GatherRejects, ValueWithoutValueCache) {
  Example e;
  expect_error(
      [&] { plan_gather_pa_kv_cache(e.kcv(), std::nullopt, e.tv(), e.lv(), e.kv(), e.vv()); }, kInv,
      {"value and value_cache must both be given or both be None (got only "
       "value)"});
  expect_error(
      [&] { plan_gather_pa_kv_cache(e.kcv(), e.vcv(), e.tv(), e.lv(), e.kv(), std::nullopt); },
      kInv, {"(got only value_cache)"});
}

TEST(GatherRejects, UnknownCacheMode) {
  expect_error(
      [] { parse_cache_mode("norm"); }, kInv,
      {"cache_mode must be one of {\"Norm\", \"PA_NZ\"} (or empty for Norm), got \"norm\""});
  expect_error([] { parse_cache_mode("PA_nz"); }, kInv, {"got \"PA_nz\""});
  EXPECT_EQ(parse_cache_mode(""), CacheMode::Norm);
  EXPECT_EQ(parse_cache_mode("Norm"), CacheMode::Norm);
  EXPECT_EQ(parse_cache_mode("PA_NZ"), CacheMode::PA_NZ);
}

TEST(GatherRejects, Dtypes) {
  expect_rejected(
      [](Example& e) { e.tweak = [](Example::Views& v) { v.key.dtype = DType::bfloat16; }; }, kInv,
      {"key dtype bfloat16 differs from key_cache dtype float16"});
  expect_rejected(
      [](Example& e) { e.tweak = [](Example::Views& v) { v.value->dtype = DType::int16; }; }, kInv,
      {"value dtype int16 differs from value_cache dtype float16"});
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) { v.vc->dtype = v.value->dtype = DType::int16; };
      },
      kInv,
      {"value_cache dtype int16 differs from key_cache dtype float16 (allowed "
       "in PA_NZ only)"});
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) { v.kc.dtype = v.key.dtype = DType::int64; };
      },
      kInv, {"key_cache dtype must be one of", "got int64"});
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) { v.kc.dtype = v.key.dtype = DType::float8_e8m0; };
      },
      kInv, {"key_cache dtype must be one of", "got float8_e8m0"});
}

TEST(GatherRejects, IndexDtypes) {
  expect_rejected(
      [](Example& e) { e.tweak = [](Example::Views& v) { v.tables.dtype = DType::uint32; }; }, kInv,
      {"block_tables dtype must be one of {int32, int64}, got uint32"});
  std::vector<std::int64_t> lens64{3, 2};
  expect_rejected(
      [&](Example& e) {
        e.tweak = [&](Example::Views& v) { v.lens = TensorView(lens64.data(), DType::int64, {2}); };
      },
      kInv,
      {"seq_lens dtype int64 differs from block_tables dtype int32 (index "
       "tensors share one dtype)"});
  expect_rejected(
      [&](Example& e) { e.opt.seq_offset = TensorView(lens64.data(), DType::int64, {2}); }, kInv,
      {"seq_offset dtype int64 differs from block_tables dtype int32"});
}

TEST(GatherRejects, IndexShapes) {
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) {
          v.tables = TensorView(v.tables.data, DType::int32, {6});
        };
      },
      kInv, {"block_tables must be 2-D"});
  expect_rejected([](Example& e) { e.opt.is_seq_lens_cumsum = true; }, kInv,
                  {"seq_lens shape [2] must be [3] for batch 2 (is_seq_lens_cumsum=True)"});
  expect_rejected(
      [](Example& e) {
        e.lens = {3, 2, 0};
      },
      kInv,
      {"seq_lens shape [3] must be [2] for batch 2 "
       "(is_seq_lens_cumsum=False)"});
  expect_rejected(
      [](Example& e) {
        e.offsets = {0, 0, 0};
      },
      kInv, {"seq_offset shape [3] must be [2] for batch 2"});
}

TEST(GatherRejects, CacheAndOutputShapes) {
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) {
          v.key = TensorView(v.key.data, DType::float16, {4, 1, 3});
        };
      },
      kInv,
      {"key shape [4, 1, 3] must be [num_tokens, 1, 2] to match key_cache [4, "
       "2, 1, 2]"});
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) {
          v.kc = TensorView(v.kc.data, DType::float16, {4, 2, 2});
        };
      },
      kInv, {"key_cache must be 4-D"});
  expect_rejected(
      [](Example& e) {
        e.opt.cache_mode = CacheMode::PA_NZ;
        e.with_value = false;
        e.tweak = [](Example::Views& v) { v.key = TensorView(v.key.data, DType::float16, {3, 4}); };
      },
      kInv, {"key_cache.shape[3] must be 16 (32 bytes of float16) in PA_NZ, got 2"});
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) {
          v.vc = TensorView(v.vc->data, DType::float16, {3, 2, 1, 1});
        };
      },
      kInv, {"value_cache has 3 blocks of 2 slots, key_cache has 4 blocks of 2"});
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) {
          v.vc = TensorView(v.vc->data, DType::float16, {4, 1, 2, 1});
          v.value = TensorView(v.value->data, DType::float16, {3, 2, 1});
        };
      },
      kInv, {"value_cache has 4 blocks of 1 slots, key_cache has 4 blocks of 2"});
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) {
          v.vc = TensorView(v.vc->data, DType::float16, {4, 2, 2, 1});
          v.value = TensorView(v.value->data, DType::float16, {3, 2, 1});
        };
      },
      kInv, {"value_cache has 2 heads, key_cache has 1"});
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) {
          v.value = TensorView(v.value->data, DType::float16, {5, 1, 1});
        };
      },
      kInv, {"value has 5 rows, key has 6"});
  expect_rejected(
      [](Example& e) {
        e.with_value = false;
        e.tweak = [](Example::Views& v) {
          v.kc = TensorView(v.kc.data, DType::float16, {4, 0, 1, 2});
        };
      },
      kInv, {"key_cache block_size must be >= 1, got 0"});
}

TEST(GatherRejects, Strides) {
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) {
          const std::int64_t shape[] = {6, 1, 2}, strides[] = {2, 2, 2};
          v.key = TensorView(v.key.data, DType::float16, shape, strides);
        };
      },
      kInv, {"key.strides[2] must be 1"});
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) {
          const std::int64_t shape[] = {4, 2, 1, 2}, strides[] = {4, 1, 2, 1};
          v.kc = TensorView(v.kc.data, DType::float16, shape, strides);
        };
      },
      kInv, {"key_cache.strides[1] must be 2"});
  expect_rejected(
      [](Example& e) {
        e.tweak = [](Example::Views& v) {
          const std::int64_t shape[] = {6, 1, 2}, strides[] = {1, 2, 1};
          v.key = TensorView(v.key.data, DType::float16, shape, strides);
        };
      },
      kInv, {"key.strides[0] must be >= 2"});
}

TEST(GatherRejects, SeqLensValues) {
  expect_rejected([](Example& e) { e.lens = {3, -2}; }, kInv, {"seq_lens[1] = -2 is negative"});
  expect_rejected(
      [](Example& e) {
        e.lens = {1, 3, 5};
        e.opt.is_seq_lens_cumsum = true;
      },
      kInv, {"seq_lens[0] = 1 must be 0 when is_seq_lens_cumsum is True"});
  expect_rejected(
      [](Example& e) {
        e.lens = {0, 3, 2};
        e.opt.is_seq_lens_cumsum = true;
      },
      kInv, {"seq_lens[2] = 2 is less than seq_lens[1] = 3"});
  expect_rejected(
      [](Example& e) {
        e.lens = {3, 4};
      },
      kInv, {"seq_lens cover 7 tokens but key has only 6 rows"});
}

TEST(GatherRejects, SeqOffsetValues) {
  expect_rejected(
      [](Example& e) {
        e.offsets = {0, -4};
      },
      kInv, {"seq_offset[1] = -4 is negative"});
  expect_rejected(
      [](Example& e) {
        e.offsets = {5, 0};
      },
      kInv,
      {"batch 0 needs block_tables[0][2:4] (seq_offset 5 // block_size 2 = 2, "
       "2 "
       "blocks) but block_tables has 3 columns"});
}

TEST(GatherRejects, TableTooShortForSequence) {
  expect_rejected(
      [](Example& e) {
        e.lens = {3, 7};
        e.key.resize(20, 0xBC00);
        e.value.resize(10, 0xBC00);
        e.tweak = [](Example::Views& v) {
          v.key = TensorView(v.key.data, DType::float16, {10, 1, 2});
          v.value = TensorView(v.value->data, DType::float16, {10, 1, 1});
        };
      },
      kInv,
      {"batch 1 needs block_tables[1][0:4] (seq_offset 0 // block_size 2 = 0, "
       "4 blocks) but "
       "block_tables has 3 columns"});
}

TEST(GatherRejects, BlockIdOutOfRange) {
  expect_rejected([](Example& e) { e.tables = {2, 4, 3, 1, 3, -1}; }, kInv,
                  {"block_tables[0][1] = 4 is out of range [0, 4) (key_cache "
                   "has 4 blocks)"});
  // A later batch's bad id also rejects the call before batch 0 is written.
  expect_rejected([](Example& e) { e.tables = {2, 0, 3, 7, 3, -1}; }, kInv,
                  {"block_tables[1][0] = 7 is out of range"});
}

TEST(GatherRejects, Int64IdsAreReadAtFullWidth) {
  for (bool ref : {false, true}) {
    Example e;
    std::vector<std::int64_t> tables{2, 0, 3, (std::int64_t{1} << 32) + 1, 3, -1}, lens{3, 2};
    e.tweak = [&](Example::Views& v) {
      v.tables = TensorView(tables.data(), DType::int64, {2, 3});
      v.lens = TensorView(lens.data(), DType::int64, {2});
    };
    const auto key0 = e.key;
    expect_error([&] { run(e.plan(), ref); }, kInv,
                 {"block_tables[1][0] = 4294967297 is out of range [0, 4)"});
    EXPECT_EQ(e.key, key0);
  }
}

TEST(GatherRejects, NullData) {
  Example e;
  auto kv = e.kv();
  kv.data = nullptr;
  expect_error([&] { plan_gather_pa_kv_cache(e.kcv(), e.vcv(), e.tv(), e.lv(), kv, e.vv()); },
               Status::null_pointer, {"key has a null data pointer"});
}

TEST(Gather, DifferentValueDtypeInPaNz) {
  // PA_NZ: float8 key rows of 32 bytes, float16 value rows of 32 elements (two
  // chunks).
  std::vector<std::uint8_t> kc(2 * 1 * 2 * 32), key(2 * 32, 0xAA);
  std::vector<std::uint16_t> vc(2 * 2 * 2 * 16), value(2 * 32, 0xAAAA);
  for (std::size_t i = 0; i < kc.size(); ++i) kc[i] = static_cast<std::uint8_t>(i);
  for (std::size_t i = 0; i < vc.size(); ++i) vc[i] = static_cast<std::uint16_t>(i);
  std::vector<std::int64_t> tables{1}, lens{2};
  GatherPaKvCacheOptions opt;
  opt.cache_mode = CacheMode::PA_NZ;
  gather_pa_kv_cache(TensorView(kc.data(), DType::float8_e4m3fn, {2, 1, 2, 32}),
                     TensorView(vc.data(), DType::float16, {2, 2, 2, 16}),
                     TensorView(tables.data(), DType::int64, {1, 1}),
                     TensorView(lens.data(), DType::int64, {1}),
                     TensorView(key.data(), DType::float8_e4m3fn, {2, 32}),
                     TensorView(value.data(), DType::float16, {2, 32}), opt);
  for (std::size_t o = 0; o < 2; ++o) {
    for (std::size_t e = 0; e < 32; ++e) {
      EXPECT_EQ(key[o * 32 + e], kc[64 + o * 32 + e]);
      const std::size_t c = e / 16;
      EXPECT_EQ(value[o * 32 + e], vc[64 + c * 32 + o * 16 + e % 16]);
    }
  }
}

// ---- C ABI
// ----------------------------------------------------------------------------------

struct CTensor {
  kvsTensor* t = nullptr;
  CTensor(void* data, kvsDataType dtype, std::vector<std::int64_t> shape) {
    EXPECT_EQ(kvsCreateTensor(data, dtype, static_cast<std::int64_t>(shape.size()), shape.data(),
                              nullptr, &t),
              KVS_SUCCESS);
  }
  ~CTensor() { kvsDestroyTensor(t); }
};

TEST(GatherCApi, ExampleAndRebinding) {
  Example e;
  CTensor kc(e.kc.data(), KVS_FLOAT16, {4, 2, 1, 2}), vc(e.vc.data(), KVS_FLOAT16, {4, 2, 1, 1});
  CTensor tab(e.tables.data(), KVS_INT32, {2, 3}), lens(e.lens.data(), KVS_INT32, {2});
  CTensor key(e.key.data(), KVS_FLOAT16, {6, 1, 2}), value(e.value.data(), KVS_FLOAT16, {6, 1, 1});
  std::uint64_t ws = 99;
  kvsExecutor* ex = nullptr;
  ASSERT_EQ(kvsGatherPaKvCacheGetWorkspaceSize(kc.t, vc.t, tab.t, lens.t, key.t, value.t, nullptr,
                                               "Norm", false, &ws, &ex),
            KVS_SUCCESS)
      << kvsGetLastErrorMessage();
  EXPECT_EQ(ws, 0u);
  ASSERT_EQ(kvsGatherPaKvCache(nullptr, 0, ex), KVS_SUCCESS) << kvsGetLastErrorMessage();
  EXPECT_EQ(e.key, kExampleKey);
  EXPECT_EQ(e.value, kExampleValue);
  // Same plan, another output buffer.
  std::vector<std::uint16_t> key2(12, 0x1234);
  ASSERT_EQ(kvsExecutorSetTensorAddr(ex, KVS_GATHER_PA_KV_CACHE_KEY_INDEX, key2.data()),
            KVS_SUCCESS);
  ASSERT_EQ(kvsGatherPaKvCache(nullptr, 0, ex), KVS_SUCCESS);
  auto want = kExampleKey;
  want[10] = want[11] = 0x1234;
  EXPECT_EQ(key2, want);
  // A data-dependent error at execution: status, message, untouched output.
  e.tables[1] = 4;
  std::vector<std::uint16_t> key3(12, 0x5555);
  ASSERT_EQ(kvsExecutorSetTensorAddr(ex, KVS_GATHER_PA_KV_CACHE_KEY_INDEX, key3.data()),
            KVS_SUCCESS);
  EXPECT_EQ(kvsGatherPaKvCache(nullptr, 0, ex), KVS_ERROR_INVALID_PARAMETER);
  EXPECT_NE(std::string(kvsGetLastErrorMessage()).find("block_tables[0][1] = 4 is out of range"),
            std::string::npos);
  EXPECT_EQ(key3, std::vector<std::uint16_t>(12, 0x5555));
  kvsDestroyExecutor(ex);
}

TEST(GatherCApi, Errors) {
  Example e;
  CTensor kc(e.kc.data(), KVS_FLOAT16, {4, 2, 1, 2});
  CTensor tab(e.tables.data(), KVS_INT32, {2, 3}), lens(e.lens.data(), KVS_INT32, {2});
  CTensor key(e.key.data(), KVS_FLOAT16, {6, 1, 2});
  std::uint64_t ws = 0;
  kvsExecutor* ex = nullptr;
  EXPECT_EQ(kvsGatherPaKvCacheGetWorkspaceSize(kc.t, nullptr, tab.t, lens.t, nullptr, nullptr,
                                               nullptr, nullptr, false, &ws, &ex),
            KVS_ERROR_NULL_POINTER);
  EXPECT_NE(std::string(kvsGetLastErrorMessage()).find("key"), std::string::npos);
  EXPECT_EQ(ex, nullptr);
  EXPECT_EQ(kvsGatherPaKvCacheGetWorkspaceSize(kc.t, nullptr, tab.t, lens.t, key.t, nullptr,
                                               nullptr, "norm", false, &ws, &ex),
            KVS_ERROR_INVALID_PARAMETER);
  EXPECT_NE(std::string(kvsGetLastErrorMessage()).find("cache_mode must be one of"),
            std::string::npos);
  ASSERT_EQ(kvsGatherPaKvCacheGetWorkspaceSize(kc.t, nullptr, tab.t, lens.t, key.t, nullptr,
                                               nullptr, "", false, &ws, &ex),
            KVS_SUCCESS);
  EXPECT_EQ(kvsScatterPaKvCache(nullptr, 0, ex), KVS_ERROR_INVALID_PARAMETER);
  EXPECT_NE(std::string(kvsGetLastErrorMessage()).find("kvsGatherPaKvCacheGetWorkspaceSize"),
            std::string::npos);
  kvsDestroyExecutor(ex);
}

// ---- randomized: optimized == reference on every SIMD target and thread count
// --------------

struct RandomCase {
  DType key_dtype, value_dtype;
  CacheMode mode;
  std::int64_t nb, bs, heads, dk, dv, batch, width, rows;
  bool with_value, cumsum, with_offset, int64_index, strided;
};

void check_random(std::mt19937_64& rng, const RandomCase& c) {
  const std::size_t ke = dtype_size(c.key_dtype), ve = dtype_size(c.value_dtype);
  const bool nz = c.mode == CacheMode::PA_NZ;
  const std::int64_t kl = nz ? static_cast<std::int64_t>(32 / ke) : c.dk;
  const std::int64_t vl = nz ? static_cast<std::int64_t>(32 / ve) : c.dv;
  const std::int64_t kc1 = nz ? c.dk : c.heads,
                     vc1 = nz ? c.dv : c.heads;  // NZ: dk = chunks
  const std::int64_t kblock = c.bs * kc1 * kl, vblock = c.bs * vc1 * vl;
  const std::int64_t kpitch = kblock + (c.strided ? 3 * kl : 0),
                     vpitch = vblock + (c.strided ? vl : 0);
  auto kc = testing::random_bytes(static_cast<std::size_t>(c.nb * kpitch) * ke, rng());
  auto vc = testing::random_bytes(static_cast<std::size_t>(c.nb * vpitch) * ve, rng());
  // Lengths: each sequence fits its table; ids mostly valid, some padding.
  std::vector<std::int64_t> lens(static_cast<std::size_t>(c.batch)), offs(lens.size());
  std::vector<std::int64_t> tables(static_cast<std::size_t>(c.batch * c.width));
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < c.batch; ++b) {
    const std::int64_t shift = c.with_offset ? static_cast<std::int64_t>(rng() % 2) : 0;
    offs[static_cast<std::size_t>(b)] =
        shift * c.bs + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.bs));
    const std::int64_t max_len = (c.width - shift) * c.bs;
    lens[static_cast<std::size_t>(b)] =
        static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max_len + 1));
    total += lens[static_cast<std::size_t>(b)];
  }
  for (auto& id : tables) {
    id = rng() % 8 == 0 ? -1 : static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.nb));
  }
  const std::int64_t rows = total + c.rows;
  const std::int64_t krow = kc1 * kl, vrow = vc1 * vl;
  const std::int64_t kout_pitch = krow + (c.strided ? 1 : 0), vout_pitch = vrow;
  auto key0 = testing::random_bytes(
      static_cast<std::size_t>(std::max<std::int64_t>(rows, 1) * kout_pitch) * ke, rng());
  auto val0 = testing::random_bytes(
      static_cast<std::size_t>(std::max<std::int64_t>(rows, 1) * vout_pitch) * ve, rng());
  std::vector<std::int64_t> lens_in = lens;
  if (c.cumsum) {
    lens_in.assign(1, 0);
    for (auto n : lens) lens_in.push_back(lens_in.back() + n);
  }
  std::vector<std::int32_t> t32(tables.begin(), tables.end()), l32(lens_in.begin(), lens_in.end()),
      o32(offs.begin(), offs.end());
  const DType idx = c.int64_index ? DType::int64 : DType::int32;
  auto idx_ptr = [&](std::vector<std::int64_t>& v64, std::vector<std::int32_t>& v32) -> void* {
    return c.int64_index ? static_cast<void*>(v64.data()) : static_cast<void*>(v32.data());
  };
  auto run_once = [&](bool ref, std::vector<std::uint8_t>& key, std::vector<std::uint8_t>& val) {
    TensorView kcv, vcv, kv, vv;
    if (nz) {
      const std::int64_t kshape[] = {c.nb, kc1, c.bs, kl}, kstr[] = {kpitch, c.bs * kl, kl, 1};
      const std::int64_t vshape[] = {c.nb, vc1, c.bs, vl}, vstr[] = {vpitch, c.bs * vl, vl, 1};
      kcv = TensorView(kc.data(), c.key_dtype, kshape, kstr);
      vcv = TensorView(vc.data(), c.value_dtype, vshape, vstr);
      const std::int64_t koshape[] = {rows, krow}, kostr[] = {kout_pitch, 1};
      const std::int64_t voshape[] = {rows, vrow}, vostr[] = {vout_pitch, 1};
      kv = TensorView(key.data(), c.key_dtype, koshape, kostr);
      vv = TensorView(val.data(), c.value_dtype, voshape, vostr);
    } else {
      const std::int64_t kshape[] = {c.nb, c.bs, c.heads, c.dk},
                         kstr[] = {kpitch, c.heads * c.dk, c.dk, 1};
      const std::int64_t vshape[] = {c.nb, c.bs, c.heads, c.dv},
                         vstr[] = {vpitch, c.heads * c.dv, c.dv, 1};
      kcv = TensorView(kc.data(), c.key_dtype, kshape, kstr);
      vcv = TensorView(vc.data(), c.value_dtype, vshape, vstr);
      const std::int64_t koshape[] = {rows, c.heads, c.dk}, kostr[] = {kout_pitch, c.dk, 1};
      const std::int64_t voshape[] = {rows, c.heads, c.dv}, vostr[] = {vout_pitch, c.dv, 1};
      kv = TensorView(key.data(), c.key_dtype, koshape, kostr);
      vv = TensorView(val.data(), c.value_dtype, voshape, vostr);
    }
    GatherPaKvCacheOptions opt;
    opt.cache_mode = c.mode;
    opt.is_seq_lens_cumsum = c.cumsum;
    if (c.with_offset) opt.seq_offset = TensorView(idx_ptr(offs, o32), idx, {c.batch});
    const auto plan = plan_gather_pa_kv_cache(
        kcv, c.with_value ? std::optional<TensorView>(vcv) : std::nullopt,
        TensorView(idx_ptr(tables, t32), idx, {c.batch, c.width}),
        TensorView(idx_ptr(lens_in, l32), idx, {static_cast<std::int64_t>(lens_in.size())}), kv,
        c.with_value ? std::optional<TensorView>(vv) : std::nullopt, opt);
    run(plan, ref);
  };
  auto want_k = key0, want_v = val0;
  run_once(true, want_k, want_v);
  simd_test::for_each_target_and_thread_count([&](const std::string& where) {
    auto k = key0, v = val0;
    run_once(false, k, v);
    ASSERT_EQ(k, want_k) << where;
    ASSERT_EQ(v, want_v) << where;
  });
}

TEST(GatherRandom, OptimizedMatchesReference) {
  std::mt19937_64 rng(14);
  const DType dtypes[] = {DType::float32, DType::float16, DType::bfloat16, DType::int8,
                          DType::uint16,  DType::int32,   DType::hifloat8, DType::float8_e4m3fn};
  for (int i = 0; i < 120; ++i) {
    RandomCase c{};
    c.mode = i % 3 == 2 ? CacheMode::PA_NZ : CacheMode::Norm;
    c.key_dtype = dtypes[rng() % 8];
    c.value_dtype = c.mode == CacheMode::PA_NZ ? dtypes[rng() % 8] : c.key_dtype;
    c.nb = 1 + static_cast<std::int64_t>(rng() % 9);
    c.bs = 1 + static_cast<std::int64_t>(rng() % 17);
    c.heads = 1 + static_cast<std::int64_t>(rng() % 3);
    c.dk = c.mode == CacheMode::PA_NZ ? 1 + static_cast<std::int64_t>(rng() % 4)
                                      : 1 + static_cast<std::int64_t>(rng() % 40);
    c.dv = c.mode == CacheMode::PA_NZ ? 1 + static_cast<std::int64_t>(rng() % 4)
                                      : 1 + static_cast<std::int64_t>(rng() % 40);
    c.batch = static_cast<std::int64_t>(rng() % 6);
    c.width = 1 + static_cast<std::int64_t>(rng() % 5);
    c.rows = static_cast<std::int64_t>(rng() % 3);
    c.with_value = rng() % 4 != 0;
    c.cumsum = rng() % 2;
    c.with_offset = rng() % 2;
    c.int64_index = rng() % 2;
    c.strided = rng() % 2;
    SCOPED_TRACE(i);
    check_random(rng, c);
  }
}

TEST(GatherRandom, LargeCallThreadsAgree) {
  std::mt19937_64 rng(7);
  RandomCase c{DType::bfloat16,
               DType::bfloat16,
               CacheMode::Norm,
               64,
               16,
               4,
               64,
               64,
               8,
               8,
               5,
               true,
               false,
               true,
               false,
               false};
  check_random(rng, c);
}

}  // namespace
}  // namespace kvscatter
