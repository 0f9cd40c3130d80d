// Fuzz target of PagedKvWrite: float32/float16/bfloat16 keys and values with any token and head
// strides, NHD or HND caches in any physical axis order with padding (zero strides included,
// which must be rejected), copy and fp8 formats, per-tensor or per-head scales of any value,
// and slots of every kind. See fuzz_common.h for the oracle.
#include <array>
#include <numeric>

#include "fuzz_common.h"
#include "kvscatter/paged_kv_write.h"

namespace kvscatter::fuzz {
namespace {

// Strides for t's shape in a decoded physical axis order (outermost first) with optional
// padding; the last axis stays innermost unless the input says otherwise.
void layout(Tensor& t, Input& in, bool allow_zero) {
  std::array<int, kMaxRank> order{};
  std::iota(order.begin(), order.begin() + t.rank, 0);
  if (in.pick(4) == 3) {
    for (int i = t.rank - (in.rare() ? 1 : 2); i > 0; --i)
      std::swap(order[i], order[in.pick(i + 1)]);
  }
  std::int64_t s = 1;
  for (int k = t.rank; k-- > 0;) {
    const int a = order[k];
    t.strides[a] = s;
    s *= std::max<std::int64_t>(t.shape[a], 1);
    if (in.pick(8) == 7) s += in.pick(5);
  }
  if (allow_zero && in.pick(16) == 15) t.strides[in.pick(t.rank)] = 0;
}

Outcome run_c(Case& c, PagedKvWriteOptions& o, bool& any_status) {
  static const char* kFormats[] = {"copy", "fp8_e4m3", "fp8_e5m2"};
  CTensors ct;
  kvsTensor* tk = ct.make(c.get("key"));
  kvsTensor* tv = ct.make(c.get("value"));
  kvsTensor* tkc = ct.make(c.get("key_cache"));
  kvsTensor* tvc = ct.make(c.get("value_cache"));
  kvsTensor* ts = ct.make(c.get("slot_mapping"));
  kvsTensor* tks = o.k_scale ? ct.make(c.get("k_scale")) : nullptr;
  kvsTensor* tvs = o.v_scale ? ct.make(c.get("v_scale")) : nullptr;
  const char* layout = o.layout == KvCacheLayout::HND ? "HND" : "NHD";
  return c_two_phase(
      ct, any_status, "kvsPagedKvWrite",
      [&](std::uint64_t* ws, kvsExecutor** ex) {
        return kvsPagedKvWriteGetWorkspaceSize(
            tk, tv, tkc, tvc, ts, tks, tvs, kFormats[static_cast<int>(o.format)], layout, ws, ex);
      },
      [](kvsExecutor* ex) { return kvsPagedKvWrite(nullptr, 0, ex); });
}

int run(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  decode_runtime(in);
  const Path path = decode_path(in);
  Case c;
  c.rng.s = in.u64();
  c.special = in.pick(4) == 3 ? static_cast<int>(1 + in.pick(16)) : 0;

  static const std::vector<DType> kIn = {DType::bfloat16, DType::float16, DType::float32};
  const DType dt = in.choose(kIn);
  PagedKvWriteOptions o;
  o.format = static_cast<KvCacheFormat>(in.pick(3));
  o.layout = in.pick(2) ? KvCacheLayout::HND : KvCacheLayout::NHD;
  const DType cdt = o.format == KvCacheFormat::copy       ? dt
                    : in.pick(2)                          ? DType::uint8
                    : o.format == KvCacheFormat::fp8_e4m3 ? DType::float8_e4m3fn
                                                          : DType::float8_e5m2;
  const DType idt = in.pick(2) ? DType::int64 : DType::int32;
  const std::int64_t n = in.rare(16) ? in.range(17, 64) : in.pick(17);
  const std::int64_t t = n + (in.rare() ? in.pick(3) : 0);
  static const std::vector<std::int64_t> kHead = {8, 16, 1, 2, 3, 7, 17, 32, 33, 64, 128};
  const std::int64_t h = 1 + in.pick(4), d = in.choose(kHead);
  const std::int64_t nb = in.pick(4);
  static const std::vector<std::int64_t> kBlock = {16, 1, 2, 3, 8, 5};
  const std::int64_t bs = in.choose(kBlock);

  Tensor& key = c.add("key", Role::input);
  Tensor& value = c.add("value", Role::input);
  Tensor& kc = c.add("key_cache", Role::cache);
  Tensor& vc = c.add("value_cache", Role::cache);
  Tensor& slot = c.add("slot_mapping", Role::index);
  Tensor& ks = c.add("k_scale", Role::input);
  Tensor& vs = c.add("v_scale", Role::input);
  key.dtype = value.dtype = dt;
  kc.dtype = vc.dtype = in.rare() ? DType::float16 : cdt;
  ks.dtype = vs.dtype = in.rare() ? DType::float16 : DType::float32;
  slot.dtype = idt;
  key.set_shape({t, h, d});
  value.set_shape({t, h, d});
  if (o.layout == KvCacheLayout::HND) {
    kc.set_shape({nb, h, bs, d});
    vc.set_shape({nb, h, bs, d});
  } else {
    kc.set_shape({nb, bs, h, d});
    vc.set_shape({nb, bs, h, d});
  }
  const std::int64_t scale_n = in.pick(2) ? h : 1;
  ks.set_shape({scale_n});
  vs.set_shape({in.rare() ? scale_n + 1 : scale_n});
  ks.present = vs.present = o.format != KvCacheFormat::copy || in.pick(2);
  layout(key, in, true);
  layout(value, in, true);
  layout(kc, in, true);
  layout(vc, in, true);
  slot.set_shape({n});
  for (std::int64_t i = 0; i < n; ++i) {
    slot.values.push_back(slot_value(in, nb * bs, idt, slot.values));
  }
  key.misalign = static_cast<std::size_t>(in.pick(4)) * 2;
  kc.misalign = static_cast<std::size_t>(in.pick(4));
  mutate(c, in);
  if (!materialize(c)) return -1;
  c.note = std::string("PagedKvWrite format ") + kv_cache_format_name(o.format) + " layout " +
           (o.layout == KvCacheLayout::HND ? "HND" : "NHD") + " path " +
           std::to_string(static_cast<int>(path));

  auto options = [&](bool r) {
    PagedKvWriteOptions po = o;
    if (ks.present) po.k_scale = ks.view(r);
    if (vs.present) po.v_scale = vs.view(r);
    return po;
  };
  auto plan = [&](bool r) {
    return plan_paged_kv_write(key.view(r), value.view(r), kc.view(r), vc.view(r), slot.view(r),
                               options(r));
  };
  const Outcome ref = run_cpp([&] { reference::execute(plan(true)); });
  Outcome tested;
  bool any_status = false;
  if (path == Path::oneshot) {
    tested = run_cpp([&] {
      paged_kv_write(key.view(false), value.view(false), kc.view(false), vc.view(false),
                     slot.view(false), options(false));
    });
  } else if (path == Path::plan_execute) {
    tested = run_cpp([&] { execute(plan(false)); });
  } else {
    PagedKvWriteOptions po = options(false);
    tested = run_c(c, po, any_status);
  }
  check(c, tested, ref, any_status);
  return 0;
}

}  // namespace
}  // namespace kvscatter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvscatter::fuzz::run(data, size);
}
