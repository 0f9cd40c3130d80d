// KvCompressEpilog: the worked examples of docs/operators/kv_compress_epilog.md byte for byte,
// every rejection, non-finite inputs, and the SIMD encoders against the scalar formats on every
// compiled target. Randomized optimized-versus-reference cases live in the shared harness
// (tests/cpp/harness/kv_compress_epilog_cases.cc).
#include "kvscatter/kv_compress_epilog.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/slots.h"
#include "core/streaming.h"
#include "kvscatter/error.h"
#include "kvscatter/formats.h"
#include "kvscatter/runtime.h"
#include "ops/kv_compress_epilog/kernel.h"
#include "quant/e2m1_buckets.h"
#include "quant/hifloat8_table.h"
#include "simd_targets.h"

namespace kvscatter {
namespace {

using Bytes = std::vector<std::uint8_t>;

std::uint16_t bf16(float f) { return formats::encode_bfloat16(f); }

Bytes hex(const std::string& s) {
  Bytes out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ' ') {
      ++i;
      continue;
    }
    out.push_back(static_cast<std::uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
    i += 2;
  }
  return out;
}

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Bytes zeros(std::size_t n) { return Bytes(n, 0); }

std::string dump(const Bytes& b) {
  std::string s;
  char buf[4];
  for (std::size_t i = 0; i < b.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%02X", b[i]);
    s += (i % 32 == 0 ? (i ? "\n" : "") : " ");
    s += buf;
  }
  return s;
}

// The input of the worked example: d = 128, nope x[k] = (k - 32) / 4, rope [1, -1, 0.5, 3,
// 1.0625, 100, -0.3, 40000, 0, ...].
std::vector<std::uint16_t> spec_row() {
  std::vector<std::uint16_t> x(128, bf16(0.0f));
  for (int k = 0; k < 64; ++k) x[k] = bf16(static_cast<float>(k - 32) / 4.0f);
  const float rope[] = {1.0f, -1.0f, 0.5f, 3.0f, 1.0625f, 100.0f, -0.3f, 40000.0f};
  for (int j = 0; j < 8; ++j) x[64 + j] = bf16(rope[j]);
  return x;
}

struct Run {
  Bytes cache;
  std::int64_t row_bytes = 0;
};

// Quantizes one row into a one-slot cache of `width` bytes prefilled with `fill`; runs the
// optimized kernel and the reference and checks they agree before returning the row.
Bytes quantize_one(std::vector<std::uint16_t> x, QuantMode mode, bool round_scale,
                   std::int64_t gs = 64, float x_scale = 1.0f, std::int64_t width = 256,
                   std::uint8_t fill = 0xCD) {
  const std::int64_t d = static_cast<std::int64_t>(x.size());
  Bytes cache(static_cast<std::size_t>(width), fill), ref = cache;
  std::int32_t slot = 0;
  TensorView tx(x.data(), DType::bfloat16, {1, d});
  TensorView ts(&slot, DType::int32, {1});
  auto plan = plan_kv_compress_epilog(TensorView(cache.data(), DType::uint8, {1, 1, 1, width}), tx,
                                      ts, gs, mode, round_scale, x_scale);
  execute(plan);
  plan.cache.data = ref.data();
  reference::execute(plan);
  EXPECT_EQ(dump(cache), dump(ref)) << "optimized and reference kernels disagree";
  for (std::int64_t i = plan.row_bytes; i < width; ++i) {
    EXPECT_EQ(cache[static_cast<std::size_t>(i)], fill) << "byte " << i << " past the row";
  }
  cache.resize(static_cast<std::size_t>(plan.row_bytes));
  return cache;
}

const Bytes kRopeBf16 = cat({hex("80 3F 80 BF 00 3F 40 40 88 3F C8 42 9A BE 1C 47"), zeros(112)});
const Bytes kFp8RoundData =
    hex("F8 F8 F7 F6 F6 F6 F5 F4 F4 F4 F3 F2 F2 F2 F1 F0 "
        "F0 EF EE ED EC EB EA E9 E8 E6 E4 E2 E0 DC D8 D0"
        "00 50 58 5C 60 62 64 66 68 69 6A 6B 6C 6D 6E 6F "
        "70 70 71 72 72 72 73 74 74 74 75 76 76 76 77 78");
const Bytes kFp8NoRoundData =
    hex("FE FE FD FD FC FC FB FB FA FA FA F9 F9 F8 F8 F7 "
        "F6 F5 F4 F3 F2 F2 F1 F0 EE EC EA E9 E6 E2 DE D6"
        "00 56 5E 62 66 69 6A 6C 6E 70 71 72 72 73 74 75 "
        "76 77 78 78 79 79 7A 7A 7A 7B 7B 7C 7C 7D 7D 7E");

TEST(KvCompressEpilogSpec, Mode1RoundScale) {
  const Bytes row = quantize_one(spec_row(), QuantMode::fp8_e8m0, true);
  EXPECT_EQ(dump(row), dump(cat({kRopeBf16, kFp8RoundData, hex("7A")})));
}

TEST(KvCompressEpilogSpec, Mode0RoundScale) {
  const Bytes row = quantize_one(spec_row(), QuantMode::fp8_bf16, true);
  EXPECT_EQ(dump(row), dump(cat({kRopeBf16, kFp8RoundData, hex("00 3D"), zeros(30)})));
}

TEST(KvCompressEpilogSpec, Mode0NoRoundScale) {
  const Bytes row = quantize_one(spec_row(), QuantMode::fp8_bf16, false);
  EXPECT_EQ(dump(row), dump(cat({kRopeBf16, kFp8NoRoundData, hex("92 3C"), zeros(30)})));
}

TEST(KvCompressEpilogSpec, Mode1NoRoundScale) {
  const Bytes row = quantize_one(spec_row(), QuantMode::fp8_e8m0, false);
  EXPECT_EQ(dump(row), dump(cat({kRopeBf16, kFp8NoRoundData, hex("79")})));
}

const Bytes kRopeHif8 = cat({hex("08 88 18 14 09 4A B2 6E"), zeros(56)});

TEST(KvCompressEpilogSpec, Mode2Group32) {
  const Bytes row = quantize_one(spec_row(), QuantMode::hifloat8_fp4, false, 32);
  EXPECT_EQ(dump(row),
            dump(cat({kRopeHif8,
                      hex("FF FF FF EE EE EE EE DD DD CD CC BC BB AA 9A 89 00 11 22 32 33 44 54 55"
                          "55 65 66 66 66 77 77 77"),
                      hex("AB 3F A5 3F"), zeros(28)})));
  // Byte 83 holds elements 38 (1.0, code 2, low nibble) and 39 (1.5, code 3, high nibble).
  EXPECT_EQ(row[83], 0x32);
  // round_scale does not apply to mode 2.
  EXPECT_EQ(dump(quantize_one(spec_row(), QuantMode::hifloat8_fp4, true, 32)), dump(row));
}

// gs = 64: the worked example quotes the scale and the run "44 44 55"; the other bytes follow
// from the rules (one group, multiplier 0.75, e2m1 round to nearest even).
TEST(KvCompressEpilogSpec, Mode2Group64) {
  const Bytes row = quantize_one(spec_row(), QuantMode::hifloat8_fp4, true, 64);
  EXPECT_EQ(dump(row),
            dump(cat({kRopeHif8,
                      hex("FF FF FF EE EE EE EE DD DD CD CC BC BB AA 9A 89 00 11 22 32 33 44 44 55"
                          "55 65 66 66 66 76 77 77"),
                      hex("AB 3F"), zeros(30)})));
}

// gs = 16: the worked example quotes the four scales; group multipliers 0.75, 1.5, bf16(1.6) and
// bf16(6 / 7.75) give the data bytes.
TEST(KvCompressEpilogSpec, Mode2Group16) {
  const Bytes row = quantize_one(spec_row(), QuantMode::hifloat8_fp4, true, 16);
  EXPECT_EQ(dump(row),
            dump(cat({kRopeHif8,
                      hex("FF FF FF EE EE EE EE DD FF EF EE DE DD CC AB 9A 10 22 43 54 65 66 76 77"
                          "55 65 66 66 66 77 77 77"),
                      hex("AB 3F 2B 3F 20 3F A5 3F"), zeros(24)})));
}

TEST(KvCompressEpilogSpec, Mode2XScaleHalf) {
  const Bytes row = quantize_one(spec_row(), QuantMode::hifloat8_fp4, true, 32, 0.5f);
  EXPECT_EQ(dump(Bytes(row.begin(), row.begin() + 64)),
            dump(cat({hex("18 98 30 0C 19 46 BA 6C"), zeros(56)})));
  // x_scale touches the rope only.
  const Bytes one = quantize_one(spec_row(), QuantMode::hifloat8_fp4, true, 32, 1.0f);
  EXPECT_EQ(dump(Bytes(row.begin() + 64, row.end())), dump(Bytes(one.begin() + 64, one.end())));
}

// The degenerate-group table (d = 128: one group of 64 in modes 0/1).
struct Degenerate {
  float value;
  int mode;
  bool round_scale;
  std::uint8_t data;
  const char* scale;
};

TEST(KvCompressEpilogSpec, DegenerateGroups) {
  const Degenerate table[] = {
      {1.0f, 0, true, 0x78, "80 3B"},  {1.0f, 1, true, 0x78, "77"},
      {1.0f, 0, false, 0x7E, "12 3B"}, {1.0f, 1, false, 0x7E, "76"},
      {0.0f, 0, true, 0x00, "80 34"},  {0.0f, 1, true, 0x00, "69"},
      {0.0f, 0, false, 0x00, "70 34"}, {0.0f, 1, false, 0x00, "68"},
  };
  for (const auto& t : table) {
    SCOPED_TRACE(testing::Message()
                 << "value " << t.value << " mode " << t.mode << " round_scale " << t.round_scale);
    const Bytes row = quantize_one(std::vector<std::uint16_t>(128, bf16(t.value)),
                                   static_cast<QuantMode>(t.mode), t.round_scale);
    EXPECT_EQ(dump(Bytes(row.begin() + 128, row.begin() + 192)), dump(Bytes(64, t.data)));
    const Bytes scale = hex(t.scale);
    EXPECT_EQ(dump(Bytes(row.begin() + 192, row.begin() + 192 + static_cast<long>(scale.size()))),
              dump(scale));
  }
  for (std::int64_t gs : {16, 32, 64}) {
    SCOPED_TRACE(testing::Message() << "mode 2 gs " << gs);
    const std::size_t groups = static_cast<std::size_t>(64 / gs);
    const Bytes ones = quantize_one(std::vector<std::uint16_t>(128, bf16(1.0f)),
                                    QuantMode::hifloat8_fp4, true, gs);
    EXPECT_EQ(dump(Bytes(ones.begin(), ones.begin() + 64)), dump(Bytes(64, 0x08)));
    EXPECT_EQ(dump(Bytes(ones.begin() + 64, ones.begin() + 96)), dump(Bytes(32, 0x77)));
    Bytes scales;
    for (std::size_t g = 0; g < groups; ++g) scales = cat({scales, hex("2B 3E")});
    EXPECT_EQ(dump(Bytes(ones.begin() + 96, ones.begin() + 96 + static_cast<long>(2 * groups))),
              dump(scales));
    const Bytes zero = quantize_one(std::vector<std::uint16_t>(128, bf16(0.0f)),
                                    QuantMode::hifloat8_fp4, true, gs);
    EXPECT_EQ(dump(zero), dump(zeros(128)));
  }
}

// Paged scatter: cache [3, 2, 1, 200] with block stride 500, prefilled 0xEE.
TEST(KvCompressEpilogSpec, PagedScatterStridedBlocks) {
  std::vector<std::uint16_t> x = spec_row();
  std::vector<std::uint16_t> x2(128);
  for (int k = 0; k < 128; ++k) x2[k] = bf16(static_cast<float>(k % 7) - 3.0f);
  x.insert(x.end(), x.begin(), x.begin() + 128);  // token 1 (skipped) repeats token 0
  x.insert(x.end(), x2.begin(), x2.end());
  const Bytes row0 = quantize_one(spec_row(), QuantMode::fp8_e8m0, true);
  const Bytes row2 = quantize_one(x2, QuantMode::fp8_e8m0, true);

  for (bool use_reference : {false, true}) {
    Bytes mem(1400, 0xEE);
    const std::int64_t shape[] = {3, 2, 1, 200}, strides[] = {500, 200, 200, 1};
    TensorView cache(mem.data(), DType::uint8, shape, strides);
    std::int64_t slots[] = {3, -1, 0};
    auto plan = plan_kv_compress_epilog(cache, TensorView(x.data(), DType::bfloat16, {3, 128}),
                                        TensorView(slots, DType::int64, {3}), 64,
                                        QuantMode::fp8_e8m0, true, 1.0f);
    EXPECT_EQ(plan.row_bytes, 193);
    if (use_reference) {
      reference::execute(plan);
    } else {
      execute(plan);
    }
    Bytes expect(1400, 0xEE);
    std::copy(row0.begin(), row0.end(), expect.begin() + 700);  // slot 3: 1 * 500 + 1 * 200
    std::copy(row2.begin(), row2.end(), expect.begin());        // slot 0
    EXPECT_EQ(dump(mem), dump(expect)) << (use_reference ? "reference" : "optimized");
  }
}

TEST(KvCompressEpilogSpec, RowLayoutTable) {
  // Row bytes (kvCacheCol) for d in {128, 256, 512, 8192}.
  struct Row {
    std::int64_t d, m0, m1, g16, g32, g64;
  } table[] = {{128, 224, 193, 128, 128, 128},
               {256, 352, 323, 192, 192, 192},
               {512, 608, 583, 352, 320, 320},
               {8192, 8512, 8383, 5152, 4640, 4384}};
  std::vector<std::uint16_t> x(8192);
  std::int32_t slot = -1;
  for (const auto& r : table) {
    TensorView tx(x.data(), DType::bfloat16, {1, r.d});
    TensorView ts(&slot, DType::int32, {1});
    TensorView cache(nullptr, DType::uint8, {0, 1, 1, 9000});
    auto rb = [&](QuantMode m, std::int64_t gs) {
      return plan_kv_compress_epilog(cache, tx, ts, gs, m, true, 1.0f).row_bytes;
    };
    EXPECT_EQ(rb(QuantMode::fp8_bf16, 64), r.m0) << r.d;
    EXPECT_EQ(rb(QuantMode::fp8_e8m0, 64), r.m1) << r.d;
    EXPECT_EQ(rb(QuantMode::hifloat8_fp4, 16), r.g16) << r.d;
    EXPECT_EQ(rb(QuantMode::hifloat8_fp4, 32), r.g32) << r.d;
    EXPECT_EQ(rb(QuantMode::hifloat8_fp4, 64), r.g64) << r.d;
  }
}

// 64-bit offsets: the second block of this cache starts past 4 GiB. Only two pages of the
// reserved range are touched.
TEST(KvCompressEpilogSpec, OffsetsPast4GiB) {
  const std::int64_t block_stride = (std::int64_t{1} << 32) + 4096;
  const std::size_t bytes = static_cast<std::size_t>(2 * block_stride);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) GTEST_SKIP() << "cannot reserve 8 GiB of address space";
  auto* base = static_cast<std::uint8_t*>(mem);
  const std::int64_t shape[] = {2, 4, 1, 256}, strides[] = {block_stride, 256, 256, 1};
  std::vector<std::uint16_t> x = spec_row();
  std::int64_t slot = 6;  // block 1, row 2
  const Bytes want = quantize_one(spec_row(), QuantMode::fp8_e8m0, true);
  for (bool use_reference : {false, true}) {
    auto plan = plan_kv_compress_epilog(TensorView(base, DType::uint8, shape, strides),
                                        TensorView(x.data(), DType::bfloat16, {1, 128}),
                                        TensorView(&slot, DType::int64, {1}), 64,
                                        QuantMode::fp8_e8m0, true, 1.0f);
    std::uint8_t* row = base + block_stride + 2 * 256;
    std::memset(row, 0xAB, 256);
    if (use_reference) {
      reference::execute(plan);
    } else {
      execute(plan);
    }
    EXPECT_EQ(dump(Bytes(row, row + 193)), dump(want));
    EXPECT_EQ(row[193], 0xAB);
  }
  munmap(mem, bytes);
}

