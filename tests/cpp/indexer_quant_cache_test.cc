// IndexerQuantCache: the worked examples byte for byte on both paths, every rejection with its
// message and untouched caches, the C ABI, and randomized optimized-versus-reference runs over
// every mode, dtype, SIMD target and thread count.
#include "kvscatter/indexer_quant_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kvscatter/formats.h"
#include "kvscatter/kvscatter.h"
#include "kvscatter/runtime.h"
#include "simd_targets.h"
#include "testing.h"

namespace kvscatter {
namespace {

using testing::expect_error;
using Bytes = std::vector<std::uint8_t>;

void run(const IndexerQuantCachePlan& p, bool ref) {
  if (ref)
    reference::execute(p);
  else
    execute(p);
}

Bytes hex(const std::string& s) {
  Bytes out;
  for (std::size_t i = 0; i < s.size();) {
    if (s[i] == ' ') {
      ++i;
      continue;
    }
    out.push_back(static_cast<std::uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
    i += 2;
  }
  return out;
}

// A cache view built over rows of bytes, as the caller of the C++ API describes it: a packed
// FP4 view's shape and strides count elements, two per byte.
TensorView as_elements(TensorView bytes) {
  if (dtype_bits(bytes.dtype) != 4) return bytes;
  const int last = bytes.rank - 1;
  for (int i = 0; i < bytes.rank; ++i) {
    const auto a = static_cast<std::size_t>(i);
    if (i == last) {
      bytes.shape[a] *= 2;
    } else {
      bytes.strides[a] *= 2;
    }
  }
  return bytes;
}

std::vector<std::uint16_t> encode(DType dt, const std::vector<float>& xs) {
  std::vector<std::uint16_t> v;
  for (float x : xs) v.push_back(static_cast<std::uint16_t>(formats::encode(dt, x)));
  return v;
}

std::vector<float> fp8_example_row() {
  std::vector<float> x;
  for (int k = 0; k < 32; ++k) x.push_back(static_cast<float>(k - 16) / 4.0f);
  return x;
}

struct OneRow {
  DType xdt = DType::float16, cdt = DType::float8_e4m3fn, sdt = DType::float32;
  std::int64_t nb = 1, bs = 2, w = 32, ws = 1;
  std::vector<std::uint16_t> x;
  Bytes cache, scale;
  std::vector<std::int32_t> slots{1};
  IndexerQuantCacheOptions opt;

  IndexerQuantCachePlan plan() {
    const std::int64_t d = static_cast<std::int64_t>(x.size());
    const std::size_t sz = dtype_size(sdt);
    if (cache.empty()) cache.assign(static_cast<std::size_t>(nb * bs * w), 0);
    if (scale.empty()) scale.assign(static_cast<std::size_t>(nb * bs * ws) * sz, 0);
    return plan_indexer_quant_cache(as_elements(TensorView(cache.data(), cdt, {nb, bs, 1, w})),
                                    TensorView(scale.data(), sdt, {nb, bs, 1, ws}),
                                    TensorView(x.data(), xdt, {1, d}),
                                    TensorView(slots.data(), DType::int32, {1}), opt);
  }
  Bytes row(std::int64_t slot) const {
    return Bytes(cache.begin() + slot * w, cache.begin() + (slot + 1) * w);
  }
  std::uint32_t scale_bits(std::int64_t slot) const {
    std::uint32_t b;
    std::memcpy(&b, scale.data() + slot * ws * 4, 4);
    return b;
  }
};

class IndexerExamples : public ::testing::TestWithParam<bool> {};

TEST_P(IndexerExamples, Fp8Float16RoundScale) {
  OneRow e;
  e.x = encode(DType::float16, fp8_example_row());
  run(e.plan(), GetParam());
  EXPECT_EQ(e.row(1), hex("F8 F7 F6 F5 F4 F3 F2 F1 F0 EE EC EA E8 E4 E0 D8 00 58 60 64 68 6A 6C 6E "
                          "70 71 72 73 74 75 76 77"));
  EXPECT_EQ(e.scale_bits(1), 0x3C800000u);
  EXPECT_EQ(e.row(0), Bytes(32, 0));  // slot 0 stays zero
  EXPECT_EQ(e.scale_bits(0), 0u);
}

TEST_P(IndexerExamples, Fp8Float16ExactScale) {
  OneRow e;
  e.x = encode(DType::float16, fp8_example_row());
  e.opt.round_scale = false;
  run(e.plan(), GetParam());
  EXPECT_EQ(e.row(1), hex("FE FD FC FB FA FA F9 F8 F6 F4 F2 F1 EE EA E6 DE 00 5E 66 6A 6E 71 72 74 "
                          "76 78 79 7A 7A 7B 7C 7D"));
  EXPECT_EQ(e.scale_bits(1), 0x3C124925u);
}

TEST_P(IndexerExamples, Fp8E5M2) {
  OneRow e;
  e.x = encode(DType::float16, fp8_example_row());
  e.cdt = DType::float8_e5m2;
  run(e.plan(), GetParam());
  EXPECT_EQ(e.row(1), hex("F8 F8 F7 F6 F6 F6 F5 F4 F4 F3 F2 F1 F0 EE EC E8 00 68 6C 6E 70 71 72 73 "
                          "74 74 75 76 76 76 77 78"));
  EXPECT_EQ(e.scale_bits(1), 0x39000000u);
}

TEST_P(IndexerExamples, Mxfp8Bfloat16) {
  for (DType cdt : {DType::float8_e4m3fn, DType::float8_e5m2}) {
    OneRow e;
    std::vector<float> x = fp8_example_row();
    x.resize(64, 0.0f);
    e.x = encode(DType::bfloat16, x);
    e.xdt = DType::bfloat16;
    e.cdt = cdt;
    e.sdt = DType::float8_e8m0;
    e.bs = 1;
    e.w = 64;
    e.ws = 2;
    e.slots = {0};
    e.opt.quant_mode = IndexerQuantMode::mxfp8;
    e.opt.round_scale = false;  // ignored in this mode
    run(e.plan(), GetParam());
    const bool e4 = cdt == DType::float8_e4m3fn;
    Bytes want = e4 ? hex("F8 F7 F6 F5 F4 F3 F2 F1 F0 EE EC EA E8 E4 E0 D8 00 58 60 64 68 6A 6C 6E "
                          "70 71 72 73 74 75 76 77")
                    : hex("F8 F8 F7 F6 F6 F6 F5 F4 F4 F3 F2 F1 F0 EE EC E8 00 68 6C 6E 70 71 72 73 "
                          "74 74 75 76 76 76 77 78");
    want.resize(64, 0);
    EXPECT_EQ(e.cache, want);
    EXPECT_EQ(e.scale, e4 ? hex("79 69") : hex("72 62"));
  }
}

TEST_P(IndexerExamples, Hifloat8) {
  for (float xs : {1.0f, 0.5f}) {
    OneRow e;
    std::vector<float> x = {1, -1, 0.5f, 3, 1.0625f, 100, -0.3f, 40000};
    x.resize(32, 0.0f);
    e.x = encode(DType::float16, x);
    e.cdt = DType::uint8;
    e.bs = 1;
    e.slots = {0};
    const float seven = 7.0f;
    e.scale.resize(4);
    std::memcpy(e.scale.data(), &seven, 4);
    e.opt.quant_mode = IndexerQuantMode::hifloat8;
    e.opt.x_scale = xs;
    run(e.plan(), GetParam());
    Bytes want = xs == 1.0f ? hex("08 88 18 14 09 4A B2 6E") : hex("18 98 30 0C 19 46 BA 6C");
    want.resize(32, 0);
    EXPECT_EQ(e.cache, want);
    EXPECT_EQ(e.scale_bits(0), 0x40E00000u);  // cache_scale keeps its 7.0
  }
}

TEST_P(IndexerExamples, Mxfp4) {
  for (DType xdt : {DType::bfloat16, DType::float16}) {
    for (DType cdt : {DType::float4_e2m1, DType::float4_e1m2}) {
      OneRow e;
      std::vector<float> x;
      for (int k = 0; k < 32; ++k) x.push_back(static_cast<float>(k - 16) / 8.0f);
      e.x = encode(xdt, x);
      e.xdt = xdt;
      e.cdt = cdt;
      e.sdt = DType::uint8;
      e.bs = 1;
      e.w = 16;
      e.slots = {0};
      e.opt.quant_mode = IndexerQuantMode::mxfp4;
      run(e.plan(), GetParam());
      const bool e2 = cdt == DType::float4_e2m1;
      EXPECT_EQ(e.cache, e2 ? hex("EE DE DD CC CC AB AA 89 00 21 22 43 44 54 55 66")
                            : hex("CC BC BB AA AA 9A 99 88 00 10 11 22 22 32 33 44"));
      EXPECT_EQ(e.scale, e2 ? hex("7E") : hex("80"));
    }
  }
}

TEST_P(IndexerExamples, Mxfp4SignedZeroGroupsAndSubnormal) {
  OneRow e;
  e.x.assign(64, 0x0000);
  for (int k = 32; k < 64; ++k) e.x[static_cast<std::size_t>(k)] = 0x8000;  // -0
  e.cdt = DType::float4_e2m1;
  e.sdt = DType::float8_e8m0;
  e.bs = 1;
  e.w = 32;
  e.ws = 2;
  e.slots = {0};
  e.opt.quant_mode = IndexerQuantMode::mxfp4;
  run(e.plan(), GetParam());
  Bytes want(32, 0x88);
  std::fill(want.begin(), want.begin() + 16, std::uint8_t{0});
  EXPECT_EQ(e.cache, want);
  EXPECT_EQ(e.scale, hex("00 00"));
  // A float16 group whose only non-zero element is 5 * 2^-24: scale 0x67, y = 5 -> 4 (code 6).
  OneRow f;
  f.x.assign(32, 0x0000);
  f.x[0] = 0x0005;
  f.cdt = DType::float4_e2m1;
  f.sdt = DType::uint8;
  f.bs = 1;
  f.w = 16;
  f.slots = {0};
  f.opt.quant_mode = IndexerQuantMode::mxfp4;
  run(f.plan(), GetParam());
  EXPECT_EQ(f.cache[0], 0x06);
  EXPECT_EQ(f.scale, hex("67"));
}

TEST_P(IndexerExamples, PagedPlacement) {
  // Cache [2, 2, 1, 40] float8_e4m3fn with block stride 100 bytes in a 200-byte buffer of EE;
  // cache_scale [2, 2, 1, 3] float32 of -1.0; rows: the fp8 example row, all ones, all zeros.
  Bytes cache(200, 0xEE);
  std::vector<float> scale(12, -1.0f);
  std::vector<float> x = fp8_example_row();
  x.resize(64, 1.0f);
  x.resize(96, 0.0f);
  std::vector<std::uint16_t> xh = encode(DType::float16, x);
  std::vector<std::int64_t> slots{3, -1, 0};
  const std::int64_t cshape[] = {2, 2, 1, 40}, cstrides[] = {100, 40, 40, 1};
  run(plan_indexer_quant_cache(TensorView(cache.data(), DType::float8_e4m3fn, cshape, cstrides),
                               TensorView(scale.data(), DType::float32, {2, 2, 1, 3}),
                               TensorView(xh.data(), DType::float16, {3, 32}),
                               TensorView(slots.data(), DType::int64, {3})),
      GetParam());
  Bytes want(200, 0xEE);
  const Bytes q =
      hex("F8 F7 F6 F5 F4 F3 F2 F1 F0 EE EC EA E8 E4 E0 D8 00 58 60 64 68 6A 6C 6E 70 "
          "71 72 73 74 75 76 77");
  std::copy(q.begin(), q.end(), want.begin() + 140);
  std::fill(want.begin(), want.begin() + 32, 0x00);
  EXPECT_EQ(cache, want);
  std::vector<float> want_scale(12, -1.0f);
  want_scale[9] = 0.015625f;
  want_scale[0] = 0.0f;
  EXPECT_EQ(scale, want_scale);
}

INSTANTIATE_TEST_SUITE_P(Paths, IndexerExamples, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Reference" : "Optimized"; });

TEST(IndexerQuantMode, Parsing) {
  EXPECT_EQ(parse_indexer_quant_mode(" MXFP8 "), IndexerQuantMode::mxfp8);
  EXPECT_EQ(parse_indexer_quant_mode("Fp8"), IndexerQuantMode::fp8);
  EXPECT_EQ(parse_indexer_quant_mode("2"), IndexerQuantMode::hifloat8);
  EXPECT_EQ(parse_indexer_quant_mode("mxfp4"), IndexerQuantMode::mxfp4);
  expect_error([] { parse_indexer_quant_mode("int8"); }, Status::invalid_parameter,
               {"quant_mode should be one of [mxfp8, fp8, hifloat8, mxfp4], got 'int8'"});
  expect_error([] { parse_indexer_quant_mode("4"); }, Status::invalid_parameter, {"got '4'"});
}

// ---- rejections -------------------------------------------------------------------------------

struct Bad {
  std::vector<std::uint16_t> x = std::vector<std::uint16_t>(5 * 64, 0x3C00);
  Bytes cache = Bytes(3 * 4 * 64, 0x11);
  std::vector<float> scale = std::vector<float>(3 * 4 * 2, 9.0f);
  std::vector<std::int32_t> slots{0, 1, 2, 3, 4};
  TensorView c = TensorView(cache.data(), DType::float8_e4m3fn, {3, 4, 1, 64});
  TensorView s = TensorView(scale.data(), DType::float32, {3, 4, 1, 2});
  TensorView xv = TensorView(x.data(), DType::bfloat16, {5, 64});
  TensorView sm = TensorView(slots.data(), DType::int32, {5});
  IndexerQuantCacheOptions o;
};

void expect_rejected(const std::function<void(Bad&)>& mutate, std::initializer_list<std::string> f,
                     Status status = Status::invalid_parameter) {
  for (bool ref : {false, true}) {
    Bad b;
    mutate(b);
    const Bytes c0 = b.cache;
    const std::vector<float> s0 = b.scale;
    expect_error([&] { run(plan_indexer_quant_cache(b.c, b.s, b.xv, b.sm, b.o), ref); }, status, f);
    EXPECT_EQ(b.cache, c0);
    EXPECT_EQ(b.scale, s0);
  }
}

TEST(IndexerRejects, X) {
  expect_rejected([](Bad& b) { b.xv.dtype = DType::float32; },
                  {"x dtype must be one of {float16, bfloat16}, got float32"});
  expect_rejected([](Bad& b) { b.xv = TensorView(b.x.data(), DType::bfloat16, {320}); },
                  {"x must have at least 2 dimensions"});
  expect_rejected(
      [](Bad& b) {
        b.xv = TensorView(b.x.data(), DType::bfloat16, {5, 48});
      },
      {"x last dim d = 48 must be a positive multiple of 32 and at most 8192"});
  expect_rejected(
      [](Bad& b) {
        b.xv = TensorView(b.x.data(), DType::bfloat16, {0, 8224});
      },
      {"x last dim d = 8224"});
}

TEST(IndexerRejects, ModeDtypes) {
  expect_rejected([](Bad& b) { b.c.dtype = DType::uint8; },
                  {"cache dtype uint8 does not fit quant_mode \"fp8\" (float8_e4m3fn or "
                   "float8_e5m2)"});
  expect_rejected([](Bad& b) { b.o.quant_mode = IndexerQuantMode::mxfp8; },
                  {"cache_scale dtype float32 does not fit quant_mode \"mxfp8\" (float8_e8m0 or "
                   "uint8)"});
  expect_rejected([](Bad& b) { b.o.quant_mode = IndexerQuantMode::hifloat8; },
                  {"cache dtype float8_e4m3fn does not fit quant_mode \"hifloat8\""});
  expect_rejected([](Bad& b) { b.o.quant_mode = IndexerQuantMode::mxfp4; },
                  {"cache dtype float8_e4m3fn does not fit quant_mode \"mxfp4\""});
}

TEST(IndexerRejects, Slots) {
  expect_rejected([](Bad& b) { b.sm = TensorView(b.slots.data(), DType::int32, {4}); },
                  {"slot_mapping shape [4] must equal x.shape[:-1] = [5]"});
  expect_rejected([](Bad& b) { b.sm.dtype = DType::uint32; },
                  {"slot_mapping dtype must be one of {int32, int64}"});
  expect_rejected([](Bad& b) { b.slots[2] = -2; },
                  {"slot_mapping[2] = -2 is out of range: -1 (skip) or [0, 12)"});
  expect_rejected([](Bad& b) { b.slots[4] = 12; }, {"slot_mapping[4] = 12 is out of range"});
}

TEST(IndexerRejects, Geometry) {
  expect_rejected(
      [](Bad& b) {
        b.c = TensorView(b.cache.data(), DType::float8_e4m3fn, {3, 4, 64});
      },
      {"cache must be 4-D"});
  expect_rejected(
      [](Bad& b) {
        b.c = TensorView(b.cache.data(), DType::float8_e4m3fn, {3, 2, 2, 64});
      },
      {"cache.shape[2] must be 1"});
  expect_rejected(
      [](Bad& b) {
        b.s = TensorView(b.scale.data(), DType::float32, {2, 4, 1, 2});
      },
      {"cache_scale has 2 blocks of 4 slots, cache has 3 blocks of 4"});
  expect_rejected(
      [](Bad& b) {
        const std::int64_t shape[] = {3, 4, 1, 63}, strides[] = {256, 64, 64, 1};
        b.c = TensorView(b.cache.data(), DType::float8_e4m3fn, shape, strides);
      },
      {"cache row holds 63 elements, needs 64 for d = 64"});
  expect_rejected(
      [](Bad& b) {
        b.o.quant_mode = IndexerQuantMode::mxfp8;
        b.s = TensorView(b.scale.data(), DType::uint8, {3, 4, 1, 1});
      },
      {"cache_scale row holds 1 entries, needs 2 for d = 64"});
  expect_rejected(
      [](Bad& b) {
        b.o.quant_mode = IndexerQuantMode::mxfp4;
        b.s.dtype = DType::uint8;
        b.c = TensorView(b.cache.data(), DType::float4_e2m1, {3, 4, 1, 62});
      },
      {"cache row holds 62 elements (packed two per byte), needs 64 for d = 64"});
  // Packed FP4 shapes and strides count elements; a row starts and ends on whole bytes.
  expect_rejected(
      [](Bad& b) {
        b.o.quant_mode = IndexerQuantMode::mxfp4;
        b.s.dtype = DType::uint8;
        b.c = TensorView(b.cache.data(), DType::float4_e2m1, {3, 4, 1, 65});
      },
      {"cache.shape[3] = 65 must be even (float4_e2m1 packs two elements per byte)"});
  expect_rejected(
      [](Bad& b) {
        b.o.quant_mode = IndexerQuantMode::mxfp4;
        b.s.dtype = DType::uint8;
        const std::int64_t shape[] = {3, 4, 1, 64}, strides[] = {260, 65, 65, 1};
        b.c = TensorView(b.cache.data(), DType::float4_e1m2, shape, strides);
      },
      {"cache.strides[1] = 65 must be even (a float4_e1m2 row starts on a whole byte)"});
  expect_rejected(
      [](Bad& b) {
        b.c = TensorView(b.cache.data(), DType::float8_e4m3fn, {3, 0, 1, 64});
      },
      {"block_size must be >= 1"});
}

TEST(IndexerRejects, NullData) {
  expect_rejected([](Bad& b) { b.s.data = nullptr; }, {"cache_scale has a null data pointer"},
                  Status::null_pointer);
}

TEST(Indexer, EmptyAndDuplicateSlots) {
  Bad b;
  std::vector<std::int32_t> none;
  execute(plan_indexer_quant_cache(b.c, b.s, TensorView(b.x.data(), DType::bfloat16, {0, 64}),
                                   TensorView(none.data(), DType::int32, {0}), b.o));
  EXPECT_EQ(b.cache, Bytes(3 * 4 * 64, 0x11));
  // Two rows to slot 5: the second (all 2.0) wins, codes and scale.
  std::fill(b.x.begin() + 64, b.x.end(), 0x4000);
  b.slots = {5, 5, -1, -1, -1};
  execute(plan_indexer_quant_cache(b.c, b.s, b.xv, b.sm, b.o));
  Bad r;
  std::fill(r.x.begin(), r.x.end(), 0x4000);
  r.slots = {5, -1, -1, -1, -1};
  reference::execute(plan_indexer_quant_cache(r.c, r.s, r.xv, r.sm, r.o));
  EXPECT_EQ(b.cache, r.cache);
  EXPECT_EQ(b.scale, r.scale);
}

// ---- C ABI ----------------------------------------------------------------------------------

TEST(IndexerCApi, RunsAndReportsErrors) {
  Bad b;
  const std::int64_t cs[] = {3, 4, 1, 64}, ss[] = {3, 4, 1, 2}, xs[] = {5, 64}, ms[] = {5};
  kvsTensor *c = nullptr, *s = nullptr, *x = nullptr, *m = nullptr;
  ASSERT_EQ(kvsCreateTensor(b.cache.data(), KVS_FLOAT8_E4M3FN, 4, cs, nullptr, &c), KVS_SUCCESS);
  ASSERT_EQ(kvsCreateTensor(b.scale.data(), KVS_FLOAT32, 4, ss, nullptr, &s), KVS_SUCCESS);
  ASSERT_EQ(kvsCreateTensor(b.x.data(), KVS_BFLOAT16, 2, xs, nullptr, &x), KVS_SUCCESS);
  ASSERT_EQ(kvsCreateTensor(b.slots.data(), KVS_INT32, 1, ms, nullptr, &m), KVS_SUCCESS);
  std::uint64_t ws = 1;
  kvsExecutor* ex = nullptr;
  ASSERT_EQ(kvsIndexerQuantCacheGetWorkspaceSize(c, s, x, m, " FP8", true, 1.0f, &ws, &ex),
            KVS_SUCCESS)
      << kvsGetLastErrorMessage();
  ASSERT_EQ(kvsIndexerQuantCache(nullptr, 0, ex), KVS_SUCCESS);
  Bad r;
  reference::execute(plan_indexer_quant_cache(r.c, r.s, r.xv, r.sm, r.o));
  EXPECT_EQ(b.cache, r.cache);
  EXPECT_EQ(b.scale, r.scale);
  b.slots[0] = 99;
  const Bytes before = b.cache;
  EXPECT_EQ(kvsIndexerQuantCache(nullptr, 0, ex), KVS_ERROR_INVALID_PARAMETER);
  EXPECT_NE(std::string(kvsGetLastErrorMessage()).find("slot_mapping[0] = 99 is out of range"),
            std::string::npos);
  EXPECT_EQ(b.cache, before);
  kvsDestroyExecutor(ex);
  ex = nullptr;
  EXPECT_EQ(kvsIndexerQuantCacheGetWorkspaceSize(c, s, x, m, "int8", true, 1.0f, &ws, &ex),
            KVS_ERROR_INVALID_PARAMETER);
  EXPECT_EQ(kvsIndexerQuantCacheGetWorkspaceSize(c, nullptr, x, m, "fp8", true, 1.0f, &ws, &ex),
            KVS_ERROR_NULL_POINTER);
  EXPECT_EQ(ex, nullptr);
  for (kvsTensor* t : {c, s, x, m}) kvsDestroyTensor(t);
}

// ---- randomized: optimized == reference -------------------------------------------------------

// Runs go(ref, cache, scale) by the reference, then on every SIMD target with 1 and 3 threads
// from the same starting bytes, and expects the reference's bytes each time.
template <class Go>
void expect_targets_match(const Go& go, const Bytes& cache0, const Bytes& scale0,
                          const std::string& label) {
  Bytes want_c = cache0, want_s = scale0;
  go(true, want_c, want_s);
  simd_test::for_each_target_and_thread_count([&](const std::string& where) {
    Bytes c = cache0, s = scale0;
    go(false, c, s);
    ASSERT_EQ(c, want_c) << label << " " << where;
    ASSERT_EQ(s, want_s) << label << " " << where;
  });
}

TEST(IndexerRandom, OptimizedMatchesReference) {
  std::mt19937_64 rng(16);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int i = 0; i < 96; ++i) {
    const auto mode = static_cast<IndexerQuantMode>(i % 4);
    const DType xdt = rng() % 2 ? DType::float16 : DType::bfloat16;
    const std::int64_t d = 32 * (1 + static_cast<std::int64_t>(rng() % 6));
    // x's layout: 0 contiguous rows; 1 rows `pitch` apart; 2 rank 3, [2, rows / 2, d], its two
    // halves `gap` apart (the kernels walk rank-2 rows by a pointer, others by the index).
    const int layout = (i / 4) % 3;
    std::int64_t rows = static_cast<std::int64_t>(rng() % 40);
    if (layout == 2) rows -= rows % 2;
    const std::int64_t nb = 3, bs = 5;
    const std::int64_t pitch = layout == 0 ? d : d + 8 * (1 + static_cast<std::int64_t>(rng() % 4));
    const std::int64_t gap = layout == 2 ? 16 : 0, half = rows / 2;
    DType cdt = rng() % 2 ? DType::float8_e4m3fn : DType::float8_e5m2, sdt = DType::float32;
    std::int64_t w = d + static_cast<std::int64_t>(rng() % 5), ws = 1;
    if (mode == IndexerQuantMode::hifloat8) cdt = DType::uint8;
    if (mode == IndexerQuantMode::mxfp4) {
      cdt = rng() % 2 ? DType::float4_e2m1 : DType::float4_e1m2;
      w = d / 2 + static_cast<std::int64_t>(rng() % 3);
    }
    if (mode == IndexerQuantMode::mxfp8 || mode == IndexerQuantMode::mxfp4) {
      sdt = DType::float8_e8m0;
      ws = d / 32 + static_cast<std::int64_t>(rng() % 2);
    }
    std::vector<std::uint16_t> x(static_cast<std::size_t>(rows * pitch + gap));
    const float spread = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
    for (auto& v : x) {
      const float f = nd(rng) * spread * (rng() % 16 == 0 ? 1000.0f : 1.0f);
      v = static_cast<std::uint16_t>(formats::encode(xdt, rng() % 50 == 0 ? 0.0f : f));
      if (rng() % 200 == 0) v = static_cast<std::uint16_t>(rng());  // any pattern, NaN included
    }
    std::vector<std::int64_t> slots(static_cast<std::size_t>(rows));
    for (auto& s : slots) s = rng() % 6 == 0 ? -1 : static_cast<std::int64_t>(rng() % (nb * bs));
    const Bytes cache0 = testing::random_bytes(static_cast<std::size_t>(nb * bs * w), rng());
    const Bytes scale0 =
        testing::random_bytes(static_cast<std::size_t>(nb * bs * ws) * dtype_size(sdt), rng());
    IndexerQuantCacheOptions o;
    o.quant_mode = mode;
    o.round_scale = rng() % 2;
    // x_scale 1 in one case of four: float16 rows take the lane forms in mode hifloat8 only then.
    o.x_scale = rng() % 4 == 0 ? 1.0f : std::ldexp(1.0f, static_cast<int>(rng() % 8) - 4) * 0.75f;
    const std::int64_t shape2[] = {rows, d}, strides2[] = {pitch, 1};
    const std::int64_t shape3[] = {2, half, d}, strides3[] = {half * pitch + gap, pitch, 1};
    const TensorView xv = layout == 2 ? TensorView(x.data(), xdt, shape3, strides3)
                                      : TensorView(x.data(), xdt, shape2, strides2);
    const TensorView sv = layout == 2 ? TensorView(slots.data(), DType::int64, {2, half})
                                      : TensorView(slots.data(), DType::int64, {rows});
    auto go = [&](bool ref, Bytes& c, Bytes& s) {
      run(plan_indexer_quant_cache(as_elements(TensorView(c.data(), cdt, {nb, bs, 1, w})),
                                   TensorView(s.data(), sdt, {nb, bs, 1, ws}), xv, sv, o),
          ref);
    };
    expect_targets_match(go, cache0, scale0,
                         std::to_string(i) + " layout " + std::to_string(layout));
    if (HasFatalFailure()) return;
  }
}

// Calls large enough to split across threads (thousands of d = 128 rows): the earlier writers of
// repeated slots are dropped first, then the chunks run on their own; the bytes must equal the
// reference's (a single pass in token order) for each mode, in prefill runs through shuffled
// blocks (no repeats: the dedup's fast check) and in random slots with repeats and padding.
// Prefill-like slot runs (consecutive slots within and across blocks, blocks out of order, a few
// padding entries) into caches whose blocks lie apart: a run may not step past its block's last
// slot into the next block's first, which is elsewhere. Every mode, on every SIMD target.
TEST(IndexerRuns, PrefillAcrossBlocksOfPaddedCaches) {
  std::mt19937_64 rng(41);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int i = 0; i < 16; ++i) {
    const auto mode = static_cast<IndexerQuantMode>(i % 4);
    const std::int64_t d = i < 8 ? 128 : 64, nb = 6, bs = 16, gap = 3;
    DType cdt = DType::float8_e4m3fn, sdt = DType::float32;
    std::int64_t w = d, ws = 1;
    if (mode == IndexerQuantMode::hifloat8) cdt = DType::uint8;
    if (mode == IndexerQuantMode::mxfp4) {
      cdt = DType::float4_e2m1;
      w = d / 2;
    }
    if (mode == IndexerQuantMode::mxfp8 || mode == IndexerQuantMode::mxfp4) {
      sdt = DType::float8_e8m0;
      ws = d / 32;
    }
    // Blocks out of order but with neighbours in a row (2 then 3, 4 then 5, ...), whose slots
    // continue each other's, filled from a random offset of the first one on.
    const std::vector<std::int64_t> order =
        i % 2 == 0 ? std::vector<std::int64_t>{2, 3, 0, 4, 5, 1}
                   : std::vector<std::int64_t>{5, 0, 1, 3, 4, 2};
    std::vector<std::int64_t> slots;
    for (std::int64_t k = static_cast<std::int64_t>(rng() % bs); k < nb * bs; ++k) {
      const std::int64_t slot = order[static_cast<std::size_t>(k / bs)] * bs + k % bs;
      slots.push_back(rng() % 23 == 0 ? -1 : slot);
    }
    const auto rows = static_cast<std::int64_t>(slots.size());
    std::vector<std::uint16_t> x(static_cast<std::size_t>(rows * d));
    for (auto& v : x) v = static_cast<std::uint16_t>(formats::encode(DType::bfloat16, nd(rng)));
    const std::int64_t cstride = (bs + gap) * w, sstride = (bs + gap) * ws;
    const Bytes cache0 = testing::random_bytes(static_cast<std::size_t>(nb * cstride), rng());
    const Bytes scale0 =
        testing::random_bytes(static_cast<std::size_t>(nb * sstride) * dtype_size(sdt), rng());
    IndexerQuantCacheOptions o;
    o.quant_mode = mode;
    o.round_scale = true;
    const std::int64_t cshape[] = {nb, bs, 1, w}, cstrides[] = {cstride, w, w, 1};
    const std::int64_t sshape[] = {nb, bs, 1, ws}, sstrides[] = {sstride, ws, ws, 1};
    auto go = [&](bool ref, Bytes& c, Bytes& s) {
      run(plan_indexer_quant_cache(as_elements(TensorView(c.data(), cdt, cshape, cstrides)),
                                   TensorView(s.data(), sdt, sshape, sstrides),
                                   TensorView(x.data(), DType::bfloat16, {rows, d}),
                                   TensorView(slots.data(), DType::int64, {rows}), o),
          ref);
    };
    expect_targets_match(go, cache0, scale0, std::to_string(i));
    if (HasFatalFailure()) return;
  }
}

TEST(IndexerThreads, ManyRowsMatchReference) {
  std::mt19937_64 rng(29);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const std::int64_t d = 128, rows = 6000, nb = 64, bs = 128;
  std::vector<std::uint16_t> x(static_cast<std::size_t>(rows * d));
  for (auto& v : x) v = formats::encode_bfloat16(nd(rng));
  std::vector<std::int64_t> blocks(static_cast<std::size_t>(nb));
  for (std::int64_t b = 0; b < nb; ++b) blocks[static_cast<std::size_t>(b)] = b;
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (bool prefill : {true, false}) {
    std::vector<std::int64_t> slots(static_cast<std::size_t>(rows));
    for (std::int64_t t = 0; t < rows; ++t) {
      slots[static_cast<std::size_t>(t)] =
          prefill ? blocks[static_cast<std::size_t>(t / bs)] * bs + t % bs
          : rng() % 9 == 0 ? -1
                           : static_cast<std::int64_t>(rng() % (nb * bs / 2));
    }
    for (int m = 0; m < 4; ++m) {
      const auto mode = static_cast<IndexerQuantMode>(m);
      const bool fp4 = mode == IndexerQuantMode::mxfp4;
      const bool mx = fp4 || mode == IndexerQuantMode::mxfp8;
      const DType cdt = fp4                                  ? DType::float4_e2m1
                        : mode == IndexerQuantMode::hifloat8 ? DType::hifloat8
                                                             : DType::float8_e4m3fn;
      const std::int64_t w = fp4 ? d / 2 : d, ws = mx ? d / 32 : 1;
      const DType sdt = mx ? DType::float8_e8m0 : DType::float32;
      IndexerQuantCacheOptions o;
      o.quant_mode = mode;
      const auto go = [&](bool ref, Bytes& c, Bytes& sc) {
        run(plan_indexer_quant_cache(as_elements(TensorView(c.data(), cdt, {nb, bs, 1, w})),
                                     TensorView(sc.data(), sdt, {nb, bs, 1, ws}),
                                     TensorView(x.data(), DType::bfloat16, {rows, d}),
                                     TensorView(slots.data(), DType::int64, {rows}), o),
            ref);
      };
      const Bytes c0(static_cast<std::size_t>(nb * bs * w), 0x5A);
      const Bytes s0(static_cast<std::size_t>(nb * bs * ws) * dtype_size(sdt), 0xA5);
      Bytes want_c = c0, want_s = s0;
      go(true, want_c, want_s);
      for (std::int64_t target : simd_test::simd_targets()) {
        simd_test::PinTarget pin(target);
        for (int threads : {1, 2, 3}) {
          set_num_threads(threads);
          Bytes c = c0, sc = s0;
          go(false, c, sc);
          ASSERT_EQ(c, want_c) << m << " " << simd_test::target_name(target) << " t" << threads
                               << (prefill ? " prefill" : " random");
          ASSERT_EQ(sc, want_s) << m << " " << simd_test::target_name(target) << " t" << threads;
        }
      }
    }
  }
  set_num_threads(0);
}

// The bfloat16-into-e4m3 power-of-two paths (fp8 with round_scale, mxfp8) over every bf16 bit
// pattern: in order (rows of neighbouring patterns, non-finite ones included), shuffled (rows
// whose magnitudes span the whole range, so lanes below e4m3's normal range, zeros and negative
// zeros sit next to large ones), under anchors of every exponent (a row's largest magnitude
// fixed, the rest anything below it), and a row of signed zeros. Row lengths cover d = 128's own
// kernel, the batched one and (mxfp8) rows of more than eight groups. f16: the same rows of
// float16 bit patterns (NaNs, infinities and subnormals too), under anchors of every exponent.
std::vector<std::uint16_t> sweep_rows(std::int64_t d, bool f16 = false) {
  const std::uint32_t field = f16 ? 0x7C00u : 0x7F80u, mant = f16 ? 10 : 7;
  const std::uint32_t step = f16 ? 1 : 3, per_exponent = f16 ? 8 : 2;
  std::vector<std::uint16_t> x(0x10000);
  for (std::uint32_t p = 0; p < 0x10000; ++p) x[p] = static_cast<std::uint16_t>(p);
  std::mt19937_64 rng(f16 ? 23 : 17);
  std::vector<std::uint16_t> finite;
  for (std::uint32_t p = 0; p < 0x10000; ++p) {
    if ((p & field) != field) finite.push_back(static_cast<std::uint16_t>(p));
  }
  std::shuffle(finite.begin(), finite.end(), rng);
  x.insert(x.end(), finite.begin(), finite.end());
  for (std::uint32_t e = 0; e < field >> mant; e += step) {
    for (std::uint32_t r = 0; r < per_exponent; ++r) {
      const std::uint32_t top = (e << mant) | static_cast<std::uint32_t>(rng() % (1u << mant));
      for (std::int64_t k = 0; k < d; ++k) {
        const std::uint32_t mag = k % 32 == 0 ? top : static_cast<std::uint32_t>(rng() % (top + 1));
        x.push_back(static_cast<std::uint16_t>(mag | (rng() % 2 ? 0x8000u : 0u)));
      }
    }
  }
  x.resize(x.size() / static_cast<std::size_t>(d) * static_cast<std::size_t>(d));
  for (std::int64_t k = 0; k < d; ++k) x.push_back(rng() % 2 ? 0x8000 : 0);  // an all-zero row
  return x;
}

// 0, 1, ..., rows - 1: row r into slot r.
std::vector<std::int64_t> slots_in_order(std::int64_t rows) {
  std::vector<std::int64_t> slots(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) slots[static_cast<std::size_t>(r)] = r;
  return slots;
}

// The plan writing x (rows of d bfloat16) into slots (one per row) of caches of one-slot blocks:
// codes of cdt, w entries a row, in c; scales of sdt, ws entries a row, in s.
IndexerQuantCachePlan plan_rows(std::vector<std::uint16_t>& x, std::int64_t d,
                                std::vector<std::int64_t>& slots, Bytes& c, DType cdt,
                                std::int64_t w, Bytes& s, DType sdt, std::int64_t ws,
                                const IndexerQuantCacheOptions& o, DType xdt = DType::bfloat16) {
  const auto rows = static_cast<std::int64_t>(slots.size());
  return plan_indexer_quant_cache(as_elements(TensorView(c.data(), cdt, {rows, 1, 1, w})),
                                  TensorView(s.data(), sdt, {rows, 1, 1, ws}),
                                  TensorView(x.data(), xdt, {rows, d}),
                                  TensorView(slots.data(), DType::int64, {rows}), o);
}

// Rows of d bfloat16 (or xdt) at x, row r into slot r, in an mxfp mode (one e8m0 scale per 32
// values) or mode fp8 (one float32 scale per row) into a cache of cdt, on every SIMD target
// against the reference: the first row that differs.
void expect_rows_match(std::vector<std::uint16_t>& x, std::int64_t d, IndexerQuantMode mode,
                       DType cdt, DType xdt = DType::bfloat16) {
  const bool mx = mode != IndexerQuantMode::fp8;
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / d;
  const std::int64_t w = mode == IndexerQuantMode::mxfp4 ? d / 2 : d;
  const std::int64_t ws = mx ? d / 32 : 4;  // scale bytes per row
  std::vector<std::int64_t> slots = slots_in_order(rows);
  IndexerQuantCacheOptions o;
  o.quant_mode = mode;
  const auto go = [&](bool ref, Bytes& c, Bytes& s) {
    run(plan_rows(x, d, slots, c, cdt, w, s, mx ? DType::float8_e8m0 : DType::float32, mx ? ws : 1,
                  o, xdt),
        ref);
  };
  Bytes want_c(static_cast<std::size_t>(rows * w)), want_s(static_cast<std::size_t>(rows * ws));
  go(true, want_c, want_s);
  for (std::int64_t target : simd_test::simd_targets()) {
    simd_test::PinTarget pin(target);
    Bytes c(want_c.size(), 0x5A), s(want_s.size(), 0x5A);
    go(false, c, s);
    for (std::int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(std::equal(c.begin() + r * w, c.begin() + (r + 1) * w, want_c.begin() + r * w))
          << dtype_name(cdt) << " d" << d << " row " << r << " "
          << simd_test::target_name(target);
      ASSERT_TRUE(std::equal(s.begin() + r * ws, s.begin() + (r + 1) * ws,
                             want_s.begin() + r * ws))
          << dtype_name(cdt) << " d" << d << " row " << r << " "
          << simd_test::target_name(target);
    }
  }
}

TEST(IndexerSweep, Bfloat16PowerOfTwoPathsMatchReference) {
  for (const auto mode : {IndexerQuantMode::fp8, IndexerQuantMode::mxfp8}) {
    SCOPED_TRACE(mode == IndexerQuantMode::mxfp8 ? "mxfp8" : "fp8");
    for (const std::int64_t d : {128, 96, 512}) {
      std::vector<std::uint16_t> x = sweep_rows(d);
      expect_rows_match(x, d, mode, DType::float8_e4m3fn);
      if (HasFatalFailure()) return;
    }
  }
}

// Mode mxfp8, d = 128, at the edges of the scale rule and of the lane form's normal test, on
// every SIMD target: sets of two rows (eight groups) whose groups share a largest magnitude of
// every exponent with mantissas around 96 (where f32(amax / 448) turns from a power of two to
// above one, moving the scale's exponent) and, in one group, a smallest magnitude at, just
// above or just below the normal range of the quotients, a zero, or one well inside the range
// (where the whole set takes the unmasked form), the rest in between.
TEST(IndexerSweep, Bfloat16Mxfp8ScaleAndNormalEdges) {
  std::mt19937_64 rng(29);
  std::vector<std::uint16_t> x;
  for (std::uint32_t e = 1; e < 255; ++e) {
    for (const std::uint32_t m : {0x00u, 0x5Fu, 0x60u, 0x61u, 0x7Fu}) {
      const std::uint32_t top = (e << 7) | m;
      if (top >= 0x7F80) continue;
      // The scale's exponent for this largest magnitude, and the smallest exponent field whose
      // quotients are e4m3-normal under it.
      const std::uint32_t se = std::max((top + 31) >> 7, 113u) - 8;
      const std::uint32_t normal = se >= 6 ? se - 6 : 0;
      const std::uint32_t edges[] = {(normal << 7) | 0x00u,
                                     (normal << 7) | 0x61u,
                                     normal > 0 ? ((normal - 1) << 7) | 0x7Fu : 0u,
                                     normal > 0 ? ((normal - 1) << 7) | 0x60u : 1u,
                                     0u,
                                     std::min(((normal + 2) << 7) | 0x11u, top),
                                     top};
      for (const std::uint32_t edge : edges) {
        const std::uint32_t low = std::min(edge + 1, top);
        for (std::uint32_t k = 0; k < 256; ++k) {
          std::uint32_t mag = low + static_cast<std::uint32_t>(rng() % (top - low + 1));
          if (k % 32 == 0) mag = top;
          if (k == 255) mag = edge;
          x.push_back(static_cast<std::uint16_t>(mag | (rng() % 2 ? 0x8000u : 0u)));
        }
      }
    }
  }
  expect_rows_match(x, 128, IndexerQuantMode::mxfp8, DType::float8_e4m3fn);
}

// Mode fp8 (round_scale), on every SIMD target: sets of eight rows (the kernels reduce and test
// rows eight at a time) whose largest magnitudes have exponents apart, so that their normal
// ranges start at different magnitudes, each row's other lanes inside its own range. One row of
// each set also holds a probe lane below the start of its range (an eighth below, where the lane
// form's code is wrong, or one bit pattern below), at its start, a zero, a negative zero, or
// none: the row itself must then be redone by the scalar rules, while the set's other rows,
// which may fail a test shared with it, still pass their own.
TEST(IndexerSweep, Bfloat16Fp8SetsAndNormalEdges) {
  std::mt19937_64 rng(31);
  for (const std::int64_t d : {128, 96}) {
    std::vector<std::uint16_t> x;
    const std::uint32_t spread[8] = {0, 1, 2, 3, 5, 8, 13, 20};
    for (std::uint32_t e0 = 16; e0 < 235; e0 += 9) {
      for (int probe_row = 0; probe_row < 8; ++probe_row) {
        for (int probe = 0; probe < 6; ++probe) {
          for (int r = 0; r < 8; ++r) {
            const std::uint32_t e = e0 + spread[(r + probe_row) % 8];
            const std::uint32_t top = (e << 7) | static_cast<std::uint32_t>(rng() % 128);
            // The scale's exponent for this largest magnitude (no floor in this mode), and the
            // magnitude from which its quotients are e4m3-normal.
            const std::uint32_t normal = (((top + 31) >> 7) - 8 - 6) << 7;
            for (std::int64_t k = 0; k < d; ++k) {
              std::uint32_t mag = normal + static_cast<std::uint32_t>(rng() % (top - normal + 1));
              if (k == 0) mag = top;
              if (r == probe_row && k == d - 1 - (e0 % 7)) {
                const std::uint32_t probes[6] = {normal - 0x20, normal - 1, normal, 0, 0, mag};
                mag = probes[probe];
                if (probe == 4) {  // a negative zero
                  x.push_back(0x8000);
                  continue;
                }
              }
              x.push_back(static_cast<std::uint16_t>(mag | (rng() % 2 ? 0x8000u : 0u)));
            }
          }
        }
      }
    }
    expect_rows_match(x, d, IndexerQuantMode::fp8, DType::float8_e4m3fn);
  }
}

// Mode hifloat8 over x (rows of d bfloat16, row r into slot r, or into slots[r] where given)
// on every SIMD target against the reference: the first target whose codes differ, and where
// (at = -1 when none does).
struct Hif8Difference {
  std::string target;
  std::int64_t at = -1;
  int got = 0, want = 0;
};

Hif8Difference hif8_first_difference(std::vector<std::uint16_t>& x, std::int64_t d, float x_scale,
                                     std::vector<std::int64_t> slots = {},
                                     DType xdt = DType::bfloat16) {
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / d;
  if (slots.empty()) slots = slots_in_order(rows);
  const std::int64_t n = *std::max_element(slots.begin(), slots.end()) + 1;
  IndexerQuantCacheOptions o;
  o.quant_mode = IndexerQuantMode::hifloat8;
  o.x_scale = x_scale;
  Bytes scale_row(static_cast<std::size_t>(n * 4));
  const auto go = [&](bool ref, Bytes& c) {
    run(plan_indexer_quant_cache(TensorView(c.data(), DType::uint8, {n, 1, 1, d}),
                                 TensorView(scale_row.data(), DType::float32, {n, 1, 1, 1}),
                                 TensorView(x.data(), xdt, {rows, d}),
                                 TensorView(slots.data(), DType::int64, {rows}), o),
        ref);
  };
  Bytes want(static_cast<std::size_t>(n * d), 0xA5);
  go(true, want);
  for (std::int64_t target : simd_test::simd_targets()) {
    simd_test::PinTarget pin(target);
    Bytes c(want.size(), 0x5A);
    go(false, c);
    const auto diff = std::mismatch(c.begin(), c.end(), want.begin());
    if (diff.first != c.end()) {
      return {simd_test::target_name(target), diff.first - c.begin(), int(*diff.first),
              int(*diff.second)};
    }
  }
  return {};
}

// Mode hifloat8 from bfloat16: every bit pattern (NaNs, infinities, zeros, subnormals) times
// scales that keep the products in range, push them into HiFloat8's denormals, below its
// smallest code, to saturation and to infinity, or make them all NaN, on every SIMD target.
TEST(IndexerSweep, Bfloat16HiFloat8MatchesReference) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float scales[] = {1.0f,      0.75f,   1.0f / 3.0f, 0x1p-3f, -0x1p-20f, 0x1p-40f, 0x1p-126f,
                          0x1p-149f, 0x1p20f, -0x1.8p100f, 3e38f,   0.0f,      inf,      nan};
  for (const std::int64_t d : {128, 96}) {
    std::vector<std::uint16_t> x = sweep_rows(d);
    for (const float x_scale : scales) {
      const Hif8Difference f = hif8_first_difference(x, d, x_scale);
      ASSERT_EQ(f.at, -1) << "d" << d << " x_scale " << x_scale << " " << f.target << ": bf16 0x"
                          << std::hex << x[static_cast<std::size_t>(f.at)] << " gives 0x"
                          << f.got << ", the reference 0x" << f.want;
    }
  }
}

// Mode hifloat8 from bfloat16: rows of ordinary values with one lane that the byte encoder of
// AVX2 and SSE4 leaves to the table (a NaN, a magnitude in [2^-23, 2^-15) or from 2^15, where
// 2^15 * 1.5 would read the code of infinity) or that it must zero without a sign (a negative
// zero or a magnitude below 2^-23), at every position of the row, so that each position of
// each vector is seen to hand its row on.
TEST(IndexerSweep, Bfloat16HiFloat8OneSpecialLane) {
  const std::uint16_t specials[] = {0x3400, 0xB400, 0x37FF, 0xB7C0, 0x7FC0, 0xFF81, 0x8000,
                                    0x8001, 0xB3FF, 0x7F80, 0xFF80, 0xC700, 0x4740, 0xC77F};
  const std::int64_t d = 128;
  std::mt19937_64 rng(18);
  for (const float x_scale : {1.0f, 0.75f}) {
    for (const std::uint16_t special : specials) {
      std::vector<std::uint16_t> x;
      for (std::int64_t r = 0; r < d; ++r) {
        for (std::int64_t k = 0; k < d; ++k) {
          // Magnitudes in [2^-12, 2^12), either sign.
          const auto e = static_cast<std::uint16_t>(115 + rng() % 24);
          const auto v = static_cast<std::uint16_t>((rng() % 2) << 15 | e << 7 | rng() % 128);
          x.push_back(k == r ? special : v);
        }
      }
      const Hif8Difference f = hif8_first_difference(x, d, x_scale);
      ASSERT_EQ(f.at, -1) << "special 0x" << std::hex << special << " x_scale " << x_scale << " "
                          << f.target << ": lane " << std::dec << f.at << std::hex
                          << " gives 0x" << f.got << ", the reference 0x" << f.want;
    }
  }
}

// Mode hifloat8 from bfloat16: rows of ordinary values, a few of them holding a lane that the
// byte encoder of AVX2 and SSE4 leaves to the table, two tokens to a slot. AVX2 and SSE4 check
// their rows' flags sixteen tokens at a time and take a chunk that fails again row by row: here
// chunks pass, one fails and later ones pass, one fails where its special row is the first of
// its slot's writers and one where it is the second, and the rows after the second failure are
// checked each on its own; the cache must still hold each slot's last writer.
TEST(IndexerSweep, Bfloat16HiFloat8SpecialRowsInChunks) {
  const std::int64_t d = 128, rows = 160;
  std::mt19937_64 rng(19);
  std::vector<std::uint16_t> x;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t k = 0; k < d; ++k) {
      const auto e = static_cast<std::uint16_t>(115 + rng() % 24);
      x.push_back(static_cast<std::uint16_t>((rng() % 2) << 15 | e << 7 | rng() % 128));
    }
  }
  const std::pair<std::int64_t, std::uint16_t> specials[] = {
      {4, 0x3400}, {71, 0xC740}, {130, 0x7FC0}, {150, 0xB7C0}};
  for (const auto& [r, v] : specials) x[static_cast<std::size_t>(r * d + (r * 37) % d)] = v;
  std::vector<std::int64_t> slots(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) slots[static_cast<std::size_t>(r)] = r / 2;
  for (const float x_scale : {1.0f, 0.75f}) {
    const Hif8Difference f = hif8_first_difference(x, d, x_scale, slots);
    ASSERT_EQ(f.at, -1) << "x_scale " << x_scale << " " << f.target << ": byte " << f.at
                        << " gives 0x" << std::hex << f.got << ", the reference 0x" << f.want;
  }
}

