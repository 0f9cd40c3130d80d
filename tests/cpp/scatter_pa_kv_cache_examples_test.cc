// Worked examples E1-E9 (numbered here, each with its inputs and expected bytes), run through
// both the optimized kernel and the reference (which must agree byte for byte).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvscatter/formats.h"
#include "scatter_pa_kv_cache_util.h"

namespace kvscatter::testing {
namespace {

std::uint16_t f16(float x) { return formats::encode_float16(x); }

// E1: PA_NZ, fp16, 2 heads; key [2,2,16], value [2,2,32], bs=2, nb=2, Lk=Lv=16.
Call e1(DType index_dtype, std::vector<std::int64_t> slots) {
  Call c;
  c.key = Buf(DType::float16, {2, 2, 16});
  c.value = Buf(DType::float16, {2, 2, 32});
  for (int t = 0; t < 2; ++t) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 16; ++d)
        c.key.set((t * 2 + h) * 16 + d, f16(float(100 * t + 20 * h + d)));
      for (int d = 0; d < 32; ++d) {
        c.value.set((t * 2 + h) * 32 + d, f16(float(500 + 100 * t + 40 * h + d)));
      }
    }
  }
  c.slot = index_buf(index_dtype, slots);
  c.key_cache = Buf(DType::float16, {2, 2, 2, 16});
  c.value_cache = Buf(DType::float16, {2, 4, 2, 16});
  c.opts.cache_mode = CacheMode::PA_NZ;
  return c;
}

// Element [blk][c][o][r] of a [nb, C1, bs, 16] fp16 cache.
std::uint16_t nz(const Buf& b, int blk, int c, int o, int r) {
  const auto c1 = b.shape[1], bs = b.shape[2];
  return b.get<std::uint16_t>(((blk * c1 + c) * bs + o) * 16 + r);
}

TEST(ScatterPaKvCacheExamples, E1PaNzFp16TwoHeads) {
  for (DType idx : {DType::int32, DType::int64}) {
    Call out = run_both(e1(idx, {3, 0}));
    // keyCache: table rows, flat indices 80-95, 112-127, 0-15, 32-47; everything else 0.
    std::vector<std::uint16_t> want_k(2 * 2 * 2 * 16, 0);
    for (int r = 0; r < 16; ++r) {
      want_k[80 + r] = f16(float(r));
      want_k[112 + r] = f16(float(20 + r));
      want_k[0 + r] = f16(float(100 + r));
      want_k[32 + r] = f16(float(120 + r));
    }
    for (int i = 0; i < 128; ++i) EXPECT_EQ(out.key_cache.get<std::uint16_t>(i), want_k[i]) << i;
    for (int r = 0; r < 16; ++r) {
      EXPECT_EQ(nz(out.key_cache, 1, 0, 1, r), f16(float(r)));
      EXPECT_EQ(nz(out.value_cache, 1, 0, 1, r), f16(float(500 + r)));
      EXPECT_EQ(nz(out.value_cache, 1, 1, 1, r), f16(float(516 + r)));
      EXPECT_EQ(nz(out.value_cache, 1, 2, 1, r), f16(float(540 + r)));
      EXPECT_EQ(nz(out.value_cache, 1, 3, 1, r), f16(float(556 + r)));
      EXPECT_EQ(nz(out.value_cache, 0, 0, 0, r), f16(float(600 + r)));
      EXPECT_EQ(nz(out.value_cache, 0, 1, 0, r), f16(float(616 + r)));
      EXPECT_EQ(nz(out.value_cache, 0, 2, 0, r), f16(float(640 + r)));
      EXPECT_EQ(nz(out.value_cache, 0, 3, 0, r), f16(float(656 + r)));
    }
    // Every other value element is 0: 8 rows of 16 written out of 16 rows.
    int nonzero = 0;
    for (int i = 0; i < 2 * 4 * 2 * 16; ++i) nonzero += out.value_cache.get<std::uint16_t>(i) != 0;
    EXPECT_EQ(nonzero, 8 * 16);
  }
}

TEST(ScatterPaKvCacheExamples, E1VariantPaddingSlotLeavesBlockZeroUntouched) {
  Call out = run_both(e1(DType::int32, {3, -1}));
  for (int c = 0; c < 2; ++c) {
    for (int r = 0; r < 16; ++r) EXPECT_EQ(nz(out.key_cache, 0, c, 0, r), 0);
  }
  for (int c = 0; c < 4; ++c) {
    for (int r = 0; r < 16; ++r) EXPECT_EQ(nz(out.value_cache, 0, c, 0, r), 0);
  }
  EXPECT_EQ(nz(out.key_cache, 1, 1, 1, 0), f16(20.0f));
}