// ---- quant_mode strings ---------------------------------------------------------------------

TEST(KvCompressEpilogApi, ParseQuantMode) {
  EXPECT_EQ(parse_quant_mode("fp8_bf16"), QuantMode::fp8_bf16);
  EXPECT_EQ(parse_quant_mode("  FP8_E8M0\t"), QuantMode::fp8_e8m0);
  EXPECT_EQ(parse_quant_mode("HiFloat8_FP4"), QuantMode::hifloat8_fp4);
  EXPECT_EQ(parse_quant_mode("0"), QuantMode::fp8_bf16);
  EXPECT_EQ(parse_quant_mode("1"), QuantMode::fp8_e8m0);
  EXPECT_EQ(parse_quant_mode(" 2 "), QuantMode::hifloat8_fp4);
  for (const char* bad : {"", "fp8", "3", "fp8 e8m0", "-1", "mxfp4"}) {
    try {
      parse_quant_mode(bad);
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::invalid_parameter);
      EXPECT_NE(std::string(e.what()).find("quant_mode"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + bad + "\""), std::string::npos)
          << e.what();
    }
  }
}

TEST(KvCompressEpilogApi, QuantGroupSizeIgnoredInFp8Modes) {
  // Modes 0/1 always use groups of 64 and do not validate quant_group_size.
  for (std::int64_t gs : {0, 8, 128, -5}) {
    EXPECT_EQ(dump(quantize_one(spec_row(), QuantMode::fp8_e8m0, true, gs)),
              dump(quantize_one(spec_row(), QuantMode::fp8_e8m0, true, 64)));
  }
}