// Groups of `lanes` values whose largest magnitude is each magnitude pattern below `end` in
// turn (either sign): by default every finite bfloat16 one; 0x8000 takes every float16 pattern,
// infinity and the NaNs included. The largest sits at a lane that moves from group to group,
// the other lanes at most `spread` bit patterns below it.
std::vector<std::uint16_t> every_largest_magnitude(std::uint32_t lanes, std::uint64_t seed,
                                                   std::uint32_t end = 0x7F80,
                                                   std::uint32_t spread = 200) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint16_t> x;
  for (std::uint32_t top = 0; top < end; ++top) {
    for (std::uint32_t k = 0; k < lanes; ++k) {
      const std::uint32_t below = static_cast<std::uint32_t>(rng() % (std::min(top, spread) + 1));
      const std::uint32_t mag = k == top % lanes ? top : top - below;
      x.push_back(static_cast<std::uint16_t>(mag | (rng() % 2 ? 0x8000u : 0u)));
    }
  }
  return x;
}

// Mode mxfp8, d = 128: groups of 32 by every_largest_magnitude, so that every scale exponent the
// rule gives is reached from every magnitude that gives it, in sets that take the lane forms and
// sets that do not, on every SIMD target.
TEST(IndexerSweep, Bfloat16Mxfp8EveryLargestMagnitude) {
  std::vector<std::uint16_t> x = every_largest_magnitude(32, 37);
  expect_rows_match(x, 128, IndexerQuantMode::mxfp8, DType::float8_e4m3fn);
}