TEST(ScatterPaKvCacheExamples, E1bPaNzInt8KeyFp16Value) {
  Call c;
  c.key = Buf(DType::int8, {1, 1, 64});
  for (int d = 0; d < 64; ++d) c.key.set<std::int8_t>(d, static_cast<std::int8_t>(d - 30));
  c.value = Buf(DType::float16, {1, 1, 16});
  for (int d = 0; d < 16; ++d) c.value.set(d, f16(float(d) + 0.5f));
  c.slot = index_buf(DType::int64, {3});  // blk 1, o 1 with bs = 2
  c.key_cache = Buf(DType::int8, {2, 2, 2, 32});
  c.value_cache = Buf(DType::float16, {2, 1, 2, 16});
  c.opts.cache_mode = CacheMode::PA_NZ;
  Call out = run_both(c);
  for (int r = 0; r < 32; ++r) {
    // keyCache[1][0][1][:] = key[0..31], keyCache[1][1][1][:] = key[32..63]
    EXPECT_EQ(out.key_cache.get<std::int8_t>(((1 * 2 + 0) * 2 + 1) * 32 + r), r - 30);
    EXPECT_EQ(out.key_cache.get<std::int8_t>(((1 * 2 + 1) * 2 + 1) * 32 + r), r + 32 - 30);
  }
  for (int r = 0; r < 16; ++r) {
    EXPECT_EQ(out.value_cache.get<std::uint16_t>(((1 * 1 + 0) * 2 + 1) * 16 + r),
              f16(float(r) + 0.5f));
  }
}

// E2: Norm/None, Dk != Dv, a padding slot.
Call e2(DType index_dtype, bool with_value) {
  Call c;
  c.key = Buf(DType::int32, {3, 2, 2});
  for (int i = 0; i < 12; ++i) c.key.set<std::int32_t>(i, i + 1);
  c.value = Buf(DType::int32, {3, 2, 3});
  for (int t = 0; t < 3; ++t) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 3; ++d)
        c.value.set<std::int32_t>((t * 2 + h) * 3 + d, 100 * (t + 1) + 10 * h + d);
    }
  }
  c.slot = index_buf(index_dtype, {2, -1, 1});
  c.key_cache = Buf(DType::int32, {2, 2, 2, 2});
  c.value_cache = Buf(DType::int32, {2, 2, 2, 3});
  c.has_value = with_value;
  return c;
}

std::vector<std::int32_t> ints(const Buf& b) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(b.elems()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = b.get<std::int32_t>(static_cast<std::int64_t>(i));
  return v;
}

const std::vector<std::int32_t> kE2Key = {0, 0, 0, 0, 9, 10, 11, 12,  // block 0: slot 0, slot 1
                                          1, 2, 3, 4, 0, 0,  0,  0};  // block 1: slot 2, slot 3

TEST(ScatterPaKvCacheExamples, E2NormDifferentHeadSizesAndPadding) {
  for (DType idx : {DType::int32, DType::int64}) {
    Call out = run_both(e2(idx, true));
    EXPECT_EQ(ints(out.key_cache), kE2Key);
    const std::vector<std::int32_t> want_v = {0,   0,   0,   0,   0,   0,   300, 301,
                                              302, 310, 311, 312, 100, 101, 102, 110,
                                              111, 112, 0,   0,   0,   0,   0,   0};
    EXPECT_EQ(ints(out.value_cache), want_v);
  }
}

