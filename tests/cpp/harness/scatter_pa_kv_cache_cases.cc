// scatter_pa_kv_cache cases: every scatter mode and cache layout (Norm, Nct, NHSD, PA_NZ 4-D and
// 5-D, Alibi/Rope/Omni packed 3-D, Alibi/Rope 4-D), the twelve dtypes, int32 and int64 index
// tensors, 0 to 4,096 tokens, head sizes 1 to 576, block sizes 1 to 256, key-only calls, padding
// slots, the last slot, duplicate slots, overlapping compress runs, padded strides, unaligned
// buffers, calls split over threads, the streaming-store path, and out-of-range slots, compress
// runs past the cache's end and unknown modes, which must fail leaving every buffer unchanged.
#include "harness/scatter_pa_kv_cache_cases.h"

#include <algorithm>
#include <array>
#include <sstream>
#include <string>
#include <vector>

namespace kvscatter::harness {

ScatterPaKvCachePlan ScatterPaKvCacheCall::plan(const std::vector<std::uint8_t*>& data) const {
  ScatterPaKvCacheOptions o = options;
  if (compress_lens) o.compress_lens = compress_lens->view(data);
  if (compress_seq_offsets) o.compress_seq_offsets = compress_seq_offsets->view(data);
  if (seq_lens) o.seq_lens = seq_lens->view(data);
  const auto opt_view = [&](const std::optional<TensorRef>& t) {
    return t ? std::optional<TensorView>(t->view(data)) : std::nullopt;
  };
  return plan_scatter_pa_kv_cache(key.view(data), opt_view(value), key_cache.view(data),
                                  opt_view(value_cache), slot_mapping.view(data), o);
}

namespace {

enum class Kind { Norm, Nct, Nhsd, Nz4, Nz5, Alibi3, Rope3, Omni3, Alibi4, Rope4 };
constexpr Kind kKinds[] = {Kind::Norm,   Kind::Nct,   Kind::Nhsd,  Kind::Nz4,    Kind::Nz5,
                           Kind::Alibi3, Kind::Rope3, Kind::Omni3, Kind::Alibi4, Kind::Rope4};
const char* kind_name(Kind k) {
  const char* names[] = {"Norm",    "Nct",    "NHSD",   "PaNz4D",  "PaNz5D",
                         "Alibi3D", "Rope3D", "Omni3D", "Alibi4D", "Rope4D"};
  return names[static_cast<int>(k)];
}

DType any_dtype(Gen& g) {
  const auto all = all_dtypes();
  return all[static_cast<std::size_t>(g.uniform(0, static_cast<std::int64_t>(all.size()) - 1))];
}

DType index_dtype(Gen& g) { return g.chance(0.5) ? DType::int32 : DType::int64; }

// Element budget per case: mostly small, sometimes large enough to be split over threads.
std::int64_t budget(Gen& g) {
  if (g.chance(0.02)) return 600'000;
  if (g.chance(0.1)) return 100'000;
  return 20'000;
}

// Edge shapes drawn 40% of the time: 1 the most tokens, 2 the largest head, 3 the largest block, 4
// one-slot blocks.
struct SlotShape {
  std::int64_t t, nh, dk, dv, bs, nb;
};

SlotShape slot_shape(Gen& g, Kind kind, DType kdt, DType vdt) {
  const bool nz = kind == Kind::Nz4 || kind == Kind::Nz5;
  const std::int64_t lk = 32 / static_cast<std::int64_t>(dtype_size(kdt));
  const std::int64_t lv = 32 / static_cast<std::int64_t>(dtype_size(vdt));
  const int edge = g.chance(0.4) ? static_cast<int>(g.uniform(1, 4)) : 0;
  const std::int64_t lim = budget(g);
  SlotShape s{};
  s.t = g.log_uniform(1, 4096);
  s.dk = nz ? lk * g.log_uniform(1, 576 / lk) : g.log_uniform(1, 576);
  s.dv = g.chance(0.5) ? (nz ? lv * g.log_uniform(1, 576 / lv) : g.log_uniform(1, 576))
                       : (nz ? std::max<std::int64_t>(lv, s.dk / lv * lv) : s.dk);
  s.nh = g.log_uniform(1, 16);
  if (edge == 1) {
    s.t = 4096;
    s.dk = s.dv = nz ? std::max(lk, lv) : g.uniform(1, 8);
    s.nh = 1;
  }
  if (edge == 2) {
    s.dk = 576;
    s.dv = nz ? 576 : g.uniform(1, 576);
    s.t = g.uniform(1, 40);
  }
  while (s.nh > 1 && s.t * s.nh * std::max(s.dk, s.dv) > lim) --s.nh;
  while (edge != 1 && s.t > 1 && s.t * s.nh * std::max(s.dk, s.dv) > lim) s.t = s.t * 2 / 3;
  if (g.chance(0.03)) s.t = 0;  // empty input
  s.bs = edge == 3 ? 256 : edge == 4 ? 1 : g.log_uniform(1, 256);
  s.nb =
      (std::max<std::int64_t>(s.t, 1) * g.uniform(10, 30) / 10 + s.bs - 1) / s.bs + g.uniform(0, 2);
  return s;
}

// A fused Nct input: row t at offset + t*stride in a buffer whose pitch is the view's strides[0];
// stride may be below the row length (rows overlap) or zero.
TensorRef nct_side(ScatterPaKvCacheCase& sc, Gen& g, const char* name, DType dt, const SlotShape& s,
                   std::int64_t hd, std::int64_t& stride, std::int64_t& offset) {
  const std::int64_t row = s.nh * hd;
  stride = g.chance(0.1) ? g.uniform(0, row) : row + g.uniform(0, 2 * row);
  offset = g.chance(0.5) ? 0 : g.uniform(0, row);
  const std::int64_t need = offset + (s.t - 1) * stride + row;
  const std::int64_t pitch = s.t == 0 ? row : (need + s.t - 1) / s.t + g.uniform(0, 3);
  TensorRef r = add_tensor(sc.c, g, name, dt, {s.t * pitch});
  r.shape = {s.t, s.nh, hd};
  r.strides = {pitch, hd, 1};
  return r;
}

void slot_case(ScatterPaKvCacheCase& sc, Gen& g, Kind kind, std::ostringstream& d) {
  const bool nz = kind == Kind::Nz4 || kind == Kind::Nz5;
  const DType kdt = any_dtype(g);
  const DType vdt = nz && g.chance(0.5) ? any_dtype(g) : kdt;
  const DType idt = index_dtype(g);
  const SlotShape s = slot_shape(g, kind, kdt, vdt);
  const std::int64_t ns = s.nb * s.bs;
  const bool with_value = g.chance(0.8);
  d << kind_name(kind) << " key " << dtype_name(kdt) << " value "
    << (with_value ? dtype_name(vdt) : "absent") << " index " << dtype_name(idt) << " T=" << s.t
    << " NH=" << s.nh << " Dk=" << s.dk << " Dv=" << s.dv << " bs=" << s.bs << " nb=" << s.nb;
  std::string desc;
  std::vector<std::int64_t> slots = make_slots(g, s.t, ns, SlotOptions{}, desc);
  if (s.t > 0 && g.chance(0.05)) {  // a late token past the last slot: nothing may be written
    slots[static_cast<std::size_t>(g.uniform(s.t / 2, s.t - 1))] = ns + g.uniform(0, 3);
    sc.c.expect_error = true;
    desc += " out-of-range";
  }
  d << desc;
  auto cache = [&](const char* name, DType dt, std::int64_t hd) {
    const std::int64_t l = 32 / static_cast<std::int64_t>(dtype_size(dt));
    std::vector<std::int64_t> shape{s.nb, s.bs, s.nh, hd};
    if (kind == Kind::Nhsd) shape = {s.nb, s.nh, s.bs, hd};
    if (kind == Kind::Nz4) shape = {s.nb, s.nh * hd / l, s.bs, l};
    if (kind == Kind::Nz5) shape = {s.nb, s.nh, hd / l, s.bs, l};
    return add_tensor(sc.c, g, name, dt, shape, /*pad_axes=*/1);
  };
  ScatterPaKvCacheCall& call = sc.call;
  call.key_cache = cache("key_cache", kdt, s.dk);
  if (with_value) call.value_cache = cache("value_cache", vdt, s.dv);
  call.slot_mapping = add_index(sc.c, "slot_mapping", idt, slots);
  if (kind == Kind::Nct) {
    std::array<std::int64_t, 2> st{}, of{};
    call.key = nct_side(sc, g, "key", kdt, s, s.dk, st[0], of[0]);
    if (with_value) call.value = nct_side(sc, g, "value", vdt, s, s.dv, st[1], of[1]);
    call.options.scatter_mode = ScatterMode::Nct;
    call.options.strides = st;
    call.options.offsets = of;
    d << " strides [" << st[0] << ", " << st[1] << "] offsets [" << of[0] << ", " << of[1] << "]";
    return;
  }
  call.key = add_tensor(sc.c, g, "key", kdt, {s.t, s.nh, s.dk}, 2);
  if (with_value) call.value = add_tensor(sc.c, g, "value", vdt, {s.t, s.nh, s.dv}, 2);
  if (kind == Kind::Nhsd) call.options.scatter_mode = ScatterMode::NHSD;
  if (nz) call.options.cache_mode = CacheMode::PA_NZ;
}

// Rows one (batch, head) run writes: the window for Alibi; for Rope and Omni the prefix, the mean
// row (Rope only) and the suffix, or the whole sequence when nothing is compressed.
std::int64_t run_rows(Kind kind, std::int64_t l, std::int64_t w, std::int64_t o) {
  if (kind == Kind::Alibi3 || kind == Kind::Alibi4) return w;
  if (o == -1 || w == 0 || o == l) return l;
  return kind == Kind::Omni3 ? l - w : l - w + 1;
}

// Per-run windows, offsets and rows for sequences `seq` of a compress mode.
struct Runs {
  std::vector<std::int64_t> lens, offs, rows, starts;
  std::int64_t total_rows = 0;
};

Runs draw_runs(Gen& g, Kind kind, const std::vector<std::int64_t>& seq, std::int64_t nh) {
  const bool four = kind == Kind::Alibi4 || kind == Kind::Rope4;
  const bool alibi = kind == Kind::Alibi3 || kind == Kind::Alibi4;
  const auto n = static_cast<std::size_t>(seq.size()) * static_cast<std::size_t>(nh);
  Runs r{std::vector<std::int64_t>(n), std::vector<std::int64_t>(n), std::vector<std::int64_t>(n),
         std::vector<std::int64_t>(n), 0};
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t l = seq[i / static_cast<std::size_t>(nh)];
    if (alibi) {
      r.lens[i] = g.uniform(0, l);
    } else if (!four && g.chance(0.15)) {  // offset -1: nothing compressed
      r.offs[i] = -1;
      r.lens[i] = g.uniform(0, l + 2);
    } else {
      r.offs[i] = g.uniform(0, l);
      r.lens[i] = g.chance(0.1) ? 0 : g.uniform(0, l - r.offs[i]);
    }
    r.rows[i] = run_rows(kind, l, r.lens[i], r.offs[i]);
    r.total_rows += r.rows[i];
  }
  return r;
}

// Runs placed one after another with gaps, sometimes overlapping (the later run wins), sometimes
// skipped (negative start), sometimes ending exactly at the last slot.
void place_runs(Gen& g, Runs& r, std::int64_t ns) {
  const auto n = static_cast<std::int64_t>(r.rows.size());
  std::int64_t cursor = 0;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const std::int64_t rows = std::max<std::int64_t>(r.rows[i], 1);
    if (g.chance(0.1)) {
      r.starts[i] = -g.uniform(1, 3);
    } else if (g.chance(0.1)) {
      r.starts[i] = g.uniform(0, ns - rows);
    } else {
      const std::int64_t gap =
          g.uniform(0, std::max<std::int64_t>(0, (ns - r.total_rows) / (n + 1)));
      r.starts[i] = std::min(cursor + gap, ns - rows);
      cursor = r.starts[i] + r.rows[i];
    }
  }
  if (g.chance(0.3)) {
    const auto i = static_cast<std::size_t>(g.uniform(0, n - 1));
    if (r.rows[i] > 0) r.starts[i] = ns - r.rows[i];
  }
}