// Mode fp8 (round_scale), d = 128: rows by every_largest_magnitude, so that the integer scale
// rule meets every largest magnitude: the scale exponents from 8 on in sets that take the lane
// forms, and the rows below them (all-zero rows among them, with zeros of either sign), which
// only the scalar rules may write, on every SIMD target.
TEST(IndexerSweep, Bfloat16Fp8EveryLargestMagnitude) {
  std::vector<std::uint16_t> x = every_largest_magnitude(128, 41);
  expect_rows_match(x, 128, IndexerQuantMode::fp8, DType::float8_e4m3fn);
}

// Groups of `lanes` bf16 values whose first lane gives the scale exponent e (its largest
// magnitude, by the integer rule) and whose other lanes lie below e4m3's normal range at that
// scale (magnitude bits below (e - 6) << 7, quotients below 2^-6), each magnitude once with
// either sign: for every e in [e_from, 247] the five binades below that bound (every quotient
// that rounds to a nonzero code, and the first that round to zero), and for a few e every
// magnitude below it, zero included. The lane forms cannot code such lanes; the kernels find
// them and code them apart.
std::vector<std::uint16_t> below_normal_groups(std::uint32_t lanes, std::uint32_t e_from) {
  std::vector<std::uint16_t> x;
  const auto group = [&](std::uint32_t e, std::uint32_t from, std::uint32_t to) {
    const std::uint32_t top = e == 247 ? 0x7F7Fu : (e + 8) << 7;  // (top + 31) >> 7 == e + 8
    std::uint32_t sign = 0;
    for (std::uint32_t m = from; m < to || x.size() % lanes != 0;) {
      if (x.size() % lanes == 0) {
        x.push_back(static_cast<std::uint16_t>(top | sign));
        continue;
      }
      x.push_back(static_cast<std::uint16_t>((m < to ? m : from) | sign));
      sign ^= 0x8000u;
      if (sign == 0) ++m;
    }
  };
  for (std::uint32_t e = e_from; e <= 247; ++e) {
    const std::uint32_t bound = (e - 6) << 7;
    group(e, bound > (5u << 7) ? bound - (5u << 7) : 0, bound);
  }
  for (const std::uint32_t e : {8u, 9u, 20u, 105u, 106u, 127u, 200u, 247u}) {
    if (e >= e_from) group(e, 0, (e - 6) << 7);
  }
  x.resize((x.size() + 127) / 128 * 128, 0);  // whole rows of 128
  return x;
}

