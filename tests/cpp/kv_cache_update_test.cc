#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kvscatter/formats.h"
#include "kvscatter/kv_cache_update.h"
#include "testing.h"

namespace kvscatter {
namespace {

using testing::expect_error;

TensorView view(std::vector<float>& v, std::initializer_list<std::int64_t> shape) {
  return TensorView(v.data(), DType::float32, shape);
}

// Worked example 1: one token at position 0 of a four-slot cache.
TEST(KvCacheUpdateExamples, Example1) {
  std::vector<float> kc(8, 0.f), vc(8, 0.f), nk{1, 2}, nv{3, 4};
  const auto len = kv_cache_update(view(kc, {1, 4, 1, 2}), view(vc, {1, 4, 1, 2}),
                                   view(nk, {1, 1, 1, 2}), view(nv, {1, 1, 1, 2}), 0);
  EXPECT_EQ(len, 1);
  EXPECT_EQ(kc, (std::vector<float>{1, 2, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(vc, (std::vector<float>{3, 4, 0, 0, 0, 0, 0, 0}));
}

// Worked example 2: two tokens at position 2 fill the cache.
TEST(KvCacheUpdateExamples, Example2) {
  std::vector<float> kc{1, 1, 2, 2, 9, 9, 9, 9}, vc{-1, -1, -2, -2, 9, 9, 9, 9};
  std::vector<float> nk{3, 3, 4, 4}, nv{-3, -3, -4, -4};
  const auto len = kv_cache_update(view(kc, {1, 4, 1, 2}), view(vc, {1, 4, 1, 2}),
                                   view(nk, {1, 2, 1, 2}), view(nv, {1, 2, 1, 2}), 2);
  EXPECT_EQ(len, 4);
  EXPECT_EQ(kc, (std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4}));
  EXPECT_EQ(vc, (std::vector<float>{-1, -1, -2, -2, -3, -3, -4, -4}));
}

// Worked example 3: batch of two, two heads of size 1, position 1.
TEST(KvCacheUpdateExamples, Example3) {
  std::vector<float> kc{1, 2, 0, 0, 0, 0, 5, 6, 0, 0, 0, 0};
  std::vector<float> vc{0.1f, 0.2f, 0, 0, 0, 0, 0.5f, 0.6f, 0, 0, 0, 0};
  std::vector<float> nk{3, 4, 7, 8}, nv{0.3f, 0.4f, 0.7f, 0.8f};
  const auto len = kv_cache_update(view(kc, {2, 3, 2, 1}), view(vc, {2, 3, 2, 1}),
                                   view(nk, {2, 1, 2, 1}), view(nv, {2, 1, 2, 1}), 1);
  EXPECT_EQ(len, 2);
  EXPECT_EQ(kc, (std::vector<float>{1, 2, 3, 4, 0, 0, 5, 6, 7, 8, 0, 0}));
  EXPECT_EQ(vc, (std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f, 0, 0, 0.5f, 0.6f, 0.7f, 0.8f, 0, 0}));
}

// float32 -> 16-bit caches round to nearest even and keep NaN a NaN, Inf an Inf, -0 a -0.
TEST(KvCacheUpdate, SpecialValuesConverted) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> nk{std::nanf(""), inf, -inf, -0.f, 1.00390625f, 1.01171875f, 65520.f, 1e-8f};
  std::vector<float> nv = nk;
  for (DType out : {DType::bfloat16, DType::float16}) {
    std::vector<std::uint16_t> kc(16, 0x1234), vc(16, 0x1234);
    kv_cache_update(TensorView(kc.data(), out, {1, 2, 1, 8}),
                    TensorView(vc.data(), out, {1, 2, 1, 8}), view(nk, {1, 1, 1, 8}),
                    view(nv, {1, 1, 1, 8}), 1);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(kc[static_cast<std::size_t>(i)], 0x1234);
      const std::uint16_t got = kc[static_cast<std::size_t>(8 + i)];
      const float back = formats::decode(out, got);
      const float x = nk[static_cast<std::size_t>(i)];
      EXPECT_EQ(got, formats::encode(out, x)) << i;
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(back));
      } else if (std::isinf(x)) {
        EXPECT_EQ(back, x);
      }
    }
    EXPECT_EQ(kc, vc);
    // -0 keeps its sign; 1.00390625 ties to even (1.0 in bfloat16); 65520 overflows float16.
    EXPECT_EQ(kc[11], 0x8000);
    if (out == DType::bfloat16) {
      EXPECT_EQ(kc[12], 0x3F80);
      EXPECT_EQ(kc[13], 0x3F82);
    } else {
      EXPECT_EQ(kc[14], 0x7C00);
    }
  }
}

// Same-dtype updates are byte copies: NaN payloads survive.
TEST(KvCacheUpdate, SameDtypeIsByteCopy) {
  std::vector<std::uint16_t> kc(4, 0), vc(4, 0), nk{0x7FC1, 0xFFFF, 0x8000, 0x0001},
      nv{1, 2, 3, 4};
  kv_cache_update(TensorView(kc.data(), DType::bfloat16, {1, 1, 1, 4}),
                  TensorView(vc.data(), DType::bfloat16, {1, 1, 1, 4}),
                  TensorView(nk.data(), DType::bfloat16, {1, 1, 1, 4}),
                  TensorView(nv.data(), DType::bfloat16, {1, 1, 1, 4}), 0);
  EXPECT_EQ(kc, nk);
  EXPECT_EQ(vc, nv);
}