void compress_case(ScatterPaKvCacheCase& sc, Gen& g, Kind kind, std::ostringstream& d) {
  const bool four = kind == Kind::Alibi4 || kind == Kind::Rope4;
  const bool rope = kind == Kind::Rope3 || kind == Kind::Rope4;
  const bool alibi = kind == Kind::Alibi3 || kind == Kind::Alibi4;
  const DType dt = any_dtype(g), idt = index_dtype(g);
  const std::int64_t lim = budget(g), b = g.uniform(1, 6), nh = g.uniform(1, 8);
  const std::int64_t dk = g.log_uniform(1, 576);
  const std::int64_t dv = four && g.chance(0.5) ? g.log_uniform(1, 576) : dk;
  const std::int64_t max_len = std::min<std::int64_t>(
      std::max<std::int64_t>(1, lim / (b * nh * std::max(dk, dv))), 4096 / b);
  const std::int64_t s = four ? g.uniform(0, max_len) : 0;
  std::vector<std::int64_t> seq(static_cast<std::size_t>(b));
  std::int64_t tokens = 0;
  for (auto& l : seq) tokens += l = four ? g.uniform(0, s) : g.uniform(0, max_len);
  Runs r = draw_runs(g, kind, seq, nh);
  const std::int64_t bs = g.log_uniform(1, 256);
  const std::int64_t nb = (r.total_rows + r.total_rows / 4 + bs) / bs + g.uniform(0, 1);
  const std::int64_t ns = nb * bs;
  place_runs(g, r, ns);
  std::vector<std::size_t> writing;
  for (std::size_t i = 0; i < r.rows.size(); ++i)
    if (r.rows[i] > 0 && r.starts[i] >= 0) writing.push_back(i);
  const bool with_value = g.chance(0.8);
  d << kind_name(kind) << " " << dtype_name(dt) << " value " << (with_value ? "yes" : "absent")
    << " index " << dtype_name(idt) << " B=" << b << " NH=" << nh << " S=" << s
    << " tokens=" << tokens << " Dk=" << dk << " Dv=" << dv << " bs=" << bs << " nb=" << nb
    << " rows=" << r.total_rows;
  if (!writing.empty() && g.chance(0.05)) {  // the last run ends past the last slot
    const std::size_t i = writing.back();
    r.starts[i] = ns - r.rows[i] + g.uniform(1, 2);
    sc.c.expect_error = true;
    d << " run-past-end";
  }
  ScatterPaKvCacheCall& call = sc.call;
  const std::vector<std::int64_t> per_head =
      four && g.chance(0.5) ? std::vector<std::int64_t>{b, nh} : std::vector<std::int64_t>{b * nh};
  call.slot_mapping = add_index(sc.c, "slot_mapping", idt, r.starts, per_head);
  call.compress_lens = add_index(sc.c, "compress_lens", idt, r.lens, per_head);
  if (!alibi) call.compress_seq_offsets = add_index(sc.c, "compress_seq_offsets", idt, r.offs);
  call.seq_lens = add_index(sc.c, "seq_lens", idt, seq);
  call.options.scatter_mode = kind == Kind::Alibi3  ? ScatterMode::Alibi
                              : kind == Kind::Rope3 ? ScatterMode::Rope
                              : kind == Kind::Omni3 ? ScatterMode::Omni
                              : g.chance(0.5) ? ScatterMode::None  // a 4-D key selects the mode
                              : rope          ? ScatterMode::Rope
                                              : ScatterMode::Alibi;
  auto input = [&](const char* name, std::int64_t hd) {
    TensorRef x = four ? add_tensor(sc.c, g, name, dt, {b, s, nh, hd}, 3)
                       : add_tensor(sc.c, g, name, dt, {tokens, nh, hd}, 2);
    if (rope) replace_nans(sc.c, g, x);
    return x;
  };
  call.key = input("key", dk);
  call.key_cache = add_tensor(sc.c, g, "key_cache", dt, {nb, bs, 1, dk}, 1);
  if (with_value) {
    call.value = input("value", dv);
    call.value_cache = add_tensor(sc.c, g, "value_cache", dt, {nb, bs, 1, dv}, 1);
  }
}