// Modes fp8 (round_scale) and mxfp8, d = 128, over below_normal_groups: every set of rows holds
// lanes below the normal range, so every row takes the checked form and has its low lanes
// coded apart, on every SIMD target.
TEST(IndexerSweep, Bfloat16E4M3LanesBelowNormal) {
  std::vector<std::uint16_t> fp8 = below_normal_groups(128, 8);
  expect_rows_match(fp8, 128, IndexerQuantMode::fp8, DType::float8_e4m3fn);
  std::vector<std::uint16_t> mx = below_normal_groups(32, 105);
  expect_rows_match(mx, 128, IndexerQuantMode::mxfp8, DType::float8_e4m3fn);
}

// The modes that scale by powers of two, each with a cache their lane forms write (fp8 with
// round_scale and mxfp8 into e4m3, mxfp4 into both FP4 caches).
struct PowerOfTwoCase {
  IndexerQuantMode mode;
  DType cdt;
};
constexpr PowerOfTwoCase kPowerOfTwoCases[] = {{IndexerQuantMode::fp8, DType::float8_e4m3fn},
                                               {IndexerQuantMode::mxfp8, DType::float8_e4m3fn},
                                               {IndexerQuantMode::mxfp4, DType::float4_e2m1},
                                               {IndexerQuantMode::mxfp4, DType::float4_e1m2}};

