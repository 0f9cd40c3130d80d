// paged_latent_write: the worked examples byte for byte and every rejection (message, cache
// untouched). The random optimized-versus-reference cases are harness/paged_latent_write_cases.cc.
#include "kvscatter/paged_latent_write.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/streaming.h"
#include "kvscatter/error.h"
#include "kvscatter/formats.h"
#include "kvscatter/runtime.h"
#include "simd_targets.h"

namespace kvscatter {
namespace {

using Bytes = std::vector<std::uint8_t>;

std::uint16_t bf16(float x) { return formats::encode_bfloat16(x); }

TEST(PagedLatentWriteExamples, Fp8Bfloat16OneScale) {
  std::vector<std::uint16_t> kv_c, k_pe;
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f, 10.0f, 0.3f, -500.0f, std::ldexp(1.0f, -12)})
    kv_c.push_back(bf16(v));
  for (float v : {0.5f, -1.0f, 0.0625f, 7.0f}) k_pe.push_back(bf16(v));
  Bytes cache(12, 0);
  std::vector<std::int64_t> slots{-1, 1};
  float scale = 2.0f;
  PagedLatentWriteOptions o;
  o.format = LatentCacheFormat::fp8_e4m3;
  o.scale = TensorView(&scale, DType::float32, {1});
  paged_latent_write(TensorView(kv_c.data(), DType::bfloat16, {2, 4}),
                     TensorView(k_pe.data(), DType::bfloat16, {2, 2}),
                     TensorView(cache.data(), DType::uint8, {1, 2, 6}),
                     TensorView(slots.data(), DType::int64, {2}), o);
  EXPECT_EQ(cache, (Bytes{0, 0, 0, 0, 0, 0, 0x4A, 0x22, 0xF8, 0x00, 0x10, 0x46}));
}