// Calls split over threads: many tokens fighting over few slots, or overlapping and disjoint
// compress runs, in bfloat16 with 4 heads of 128.
void threads_case(ScatterPaKvCacheCase& sc, Gen& g, std::ostringstream& d) {
  const Kind kind = g.pick({Kind::Norm, Kind::Nz4, Kind::Alibi3, Kind::Rope3});
  const bool overlap = g.chance(0.5);
  const std::int64_t t = 2000, nh = 4, hd = 128, half = t / 2;
  d << "threads " << kind_name(kind) << (overlap ? " overlapping" : " disjoint");
  ScatterPaKvCacheCall& call = sc.call;
  call.key = add_tensor(sc.c, g, "key", DType::bfloat16, {t, nh, hd}, 0, 0);
  call.value = add_tensor(sc.c, g, "value", DType::bfloat16, {t, nh, hd}, 0, 0);
  replace_nans(sc.c, g, call.key);
  replace_nans(sc.c, g, *call.value);
  std::vector<std::int64_t> cache_shape{32, 128, nh, hd};
  if (kind == Kind::Nz4) {
    cache_shape = {32, nh * hd / 16, 128, 16};
    call.options.cache_mode = CacheMode::PA_NZ;
  }
  std::vector<std::int64_t> slots(t);
  for (auto& s : slots) s = overlap && g.chance(0.5) ? g.uniform(0, 40) : g.uniform(0, 4095);
  if (kind == Kind::Alibi3 || kind == Kind::Rope3) {
    cache_shape = {128, 128, 1, hd};
    std::vector<std::int64_t> lens, offs;
    slots.clear();
    for (std::int64_t i = 0; i < 2 * nh; ++i) {
      lens.push_back(kind == Kind::Alibi3 ? half - 100 : 7);
      offs.push_back(100 + i);
      slots.push_back(!overlap ? i * half : i % 3 == 0 ? 100 + i : half * (i % 2));
    }
    call.seq_lens = add_index(sc.c, "seq_lens", DType::int64, {half, half});
    call.compress_lens = add_index(sc.c, "compress_lens", DType::int64, lens);
    if (kind == Kind::Rope3) {
      call.compress_seq_offsets = add_index(sc.c, "compress_seq_offsets", DType::int64, offs);
    }
    call.options.scatter_mode = kind == Kind::Alibi3 ? ScatterMode::Alibi : ScatterMode::Rope;
  }
  call.slot_mapping = add_index(sc.c, "slot_mapping", DType::int64, slots);
  call.key_cache = add_tensor(sc.c, g, "key_cache", DType::bfloat16, cache_shape, 0, 0);
  call.value_cache = add_tensor(sc.c, g, "value_cache", DType::bfloat16, cache_shape, 0, 0);
}

