// paged_kv_write: the worked examples byte for byte, every rejection (message, caches
// untouched), and one call large enough to be split over threads against the reference (the
// random cases run on every SIMD target from harness/paged_kv_write_cases.cc).
#include "kvscatter/paged_kv_write.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvscatter/error.h"
#include "kvscatter/formats.h"
#include "kvscatter/runtime.h"
#include "simd_targets.h"

namespace kvscatter {
namespace {

using Bytes = std::vector<std::uint8_t>;

std::uint16_t f16(float x) { return formats::encode_float16(x); }
std::uint16_t bf16(float x) { return formats::encode_bfloat16(x); }

TEST(PagedKvWriteExamples, CopyFloat16ShortSlotMapping) {
  std::vector<std::uint16_t> key, value;
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}) key.push_back(f16(v));
  for (float v : {10.0f, 20.0f, 30.0f, 40.0f, 50.0f, 60.0f}) value.push_back(f16(v));
  std::vector<std::uint16_t> kc(16, 0), vc(16, 0);
  std::vector<std::int64_t> slots{5, -1};
  const float one = 1.0f;
  PagedKvWriteOptions o;
  o.k_scale = TensorView(const_cast<float*>(&one), DType::float32, std::vector<std::int64_t>{});
  o.v_scale = o.k_scale;
  paged_kv_write(TensorView(key.data(), DType::float16, {3, 1, 2}),
                 TensorView(value.data(), DType::float16, {3, 1, 2}),
                 TensorView(kc.data(), DType::float16, {2, 4, 1, 2}),
                 TensorView(vc.data(), DType::float16, {2, 4, 1, 2}),
                 TensorView(slots.data(), DType::int64, {2}), o);
  std::vector<std::uint16_t> kwant(16, 0), vwant(16, 0);
  kwant[10] = 0x3C00, kwant[11] = 0x4000, vwant[10] = 0x4900, vwant[11] = 0x4D00;
  EXPECT_EQ(kc, kwant);
  EXPECT_EQ(vc, vwant);
}

TEST(PagedKvWriteExamples, Fp8E4M3Bfloat16PerTensor) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::uint16_t> key, value;
  for (float v : {1.0f, -3.3f, 300.0f, 0.002f, nan, -0.0f, -inf, 8.5f}) key.push_back(bf16(v));
  for (float v : {448.0f, 464.0f, 480.0f, std::ldexp(1.0f, -10), -std::ldexp(1.0f, -9), 3.0f,
                  std::ldexp(1.0f, -20), 96.0f})
    value.push_back(bf16(v));
  Bytes kc(32, 0), vc(32, 0);
  std::vector<std::int32_t> slots{2};
  float ks = 0.5f, vs = 2.0f;
  PagedKvWriteOptions o;
  o.format = KvCacheFormat::fp8_e4m3;
  o.k_scale = TensorView(&ks, DType::float32, {1});
  o.v_scale = TensorView(&vs, DType::float32, {1});
  paged_kv_write(TensorView(key.data(), DType::bfloat16, {1, 1, 8}),
                 TensorView(value.data(), DType::bfloat16, {1, 1, 8}),
                 TensorView(kc.data(), DType::uint8, {2, 2, 1, 8}),
                 TensorView(vc.data(), DType::uint8, {2, 2, 1, 8}),
                 TensorView(slots.data(), DType::int32, {1}), o);
  Bytes kwant(32, 0), vwant(32, 0);
  const Bytes kb{0x40, 0xCD, 0x7E, 0x02, 0x7F, 0x80, 0xFE, 0x58};
  const Bytes vb{0x76, 0x76, 0x77, 0x00, 0x80, 0x3C, 0x00, 0x64};
  std::copy(kb.begin(), kb.end(), kwant.begin() + 16);
  std::copy(vb.begin(), vb.end(), vwant.begin() + 16);
  EXPECT_EQ(kc, kwant);
  EXPECT_EQ(vc, vwant);
}