TEST(ScatterPaKvCacheExamples, E3NctFusedBuffer) {
  const std::vector<std::int32_t> buf = {1, 2, 10, 20, 30, 99, 3, 4, 40, 50, 60, 99};
  Call c;
  c.key = Buf(DType::int32, {2, 1, 2}, 8);  // the 12-element buffer, logical [2,1,2]
  c.key.strides = {6, 2, 1};
  c.value = Buf(DType::int32, {2, 1, 3}, 6);
  c.value.strides = {6, 3, 1};
  for (int i = 0; i < 12; ++i) {
    c.key.set<std::int32_t>(i, buf[i]);
    c.value.set<std::int32_t>(i, buf[i]);
  }
  c.slot = index_buf(DType::int32, {1, 0});
  c.key_cache = Buf(DType::int32, {1, 2, 1, 2});
  c.value_cache = Buf(DType::int32, {1, 2, 1, 3});
  c.opts.scatter_mode = ScatterMode::Nct;
  c.opts.strides = std::array<std::int64_t, 2>{6, 6};
  c.opts.offsets = std::array<std::int64_t, 2>{0, 2};
  Call out = run_both(c);
  EXPECT_EQ(ints(out.key_cache), (std::vector<std::int32_t>{3, 4, 1, 2}));
  EXPECT_EQ(ints(out.value_cache), (std::vector<std::int32_t>{40, 50, 60, 10, 20, 30}));
}

TEST(ScatterPaKvCacheExamples, E3NctStrideVHonoured) {
  Call c;
  c.key = Buf(DType::int32, {2, 1, 2}, 4);
  c.key.strides = {4, 2, 1};
  const std::int32_t kbuf[] = {1, 2, 0, 0, 3, 4, 0, 0};
  for (int i = 0; i < 8; ++i) c.key.set<std::int32_t>(i, kbuf[i]);
  c.value = Buf(DType::int32, {2, 1, 3});
  const std::int32_t vbuf[] = {10, 20, 30, 40, 50, 60};
  for (int i = 0; i < 6; ++i) c.value.set<std::int32_t>(i, vbuf[i]);
  c.slot = index_buf(DType::int64, {0, 1});
  c.key_cache = Buf(DType::int32, {1, 2, 1, 2});
  c.value_cache = Buf(DType::int32, {1, 2, 1, 3});
  c.opts.scatter_mode = ScatterMode::Nct;
  c.opts.strides = std::array<std::int64_t, 2>{4, 3};
  c.opts.offsets = std::array<std::int64_t, 2>{0, 0};
  Call out = run_both(c);
  EXPECT_EQ(ints(out.key_cache), (std::vector<std::int32_t>{1, 2, 3, 4}));
  // Canonical: value token 1 = vbuf[3:6] (upstream P-2 would read vbuf[4:7]).
  EXPECT_EQ(ints(out.value_cache), (std::vector<std::int32_t>{10, 20, 30, 40, 50, 60}));
}

TEST(ScatterPaKvCacheExamples, E4KeyOnly) {
  for (DType idx : {DType::int32, DType::int64}) {
    Call out = run_both(e2(idx, false));
    EXPECT_EQ(ints(out.key_cache), kE2Key);
    // A 0-D value and value_cache are the same as absent ones.
    Call c = e2(idx, false);
    const TensorView scalar(nullptr, DType::int32, std::span<const std::int64_t>{});
    scatter_pa_kv_cache(c.key.view(), scalar, c.key_cache.view(), scalar, c.slot.view(), {});
    EXPECT_EQ(ints(c.key_cache), kE2Key);
  }
}

// E5: packed 3-D Alibi, fp16, NH=2, D=16.
TEST(ScatterPaKvCacheExamples, E5AlibiPacked) {
  Call c;
  c.key = Buf(DType::float16, {6, 2, 16});
  c.value = Buf(DType::float16, {6, 2, 16});
  for (int t = 0; t < 6; ++t) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 16; ++d) {
        c.key.set((t * 2 + h) * 16 + d, f16(float(64 * (t * 2 + h) + d)));
        c.value.set((t * 2 + h) * 16 + d, f16(float(1000 + 64 * (t * 2 + h) + d)));
      }
    }
  }
  c.seq_lens = index_buf(DType::int32, {3, 3});
  c.compress_lens = index_buf(DType::int32, {2, 1, 1, 2});
  c.slot = index_buf(DType::int32, {0, 4, 8, 12});
  c.key_cache = Buf(DType::float16, {4, 4, 1, 16});
  c.value_cache = Buf(DType::float16, {4, 4, 1, 16});
  c.opts.scatter_mode = ScatterMode::Alibi;
  Call out = run_both(c);
  // row -> (token, head) of the source, or -1 for untouched.
  const int src_t[16] = {1, 2, -1, -1, 2, -1, -1, -1, 5, -1, -1, -1, 4, 5, -1, -1};
  const int src_h[16] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0};
  for (int row = 0; row < 16; ++row) {
    for (int d = 0; d < 16; ++d) {
      const std::uint16_t wk =
          src_t[row] < 0 ? 0 : f16(float(64 * (src_t[row] * 2 + src_h[row]) + d));
      const std::uint16_t wv =
          src_t[row] < 0 ? 0 : f16(float(1000 + 64 * (src_t[row] * 2 + src_h[row]) + d));
      EXPECT_EQ(out.key_cache.get<std::uint16_t>(row * 16 + d), wk) << "row " << row;
      EXPECT_EQ(out.value_cache.get<std::uint16_t>(row * 16 + d), wv) << "row " << row;
    }
  }
  EXPECT_EQ(out.key_cache.get<std::uint16_t>(1 * 16), f16(256.0f));        // row1 = [256..271]
  EXPECT_EQ(out.key_cache.get<std::uint16_t>(13 * 16 + 15), f16(719.0f));  // row13 = [704..719]
}