// ---- rejections -----------------------------------------------------------------------------

struct Inputs {
  std::int64_t num_blocks = 2, block_size = 3, width = 256, d = 128, tokens = 4;
  std::vector<std::uint8_t> cache;
  std::vector<std::uint16_t> x;
  std::vector<std::int64_t> slots;
  Inputs() {
    cache.resize(static_cast<std::size_t>(num_blocks * block_size * width));
    for (std::size_t i = 0; i < cache.size(); ++i) cache[i] = static_cast<std::uint8_t>(i * 7 + 3);
    x.resize(static_cast<std::size_t>(tokens * d));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = bf16(static_cast<float>(i % 13) - 6.0f);
    slots = {0, 5, -1, 2};
  }
  TensorView tcache() {
    return TensorView(cache.data(), DType::uint8, {num_blocks, block_size, 1, width});
  }
  TensorView tx() { return TensorView(x.data(), DType::bfloat16, {tokens, d}); }
  TensorView tslots() { return TensorView(slots.data(), DType::int64, {tokens}); }
};

template <class F>
void expect_error(F&& f, Status status, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const auto& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message lacks \"" << n << "\": " << e.what();
    }
  }
}

// Runs `call` on a fresh setup, expects the error, and checks the cache is bit-identical.
template <class Mutate>
void expect_rejected(Mutate mutate, Status status, std::initializer_list<std::string> needles,
                     QuantMode mode = QuantMode::fp8_e8m0, std::int64_t gs = 64) {
  Inputs s;
  const Bytes before = s.cache;
  TensorView cache = s.tcache(), x = s.tx(), slots = s.tslots();
  mutate(s, cache, x, slots);
  expect_error([&] { kv_compress_epilog(cache, x, slots, gs, mode, true, 1.0f); }, status, needles);
  EXPECT_TRUE(s.cache == before) << "cache modified by a failing call";
}

TEST(KvCompressEpilogErrors, NullPointers) {
  expect_rejected([](Inputs&, TensorView& c, TensorView&, TensorView&) { c.data = nullptr; },
                  Status::null_pointer, {"cache"});
  expect_rejected([](Inputs&, TensorView&, TensorView& x, TensorView&) { x.data = nullptr; },
                  Status::null_pointer, {"x"});
  expect_rejected([](Inputs&, TensorView&, TensorView&, TensorView& s) { s.data = nullptr; },
                  Status::null_pointer, {"slot_mapping"});
}

TEST(KvCompressEpilogErrors, Modes) {
  expect_rejected([](Inputs&, TensorView&, TensorView&, TensorView&) {}, Status::invalid_parameter,
                  {"quant_mode", "3"}, static_cast<QuantMode>(3));
  for (std::int64_t gs : {0, 8, 48, 128}) {
    expect_rejected([](Inputs&, TensorView&, TensorView&, TensorView&) {},
                    Status::invalid_parameter, {"quant_group_size", std::to_string(gs)},
                    QuantMode::hifloat8_fp4, gs);
  }
}

TEST(KvCompressEpilogErrors, Dtypes) {
  expect_rejected([](Inputs&, TensorView& c, TensorView&, TensorView&) { c.dtype = DType::int8; },
                  Status::invalid_parameter, {"cache", "int8", "uint8"});
  expect_rejected(
      [](Inputs&, TensorView&, TensorView& x, TensorView&) { x.dtype = DType::float16; },
      Status::invalid_parameter, {"x", "float16", "bfloat16"});
  expect_rejected([](Inputs&, TensorView&, TensorView&, TensorView& s) { s.dtype = DType::uint32; },
                  Status::invalid_parameter, {"slot_mapping", "uint32"});
}

TEST(KvCompressEpilogErrors, Shapes) {
  // x must be at least 2-D.
  expect_rejected(
      [](Inputs& s, TensorView&, TensorView& x, TensorView& sl) {
        x = TensorView(s.x.data(), DType::bfloat16, {128});
        sl = TensorView(s.slots.data(), DType::int64, std::span<const std::int64_t>{});
      },
      Status::invalid_parameter, {"x", "1-D"});
  // slot rank and dims must follow x.
  expect_rejected(
      [](Inputs& s, TensorView&, TensorView&, TensorView& sl) {
        sl = TensorView(s.slots.data(), DType::int64, {2, 2});
      },
      Status::invalid_parameter, {"slot_mapping", "2-D"});
  expect_rejected([](Inputs& s, TensorView&, TensorView&,
                     TensorView& sl) { sl = TensorView(s.slots.data(), DType::int64, {3}); },
                  Status::invalid_parameter, {"slot_mapping.shape[0]", "3", "4"});
  // d rules.
  for (std::int64_t d : {64, 100, 8256}) {
    expect_rejected(
        [d](Inputs& s, TensorView&, TensorView& x, TensorView& sl) {
          s.x.resize(static_cast<std::size_t>(d));
          x = TensorView(s.x.data(), DType::bfloat16, {1, d});
          sl = TensorView(s.slots.data(), DType::int64, {1});
        },
        Status::invalid_parameter, {"d = " + std::to_string(d)});
  }
  // cache: 4-D, dim 2 == 1, wide enough.
  expect_rejected(
      [](Inputs& s, TensorView& c, TensorView&, TensorView&) {
        c = TensorView(s.cache.data(), DType::uint8, {6, 1, 256});
      },
      Status::invalid_parameter, {"cache", "4-D", "3-D"});
  expect_rejected(
      [](Inputs& s, TensorView& c, TensorView&, TensorView&) {
        c = TensorView(s.cache.data(), DType::uint8, {2, 3, 2, 128});
      },
      Status::invalid_parameter, {"cache.shape[2]", "1", "2"});
  expect_rejected(
      [](Inputs& s, TensorView& c, TensorView&, TensorView&) {
        c = TensorView(s.cache.data(), DType::uint8, {2, 3, 1, 192});
      },
      Status::invalid_parameter, {"cache.shape[3]", "193", "192"});
  expect_rejected(
      [](Inputs& s, TensorView& c, TensorView&, TensorView&) {
        c = TensorView(s.cache.data(), DType::uint8, {2, 3, 1, 200});
      },
      Status::invalid_parameter, {"cache.shape[3]", "224", "200"}, QuantMode::fp8_bf16);
}

TEST(KvCompressEpilogErrors, Layouts) {
  // Rows must be contiguous byte runs.
  expect_rejected(
      [](Inputs& s, TensorView& c, TensorView&, TensorView&) {
        const std::int64_t shape[] = {1, 2, 1, 200}, strides[] = {800, 400, 400, 2};
        c = TensorView(s.cache.data(), DType::uint8, shape, strides);
      },
      Status::invalid_parameter, {"cache", "strides[3]", "2"});
  // Blocks that overlap each other would make rows alias.
  expect_rejected(
      [](Inputs& s, TensorView& c, TensorView&, TensorView&) {
        const std::int64_t shape[] = {2, 3, 1, 200}, strides[] = {400, 200, 200, 1};
        c = TensorView(s.cache.data(), DType::uint8, shape, strides);
      },
      Status::invalid_parameter, {"cache", "overlap"});
  expect_rejected(
      [](Inputs& s, TensorView&, TensorView& x, TensorView&) {
        const std::int64_t shape[] = {4, 64}, strides[] = {128, 2};
        x = TensorView(s.x.data(), DType::bfloat16, shape, strides);
      },
      Status::invalid_parameter, {"d = 64"});
  expect_rejected(
      [](Inputs& s, TensorView&, TensorView& x, TensorView& sl) {
        const std::int64_t shape[] = {2, 128}, strides[] = {256, 2};
        x = TensorView(s.x.data(), DType::bfloat16, shape, strides);
        sl = TensorView(s.slots.data(), DType::int64, {2});
      },
      Status::invalid_parameter, {"x", "last axis", "stride 2"});
  expect_rejected(
      [](Inputs& s, TensorView&, TensorView&, TensorView& sl) {
        const std::int64_t shape[] = {4}, strides[] = {-1};
        sl = TensorView(s.slots.data() + 3, DType::int64, shape, strides);
      },
      Status::invalid_parameter, {"slot_mapping", "strides[0]", "-1"});
}

