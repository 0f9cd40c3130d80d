// Huge caches (64-bit offsets) for every operator: caches of more than 2^31 elements whose last
// rows lie more than 2^32 bytes from the start, written near the end by the optimized kernel,
// the reference and the C ABI; and shapes whose products overflow 64 bits, rejected with an
// error that says so. The caches are MAP_NORESERVE anonymous mappings: only the few pages
// written are ever materialised, and a machine that cannot reserve the address space skips.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvscatter/formats.h"
#include "kvscatter/kv_cache_update.h"
#include "kvscatter/kv_compress_epilog.h"
#include "kvscatter/kvscatter.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"
#include "testing.h"

namespace kvscatter {
namespace {

constexpr std::int64_t k4GiB = std::int64_t{1} << 32;

// A reserved, lazily backed range that reads as zeros.
class Mapping {
 public:
  explicit Mapping(std::int64_t bytes) : bytes_(static_cast<std::size_t>(bytes)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) base_ = static_cast<std::uint8_t*>(p);
  }
  ~Mapping() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  std::uint8_t* get() const { return base_; }
  // Drops every written page: the range reads as zeros again.
  void reset() { madvise(base_, bytes_, MADV_DONTNEED); }

 private:
  std::size_t bytes_;
  std::uint8_t* base_ = nullptr;
};

#define MAP_OR_SKIP(name, bytes)                                               \
  Mapping name(bytes);                                                         \
  if (name.get() == nullptr) {                                                 \
    GTEST_SKIP() << "cannot reserve " << (bytes) << " bytes of address space"; \
  }

std::vector<std::uint8_t> pattern(std::size_t n, int salt) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 13 + 7 + salt);
  return v;
}

enum class Runner { optimized, reference, c_abi };
const Runner kRunners[] = {Runner::optimized, Runner::reference, Runner::c_abi};

kvsTensor* c_tensor(const TensorView& v) {
  kvsTensor* t = nullptr;
  EXPECT_EQ(kvsCreateTensor(v.data, static_cast<kvsDataType>(v.dtype), v.rank, v.shape.data(),
                            v.strides.data(), &t),
            KVS_SUCCESS)
      << kvsGetLastErrorMessage();
  return t;
}

// ---- caches past 4 GiB ----------------------------------------------------------------------

// uint8 caches of 32,769 blocks of 128 slots x 1,024 bytes: 4 GiB + 128 KiB, 2^32 + 2^17
// elements. Tokens go to the last slot and to the first slot past 2^32 bytes.
TEST(HugeCache, ScatterPaKvCacheLayoutsPast4GiB) {
  constexpr std::int64_t nh = 8, d = 128, bs = 128, nb = 32769, row = nh * d;
  constexpr std::int64_t bytes = nb * bs * row;
  static_assert(bytes > k4GiB);
  MAP_OR_SKIP(cache, bytes);
  const std::int64_t last = nb * bs - 1, past = k4GiB / row + 5;
  std::vector<std::int64_t> slots = {past, -1, last};
  const auto key = pattern(3 * row, 0);
  const TensorView k(const_cast<std::uint8_t*>(key.data()), DType::uint8, {3, nh, d});
  const TensorView s(slots.data(), DType::int64, {3});
  for (int layout = 0; layout < 3; ++layout) {
    for (Runner runner : kRunners) {
      SCOPED_TRACE(::testing::Message()
                   << "layout " << layout << " runner " << static_cast<int>(runner));
      cache.reset();
      ScatterPaKvCacheOptions o;
      TensorView kc;
      if (layout == 0) {
        kc = TensorView(cache.get(), DType::uint8, {nb, bs, nh, d});
      } else if (layout == 1) {
        o.scatter_mode = ScatterMode::NHSD;
        kc = TensorView(cache.get(), DType::uint8, {nb, nh, bs, d});
      } else {
        o.cache_mode = CacheMode::PA_NZ;
        kc = TensorView(cache.get(), DType::uint8, {nb, row / 32, bs, 32});
      }
      if (runner == Runner::c_abi) {
        kvsTensor* tk = c_tensor(k);
        kvsTensor* tkc = c_tensor(kc);
        kvsTensor* ts = c_tensor(s);
        std::uint64_t ws = 0;
        kvsExecutor* ex = nullptr;
        ASSERT_EQ(kvsScatterPaKvCacheGetWorkspaceSize(
                      tk, nullptr, tkc, nullptr, ts, nullptr, nullptr, nullptr,
                      cache_mode_name(o.cache_mode), scatter_mode_name(o.scatter_mode), nullptr, 0,
                      nullptr, 0, &ws, &ex),
                  KVS_SUCCESS)
            << kvsGetLastErrorMessage();
        EXPECT_EQ(kvsScatterPaKvCache(nullptr, 0, ex), KVS_SUCCESS) << kvsGetLastErrorMessage();
        kvsDestroyExecutor(ex);
        for (kvsTensor* t : {tk, tkc, ts}) kvsDestroyTensor(t);
      } else {
        const auto plan = plan_scatter_pa_kv_cache(k, std::nullopt, kc, std::nullopt, s, o);
        if (runner == Runner::reference) {
          reference::execute(plan);
        } else {
          execute(plan);
        }
      }
      for (int t : {0, 2}) {
        const std::int64_t slot = slots[static_cast<std::size_t>(t)];
        const std::int64_t blk = slot / bs, off = slot % bs;
        for (std::int64_t e = 0; e < row; ++e) {
          std::int64_t at = slot * row + e;
          if (layout == 1) at = ((blk * nh + e / d) * bs + off) * d + e % d;
          if (layout == 2) at = ((blk * (row / 32) + e / 32) * bs + off) * 32 + e % 32;
          ASSERT_GT(at, k4GiB / 2);
          ASSERT_EQ(cache.get()[at], key[static_cast<std::size_t>(t * row + e)])
              << "slot " << slot << " element " << e;
        }
      }
      if (layout != 1) {
        EXPECT_EQ(cache.get()[bytes - 1], key[3 * row - 1]);
      }
      EXPECT_EQ(cache.get()[bytes / 2], 0);  // untouched
    }
  }
}

