// Harness cases of IndexerQuantCache: the four modes with every cache and x dtype, both
// round_scale settings, x of rank 2 to 4 with padded rows, rows wider than d, skipped rows, the
// last slot, duplicate slots, empty inputs, caches strided along the block axis, unaligned
// buffers, values across the whole range (zeros, subnormals, huge, non-finite, the scale rules'
// edges), int32 and int64 slot mappings (contiguous or not), batches long enough to be split
// across threads, and calls that must fail (a slot that is neither -1 nor in the cache).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "kvscatter/formats.h"
#include "kvscatter/indexer_quant_cache.h"

namespace kvscatter::harness {
namespace {

enum Buf { kCache, kScale, kX, kSlots, kNumBufs };

std::int64_t pick(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}

std::vector<std::uint8_t> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

struct Geometry {
  IndexerQuantCacheOptions opt;
  DType xdt = DType::float16, cdt = DType::float8_e4m3fn, sdt = DType::float32;
  std::int64_t d = 32, rows = 0, lead = 1, nb = 1, bs = 1, w = 32, ws = 1, pad = 0, xpad = 0;
  bool slots32 = false;          // int32 slot_mapping
  std::int64_t slot_stride = 1;  // elements between slot_mapping entries (2: not contiguous)
};

Geometry random_geometry(std::mt19937_64& rng) {
  Geometry g;
  g.opt.quant_mode = static_cast<IndexerQuantMode>(rng() % 4);
  g.opt.round_scale = rng() % 2;
  g.opt.x_scale = std::ldexp(1.0f, static_cast<int>(pick(rng, -6, 6))) * (rng() % 2 ? 1.0f : 0.7f);
  g.xdt = rng() % 2 ? DType::float16 : DType::bfloat16;
  g.d = 32 * pick(rng, 1, 8);
  g.rows = rng() % 10 == 0 ? 0 : pick(rng, 1, 30);
  if (rng() % 8 == 0) {  // past one thread's grain (256 rows of d = 32): several chunks, deduped
    g.d = 32;
    g.rows = pick(rng, 200, 600);
  }
  g.slots32 = rng() % 4 == 0;
  g.slot_stride = rng() % 6 == 0 ? 2 : 1;
  g.lead = g.rows > 0 && rng() % 3 == 0 ? (g.rows % 2 == 0 ? 2 : 1) : 1;
  g.nb = pick(rng, 1, 5);
  g.bs = pick(rng, 1, 8);
  if (g.rows > 100) g.nb = pick(rng, 30, 90);  // room for mostly distinct slots
  const auto m = g.opt.quant_mode;
  const bool mx = m == IndexerQuantMode::mxfp8 || m == IndexerQuantMode::mxfp4;
  if (m == IndexerQuantMode::hifloat8) {
    g.cdt = rng() % 2 ? DType::uint8 : DType::hifloat8;
  } else if (m == IndexerQuantMode::mxfp4) {
    g.cdt = rng() % 2 ? DType::float4_e2m1 : DType::float4_e1m2;
  } else {
    g.cdt = rng() % 2 ? DType::float8_e4m3fn : DType::float8_e5m2;
  }
  g.sdt = mx ? (rng() % 2 ? DType::float8_e8m0 : DType::uint8) : DType::float32;
  g.w = (m == IndexerQuantMode::mxfp4 ? g.d / 2 : g.d) + pick(rng, 0, 3) * (rng() % 2);
  g.ws = (mx ? g.d / 32 : 1) + pick(rng, 0, 2) * (rng() % 2);
  g.pad = rng() % 3 == 0 ? pick(rng, 1, 50) : 0;
  g.xpad = rng() % 3 == 0 ? pick(rng, 1, 7) : 0;
  return g;
}

// Some cases get whole rows or single 32-groups of +0 or -0 (a group holding a zero leaves the
// fast path's plain test; an all-zero one has a zero scale input).
void zero_spans(std::mt19937_64& rng, const Geometry& g, std::vector<std::uint8_t>& x) {
  if (rng() % 3 != 0) return;
  const std::int64_t pitch = g.d + g.xpad;
  for (std::int64_t r = 0; r < g.rows; ++r) {
    if (rng() % 4 != 0) continue;
    const bool row = rng() % 2 == 0;
    const std::int64_t begin = row ? 0 : 32 * pick(rng, 0, g.d / 32 - 1);
    const std::int64_t end = row ? g.d : begin + 32;
    const std::uint16_t zero = rng() % 2 ? 0x8000 : 0;
    for (std::int64_t k = begin; k < end; ++k) std::memcpy(&x[2 * (r * pitch + k)], &zero, 2);
  }
}

// x values: normal-distributed at a random scale. Per case, specials (zeros, signed zeros,
// subnormal-sized and huge values; with `nonfinite`, infinities and NaNs) are absent, rare or
// frequent, so the kernel's exact fast path, its per-group fallbacks and its general path are
// all reached. Some elements sit at a scale rule's edges: 448 * 2^j (a group whose largest
// magnitude it is quantizes exactly to the largest e4m3 code) or the next value of x's type
// above it (the scale doubles), and 2^-6 to 2^-10 of such a value (quotients around e4m3's
// subnormal range).
std::vector<std::uint8_t> random_x(std::mt19937_64& rng, const Geometry& g, std::size_t count) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float spread = std::ldexp(1.0f, static_cast<int>(pick(rng, -30, 12)));
  const std::uint64_t rates[] = {0, 512, 32};
  const std::uint64_t rate = rates[rng() % 3];
  const bool nonfinite = rng() % 4 == 0;
  std::vector<std::uint8_t> out(count * 2);
  for (std::size_t i = 0; i < count; ++i) {
    float f = nd(rng) * spread;
    const auto r = rate == 0 ? rate : rng() % rate;
    if (rate != 0 && r == 0) f = 0.0f;
    if (r == 1) f = -0.0f;
    if (r == 2) f = std::ldexp(nd(rng), -20);
    if (r == 3) f = 30000.0f * (rng() % 2 ? 1.0f : -1.0f);
    if (r == 4) f = std::ldexp(nd(rng), -140);  // a bfloat16 subnormal (float16: zero)
    if (r == 5 && nonfinite) f = rng() % 2 ? INFINITY : -INFINITY;
    if (r == 6 && nonfinite) f = std::nanf("");
    if (r == 7 || r == 8) {
      const int j = static_cast<int>(pick(rng, -12, 12));
      f = std::ldexp(448.0f, j) * (rng() % 2 ? 1.0f : -1.0f);
      if (r == 8) f = std::nextafter(f, 2 * f);  // rounds up to the next value of x's type
      if (rng() % 3 == 0) f = std::ldexp(f, -static_cast<int>(pick(rng, 6, 10)));
    }
    auto code = static_cast<std::uint16_t>(formats::encode(g.xdt, f));
    if (r == 8) {  // the next value of x's type above |f| (round-to-nearest may have gone down)
      if (std::fabs(formats::decode(g.xdt, code)) < std::fabs(f)) ++code;
    }
    if (!nonfinite && !std::isfinite(formats::decode(g.xdt, code))) code = 0;
    std::memcpy(out.data() + 2 * i, &code, 2);
  }
  zero_spans(rng, g, out);
  return out;
}

Case generate(std::mt19937_64& rng) {
  const Geometry g = random_geometry(rng);
  const std::int64_t ns = g.nb * g.bs;
  std::vector<std::int64_t> slots(static_cast<std::size_t>(g.rows));
  // Some cases write runs of consecutive slots, as a prefill does, across block boundaries.
  const bool runs = rng() % 4 == 0;
  const std::int64_t start = pick(rng, 0, ns - 1);
  for (std::size_t t = 0; t < slots.size(); ++t) {
    const auto r = rng() % 8;
    std::int64_t& s = slots[t];
    s = r == 0 ? -1 : r == 1 ? ns - 1 : r == 2 && !slots.empty() ? slots[0] : pick(rng, 0, ns - 1);
    if (runs && r > 1) s = (start + static_cast<std::int64_t>(t)) % ns;
  }
  const bool bad = g.rows > 0 && rng() % 12 == 0;
  if (bad) slots.back() = rng() % 2 ? ns : -2;
  Case c;
  c.name = std::string("indexer_quant_cache mode ") +
           std::to_string(static_cast<int>(g.opt.quant_mode)) + " " +
           std::string(dtype_name(g.xdt)) + "->" + std::string(dtype_name(g.cdt)) +
           " d=" + std::to_string(g.d) + " rows=" + std::to_string(g.rows) +
           (g.opt.round_scale ? " round" : " exact");
  const std::size_t ssz = dtype_size(g.sdt);
  c.buffers.resize(kNumBufs);
  c.buffer_names = {"cache", "cache_scale", "x", "slot_mapping"};
  c.buffers[kCache] = random_bytes(rng, static_cast<std::size_t>(g.nb * (g.bs * g.w + g.pad)));
  c.buffers[kScale] = random_bytes(rng, static_cast<std::size_t>(g.nb * g.bs * g.ws) * ssz);
  c.buffers[kX] = random_x(rng, g, static_cast<std::size_t>(g.rows * (g.d + g.xpad)));
  const std::size_t isz = g.slots32 ? 4 : 8, istep = isz * static_cast<std::size_t>(g.slot_stride);
  c.buffers[kSlots].assign(slots.size() * istep, 0xAB);
  for (std::size_t t = 0; t < slots.size(); ++t) {
    const auto v32 = static_cast<std::int32_t>(slots[t]);
    std::memcpy(c.buffers[kSlots].data() + t * istep,
                g.slots32 ? static_cast<const void*>(&v32) : static_cast<const void*>(&slots[t]),
                isz);
  }
  for (int i = 0; i < kNumBufs; ++i)
    c.misalign.push_back(i == kScale ? 0 : (rng() % 4 == 0 ? 2 * (rng() % 4) : 0));
  c.expect_error = bad;
  c.run = [g](const std::vector<std::uint8_t*>& data, bool reference) {
    // The buffers hold rows of g.w bytes; a packed FP4 view counts elements, two per byte.
    const std::int64_t e = dtype_bits(g.cdt) == 4 ? 2 : 1;
    const std::int64_t cshape[] = {g.nb, g.bs, 1, e * g.w},
                       cstr[] = {e * (g.bs * g.w + g.pad), e * g.w, e * g.w, 1};
    const std::int64_t outer = g.rows / g.lead;
    const std::int64_t xshape[] = {g.lead, outer, g.d},
                       xstr[] = {outer * (g.d + g.xpad), g.d + g.xpad, 1};
    const std::int64_t sshape[] = {g.lead, outer}, sstr[] = {outer * g.slot_stride, g.slot_stride};
    const IndexerQuantCachePlan plan = plan_indexer_quant_cache(
        TensorView(data[kCache], g.cdt, cshape, cstr),
        TensorView(data[kScale], g.sdt, {g.nb, g.bs, 1, g.ws}),
        TensorView(data[kX], g.xdt, xshape, xstr),
        TensorView(data[kSlots], g.slots32 ? DType::int32 : DType::int64, sshape, sstr), g.opt);
    if (reference)
      reference::execute(plan);
    else
      execute(plan);
  };
  return c;
}

}  // namespace
}  // namespace kvscatter::harness

KVS_HARNESS_CASES(indexer_quant_cache, kvscatter::harness::generate, 400);