// HND caches interleaved in one allocation, passed as NHD-ordered strided
// views.
TEST(PagedKvWriteExamples, Fp8E5M2Float16PerHeadHndInterleaved) {
  std::vector<std::uint16_t> key, value;
  for (float v : {1.0f, 60000.0f, 0.1f, -3.0f}) key.push_back(f16(v));
  for (float v : {5.0f, -0.0f, 1000.0f, std::ldexp(1.0f, -24)}) value.push_back(f16(v));
  Bytes kv(16, 0);
  std::vector<std::int64_t> slots{1};
  float ks[2] = {1.0f, 0.25f}, vs[2] = {2.0f, 4.0f};
  PagedKvWriteOptions o;
  o.format = KvCacheFormat::fp8_e5m2;
  o.k_scale = TensorView(ks, DType::float32, {2});
  o.v_scale = TensorView(vs, DType::float32, {2});
  const std::vector<std::int64_t> shape{1, 2, 2, 2}, strides{16, 2, 4, 1};
  paged_kv_write(TensorView(key.data(), DType::float16, {1, 2, 2}),
                 TensorView(value.data(), DType::float16, {1, 2, 2}),
                 TensorView(kv.data(), DType::uint8, shape, strides),
                 TensorView(kv.data() + 8, DType::uint8, shape, strides),
                 TensorView(slots.data(), DType::int64, {1}), o);
  EXPECT_EQ(kv, (Bytes{0x00, 0x00, 0x3C, 0x7B, 0x00, 0x00, 0x36, 0xCA, 0x00, 0x00, 0x41, 0x80, 0x00,
                       0x00, 0x5C, 0x00}));

  // The same call with the physical HND view and layout HND gives the same
  // bytes.
  Bytes kv2(16, 0);
  o.layout = KvCacheLayout::HND;
  const std::vector<std::int64_t> hshape{1, 2, 2, 2}, hstrides{16, 4, 2, 1};
  paged_kv_write(TensorView(key.data(), DType::float16, {1, 2, 2}),
                 TensorView(value.data(), DType::float16, {1, 2, 2}),
                 TensorView(kv2.data(), DType::uint8, hshape, hstrides),
                 TensorView(kv2.data() + 8, DType::uint8, hshape, hstrides),
                 TensorView(slots.data(), DType::int64, {1}), o);
  EXPECT_EQ(kv2, kv);
}

// ---- rejections
// ----------------------------------------------------------------------------

struct Call {
  DType dtype = DType::float32, cache_dtype = DType::float32;
  std::int64_t T = 6, H = 2, D = 4, NB = 3, BS = 4, N = 6;
  std::vector<float> key, value;
  Bytes kc, vc;
  std::vector<std::int64_t> slots;
  std::vector<float> ks{1.0f}, vs{1.0f};
  PagedKvWriteOptions o;

  Call() {
    key.assign(static_cast<std::size_t>(T * H * D), 1.5f);
    value = key;
    kc.assign(static_cast<std::size_t>(NB * BS * H * D * 4), 0xAB);
    vc = kc;
    for (std::int64_t t = 0; t < N; ++t) slots.push_back(t);
    o.k_scale = TensorView(ks.data(), DType::float32, {1});
    o.v_scale = TensorView(vs.data(), DType::float32, {1});
  }
  TensorView tkey() { return TensorView(key.data(), dtype, {T, H, D}); }
  TensorView tvalue() { return TensorView(value.data(), dtype, {T, H, D}); }
  TensorView tkc() { return TensorView(kc.data(), cache_dtype, {NB, BS, H, D}); }
  TensorView tvc() { return TensorView(vc.data(), cache_dtype, {NB, BS, H, D}); }
  TensorView tslots() { return TensorView(slots.data(), DType::int64, {N}); }
};

template <class F>
void expect_rejected(Call& c, F&& call, const std::string& message) {
  const Bytes kc0 = c.kc, vc0 = c.vc;
  try {
    call();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    EXPECT_EQ(e.status(), Status::invalid_parameter);
  }
  EXPECT_EQ(c.kc, kc0);
  EXPECT_EQ(c.vc, vc0);
}

void run(Call& c) { paged_kv_write(c.tkey(), c.tvalue(), c.tkc(), c.tvc(), c.tslots(), c.o); }