// A prefill into consecutive slots starting mid-block (one padding token) on the streaming path,
// with every buffer at the same offset from a line boundary: 0, 2 or 32 bytes.
void stream_case(ScatterPaKvCacheCase& sc, Gen& g, std::ostringstream& d) {
  const bool nz = g.chance(0.5);
  const std::size_t mis = static_cast<std::size_t>(g.pick<std::int64_t>({0, 2, 32}));
  const DType dt = g.pick({DType::bfloat16, DType::int8, DType::float32});
  const auto es = static_cast<std::int64_t>(dtype_size(dt));
  const std::int64_t nh = 3, hd = 64 / es * 2, bs = 16, nb = 6, t = 61;
  d << "stream prefill " << (nz ? "PA_NZ " : "Norm ") << dtype_name(dt) << " misalign " << mis;
  const std::vector<std::int64_t> cache_shape =
      nz ? std::vector<std::int64_t>{nb, nh * hd * es / 32, bs, 32 / es}
         : std::vector<std::int64_t>{nb, bs, nh, hd};
  ScatterPaKvCacheCall& call = sc.call;
  call.key = add_tensor(sc.c, g, "key", dt, {t, nh, hd}, 0, 0);
  call.value = add_tensor(sc.c, g, "value", dt, {t, nh, hd}, 0, 0);
  call.key_cache = add_tensor(sc.c, g, "key_cache", dt, cache_shape, 0, 0);
  call.value_cache = add_tensor(sc.c, g, "value_cache", dt, cache_shape, 0, 0);
  if (nz) call.options.cache_mode = CacheMode::PA_NZ;
  std::vector<std::int64_t> slots;
  for (std::int64_t i = 0; i < t; ++i) slots.push_back(i == 7 ? -1 : 5 + i);
  call.slot_mapping = add_index(sc.c, "slot_mapping", DType::int64, slots);
  for (auto& m : sc.c.misalign) m = mis;
  sc.c.stream = true;
}