// A packed Alibi run of three rows that ends at the last row of a 4 GiB+ cache.
TEST(HugeCache, ScatterPaKvCacheCompressRunPast4GiB) {
  constexpr std::int64_t d = 1024, bs = 128, nb = 32769, bytes = nb * bs * d;
  MAP_OR_SKIP(cache, bytes);
  const auto key = pattern(5 * d, 3);
  std::vector<std::int64_t> seq = {5}, lens = {3}, start = {nb * bs - 3};
  ScatterPaKvCacheOptions o;
  o.scatter_mode = ScatterMode::Alibi;
  o.seq_lens = TensorView(seq.data(), DType::int64, {1});
  o.compress_lens = TensorView(lens.data(), DType::int64, {1});
  for (Runner runner : {Runner::optimized, Runner::reference}) {
    cache.reset();
    const auto plan = plan_scatter_pa_kv_cache(
        TensorView(const_cast<std::uint8_t*>(key.data()), DType::uint8, {5, 1, d}), std::nullopt,
        TensorView(cache.get(), DType::uint8, {nb, bs, 1, d}), std::nullopt,
        TensorView(start.data(), DType::int64, {1}), o);
    runner == Runner::reference ? reference::execute(plan) : execute(plan);
    for (std::int64_t r = 0; r < 3; ++r) {
      for (std::int64_t e = 0; e < d; ++e) {
        ASSERT_EQ(cache.get()[(nb * bs - 3 + r) * d + e],
                  key[static_cast<std::size_t>((2 + r) * d + e)]);
      }
    }
  }
}