TEST(PagedKvWriteRejects, EveryRule) {
  {
    Call c;
    c.slots[3] = 12;
    expect_rejected(
        c, [&] { run(c); },
        "slot_mapping[3] = 12 is out of range [0, 12) (key_cache has 3 blocks of 4 slots; "
        "negative slots mark padding)");
  }
  {
    Call c;
    expect_rejected(
        c,
        [&] {
          paged_kv_write(c.tkey(), TensorView(c.value.data(), c.dtype, {3, 2, 8}), c.tkc(), c.tvc(),
                         c.tslots(), c.o);
        },
        "value shape [3, 2, 8] must be [num_tokens, 2, 4] like key");
  }
  {
    Call c;
    expect_rejected(
        c,
        [&] {
          paged_kv_write(c.tkey(), c.tvalue(), TensorView(c.kc.data(), c.cache_dtype, {3, 4, 3, 4}),
                         c.tvc(), c.tslots(), c.o);
        },
        "key_cache shape [3, 4, 3, 4] must be [num_blocks, block_size, 2, 4]");
  }
  {
    Call c;
    c.o.format = KvCacheFormat::fp8_e4m3;
    c.cache_dtype = DType::float16;
    expect_rejected(
        c, [&] { run(c); },
        "key_cache dtype float16 cannot hold the codes of format 'fp8_e4m3' "
        "(expected uint8 or float8_e4m3fn)");
  }
  {
    Call c;
    c.cache_dtype = DType::float16;
    expect_rejected(
        c, [&] { run(c); }, "key_cache dtype float16 must equal the key dtype float32");
  }
  {
    Call c;
    c.slots.push_back(0);
    c.N = 7;
    expect_rejected(
        c, [&] { run(c); }, "slot_mapping has 7 entries but key has only 6 rows");
  }
  {
    Call c;
    c.ks = {1.0f, 2.0f, 3.0f};
    c.vs = c.ks;
    c.o.k_scale = TensorView(c.ks.data(), DType::float32, {3});
    c.o.v_scale = TensorView(c.vs.data(), DType::float32, {3});
    expect_rejected(
        c, [&] { run(c); }, "k_scale has 3 elements; expected 1 or 2");
  }
  {
    Call c;
    c.ks = {1.0f, 2.0f};
    c.o.k_scale = TensorView(c.ks.data(), DType::float32, {2});
    expect_rejected(
        c, [&] { run(c); }, "v_scale shape [1] must equal k_scale shape [2]");
  }
  {
    Call c;
    c.o.k_scale = TensorView(c.ks.data(), DType::int32, {1});
    expect_rejected(
        c, [&] { run(c); }, "k_scale must be float32, got int32");
  }
  {
    Call c;
    c.o.format = KvCacheFormat::fp8_e5m2;
    c.cache_dtype = DType::uint8;
    c.o.k_scale.reset();
    c.o.v_scale.reset();
    expect_rejected(
        c, [&] { run(c); }, "k_scale and v_scale are required by format 'fp8_e5m2'");
  }
  {
    Call c;
    c.dtype = DType::int32;
    expect_rejected(
        c, [&] { run(c); }, "key dtype must be one of {float32, float16, bfloat16}");
  }
  {
    Call c;  // the two caches on the same memory
    expect_rejected(
        c, [&] { paged_kv_write(c.tkey(), c.tvalue(), c.tkc(), c.tkc(), c.tslots(), c.o); },
        "share memory; outputs of one call must not overlap");
  }
  {
    Call c;  // a zero stride on the slot axis makes rows overlap
    const std::vector<std::int64_t> shape{3, 4, 2, 4}, strides{32, 0, 4, 1};
    expect_rejected(
        c,
        [&] {
          paged_kv_write(c.tkey(), c.tvalue(),
                         TensorView(c.kc.data(), c.cache_dtype, shape, strides), c.tvc(),
                         c.tslots(), c.o);
        },
        "key_cache must not overlap itself");
  }
  {
    Call c;
    const std::vector<std::int64_t> shape{3, 4, 2, 2}, strides{16, 4, 2, 2};
    c.D = 2;
    expect_rejected(
        c,
        [&] {
          paged_kv_write(TensorView(c.key.data(), c.dtype, {6, 2, 2}),
                         TensorView(c.value.data(), c.dtype, {6, 2, 2}),
                         TensorView(c.kc.data(), c.cache_dtype, shape, strides),
                         TensorView(c.vc.data(), c.cache_dtype, {3, 4, 2, 2}), c.tslots(), c.o);
        },
        "key_cache must have a unit stride on its head_size axis, got stride "
        "2");
  }
}

TEST(PagedKvWrite, EmptyCallIsANoOp) {
  Call c;
  c.N = 0;
  const Bytes kc0 = c.kc;
  run(c);
  EXPECT_EQ(c.kc, kc0);
}

// ---- optimized versus reference (random cases: harness/paged_kv_write_cases.cc) -----------