// 13 heads of 46 bfloat16 elements (92-byte heads) at odd addresses, in every mode that accepts
// them (PA_NZ needs 32-byte heads), with and without value.
void odd_heads_case(ScatterPaKvCacheCase& sc, Gen& g, std::ostringstream& d) {
  const std::string m =
      g.pick<const char*>({"None", "Nct", "NHSD", "Alibi", "Rope", "Omni", "Alibi4", "Rope4"});
  const bool with_value = g.chance(0.5);
  const std::int64_t t = 300, nh = 13, hd = 46, bs = 16, nb = 40;
  d << "odd heads " << m << (with_value ? "" : " key-only");
  const bool compress = m != "None" && m != "Nct" && m != "NHSD";
  const bool four = m == "Alibi4" || m == "Rope4";
  ScatterPaKvCacheCall& call = sc.call;
  auto add = [&](const char* name, std::vector<std::int64_t> shape) {
    const TensorRef x = add_tensor(sc.c, g, name, DType::bfloat16, std::move(shape), 0, 0);
    replace_nans(sc.c, g, x);
    return x;
  };
  if (!compress) {
    std::vector<std::int64_t> slots;
    for (std::int64_t i = 0; i < t; ++i) slots.push_back(i % 7 == 3 ? -1 : (i * 37) % (nb * bs));
    call.key = add("key", {t, nh, hd});
    if (with_value) call.value = add("value", {t, nh, hd});
    call.slot_mapping = add_index(sc.c, "slot_mapping", DType::int32, slots);
    const std::vector<std::int64_t> shape = m == "NHSD" ? std::vector<std::int64_t>{nb, nh, bs, hd}
                                                        : std::vector<std::int64_t>{nb, bs, nh, hd};
    call.key_cache = add("key_cache", shape);
    if (with_value) call.value_cache = add("value_cache", shape);
    call.options.scatter_mode = parse_scatter_mode(m);
    if (m == "Nct") {
      call.options.strides = std::array<std::int64_t, 2>{nh * hd, nh * hd};
      call.options.offsets = std::array<std::int64_t, 2>{0, 0};
    }
  } else {
    const std::int64_t b = 3, s = t / b;
    call.key = four ? add("key", {b, s, nh, hd}) : add("key", {t, nh, hd});
    if (with_value) call.value = four ? add("value", {b, s, nh, hd}) : add("value", {t, nh, hd});
    call.seq_lens = add_index(sc.c, "seq_lens", DType::int64, {s, s - 5, four ? s - 9 : s + 5});
    std::vector<std::int64_t> lens, offs, starts;
    for (std::int64_t i = 0; i < b * nh; ++i) {
      lens.push_back(3 + i % 5);
      offs.push_back(i % 4);
      starts.push_back(i * 110 + (i % 3));
    }
    call.compress_lens = add_index(sc.c, "compress_lens", DType::int64, lens);
    if (m.rfind("Alibi", 0) != 0) {
      call.compress_seq_offsets = add_index(sc.c, "compress_seq_offsets", DType::int64, offs);
    }
    call.slot_mapping = add_index(sc.c, "slot_mapping", DType::int64, starts);
    call.key_cache = add("key_cache", {300, bs, 1, hd});
    if (with_value) call.value_cache = add("value_cache", {300, bs, 1, hd});
    call.options.scatter_mode = four ? ScatterMode::None : parse_scatter_mode(m);
  }
  for (auto& mis : sc.c.misalign) mis = static_cast<std::size_t>(g.pick<std::int64_t>({1, 3, 5}));
}

}  // namespace