TEST(KvCompressEpilogErrors, SlotValues) {
  // num_slots = 6: 6 is past the end, -2 is negative but not the skip marker.
  expect_rejected([](Inputs& s, TensorView&, TensorView&, TensorView&) { s.slots[3] = 6; },
                  Status::invalid_parameter,
                  {"slot_mapping[3] = 6", "[0, 6)", "2 blocks of 3 slots"});
  expect_rejected([](Inputs& s, TensorView&, TensorView&, TensorView&) { s.slots[1] = -2; },
                  Status::invalid_parameter, {"slot_mapping[1] = -2", "-1"});
  expect_rejected(
      [](Inputs& s, TensorView&, TensorView& x, TensorView& sl) {
        s.slots[3] = std::numeric_limits<std::int64_t>::min();
        x = TensorView(s.x.data(), DType::bfloat16, {2, 2, 128});
        sl = TensorView(s.slots.data(), DType::int64, {2, 2});
      },
      Status::invalid_parameter, {"slot_mapping[1, 1] = -9223372036854775808"});
  // int32 slots are read at their width.
  expect_rejected(
      [](Inputs& s, TensorView&, TensorView&, TensorView& sl) {
        static std::int32_t s32[4];
        s32[0] = 0;
        s32[1] = 1;
        s32[2] = 2;
        s32[3] = 1 << 30;
        sl = TensorView(s32, DType::int32, {4});
        (void)s;
      },
      Status::invalid_parameter, {"slot_mapping[3] = 1073741824"});
  // The reference oracle checks all slots before writing too.
  Inputs s;
  s.slots[3] = 100;
  const Bytes before = s.cache;
  auto plan =
      plan_kv_compress_epilog(s.tcache(), s.tx(), s.tslots(), 64, QuantMode::fp8_bf16, true, 1.0f);
  expect_error([&] { reference::execute(plan); }, Status::invalid_parameter,
               {"slot_mapping[3] = 100"});
  EXPECT_TRUE(s.cache == before);
}

TEST(KvCompressEpilogApi, EmptyAndAllSkipped) {
  Inputs s;
  const Bytes before = s.cache;
  // Zero tokens: a successful no-op, even with null data.
  kv_compress_epilog(s.tcache(), TensorView(nullptr, DType::bfloat16, {0, 128}),
                     TensorView(nullptr, DType::int32, {0}), 64, QuantMode::fp8_e8m0, true, 1.0f);
  kv_compress_epilog(s.tcache(), TensorView(nullptr, DType::bfloat16, {3, 0, 128}),
                     TensorView(nullptr, DType::int32, {3, 0}), 64, QuantMode::fp8_e8m0, true,
                     1.0f);
  // All tokens skipped.
  std::fill(s.slots.begin(), s.slots.end(), -1);
  kv_compress_epilog(s.tcache(), s.tx(), s.tslots(), 64, QuantMode::fp8_e8m0, true, 1.0f);
  EXPECT_TRUE(s.cache == before);
}

// ---- non-finite and special inputs ----------------------------------------------------------

std::vector<std::uint16_t> row_with(std::initializer_list<std::pair<int, std::uint16_t>> at,
                                    float fill = 1.0f, std::int64_t d = 128) {
  std::vector<std::uint16_t> x(static_cast<std::size_t>(d), bf16(fill));
  for (auto [i, v] : at) x[static_cast<std::size_t>(i)] = v;
  return x;
}

TEST(KvCompressEpilogSpecial, NaNPoisonsItsGroupInFp8Modes) {
  const std::uint16_t nan = 0x7FC1, neg_nan = 0xFFC0;
  for (bool rs : {true, false}) {
    // d = 192: two groups; the NaN sits in group 1 only.
    auto x = row_with({{70, nan}, {71, neg_nan}}, 1.0f, 192);
    const Bytes m0 = quantize_one(x, QuantMode::fp8_bf16, rs, 64, 1.0f, 512);
    const Bytes m1 = quantize_one(x, QuantMode::fp8_e8m0, rs, 64, 1.0f, 512);
    // group 0 is normal, group 1 is all 0x7F with a canonical NaN scale.
    EXPECT_EQ(dump(Bytes(m0.begin() + 128, m0.begin() + 192)), dump(Bytes(64, rs ? 0x78 : 0x7E)));
    EXPECT_EQ(dump(Bytes(m0.begin() + 192, m0.begin() + 256)), dump(Bytes(64, 0x7F)));
    EXPECT_EQ(m0[256 + 2], 0xC0);
    EXPECT_EQ(m0[256 + 3], 0x7F);
    EXPECT_EQ(dump(Bytes(m1.begin() + 192, m1.begin() + 256)), dump(Bytes(64, 0x7F)));
    EXPECT_EQ(m1[256 + 1], 0xFF);
    // A NaN in the rope is copied as raw bf16 bits.
    auto xr = row_with({{128 + 3, nan}}, 1.0f, 192);
    const Bytes r = quantize_one(xr, QuantMode::fp8_e8m0, rs, 64, 1.0f, 512);
    EXPECT_EQ(r[6], 0xC1);
    EXPECT_EQ(r[7], 0x7F);
  }
}

TEST(KvCompressEpilogSpecial, InfinityInFp8Modes) {
  const std::uint16_t inf = 0x7F80, ninf = 0xFF80;
  for (bool rs : {true, false}) {
    auto x = row_with({{0, inf}, {1, ninf}, {2, bf16(-2.0f)}}, 1.0f);
    const Bytes m0 = quantize_one(x, QuantMode::fp8_bf16, rs);
    const Bytes m1 = quantize_one(x, QuantMode::fp8_e8m0, rs);
    // The scale is +inf; finite values divide to +-0, the infinities to NaN (0x7F).
    EXPECT_EQ(m0[128], 0x7F);
    EXPECT_EQ(m0[129], 0x7F);
    EXPECT_EQ(m0[130], 0x80);
    EXPECT_EQ(m0[131], 0x00);
    EXPECT_EQ(m0[192], 0x80);
    EXPECT_EQ(m0[193], 0x7F);
    EXPECT_EQ(m1[192], 0xFF);
  }
}

TEST(KvCompressEpilogSpecial, SubnormalsAndNegativeZeroInFp8Modes) {
  // bf16 subnormals are exact inputs (no flush): amax 2^-130 is below the 1e-4 floor, so the
  // scale is the floor's and every quotient underflows to +-0 keeping its sign.
  auto x = row_with({{0, 0x0002}, {1, 0x8001}, {2, 0x8000}}, 0.0f);
  const Bytes m1 = quantize_one(x, QuantMode::fp8_e8m0, true);
  EXPECT_EQ(m1[128], 0x00);
  EXPECT_EQ(m1[129], 0x80);
  EXPECT_EQ(m1[130], 0x80);
  EXPECT_EQ(m1[131], 0x00);
  EXPECT_EQ(m1[192], 0x69);
  // Values that land in e4m3's subnormal range keep their rounding: amax 448 -> s = 1 and
  // 1.5 * 2^-9 -> code 0x02, 0.75 * 2^-9 -> 0x01 (float8_e4m3fn subnormals).
  auto y =
      row_with({{0, bf16(448.0f)}, {1, bf16(0.0029296875f)}, {2, bf16(-0.00146484375f)}}, 0.0f);
  const Bytes r = quantize_one(y, QuantMode::fp8_e8m0, true);
  EXPECT_EQ(r[128], 0x7E);
  EXPECT_EQ(r[129], 0x02);
  EXPECT_EQ(r[130], 0x81);
  EXPECT_EQ(r[192], 0x7F);
}

TEST(KvCompressEpilogSpecial, NonFiniteInMode2) {
  const std::uint16_t nan = 0x7FC0, inf = 0x7F80;
  // NaN in a group: zero codes and a NaN scale; other groups unaffected.
  auto x = row_with({{20, nan}}, 1.0f);
  const Bytes r = quantize_one(x, QuantMode::hifloat8_fp4, true, 16);
  EXPECT_EQ(dump(Bytes(r.begin() + 64, r.begin() + 72)), dump(Bytes(8, 0x77)));
  EXPECT_EQ(dump(Bytes(r.begin() + 72, r.begin() + 80)), dump(Bytes(8, 0x00)));
  EXPECT_EQ(dump(Bytes(r.begin() + 96, r.begin() + 104)), dump(hex("2B 3E C0 7F 2B 3E 2B 3E")));
  // Infinity: scale +inf, multiplier 0: finite values give +-0, the infinity NaN -> 0.
  auto y = row_with({{0, inf}, {1, bf16(-1.0f)}}, 1.0f);
  const Bytes s = quantize_one(y, QuantMode::hifloat8_fp4, true, 64);
  EXPECT_EQ(s[64], 0x80);  // element 0 -> 0x0 (NaN), element 1 -> 0x8 (-0)
  EXPECT_EQ(s[65], 0x00);
  EXPECT_EQ(s[96], 0x80);
  EXPECT_EQ(s[97], 0x7F);
  // Rope: NaN -> 0x00, +-inf -> +-max, -0 -> 0x00, x_scale applied before the cast.
  auto z = row_with({{64, nan}, {65, inf}, {66, 0xFF80}, {67, 0x8000}, {68, bf16(40000.0f)}}, 1.0f);
  const Bytes t = quantize_one(z, QuantMode::hifloat8_fp4, true, 64, 2.0f);
  EXPECT_EQ(dump(Bytes(t.begin(), t.begin() + 6)), dump(hex("00 6E EE 00 6E 10")));
  // A subnormal amax makes 6 / amax overflow: nonzero values saturate to +-6, zeros stay 0.
  auto w = row_with({{0, 0x0001}, {1, 0x8001}}, 0.0f);
  const Bytes u = quantize_one(w, QuantMode::hifloat8_fp4, true, 64);
  EXPECT_EQ(u[64], 0xF7);
  EXPECT_EQ(u[65], 0x00);
}