// E6/E7: packed 3-D Rope / Omni, fp16, NH=1, D=16, key[t][0][d] = 4t + d.
Call e6(const char* mode, std::vector<std::int64_t> lens, std::vector<std::int64_t> offs) {
  Call c;
  c.key = Buf(DType::float16, {7, 1, 16});
  c.value = Buf(DType::float16, {7, 1, 16});
  for (int t = 0; t < 7; ++t) {
    for (int d = 0; d < 16; ++d) {
      c.key.set(t * 16 + d, f16(float(4 * t + d)));
      c.value.set(t * 16 + d, f16(float(1000 + 4 * t + d)));
    }
  }
  c.seq_lens = index_buf(DType::int64, {4, 3});
  c.compress_lens = index_buf(DType::int64, lens);
  c.compress_seq_offsets = index_buf(DType::int64, offs);
  c.slot = index_buf(DType::int64, {0, 8});
  c.key_cache = Buf(DType::float16, {3, 4, 1, 16});
  c.value_cache = Buf(DType::float16, {3, 4, 1, 16});
  c.opts.scatter_mode = parse_scatter_mode(mode);
  return c;
}

// Expects cache row `row` = base + d (key) and 1000 + base + d (value); base < 0: zeros.
void expect_row(const Call& out, int row, float base) {
  for (int d = 0; d < 16; ++d) {
    const std::uint16_t wk = base < 0 ? 0 : f16(base + float(d));
    const std::uint16_t wv = base < 0 ? 0 : f16(1000 + base + float(d));
    EXPECT_EQ(out.key_cache.get<std::uint16_t>(row * 16 + d), wk) << "row " << row << " d " << d;
    EXPECT_EQ(out.value_cache.get<std::uint16_t>(row * 16 + d), wv) << "row " << row << " d " << d;
  }
}

TEST(ScatterPaKvCacheExamples, E6RopePacked) {
  Call out = run_both(e6("Rope", {2, 2}, {1, -1}));
  expect_row(out, 0, 0);    // key[0]
  expect_row(out, 1, 6);    // mean(key[1], key[2]) = 6 + d, exact
  expect_row(out, 2, 12);   // key[3]
  expect_row(out, 3, -1);   // untouched
  expect_row(out, 8, 16);   // key[4]
  expect_row(out, 9, 20);   // key[5]
  expect_row(out, 10, 24);  // key[6]
  expect_row(out, 11, -1);
  for (int r = 4; r < 8; ++r) expect_row(out, r, -1);
}

TEST(ScatterPaKvCacheExamples, E6VariantZeroWindowMeansNoCompression) {
  Call out = run_both(e6("Rope", {0, 2}, {1, -1}));
  for (int r = 0; r < 4; ++r) expect_row(out, r, float(4 * r));
}

TEST(ScatterPaKvCacheExamples, E6VariantOffsetTwoHasNoSuffix) {
  Call out = run_both(e6("Rope", {2, 2}, {2, -1}));
  expect_row(out, 0, 0);
  expect_row(out, 1, 4);
  expect_row(out, 2, 10);  // mean(key[2], key[3]) = 10 + d
  expect_row(out, 3, -1);
}

TEST(ScatterPaKvCacheExamples, E7OmniPacked) {
  Call out = run_both(e6("Omni", {2, 2}, {1, -1}));
  expect_row(out, 0, 0);   // key[0]
  expect_row(out, 1, 12);  // key[3]; the window key[1..2] is dropped
  expect_row(out, 2, -1);
  expect_row(out, 3, -1);
  expect_row(out, 8, 16);
  expect_row(out, 9, 20);
  expect_row(out, 10, 24);
}