ScatterPaKvCacheCase scatter_pa_kv_cache_case(std::mt19937_64& rng) {
  Gen g(rng);
  ScatterPaKvCacheCase sc;
  std::ostringstream d;
  const std::int64_t r = g.uniform(0, 99);
  if (r < 3) {
    stream_case(sc, g, d);
  } else if (r < 6) {
    odd_heads_case(sc, g, d);
  } else if (r < 9) {
    threads_case(sc, g, d);
  } else {
    const Kind kind = kKinds[g.uniform(0, 9)];
    if (kind >= Kind::Alibi3) {
      compress_case(sc, g, kind, d);
    } else {
      slot_case(sc, g, kind, d);
    }
    sc.c.stream = g.chance(0.5);
  }
  if (!sc.c.expect_error && g.chance(0.01)) {
    // A value outside the enum is an error, never a fallback (names are parsed at the C ABI
    // and Python boundaries).
    sc.call.options.scatter_mode = static_cast<ScatterMode>(6);
    sc.c.expect_error = true;
    d << " scatter_mode 6";
  }
  if (sc.c.stream) d << " streaming";
  sc.c.name = d.str();
  const ScatterPaKvCacheCall call = sc.call;
  sc.c.run = [call](const std::vector<std::uint8_t*>& data, bool reference) {
    const ScatterPaKvCachePlan plan = call.plan(data);
    if (reference) {
      reference::execute(plan);
    } else {
      execute(plan);
    }
  };
  return sc;
}

namespace {
Case generate(std::mt19937_64& rng) { return scatter_pa_kv_cache_case(rng).c; }
}  // namespace

KVS_HARNESS_CASES(scatter_pa_kv_cache, generate, 300);

}  // namespace kvscatter::harness