// ---- SIMD encoders against the scalar formats, on every compiled target ----------------------

// Every compiled target this CPU runs, so the SSE4 and fallback paths are tested too.
std::vector<std::int64_t> targets() { return kvscatter::simd_test::simd_targets(); }

TEST(KvCompressEpilogSimd, TargetsCovered) {
  std::string names;
  for (std::int64_t t : targets()) names += std::string(simd_test::target_name(t)) + " ";
  std::printf("SIMD targets exercised: %s\n", names.c_str());
  // x86 always runs the portable fallback besides its best target. An aarch64 CPU without SVE
  // runs NEON only: NEON is the Arm fallback, and no scalar kernel is compiled there.
#if HWY_ARCH_X86
  EXPECT_GE(targets().size(), 2u);
#else
  EXPECT_GE(targets().size(), 1u);
#endif
}

// Every sign/exponent/top-11-mantissa pattern with low bits chosen to hit ties and near-ties.
std::vector<float> dense_floats() {
  std::vector<float> v;
  const std::uint32_t lows[] = {0x000, 0x001, 0x7FF, 0x800, 0x801, 0xFFF};
  v.reserve((1u << 20) * 6);
  for (std::uint32_t hi = 0; hi < (1u << 20); ++hi) {
    for (std::uint32_t lo : lows) {
      const std::uint32_t b = hi << 12 | lo;
      float f;
      std::memcpy(&f, &b, 4);
      v.push_back(f);
    }
  }
  return v;
}

std::uint8_t scalar_e4m3(float q) {
  return std::isnan(q) ? 0x7F
                       : formats::encode_float8_e4m3fn(std::min(std::max(q, -448.0f), 448.0f));
}
std::uint8_t scalar_e2m1(float p) {
  const float xq = formats::decode_bfloat16(formats::encode_bfloat16(p));
  return std::isnan(xq) ? 0 : formats::encode_float4_e2m1(std::min(std::max(xq, -6.0f), 6.0f));
}

void sweep_encoders(const std::vector<float>& in, bool all_targets = true) {
  Bytes out(in.size());
  std::vector<std::int64_t> ts = targets();
  if (!all_targets) ts.resize(1);
  for (std::int64_t target : ts) {
    const simd_test::PinTarget pin(target);
    SCOPED_TRACE(simd_test::target_name(target));
    struct Case {
      const char* name;
      void (*simd)(const float*, std::uint8_t*, std::size_t);
      std::uint8_t (*scalar)(float);
      bool skip_nan;  // the fast variants leave NaN inputs unspecified
    } cases[] = {
        {"e4m3",
         [](const float* i, std::uint8_t* o, std::size_t n) {
           detail::simd_encode_e4m3_clamped(i, o, n, false);
         },
         scalar_e4m3, false},
        {"e4m3 finite",
         [](const float* i, std::uint8_t* o, std::size_t n) {
           detail::simd_encode_e4m3_clamped(i, o, n, true);
         },
         scalar_e4m3, true},
        {"e2m1",
         [](const float* i, std::uint8_t* o, std::size_t n) {
           detail::simd_encode_e2m1_from_product(i, o, n, false);
         },
         scalar_e2m1, false},
        {"e2m1 finite",
         [](const float* i, std::uint8_t* o, std::size_t n) {
           detail::simd_encode_e2m1_from_product(i, o, n, true);
         },
         scalar_e2m1, true},
        {"hif8", detail::simd_encode_hifloat8_sat,
         [](float x) { return formats::encode_hifloat8(x, true); }, false},
    };
    for (const auto& c : cases) {
      c.simd(in.data(), out.data(), in.size());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < in.size(); ++i) {
        if (c.skip_nan && std::isnan(in[i])) continue;
        const std::uint8_t want = c.scalar(in[i]);
        if (out[i] != want && bad++ < 5) {
          std::uint32_t b;
          std::memcpy(&b, &in[i], 4);
          ADD_FAILURE() << c.name << " input 0x" << std::hex << b << " simd 0x" << int(out[i])
                        << " scalar 0x" << int(want);
        }
      }
      EXPECT_EQ(bad, 0u) << c.name;
    }
  }
}

// Signed zeros among normal values, on every target: the codes of a group with power-of-two
// scales come from its bf16 bits with the sign in place, a form that is exact for magnitudes in
// e4m3's normal range only, so a group holding a zero must be sent to the form that keeps the
// sign of -0 (0x80) and the code of +0 (0x00).
TEST(KvCompressEpilogSimd, SignedZerosInGroupsOfNormalValues) {
  for (std::int64_t target : targets()) {
    const simd_test::PinTarget pin(target);
    SCOPED_TRACE(simd_test::target_name(target));
    for (QuantMode mode : {QuantMode::fp8_bf16, QuantMode::fp8_e8m0}) {
      // d = 320: four groups. Group 0 holds -0 and +0 at either end and inside; group 1 is all
      // -0; group 2 all +0 but one -2; group 3 has no zero.
      std::vector<std::uint16_t> x(320, bf16(1.5f));
      for (int k = 0; k < 64; ++k)
        x[static_cast<std::size_t>(k)] = bf16((k % 2 ? -1.0f : 1.0f) * static_cast<float>(k + 1));
      for (int k : {0, 17, 62}) x[static_cast<std::size_t>(k)] = 0x8000;
      for (int k : {1, 33, 63}) x[static_cast<std::size_t>(k)] = 0x0000;
      for (int k = 64; k < 128; ++k) x[static_cast<std::size_t>(k)] = 0x8000;
      for (int k = 128; k < 192; ++k) x[static_cast<std::size_t>(k)] = 0x0000;
      x[150] = bf16(-2.0f);
      const Bytes r = quantize_one(x, mode, true, 64, 1.0f, 1024);
      for (int k : {0, 17, 62}) EXPECT_EQ(r[static_cast<std::size_t>(128 + k)], 0x80) << k;
      for (int k : {1, 33, 63}) EXPECT_EQ(r[static_cast<std::size_t>(128 + k)], 0x00) << k;
      for (int k = 64; k < 128; ++k) EXPECT_EQ(r[static_cast<std::size_t>(128 + k)], 0x80) << k;
      // -2 / 2^ceil(log2(2 / 448)) = -2 * 128 = -256: e4m3 0xF8.
      for (int k = 128; k < 192; ++k) {
        EXPECT_EQ(r[static_cast<std::size_t>(128 + k)], k == 150 ? 0xF8 : 0x00) << k;
      }
    }
  }
}

// Calls past the streaming threshold build each row in a buffer and stream the whole cache
// lines of runs of rows that follow each other in the cache, 2 KiB at a time. With the threshold
// at 0: runs that start and end mid-line, a run broken by a skipped token, a slot written twice
// within one batch and again in a later one, twice in a row, rows written in descending order
// (a partial line shared by two runs), the last slot of a block, a run over six blocks up to the
// cache's last slot (many bursts, the call ending in the middle of one), rows apart (a row pitch
// wider than the row, whose tail stays untouched), and x rows apart (read, and prefetched, through
// the view's strides), for every mode on every target.
TEST(KvCompressEpilogSimd, StreamedRowsMatchReference) {
  const std::int64_t saved = detail::set_stream_threshold(0);
  const std::int64_t d = 576, bs = 8, nb = 12;
  std::vector<std::int32_t> slots = {16, 17, 18, 19, 20, 21, -1, 22, 23, 24, 25, 30, 25, 39, 0,
                                     1,  2,  3,  4,  5,  6,  7,  25, 12, 11, 10, 10, 32, 33};
  for (std::int32_t s = 43; s < 96; ++s) slots.push_back(s);
  const std::int64_t t = static_cast<std::int64_t>(slots.size());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(t * (d + 8)));
  for (auto& v : x) v = bf16(normal(rng));
  struct Mode {
    QuantMode mode;
    std::int64_t group;
  };
  for (std::int64_t target : targets()) {
    const simd_test::PinTarget pin(target);
    for (const Mode m : {Mode{QuantMode::fp8_bf16, 64}, Mode{QuantMode::fp8_e8m0, 64},
                         Mode{QuantMode::hifloat8_fp4, 32}, Mode{QuantMode::hifloat8_fp4, 16}}) {
      for (std::int64_t extra : {0, 3}) {
        SCOPED_TRACE(std::string(simd_test::target_name(target)) + " mode " +
                     std::to_string(static_cast<int>(m.mode)) + " group " +
                     std::to_string(m.group) + " pitch +" + std::to_string(extra));
        // x rows apart where the cache rows are too.
        const std::int64_t x_shape[] = {t, d}, x_strides[] = {extra == 0 ? d : d + 8, 1};
        TensorView tx(x.data(), DType::bfloat16, x_shape, x_strides);
        TensorView ts(slots.data(), DType::int32, {t});
        std::int32_t none = 0;
        const std::int64_t row =
            plan_kv_compress_epilog(TensorView(nullptr, DType::uint8, {0, bs, 1, 1 << 14}),
                                    TensorView(x.data(), DType::bfloat16, {0, d}),
                                    TensorView(&none, DType::int32, {0}), m.group, m.mode, true,
                                    1.0f)
                .row_bytes;
        const std::int64_t width = row + extra;
        Bytes cache(static_cast<std::size_t>(nb * bs * width), 0xCD), ref = cache;
        auto plan =
            plan_kv_compress_epilog(TensorView(cache.data(), DType::uint8, {nb, bs, 1, width}), tx,
                                    ts, m.group, m.mode, true, 1.0f);
        execute(plan);
        plan.cache.data = ref.data();
        reference::execute(plan);
        EXPECT_EQ(dump(cache), dump(ref));
      }
    }
  }
  detail::set_stream_threshold(saved);
}