TEST(KvCacheUpdate, EmptyAndLastPosition) {
  std::vector<float> kc(12, 7.f), vc(12, 7.f), none, nk{1, 2, 3, 4}, nv{5, 6, 7, 8};
  // L = 0 is a no-op at any position in [0, S], even with null data.
  EXPECT_EQ(kv_cache_update(view(kc, {1, 3, 2, 2}), view(vc, {1, 3, 2, 2}),
                            TensorView(nullptr, DType::float32, {1, 0, 2, 2}),
                            TensorView(nullptr, DType::float32, {1, 0, 2, 2}), 3),
            3);
  EXPECT_EQ(kc, std::vector<float>(12, 7.f));
  // Rows of zero elements (D = 0): nothing to write and no data to address, on both paths.
  const auto empty_rows = plan_kv_cache_update(TensorView(nullptr, DType::float32, {1, 3, 2, 0}),
                                               TensorView(nullptr, DType::float32, {1, 3, 2, 0}),
                                               TensorView(nullptr, DType::float32, {1, 2, 2, 0}),
                                               TensorView(nullptr, DType::float32, {1, 2, 2, 0}), 1);
  EXPECT_NO_THROW(execute(empty_rows));
  EXPECT_NO_THROW(reference::execute(empty_rows));
  // position = S - L writes the last slot.
  EXPECT_EQ(kv_cache_update(view(kc, {1, 3, 2, 2}), view(vc, {1, 3, 2, 2}),
                            view(nk, {1, 1, 2, 2}), view(nv, {1, 1, 2, 2}), 2),
            3);
  EXPECT_EQ(kc, (std::vector<float>{7, 7, 7, 7, 7, 7, 7, 7, 1, 2, 3, 4}));
  EXPECT_EQ(vc, (std::vector<float>{7, 7, 7, 7, 7, 7, 7, 7, 5, 6, 7, 8}));
}

// A plan validated once runs for every layer after its data pointers are rebound.
TEST(KvCacheUpdate, PlanExecutesPerLayer) {
  constexpr int kLayers = 4;
  std::vector<std::vector<float>> kcs(kLayers, std::vector<float>(16, 0.f)), vcs = kcs;
  std::vector<float> nk{1, 2, 3, 4}, nv{5, 6, 7, 8};
  KvCacheUpdatePlan plan = plan_kv_cache_update(view(kcs[0], {1, 4, 2, 2}),
                                                view(vcs[0], {1, 4, 2, 2}),
                                                view(nk, {1, 1, 2, 2}), view(nv, {1, 1, 2, 2}), 3);
  for (int layer = 0; layer < kLayers; ++layer) {
    plan.key_cache.data = kcs[static_cast<std::size_t>(layer)].data();
    plan.value_cache.data = vcs[static_cast<std::size_t>(layer)].data();
    execute(plan);
  }
  for (int layer = 0; layer < kLayers; ++layer) {
    EXPECT_EQ(kcs[static_cast<std::size_t>(layer)][12], 1.f);
    EXPECT_EQ(vcs[static_cast<std::size_t>(layer)][15], 8.f);
  }
}

// Every rejection: status, message naming argument and values, caches untouched.
class KvCacheUpdateErrors : public ::testing::Test {
 protected:
  std::vector<float> kc = std::vector<float>(24, 9.f), vc = std::vector<float>(24, 9.f);
  std::vector<float> nk = std::vector<float>(8, 1.f), nv = std::vector<float>(8, 1.f);
  void expect(const std::function<void()>& fn, Status status,
              std::initializer_list<std::string> fragments) {
    expect_error(fn, status, fragments);
    EXPECT_EQ(kc, std::vector<float>(24, 9.f));
    EXPECT_EQ(vc, std::vector<float>(24, 9.f));
  }
  TensorView K() { return view(kc, {1, 3, 2, 4}); }
  TensorView V() { return view(vc, {1, 3, 2, 4}); }
  TensorView NK() { return view(nk, {1, 1, 2, 4}); }
  TensorView NV() { return view(nv, {1, 1, 2, 4}); }
};

TEST_F(KvCacheUpdateErrors, PositionOutOfRange) {
  expect([&] { kv_cache_update(K(), V(), NK(), NV(), 3); }, Status::invalid_parameter,
         {"position = 3", "[0, 2]", "S = 3", "L = 1"});
  expect([&] { kv_cache_update(K(), V(), NK(), NV(), -1); }, Status::invalid_parameter,
         {"position = -1"});
}

TEST_F(KvCacheUpdateErrors, TooManyTokens) {
  std::vector<float> big(32, 1.f);
  expect([&] { kv_cache_update(K(), V(), view(big, {1, 4, 2, 4}), view(big, {1, 4, 2, 4}), 0); },
         Status::invalid_parameter, {"new_keys.shape[1] (L) = 4", "S = 3"});
}

