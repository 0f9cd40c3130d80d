// paged_cache_gather: the worked examples byte for byte and every rejection (message, dst
// untouched). The random optimized-versus-reference cases are harness/paged_cache_gather_cases.cc.
#include "kvscatter/paged_cache_gather.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kvscatter/error.h"
#include "kvscatter/formats.h"
#include "kvscatter/runtime.h"
#include "simd_targets.h"

namespace kvscatter {
namespace {

using Bytes = std::vector<std::uint8_t>;

// Dequantizing token-driven gather with seq_starts: e4m3 codes times 0.5 into bfloat16.
TEST(PagedCacheGatherExamples, Fp8ToBfloat16WithSeqStarts) {
  Bytes src{0x38, 0xB8, 0x40, 0x7F, 0x01, 0x7E, 0x00, 0x80, 0x44, 0x3C, 0xC4, 0x30};
  std::vector<std::int64_t> bt{2, 0, -1, 1, 1, 9}, cu{0, 3, 4}, tts{0, 0, 0, 1, 0}, starts{1, 2};
  std::vector<std::uint16_t> dst(10, 0x1234);
  float scale = 0.5f;
  PagedCacheGatherOptions o;
  o.format = KvCacheFormat::fp8_e4m3;
  o.scale = TensorView(&scale, DType::float32, {1});
  o.seq_starts = TensorView(starts.data(), DType::int64, {2});
  o.token_to_seq = TensorView(tts.data(), DType::int64, {5});
  o.num_tokens = 4;
  paged_cache_gather(TensorView(src.data(), DType::uint8, {3, 2, 2}),
                     TensorView(dst.data(), DType::bfloat16, {5, 2}),
                     TensorView(bt.data(), DType::int64, {2, 3}),
                     TensorView(cu.data(), DType::int64, {3}), o);
  EXPECT_EQ(dst, (std::vector<std::uint16_t>{0xBFC0, 0x3E80, 0x3F00, 0xBF00, 0x3F80, 0x7FFF, 0x3A80,
                                             0x4360, 0x1234, 0x1234}));
}

// Raw copy, token-driven: rows past their sequence are skipped.
TEST(PagedCacheGatherExamples, CopyFloat16SkippedRows) {
  std::vector<std::uint16_t> src{0x3C00, 0x4000, 0x4200, 0x4400};  // 1, 2, 3, 4
  std::vector<std::int32_t> bt{1, 0}, cu{0, 2, 3}, tts{0, 0, 1, 0, 0};
  std::vector<std::uint16_t> dst(5, 0xAAAA);
  PagedCacheGatherOptions o;
  o.token_to_seq = TensorView(tts.data(), DType::int32, {5});
  o.num_tokens = 5;
  paged_cache_gather(TensorView(src.data(), DType::float16, {2, 2, 1}),
                     TensorView(dst.data(), DType::float16, {5, 1}),
                     TensorView(bt.data(), DType::int32, {2, 1}),
                     TensorView(cu.data(), DType::int32, {3}), o);
  EXPECT_EQ(dst, (std::vector<std::uint16_t>{0x4200, 0x4400, 0x3C00, 0xAAAA, 0xAAAA}));
}

// Sequence-driven byte copy of 3-byte entries with unaligned seq_starts.
TEST(PagedCacheGatherExamples, CopyUint8UnalignedSeqStarts) {
  Bytes src;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 12; ++i) src.push_back(static_cast<std::uint8_t>(16 * b + i));
  std::vector<std::int64_t> bt{1, 0, 0, 1}, cu{0, 3, 5}, starts{2, 3};
  Bytes dst(18, 0xEE);
  PagedCacheGatherOptions o;
  o.batch_size = 2;
  o.seq_starts = TensorView(starts.data(), DType::int64, {2});
  paged_cache_gather(
      TensorView(src.data(), DType::uint8, {2, 4, 3}), TensorView(dst.data(), DType::uint8, {6, 3}),
      TensorView(bt.data(), DType::int64, {2, 2}), TensorView(cu.data(), DType::int64, {3}), o);
  EXPECT_EQ(dst, (Bytes{0x16, 0x17, 0x18, 0x19, 0x1A, 0x1B, 0x00, 0x01, 0x02, 0x09, 0x0A, 0x0B,
                        0x10, 0x11, 0x12, 0xEE, 0xEE, 0xEE}));
}

// float32, an empty sequence whose garbage block-table row is never read, cu_seq_lens[0] = 1.
TEST(PagedCacheGatherExamples, CopyFloat32EmptySequence) {
  std::vector<float> src{0, 1, 10, 11, 20, 21};
  std::vector<std::int64_t> bt{7, 7, 2, 0, 1, 5}, cu{1, 1, 3, 4};
  std::vector<float> dst(5, -1.0f);
  PagedCacheGatherOptions o;
  o.batch_size = 3;
  paged_cache_gather(TensorView(src.data(), DType::float32, {3, 2, 1}),
                     TensorView(dst.data(), DType::float32, {5, 1}),
                     TensorView(bt.data(), DType::int64, {3, 2}),
                     TensorView(cu.data(), DType::int64, {4}), o);
  EXPECT_EQ(dst, (std::vector<float>{-1, 20, 21, 10, -1}));
}

// ---- rejections ----------------------------------------------------------------------------

struct Call {
  std::vector<std::uint16_t> src = std::vector<std::uint16_t>(5 * 4 * 4, 0x3C00);
  std::vector<std::uint16_t> dst = std::vector<std::uint16_t>(14 * 4, 0x5555);
  std::vector<std::int64_t> bt{0, 1, 2, 3, 4, 0}, cu{0, 3, 6}, tts{0, 0, 0, 1, 1, 1};
  std::vector<std::int64_t> starts{0, 0};
  std::vector<float> scale{1.0f};
  DType src_dtype = DType::float16, dst_dtype = DType::float16;
  std::vector<std::int64_t> src_shape{5, 4, 4}, dst_shape{14, 4};
  PagedCacheGatherOptions o;
  Call() {
    o.token_to_seq = TensorView(tts.data(), DType::int64, {6});
    o.num_tokens = 6;
    o.scale = TensorView(scale.data(), DType::float32, {1});
  }
  void run() {
    paged_cache_gather(
        TensorView(src.data(), src_dtype, src_shape), TensorView(dst.data(), dst_dtype, dst_shape),
        TensorView(bt.data(), DType::int64, {2, 3}),
        TensorView(cu.data(), DType::int64, {static_cast<std::int64_t>(cu.size())}), o);
  }
};

void expect_rejected(Call& c, const std::string& message) {
  const auto before = c.dst;
  try {
    c.run();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    EXPECT_EQ(e.status(), Status::invalid_parameter);
  }
  EXPECT_EQ(c.dst, before);
}

TEST(PagedCacheGatherRejects, EveryRule) {
  Call ok;
  ok.run();  // the base call is valid
  {
    Call c;
    c.dst_shape = {14, 5};
    expect_rejected(c,
                    "dst shape [14, 5] must be [rows, 4] (the entry shape of src_cache [5, 4, 4])");
  }
  {
    Call c;
    c.src_shape = {20, 4};
    expect_rejected(c, "src_cache must have rank >= 3");
  }
  {
    Call c;
    c.dst_dtype = DType::bfloat16;
    expect_rejected(c, "dst dtype bfloat16 differs from src_cache dtype float16");
  }
  {
    Call c;
    c.o.format = KvCacheFormat::fp8_e4m3;
    expect_rejected(c, "src_cache dtype float16 cannot hold the codes of format 'fp8_e4m3'");
  }
  {
    Call c;
    c.o.num_tokens = 15;
    c.tts.resize(15, 0);
    c.o.token_to_seq = TensorView(c.tts.data(), DType::int64, {15});
    expect_rejected(c, "num_tokens = 15 exceeds dst rows 14");
  }
  {
    Call c;
    c.o.num_tokens = 7;
    expect_rejected(c, "num_tokens = 7 exceeds token_to_seq entries 6");
  }
  {
    Call c;
    std::vector<std::int32_t> cu32{0, 3, 6};
    c.o.token_to_seq = TensorView(cu32.data(), DType::int32, {3});
    c.o.num_tokens = 3;
    expect_rejected(c,
                    "token_to_seq dtype int32 differs from block_table dtype int64 (index "
                    "tensors share one dtype)");
  }
  {
    Call c;
    c.scale = {1.0f, 2.0f};
    c.o.scale = TensorView(c.scale.data(), DType::float32, {2});
    expect_rejected(c, "scale has 2 elements; expected 1");
  }
  {
    Call c;
    c.o.scale = TensorView(c.scale.data(), DType::int32, {1});
    expect_rejected(c, "scale must be float32, got int32");
  }
  {
    Call c;
    c.cu = {0, 3, 2};
    expect_rejected(c,
                    "cu_seq_lens must be non-decreasing: cu_seq_lens[2] = 2 < cu_seq_lens[1] = 3");
  }
  {
    Call c;
    c.cu = {-1, 3, 6};
    expect_rejected(c, "cu_seq_lens[0] = -1 is negative");
  }
  {
    Call c;
    c.starts = {0, -2};
    c.o.seq_starts = TensorView(c.starts.data(), DType::int64, {2});
    expect_rejected(c, "seq_starts[1] = -2 is negative");
  }
  {
    Call c;
    c.o.seq_starts = TensorView(c.starts.data(), DType::int64, {1});
    expect_rejected(c, "seq_starts has 1 entries; needs at least 2");
  }
  {
    Call c;
    c.tts[1] = 7;
    expect_rejected(c, "token_to_seq[1] = 7 is out of range [0, 2)");
  }
  {
    Call c;
    c.tts[1] = 1;
    expect_rejected(c,
                    "token_to_seq[1] = 1 but cu_seq_lens[1] = 3 > 1 (token precedes its sequence)");
  }
  {
    Call c;
    c.bt[4] = 5;  // sequence 1, column 1 (positions 4..7 with block_size 4)
    c.cu = {0, 3, 8};
    c.tts = {0, 0, 0, 1, 1, 1};
    c.o.num_tokens = 6;
    c.tts.resize(6);
    // token 3..5 are positions 0..2 of sequence 1: column 0; make sequence 1 longer instead.
    c.o.token_to_seq.reset();
    c.o.batch_size = 2;
    expect_rejected(c, "block_table[1, 1] = 5 is out of range [0, 5) (src_cache has 5 blocks)");
  }
  {
    Call c;
    c.starts = {0, 10};
    c.o.seq_starts = TensorView(c.starts.data(), DType::int64, {2});
    expect_rejected(c,
                    "block_table has 3 columns but sequence 1 needs column 3 (position 12 with "
                    "block_size 4)");
  }
  {
    Call c;
    c.o.token_to_seq.reset();
    c.cu = {0, 3, 25};
    expect_rejected(c, "cu_seq_lens[2] = 25 exceeds dst rows 14");
  }
  {
    Call c;
    c.o.token_to_seq.reset();
    c.o.batch_size = 4;
    expect_rejected(c, "cu_seq_lens has 3 entries; batch_size = 4 needs 5");
  }
  {
    Call c;
    c.o.token_to_seq.reset();
    c.cu = {0, 1, 2, 3};
    expect_rejected(c, "block_table has 2 rows; 3 sequences need 3");
  }
  {
    Call c;
    c.src_dtype = c.dst_dtype = DType::int64;
    c.src.resize(4 * c.src.size());
    c.dst.resize(4 * c.dst.size());
    expect_rejected(c, "copies move elements of 1, 2 or 4 bytes");
  }
}

TEST(PagedCacheGather, EmptyCallsAreNoOps) {
  Call c;
  c.o.num_tokens = 0;
  const auto before = c.dst;
  c.run();
  c.o.token_to_seq.reset();
  c.cu = {2, 2, 2};
  c.run();
  EXPECT_EQ(c.dst, before);
}

// Dequantizing gathers against the rule itself (decode, multiply by the scale in float32, round
// to the destination; NaN as the canonical 0x7FFF, or 0x7FFFFFFF in float32) on every SIMD
// target: every code in every row (rows of 265 codes: whole vectors and a tail), both fp8
// formats, all three destinations, and scales whose results stay normal (the per-exponent
// shortcut) and ones that reach subnormals, overflow, zeros, infinities and NaN (the exact path).
// The last row holds every code but the format's infinities and NaNs, which float32 rows without
// them dequantize through float16 (rows with them are written again by the exact path).
TEST(PagedCacheGatherDequant, EveryCodeOnEveryTarget) {
  constexpr std::int64_t T = 4, E = 265;
  std::vector<std::int64_t> bt{0}, cu{0, T};
  const float inf = std::numeric_limits<float>::infinity();
  const int threads = get_num_threads();
  set_num_threads(1);
  for (std::int64_t target : simd_test::simd_targets()) {
    simd_test::PinTarget pin(target);
    for (float scale : {1.0f,
                        0.5f,
                        3.0f,
                        1.0f / 3.0f,
                        0.1f,
                        1e-3f,
                        448.0f,
                        -2.0f,
                        -0.0537f,
                        0x1p-110f,
                        0x1p100f,
                        0x1p119f,
                        0x1p120f,
                        1e-30f,
                        1e30f,
                        0.0f,
                        -0.0f,
                        inf,
                        -inf,
                        std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::min()}) {
      for (const KvCacheFormat format : {KvCacheFormat::fp8_e4m3, KvCacheFormat::fp8_e5m2}) {
        const bool e4m3 = format == KvCacheFormat::fp8_e4m3;
        Bytes src(static_cast<std::size_t>(T * E));
        for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 7 + 3);
        std::vector<std::uint8_t> finite;
        for (int c = 0; c < 256; ++c) {
          if ((c & 0x7F) < (e4m3 ? 0x7F : 0x7C)) finite.push_back(static_cast<std::uint8_t>(c));
        }
        for (std::size_t i = 0; i < E; ++i) src[(T - 1) * E + i] = finite[i % finite.size()];
        const auto product = [&](std::uint8_t code) {
          return (e4m3 ? formats::decode_float8_e4m3fn(code) : formats::decode_float8_e5m2(code)) *
                 scale;
        };
        for (const DType dt : {DType::bfloat16, DType::float16, DType::float32}) {
          const bool f32 = dt == DType::float32;
          const auto expected = [&](std::uint8_t code) {
            const float p = product(code);
            if (std::isnan(p)) return f32 ? 0x7FFFFFFFu : 0x7FFFu;
            if (f32) return std::bit_cast<std::uint32_t>(p);
            return std::uint32_t{dt == DType::bfloat16 ? formats::encode_bfloat16(p)
                                                       : formats::encode_float16(p)};
          };
          Bytes dst(static_cast<std::size_t>(T * E) * dtype_size(dt), 0x34);
          PagedCacheGatherOptions o;
          o.format = format;
          o.scale = TensorView(&scale, DType::float32, {1});
          paged_cache_gather(TensorView(src.data(), DType::uint8, {1, T, E}),
                             TensorView(dst.data(), dt, {T, E}),
                             TensorView(bt.data(), DType::int64, {1, 1}),
                             TensorView(cu.data(), DType::int64, {2}), o);
          int bad = 0;
          for (std::size_t i = 0; i < src.size(); ++i) {
            std::uint32_t got = 0;
            std::memcpy(&got, dst.data() + i * dtype_size(dt), dtype_size(dt));
            if (got != expected(src[i]) && ++bad <= 3) {
              ADD_FAILURE() << simd_test::target_name(target) << (e4m3 ? " e4m3 " : " e5m2 ")
                            << dtype_name(dt) << " scale " << scale << " code " << int{src[i]}
                            << ": got " << got << ", expected " << expected(src[i]);
            }
          }
          EXPECT_EQ(bad, 0);
        }
      }
    }
  }
  set_num_threads(threads);
}

}  // namespace
}  // namespace kvscatter
