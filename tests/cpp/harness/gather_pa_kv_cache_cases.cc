// Harness cases of GatherPaKvCache: Norm and PA_NZ, every cache dtype, key-only
// calls, plain and cumulative lengths, seq_offset, padding blocks, the last
// block, repeated block ids, empty batches, odd head sizes, strided caches and
// output rows, unaligned buffers, and calls that must fail (an id past the
// cache, a table too short) leaving every buffer untouched.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "kvscatter/gather_pa_kv_cache.h"

namespace kvscatter::harness {
namespace {

enum Buf { kKeyCache, kValueCache, kTables, kLens, kOffsets, kKey, kValue, kNumBufs };

std::int64_t pick(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}

std::vector<std::uint8_t> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

template <class T>
std::vector<std::uint8_t> as_bytes(const std::vector<std::int64_t>& v) {
  std::vector<std::uint8_t> out(v.size() * sizeof(T));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const T x = static_cast<T>(v[i]);
    std::memcpy(out.data() + i * sizeof(T), &x, sizeof(T));
  }
  return out;
}

struct Geometry {
  bool nz = false, with_value = true, cumsum = false, with_offset = false, wide = false;
  DType kd = DType::float16, vd = DType::float16;
  std::int64_t nb = 1, bs = 1, heads = 1, dk = 1, dv = 1, batch = 0, width = 1, rows = 0;
  std::int64_t kpad = 0, vpad = 0,
               opad = 0;  // extra elements per cache block / output row
};

// Shapes and strides of one cache / output pair.
struct SideShape {
  std::int64_t c1, lanes, row, block;
};

SideShape side_shape(const Geometry& g, DType d, std::int64_t head) {
  if (!g.nz) return {g.heads, head, g.heads * head, g.bs * g.heads * head};
  const auto lanes = static_cast<std::int64_t>(32 / dtype_size(d));
  return {head, lanes, head * lanes, g.bs * head * lanes};  // head counts 32-byte chunks
}

TensorView cache_view(std::uint8_t* p, const Geometry& g, DType d, const SideShape& s,
                      std::int64_t pad) {
  if (g.nz) {
    const std::int64_t shape[] = {g.nb, s.c1, g.bs, s.lanes},
                       strides[] = {s.block + pad, g.bs * s.lanes, s.lanes, 1};
    return TensorView(p, d, shape, strides);
  }
  const std::int64_t shape[] = {g.nb, g.bs, g.heads, s.lanes},
                     strides[] = {s.block + pad, g.heads * s.lanes, s.lanes, 1};
  return TensorView(p, d, shape, strides);
}

TensorView out_view(std::uint8_t* p, const Geometry& g, DType d, const SideShape& s) {
  if (g.nz) {
    const std::int64_t shape[] = {g.rows, s.row}, strides[] = {s.row + g.opad, 1};
    return TensorView(p, d, shape, strides);
  }
  const std::int64_t shape[] = {g.rows, g.heads, s.lanes}, strides[] = {s.row + g.opad, s.lanes, 1};
  return TensorView(p, d, shape, strides);
}

Geometry random_geometry(std::mt19937_64& rng) {
  static const DType kTypes[] = {DType::float32,  DType::float16,     DType::bfloat16,
                                 DType::int8,     DType::uint8,       DType::int16,
                                 DType::uint16,   DType::int32,       DType::uint32,
                                 DType::hifloat8, DType::float8_e5m2, DType::float8_e4m3fn};
  Geometry g;
  g.nz = rng() % 3 == 0;
  g.kd = kTypes[rng() % 12];
  g.vd = g.nz && rng() % 2 ? kTypes[rng() % 12] : g.kd;
  g.with_value = rng() % 4 != 0;
  g.cumsum = rng() % 2;
  g.with_offset = rng() % 3 == 0;
  g.wide = rng() % 2;
  g.nb = pick(rng, 1, 12);
  g.bs = pick(rng, 1, 20);
  g.heads = pick(rng, 1, 3);
  g.dk = g.nz ? pick(rng, 1, 3) : pick(rng, 1, 70);
  g.dv = g.nz ? pick(rng, 1, 3) : pick(rng, 1, 70);
  g.batch = rng() % 10 == 0 ? 0 : pick(rng, 1, 6);
  g.width = pick(rng, 1, 5);
  if (rng() % 3 == 0) g.kpad = pick(rng, 1, 40), g.vpad = pick(rng, 1, 40);
  if (rng() % 3 == 0) g.opad = pick(rng, 1, 9);
  return g;
}

Case generate(std::mt19937_64& rng) {
  Geometry g = random_geometry(rng);
  const SideShape ks = side_shape(g, g.kd, g.dk), vs = side_shape(g, g.vd, g.dv);
  std::vector<std::int64_t> lens(static_cast<std::size_t>(g.batch)), offs(lens.size());
  std::vector<std::int64_t> tables(static_cast<std::size_t>(g.batch * g.width));
  std::int64_t total = 0;
  for (std::size_t b = 0; b < lens.size(); ++b) {
    const std::int64_t shift = g.with_offset ? pick(rng, 0, g.width - 1) : 0;
    offs[b] = shift * g.bs + pick(rng, 0, g.bs - 1);
    lens[b] = rng() % 6 == 0 ? 0 : pick(rng, 0, (g.width - shift) * g.bs);
    total += lens[b];
  }
  for (auto& id : tables) {  // padding, the last block and repeats are all frequent
    const auto r = rng() % 8;
    id = r == 0 ? -1 : r == 1 ? g.nb - 1 : r == 2 ? 0 : pick(rng, 0, g.nb - 1);
  }
  bool expect_error = false;
  if (g.batch > 0 && rng() % 10 == 0) {  // a bad call: id past the cache or a table too short
    expect_error = true;
    if (rng() % 2) {
      std::fill(tables.begin(), tables.end(), g.nb);
      lens[0] = std::max<std::int64_t>(lens[0], 1);
    } else {
      lens[0] = (g.width + 1) * g.bs;
      offs[0] = 0;
    }
    total = 0;
    for (auto n : lens) total += n;
  }
  g.rows = total + pick(rng, 0, 2);
  std::vector<std::int64_t> lens_in = lens;
  if (g.cumsum) {
    lens_in.assign(1, 0);
    for (auto n : lens) lens_in.push_back(lens_in.back() + n);
  }
  const auto esz = [](DType d) { return dtype_size(d); };
  Case c;
  c.name = std::string(g.nz ? "PA_NZ " : "Norm ") + std::string(dtype_name(g.kd)) + "/" +
           std::string(dtype_name(g.vd)) + " nb=" + std::to_string(g.nb) +
           " bs=" + std::to_string(g.bs) + " heads=" + std::to_string(g.heads) +
           " dk=" + std::to_string(g.dk) + " dv=" + std::to_string(g.dv) +
           " batch=" + std::to_string(g.batch) + " width=" + std::to_string(g.width) +
           (g.with_value ? "" : " key-only") + (g.cumsum ? " cumsum" : "") +
           (g.with_offset ? " seq_offset" : "") + (g.wide ? " int64" : " int32");
  c.buffers.resize(kNumBufs);
  c.buffer_names = {"key_cache",  "value_cache", "block_tables", "seq_lens",
                    "seq_offset", "key",         "value"};
  c.buffers[kKeyCache] =
      random_bytes(rng, static_cast<std::size_t>(g.nb * (ks.block + g.kpad)) * esz(g.kd));
  c.buffers[kValueCache] =
      random_bytes(rng, static_cast<std::size_t>(g.nb * (vs.block + g.vpad)) * esz(g.vd));
  c.buffers[kTables] = g.wide ? as_bytes<std::int64_t>(tables) : as_bytes<std::int32_t>(tables);
  c.buffers[kLens] = g.wide ? as_bytes<std::int64_t>(lens_in) : as_bytes<std::int32_t>(lens_in);
  c.buffers[kOffsets] = g.wide ? as_bytes<std::int64_t>(offs) : as_bytes<std::int32_t>(offs);
  c.buffers[kKey] =
      random_bytes(rng, static_cast<std::size_t>(g.rows * (ks.row + g.opad)) * esz(g.kd));
  c.buffers[kValue] =
      random_bytes(rng, static_cast<std::size_t>(g.rows * (vs.row + g.opad)) * esz(g.vd));
  for (int i = 0; i < kNumBufs; ++i) c.misalign.push_back(rng() % 4 == 0 ? rng() % 8 : 0);
  c.expect_error = expect_error;
  const auto nlens = static_cast<std::int64_t>(lens_in.size());
  c.run = [g, ks, vs, nlens](const std::vector<std::uint8_t*>& data, bool reference) {
    const DType idx = g.wide ? DType::int64 : DType::int32;
    std::optional<TensorView> vc, v;
    if (g.with_value) {
      vc = cache_view(data[kValueCache], g, g.vd, vs, g.vpad);
      v = out_view(data[kValue], g, g.vd, vs);
    }
    GatherPaKvCacheOptions opt;
    opt.cache_mode = g.nz ? CacheMode::PA_NZ : CacheMode::Norm;
    opt.is_seq_lens_cumsum = g.cumsum;
    if (g.with_offset) opt.seq_offset = TensorView(data[kOffsets], idx, {g.batch});
    const GatherPaKvCachePlan plan = plan_gather_pa_kv_cache(
        cache_view(data[kKeyCache], g, g.kd, ks, g.kpad), vc,
        TensorView(data[kTables], idx, {g.batch, g.width}), TensorView(data[kLens], idx, {nlens}),
        out_view(data[kKey], g, g.kd, ks), v, opt);
    if (reference)
      reference::execute(plan);
    else
      execute(plan);
  };
  return c;
}

}  // namespace
}  // namespace kvscatter::harness

KVS_HARNESS_CASES(gather_pa_kv_cache, kvscatter::harness::generate, 300);