// The modes that scale by powers of two (fp8 with round_scale, mxfp8, mxfp4 into both FP4
// caches) over rows with one lane of +-infinity and no NaN, so that the infinity is its group's
// largest magnitude: such a group takes the scalar rules, the others of its row and batch keep
// the lane forms. Rows of ordinary magnitudes, and rows whose magnitudes are all near the top of
// bf16's range, where an infinity's group would pass the lane forms' tests of the smallest
// magnitude if it were taken as finite. Every position of a d = 128 row, and rows of other
// lengths, on every SIMD target and thread count.
TEST(IndexerSweep, Bfloat16InfinityAsLargestMagnitude) {
  std::mt19937_64 rng(31);
  for (const std::int64_t d : {128, 96, 512}) {
    const std::int64_t rows = 2 * (d == 128 ? d : 64);
    std::vector<std::uint16_t> x;
    for (std::int64_t r = 0; r < rows; ++r) {
      // Exponents e0 .. e0 + 7, two rows of each kind in turn (mxfp8 tests the smallest
      // magnitude of each two rows together).
      const std::uint32_t e0 = r % 4 < 2 ? 115 : 247;
      const std::int64_t at = (r / 2 * 37) % d;
      for (std::int64_t k = 0; k < d; ++k) {
        const auto e = static_cast<std::uint32_t>(e0 + rng() % 8);
        const std::uint32_t mag =
            k == at ? 0x7F80u : (e << 7) | static_cast<std::uint32_t>(rng() % 128);
        x.push_back(static_cast<std::uint16_t>(mag | (rng() % 2 ? 0x8000u : 0u)));
      }
    }
    std::vector<std::int64_t> slots = slots_in_order(rows);
    for (const auto& c : kPowerOfTwoCases) {
      const bool mx = c.mode != IndexerQuantMode::fp8;
      const std::int64_t w = c.mode == IndexerQuantMode::mxfp4 ? d / 2 : d, ws = mx ? d / 32 : 1;
      const DType sdt = mx ? DType::float8_e8m0 : DType::float32;
      IndexerQuantCacheOptions o;
      o.quant_mode = c.mode;
      o.round_scale = true;
      const auto go = [&](bool ref, Bytes& cache, Bytes& scale) {
        run(plan_rows(x, d, slots, cache, c.cdt, w, scale, sdt, ws, o), ref);
      };
      const Bytes cache0 = testing::random_bytes(static_cast<std::size_t>(rows * w), rng());
      const Bytes scale0 =
          testing::random_bytes(static_cast<std::size_t>(rows * ws) * dtype_size(sdt), rng());
      expect_targets_match(go, cache0, scale0,
                           std::string(dtype_name(c.cdt)) + (mx ? " mx" : " fp8") + " d" +
                               std::to_string(d));
      if (HasFatalFailure()) return;
    }
  }
}

