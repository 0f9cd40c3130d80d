// Fuzz target of ScatterPaKvCache: every layout (Norm, PA_NZ 4-D/5-D, NHSD, Nct) and compress
// mode (Alibi, Rope, Omni; packed 3-D and padded 4-D keys), key-only calls, every element and
// index dtype, strided views, and slots that are valid, padding, duplicated, off by one,
// negative or huge. See fuzz_common.h for the oracle.
#include <array>

#include "fuzz_common.h"
#include "kvscatter/scatter_pa_kv_cache.h"

namespace kvscatter::fuzz {
namespace {

enum Mode { kNorm, kNz4, kNz5, kNhsd, kNct, kAlibi3, kRope3, kOmni3, kAlibi4, kRope4, kNone4 };

const std::vector<DType> kS8 = {DType::float16,  DType::bfloat16,    DType::float32,
                                DType::int8,     DType::uint8,       DType::int16,
                                DType::uint16,   DType::int32,       DType::uint32,
                                DType::hifloat8, DType::float8_e5m2, DType::float8_e4m3fn};

// Block axis strided now and then (a cache view into a larger tensor).
void pad_block_axis(Tensor& t, Input& in) {
  if (in.pick(4) == 3) t.strides[0] += in.range(1, 64);
}

// Source views: contiguous, or padded rows and heads (a slice of a fused QKV output).
void pad_source(Tensor& t, Input& in) {
  if (in.pick(4) != 3) return;
  const int r = t.rank;
  t.strides[r - 2] = t.shape[r - 1] + in.pick(8);
  for (int i = r - 3; i >= 0; --i) t.strides[i] = t.shape[i + 1] * t.strides[i + 1] + in.pick(8);
}

// Per-(batch, head) index tensor: [B*NH] (or [B, NH] for 4-D keys), sometimes strided.
void per_head(Tensor& t, DType dt, std::int64_t b, std::int64_t nh, bool four, Input& in) {
  t.dtype = dt;
  if (four && in.pick(2)) {
    t.set_shape({b, nh});
  } else {
    t.set_shape({b * nh});
  }
  if (in.pick(4) == 3) {
    for (int i = 0; i < t.rank; ++i) t.strides[i] *= 2;
  }
}

int run(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  decode_runtime(in);
  const Path path = decode_path(in);
  Case c;
  c.rng.s = in.u64();
  c.special = in.pick(4) == 3 ? static_cast<int>(1 + in.pick(16)) : 0;

  const auto mode = static_cast<Mode>(in.pick(11));
  const bool nz = mode == kNz4 || mode == kNz5;
  const bool compress = mode >= kAlibi3;
  const bool four = mode >= kAlibi4;
  const DType kdt = in.choose(kS8);
  const DType vdt = nz && in.pick(2) ? in.choose(kS8) : kdt;
  const DType idt = in.pick(2) ? DType::int64 : DType::int32;
  const bool key_only = in.pick(8) == 7;
  const std::int64_t nh = 1 + in.pick(4);
  const std::int64_t lk = 32 / static_cast<std::int64_t>(dtype_size(kdt));
  const std::int64_t lv = 32 / static_cast<std::int64_t>(dtype_size(vdt));
  const std::int64_t dk = nz ? lk * (1 + in.pick(4)) : head_size(in);
  std::int64_t dv = nz ? lv * (1 + in.pick(4)) : head_size(in);
  std::int64_t nb = in.pick(9);
  static const std::vector<std::int64_t> kBlock = {4, 1, 2, 3, 8, 16, 5, 32, 128};
  const std::int64_t bs = in.choose(kBlock);
  const auto es = static_cast<std::int64_t>(std::max(dtype_size(kdt), dtype_size(vdt)));
  const std::int64_t row_bytes = nh * std::max(dk, dv) * es;
  nb = cap_count(nb, bs * row_bytes);
  const std::int64_t ns = nb * bs;

  ScatterPaKvCacheOptions opt;
  static const char* kScatter[] = {"None", "None", "None",  "NHSD", "Nct", "Alibi",
                                   "Rope", "Omni", "Alibi", "Rope", "None"};
  // Mode names as the C ABI takes them; the C++ paths parse them inside the tested call.
  std::string cache_mode = nz ? "PA_NZ" : (in.pick(2) ? "" : "Norm");
  std::string scatter_mode = kScatter[mode];
  if (scatter_mode == "None" && in.pick(2)) scatter_mode = "";
  if (in.rare()) {
    static const std::vector<std::string> kBad = {"NZ",  "norm",  "ALIBI", "rope", "None ",
                                                  "Nct", "PA_NZ", "Omni",  "NHSD"};
    (in.pick(2) ? cache_mode : scatter_mode) = in.choose(kBad);
  }

  Tensor& key = c.add("key", Role::input);
  Tensor& kc = c.add("key_cache", Role::cache);
  Tensor& slot = c.add("slot_mapping", Role::index);
  Tensor& value = c.add("value", Role::input);
  Tensor& vc = c.add("value_cache", Role::cache);
  Tensor& lens = c.add("compress_lens", Role::index);
  Tensor& offs = c.add("compress_seq_offsets", Role::index);
  Tensor& seq = c.add("seq_lens", Role::index);
  lens.present = offs.present = seq.present = false;
  key.dtype = kdt;
  value.dtype = vdt;
  kc.dtype = kdt;
  vc.dtype = vdt;
  slot.dtype = idt;

  if (!compress) {
    const std::int64_t t = cap_count(in.rare(16) ? in.range(17, 700) : in.pick(17), row_bytes);
    key.set_shape({t, nh, dk});
    value.set_shape({t, nh, dv});
    if (mode == kNct) {
      // Rows of NH*D contiguous elements read at offset + t*stride inside a buffer of T rows
      // of key.strides[0] elements.
      std::array<std::int64_t, 2> strides{}, offsets{};
      for (int side = 0; side < 2; ++side) {
        Tensor& x = side ? value : key;
        const std::int64_t row = nh * x.shape[2];
        const std::int64_t pitch = row + (in.pick(4) == 3 ? in.pick(16) : 0);
        x.strides[0] = pitch;
        x.min_extent = t * pitch;
        std::int64_t s = in.pick(pitch + 1);
        if (in.rare()) s = pitch + 1;
        const std::int64_t max_off = t > 0 ? t * pitch - (t - 1) * s - row : 0;
        std::int64_t o = max_off > 0 ? in.pick(max_off + 1) : 0;
        if (in.rare()) o = max_off + 1;
        strides[static_cast<std::size_t>(side)] = s;
        offsets[static_cast<std::size_t>(side)] = o;
      }
      if (in.pick(4) != 0) opt.strides = strides;
      if (in.pick(4) != 0) opt.offsets = offsets;
    } else {
      pad_source(key, in);
      pad_source(value, in);
      if (in.rare()) {
        opt.strides =
            in.pick(2) ? std::array<std::int64_t, 2>{1, 1} : std::array<std::int64_t, 2>{4, 4};
      }
    }
    if (nz) {
      if (mode == kNz4) {
        kc.set_shape({nb, nh * dk / lk, bs, lk});
        vc.set_shape({nb, nh * dv / lv, bs, lv});
      } else {
        kc.set_shape({nb, nh, dk / lk, bs, lk});
        vc.set_shape({nb, nh, dv / lv, bs, lv});
      }
    } else if (mode == kNhsd) {
      kc.set_shape({nb, nh, bs, dk});
      vc.set_shape({nb, nh, bs, dv});
    } else {
      kc.set_shape({nb, bs, nh, dk});
      vc.set_shape({nb, bs, nh, dv});
    }
    slot.set_shape({t});
    if (in.pick(4) == 3) slot.strides[0] = 1 + in.pick(3);
    for (std::int64_t i = 0; i < t; ++i)
      slot.values.push_back(slot_value(in, ns, idt, slot.values));
    if (in.rare()) {  // compress tensors outside the compress modes are an error
      seq.present = true;
      seq.dtype = idt;
      seq.set_shape({1});
      seq.values = {t};
    }
  } else {
    // Compress modes: B batches of L_b tokens, one run per (batch, head).
    const std::int64_t b = 1 + in.pick(4);
    std::vector<std::int64_t> l(static_cast<std::size_t>(b));
    std::int64_t total = 0, longest = 0;
    for (auto& x : l) {
      x = in.pick(9);
      total += x;
      longest = std::max(longest, x);
    }
    if (!four) dv = dk;  // packed modes write rows of Dk elements to both caches
    if (four) {
      const std::int64_t s = longest + in.pick(3);
      key.set_shape({b, s, nh, dk});
      value.set_shape({b, s, nh, dv});
    } else {
      key.set_shape({total, nh, dk});
      value.set_shape({total, nh, dv});
    }
    pad_source(key, in);
    pad_source(value, in);
    kc.set_shape({nb, bs, 1, dk});
    vc.set_shape({nb, bs, 1, dv});
    const bool rope = mode == kRope3 || mode == kRope4 || (mode == kNone4 && in.pick(2));
    const bool omni = mode == kOmni3;
    const bool alibi = !rope && !omni;
    c.nan_tolerant = rope;
    per_head(slot, idt, b, nh, four, in);
    per_head(lens, idt, b, nh, four, in);
    lens.present = true;
    if (!alibi) {
      per_head(offs, idt, b, nh, four, in);
      offs.present = true;
    }
    seq.present = true;
    seq.dtype = idt;
    seq.set_shape({b});
    for (std::int64_t bi = 0; bi < b; ++bi) {
      const std::int64_t lb = l[static_cast<std::size_t>(bi)];
      for (std::int64_t h = 0; h < nh; ++h) {
        std::int64_t w = 0, o = 0, rows = 0;
        if (alibi) {
          w = in.pick(lb + 1);
          rows = w;
        } else {
          o = four ? in.pick(lb + 1) : in.pick(lb + 2) - 1;
          w = o >= 0 ? in.pick(lb - o + 1) : in.pick(lb + 1);
          if (o == -1 || w == 0 || o == lb) {
            rows = lb;
          } else {
            rows = rope ? lb - w + 1 : lb - w;
          }
        }
        if (in.rare()) {
          switch (in.pick(4)) {
            case 0:
              w = lb - std::max<std::int64_t>(o, 0) + 1;
              break;
            case 1:
              w = -1;
              break;
            case 2:
              o = lb + 1;
              break;
            default:
              o = -2;
              break;
          }
        }
        std::int64_t s0 = -1;
        if (in.pick(8) != 7) s0 = rows <= ns ? in.pick(ns - rows + 1) : 0;
        if (in.rare()) s0 = in.pick(2) ? ns - rows + 1 : ns;
        slot.values.push_back(s0);
        lens.values.push_back(w);
        offs.values.push_back(o);
      }
    }
    seq.values = l;
    if (in.rare()) seq.values[static_cast<std::size_t>(in.pick(b))] += in.pick(2) ? 1 : -100;
    if (mode == kNone4 && !rope) scatter_mode = in.pick(2) ? "None" : "";
  }
  pad_block_axis(kc, in);
  pad_block_axis(vc, in);
  if (key_only) {
    value.present = false;
    vc.present = false;
    if (in.pick(4) == 3) {  // a 0-D value (and value_cache) means key-only too
      value.present = true;
      value.rank = 0;
      if (in.pick(2)) {
        vc.present = true;
        vc.rank = 0;
      }
    }
  }
  if (in.rare()) (in.pick(2) ? value.present : vc.present) = false;
  key.misalign = static_cast<std::size_t>(in.pick(8));
  kc.misalign = static_cast<std::size_t>(in.pick(8));
  mutate(c, in);
  if (!materialize(c)) return -1;

  auto opt_views = [&](bool reference) {
    ScatterPaKvCacheOptions o = opt;
    o.cache_mode = parse_cache_mode(cache_mode);
    o.scatter_mode = parse_scatter_mode(scatter_mode);
    if (lens.present) o.compress_lens = lens.view(reference);
    if (offs.present) o.compress_seq_offsets = offs.view(reference);
    if (seq.present) o.seq_lens = seq.view(reference);
    return o;
  };
  auto maybe = [](const Tensor& t, bool reference) {
    return t.present ? std::optional<TensorView>(t.view(reference)) : std::nullopt;
  };
  c.note = "ScatterPaKvCache cache_mode \"" + cache_mode + "\" scatter_mode \"" + scatter_mode +
           "\"" +
           (opt.strides ? " strides {" + std::to_string((*opt.strides)[0]) + ", " +
                              std::to_string((*opt.strides)[1]) + "}"
                        : "") +
           (opt.offsets ? " offsets {" + std::to_string((*opt.offsets)[0]) + ", " +
                              std::to_string((*opt.offsets)[1]) + "}"
                        : "") +
           " path " + std::to_string(static_cast<int>(path));

  const Outcome ref = run_cpp([&] {
    const ScatterPaKvCachePlan p =
        plan_scatter_pa_kv_cache(key.view(true), maybe(value, true), kc.view(true), maybe(vc, true),
                                 slot.view(true), opt_views(true));
    reference::execute(p);
  });

  Outcome tested;
  bool any_status = false;
  if (path == Path::oneshot) {
    tested = run_cpp([&] {
      scatter_pa_kv_cache(key.view(false), maybe(value, false), kc.view(false), maybe(vc, false),
                          slot.view(false), opt_views(false));
    });
  } else if (path == Path::plan_execute) {
    tested = run_cpp([&] {
      const ScatterPaKvCachePlan p =
          plan_scatter_pa_kv_cache(key.view(false), maybe(value, false), kc.view(false),
                                   maybe(vc, false), slot.view(false), opt_views(false));
      execute(p);
    });
  } else {
    CTensors ct;
    kvsTensor* tk = ct.make(key);
    kvsTensor* tkc = ct.make(kc);
    kvsTensor* ts = ct.make(slot);
    kvsTensor* tv = ct.make(value);
    kvsTensor* tvc = ct.make(vc);
    kvsTensor* tl = ct.make(lens);
    kvsTensor* to = ct.make(offs);
    kvsTensor* tq = ct.make(seq);
    const std::int64_t* sp = opt.strides ? opt.strides->data() : nullptr;
    const std::int64_t* op = opt.offsets ? opt.offsets->data() : nullptr;
    tested = c_two_phase(
        ct, any_status, "kvsScatterPaKvCache",
        [&](std::uint64_t* ws, kvsExecutor** ex) {
          return kvsScatterPaKvCacheGetWorkspaceSize(tk, tv, tkc, tvc, ts, tl, to, tq,
                                                     cache_mode.c_str(), scatter_mode.c_str(), sp,
                                                     sp ? 2 : 0, op, op ? 2 : 0, ws, ex);
        },
        [](kvsExecutor* ex) { return kvsScatterPaKvCache(nullptr, 0, ex); });
  }
  check(c, tested, ref, any_status);
  return 0;
}

}  // namespace
}  // namespace kvscatter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvscatter::fuzz::run(data, size);
}