// Contiguous float8 caches [65,537 blocks, 2 heads, 256 slots, 128]: 2^32 + 2^16 elements.
TEST(HugeCache, ScatterPaKvCacheWithKScalePast4GiB) {
  constexpr std::int64_t nb = 65537, n = 2, bs = 256, d = 128;
  constexpr std::int64_t bytes = nb * n * bs * d;
  static_assert(bytes > k4GiB);
  MAP_OR_SKIP(kc, bytes);
  MAP_OR_SKIP(vc, bytes);
  MAP_OR_SKIP(sc, nb * n * bs * 4);
  const DType dt = DType::float8_e4m3fn;
  auto key = pattern(2 * n * d, 1), value = pattern(2 * n * d, 2);
  float scales[4] = {0.5f, 2.0f, -1.0f, 8.0f};
  const std::int64_t last = nb * bs - 1, past = k4GiB / (n * bs * d) * bs + 3;  // last block
  std::vector<std::int32_t> slots = {static_cast<std::int32_t>(past),
                                     static_cast<std::int32_t>(last)};
  const TensorView k(key.data(), dt, {2, n, d}), v(value.data(), dt, {2, n, d});
  const TensorView kcv(kc.get(), dt, {nb, n, bs, d}), vcv(vc.get(), dt, {nb, n, bs, d});
  const TensorView s(slots.data(), DType::int32, {2}), ks(scales, DType::float32, {2, n});
  const TensorView scv(sc.get(), DType::float32, {nb, n, bs, 1});
  for (Runner runner : kRunners) {
    SCOPED_TRACE(static_cast<int>(runner));
    kc.reset();
    vc.reset();
    sc.reset();
    if (runner == Runner::c_abi) {
      kvsTensor* t[] = {c_tensor(k), c_tensor(v),  c_tensor(kcv), c_tensor(vcv),
                        c_tensor(s), c_tensor(ks), c_tensor(scv)};
      std::uint64_t ws = 0;
      kvsExecutor* ex = nullptr;
      ASSERT_EQ(kvsScatterPaKvCacheWithKScaleGetWorkspaceSize(t[0], t[1], t[2], t[3], t[4], t[5],
                                                              t[6], "BNBD", &ws, &ex),
                KVS_SUCCESS)
          << kvsGetLastErrorMessage();
      EXPECT_EQ(kvsScatterPaKvCacheWithKScale(nullptr, 0, ex), KVS_SUCCESS);
      kvsDestroyExecutor(ex);
      for (kvsTensor* x : t) kvsDestroyTensor(x);
    } else {
      const auto plan = plan_scatter_pa_kv_cache_with_k_scale(k, v, kcv, vcv, s, ks, scv);
      runner == Runner::reference ? reference::execute(plan) : execute(plan);
    }
    for (std::int64_t t = 0; t < 2; ++t) {
      const std::int64_t slot = slots[static_cast<std::size_t>(t)];
      const std::int64_t blk = slot / bs, off = slot % bs;
      for (std::int64_t h = 0; h < n; ++h) {
        const std::int64_t at = ((blk * n + h) * bs + off) * d;
        ASSERT_GT(at, k4GiB);
        EXPECT_EQ(0,
                  std::memcmp(kc.get() + at, &key[static_cast<std::size_t>((t * n + h) * d)], d));
        EXPECT_EQ(0,
                  std::memcmp(vc.get() + at, &value[static_cast<std::size_t>((t * n + h) * d)], d));
        float got = 0;
        std::memcpy(&got, sc.get() + 4 * ((blk * n + h) * bs + off), 4);
        EXPECT_EQ(got, scales[t * n + h]);
      }
    }
    EXPECT_EQ(kc.get()[bytes - 1], key[2 * n * d - 1]);
  }
}

// A contiguous uint8 cache of 2^24 + 16 rows of 256 bytes (4 GiB + 4 KiB).
TEST(HugeCache, KvCompressEpilogPast4GiB) {
  constexpr std::int64_t bs = 16, nb = (std::int64_t{1} << 20) + 1, row = 256;
  constexpr std::int64_t bytes = nb * bs * row;
  static_assert(bytes > k4GiB);
  MAP_OR_SKIP(cache, bytes);
  std::vector<std::uint16_t> x(2 * 128);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = formats::encode_bfloat16(static_cast<float>(i % 37) * 0.25f - 3.0f);
  }
  const std::int64_t last = nb * bs - 1, past = k4GiB / row + 1;
  std::vector<std::int64_t> slots = {last, past};
  // The expected rows come from the same call on a small cache.
  std::vector<std::uint8_t> small(2 * row, 0);
  std::vector<std::int64_t> small_slots = {0, 1};
  kv_compress_epilog(TensorView(small.data(), DType::uint8, {1, 2, 1, row}),
                     TensorView(x.data(), DType::bfloat16, {2, 128}),
                     TensorView(small_slots.data(), DType::int64, {2}));
  const TensorView c(cache.get(), DType::uint8, {nb, bs, 1, row});
  const TensorView xv(x.data(), DType::bfloat16, {2, 128});
  const TensorView s(slots.data(), DType::int64, {2});
  for (Runner runner : kRunners) {
    SCOPED_TRACE(static_cast<int>(runner));
    cache.reset();
    if (runner == Runner::c_abi) {
      kvsTensor* t[] = {c_tensor(c), c_tensor(xv), c_tensor(s)};
      std::uint64_t ws = 0;
      kvsExecutor* ex = nullptr;
      ASSERT_EQ(kvsKvCompressEpilogGetWorkspaceSize(t[0], t[1], t[2], 64, "fp8_e8m0", true, 1.0f,
                                                    &ws, &ex),
                KVS_SUCCESS)
          << kvsGetLastErrorMessage();
      EXPECT_EQ(kvsKvCompressEpilog(nullptr, 0, ex), KVS_SUCCESS);
      kvsDestroyExecutor(ex);
      for (kvsTensor* y : t) kvsDestroyTensor(y);
    } else {
      const auto plan = plan_kv_compress_epilog(c, xv, s);
      runner == Runner::reference ? reference::execute(plan) : execute(plan);
    }
    for (std::size_t t = 0; t < 2; ++t) {
      ASSERT_GT(slots[t] * row, k4GiB);
      EXPECT_EQ(0, std::memcmp(cache.get() + slots[t] * row, small.data() + t * row, row)) << t;
    }
  }
}