// Mode mxfp4 from bfloat16 rows over the same bit patterns, into both FP4 caches: every code,
// including the lanes whose quotients round to zero (signed zeros), the groups of all zeros and
// those holding infinities or NaNs, and the groups near either end of bf16's range.
TEST(IndexerSweep, Bfloat16Mxfp4MatchesReference) {
  for (const DType cdt : {DType::float4_e2m1, DType::float4_e1m2}) {
    for (const std::int64_t d : {128, 96, 512, 32}) {
      std::vector<std::uint16_t> x = sweep_rows(d);
      expect_rows_match(x, d, IndexerQuantMode::mxfp4, cdt);
      if (HasFatalFailure()) return;
    }
  }
}

// The edges of the AVX-512 FP4 lane form: groups at the largest scales it takes (biggest
// operand t0g) and at the smallest, next to those it leaves to the scalar rules, holding signed
// zeros, subnormals, the values below the first rounding step and those on every step, so that
// the lanes it sends to its zero entry and those it keeps meet on both sides.
TEST(IndexerSweep, Bfloat16Mxfp4LaneFormEdges) {
  for (const DType cdt : {DType::float4_e2m1, DType::float4_e1m2}) {
    const std::uint32_t emax = cdt == DType::float4_e2m1 ? 2 : 0;
    std::vector<std::uint16_t> x;
    for (const std::uint32_t m : {254u, 253u, 200u, 127u, emax + 5, emax + 4, emax + 3, 1u}) {
      for (std::uint32_t step = 0; step < 24; ++step) {
        for (std::uint32_t k = 0; k < 32; ++k) {
          // k = 0: the group's largest; the others the smallest magnitudes (steps 0 and 1) or
          // reaching down from it across the powers of two below it.
          std::uint32_t mag = (m << 7) | 0x7Fu;
          if (k != 0 && step < 2) {
            mag = k * 16 + step;
          } else if (k != 0) {
            const std::uint32_t down = (k * (step - 1) * 5) % 1280;
            mag = (m << 7) > down ? (m << 7) - down : k % 3;
          }
          x.push_back(static_cast<std::uint16_t>(mag | ((k + step) % 2 ? 0x8000u : 0u)));
        }
      }
    }
    expect_rows_match(x, 128, IndexerQuantMode::mxfp4, cdt);
    if (HasFatalFailure()) return;
  }
}