// Enough tokens to be split over threads, with many duplicate slots.
TEST(PagedKvWrite, LargeCallWithDuplicatesIsDeterministic) {
  const std::int64_t N = 20000, H = 2, D = 16, NB = 64, BS = 16;
  std::mt19937_64 rng(5);
  std::vector<float> key(static_cast<std::size_t>(N * H * D)), value(key.size());
  for (auto& v : key) v = std::normal_distribution<float>(0, 100)(rng);
  for (auto& v : value) v = std::normal_distribution<float>(0, 100)(rng);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(N));
  for (auto& s : slots) s = static_cast<std::int64_t>(rng() % (NB * BS + 50)) - 50;
  float ks[2] = {0.5f, 3.0f}, vs[2] = {1.0f, 0.1f};
  for (KvCacheFormat f : {KvCacheFormat::copy, KvCacheFormat::fp8_e4m3}) {
    const DType cd = f == KvCacheFormat::copy ? DType::float32 : DType::uint8;
    const std::size_t cb = static_cast<std::size_t>(NB * BS * H * D) * dtype_size(cd);
    PagedKvWriteOptions o;
    o.format = f;
    o.k_scale = TensorView(ks, DType::float32, {2});
    o.v_scale = TensorView(vs, DType::float32, {2});
    Bytes rk(cb, 0), rv(cb, 0);
    auto plan = [&](Bytes& k, Bytes& v) {
      return plan_paged_kv_write(TensorView(key.data(), DType::float32, {N, H, D}),
                                 TensorView(value.data(), DType::float32, {N, H, D}),
                                 TensorView(k.data(), cd, {NB, BS, H, D}),
                                 TensorView(v.data(), cd, {NB, BS, H, D}),
                                 TensorView(slots.data(), DType::int64, {N}), o);
    };
    reference::execute(plan(rk, rv));
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Bytes k(cb, 0), v(cb, 0);
      execute(plan(k, v));
      EXPECT_EQ(k, rk) << threads;
      EXPECT_EQ(v, rv) << threads;
    }
    set_num_threads(0);
  }
}

// The fp8 quantizers first try x * (1/scale) and keep it only where it cannot differ from the
// code of x / scale. Checked against the scalar encoders of x / scale on every SIMD target: every
// bfloat16 value, every float16 value (widened in registers, or by the float16 byte tables on
// AVX2), and float32 values within a few ulps of scale times every float8 value and
// rounding midpoint, for scales that make exact midpoints common (powers of two, 0.05, whose
// reciprocal is exactly 20), arbitrary ones, and ones outside the shortcut's range.
std::vector<float> fp8_test_scales() {
  std::vector<float> s{
      1.0f,   0.5f,      0.05f,     1.0f / 3.0f, 0.0537f,         3.7f,   0.1f,  7.0f,
      -0.05f, 0x1p-125f, 0x1p-126f, 0x1p126f,    0x1.fffffep125f, 1e-30f, 1e30f, 0x1.8p-140f};
  // Reciprocals of few significant bits (33, 21) with r * scale about 2^-25 from 1: the product
  // is exact but not always the rounded quotient.
  s.push_back(std::bit_cast<float>(0x3CF83E0Fu));
  s.push_back(std::bit_cast<float>(0x3D430C31u));
  std::mt19937 rng(17);
  for (int i = 0; i < 16; ++i) {
    const std::uint32_t bits =
        (static_cast<std::uint32_t>(107 + rng() % 40) << 23) | (rng() & 0x7FFFFFu);
    s.push_back(std::bit_cast<float>(bits));
  }
  return s;
}

// Float32 values within 5 ulps of scale * v for every float8 value and midpoint v of the format.
std::vector<float> near_midpoints(float scale, bool e4m3) {
  std::vector<float> out;
  for (int code = 0; code < 0x7F; ++code) {
    const auto lo_code = static_cast<std::uint8_t>(code);
    const auto hi_code = static_cast<std::uint8_t>(code + 1);
    const float lo =
        e4m3 ? formats::decode_float8_e4m3fn(lo_code) : formats::decode_float8_e5m2(lo_code);
    const float hi =
        e4m3 ? formats::decode_float8_e4m3fn(hi_code) : formats::decode_float8_e5m2(hi_code);
    if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
    for (float v : {lo, (lo + hi) / 2}) {
      const float x = v * scale;
      if (!std::isfinite(x)) continue;
      float up = x, down = x;
      for (int k = 0; k <= 5; ++k) {
        out.push_back(up);
        out.push_back(-down);
        up = std::nextafter(up, std::numeric_limits<float>::infinity());
        down = std::nextafter(down, 0.0f);
      }
    }
  }
  out.resize((out.size() + 255) / 256 * 256, 1.0f);  // whole rows, as many as two heads need
  return out;
}

