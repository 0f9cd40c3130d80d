// kv_compress_epilog cases: the three quant modes, group sizes 16/32/64, round_scale on and off,
// x_scale 1 and 0.5, d from 128 to 8,192, bfloat16 inputs either with one magnitude per 64 values
// (the kernels' fast paths) or spread over many binades, with infinities,
// NaNs, subnormals and signed zeros mixed in, x with a padded row pitch, caches with padded blocks
// and rows wider than the written length (the tail stays untouched), power- of-two and other block
// sizes, int32/int64 slots that are permutations, consecutive prefills, padding (-1), duplicates,
// the last slot, empty input, rows split over threads with many repeated slots, the path of calls
// past the streaming threshold, and slots that are neither -1 nor in range, which must fail.
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "harness/helpers.h"
#include "kvscatter/formats.h"
#include "kvscatter/kv_compress_epilog.h"

namespace kvscatter::harness {
namespace {

struct Call {
  TensorRef cache, x, slot_mapping;
  std::int64_t group_size = 64;
  QuantMode mode = QuantMode::fp8_e8m0;
  bool round_scale = true;
  float x_scale = 1.0f;
};

// bfloat16 with magnitudes over many binades; with `specials`, some infinities, NaNs, subnormals
// and signed zeros.
std::uint16_t random_bf16(Gen& g, bool specials) {
  if (specials && g.chance(0.03)) {
    return static_cast<std::uint16_t>(
        g.pick<int>({0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x0001, 0x8003, 0x8000, 0x007F}));
  }
  std::normal_distribution<float> n(0.0f, 1.0f);
  const float scale = std::ldexp(1.0f, static_cast<int>(g.uniform(-12, 11)));
  return formats::encode_bfloat16(n(g.rng()) * scale);
}

// Realistic rows: one magnitude per 64 elements, as activations have, so that nearly every group
// takes the kernels' fast paths, with zeros, -0 and a few tiny values that send some groups down
// the careful paths (e4m3 subnormals); with `specials`, an infinity or NaN now and then.
std::uint16_t group_scaled_bf16(Gen& g, int exponent, bool specials) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  const std::int64_t p = g.uniform(0, 999);
  if (p < 10) return 0x0000;
  if (p < 20) return 0x8000;
  if (p < 25) return formats::encode_bfloat16(std::ldexp(n(g.rng()), exponent - 14));
  if (specials && p < 27) return g.chance(0.5) ? 0x7F80 : 0xFFC1;
  return formats::encode_bfloat16(std::ldexp(n(g.rng()), exponent));
}

// Bytes one row takes in the cache for this call's mode, d and group size.
std::int64_t row_bytes(const Call& call, std::int64_t d) {
  std::uint16_t x = 0;
  std::int32_t slot = 0;
  return plan_kv_compress_epilog(TensorView(nullptr, DType::uint8, {0, 1, 1, 16384}),
                                 TensorView(&x, DType::bfloat16, {0, d}),
                                 TensorView(&slot, DType::int32, {0}), call.group_size, call.mode,
                                 call.round_scale, call.x_scale)
      .row_bytes;
}

Case generate(std::mt19937_64& rng) {
  Gen g(rng);
  Case c;
  std::ostringstream d;
  Call call;
  const bool threads = g.chance(0.05);
  call.mode = g.pick({QuantMode::fp8_bf16, QuantMode::fp8_e8m0, QuantMode::hifloat8_fp4});
  if (call.mode == QuantMode::hifloat8_fp4) call.group_size = g.pick<std::int64_t>({16, 32, 64});
  call.round_scale = call.mode == QuantMode::hifloat8_fp4 || g.chance(0.5);
  call.x_scale = g.chance(0.2) ? 0.5f : 1.0f;
  // 640 and 1088 give 9 and 16 groups of 64: the kernels reduce eight groups at a time.
  const std::int64_t dim =
      threads ? 128 : g.pick<std::int64_t>({128, 128, 192, 576, 640, 1024, 1088, 8192});
  const std::int64_t half = threads       ? g.pick<std::int64_t>({2048, 1500})
                            : dim >= 4096 ? g.uniform(0, 4)
                                          : g.uniform(0, 24);
  const std::int64_t t = 2 * half;  // x is [2, T/2, d]
  const bool specials = g.chance(0.5), strided = g.chance(0.5), grouped = g.chance(0.5);
  const DType idt = g.chance(0.5) ? DType::int32 : DType::int64;
  const std::int64_t row = row_bytes(call, dim);
  const std::int64_t width = row + (strided ? g.uniform(1, 7) : 0);
  const std::int64_t bs = g.pick<std::int64_t>({16, 12, 1, 5});
  const std::int64_t nb = (t + bs - 1) / bs + 2;
  d << (threads ? "threads " : "") << "mode " << static_cast<int>(call.mode) << " d=" << dim
    << " group " << call.group_size << " round_scale " << call.round_scale << " x_scale "
    << call.x_scale << " T=" << t << " bs=" << bs << " nb=" << nb << " width " << width
    << (strided ? " strided" : "") << (specials ? " specials" : "")
    << (grouped ? " group-scaled" : "") << " index " << dtype_name(idt);

  // x with a padded row pitch when strided.
  const std::int64_t pitch = strided ? dim + 64 : dim;
  call.x = add_tensor(c, g, "x", DType::bfloat16, {t * pitch});
  // x starts on an element boundary: the kernels read it as 16-bit words (rows still start at
  // every even offset from a 64-byte line).
  c.misalign[static_cast<std::size_t>(call.x.buffer)] &= ~std::size_t{1};
  auto& xb = c.buffers[static_cast<std::size_t>(call.x.buffer)];
  int exponent = 0;
  for (std::size_t i = 0; i + 2 <= xb.size(); i += 2) {
    // Now and then a group near the bottom of the range, whose FP4 multiplier is too large for
    // the bucket tables (or overflows) and whose fp8 quotients are subnormal.
    if (grouped && i % 128 == 0) {
      exponent = static_cast<int>(g.chance(0.05) ? g.uniform(-126, -115) : g.uniform(-20, 20));
    }
    const std::uint16_t v =
        grouped ? group_scaled_bf16(g, exponent, specials) : random_bf16(g, specials);
    std::memcpy(&xb[i], &v, 2);
  }
  call.x.shape = {2, half, dim};
  call.x.strides = {half * pitch, pitch, 1};
  // Cache blocks with a padded stride when strided.
  const std::int64_t block_stride = strided ? bs * width + g.uniform(1, 40) : bs * width;
  call.cache = add_tensor(c, g, "cache", DType::uint8, {nb * block_stride});
  call.cache.shape = {nb, bs, 1, width};
  call.cache.strides = {block_stride, width, width, 1};

  std::string desc;
  SlotOptions opt;
  opt.only_minus_one = true;
  if (threads) opt.duplicates = 1.0;
  std::vector<std::int64_t> slots = make_slots(g, t, nb * bs, opt, desc);
  if (threads && g.chance(0.5)) {
    for (auto& s : slots) s = g.uniform(0, 7);  // heavy duplicates
    desc = " slots 0..7";
  }
  if (t > 0 && g.chance(0.05)) {  // only -1 marks padding; -2 or past the end is an error
    slots[static_cast<std::size_t>(g.uniform(t / 2, t - 1))] =
        g.chance(0.5) ? -g.uniform(2, 9) : nb * bs + g.uniform(0, 3);
    c.expect_error = true;
    desc += " bad-slot";
  }
  d << desc;
  call.slot_mapping = add_index(c, "slot_mapping", idt, slots, {2, half});
  if (g.chance(0.01)) {  // a mode outside the enum
    call.mode = static_cast<QuantMode>(3);
    c.expect_error = true;
    d << " mode 3";
  }
  // The path of calls past the streaming threshold (batches staged, runs of rows streamed out,
  // rows of x prefetched) on small calls.
  c.stream = g.chance(1.0 / 3);
  if (c.stream) d << " streamed";
  c.name = d.str();
  c.run = [call](const std::vector<std::uint8_t*>& data, bool reference) {
    const KvCompressEpilogPlan plan = plan_kv_compress_epilog(
        call.cache.view(data), call.x.view(data), call.slot_mapping.view(data), call.group_size,
        call.mode, call.round_scale, call.x_scale);
    if (reference) {
      reference::execute(plan);
    } else {
      execute(plan);
    }
  };
  return c;
}

}  // namespace

KVS_HARNESS_CASES(kv_compress_epilog, generate, 150);

}  // namespace kvscatter::harness