TEST_F(KvCacheUpdateErrors, BadRank) {
  expect([&] { kv_cache_update(view(kc, {3, 2, 4}), V(), NK(), NV(), 0); },
         Status::invalid_parameter, {"key_cache must be 4-D", "got 3-D [3, 2, 4]"});
  expect([&] { kv_cache_update(K(), V(), NK(), view(nv, {8}), 0); }, Status::invalid_parameter,
         {"new_values must be 4-D", "got 1-D [8]"});
}

TEST_F(KvCacheUpdateErrors, ShapeMismatch) {
  expect([&] { kv_cache_update(K(), V(), view(nk, {1, 1, 4, 2}), NV(), 0); },
         Status::invalid_parameter, {"new_keys.shape[2] (H) must equal key_cache.shape[2] = 2",
                                     "got 4"});
  expect([&] { kv_cache_update(K(), view(vc, {1, 2, 2, 6}), NK(), NV(), 0); },
         Status::invalid_parameter, {"new_values.shape[3] (D) must equal value_cache.shape[3] = 6"});
  std::vector<float> two(16, 1.f);
  expect([&] { kv_cache_update(K(), V(), NK(), view(two, {1, 2, 2, 4}), 0); },
         Status::invalid_parameter, {"new_values.shape[1] (L) must equal new_keys.shape[1] = 1",
                                     "got 2"});
  expect([&] { kv_cache_update(K(), view(vc, {1, 6, 1, 4}), NK(), view(nv, {1, 1, 1, 4}), 0); },
         Status::invalid_parameter, {"value_cache.shape[1] must equal key_cache.shape[1] = 3"});
}

TEST_F(KvCacheUpdateErrors, Dtype) {
  expect([&] {
    kv_cache_update(TensorView(kc.data(), DType::int32, {1, 3, 2, 4}), V(), NK(), NV(), 0);
  }, Status::invalid_parameter, {"key_cache dtype must be one of {float32, bfloat16, float16}",
                                 "got int32"});
  expect([&] {
    kv_cache_update(K(), V(), TensorView(nk.data(), DType::bfloat16, {1, 1, 2, 4}), NV(), 0);
  }, Status::invalid_parameter, {"new_keys dtype must be float32 or the cache dtype (float32)",
                                 "got bfloat16"});
}

TEST_F(KvCacheUpdateErrors, NullAndStrides) {
  expect([&] { kv_cache_update(TensorView(nullptr, DType::float32, {1, 3, 2, 4}), V(), NK(), NV(), 0); },
         Status::null_pointer, {"key_cache has a null data pointer"});
  const std::int64_t shape[] = {1, 1, 2, 4}, strides[] = {8, 8, 1, 2};
  expect([&] {
    kv_cache_update(K(), V(), TensorView(nk.data(), DType::float32, shape, strides), NV(), 0);
  }, Status::invalid_parameter, {"new_keys must be contiguous in its last axis", "stride 2"});
  const std::int64_t neg[] = {8, 8, -4, 1};
  expect([&] {
    kv_cache_update(K(), V(), TensorView(nk.data(), DType::float32, shape, neg), NV(), 0);
  }, Status::invalid_parameter, {"new_keys.strides[2] must be >= 0, got -4"});
  const std::int64_t huge_shape[] = {1LL << 40, 1LL << 30, 2, 4};
  const std::int64_t huge_strides[] = {1LL << 62, 1LL << 31, 4, 1};
  expect([&] {
    kv_cache_update(TensorView(kc.data(), DType::float32, huge_shape, huge_strides), V(), NK(),
                    NV(), 0);
  }, Status::invalid_parameter, {"key_cache", "overflows 64 bits"});
}

// A cache whose distinct elements share memory would be written by several threads in an
// unspecified order: rejected. Inputs may alias (they are only read).
TEST_F(KvCacheUpdateErrors, SelfOverlappingCache) {
  const std::int64_t shape[] = {1, 3, 2, 4}, aliased[] = {8, 0, 4, 1}, interleaved[] = {8, 8, 2, 1};
  expect([&] {
    kv_cache_update(TensorView(kc.data(), DType::float32, shape, aliased), V(), NK(), NV(), 0);
  }, Status::invalid_parameter,
         {"key_cache must not overlap itself", "strides [8, 0, 4, 1]", "dimension 1 has stride 0"});
  expect([&] {
    kv_cache_update(K(), TensorView(vc.data(), DType::float32, shape, interleaved), NK(), NV(), 0);
  }, Status::invalid_parameter, {"value_cache must not overlap itself", "dimension 2 has stride 2"});
  const std::int64_t in_shape[] = {1, 1, 2, 4}, broadcast[] = {4, 4, 0, 1};
  kv_cache_update(K(), V(), TensorView(nk.data(), DType::float32, in_shape, broadcast), NV(), 2);
  EXPECT_EQ(kc[16], 1.f);
}

}  // namespace
}  // namespace kvscatter
