// Harness cases of ScatterPaCache: plain rows of every copy dtype and both
// packed FP4 types, ReduceMean and tail keep over the arithmetic dtypes,
// padding and skipped runs, the last slot, duplicate slots and overlapping
// runs, empty calls, odd head sizes, a cache strided along its block axis,
// unaligned buffers, and calls that must fail (a slot or run past the cache).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "kvscatter/scatter_pa_cache.h"

namespace kvscatter::harness {
namespace {

enum Buf { kKey, kCache, kSlots, kLens, kOffsets, kSeq, kNumBufs };

std::int64_t pick(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}

std::vector<std::uint8_t> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

std::vector<std::uint8_t> as_int64(const std::vector<std::int64_t>& v) {
  std::vector<std::uint8_t> out(v.size() * 8);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

struct Shape {
  bool four = false, reduce_mean = false;
  DType dt = DType::float16;
  std::int64_t nb = 1, bs = 1, nh = 1, d = 1, tokens = 0, batch = 0, seq = 0, pad = 0;
};

// Finite values for the arithmetic scenarios: no NaN may enter a mean (its sign
// and payload depend on the order of additions, which no rule fixes).
void make_finite(std::vector<std::uint8_t>& key, DType dt) {
  if (dt == DType::float32) {
    for (std::size_t i = 3; i < key.size(); i += 4) key[i] &= 0x3F;
  } else if (dt == DType::float16 || dt == DType::bfloat16) {
    for (std::size_t i = 1; i < key.size(); i += 2) key[i] &= 0x3F;
  }
}

Shape random_shape(std::mt19937_64& rng) {
  static const DType kPlain[] = {DType::float32,     DType::float16,     DType::bfloat16,
                                 DType::int8,        DType::uint16,      DType::uint32,
                                 DType::hifloat8,    DType::float8_e5m2, DType::float8_e4m3fn,
                                 DType::float4_e2m1, DType::float4_e1m2};
  static const DType kMath[] = {DType::float32, DType::float16, DType::bfloat16,
                                DType::int8,    DType::uint8,   DType::int16,
                                DType::uint16,  DType::int32,   DType::uint32};
  Shape s;
  s.four = rng() % 2;
  s.reduce_mean = s.four && rng() % 2;
  s.dt = s.four ? kMath[rng() % 9] : kPlain[rng() % 11];
  s.nb = pick(rng, 1, 8);
  s.bs = pick(rng, 1, 16);
  s.nh = pick(rng, 1, 4);
  s.d = pick(rng, 1, 70);
  s.pad = rng() % 3 == 0 ? pick(rng, 1, 33) : 0;
  s.tokens = rng() % 12 == 0 ? 0 : pick(rng, 1, 40);
  s.batch = rng() % 12 == 0 ? 0 : pick(rng, 1, 4);
  s.seq = pick(rng, 1, 12);
  return s;
}

Case generate(std::mt19937_64& rng) {
  const Shape s = random_shape(rng);
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(s.dt));
  const std::int64_t ns = s.nb * s.bs;
  const std::int64_t row = s.four ? s.d : s.nh * s.d;  // elements per cache slot
  std::vector<std::int64_t> slots, lens, offs, seq;
  bool bad = false;
  if (!s.four) {
    for (std::int64_t t = 0; t < s.tokens; ++t) {
      const auto r = rng() % 8;
      slots.push_back(r == 0            ? -1
                      : r == 1          ? ns - 1
                      : r == 2 && t > 0 ? slots[0]
                                        : pick(rng, 0, ns - 1));
    }
    if (s.tokens > 0 && rng() % 12 == 0) slots.back() = ns, bad = true;
  } else {
    for (std::int64_t b = 0; b < s.batch; ++b) seq.push_back(pick(rng, 0, s.seq));
    for (std::int64_t i = 0; i < s.batch * s.nh; ++i) {
      const std::int64_t l = seq[static_cast<std::size_t>(i / s.nh)];
      const std::int64_t w = pick(rng, 0, l);
      lens.push_back(w);
      offs.push_back(pick(rng, 0, l - w));
      const std::int64_t rows = s.reduce_mean ? (w == 0 || offs.back() == l ? l : l - w + 1) : w;
      // A start slot lies inside the cache even for an empty run.
      slots.push_back(
          rng() % 6 == 0 || rows > ns ? -1 : pick(rng, 0, ns - std::max<std::int64_t>(rows, 1)));
    }
    if (!slots.empty() && rng() % 12 == 0) slots[0] = ns, bad = true;
  }
  Case c;
  c.name = std::string(s.four ? (s.reduce_mean ? "ReduceMean " : "TailKeep ") : "Plain ") +
           std::string(dtype_name(s.dt)) + " nb=" + std::to_string(s.nb) +
           " bs=" + std::to_string(s.bs) + " nh=" + std::to_string(s.nh) +
           " d=" + std::to_string(s.d) + " pad=" + std::to_string(s.pad);
  c.buffers.resize(kNumBufs);
  c.buffer_names = {"key",     "key_cache", "slot_mapping", "compress_lens", "compress_seq_offsets",
                    "seq_lens"};
  const std::int64_t key_elems = s.four ? s.batch * s.seq * s.nh * s.d : s.tokens * s.nh * s.d;
  c.buffers[kKey] = random_bytes(rng, static_cast<std::size_t>(key_elems * es));
  if (s.four) make_finite(c.buffers[kKey], s.dt);
  c.buffers[kCache] = random_bytes(rng, static_cast<std::size_t>(s.nb * (s.bs * row + s.pad) * es));
  c.buffers[kSlots] = as_int64(slots);
  c.buffers[kLens] = as_int64(lens);
  c.buffers[kOffsets] = as_int64(offs);
  c.buffers[kSeq] = as_int64(seq);
  for (int i = 0; i < kNumBufs; ++i) c.misalign.push_back(rng() % 4 == 0 ? rng() % 8 : 0);
  c.expect_error = bad;
  c.run = [s, row](const std::vector<std::uint8_t*>& data, bool reference) {
    const DType idx = DType::int64;
    TensorView key, cache;
    ScatterPaCacheOptions o;
    TensorView slot_view;
    if (!s.four) {
      // The buffers hold rows of s.d bytes for packed FP4, whose views count elements.
      const std::int64_t e = dtype_bits(s.dt) == 4 ? 2 : 1;
      key = TensorView(data[kKey], s.dt, {s.tokens, s.nh, e * s.d});
      const std::int64_t shape[] = {s.nb, s.bs, s.nh, e * s.d},
                         strides[] = {e * (s.bs * row + s.pad), e * row, e * s.d, 1};
      cache = TensorView(data[kCache], s.dt, shape, strides);
      slot_view = TensorView(data[kSlots], idx, {s.tokens});
    } else {
      key = TensorView(data[kKey], s.dt, {s.batch, s.seq, s.nh, s.d});
      const std::int64_t shape[] = {s.nb, s.bs, 1, s.d},
                         strides[] = {s.bs * row + s.pad, row, s.d, 1};
      cache = TensorView(data[kCache], s.dt, shape, strides);
      slot_view = TensorView(data[kSlots], idx, {s.batch, s.nh});
      o.seq_lens = TensorView(data[kSeq], idx, {s.batch});
      o.compress_lens = TensorView(data[kLens], idx, {s.batch * s.nh});
      if (s.reduce_mean) o.compress_seq_offsets = TensorView(data[kOffsets], idx, {s.batch * s.nh});
    }
    const ScatterPaCachePlan plan = plan_scatter_pa_cache(key, cache, slot_view, o);
    if (reference)
      reference::execute(plan);
    else
      execute(plan);
  };
  return c;
}

}  // namespace
}  // namespace kvscatter::harness

KVS_HARNESS_CASES(scatter_pa_cache, kvscatter::harness::generate, 300);