// Calls of many grains with many repeated slots, cached and streamed: on one thread the rows go
// through in token order with every repeat left in (the earlier writers are dropped only for a
// split call), and every thread count ends with the reference's cache, the last writer of each
// slot, for every mode.
TEST(KvCompressEpilogSimd, LargeCallsWithRepeatedSlotsMatchReference) {
  const std::int64_t d = 576, bs = 8, nb = 8, t = 1500;  // about ten grains of rows
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(t * d));
  for (auto& v : x) v = bf16(normal(rng));
  std::vector<std::int64_t> slots(static_cast<std::size_t>(t));
  for (auto& s : slots) {  // 6 in 70 skip (-1), the rest on 64 slots
    const auto r = static_cast<std::int64_t>(rng() % (nb * bs + 6));
    s = r < 6 ? -1 : r - 6;
  }
  const int threads = get_num_threads();
  for (std::int64_t threshold : {std::int64_t{0}, detail::stream_threshold_bytes().load()}) {
    const std::int64_t saved = detail::set_stream_threshold(threshold);
    for (const auto& mode_group : {std::pair{QuantMode::fp8_bf16, std::int64_t{64}},
                                   std::pair{QuantMode::fp8_e8m0, std::int64_t{64}},
                                   std::pair{QuantMode::hifloat8_fp4, std::int64_t{32}}}) {
      const QuantMode mode = mode_group.first;
      const std::int64_t group = mode_group.second;
      const auto plan_for = [&](Bytes& cache, std::int64_t width) {
        return plan_kv_compress_epilog(TensorView(cache.data(), DType::uint8, {nb, bs, 1, width}),
                                       TensorView(x.data(), DType::bfloat16, {t, d}),
                                       TensorView(slots.data(), DType::int64, {t}), group, mode,
                                       true, 1.0f);
      };
      Bytes probe(1);
      const std::int64_t width = plan_for(probe, 1 << 12).row_bytes;
      Bytes ref(static_cast<std::size_t>(nb * bs * width), 0xCD);
      reference::execute(plan_for(ref, width));
      for (int n : {1, 2, 3}) {
        SCOPED_TRACE("mode " + std::to_string(static_cast<int>(mode)) + ", " + std::to_string(n) +
                     " threads, streaming threshold " + std::to_string(threshold));
        set_num_threads(n);
        Bytes cache(ref.size(), 0xCD);
        execute(plan_for(cache, width));
        EXPECT_EQ(dump(cache), dump(ref));
      }
    }
    detail::set_stream_threshold(saved);
  }
  set_num_threads(threads);
}

TEST(KvCompressEpilogSimd, EncodersMatchScalarDense) { sweep_encoders(dense_floats()); }

TEST(KvCompressEpilogSimd, EncodersMatchScalarExhaustive) {
  std::vector<float> chunk(1u << 24);
  for (std::uint64_t base = 0; base < (1ull << 32); base += chunk.size()) {
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      const std::uint32_t b = static_cast<std::uint32_t>(base + i);
      std::memcpy(&chunk[i], &b, 4);
    }
    sweep_encoders(chunk, /*all_targets=*/false);
  }
}

// The AVX-512 HiFloat8 path of the rope (x_scale 1) on every bfloat16, NaNs (code 0x00)
// included.
TEST(KvCompressEpilogSimd, HiFloat8FromBf16Exhaustive) {
  std::vector<std::uint16_t> x(0x10000);
  for (std::uint32_t b = 0; b < 0x10000; ++b) x[b] = static_cast<std::uint16_t>(b);
  Bytes out(x.size());
  int ran = 0;
  for (std::int64_t target : targets()) {
    const simd_test::PinTarget pin(target);
    SCOPED_TRACE(simd_test::target_name(target));
    std::fill(out.begin(), out.end(), std::uint8_t{0xA5});
    if (!detail::simd_encode_hifloat8_bf16(x.data(), out.data(), x.size())) continue;
    ++ran;
    std::size_t bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::uint8_t want = formats::encode_hifloat8(formats::decode_bfloat16(x[i]), true);
      if (out[i] != want && bad++ < 5) {
        ADD_FAILURE() << "bf16 0x" << std::hex << x[i] << " simd 0x" << int(out[i]) << " scalar 0x"
                      << int(want);
      }
    }
    EXPECT_EQ(bad, 0u);
  }
  std::printf("targets with the bfloat16 HiFloat8 path: %d\n", ran);
}

// Mode hifloat8_fp4 (round_scale) over x (rows of d bfloat16, row r into slot r, row_bytes
// per cache row) on every SIMD target against the reference: "" when all agree, else the first
// target that differs and where.
std::string hif8_fp4_first_difference(std::vector<std::uint16_t>& x, std::int64_t d,
                                      std::int64_t row_bytes, std::int64_t gs, float x_scale) {
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / d;
  std::vector<std::int32_t> slots(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    slots[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(r);
  }
  const auto go = [&](bool ref) {
    Bytes cache(static_cast<std::size_t>(rows * row_bytes), 0xCD);
    auto plan =
        plan_kv_compress_epilog(TensorView(cache.data(), DType::uint8, {rows, 1, 1, row_bytes}),
                                TensorView(x.data(), DType::bfloat16, {rows, d}),
                                TensorView(slots.data(), DType::int32, {rows}), gs,
                                QuantMode::hifloat8_fp4, true, x_scale);
    if (ref) {
      reference::execute(plan);
    } else {
      execute(plan);
    }
    return cache;
  };
  const Bytes want = go(true);
  for (std::int64_t target : targets()) {
    const simd_test::PinTarget pin(target);
    const Bytes got = go(false);
    const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
    if (diff.first != got.end()) {
      std::ostringstream m;
      m << simd_test::target_name(target) << ": byte " << (diff.first - got.begin()) << " is 0x"
        << std::hex << int(*diff.first) << ", the reference's 0x" << int(*diff.second);
      return m.str();
    }
  }
  return "";
}

// The rope of mode hifloat8_fp4 through the operator: every bfloat16 bit pattern in the rope
// times scales that keep the products in range, push them into HiFloat8's denormals, below its
// smallest code, to saturation and to infinity, or make them all NaN; every target against the
// reference.
TEST(KvCompressEpilogSimd, HiFloat8RopeScaledMatchesReference) {
  constexpr std::int64_t kD = 128, kRows = 0x10000 / 64;
  std::vector<std::uint16_t> x(static_cast<std::size_t>(kRows * kD));
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t k = 0; k < 64; ++k) {
      x[static_cast<std::size_t>(r * kD + k)] = bf16(static_cast<float>(k - 32) / 8.0f);
      x[static_cast<std::size_t>(r * kD + 64 + k)] = static_cast<std::uint16_t>(r * 64 + k);
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float scales[] = {1.0f,      0.75f,   1.0f / 3.0f, 0x1p-3f, -0x1p-20f, 0x1p-40f,
                          0x1p-126f, 0x1p20f, 3e38f,       0.0f,    inf,       nan};
  for (const float x_scale : scales) {
    EXPECT_EQ(hif8_fp4_first_difference(x, kD, 256, 64, x_scale), "") << "x_scale " << x_scale;
  }
}

// The FP4 paths by bucket tables (AVX-512: 16-bit entries; SSE4 and AVX2: byte entries, on AVX2
// one byte per value for groups of 64 and on 16-bit lanes for groups of 16), in their clamped
// forms: every finite bfloat16 times multipliers with every mantissa and exponents across the
// range, including those the tables refuse (near the top, where the thresholds would leave the
// normal range).
TEST(KvCompressEpilogSimd, E2M1ByBucketsExhaustive) {
  std::vector<std::uint16_t> x;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7FFF) < 0x7F80) x.push_back(static_cast<std::uint16_t>(b));
  }
  while (x.size() % 64 != 0) x.push_back(0);
  Bytes out(x.size() / 2);
  for (std::int64_t target : targets()) {
    for (std::int64_t group : {16, 64}) {
      const simd_test::PinTarget pin(target);
      SCOPED_TRACE(simd_test::target_name(target) + ", groups of " + std::to_string(group));
      if (!detail::simd_encode_e2m1_by_buckets(1.0f, x.data(), out.data(), 64, group)) continue;
      int ran = 0;
      for (std::uint32_t e : {1u,   2u,   3u,   30u,  60u,  90u,  120u, 125u, 126u, 127u, 128u,
                              129u, 135u, 160u, 200u, 230u, 245u, 249u, 250u, 251u, 252u, 254u}) {
        for (std::uint32_t j = 0; j < 128; ++j) {
          const std::uint16_t mb = static_cast<std::uint16_t>(e << 7 | j);
          const float mult = formats::decode_bfloat16(mb);
          if (!detail::simd_encode_e2m1_by_buckets(mult, x.data(), out.data(), x.size(), group)) {
            EXPECT_GE(e, 251u) << "multiplier 0x" << std::hex << mb << " refused";
            continue;
          }
          ++ran;
          std::size_t bad = 0;
          for (std::size_t i = 0; i < x.size(); ++i) {
            const std::uint8_t want = scalar_e2m1(formats::decode_bfloat16(x[i]) * mult);
            const std::uint8_t got = (out[i / 2] >> (4 * (i % 2))) & 0xF;
            if (got != want && bad++ < 5) {
              ADD_FAILURE() << "multiplier 0x" << std::hex << mb << " bf16 0x" << x[i] << " simd 0x"
                            << int(got) << " scalar 0x" << int(want);
            }
          }
          ASSERT_EQ(bad, 0u);
        }
      }
      EXPECT_GE(ran, 19 * 128);  // every exponent up to 250 takes the tables
      std::printf("%s, groups of %d: %d multipliers by bucket tables\n",
                  simd_test::target_name(target).c_str(), static_cast<int>(group), ran);
    }
  }
}