void expect_fp8_codes(const std::vector<float>& values, const Bytes& input, DType dtype,
                      float scale, bool e4m3) {
  const std::int64_t D = 128, T = static_cast<std::int64_t>(values.size()) / D;
  Bytes expected(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float q = values[i] / scale;
    expected[i] = e4m3 ? formats::encode_float8_e4m3fn_satfinite(q)
                       : formats::encode_float8_e5m2_satfinite(q);
  }
  std::vector<std::int64_t> slots(static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; ++t) slots[static_cast<std::size_t>(t)] = t;
  Bytes kc(values.size()), vc(values.size());
  PagedKvWriteOptions o;
  o.format = e4m3 ? KvCacheFormat::fp8_e4m3 : KvCacheFormat::fp8_e5m2;
  o.k_scale = TensorView(&scale, DType::float32, {1});
  o.v_scale = o.k_scale;
  const TensorView x(const_cast<std::uint8_t*>(input.data()), dtype, {T, 1, D});
  paged_kv_write(x, x, TensorView(kc.data(), DType::uint8, {T, 1, 1, D}),
                 TensorView(vc.data(), DType::uint8, {T, 1, 1, D}),
                 TensorView(slots.data(), DType::int64, {T}), o);
  // The same values as two heads of T / 2 tokens with one scale each, into an HND cache: heads
  // quantized apart, each with its own scale.
  Bytes hnd(values.size()), hnd_v(values.size());
  float head_scales[2] = {scale, scale};
  PagedKvWriteOptions oh = o;
  oh.layout = KvCacheLayout::HND;
  oh.k_scale = TensorView(head_scales, DType::float32, {2});
  oh.v_scale = oh.k_scale;
  const TensorView x2(const_cast<std::uint8_t*>(input.data()), dtype, {T / 2, 2, D});
  paged_kv_write(x2, x2, TensorView(hnd.data(), DType::uint8, {1, 2, T / 2, D}),
                 TensorView(hnd_v.data(), DType::uint8, {1, 2, T / 2, D}),
                 TensorView(slots.data(), DType::int64, {T / 2}), oh);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::size_t row = i / D, t = row / 2, h = row % 2;
    const std::size_t at = (h * static_cast<std::size_t>(T / 2) + t) * D + i % D;
    if (kc[i] == expected[i] && vc[i] == expected[i] && hnd[at] == expected[i] &&
        hnd_v[at] == expected[i]) {
      continue;
    }
    if (++bad <= 3) {
      ADD_FAILURE() << simd_target() << " " << dtype_name(dtype) << (e4m3 ? " e4m3" : " e5m2")
                    << " scale " << scale << " x " << values[i] << ": got " << int{kc[i]}
                    << " (HND " << int{hnd[at]} << "), expected " << int{expected[i]};
    }
  }
  EXPECT_EQ(bad, 0u);
}

// Each bfloat16 value whose quotient lies near the ends of float8's subnormal range (or that is
// zero, infinite, NaN or the largest finite) alone in a group of 64 whose other lanes have
// quotients near 1: a kernel that classifies lanes per group (rounds to zero, normal float8,
// or needs the exact path) then depends on that one lane's class, which the sweep of every
// value in order, where neighbours share groups, does not isolate. Padded to pairs of rows.
std::vector<float> lone_lanes(float scale, bool e4m3) {
  const float top = e4m3 ? 0x1p-5f : 0x1p-13f, bottom = e4m3 ? 0x1p-12f : 0x1p-19f;
  const float filler = std::bit_cast<float>(std::bit_cast<std::uint32_t>(std::fabs(scale)) &
                                            0xFFFF0000u);
  std::vector<float> out;
  const auto lone = [&](float v) {
    out.push_back(v);
    out.insert(out.end(), 63, filler);
  };
  for (std::uint32_t b = 0; b < 0x8000; ++b) {
    const float v = std::bit_cast<float>(b << 16);
    const float q = v / std::fabs(scale);
    if (q >= bottom && q <= top) {
      lone(v);
      lone(-v);
    }
  }
  for (std::uint32_t b : {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                          0x7F7F0000u, 0xFF7F0000u, 0x00010000u}) {
    lone(std::bit_cast<float>(b));
  }
  out.resize((out.size() + 255) / 256 * 256, filler);
  return out;
}