// fp8_e4m3 / fp8_e5m2 rows against the scalar encoders of x / scale on every SIMD target: every
// bfloat16 value once in kv_c (128 tokens of 512) and every eighth in k_pe, for scales with exact
// reciprocals, arbitrary ones and ones at the ends of the range; the same bits as float16 values.
TEST(PagedLatentWriteFp8, QuotientCodesOnEveryTarget) {
  constexpr std::int64_t T = 128, R = 512, P = 64;
  std::vector<std::uint16_t> kv_c(T * R), k_pe(T * P);
  for (std::size_t i = 0; i < kv_c.size(); ++i) kv_c[i] = static_cast<std::uint16_t>(i);
  for (std::size_t i = 0; i < k_pe.size(); ++i) k_pe[i] = static_cast<std::uint16_t>(8 * i + 3);
  std::vector<std::int64_t> slots(T);
  for (std::int64_t t = 0; t < T; ++t) slots[static_cast<std::size_t>(t)] = T - 1 - t;
  const int threads = get_num_threads();
  set_num_threads(1);
  for (std::int64_t target : simd_test::simd_targets()) {
    simd_test::PinTarget pin(target);
    // 0x1.fdp-121: bfloat16 subnormals divided by it are float8 subnormals, and the smallest
    // normal bfloat16 a normal float8 (the tables' formula would misplace the subnormals).
    // 0.0012: every float16 subnormal a float8 subnormal.
    for (float scale : {1.0f, 0.05f, 0.0537f, 3.7f, 1.0f / 3.0f, 1e-30f, 0x1p125f, 0x1p-125f,
                        0x1.fdp-121f, 0.0012f}) {
      for (int form = 0; form < 4; ++form) {
        const bool e4m3 = form % 2 == 0;
        const DType dtype = form < 2 ? DType::bfloat16 : DType::float16;
        const auto value = [dtype](std::uint16_t b) {
          return dtype == DType::float16 ? formats::decode_float16(b)
                                         : std::bit_cast<float>(std::uint32_t{b} << 16);
        };
        const auto encode = [&](std::uint16_t b) {
          const float q = value(b) / scale;
          return e4m3 ? formats::encode_float8_e4m3fn_satfinite(q)
                      : formats::encode_float8_e5m2_satfinite(q);
        };
        Bytes cache(static_cast<std::size_t>(T * (R + P)), 0);
        PagedLatentWriteOptions o;
        o.format = e4m3 ? LatentCacheFormat::fp8_e4m3 : LatentCacheFormat::fp8_e5m2;
        o.scale = TensorView(&scale, DType::float32, {1});
        paged_latent_write(TensorView(kv_c.data(), dtype, {T, R}),
                           TensorView(k_pe.data(), dtype, {T, P}),
                           TensorView(cache.data(), DType::uint8, {1, T, R + P}),
                           TensorView(slots.data(), DType::int64, {T}), o);
        int bad = 0;
        for (std::int64_t t = 0; t < T; ++t) {
          const std::uint8_t* row = &cache[static_cast<std::size_t>((T - 1 - t) * (R + P))];
          for (std::int64_t i = 0; i < R + P; ++i) {
            const std::uint16_t b = i < R ? kv_c[static_cast<std::size_t>(t * R + i)]
                                          : k_pe[static_cast<std::size_t>(t * P + i - R)];
            if (row[i] != encode(b) && ++bad <= 3) {
              ADD_FAILURE() << simd_test::target_name(target) << " " << dtype_name(dtype)
                            << (e4m3 ? " e4m3" : " e5m2") << " scale " << scale << " x " << value(b)
                            << ": got " << int{row[i]} << ", expected " << int{encode(b)};
            }
          }
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
  set_num_threads(threads);
}

// A bfloat16 subnormal whose quotient the tables' formula (which reads it as 1.m * 2^-127) would
// round up to the smallest normal float8, in groups of normal lanes: 0x77 / 0x1.fdp-121 is code
// 7, the formula's 8.
TEST(PagedLatentWriteFp8, SubnormalsAmongNormalsOnEveryTarget) {
  // Enough tokens for the code tables (32 x 576 values).
  constexpr std::int64_t T = 32, R = 512, P = 64;
  float scale = 0x1.fdp-121f;
  std::vector<std::uint16_t> kv_c(T * R, 0x0100), k_pe(T * P, 0x8100);  // about 2^-5 scaled
  for (std::size_t i = 5; i < kv_c.size(); i += 64) kv_c[i] = 0x0077;
  for (std::size_t i = 9; i < k_pe.size(); i += 64) k_pe[i] = 0x8077;
  std::vector<std::int64_t> slots(T);
  for (std::int64_t t = 0; t < T; ++t) slots[static_cast<std::size_t>(t)] = t;
  const auto value = [](std::uint16_t b) { return std::bit_cast<float>(std::uint32_t{b} << 16); };
  const int threads = get_num_threads();
  set_num_threads(1);
  for (std::int64_t target : simd_test::simd_targets()) {
    simd_test::PinTarget pin(target);
    Bytes cache(static_cast<std::size_t>(T * (R + P)), 0);
    PagedLatentWriteOptions o;
    o.format = LatentCacheFormat::fp8_e4m3;
    o.scale = TensorView(&scale, DType::float32, {1});
    paged_latent_write(TensorView(kv_c.data(), DType::bfloat16, {T, R}),
                       TensorView(k_pe.data(), DType::bfloat16, {T, P}),
                       TensorView(cache.data(), DType::uint8, {1, T, R + P}),
                       TensorView(slots.data(), DType::int64, {T}), o);
    int bad = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t i = 0; i < R + P; ++i) {
        const std::uint16_t b = i < R ? kv_c[static_cast<std::size_t>(t * R + i)]
                                      : k_pe[static_cast<std::size_t>(t * P + i - R)];
        const int want = formats::encode_float8_e4m3fn_satfinite(value(b) / scale);
        const int got = cache[static_cast<std::size_t>(t * (R + P) + i)];
        if (got != want && ++bad <= 3) {
          ADD_FAILURE() << simd_test::target_name(target) << " x " << value(b)
                        << ": got " << got << ", expected " << want;
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
  set_num_threads(threads);
}

// fp8_ds_mla entries against the rule itself (tile scale = the tile's largest magnitude / 448,
// at least FLT_MIN; codes of x / scale, saturating) on every SIMD target, for tile maxima with
// every bfloat16 mantissa over the whole exponent range (every third magnitude from the
// smallest subnormal to the largest finite). The other lanes of a tile: random magnitudes up to
// its maximum, some near the bottom of float8's range and zeros, random signs.
TEST(PagedLatentWriteDsMla, TileScalesOnEveryTarget) {
  std::vector<std::uint16_t> maxima;
  for (std::uint32_t m = 1; m < 0x7F80; m += 3) maxima.push_back(static_cast<std::uint16_t>(m));
  maxima.push_back(0);
  while (maxima.size() % 4 != 0) maxima.push_back(0x7F7F);
  const std::int64_t T = static_cast<std::int64_t>(maxima.size()) / 4;
  std::vector<std::uint16_t> kv_c(static_cast<std::size_t>(T * 512)), k_pe(T * 64, 0x3F80);
  std::mt19937 gen(29);
  const auto rng = [&gen] { return static_cast<std::uint32_t>(gen()); };
  const auto value = [](std::uint32_t b) { return std::bit_cast<float>(b << 16); };
  for (std::size_t tile = 0; tile < maxima.size(); ++tile) {
    const std::uint32_t m = maxima[tile];
    std::uint16_t* x = &kv_c[tile * 128];
    // Odd tiles keep their lanes within 12 binades of the maximum (and zeros): no lane in
    // float8's subnormal range, so that the table kernels encode whole groups.
    const bool near = tile % 2 == 1;
    for (std::uint32_t i = 0; i < 128; ++i) {
      std::uint32_t mag = m == 0 ? 0
                          : near ? m - rng() % (std::min(m, 12u << 7) + 1)
                                 : rng() % (m + 1);
      // A few lanes about 2^-10 .. 2^-6 of the scale (float8's subnormal range), and zeros.
      if (!near && i % 16 == 5 && m > (17u << 7)) mag = m - ((12u + rng() % 5) << 7);
      if (i % 32 == 9) mag = 0;
      x[i] = static_cast<std::uint16_t>(mag | (rng() % 2 == 0 ? 0 : 0x8000u));
    }
    x[rng() % 128] = static_cast<std::uint16_t>(m | (rng() % 2 == 0 ? 0 : 0x8000u));
  }
  std::vector<std::int64_t> slots(static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; ++t) slots[static_cast<std::size_t>(t)] = t;
  const int threads = get_num_threads();
  set_num_threads(1);
  for (std::int64_t target : simd_test::simd_targets()) {
    simd_test::PinTarget pin(target);
    Bytes cache(static_cast<std::size_t>(T * 656), 0);
    float unused = 1.0f;
    PagedLatentWriteOptions o;
    o.format = LatentCacheFormat::fp8_ds_mla;
    o.scale = TensorView(&unused, DType::float32, {1});
    paged_latent_write(TensorView(kv_c.data(), DType::bfloat16, {T, 512}),
                       TensorView(k_pe.data(), DType::bfloat16, {T, 64}),
                       TensorView(cache.data(), DType::uint8, {1, T, 656}),
                       TensorView(slots.data(), DType::int64, {T}), o);
    int bad = 0;
    for (std::size_t tile = 0; tile < maxima.size(); ++tile) {
      const std::uint8_t* entry = &cache[tile / 4 * 656];
      const float q = value(maxima[tile]) / 448.0f;
      const float scale =
          q > std::numeric_limits<float>::min() ? q : std::numeric_limits<float>::min();
      float got_scale;
      std::memcpy(&got_scale, entry + 512 + 4 * (tile % 4), 4);
      if (std::bit_cast<std::uint32_t>(got_scale) != std::bit_cast<std::uint32_t>(scale) &&
          ++bad <= 3) {
        ADD_FAILURE() << simd_test::target_name(target) << " max "
                      << value(maxima[tile]) << ": scale " << got_scale << ", expected " << scale;
      }
      for (std::size_t i = 0; i < 128; ++i) {
        const std::uint16_t b = kv_c[tile * 128 + i];
        const std::uint8_t want = formats::encode_float8_e4m3fn_satfinite(value(b) / scale);
        const std::uint8_t got = entry[tile % 4 * 128 + i];
        if (got != want && ++bad <= 3) {
          ADD_FAILURE() << simd_test::target_name(target) << " max "
                        << value(maxima[tile]) << " x " << value(b) << ": got " << int{got}
                        << ", expected " << int{want};
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
  set_num_threads(threads);
}

// fp8_ds_mla entries of float16 rows against the reference on every SIMD target: tiles whose
// largest magnitude is every fifth float16 magnitude (subnormals, the largest finite, an
// infinity, a NaN that counts as 0), the other lanes random below it with either sign and
// zeros; k_pe float16 too.
TEST(PagedLatentWriteDsMla, Float16TilesMatchReference) {
  // Each maximum twice: its lanes' magnitudes drawn from all below it, and (second) from the
  // normal ones only, so that tiles whose subnormals do not all round to zero also come without
  // any float16 subnormal (a zero then is the only lane below 2^-14). Lanes 9, 41, 73 and 105
  // are zeros of either sign.
  std::vector<std::uint32_t> maxima;
  for (std::uint32_t m = 0; m < 0x7C00; m += 5) maxima.insert(maxima.end(), {m, m});
  maxima.push_back(0x7BFF);
  maxima.push_back(0x7C00);
  maxima.push_back(0x7E01);
  while (maxima.size() % 4 != 0) maxima.push_back(0x3C00);
  const std::int64_t T = static_cast<std::int64_t>(maxima.size()) / 4;
  std::vector<std::uint16_t> kv_c(static_cast<std::size_t>(T * 512)), k_pe(T * 64);
  std::mt19937 gen(31);
  const auto rng = [&gen] { return static_cast<std::uint32_t>(gen()); };
  for (std::size_t tile = 0; tile < maxima.size(); ++tile) {
    const std::uint32_t m = maxima[tile], below = std::min(m, 0x7BFFu);
    const std::uint32_t low = tile % 2 == 1 && below >= 0x400 ? 0x400 : 0;
    std::uint16_t* x = &kv_c[tile * 128];
    for (std::uint32_t i = 0; i < 128; ++i) {
      const std::uint32_t mag = i % 32 == 9 ? 0 : low + rng() % (below - low + 1);
      x[i] = static_cast<std::uint16_t>(mag | (rng() % 2 == 0 ? 0 : 0x8000u));
    }
    x[rng() % 128] = static_cast<std::uint16_t>(m | (rng() % 2 == 0 ? 0 : 0x8000u));
  }
  for (auto& v : k_pe) v = static_cast<std::uint16_t>(rng());
  std::vector<std::int64_t> slots(static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; ++t) slots[static_cast<std::size_t>(t)] = T - 1 - t;
  float unused = 1.0f;
  PagedLatentWriteOptions o;
  o.format = LatentCacheFormat::fp8_ds_mla;
  o.scale = TensorView(&unused, DType::float32, {1});
  const auto go = [&](bool ref, Bytes& cache) {
    const PagedLatentWritePlan p =
        plan_paged_latent_write(TensorView(kv_c.data(), DType::float16, {T, 512}),
                                TensorView(k_pe.data(), DType::float16, {T, 64}),
                                TensorView(cache.data(), DType::uint8, {1, T, 656}),
                                TensorView(slots.data(), DType::int64, {T}), o);
    if (ref) {
      reference::execute(p);
    } else {
      execute(p);
    }
  };
  Bytes want(static_cast<std::size_t>(T * 656), 0);
  go(true, want);
  const int threads = get_num_threads();
  set_num_threads(1);
  for (std::int64_t target : simd_test::simd_targets()) {
    simd_test::PinTarget pin(target);
    Bytes cache(want.size(), 0);
    go(false, cache);
    const auto diff = std::mismatch(cache.begin(), cache.end(), want.begin());
    EXPECT_TRUE(diff.first == cache.end())
        << simd_test::target_name(target) << ": byte " << (diff.first - cache.begin())
        << " of entry " << (diff.first - cache.begin()) / 656;
  }
  set_num_threads(threads);
}

// Calls past the streaming threshold build fp8_ds_mla entries in a buffer and stream the whole
// cache lines of runs of entries that follow each other in the cache, 2 KiB at a time. With
// the threshold at 0, on every target and thread count: runs broken by a skipped token and by a
// jump, a slot written twice close together and again later, twice in a row, entries written
// in descending order (a partial line shared by two runs), the last slot of a block, a run over
// six blocks up to the cache's last slot (many bursts, the call ending in the middle of one),
// and entries apart (a slot pitch wider than the entry, whose tail stays untouched). bfloat16
// and float16 input.
TEST(PagedLatentWriteDsMla, StreamedEntriesMatchReference) {
  const std::int64_t saved = detail::set_stream_threshold(0);
  const int threads = get_num_threads();
  const std::int64_t bs = 8, nb = 12;
  std::vector<std::int32_t> slots = {16, 17, 18, 19, 20, 21, -1, 22, 23, 24, 25, 30, 25, 39, 0,
                                     1,  2,  3,  4,  5,  6,  7,  25, 12, 11, 10, 10, 32, 33};
  for (std::int32_t s = 43; s < 96; ++s) slots.push_back(s);
  const std::int64_t t = static_cast<std::int64_t>(slots.size());
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> kv_c_f(static_cast<std::size_t>(t * 512)), k_pe_f(t * 64);
  for (auto& v : kv_c_f) v = normal(rng);
  for (auto& v : k_pe_f) v = normal(rng);
  float unused = 1.0f;
  PagedLatentWriteOptions o;
  o.format = LatentCacheFormat::fp8_ds_mla;
  o.scale = TensorView(&unused, DType::float32, {1});
  // [nb, bs, 656] entries `pitch` bytes apart.
  const auto cache_view = [&](Bytes& cache, std::int64_t pitch) {
    const std::int64_t shape[] = {nb, bs, 656}, strides[] = {bs * pitch, pitch, 1};
    return TensorView(cache.data(), DType::uint8, shape, strides);
  };
  for (DType dt : {DType::bfloat16, DType::float16}) {
    const auto bits = [dt](const std::vector<float>& x) {
      std::vector<std::uint16_t> out(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        out[i] = dt == DType::float16 ? formats::encode_float16(x[i]) : bf16(x[i]);
      }
      return out;
    };
    std::vector<std::uint16_t> kv_c = bits(kv_c_f), k_pe = bits(k_pe_f);
    for (std::int64_t target : simd_test::simd_targets()) {
      simd_test::PinTarget pin(target);
      for (int n : {1, 2}) {
        set_num_threads(n);
        for (std::int64_t width : {656, 664}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + ", " + simd_test::target_name(target) + ", " +
                       std::to_string(n) + " threads, entries " + std::to_string(width) +
                       " bytes apart");
          Bytes cache(static_cast<std::size_t>(nb * bs * width), 0xCD), ref = cache;
          auto plan = plan_paged_latent_write(
              TensorView(kv_c.data(), dt, {t, 512}), TensorView(k_pe.data(), dt, {t, 64}),
              cache_view(cache, width), TensorView(slots.data(), DType::int32, {t}), o);
          execute(plan);
          plan.kv_cache.data = ref.data();
          reference::execute(plan);
          EXPECT_EQ(cache, ref);
        }
      }
    }
  }
  set_num_threads(threads);
  detail::set_stream_threshold(saved);
}

// Calls of many grains with many repeated slots, cached and streamed, in every format: on one
// thread the tokens go through in token order with every repeat left in (the earlier writers are
// dropped only for a split call), and every thread count ends with the reference's cache.
TEST(PagedLatentWrite, LargeCallsWithRepeatedSlotsMatchReference) {
  const std::int64_t bs = 8, nb = 8, t = 1500;  // about ten grains of tokens
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::uint16_t> kv_c(static_cast<std::size_t>(t * 512)), k_pe(t * 64);
  for (auto& v : kv_c) v = bf16(normal(rng));
  for (auto& v : k_pe) v = bf16(normal(rng));
  std::vector<std::int64_t> slots(static_cast<std::size_t>(t));
  for (auto& s : slots) s = static_cast<std::int64_t>(rng() % (nb * bs + 6)) - 6;  // 6 in 70 skip
  float scale = 0.25f;
  const int threads = get_num_threads();
  for (std::int64_t threshold : {std::int64_t{0}, detail::stream_threshold_bytes().load()}) {
    const std::int64_t saved = detail::set_stream_threshold(threshold);
    for (LatentCacheFormat f :
         {LatentCacheFormat::copy, LatentCacheFormat::fp8_e4m3, LatentCacheFormat::fp8_ds_mla}) {
      PagedLatentWriteOptions o;
      o.format = f;
      if (f == LatentCacheFormat::fp8_e4m3) o.scale = TensorView(&scale, DType::float32, {1});
      const std::int64_t entry = f == LatentCacheFormat::copy       ? 2 * 576
                                 : f == LatentCacheFormat::fp8_e4m3 ? 576
                                                                    : 656;
      const auto plan_for = [&](Bytes& cache) {
        return plan_paged_latent_write(
            TensorView(kv_c.data(), DType::bfloat16, {t, 512}),
            TensorView(k_pe.data(), DType::bfloat16, {t, 64}),
            f == LatentCacheFormat::copy ? TensorView(cache.data(), DType::bfloat16, {nb, bs, 576})
                                         : TensorView(cache.data(), DType::uint8, {nb, bs, entry}),
            TensorView(slots.data(), DType::int64, {t}), o);
      };
      Bytes ref(static_cast<std::size_t>(nb * bs * entry), 0xCD);
      reference::execute(plan_for(ref));
      for (int n : {1, 2, 3}) {
        SCOPED_TRACE("format " + std::to_string(static_cast<int>(f)) + ", " + std::to_string(n) +
                     " threads, streaming threshold " + std::to_string(threshold));
        set_num_threads(n);
        Bytes cache(ref.size(), 0xCD);
        execute(plan_for(cache));
        EXPECT_EQ(cache, ref);
      }
    }
    detail::set_stream_threshold(saved);
  }
  set_num_threads(threads);
}

TEST(PagedLatentWriteExamples, DsMlaBfloat16) {
  std::vector<std::uint16_t> kv_c(512, 0), k_pe(64, 0);
  const float vals[4] = {7.0f, 1.0f, -0.5f, 7.0f / 128};
  for (int i = 0; i < 4; ++i) kv_c[static_cast<std::size_t>(i)] = bf16(vals[i]);
  kv_c[256] = bf16(1.0f);
  kv_c[384] = bf16(std::numeric_limits<float>::infinity());
  kv_c[385] = bf16(3.0f);
  kv_c[386] = bf16(std::numeric_limits<float>::quiet_NaN());
  k_pe[0] = bf16(1.0f);
  k_pe[1] = bf16(-2.0f);
  Bytes cache(656, 0);
  std::vector<std::int32_t> slots{0};
  float scale = 1.0f;
  PagedLatentWriteOptions o;
  o.format = LatentCacheFormat::fp8_ds_mla;
  o.scale = TensorView(&scale, DType::float32, {1});
  paged_latent_write(TensorView(kv_c.data(), DType::bfloat16, {1, 512}),
                     TensorView(k_pe.data(), DType::bfloat16, {1, 64}),
                     TensorView(cache.data(), DType::uint8, {1, 1, 656}),
                     TensorView(slots.data(), DType::int32, {1}), o);
  Bytes want(656, 0);
  const Bytes head{0x7E, 0x68, 0xE0, 0x46};
  std::copy(head.begin(), head.end(), want.begin());
  want[256] = 0x7E;
  want[384] = 0x7F, want[385] = 0x00, want[386] = 0x7F;
  const Bytes scales{0x00, 0x00, 0x80, 0x3C, 0x00, 0x00, 0x80, 0x00,
                     0x25, 0x49, 0x12, 0x3B, 0x00, 0x00, 0x80, 0x7F};
  std::copy(scales.begin(), scales.end(), want.begin() + 512);
  want[528] = 0x80, want[529] = 0x3F, want[530] = 0x00, want[531] = 0xC0;
  EXPECT_EQ(cache, want);
}

TEST(PagedLatentWriteExamples, CopyIntoPaddedEntries) {
  std::vector<float> kv_c{1, 2, 3, 4, 5, 6}, k_pe{-1, -2};
  std::vector<float> cache(2 * 2 * 5, 9.0f);  // entry 4 padded to 5
  std::vector<std::int64_t> slots{3, 0};
  const std::vector<std::int64_t> shape{2, 2, 4}, strides{10, 5, 1};
  paged_latent_write(TensorView(kv_c.data(), DType::float32, {2, 3}),
                     TensorView(k_pe.data(), DType::float32, {2, 1}),
                     TensorView(cache.data(), DType::float32, shape, strides),
                     TensorView(slots.data(), DType::int64, {2}));
  EXPECT_EQ(cache,
            (std::vector<float>{4, 5, 6, -2, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, -1, 9}));
}

// ---- rejections ----------------------------------------------------------------------------

struct Call {
  std::vector<std::uint16_t> kv_c = std::vector<std::uint16_t>(5 * 16, 0x3F80);
  std::vector<std::uint16_t> k_pe = std::vector<std::uint16_t>(5 * 8, 0x3F80);
  Bytes cache = Bytes(3 * 4 * 24 * 2, 0xAB);
  std::vector<std::int64_t> slots{0, 1, 2, 3, 4};
  std::vector<float> scale{1.0f};
  DType dtype = DType::bfloat16, cache_dtype = DType::bfloat16;
  std::vector<std::int64_t> kv_c_shape{5, 16}, k_pe_shape{5, 8}, cache_shape{3, 4, 24};
  PagedLatentWriteOptions o;
  Call() { o.scale = TensorView(scale.data(), DType::float32, {1}); }
  void run() {
    paged_latent_write(
        TensorView(kv_c.data(), dtype, kv_c_shape), TensorView(k_pe.data(), dtype, k_pe_shape),
        TensorView(cache.data(), cache_dtype, cache_shape),
        TensorView(slots.data(), DType::int64, {static_cast<std::int64_t>(slots.size())}), o);
  }
};

void expect_rejected(Call& c, const std::string& message) {
  const Bytes before = c.cache;
  try {
    c.run();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.cache, before);
}

TEST(PagedLatentWriteRejects, EveryRule) {
  Call ok;
  ok.run();
  {
    Call c;
    c.dtype = DType::float16;
    c.kv_c_shape = {5, 16};
    expect_rejected(c, "kv_cache dtype bfloat16 must equal the kv_c dtype float16");
  }
  {
    Call c;
    c.cache_shape = {3, 4, 1, 24};
    expect_rejected(c,
                    "kv_cache must be 3-D [num_blocks, block_size, entry], got 4-D [3, 4, 1, 24]");
  }
  {
    Call c;
    c.cache_shape = {3, 4, 25};
    expect_rejected(c, "kv_cache.shape[2] = 25 must equal kv_lora_rank + pe_dim = 24");
  }
  {
    Call c;
    c.k_pe_shape = {5, 1, 8};
    expect_rejected(c, "k_pe must be 2-D [num_tokens, pe_dim], got 3-D [5, 1, 8]");
  }
  {
    Call c;
    c.o.format = LatentCacheFormat::fp8_ds_mla;
    c.cache_dtype = DType::uint8;
    expect_rejected(c, "fp8_ds_mla needs kv_lora_rank = 512 and pe_dim = 64, got 16 and 8");
  }
  {
    Call c;
    c.o.format = LatentCacheFormat::fp8_e4m3;
    expect_rejected(c, "kv_cache dtype bfloat16 cannot hold the codes of format 'fp8_e4m3'");
  }
  {
    Call c;
    c.slots.push_back(0);
    expect_rejected(c, "slot_mapping has 6 entries but kv_c has only 5 rows");
  }
  {
    Call c;
    c.scale = {1.0f, 2.0f};
    c.o.scale = TensorView(c.scale.data(), DType::float32, {2});
    expect_rejected(c, "scale has 2 elements; expected 1");
  }
  {
    Call c;
    c.o.format = LatentCacheFormat::fp8_e5m2;
    c.cache_dtype = DType::uint8;
    c.o.scale.reset();
    expect_rejected(c, "scale is required by format 'fp8_e5m2'");
  }
  {
    Call c;
    c.slots[2] = std::int64_t{1} << 33;
    expect_rejected(c,
                    "slot_mapping[2] = 8589934592 is out of range [0, 12) (kv_cache has 3 "
                    "blocks of 4 slots; negative slots mark padding)");
  }
  {
    Call c;
    c.dtype = DType::int16;
    expect_rejected(c, "kv_c dtype must be one of {float32, float16, bfloat16}, got int16");
  }
}

TEST(PagedLatentWriteRejects, DsMlaShapes) {
  std::vector<std::uint16_t> kv_c(512), k_pe(64);
  std::vector<float> kv_c32(512), k_pe32(64);
  Bytes cache(576, 0);
  std::vector<std::int64_t> slots{0};
  PagedLatentWriteOptions o;
  o.format = LatentCacheFormat::fp8_ds_mla;
  auto call = [&](void* c, void* p, DType dt, std::int64_t entry) {
    paged_latent_write(TensorView(c, dt, {1, 512}), TensorView(p, dt, {1, 64}),
                       TensorView(cache.data(), DType::uint8, {1, 1, entry}),
                       TensorView(slots.data(), DType::int64, {1}), o);
  };
  EXPECT_THROW(
      {
        try {
          call(kv_c.data(), k_pe.data(), DType::bfloat16, 576);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find(
                        "kv_cache.shape[2] must be 656 bytes for fp8_ds_mla, got 576"),
                    std::string::npos);
          throw;
        }
      },
      Error);
  EXPECT_THROW(call(kv_c32.data(), k_pe32.data(), DType::float32, 656), Error);
  EXPECT_EQ(cache, Bytes(576, 0));
}

}  // namespace
}  // namespace kvscatter