// bfloat16 caches (2, 2^20 + 8, 8, 128): 2^31 + 2^14 elements, 4 GiB + 32 KiB each; four new
// tokens at the very end of the last batch.
TEST(HugeCache, KvCacheUpdatePast4GiB) {
  constexpr std::int64_t b = 2, s = (std::int64_t{1} << 20) + 8, h = 8, d = 128, l = 4;
  constexpr std::int64_t bytes = b * s * h * d * 2;
  static_assert(b * s * h * d > (std::int64_t{1} << 31));
  MAP_OR_SKIP(kc, bytes);
  MAP_OR_SKIP(vc, bytes);
  std::vector<float> nk(static_cast<std::size_t>(b * l * h * d));
  std::vector<std::uint16_t> nv(nk.size());
  for (std::size_t i = 0; i < nk.size(); ++i) {
    nk[i] = static_cast<float>(i % 1000) - 500.0f;
    nv[i] = formats::encode_bfloat16(static_cast<float>(i % 77));
  }
  const TensorView kcv(kc.get(), DType::bfloat16, {b, s, h, d});
  const TensorView vcv(vc.get(), DType::bfloat16, {b, s, h, d});
  const TensorView nkv(nk.data(), DType::float32, {b, l, h, d});
  const TensorView nvv(nv.data(), DType::bfloat16, {b, l, h, d});
  const std::int64_t pos = s - l;
  for (Runner runner : kRunners) {
    SCOPED_TRACE(static_cast<int>(runner));
    kc.reset();
    vc.reset();
    if (runner == Runner::c_abi) {
      kvsTensor* t[] = {c_tensor(kcv), c_tensor(vcv), c_tensor(nkv), c_tensor(nvv)};
      std::uint64_t ws = 0;
      std::int64_t len = 0;
      kvsExecutor* ex = nullptr;
      ASSERT_EQ(kvsKvCacheUpdateGetWorkspaceSize(t[0], t[1], t[2], t[3], pos, &len, &ws, &ex),
                KVS_SUCCESS)
          << kvsGetLastErrorMessage();
      EXPECT_EQ(len, s);
      EXPECT_EQ(kvsKvCacheUpdate(nullptr, 0, ex), KVS_SUCCESS);
      kvsDestroyExecutor(ex);
      for (kvsTensor* y : t) kvsDestroyTensor(y);
    } else {
      const auto plan = plan_kv_cache_update(kcv, vcv, nkv, nvv, pos);
      runner == Runner::reference ? reference::execute(plan) : execute(plan);
    }
    const auto* k16 = reinterpret_cast<const std::uint16_t*>(kc.get());
    const auto* v16 = reinterpret_cast<const std::uint16_t*>(vc.get());
    for (std::int64_t bi = 0; bi < b; ++bi) {
      for (std::int64_t i = 0; i < l * h * d; ++i) {
        const std::int64_t at = (bi * s + pos) * h * d + i;
        const auto src = static_cast<std::size_t>(bi * l * h * d + i);
        ASSERT_EQ(k16[at], formats::encode_bfloat16(nk[src])) << bi << " " << i;
        ASSERT_EQ(v16[at], nv[src]) << bi << " " << i;
      }
    }
    EXPECT_EQ(k16[b * s * h * d - 1], formats::encode_bfloat16(nk.back()));
    EXPECT_EQ(k16[(pos - 1) * h * d], 0);  // the row before the update is untouched
  }
}