// Mode hifloat8_fp4 rows whose groups the bucket tables serve next to groups they refuse (an
// all-zero group: multiplier 0; a group of magnitudes near 2^-124: a multiplier near 2^126,
// whose thresholds would leave the normal range), in every order, group sizes 16, 32 and 64,
// every target: the refused groups take the thresholds, and the served ones next to them keep
// their own tables (on AVX2 two 32-groups share a store).
TEST(KvCompressEpilogSimd, E2M1BucketsBesideRefusedGroups) {
  const float tiny = std::ldexp(1.0f, -124);
  for (std::int64_t target : targets()) {
    const simd_test::PinTarget pin(target);
    SCOPED_TRACE(simd_test::target_name(target));
    for (std::int64_t gs : {16, 32, 64}) {
      SCOPED_TRACE(testing::Message() << "gs " << gs);
      // Kinds of group: 0 served (values k / 7), 1 all zeros, 2 tiny; every ordered pair of kinds
      // appears at an even group index, then one more served group.
      const int kinds[] = {0, 0, 0, 1, 1, 0, 0, 2, 2, 0, 1, 2, 2, 1, 1, 1, 0};
      const std::int64_t groups = sizeof(kinds) / sizeof(kinds[0]);
      const std::int64_t n = (groups * gs + 63) / 64 * 64;
      std::vector<std::uint16_t> x(static_cast<std::size_t>(n + 64), bf16(0.5f));
      for (std::int64_t g = 0; g < groups; ++g) {
        for (std::int64_t i = 0; i < gs; ++i) {
          const float sign = i % 3 == 0 ? -1.0f : 1.0f;
          const float k = static_cast<float>((g * gs + i) % 50);
          const float v = kinds[g] == 0   ? k / 7.0f
                          : kinds[g] == 1 ? 0.0f
                                          : tiny * (1.0f + k / 50.0f);
          x[static_cast<std::size_t>(g * gs + i)] = bf16(sign * v);
        }
      }
      quantize_one(x, QuantMode::hifloat8_fp4, true, gs, 1.0f, 8192);
    }
  }
}

// The bucket parameters from their per-mantissa entries against their definition: the smallest
// threshold t0 of the multiplier (the mantissa's, moved by 128 patterns per binade) at or above
// 0x80, a normal multiplier, and the first bucket holding t0 (buckets of 32 from t0 >> 5; of 64
// from (t0 - 3) >> 6).
TEST(KvCompressEpilogSimd, E2M1BucketParams) {
  const detail::E2M1Buckets& b = detail::e2m1_buckets();
  for (std::uint32_t mb = 0; mb < 0x8000; ++mb) {
    const std::int32_t e = static_cast<std::int32_t>(mb >> 7);
    const std::uint32_t j = mb & 0x7F;
    const std::int32_t t0 = static_cast<std::int32_t>(b.t0[j]) + 128 * (127 - e);
    const bool normal = e >= 1 && e <= 254 && t0 >= 0x80;
    std::uint32_t got_j = 0, base = 0;
    ASSERT_EQ(detail::e2m1_bucket_params(b, mb, got_j, base), normal && b.usable[j]) << mb;
    if (normal && b.usable[j]) {
      EXPECT_EQ(got_j, j);
      EXPECT_EQ(base, static_cast<std::uint32_t>(t0 >> 5)) << mb;
    }
    ASSERT_EQ(detail::e2m1_byte_bucket_params(b, mb, got_j, base), normal && b.byte_usable[j])
        << mb;
    if (normal && b.byte_usable[j]) {
      EXPECT_EQ(got_j, j);
      EXPECT_EQ(base, static_cast<std::uint32_t>((t0 - 3) >> 6)) << mb;
    }
  }
}

// Mode hifloat8_fp4 through the operator where its groups hold every magnitude in the 1,100
// patterns below their amax, both signs, for amaxes across the normal range: the bucket codes
// take no clamp there (every magnitude lies within 1,024 patterns of the group's first
// bucket), so this checks that claim and those codes, group sizes 32 and 64, every target.
TEST(KvCompressEpilogSimd, E2M1BucketsBelowAmaxMatchReference) {
  constexpr std::int64_t kD = 576, kN = 512;
  std::vector<std::uint16_t> x;
  for (std::uint32_t amax = 0x0080; amax <= 0x7F7F; amax += 97) {
    // Magnitudes amax - 1 ... amax - 1100 (those above 0), alternating signs; every group of 32
    // starts with +-amax.
    std::vector<std::uint16_t> below;
    for (std::uint32_t k = 1; k <= 1100 && k < amax; ++k) {
      below.push_back(static_cast<std::uint16_t>((amax - k) | (k % 2 == 0 ? 0x8000u : 0u)));
    }
    std::size_t next = 0;
    while (next < below.size()) {
      const std::size_t row = x.size();
      x.resize(row + kD, 0);
      for (std::int64_t i = 0; i < kN; ++i) {
        const auto at = row + static_cast<std::size_t>(i);
        if (i % 32 == 0) {
          x[at] = static_cast<std::uint16_t>(amax | (i % 64 == 0 ? 0u : 0x8000u));
        } else {
          x[at] = next < below.size() ? below[next++] : static_cast<std::uint16_t>(amax);
        }
      }
      for (std::int64_t i = kN; i < kD; ++i) x[row + static_cast<std::size_t>(i)] = bf16(1.0f);
    }
  }
  for (const std::int64_t gs : {std::int64_t{32}, std::int64_t{64}}) {
    EXPECT_EQ(hif8_fp4_first_difference(x, kD, 384, gs, 1.0f), "") << "group size " << gs;
  }
}

