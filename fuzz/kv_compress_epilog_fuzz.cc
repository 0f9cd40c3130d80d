// Fuzz target of KvCompressEpilog: the three quant modes, group sizes, round_scale, x_scale
// (NaN, infinities, zero, negative, random bits), x of rank 2 to 4 with padded or broadcast
// leading axes, bfloat16 rows full of NaN/Inf/subnormal patterns, caches with padded rows and
// blocks, and slots of every kind (-1 skips, any other negative is an error). See
// fuzz_common.h for the oracle.
#include <bit>

#include "fuzz_common.h"
#include "kvscatter/kv_compress_epilog.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"

namespace kvscatter::fuzz {
namespace {

// Bytes one row takes (docs/operators/kv_compress_epilog.md), mirrored from the plan so that most
// cases size the cache right.
std::int64_t row_bytes(int mode, std::int64_t d, std::int64_t group) {
  const std::int64_t n = d - 64;
  std::int64_t payload = 0;
  if (mode == 2) {
    payload = 64 + n / 2 + n / group * 2;
  } else {
    payload = n + 128 + n / 64 * (mode == 0 ? 2 : 1);
  }
  return mode == 1 ? payload : (payload + 31) / 32 * 32;
}

int run(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  decode_runtime(in);
  const Path path = decode_path(in);
  Case c;
  c.rng.s = in.u64();
  c.special = in.pick(4) == 3 ? static_cast<int>(1 + in.pick(32)) : 0;

  int mode = static_cast<int>(in.pick(3));
  static const std::vector<std::int64_t> kGroup = {64, 16, 32};
  std::int64_t group = in.choose(kGroup);
  if (in.rare()) group = in.pick(2) ? 8 : 128;
  const bool round_scale = in.pick(2) == 0;
  static const std::vector<std::uint32_t> kScale = {0x3F800000, 0x40000000, 0x3E800000, 0x00000000,
                                                    0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000,
                                                    0xBF800000, 0x7149F2CA, 0x00000001, 0x3A83126F};
  float x_scale = 1.0f;
  if (in.pick(2)) {
    x_scale = std::bit_cast<float>(in.pick(4) == 3 ? static_cast<std::uint32_t>(in.u64())
                                                   : in.choose(kScale));
  }
  // Long rows are rare: they cost the most per execution and add little coverage.
  static const std::vector<std::int64_t> kD = {128, 192, 256, 576, 320};
  static const std::vector<std::int64_t> kLongD = {1088, 4160, 8192};
  std::int64_t d = in.rare(32) ? in.choose(kLongD) : in.choose(kD);
  if (in.rare()) d = in.pick(2) ? 64 : d + 32;
  const int xrank = static_cast<int>(2 + in.pick(3));
  const DType idt = in.pick(2) ? DType::int64 : DType::int32;

  Tensor& cache = c.add("cache", Role::cache);
  Tensor& x = c.add("x", Role::input);
  Tensor& slot = c.add("slot_mapping", Role::index);
  cache.dtype = DType::uint8;
  x.dtype = DType::bfloat16;
  slot.dtype = idt;

  // x: leading dims with about up to 32 rows (sometimes a few hundred), then d.
  x.rank = xrank;
  std::int64_t rows = 1;
  const bool many = in.rare(16);
  std::int64_t inner = 1;  // rows per index of the first axis
  for (int a = 0; a < xrank - 1; ++a) {
    x.shape[a] = many ? in.range(1, a == 0 ? 300 : 2) : in.pick(a == 0 ? 17 : 4);
    if (a > 0) inner *= x.shape[a];
  }
  x.shape[0] = cap_count(x.shape[0], inner * d * 2);
  for (int a = 0; a < xrank - 1; ++a) rows *= x.shape[a];
  x.shape[xrank - 1] = d;
  x.contiguous();
  if (in.pick(4) == 3) {  // padded rows, or a broadcast leading axis
    for (int a = xrank - 2; a >= 0; --a) {
      x.strides[a] = in.pick(8) == 7 ? 0 : x.shape[a + 1] * x.strides[a + 1] + in.pick(16);
    }
  }
  slot.rank = xrank - 1;
  for (int a = 0; a < slot.rank; ++a) slot.shape[a] = x.shape[a];
  slot.contiguous();
  if (in.pick(4) == 3) {
    for (int a = 0; a < slot.rank; ++a) slot.strides[a] *= 1 + in.pick(2);
  }

  std::int64_t nb = in.pick(9);
  static const std::vector<std::int64_t> kBlock = {4, 1, 2, 3, 8, 16, 5, 32, 128};
  const std::int64_t bs = in.choose(kBlock);
  std::int64_t rb = row_bytes(mode, d, group) + (in.pick(4) == 3 ? in.pick(40) : 0);
  if (in.rare()) rb -= 1;
  nb = cap_count(nb, bs * rb);
  cache.set_shape({nb, bs, 1, rb});
  if (in.pick(4) == 3) cache.strides[1] = rb + in.pick(64);
  cache.strides[0] = bs * cache.strides[1] + (in.pick(4) == 3 ? in.pick(256) : 0);
  if (in.pick(4) == 3) cache.strides[2] = in.pick(1000);  // a size-1 axis: any stride
  for (std::int64_t i = 0; i < rows; ++i) {
    std::int64_t s = slot_value(in, nb * bs, idt, slot.values);
    if (s < -1 && !in.rare(64)) s = -1;  // other negatives are errors: keep them rare
    slot.values.push_back(s);
  }
  cache.misalign = static_cast<std::size_t>(in.pick(8));
  x.misalign = static_cast<std::size_t>(in.pick(2)) * 2;  // bfloat16 elements stay aligned
  if (in.rare()) mode = 3;
  const auto quant_mode = static_cast<QuantMode>(mode);
  mutate(c, in);
  if (!materialize(c)) return -1;
  c.note = "KvCompressEpilog quant_mode " + std::to_string(mode) + " group " +
           std::to_string(group) + " round_scale " + std::to_string(round_scale) +
           " x_scale bits " + std::to_string(std::bit_cast<std::uint32_t>(x_scale)) + " path " +
           std::to_string(static_cast<int>(path));

  auto plan = [&](bool r) {
    return plan_kv_compress_epilog(cache.view(r), x.view(r), slot.view(r), group, quant_mode,
                                   round_scale, x_scale);
  };
  const Outcome ref = run_cpp([&] { reference::execute(plan(true)); });
  Outcome tested;
  bool any_status = false;
  if (path == Path::oneshot) {
    tested = run_cpp([&] {
      kv_compress_epilog(cache.view(false), x.view(false), slot.view(false), group, quant_mode,
                         round_scale, x_scale);
    });
  } else if (path == Path::plan_execute) {
    tested = run_cpp([&] { execute(plan(false)); });
  } else {
    CTensors ct;
    kvsTensor* tc = ct.make(cache);
    kvsTensor* tx = ct.make(x);
    kvsTensor* ts = ct.make(slot);
    // The C ABI takes the mode as text: names in any case, or digits.
    static const char* kNames[] = {"fp8_bf16", "FP8_E8M0", " hifloat8_fp4 ", "3"};
    static const char* kDigits[] = {"0", "1", "2", "3"};
    const char* text = (path == Path::c_abi && (c.rng.s & 1)) ? kDigits[mode] : kNames[mode];
    tested = c_two_phase(
        ct, any_status, "kvsKvCompressEpilog",
        [&](std::uint64_t* ws, kvsExecutor** ex) {
          return kvsKvCompressEpilogGetWorkspaceSize(tc, tx, ts, group, text, round_scale, x_scale,
                                                     ws, ex);
        },
        [](kvsExecutor* ex) { return kvsKvCompressEpilog(nullptr, 0, ex); });
  }
  check(c, tested, ref, any_status);
  return 0;
}

}  // namespace
}  // namespace kvscatter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvscatter::fuzz::run(data, size);
}