// ---- shape products that overflow 64 bits ---------------------------------------------------

using testing::expect_error;
constexpr std::int64_t kBig = std::int64_t{1} << 40;

TEST(ShapeOverflow, ContiguousViewsAndCDescriptors) {
  expect_error(
      [] {
        TensorView(nullptr, DType::uint8, {kBig, kBig});
      },
      Status::invalid_parameter, {"overflows 64 bits"});
  const std::int64_t shape[] = {kBig, kBig, 4};
  kvsTensor* t = nullptr;
  EXPECT_EQ(kvsCreateTensor(nullptr, KVS_UINT8, 3, shape, nullptr, &t),
            KVS_ERROR_INVALID_PARAMETER);
  EXPECT_EQ(t, nullptr);
  EXPECT_NE(std::string(kvsGetLastErrorMessage()).find("overflows 64 bits"), std::string::npos)
      << kvsGetLastErrorMessage();
  // Explicit strides are taken as given; numel() still refuses to overflow.
  const std::int64_t strides[] = {0, 0, 1};
  const TensorView v(reinterpret_cast<void*>(64), DType::uint8, shape, strides);
  expect_error([&] { (void)v.numel(); }, Status::invalid_parameter, {"overflows 64 bits"});
}

std::uint8_t g_byte[64];
void* const kSome = g_byte;

TensorView strided(DType dt, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides) {
  return TensorView(kSome, dt, shape, strides);
}

TEST(ShapeOverflow, ScatterPaKvCache) {
  std::int64_t slot = 0;
  const TensorView key = strided(DType::uint8, {1, 1, 16}, {16, 16, 1});
  const TensorView s(&slot, DType::int64, {1});
  // A cache whose last element lies past 2^63.
  const TensorView huge = strided(DType::uint8, {kBig, kBig, 1, 16}, {kBig * 16, 16, 16, 1});
  expect_error([&] { plan_scatter_pa_kv_cache(key, std::nullopt, huge, std::nullopt, s); },
               Status::invalid_parameter, {"key_cache", "overflows 64 bits"});
  // A key whose extent overflows, and a 4-D key with B * S past 2^63 (broadcast strides).
  const TensorView cache = strided(DType::uint8, {1, 4, 1, 16}, {64, 16, 16, 1});
  expect_error(
      [&] {
        plan_scatter_pa_kv_cache(strided(DType::uint8, {kBig, 1, 16}, {kBig, 16, 1}), std::nullopt,
                                 cache, std::nullopt, s);
      },
      Status::invalid_parameter, {"key", "overflows 64 bits"});
  std::int64_t lens = 0, seq = 0;
  ScatterPaKvCacheOptions o;
  o.scatter_mode = ScatterMode::Alibi;
  o.compress_lens = TensorView(&lens, DType::int64, {1});
  o.seq_lens = TensorView(&seq, DType::int64, {1});
  expect_error(
      [&] {
        plan_scatter_pa_kv_cache(strided(DType::uint8, {kBig, kBig, 1, 16}, {0, 0, 16, 1}),
                                 std::nullopt, cache, std::nullopt, s, o);
      },
      Status::invalid_parameter, {"overflows 64 bits"});
  // Per-(batch, head) tensors of a packed key: B * NH past 2^63.
  const TensorView seq_big = strided(DType::int64, {kBig}, {0});
  o.seq_lens = seq_big;
  expect_error(
      [&] {
        plan_scatter_pa_kv_cache(strided(DType::uint8, {1, kBig, 16}, {16, 0, 1}), std::nullopt,
                                 cache, std::nullopt, s, o);
      },
      Status::invalid_parameter, {"overflows 64 bits"});
}

TEST(ShapeOverflow, ScatterPaKvCacheWithKScale) {
  const DType dt = DType::float8_e5m2;
  std::int64_t slot = 0;
  const TensorView k = strided(dt, {1, 1, 16}, {16, 16, 1});
  const TensorView s(&slot, DType::int64, {1});
  const TensorView ks = strided(DType::float32, {1, 1}, {1, 1});
  const TensorView kc = strided(dt, {kBig, 1, kBig, 16}, {kBig * 16, 16, 16, 1});
  const TensorView sc = strided(DType::float32, {kBig, 1, kBig, 1}, {kBig, 1, 1, 1});
  expect_error([&] { plan_scatter_pa_kv_cache_with_k_scale(k, k, kc, kc, s, ks, sc); },
               Status::invalid_parameter, {"key_cache", "overflows 64 bits"});
}