// E6b: one head, a window of constant rows, offset 0, so cache row 0 is the mean.
std::uint16_t rope_mean16(DType dt, const std::vector<float>& window) {
  const auto w = static_cast<std::int64_t>(window.size());
  Call c;
  c.key = Buf(dt, {w, 1, 16});
  for (std::int64_t t = 0; t < w; ++t) {
    const std::uint16_t code = dt == DType::float16 ? formats::encode_float16(window[t])
                                                    : formats::encode_bfloat16(window[t]);
    for (int d = 0; d < 16; ++d) c.key.set<std::uint16_t>(t * 16 + d, code);
  }
  c.has_value = false;
  c.seq_lens = index_buf(DType::int32, {w});
  c.compress_lens = index_buf(DType::int32, {w});
  c.compress_seq_offsets = index_buf(DType::int32, {0});
  c.slot = index_buf(DType::int32, {0});
  c.key_cache = Buf(dt, {1, 4, 1, 16});
  c.opts.scatter_mode = ScatterMode::Rope;
  Call out = run_both(c);
  for (int d = 1; d < 16; ++d) {
    EXPECT_EQ(out.key_cache.get<std::uint16_t>(d), out.key_cache.get<std::uint16_t>(0));
  }
  return out.key_cache.get<std::uint16_t>(0);
}

TEST(ScatterPaKvCacheExamples, E6bRopeMeanRounding) {
  EXPECT_EQ(rope_mean16(DType::float16, {1, 1, 2}), 0x3D55);   // 1.3330078125
  EXPECT_EQ(rope_mean16(DType::bfloat16, {1, 1, 2}), 0x3FAB);  // 1.3359375
  // fp32 accumulation: 2050/3 = 683.333 -> 683.5; fp16 accumulation would give 0x6155.
  EXPECT_EQ(rope_mean16(DType::float16, {2048, 1, 1}), 0x6157);
  EXPECT_EQ(rope_mean16(DType::float16, {1, 2}), 0x3E00);  // 1.5
}

// The Rope mean per element type (docs/semantics.md, 'scatter_pa_kv_cache'), on a one-element
// head (codes in, code out).
std::uint32_t rope_mean_code(DType dt, const std::vector<std::uint32_t>& codes) {
  const auto w = static_cast<std::int64_t>(codes.size());
  const auto es = static_cast<std::int64_t>(dtype_size(dt));
  Call c;
  c.key = Buf(dt, {w, 1, 1});
  for (std::int64_t t = 0; t < w; ++t) std::memcpy(c.key.bytes.data() + t * es, &codes[t], es);
  c.has_value = false;
  c.seq_lens = index_buf(DType::int64, {w});
  c.compress_lens = index_buf(DType::int64, {w});
  c.compress_seq_offsets = index_buf(DType::int64, {0});
  c.slot = index_buf(DType::int64, {1});
  c.key_cache = Buf(dt, {1, 2, 1, 1});
  c.opts.scatter_mode = ScatterMode::Rope;
  Call out = run_both(c);
  std::uint32_t code = 0;
  std::memcpy(&code, out.key_cache.bytes.data() + es, es);
  return code;
}

std::uint32_t enc(DType dt, float x) { return formats::encode(dt, x); }

TEST(ScatterPaKvCacheRopeMean, IntegerTypesTruncateTowardZeroAndWrap) {
  auto u = [](std::int64_t v) { return static_cast<std::uint32_t>(v); };
  EXPECT_EQ(rope_mean_code(DType::int8, {u(-3) & 0xFF, u(-4) & 0xFF}), u(-3) & 0xFF);  // -3.5 -> -3
  EXPECT_EQ(rope_mean_code(DType::int8, {127, 127, 126}), 126u);                       // 380 / 3
  EXPECT_EQ(rope_mean_code(DType::uint8, {255, 255, 254}), 254u);                      // 764 / 3
  EXPECT_EQ(rope_mean_code(DType::int16, {u(-1) & 0xFFFF, u(-2) & 0xFFFF}), u(-1) & 0xFFFF);
  EXPECT_EQ(rope_mean_code(DType::uint16, {65535, 65535}), 65535u);
  // int32 accumulates with wrap-around: INT32_MAX + 1 = INT32_MIN, / 2 = -2^30.
  EXPECT_EQ(rope_mean_code(DType::int32, {0x7FFFFFFFu, 1u}), u(-(std::int64_t{1} << 30)));
  EXPECT_EQ(rope_mean_code(DType::uint32, {0xFFFFFFFFu, 1u}), 0u);  // wraps to 0
}