// Batches of d = 128 rows of every length up to past one batch: the AVX-512 maxima take the
// rows four at a time, so a count that is not a multiple of four leaves its last rows in a
// partial set, whose scales and operands must still be the rows' own (not a previous batch's),
// and two rows on one slot must still end with the later one's bytes. Modes mxfp4 (bfloat16 and
// float16 rows) and mxfp8 (both).
TEST(IndexerSweep, MxRowCounts) {
  struct Case {
    IndexerQuantMode mode;
    DType cdt, xdt;
  };
  const Case cases[] = {{IndexerQuantMode::mxfp4, DType::float4_e2m1, DType::bfloat16},
                        {IndexerQuantMode::mxfp4, DType::float4_e1m2, DType::bfloat16},
                        {IndexerQuantMode::mxfp4, DType::float4_e2m1, DType::float16},
                        {IndexerQuantMode::mxfp4, DType::float4_e1m2, DType::float16},
                        {IndexerQuantMode::mxfp8, DType::float8_e4m3fn, DType::bfloat16},
                        {IndexerQuantMode::mxfp8, DType::float8_e4m3fn, DType::float16}};
  std::mt19937_64 rng(5);
  for (const Case& c : cases) {
    const bool f16 = c.xdt == DType::float16;
    const std::uint32_t inf = f16 ? 0x7C00 : 0x7F80;
    for (const std::int64_t rows : {1, 2, 3, 5, 7, 31, 32, 33, 63, 65, 66, 67}) {
      const std::int64_t d = 128, w = c.mode == IndexerQuantMode::mxfp4 ? d / 2 : d;
      // Any bits, with zero groups and infinities (rows the scalar rules finish), or finite
      // exponents alone, four binades a group from a base that differs from group to group
      // (bfloat16 10 to 249, float16 1 to 29: every group in the lane forms, scales that differ
      // from row to row); the rows reversed, or each pair of rows on one slot (the later row's
      // bytes win).
      for (const bool finite : {false, true}) {
        std::vector<std::uint16_t> x(static_cast<std::size_t>(rows * d));
        for (std::size_t i = 0; i < x.size(); ++i) {
          const std::uint32_t group = static_cast<std::uint32_t>(i / 32), kind = group * 7 % 11;
          const auto bits = static_cast<std::uint32_t>(rng());
          x[i] = static_cast<std::uint16_t>(kind == 3 && !finite ? (i % 2) << 15 : bits);
          if (kind == 5 && i % 32 == 9 && !finite) x[i] = static_cast<std::uint16_t>(inf);
          const std::uint32_t spread = bits % 4;
          if (finite && f16) {
            x[i] =
                static_cast<std::uint16_t>((bits & 0x83FF) | (1 + group * 5 % 25 + spread) << 10);
          } else if (finite) {
            x[i] =
                static_cast<std::uint16_t>((bits & 0x807F) | (10 + group * 37 % 237 + spread) << 7);
          }
        }
        for (const bool shared : {false, true}) {
          std::vector<std::int64_t> slots(static_cast<std::size_t>(rows));
          for (std::int64_t r = 0; r < rows; ++r) {
            slots[static_cast<std::size_t>(r)] = shared ? r / 2 : rows - 1 - r;
          }
          IndexerQuantCacheOptions o;
          o.quant_mode = c.mode;
          const auto go = [&](bool ref, Bytes& cache, Bytes& scale) {
            run(plan_rows(x, d, slots, cache, c.cdt, w, scale, DType::float8_e8m0, 4, o, c.xdt),
                ref);
          };
          Bytes want_c(static_cast<std::size_t>(rows * w), 0x5A);  // slots left unwritten
          Bytes want_s(static_cast<std::size_t>(rows * 4), 0x5A);
          go(true, want_c, want_s);
          for (std::int64_t target : simd_test::simd_targets()) {
            simd_test::PinTarget pin(target);
            Bytes cache(want_c.size(), 0x5A), scale(want_s.size(), 0x5A);
            go(false, cache, scale);
            const std::string what =
                std::string(dtype_name(c.cdt)) + " " + std::string(dtype_name(c.xdt)) + " rows " +
                std::to_string(rows) + (finite ? " finite" : "") + (shared ? " shared" : "") + " " +
                simd_test::target_name(target);
            EXPECT_EQ(cache, want_c) << what;
            EXPECT_EQ(scale, want_s) << what;
          }
        }
      }
    }
  }
}