TEST(ShapeOverflow, KvCompressEpilog) {
  const TensorView cache = strided(DType::uint8, {kBig, kBig, 1, 256}, {kBig * 256, 256, 256, 1});
  std::int64_t slot = 0;
  const TensorView x = strided(DType::bfloat16, {1, 128}, {128, 1});
  const TensorView s(&slot, DType::int64, {1});
  expect_error([&] { plan_kv_compress_epilog(cache, x, s); }, Status::invalid_parameter,
               {"cache", "overflows 64 bits"});
  // Broadcast x and slot_mapping whose row count B * S overflows.
  const TensorView small = strided(DType::uint8, {1, 4, 1, 256}, {1024, 256, 256, 1});
  expect_error(
      [&] {
        plan_kv_compress_epilog(small, strided(DType::bfloat16, {kBig, kBig, 128}, {0, 0, 1}),
                                strided(DType::int64, {kBig, kBig}, {0, 0}));
      },
      Status::invalid_parameter, {"overflows 64 bits"});
}

TEST(ShapeOverflow, KvCacheUpdate) {
  const TensorView small = strided(DType::float32, {1, 4, 1, 8}, {32, 8, 8, 1});
  const TensorView input = strided(DType::float32, {1, 1, 1, 8}, {8, 8, 8, 1});
  const TensorView huge = strided(DType::float32, {kBig, kBig, 1, 8}, {kBig * 8, 8, 8, 1});
  expect_error([&] { plan_kv_cache_update(huge, small, input, input, 0); },
               Status::invalid_parameter, {"key_cache", "overflows 64 bits"});
  expect_error([&] { plan_kv_cache_update(small, huge, input, input, 0); },
               Status::invalid_parameter, {"value_cache", "overflows 64 bits"});
}

// The C ABI path reports the same overflow through GetWorkspaceSize.
TEST(ShapeOverflow, CApiPlans) {
  const std::int64_t shape[] = {kBig, kBig, 1, 8}, strides[] = {kBig * 8, 8, 8, 1};
  const std::int64_t ishape[] = {1, 1, 1, 8};
  kvsTensor* huge = nullptr;
  kvsTensor* in = nullptr;
  ASSERT_EQ(kvsCreateTensor(kSome, KVS_FLOAT32, 4, shape, strides, &huge), KVS_SUCCESS);
  ASSERT_EQ(kvsCreateTensor(kSome, KVS_FLOAT32, 4, ishape, nullptr, &in), KVS_SUCCESS);
  std::uint64_t ws = 0;
  kvsExecutor* ex = nullptr;
  EXPECT_EQ(kvsKvCacheUpdateGetWorkspaceSize(huge, huge, in, in, 0, nullptr, &ws, &ex),
            KVS_ERROR_INVALID_PARAMETER);
  EXPECT_EQ(ex, nullptr);
  EXPECT_NE(std::string(kvsGetLastErrorMessage()).find("overflows 64 bits"), std::string::npos)
      << kvsGetLastErrorMessage();
  const std::int64_t kshape[] = {1, 1, 8};
  std::int64_t slot = 0;
  const std::int64_t sshape[] = {1};
  kvsTensor* key = nullptr;
  kvsTensor* s = nullptr;
  ASSERT_EQ(kvsCreateTensor(kSome, KVS_FLOAT32, 3, kshape, nullptr, &key), KVS_SUCCESS);
  ASSERT_EQ(kvsCreateTensor(&slot, KVS_INT64, 1, sshape, nullptr, &s), KVS_SUCCESS);
  EXPECT_EQ(
      kvsScatterPaKvCacheGetWorkspaceSize(key, nullptr, huge, nullptr, s, nullptr, nullptr, nullptr,
                                          "Norm", "None", nullptr, 0, nullptr, 0, &ws, &ex),
      KVS_ERROR_INVALID_PARAMETER);
  EXPECT_NE(std::string(kvsGetLastErrorMessage()).find("overflows 64 bits"), std::string::npos)
      << kvsGetLastErrorMessage();
  for (kvsTensor* t : {huge, in, key, s}) kvsDestroyTensor(t);
}

}  // namespace
}  // namespace kvscatter