TEST(ScatterPaKvCacheRopeMean, FloatTypesAccumulateInFloat32AndRoundPerFormat) {
  // float32: one IEEE division of the float32 sum.
  const float third = (1.0f + 2.0f + 4.0f) / 3.0f;
  EXPECT_EQ(rope_mean_code(DType::float32, {enc(DType::float32, 1), enc(DType::float32, 2),
                                            enc(DType::float32, 4)}),
            std::bit_cast<std::uint32_t>(third));
  // float8_e4m3fn: (1 + 1.125) / 2 = 1.0625 is a tie -> even (1.0).
  EXPECT_EQ(rope_mean_code(DType::float8_e4m3fn,
                           {enc(DType::float8_e4m3fn, 1.0f), enc(DType::float8_e4m3fn, 1.125f)}),
            enc(DType::float8_e4m3fn, 1.0f));
  // float8_e5m2: (1 + 1.25) / 2 = 1.125 is a tie -> even (1.0).
  EXPECT_EQ(rope_mean_code(DType::float8_e5m2,
                           {enc(DType::float8_e5m2, 1.0f), enc(DType::float8_e5m2, 1.25f)}),
            enc(DType::float8_e5m2, 1.0f));
  // hifloat8 rounds half away from zero: the tie 1.0625 goes to 1.125, -1.0625 to -1.125.
  const std::uint32_t h1 = enc(DType::hifloat8, 1.0f), h9 = enc(DType::hifloat8, 1.125f);
  ASSERT_EQ(formats::decode(DType::hifloat8, h9), 1.125f);
  ASSERT_NE(formats::decode(DType::hifloat8, enc(DType::hifloat8, 1.0625f)), 1.0625f);
  EXPECT_EQ(rope_mean_code(DType::hifloat8, {h1, h9}), h9);
  EXPECT_EQ(
      rope_mean_code(DType::hifloat8, {enc(DType::hifloat8, -1.0f), enc(DType::hifloat8, -1.125f)}),
      enc(DType::hifloat8, -1.125f));
  // bfloat16 / float16 ties go to even as well.
  EXPECT_EQ(rope_mean_code(DType::bfloat16,
                           {enc(DType::bfloat16, 1.0f), enc(DType::bfloat16, 1.0078125f)}),
            enc(DType::bfloat16, 1.0f));
  // A NaN in the window gives NaN; +inf and -inf give NaN; one infinity stays infinite.
  EXPECT_TRUE(std::isnan(formats::decode(
      DType::float16, rope_mean_code(DType::float16, {0x7E00u, enc(DType::float16, 1.0f)}))));
  EXPECT_TRUE(std::isnan(
      formats::decode(DType::float16, rope_mean_code(DType::float16, {0x7C00u, 0xFC00u}))));
  EXPECT_EQ(rope_mean_code(DType::float16, {0x7C00u, enc(DType::float16, 1.0f)}), 0x7C00u);
  EXPECT_EQ(rope_mean_code(DType::hifloat8, {0x6Fu, enc(DType::hifloat8, 1.0f)}),
            0x6Fu);  // inf kept
  // Signed zero: -0 + -0 accumulates from +0.0, so the mean is +0.
  EXPECT_EQ(rope_mean_code(DType::bfloat16, {0x8000u, 0x8000u}), 0x0000u);
}

// E8: 4-D Rope (scenario 3), fp32, documented formula, not the 950 kernel's suffix.
Call e8(std::int64_t window) {
  Call c;
  c.key = Buf(DType::float32, {1, 5, 1, 2});
  c.value = Buf(DType::float32, {1, 5, 1, 2});
  for (int k = 0; k < 5; ++k) {
    c.key.set<float>(2 * k, float(k));
    c.key.set<float>(2 * k + 1, float(10 * k));
    c.value.set<float>(2 * k, float(k) + 100);
    c.value.set<float>(2 * k + 1, float(10 * k) + 100);
  }
  c.seq_lens = index_buf(DType::int32, {5});
  c.compress_seq_offsets = index_buf(DType::int32, {1});
  c.compress_lens = index_buf(DType::int32, {window}, {1, 1});
  c.slot = index_buf(DType::int32, {4}, {1, 1});
  c.key_cache = Buf(DType::float32, {2, 4, 1, 2});
  c.value_cache = Buf(DType::float32, {2, 4, 1, 2});
  return c;  // scatter_mode stays "None": a 4-D key with offsets selects Rope
}