// float16 rows take the bfloat16 kernels where rounding each value to bfloat16 by round-to-odd
// keeps every code and scale (fp8 with round_scale and mxfp8 into e4m3, mxfp4, hifloat8 without
// an x_scale), and in the e4m3 modes their own codes on the float16 bits where a group allows:
// every float16 pattern through sweep_rows, and every float16 largest magnitude. Row lengths
// cover d = 128's kernels, the batched ones (96, 256: eight groups) and rows of more than eight
// groups (512: mode fp8 on the float16 bits, the others rounded first).
TEST(IndexerSweep, Float16PowerOfTwoModesMatchReference) {
  // And an e5m2 cache, which keeps the general path.
  std::vector<PowerOfTwoCase> cases(std::begin(kPowerOfTwoCases), std::end(kPowerOfTwoCases));
  cases.push_back({IndexerQuantMode::mxfp8, DType::float8_e5m2});
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.cdt)) +
                 (c.mode == IndexerQuantMode::fp8 ? " fp8" : " mx"));
    for (const std::int64_t d : {128, 96, 256, 512}) {
      std::vector<std::uint16_t> x = sweep_rows(d, true);
      expect_rows_match(x, d, c.mode, c.cdt, DType::float16);
      if (HasFatalFailure()) return;
    }
    // Every float16 largest magnitude, infinity and the NaNs included, the other lanes up to
    // about three binades below it.
    std::vector<std::uint16_t> top =
        every_largest_magnitude(c.mode == IndexerQuantMode::fp8 ? 128 : 32, 43, 0x8000, 3000);
    expect_rows_match(top, 128, c.mode, c.cdt, DType::float16);
    if (HasFatalFailure()) return;
  }
}

TEST(IndexerSweep, Float16HiFloat8MatchesReference) {
  for (const std::int64_t d : {128, 96}) {
    std::vector<std::uint16_t> x = sweep_rows(d, true);
    for (const float x_scale : {1.0f, 0.75f}) {
      const Hif8Difference f = hif8_first_difference(x, d, x_scale, {}, DType::float16);
      ASSERT_EQ(f.at, -1) << "d" << d << " x_scale " << x_scale << " " << f.target << ": f16 0x"
                          << std::hex << x[static_cast<std::size_t>(f.at)] << " gives 0x" << f.got
                          << ", the reference 0x" << f.want;
    }
  }
}

// float16 hifloat8 rows whose values are all normal take the kernels' own float16 forms; the
// sweep above reaches them only between the chunks that hold zeros, subnormals, infinities or
// NaNs (after two such chunks a call takes every row through the rounding pass). Here every
// normal float16 value of either sign, shuffled, fills the rows, and a last stretch puts one
// subnormal, one infinity and one NaN into rows among normal ones; then each value that is not
// normal alone (zeros, the smallest and largest subnormals, infinity, a NaN, either sign) among
// normal ones, so that the fast form's own test must find it.
TEST(IndexerSweep, Float16HiFloat8NormalRowsMatchReference) {
  std::vector<std::uint16_t> normal;
  for (std::uint32_t p = 0; p < 0x10000; ++p) {
    const std::uint32_t e = (p >> 10) & 0x1F;
    if (e != 0 && e != 0x1F) normal.push_back(static_cast<std::uint16_t>(p));
  }
  std::mt19937_64 rng(29);
  std::shuffle(normal.begin(), normal.end(), rng);
  for (const std::int64_t d : {128, 96}) {
    std::vector<std::uint16_t> x = normal;
    x.resize(x.size() / static_cast<std::size_t>(d) * static_cast<std::size_t>(d));
    const std::size_t tail = x.size();
    x.insert(x.end(), normal.begin(), normal.begin() + 48 * d);  // three chunks of 16 rows
    x[tail + 5 * static_cast<std::size_t>(d) + 7] = 0x8001;      // a subnormal
    x[tail + 21 * static_cast<std::size_t>(d) + 3] = 0x7C00;     // an infinity
    x[tail + 37 * static_cast<std::size_t>(d) + 1] = 0xFE01;     // a NaN
    const Hif8Difference f = hif8_first_difference(x, d, 1.0f, {}, DType::float16);
    ASSERT_EQ(f.at, -1) << "d" << d << " " << f.target << ": f16 0x" << std::hex
                        << x[static_cast<std::size_t>(f.at)] << " gives 0x" << f.got
                        << ", the reference 0x" << f.want;
    // Each special value alone, among 32 rows whose other values lie below 2^14 (exponent fields
    // up to 29), so that no value near the top of the range decides a chunk's test (after two
    // chunks that fail it a call takes the rest by the rounding pass, where the fast form's test
    // no longer matters).
    std::vector<std::uint16_t> below;
    for (const std::uint16_t v : normal) {
      if ((v & 0x7FFF) < 0x7800) below.push_back(v);
    }
    for (const std::uint32_t special :
         {0x0000u, 0x8000u, 0x0001u, 0x83FFu, 0x03FFu, 0x7C00u, 0xFC00u, 0x7E01u}) {
      x.assign(below.begin(), below.begin() + 32 * d);
      x[21 * static_cast<std::size_t>(d) + 7] = static_cast<std::uint16_t>(special);
      const Hif8Difference g = hif8_first_difference(x, d, 1.0f, {}, DType::float16);
      ASSERT_EQ(g.at, -1) << "d" << d << " special 0x" << std::hex << special << " " << g.target
                          << ": f16 0x" << x[static_cast<std::size_t>(g.at)] << " gives 0x" << g.got
                          << ", the reference 0x" << g.want;
    }
  }
}

}  // namespace
}  // namespace kvscatter