// The hifloat8_fp4 group plans by the amax entries (AVX-512) against the reference's scalar
// steps, for every largest magnitude a group can have (0 ... 0x7FFF: zeros, subnormals,
// infinity and NaNs included) in every lane of rows of 1 to 40 groups: a row is planned by the
// entries exactly when each of its groups has an exponent field in [6, 254] (a zero, subnormal,
// non-finite or below 2^-121 group sends it to the division), and then every group's scale
// bits, bucket table and first bucket match the reference's bf16(a / 6), bf16(6 / a) and the
// bucket parameters of that multiplier. Then batches of 1 to 4 rows of 1 to 20 groups (rows of
// up to 16 share vectors), one row of three holding a magnitude outside the range: each row
// planned on its own account.
TEST(KvCompressEpilogSimd, E2M1AmaxPlansMatchScalar) {
  const detail::E2M1Buckets& b = detail::e2m1_buckets();
  ASSERT_TRUE(b.amax_usable);
  const float c6 = std::bit_cast<float>(std::uint32_t{0x3E2AAAAB});
  // The group of amax m as the reference plans it, against the kernel's entries.
  const auto check = [&](std::uint16_t m, std::uint16_t scale, std::uint16_t table,
                         std::uint32_t b64) {
    const float f = formats::decode_bfloat16(m);
    const std::uint16_t mult = formats::encode_bfloat16(6.0f / f);
    std::uint32_t j = 0, base = 0;
    ASSERT_TRUE(detail::e2m1_bucket_params(b, mult, j, base)) << "amax 0x" << std::hex << m;
    ASSERT_LE(m, base * 32 + 1023) << "amax 0x" << std::hex << m;
    ASSERT_EQ(scale, formats::encode_bfloat16(f * c6)) << "amax 0x" << std::hex << m;
    ASSERT_EQ(table, j * 32) << "amax 0x" << std::hex << m;
    ASSERT_EQ(b64, base * 64 * 0x10001u) << "amax 0x" << std::hex << m;
  };
  const auto in_range = [](std::uint32_t a) { return (a >> 7) >= 6 && (a >> 7) <= 254; };
  int ran = 0;
  for (std::int64_t target : targets()) {
    const simd_test::PinTarget pin(target);
    SCOPED_TRACE(simd_test::target_name(target));
    std::uint16_t one = 0x3F80;
    std::uint16_t scale[4 * 64];
    std::uint16_t table[4 * 64];
    std::uint32_t b64[4 * 64];
#if HWY_ARCH_X86
    const bool avx512 = (target & ~simd_test::kNoVbmi) <= HWY_AVX3;
#else
    const bool avx512 = false;
#endif
    // The AVX-512 targets plan by the entries (and plan a row of 1.0), the others never.
    bool one_ok = false;
    ASSERT_EQ(detail::simd_e2m1_plans_of_amax_rows(&one, 64, 1, 1, scale, table, b64, &one_ok),
              avx512);
    if (!avx512) continue;
    ASSERT_TRUE(one_ok);
    ++ran;
    std::int64_t planned = 0;
    for (std::uint32_t a = 0; a < 0x8000; ++a) {
      const std::int64_t groups = 1 + a % 40;
      const std::int64_t lane = (a / 40) % groups;
      // The other groups: normal amaxes of every mantissa.
      std::vector<std::uint16_t> amax(static_cast<std::size_t>(groups));
      for (std::int64_t g = 0; g < groups; ++g) {
        amax[static_cast<std::size_t>(g)] =
            static_cast<std::uint16_t>(0x3E00 + (a + 37 * g) % 0x500);
      }
      amax[static_cast<std::size_t>(lane)] = static_cast<std::uint16_t>(a);
      bool got = false;
      ASSERT_TRUE(detail::simd_e2m1_plans_of_amax_rows(amax.data(), 64, 1, groups, scale, table,
                                                       b64, &got));
      ASSERT_EQ(got, in_range(a)) << "amax 0x" << std::hex << a;
      if (!got) continue;
      ++planned;
      for (std::int64_t g = 0; g < groups; ++g) {
        check(amax[static_cast<std::size_t>(g)], scale[g], table[g], b64[g]);
      }
    }
    EXPECT_EQ(planned, 249 * 128);
    std::mt19937 rng(11);
    constexpr std::int64_t kStride = 64;
    for (int rows = 1; rows <= 4; ++rows) {
      for (std::int64_t groups = 1; groups <= 20; ++groups) {
        for (int iter = 0; iter < 20; ++iter) {
          std::vector<std::uint16_t> amax(static_cast<std::size_t>(rows * kStride));
          for (int r = 0; r < rows; ++r) {
            const bool bad = rng() % 3 == 0;
            for (std::int64_t g = 0; g < groups; ++g) {
              amax[static_cast<std::size_t>(r * kStride + g)] =
                  static_cast<std::uint16_t>(0x0300 + rng() % 0x7C00);  // fields 6 to 253
            }
            if (bad) {
              amax[static_cast<std::size_t>(r * kStride) + rng() % groups] =
                  static_cast<std::uint16_t>(rng() % 2 == 0 ? rng() % 0x300 : 0x7F80 + rng() % 128);
            }
          }
          bool ok[4] = {};
          ASSERT_TRUE(detail::simd_e2m1_plans_of_amax_rows(amax.data(), kStride, rows, groups,
                                                           scale, table, b64, ok));
          for (int r = 0; r < rows; ++r) {
            const auto* row = &amax[static_cast<std::size_t>(r * kStride)];
            const bool want = std::all_of(row, row + groups, in_range);
            ASSERT_EQ(ok[r], want) << rows << " rows of " << groups << " groups, row " << r;
            for (std::int64_t g = 0; want && g < groups; ++g) {
              const std::int64_t k = r * kStride + g;
              check(row[g], scale[k], table[k], b64[k]);
            }
          }
        }
      }
    }
  }
  std::printf("targets with the amax plans: %d\n", ran);
}

// Mode hifloat8_fp4 through the operator where every group's largest magnitude sits at the edges
// of the amax entries' exponents (fields 5, 6, 7, 253 and 254) or in the middle, with each of
// the 128 mantissas; in every third row one group (a different one from row to row) has its
// amax two binades lower (field 5 where the others have 7), which sends that row, and no other
// of its batch, to the division. Rows of 1 to 32 groups (four rows share the lookups up to 8
// groups, two up to 16), a last batch of three rows, every target against the reference.
TEST(KvCompressEpilogSimd, E2M1AmaxPlansEdgesMatchReference) {
  for (const auto& [d, gs] : std::vector<std::pair<std::int64_t, std::int64_t>>{{576, 64},
                                                                                {576, 32},
                                                                                {1088, 64},
                                                                                {704, 64},
                                                                                {320, 32},
                                                                                {192, 32},
                                                                                {128, 64},
                                                                                {1088, 32}}) {
    const std::int64_t n = d - 64, groups = n / gs;
    std::vector<std::uint16_t> x;
    for (std::uint32_t e : {5u, 6u, 7u, 127u, 253u, 254u}) {
      for (std::uint32_t m = 0; m < 128; ++m) {
        const std::uint32_t amax = e << 7 | m;
        const std::size_t row = x.size();
        const std::int64_t lower_group = (row / static_cast<std::size_t>(d)) % 3 == 0
                                             ? static_cast<std::int64_t>(m) % groups
                                             : -1;
        x.resize(row + static_cast<std::size_t>(d), 0);
        for (std::int64_t i = 0; i < n; ++i) {
          // Every group of 32 holds +-amax and magnitudes down to amax - 1000.
          const std::uint32_t top = i / gs == lower_group ? amax - 256 : amax;
          const std::uint32_t k = static_cast<std::uint32_t>(i % 32) * 31;
          const std::uint32_t v = i % 32 == 0 ? top : (k < top ? top - k : 0);
          x[row + static_cast<std::size_t>(i)] =
              static_cast<std::uint16_t>(v | (i % 3 == 1 ? 0x8000u : 0u));
        }
        for (std::int64_t i = n; i < d; ++i) x[row + static_cast<std::size_t>(i)] = bf16(-2.5f);
      }
    }
    x.resize(x.size() - static_cast<std::size_t>(d));  // 767 rows: a last batch of three
    const std::int64_t payload = 64 + n / 2 + 2 * groups;
    EXPECT_EQ(hif8_fp4_first_difference(x, d, (payload + 31) / 32 * 32, gs, 1.0f), "")
        << "d " << d << ", group size " << gs;
  }
}

// ---- duplicate resolution --------------------------------------------------------------------

// Duplicate resolution on both of its paths (a bitmap over small caches, a hash table over
// large ones) against the obvious quadratic rule.
TEST(KvCompressEpilogRandom, KeepLastWriters) {
  std::mt19937_64 rng(3);
  for (std::int64_t num_slots : {std::int64_t{50}, std::int64_t{1} << 40}) {
    for (int iter = 0; iter < 20; ++iter) {
      std::vector<std::int64_t> slots(1 + rng() % 300);
      for (auto& s : slots) {
        s = rng() % 4 == 0 ? -1 : static_cast<std::int64_t>(rng() % 60) * (num_slots / 60);
      }
      std::vector<std::int64_t> want = slots;
      for (std::size_t t = 0; t < want.size(); ++t) {
        for (std::size_t u = t + 1; u < want.size(); ++u) {
          if (want[t] >= 0 && slots[u] == want[t]) want[t] = -1;
        }
      }
      const bool any_dropped = want != slots;
      EXPECT_EQ(detail::keep_last_writers(slots, num_slots), any_dropped);
      EXPECT_EQ(slots, want) << "num_slots " << num_slots;
    }
  }
}

}  // namespace
}  // namespace kvscatter