TEST(ScatterPaKvCacheExamples, E8Rope4DDocumentedFormula) {
  for (const char* mode : {"None", "Rope"}) {
    Call c = e8(2);
    c.opts.scatter_mode = parse_scatter_mode(mode);
    Call out = run_both(c);
    const float want_k[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.5f, 15, 3, 30, 4, 40};
    const float want_v[] = {0, 0, 0, 0, 0, 0, 0, 0, 100, 100, 101.5f, 115, 103, 130, 104, 140};
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(out.key_cache.get<float>(i), want_k[i]) << i;
      EXPECT_EQ(out.value_cache.get<float>(i), want_v[i]) << i;
    }
    EXPECT_EQ(c.plan().scatter_mode, ScatterMode::Rope);
  }
}

TEST(ScatterPaKvCacheExamples, E8ZeroWindowWritesEveryTokenSoRow8IsOutOfRange) {
  Call c = e8(0);
  const auto before = c.key_cache.bytes;
  try {
    c.run();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_parameter);
    EXPECT_NE(std::string(e.what()).find("slot_mapping[0] = 4"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.key_cache.bytes, before);
  // With one more block the five tokens land in rows 4..8 (canonical, no hole).
  c.key_cache = Buf(DType::float32, {3, 4, 1, 2});
  c.value_cache = Buf(DType::float32, {3, 4, 1, 2});
  Call out = run_both(c);
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(out.key_cache.get<float>((4 + k) * 2), float(k));
    EXPECT_EQ(out.key_cache.get<float>((4 + k) * 2 + 1), float(10 * k));
  }
}

// E9: 4-D Alibi.
TEST(ScatterPaKvCacheExamples, E9Alibi4D) {
  for (DType dt : {DType::int16, DType::float32}) {
    Call c;
    c.key = Buf(dt, {2, 4, 1, 2});
    c.value = Buf(dt, {2, 4, 1, 2});
    for (int b = 0; b < 2; ++b) {
      for (int k = 0; k < 4; ++k) {
        const int i = (b * 4 + k) * 2;
        const float x0 = float(10 * b + k), x1 = float(100 + 10 * b + k);
        if (dt == DType::int16) {
          c.key.set<std::int16_t>(i, std::int16_t(x0));
          c.key.set<std::int16_t>(i + 1, std::int16_t(x1));
          c.value.set<std::int16_t>(i, std::int16_t(-x0));
          c.value.set<std::int16_t>(i + 1, std::int16_t(-x1));
        } else {
          c.key.set<float>(i, x0);
          c.key.set<float>(i + 1, x1);
          c.value.set<float>(i, -x0);
          c.value.set<float>(i + 1, -x1);
        }
      }
    }
    c.seq_lens = index_buf(DType::int64, {3, 4});
    c.compress_lens = index_buf(DType::int64, {2, 3});
    c.slot = index_buf(DType::int64, {0, 4}, {2, 1});
    c.key_cache = Buf(dt, {2, 4, 1, 2});
    c.value_cache = Buf(dt, {2, 4, 1, 2});
    Call out = run_both(c);
    EXPECT_EQ(c.plan().scatter_mode, ScatterMode::Alibi);
    const int want[8][2] = {{1, 101},  {2, 102},  {0, 0},    {0, 0},
                            {11, 111}, {12, 112}, {13, 113}, {0, 0}};
    for (int row = 0; row < 8; ++row) {
      for (int e = 0; e < 2; ++e) {
        const double k = dt == DType::int16 ? out.key_cache.get<std::int16_t>(row * 2 + e)
                                            : out.key_cache.get<float>(row * 2 + e);
        const double v = dt == DType::int16 ? out.value_cache.get<std::int16_t>(row * 2 + e)
                                            : out.value_cache.get<float>(row * 2 + e);
        EXPECT_EQ(k, want[row][e]) << "row " << row;
        EXPECT_EQ(v, -want[row][e]) << "row " << row;
      }
    }
  }
}

}  // namespace
}  // namespace kvscatter::testing
