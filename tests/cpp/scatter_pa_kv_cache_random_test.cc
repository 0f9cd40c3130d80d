// Randomized grid: the optimized kernel against the reference, byte for byte, over every mode,
// the twelve dtypes, int32/int64 index tensors and shapes from 1 to 4,096 tokens, head sizes 1
// to 576 and block sizes 1 to 256, with padding slots, the last slot, duplicate slots, strided
// and unaligned views and guard bytes around every cache. KVSCATTER_TEST_SEED overrides the seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/streaming.h"
#include "kvscatter/formats.h"
#include "kvscatter/runtime.h"
#include "scatter_pa_kv_cache_util.h"
#include "simd_targets.h"

namespace kvscatter::testing {
namespace {

constexpr DType kDtypes[] = {DType::float32,  DType::float16,     DType::bfloat16,
                             DType::int8,     DType::uint8,       DType::int16,
                             DType::uint16,   DType::int32,       DType::uint32,
                             DType::hifloat8, DType::float8_e5m2, DType::float8_e4m3fn};

enum class Kind { Norm, Nct, Nhsd, Nz4, Nz5, Alibi3, Rope3, Omni3, Alibi4, Rope4 };
constexpr Kind kKinds[] = {Kind::Norm,   Kind::Nct,   Kind::Nhsd,  Kind::Nz4,    Kind::Nz5,
                           Kind::Alibi3, Kind::Rope3, Kind::Omni3, Kind::Alibi4, Kind::Rope4};
const char* kind_name(Kind k) {
  const char* names[] = {"Norm",    "Nct",    "NHSD",   "PaNz4D",  "PaNz5D",
                         "Alibi3D", "Rope3D", "Omni3D", "Alibi4D", "Rope4D"};
  return names[static_cast<int>(k)];
}

constexpr std::size_t kGuard = 64;  // bytes before and after every cache

std::uint64_t base_seed() {
  if (const char* s = std::getenv("KVSCATTER_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return 20250101;
}

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(std::uint64_t seed) : rng(seed) {}
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {  // inclusive
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  std::int64_t log_uniform(std::int64_t lo, std::int64_t hi) {
    const double a = std::log(double(lo)), b = std::log(double(hi) + 1);
    const auto v =
        static_cast<std::int64_t>(std::exp(std::uniform_real_distribution<double>(a, b)(rng)));
    return std::clamp<std::int64_t>(v, lo, hi);
  }
  DType dtype() { return kDtypes[uniform(0, 11)]; }
  void fill(std::vector<unsigned char>& v) {
    for (std::size_t i = 0; i + 8 <= v.size(); i += 8) {
      const std::uint64_t x = rng();
      std::memcpy(&v[i], &x, 8);
    }
    for (std::size_t i = v.size() / 8 * 8; i < v.size(); ++i)
      v[i] = static_cast<unsigned char>(rng());
  }
};

// A tensor with optional padding in its strides, an unaligned start and guard bytes.
// Padding may be added to the strides of axes 0 .. max_pad_axis-1 (0: contiguous).
Buf make_tensor(Gen& g, DType dt, std::vector<std::int64_t> shape, int max_pad_axis, bool guard) {
  Buf b;
  b.dtype = dt;
  b.shape = shape;
  const int rank = static_cast<int>(shape.size());
  b.strides.assign(shape.size(), 1);
  std::int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    b.strides[i] = s;
    std::int64_t next = s * std::max<std::int64_t>(shape[i], 1);
    if (i > 0 && i <= max_pad_axis && g.chance(0.3)) next += g.uniform(1, 9);
    s = next;
  }
  std::int64_t extent = 1;
  for (int i = 0; i < rank; ++i) extent += (shape[i] - 1) * b.strides[i];
  for (auto d : shape)
    if (d == 0) extent = 0;
  const std::size_t es = dtype_size(dt);
  const std::size_t mis = g.chance(0.3) ? static_cast<std::size_t>(g.uniform(1, 7)) : 0;
  const std::size_t pad = guard ? kGuard : 0;
  b.offset = pad + mis;
  b.bytes.resize(pad + mis + static_cast<std::size_t>(extent) * es + pad);
  g.fill(b.bytes);
  return b;
}

// Random element codes that decode to a non-NaN value (the Rope mean of two different NaN
// payloads depends on operand order, which no spec fixes).
void fill_no_nan(Gen& g, Buf& b) {
  if (!dtype_is_floating(b.dtype)) return;
  const std::size_t es = dtype_size(b.dtype);
  for (std::size_t i = b.offset % es; i + es <= b.bytes.size(); i += es) {
    for (;;) {
      std::uint32_t code = 0;
      std::memcpy(&code, &b.bytes[i], es);
      const float v =
          b.dtype == DType::float32 ? std::bit_cast<float>(code) : formats::decode(b.dtype, code);
      if (!std::isnan(v)) break;
      const std::uint64_t r = g.rng();
      std::memcpy(&b.bytes[i], &r, es);
    }
  }
}

struct Case {
  Call call;
  std::string desc;
};

// Slots for T tokens over ns slots: unique by default, with padding, the last slot, duplicates.
std::vector<std::int64_t> make_slots(Gen& g, std::int64_t t, std::int64_t ns,
                                     std::ostringstream& d) {
  std::vector<std::int64_t> slots(static_cast<std::size_t>(t));
  if (g.chance(0.15) && t <= ns) {  // a prefill into consecutive slots
    const std::int64_t start = g.uniform(0, ns - t);
    for (std::int64_t i = 0; i < t; ++i) slots[i] = start + i;
    d << " consecutive";
  } else {
    std::vector<std::int64_t> pool(static_cast<std::size_t>(ns));
    for (std::int64_t i = 0; i < ns; ++i) pool[i] = i;
    for (std::int64_t i = 0; i < t; ++i) {
      if (i < ns) {
        std::swap(pool[i], pool[g.uniform(i, ns - 1)]);
        slots[i] = pool[i];
      } else {
        slots[i] = -1;
      }
    }
  }
  if (g.chance(0.4)) {
    slots[g.uniform(0, t - 1)] = ns - 1;  // the very last slot (may duplicate)
    d << " last-slot";
  }
  if (g.chance(0.35)) {
    const std::int64_t n = g.uniform(1, std::max<std::int64_t>(1, t / 4));
    for (std::int64_t i = 0; i < n; ++i)
      slots[g.uniform(0, t - 1)] = g.chance(0.5) ? -1 : -g.uniform(2, 1000);
    d << " padding";
  }
  if (g.chance(0.3) && t > 1) {
    const std::int64_t n = g.uniform(1, std::max<std::int64_t>(1, t / 3));
    for (std::int64_t i = 0; i < n; ++i) slots[g.uniform(0, t - 1)] = slots[g.uniform(0, t - 1)];
    d << " duplicates";
  }
  return slots;
}

// Element budget per case: mostly small, sometimes large, so the grid stays fast.
std::int64_t budget(Gen& g) {
  if (g.chance(0.03)) return 2'000'000;
  if (g.chance(0.12)) return 300'000;
  return 20'000;
}

// Edge shapes forced every few cases: 0 none, 1 the most tokens, 2 the largest head, 3 the
// largest block, 4 one-slot blocks.
Case slot_case(Gen& g, Kind kind, int edge) {
  Case c;
  std::ostringstream d;
  Call& call = c.call;
  const DType kdt = g.dtype();
  const DType vdt = (kind == Kind::Nz4 || kind == Kind::Nz5) && g.chance(0.5) ? g.dtype() : kdt;
  const DType idt = g.chance(0.5) ? DType::int32 : DType::int64;
  const bool nz = kind == Kind::Nz4 || kind == Kind::Nz5;
  const std::int64_t lk = 32 / static_cast<std::int64_t>(dtype_size(kdt));
  const std::int64_t lv = 32 / static_cast<std::int64_t>(dtype_size(vdt));
  const std::int64_t lim = budget(g);
  std::int64_t t = g.log_uniform(1, 4096);
  std::int64_t dk = nz ? lk * g.log_uniform(1, 576 / lk) : g.log_uniform(1, 576);
  std::int64_t dv = g.chance(0.5) ? (nz ? lv * g.log_uniform(1, 576 / lv) : g.log_uniform(1, 576))
                                  : (nz ? std::max<std::int64_t>(lv, dk / lv * lv) : dk);
  std::int64_t nh = g.log_uniform(1, 16);
  if (edge == 1) {
    t = 4096;
    dk = dv = nz ? std::max(lk, lv) : g.uniform(1, 8);
    nh = 1;
  }
  if (edge == 2) {
    dk = 576;
    dv = nz ? 576 : g.uniform(1, 576);
    t = g.uniform(1, 40);
  }
  while (nh > 1 && t * nh * std::max(dk, dv) > lim) --nh;
  while (edge != 1 && t > 1 && t * nh * std::max(dk, dv) > lim) t = t * 2 / 3;
  const std::int64_t bs = edge == 3 ? 256 : edge == 4 ? 1 : g.log_uniform(1, 256);
  const std::int64_t nb = (t * g.uniform(10, 30) / 10 + bs - 1) / bs + g.uniform(0, 2);
  const std::int64_t ns = nb * bs;
  const bool with_value = g.chance(0.8);
  d << kind_name(kind) << " key " << dtype_name(kdt) << " value "
    << (with_value ? dtype_name(vdt) : "absent") << " index " << dtype_name(idt) << " T=" << t
    << " NH=" << nh << " Dk=" << dk << " Dv=" << dv << " bs=" << bs << " nb=" << nb;

  call.slot = index_buf(idt, make_slots(g, t, ns, d));
  call.has_value = with_value;
  auto cache = [&](DType dt, std::int64_t hd) {
    const std::int64_t l = 32 / static_cast<std::int64_t>(dtype_size(dt));
    std::vector<std::int64_t> shape;
    switch (kind) {
      case Kind::Nhsd:
        shape = {nb, nh, bs, hd};
        break;
      case Kind::Nz4:
        shape = {nb, nh * hd / l, bs, l};
        break;
      case Kind::Nz5:
        shape = {nb, nh, hd / l, bs, l};
        break;
      default:
        shape = {nb, bs, nh, hd};
        break;
    }
    return make_tensor(g, dt, shape, /*max_pad_axis=*/1, /*guard=*/true);
  };
  call.key_cache = cache(kdt, dk);
  if (with_value) call.value_cache = cache(vdt, dv);

  if (kind == Kind::Nct) {
    // A fused buffer: row t at offset + t*stride, the view's strides[0] is the buffer pitch.
    auto side = [&](DType dt, std::int64_t hd, std::int64_t& stride, std::int64_t& offset) {
      const std::int64_t row = nh * hd;
      stride = g.chance(0.1) ? g.uniform(0, row) : row + g.uniform(0, 2 * row);
      offset = g.chance(0.5) ? 0 : g.uniform(0, row);
      const std::int64_t need = offset + (t - 1) * stride + row;
      const std::int64_t pitch = (need + t - 1) / t + g.uniform(0, 3);
      Buf b = make_tensor(g, dt, {t * pitch}, 0, false);
      b.shape = {t, nh, hd};
      b.strides = {pitch, hd, 1};
      return b;
    };
    std::array<std::int64_t, 2> st{}, of{};
    call.key = side(kdt, dk, st[0], of[0]);
    if (with_value) call.value = side(vdt, dv, st[1], of[1]);
    call.opts.scatter_mode = ScatterMode::Nct;
    call.opts.strides = st;
    call.opts.offsets = of;
    d << " strides [" << st[0] << ", " << st[1] << "] offsets [" << of[0] << ", " << of[1] << "]";
  } else {
    call.key = make_tensor(g, kdt, {t, nh, dk}, 2, false);
    if (with_value) call.value = make_tensor(g, vdt, {t, nh, dv}, 2, false);
    if (kind == Kind::Nhsd) call.opts.scatter_mode = ScatterMode::NHSD;
    if (nz) call.opts.cache_mode = CacheMode::PA_NZ;
  }
  c.desc = d.str();
  return c;
}

// Rows a (batch, head) run writes, as the spec's pseudo-code normalises it.
std::int64_t run_rows(Kind kind, std::int64_t l, std::int64_t w, std::int64_t o) {
  if (kind == Kind::Alibi3 || kind == Kind::Alibi4) return w;
  if (o == -1 || w == 0 || o == l) return l;
  return kind == Kind::Omni3 ? l - w : l - w + 1;
}

Case compress_case(Gen& g, Kind kind) {
  Case c;
  std::ostringstream d;
  Call& call = c.call;
  const bool four = kind == Kind::Alibi4 || kind == Kind::Rope4;
  const bool rope = kind == Kind::Rope3 || kind == Kind::Rope4;
  const bool alibi = kind == Kind::Alibi3 || kind == Kind::Alibi4;
  const DType dt = g.dtype();
  const DType idt = g.chance(0.5) ? DType::int32 : DType::int64;
  const std::int64_t lim = budget(g);
  const std::int64_t b = g.uniform(1, 6);
  std::int64_t nh = g.uniform(1, 8);
  const std::int64_t dk = g.log_uniform(1, 576);
  const std::int64_t dv = four && g.chance(0.5) ? g.log_uniform(1, 576) : dk;
  std::int64_t max_len = std::max<std::int64_t>(1, lim / (b * nh * std::max(dk, dv)));
  max_len = std::min<std::int64_t>(max_len, 4096 / b);
  const std::int64_t s = four ? g.uniform(0, max_len) : 0;
  std::vector<std::int64_t> seq(b), lens(b * nh), offs(b * nh), starts(b * nh);
  std::int64_t total_tokens = 0;
  for (auto& l : seq) {
    l = four ? g.uniform(0, s) : g.uniform(0, max_len);
    total_tokens += l;
  }
  std::vector<std::int64_t> rows(b * nh);
  std::int64_t total_rows = 0;
  for (std::int64_t i = 0; i < b * nh; ++i) {
    const std::int64_t l = seq[i / nh];
    if (alibi) {
      lens[i] = g.uniform(0, l);
    } else if (!four && g.chance(0.15)) {
      offs[i] = -1;
      lens[i] = g.uniform(0, l + 2);
    } else {
      offs[i] = g.uniform(0, l);
      lens[i] = g.chance(0.1) ? 0 : g.uniform(0, l - offs[i]);
    }
    rows[i] = run_rows(kind, l, lens[i], offs[i]);
    total_rows += rows[i];
  }
  const std::int64_t bs = g.log_uniform(1, 256);
  const std::int64_t nb = (total_rows + total_rows / 4 + bs) / bs + g.uniform(0, 1);
  const std::int64_t ns = nb * bs;
  // Runs placed one after another with gaps, sometimes overlapping, sometimes skipped.
  std::int64_t cursor = 0;
  for (std::int64_t i = 0; i < b * nh; ++i) {
    if (g.chance(0.1)) {
      starts[i] = -g.uniform(1, 3);
    } else if (g.chance(0.1)) {
      starts[i] = g.uniform(0, ns - std::max<std::int64_t>(rows[i], 1));  // may overlap (G4)
    } else {
      const std::int64_t gap =
          g.uniform(0, std::max<std::int64_t>(0, (ns - total_rows) / (b * nh + 1)));
      starts[i] = std::min(cursor + gap, ns - std::max<std::int64_t>(rows[i], 1));
      cursor = starts[i] + rows[i];
    }
  }
  if (g.chance(0.3)) {  // a run ending exactly at the last slot
    const std::int64_t i = g.uniform(0, b * nh - 1);
    if (rows[i] > 0) starts[i] = ns - rows[i];
  }
  const bool with_value = g.chance(0.8);
  d << kind_name(kind) << " " << dtype_name(dt) << " value " << (with_value ? "yes" : "absent")
    << " index " << dtype_name(idt) << " B=" << b << " NH=" << nh << " S=" << s
    << " tokens=" << total_tokens << " Dk=" << dk << " Dv=" << dv << " bs=" << bs << " nb=" << nb
    << " rows=" << total_rows;

  const std::vector<std::int64_t> per_head_shape =
      four && g.chance(0.5) ? std::vector<std::int64_t>{b, nh} : std::vector<std::int64_t>{b * nh};
  call.slot = index_buf(idt, starts, per_head_shape);
  call.compress_lens = index_buf(idt, lens, per_head_shape);
  if (!alibi) call.compress_seq_offsets = index_buf(idt, offs);
  call.seq_lens = index_buf(idt, seq);
  call.opts.scatter_mode = kind == Kind::Alibi3  ? ScatterMode::Alibi
                           : kind == Kind::Rope3 ? ScatterMode::Rope
                           : kind == Kind::Omni3 ? ScatterMode::Omni
                           : g.chance(0.5)       ? ScatterMode::None  // 4-D auto-selection
                           : rope                ? ScatterMode::Rope
                                                 : ScatterMode::Alibi;
  auto input = [&](std::int64_t hd) {
    Buf x = four ? make_tensor(g, dt, {b, s, nh, hd}, 3, false)
                 : make_tensor(g, dt, {total_tokens, nh, hd}, 2, false);
    if (rope) fill_no_nan(g, x);
    return x;
  };
  call.key = input(dk);
  call.key_cache = make_tensor(g, dt, {nb, bs, 1, dk}, 1, true);
  call.has_value = with_value;
  if (with_value) {
    call.value = input(dv);
    call.value_cache = make_tensor(g, dt, {nb, bs, 1, dv}, 1, true);
  }
  c.desc = d.str();
  return c;
}

Case make_case(Gen& g, Kind kind, int i = 0) {
  switch (kind) {
    case Kind::Alibi3:
    case Kind::Rope3:
    case Kind::Omni3:
    case Kind::Alibi4:
    case Kind::Rope4:
      return compress_case(g, kind);
    default:
      return slot_case(g, kind, i % 10 < 5 ? i % 10 : 0);
  }
}

constexpr std::int64_t kNever = std::int64_t{1} << 62;
constexpr int kCasesPerKind = 220;  // 10 kinds: 2,200 cases per run

class ScatterPaKvCacheGrid : public ::testing::TestWithParam<Kind> {};

TEST_P(ScatterPaKvCacheGrid, OptimizedMatchesReferenceByteForByte) {
  const Kind kind = GetParam();
  const std::uint64_t seed = base_seed() * 131 + static_cast<std::uint64_t>(kind);
  Gen g(seed);
  const std::vector<std::int64_t> targets = simd_test::simd_targets();
  for (int i = 0; i < kCasesPerKind; ++i) {
    Case c = make_case(g, kind, i);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " case " << i << ": " << c.desc);
    Call opt = c.call, ref = c.call;
    // Every other case takes the non-temporal path of large calls; cases rotate over the SIMD
    // targets.
    const std::int64_t threshold = detail::set_stream_threshold(i % 2 ? 0 : kNever);
    {
      const simd_test::PinTarget pin(targets[static_cast<std::size_t>(i) % targets.size()]);
      ASSERT_NO_THROW(opt.run());
    }
    detail::set_stream_threshold(threshold);
    ASSERT_NO_THROW(ref.run_reference());
    ASSERT_TRUE(opt.key_cache.bytes == ref.key_cache.bytes) << "key_cache differs";
    if (c.call.has_value) {
      ASSERT_TRUE(opt.value_cache.bytes == ref.value_cache.bytes) << "value_cache differs";
    }
    // Guard bytes around the caches are untouched.
    for (const Buf* b : {&opt.key_cache, &opt.value_cache}) {
      if (b->bytes.empty()) continue;
      ASSERT_TRUE(
          std::equal(b->bytes.begin(), b->bytes.begin() + kGuard,
                     (b == &opt.key_cache ? c.call.key_cache : c.call.value_cache).bytes.begin()));
      ASSERT_TRUE(std::equal(
          b->bytes.end() - kGuard, b->bytes.end(),
          (b == &opt.key_cache ? c.call.key_cache : c.call.value_cache).bytes.end() - kGuard));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, ScatterPaKvCacheGrid, ::testing::ValuesIn(kKinds),
                         [](const ::testing::TestParamInfo<Kind>& i) {
                           return kind_name(i.param);
                         });

// G4: calls large enough to be split over threads, with many tokens fighting over few slots
// (or overlapping compress runs), give the reference's bytes for every thread count.
Call big_call(Kind kind, Gen& g) {
  Call c;
  const std::int64_t t = 3000, nh = 4, d = 128;
  c.key = make_tensor(g, DType::bfloat16, {t, nh, d}, 0, false);
  c.value = make_tensor(g, DType::bfloat16, {t, nh, d}, 0, false);
  std::vector<std::int64_t> slots(t);
  for (std::int64_t i = 0; i < t; ++i)
    slots[i] = g.chance(0.5) ? g.uniform(0, 40) : g.uniform(0, 4095);
  c.slot = index_buf(DType::int64, slots);
  if (kind == Kind::Nz4) {
    c.key_cache = make_tensor(g, DType::bfloat16, {32, nh * d / 16, 128, 16}, 0, false);
    c.opts.cache_mode = CacheMode::PA_NZ;
  } else {
    c.key_cache = make_tensor(g, DType::bfloat16, {32, 128, nh, d}, 0, false);
  }
  c.value_cache = c.key_cache;
  if (kind == Kind::Alibi3 || kind == Kind::Rope3) {
    c.seq_lens = index_buf(DType::int64, {1500, 1500});
    std::vector<std::int64_t> lens, offs, starts;
    for (int i = 0; i < 2 * nh; ++i) {
      lens.push_back(kind == Kind::Alibi3 ? 1400 : 7);
      offs.push_back(100 + i);
      starts.push_back(i % 3 == 0 ? 100 + i : 1500 * (i % 2));  // overlapping runs
    }
    c.compress_lens = index_buf(DType::int64, lens);
    if (kind == Kind::Rope3) c.compress_seq_offsets = index_buf(DType::int64, offs);
    c.slot = index_buf(DType::int64, starts);
    c.key_cache = make_tensor(g, DType::bfloat16, {128, 128, 1, d}, 0, false);
    c.value_cache = c.key_cache;
    c.opts.scatter_mode = kind == Kind::Alibi3 ? ScatterMode::Alibi : ScatterMode::Rope;
  }
  return c;
}

TEST(ScatterPaKvCacheThreads, ResultIndependentOfThreadCount) {
  Gen g(base_seed() + 7);
  for (Kind kind : {Kind::Norm, Kind::Nz4, Kind::Alibi3, Kind::Rope3}) {
    for (bool overlap : {true, false}) {
      Call c = big_call(kind, g);
      if (!overlap && c.seq_lens) {
        // Disjoint runs: the parallel path.
        std::vector<std::int64_t> starts;
        for (int i = 0; i < 8; ++i) starts.push_back(i * 1500);
        c.slot = index_buf(DType::int64, starts);
      }
      SCOPED_TRACE(::testing::Message()
                   << kind_name(kind) << (overlap ? " overlapping" : " disjoint"));
      Call ref = c;
      ref.run_reference();
      for (int threads : {1, 2, 3, 5, 8}) {
        set_num_threads(threads);
        Call opt = c;
        opt.run();
        EXPECT_TRUE(opt.key_cache.bytes == ref.key_cache.bytes) << threads << " threads";
        EXPECT_TRUE(opt.value_cache.bytes == ref.value_cache.bytes) << threads << " threads";
      }
      set_num_threads(0);
    }
  }
}

// 13 heads of 46 bfloat16 elements (92-byte heads, 1,196-byte rows) in buffers starting one
// byte past an even address, in every mode that accepts them (PA_NZ needs 32-byte heads).
// Storage for a contiguous tensor whose first element sits `misalign` bytes past a 64-byte
// boundary, with guard bytes on both sides.
Buf placed(Gen& g, DType dt, std::vector<std::int64_t> shape, std::size_t misalign) {
  Buf b;
  b.dtype = dt;
  b.shape = std::move(shape);
  std::int64_t n = 1;
  for (auto d : b.shape) n *= d;
  b.bytes.resize(static_cast<std::size_t>(n) * dtype_size(dt) + 2 * kGuard + 64 + misalign);
  g.fill(b.bytes);
  const auto at = reinterpret_cast<std::uintptr_t>(b.bytes.data()) + kGuard;
  b.offset = kGuard + (64 - at % 64) % 64 + misalign;
  return b;
}

// Large prefills use non-temporal stores for whole lines; force that path on small caches
// (aligned and not, Norm and PA_NZ, runs starting mid-block and crossing blocks, every target).
TEST(ScatterPaKvCacheStream, PrefillMatchesReference) {
  Gen g(base_seed() + 5);
  const std::int64_t threshold = detail::set_stream_threshold(0);
  for (std::int64_t target : simd_test::simd_targets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    for (bool nz : {false, true}) {
      for (std::size_t mis : {std::size_t{0}, std::size_t{2}, std::size_t{32}}) {
        for (DType dt : {DType::bfloat16, DType::int8, DType::float32}) {
          const std::int64_t es = static_cast<std::int64_t>(dtype_size(dt));
          const std::int64_t nh = 3, d = 64 / es * 2, bs = 16, nb = 6, t = 61;
          SCOPED_TRACE(::testing::Message()
                       << (nz ? "PA_NZ " : "Norm ") << dtype_name(dt) << " misalign " << mis);
          Call call;
          call.key = placed(g, dt, {t, nh, d}, mis);
          call.value = placed(g, dt, {t, nh, d}, mis);
          const std::vector<std::int64_t> cache_shape =
              nz ? std::vector<std::int64_t>{nb, nh * d * es / 32, bs, 32 / es}
                 : std::vector<std::int64_t>{nb, bs, nh, d};
          call.key_cache = placed(g, dt, cache_shape, mis);
          call.value_cache = placed(g, dt, cache_shape, mis);
          if (nz) call.opts.cache_mode = CacheMode::PA_NZ;
          call.slot = Buf(DType::int64, {t});
          for (std::int64_t i = 0; i < t; ++i) {
            const std::int64_t slot = i == 7 ? -1 : 5 + i;  // mid-block start, one padding
            std::memcpy(&call.slot.bytes[static_cast<std::size_t>(i) * 8], &slot, 8);
          }
          Call opt = call, ref = call;
          {
            const simd_test::PinTarget pin(target);
            ASSERT_NO_THROW(opt.run());
          }
          ASSERT_NO_THROW(ref.run_reference());
          EXPECT_TRUE(opt.key_cache.bytes == ref.key_cache.bytes);
          EXPECT_TRUE(opt.value_cache.bytes == ref.value_cache.bytes);
        }
      }
    }
  }
  detail::set_stream_threshold(threshold);
}

TEST(ScatterPaKvCacheOdd, ThirteenHeadsOfFortySixUnaligned) {
  Gen g(base_seed() + 5);
  const std::int64_t t = 300, nh = 13, d = 46, bs = 16, nb = 40;
  auto odd = [&](std::vector<std::int64_t> shape) {
    Buf b = make_tensor(g, DType::bfloat16, shape, 0, true);
    if (b.offset % 2 == 0) {  // force an odd address for 2-byte elements
      b.bytes.insert(b.bytes.begin(), 0);
      b.offset += 1;
    }
    return b;
  };
  for (const char* mode : {"None", "Nct", "NHSD", "Alibi", "Rope", "Omni", "Alibi4", "Rope4"}) {
    for (bool with_value : {true, false}) {
      SCOPED_TRACE(::testing::Message() << mode << (with_value ? "" : " key-only"));
      Call c;
      const std::string m = mode;
      const bool compress = m != "None" && m != "Nct" && m != "NHSD";
      const bool four = m == "Alibi4" || m == "Rope4";
      std::vector<std::int64_t> slots;
      for (std::int64_t i = 0; i < t; ++i) slots.push_back(i % 7 == 3 ? -1 : (i * 37) % (nb * bs));
      if (!compress) {
        c.key = odd({t, nh, d});
        c.value = odd({t, nh, d});
        c.slot = index_buf(DType::int32, slots);
        const std::vector<std::int64_t> shape = m == "NHSD"
                                                    ? std::vector<std::int64_t>{nb, nh, bs, d}
                                                    : std::vector<std::int64_t>{nb, bs, nh, d};
        c.key_cache = odd(shape);
        c.value_cache = odd(shape);
        c.opts.scatter_mode = parse_scatter_mode(m);
        if (m == "Nct") {
          c.opts.strides = std::array<std::int64_t, 2>{nh * d, nh * d};
          c.opts.offsets = std::array<std::int64_t, 2>{0, 0};
        }
      } else {
        const std::int64_t b = 3, s = t / b;
        c.key = four ? odd({b, s, nh, d}) : odd({t, nh, d});
        c.value = four ? odd({b, s, nh, d}) : odd({t, nh, d});
        c.seq_lens = index_buf(DType::int64, {s, s - 5, four ? s - 9 : s + 5});
        std::vector<std::int64_t> lens, offs, starts;
        for (std::int64_t i = 0; i < b * nh; ++i) {
          lens.push_back(3 + i % 5);
          offs.push_back(i % 4);
          starts.push_back(i * 110 + (i % 3));
        }
        c.compress_lens = index_buf(DType::int64, lens);
        if (m.rfind("Alibi", 0) != 0) c.compress_seq_offsets = index_buf(DType::int64, offs);
        c.slot = index_buf(DType::int64, starts);
        c.key_cache = odd({300, bs, 1, d});
        c.value_cache = odd({300, bs, 1, d});
        c.opts.scatter_mode = four ? ScatterMode::None : parse_scatter_mode(m);
      }
      c.has_value = with_value;
      Call opt = c, ref = c;
      opt.run();
      ref.run_reference();
      EXPECT_TRUE(opt.key_cache.bytes == ref.key_cache.bytes);
      if (with_value) {
        EXPECT_TRUE(opt.value_cache.bytes == ref.value_cache.bytes);
      }
      EXPECT_FALSE(opt.key_cache.bytes == c.key_cache.bytes);  // something was written
    }
  }
}

// ---- guard test: an independent model of which bytes a call may write ----------------------

std::int64_t read_index_buf(const Buf& b, std::int64_t i) {
  return b.dtype == DType::int32 ? b.get<std::int32_t>(i) : b.get<std::int64_t>(i);
}

// Marks the bytes of every destination row of one cache; for slot modes also returns, per slot,
// the last token writing it.
void mark_written(Call call, bool value_side, std::vector<std::uint8_t>& mask,
                  std::vector<std::int64_t>* last_writer) {
  const ScatterPaKvCachePlan p = call.plan();
  const Buf& cache = value_side ? call.value_cache : call.key_cache;
  const auto es = static_cast<std::int64_t>(dtype_size(cache.dtype));
  const std::int64_t d = value_side ? p.value_head_size : p.key_head_size;
  const std::int64_t bstride = cache.strides[0] * es, bs = p.block_size, nh = p.num_heads;
  mask.assign(cache.bytes.size(), 0);
  auto mark = [&](std::int64_t off, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) mask[cache.offset + off + i] = 1;
  };
  auto row_at = [&](std::int64_t s) { return (s / bs) * bstride; };
  if (call.seq_lens) {
    std::int64_t runs = p.batch * nh;
    for (std::int64_t i = 0; i < runs; ++i) {
      const std::int64_t l = read_index_buf(*call.seq_lens, i / nh);
      const std::int64_t w = read_index_buf(*call.compress_lens, i);
      const std::int64_t o =
          call.compress_seq_offsets ? read_index_buf(*call.compress_seq_offsets, i) : 0;
      const std::int64_t start = read_index_buf(call.slot, i);
      const Kind kind = p.scatter_mode == ScatterMode::Alibi  ? Kind::Alibi3
                        : p.scatter_mode == ScatterMode::Omni ? Kind::Omni3
                                                              : Kind::Rope3;
      if (start < 0) continue;
      for (std::int64_t r = start; r < start + run_rows(kind, l, w, o); ++r) {
        mark(row_at(r) + (r % bs) * d * es, d * es);
      }
    }
    return;
  }
  if (last_writer) last_writer->assign(static_cast<std::size_t>(p.num_slots), -1);
  for (std::int64_t t = 0; t < p.num_tokens; ++t) {
    const std::int64_t s = read_index_buf(call.slot, t);
    if (s < 0) continue;
    if (last_writer) (*last_writer)[s] = t;
    const std::int64_t o = s % bs;
    if (p.cache_mode == CacheMode::PA_NZ) {
      for (std::int64_t c = 0; c < nh * d * es / 32; ++c)
        mark(row_at(s) + c * bs * 32 + o * 32, 32);
    } else if (p.scatter_mode == ScatterMode::NHSD) {
      for (std::int64_t h = 0; h < nh; ++h) mark(row_at(s) + h * bs * d * es + o * d * es, d * es);
    } else {
      mark(row_at(s) + o * nh * d * es, nh * d * es);
    }
  }
}

TEST(ScatterPaKvCacheGuard, EveryByteOutsideTheWrittenRowsIsUnchanged) {
  Gen g(base_seed() + 11);
  for (Kind kind : kKinds) {
    for (int i = 0; i < 25; ++i) {
      Case c = make_case(g, kind);
      SCOPED_TRACE(c.desc);
      Call out = c.call;
      out.run();
      for (bool value_side : {false, true}) {
        if (value_side && !c.call.has_value) continue;
        const Buf& before = value_side ? c.call.value_cache : c.call.key_cache;
        const Buf& after = value_side ? out.value_cache : out.key_cache;
        std::vector<std::uint8_t> mask;
        std::vector<std::int64_t> last;
        mark_written(c.call, value_side, mask, &last);
        std::size_t changed_outside = 0;
        for (std::size_t b = 0; b < mask.size(); ++b) {
          changed_outside += mask[b] == 0 && before.bytes[b] != after.bytes[b];
        }
        EXPECT_EQ(changed_outside, 0u) << (value_side ? "value_cache" : "key_cache");
        if (c.call.seq_lens || kind == Kind::Nct) continue;
        // Read back: each slot holds its last writer's row (heads in order, Norm/NHSD/PA_NZ
        // chunking undone by the same independent model).
        const ScatterPaKvCachePlan p = out.plan();
        const Buf& src = value_side ? c.call.value : c.call.key;
        const auto es = static_cast<std::int64_t>(dtype_size(src.dtype));
        const std::int64_t d = value_side ? p.value_head_size : p.key_head_size;
        const std::int64_t bs = p.block_size, bstride = after.strides[0] * es;
        for (std::int64_t s = 0; s < static_cast<std::int64_t>(last.size()); ++s) {
          const std::int64_t t = last[s];
          if (t < 0) continue;
          for (std::int64_t h = 0; h < p.num_heads; ++h) {
            for (std::int64_t e = 0; e < d * es; ++e) {
              const unsigned char want =
                  src.bytes[src.offset + (t * src.strides[0] + h * src.strides[1]) * es + e];
              std::int64_t at = (s / bs) * bstride;
              if (p.cache_mode == CacheMode::PA_NZ) {
                const std::int64_t f = h * d * es + e;
                at += (f / 32) * bs * 32 + (s % bs) * 32 + f % 32;
              } else if (p.scatter_mode == ScatterMode::NHSD) {
                at += h * bs * d * es + (s % bs) * d * es + e;
              } else {
                at += (s % bs) * p.num_heads * d * es + h * d * es + e;
              }
              ASSERT_EQ(after.bytes[after.offset + at], want) << "slot " << s << " token " << t;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvscatter::testing