// Every 16-bit pattern in order: its value by decode in values, its bytes in input.
template <class Decode>
void every_pattern(Decode decode, std::vector<float>& values, Bytes& input) {
  values.resize(65536);
  input.resize(65536 * 2);
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    values[b] = decode(h);
    std::memcpy(&input[2 * b], &h, 2);
  }
}

// Every float16 value in four heads of 128 values with scales a, a, b, a, into an HND cache, on
// every target: per-head scales that change from head to head, where the quantizers (the
// reciprocal shortcut, the float16 byte tables) set up again. Heads of 96 values too (zeros after
// the last pattern): a run of 64 and 32, the tail of AVX-512's 64-value table kernel.
TEST(PagedKvWriteFp8, Float16PerHeadScalesOnEveryTarget) {
  const int threads = get_num_threads();
  set_num_threads(1);
  const std::vector<float> scales = {0.0537f, 0.0537f, 1.0f / 3.0f, 0.0537f};
  for (const std::int64_t D : {std::int64_t{128}, std::int64_t{96}}) {
    const std::int64_t H = 4, T = (65536 + H * D - 1) / (H * D);
    std::vector<float> every_f16;
    Bytes f16_input;
    every_pattern(formats::decode_float16, every_f16, f16_input);
    every_f16.resize(static_cast<std::size_t>(T * H * D), 0.0f);
    f16_input.resize(static_cast<std::size_t>(T * H * D * 2), 0);
    for (std::int64_t target : simd_test::simd_targets()) {
      simd_test::PinTarget pin(target);
      Bytes kc(static_cast<std::size_t>(T * H * D)), vc(kc.size());
      std::vector<std::int64_t> slots(static_cast<std::size_t>(T));
      for (std::int64_t t = 0; t < T; ++t) slots[static_cast<std::size_t>(t)] = t;
      PagedKvWriteOptions o;
      o.format = KvCacheFormat::fp8_e4m3;
      o.layout = KvCacheLayout::HND;
      o.k_scale = TensorView(const_cast<float*>(scales.data()), DType::float32, {H});
      o.v_scale = o.k_scale;
      const TensorView x(f16_input.data(), DType::float16, {T, H, D});
      paged_kv_write(x, x, TensorView(kc.data(), DType::uint8, {1, H, T, D}),
                     TensorView(vc.data(), DType::uint8, {1, H, T, D}),
                     TensorView(slots.data(), DType::int64, {T}), o);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < every_f16.size(); ++i) {
        const std::size_t t = i / (H * D), h = i / D % H;
        const std::size_t at = (h * static_cast<std::size_t>(T) + t) * D + i % D;
        const std::uint8_t want = formats::encode_float8_e4m3fn_satfinite(every_f16[i] / scales[h]);
        if (kc[at] != want || vc[at] != want) ++bad;
      }
      EXPECT_EQ(bad, 0u) << simd_target() << ": per-head scales, heads of " << D;
    }
  }
  set_num_threads(threads);
}

TEST(PagedKvWriteFp8, QuotientCodesOnEveryTarget) {
  std::vector<float> every_bf16, every_f16;
  Bytes bf16_input, f16_input;
  every_pattern([](std::uint16_t h) { return std::bit_cast<float>(std::uint32_t{h} << 16); },
                every_bf16, bf16_input);
  every_pattern(formats::decode_float16, every_f16, f16_input);
  const int threads = get_num_threads();
  set_num_threads(1);
  for (std::int64_t target : simd_test::simd_targets()) {
    simd_test::PinTarget pin(target);
    for (float scale : fp8_test_scales()) {
      for (bool e4m3 : {true, false}) {
        expect_fp8_codes(every_bf16, bf16_input, DType::bfloat16, scale, e4m3);
        expect_fp8_codes(every_f16, f16_input, DType::float16, scale, e4m3);
        const std::vector<float> lone = lone_lanes(scale, e4m3);
        Bytes lone_input(lone.size() * 2);
        for (std::size_t i = 0; i < lone.size(); ++i) {
          const auto h = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(lone[i]) >> 16);
          std::memcpy(&lone_input[2 * i], &h, 2);
        }
        expect_fp8_codes(lone, lone_input, DType::bfloat16, scale, e4m3);
        const std::vector<float> near = near_midpoints(std::fabs(scale), e4m3);
        Bytes f32_input(near.size() * 4);
        std::memcpy(f32_input.data(), near.data(), f32_input.size());
        expect_fp8_codes(near, f32_input, DType::float32, scale, e4m3);
      }
    }
  }
  set_num_threads(threads);
}

}  // namespace
}  // namespace kvscatter
