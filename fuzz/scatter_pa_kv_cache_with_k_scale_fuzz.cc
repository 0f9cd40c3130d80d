// Fuzz target of ScatterPaKvCacheWithKScale: float8 keys and values, per-token-head scales,
// caches in any physical axis order (BNBD logical shape over permuted, padded strides), inputs
// with any strides including zero (broadcast), and slots of every kind (out-of-range ones are
// skipped, never rejected). See fuzz_common.h for the oracle.
#include <array>
#include <numeric>

#include "fuzz_common.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"

namespace kvscatter::fuzz {
namespace {

// Strides for t's shape laid out in a decoded axis order (outermost first) with optional
// padding; the last axis stays innermost unless the input says otherwise.
void layout(Tensor& t, Input& in, bool allow_zero) {
  std::array<int, kMaxRank> order{};
  std::iota(order.begin(), order.begin() + t.rank, 0);
  if (in.pick(4) == 3) {  // a permuted physical order
    for (int i = t.rank - 1; i > 0; --i) std::swap(order[i], order[in.pick(i + 1)]);
  }
  std::int64_t s = 1;
  for (int k = t.rank; k-- > 0;) {
    const int a = order[k];
    t.strides[a] = s;
    s *= std::max<std::int64_t>(t.shape[a], 1);
    if (in.pick(8) == 7) s += in.pick(5);
  }
  if (allow_zero && in.pick(8) == 7) t.strides[in.pick(t.rank)] = 0;  // broadcast input
}

int run(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  decode_runtime(in);
  const Path path = decode_path(in);
  Case c;
  c.rng.s = in.u64();
  c.special = in.pick(4) == 3 ? static_cast<int>(1 + in.pick(16)) : 0;

  const DType dt = in.pick(2) ? DType::float8_e4m3fn : DType::float8_e5m2;
  const DType idt = in.pick(2) ? DType::int64 : DType::int32;
  std::int64_t t = in.rare(16) ? in.range(17, 700) : in.pick(17);
  const std::int64_t n = 1 + in.pick(4);
  const std::int64_t dk = head_size(in), dv = head_size(in);
  std::int64_t nb = in.pick(9);
  static const std::vector<std::int64_t> kBlock = {4, 1, 2, 3, 8, 16, 5, 32, 128};
  const std::int64_t bs = in.choose(kBlock);
  t = cap_count(t, n * std::max(dk, dv));
  nb = cap_count(nb, bs * n * std::max(dk, dv));
  std::string cache_layout = in.pick(2) ? "BNBD" : "";
  if (in.rare()) cache_layout = in.pick(2) ? "bnbd" : "BSND";

  Tensor& key = c.add("key", Role::input);
  Tensor& value = c.add("value", Role::input);
  Tensor& kc = c.add("key_cache", Role::cache);
  Tensor& vc = c.add("value_cache", Role::cache);
  Tensor& slot = c.add("slot_mapping", Role::index);
  Tensor& ks = c.add("key_scale", Role::input);
  Tensor& ksc = c.add("key_scale_cache", Role::cache);
  key.dtype = value.dtype = kc.dtype = vc.dtype = dt;
  ks.dtype = ksc.dtype = DType::float32;
  slot.dtype = idt;
  key.set_shape({t, n, dk});
  value.set_shape({t, n, dv});
  ks.set_shape({t, n});
  kc.set_shape({nb, n, bs, dk});
  vc.set_shape({nb, n, bs, dv});
  ksc.set_shape({nb, n, bs, 1});
  layout(key, in, true);
  layout(value, in, true);
  layout(ks, in, true);
  layout(kc, in, false);
  layout(vc, in, false);
  layout(ksc, in, false);
  slot.set_shape({t});
  if (in.pick(4) == 3) slot.strides[0] = in.pick(3);  // 0: every token reads one slot
  for (std::int64_t i = 0; i < t; ++i) {
    slot.values.push_back(slot_value(in, nb * bs, idt, slot.values));
  }
  // Byte tensors at any address; the float32 scales keep their natural alignment.
  for (Tensor* x : {&key, &kc}) x->misalign = static_cast<std::size_t>(in.pick(8));
  for (Tensor* x : {&ks, &ksc}) x->misalign = static_cast<std::size_t>(in.pick(2)) * 4;
  mutate(c, in);
  if (!materialize(c)) return -1;
  c.note = "ScatterPaKvCacheWithKScale cache_layout \"" + cache_layout + "\" path " +
           std::to_string(static_cast<int>(path));

  // The layout text is parsed after the null-data checks, in the order the C ABI uses.
  auto layout = [&](bool r) {
    for (const Tensor* operand : {&key, &value, &kc, &vc, &slot, &ks, &ksc}) {
      const TensorView v = operand->view(r);
      bool empty = false;
      for (int i = 0; i < v.rank; ++i) empty = empty || v.dim(i) == 0;
      if (v.data == nullptr && !empty) return KScaleCacheLayout::BNBD;  // the plan rejects it
    }
    return parse_k_scale_cache_layout(cache_layout);
  };
  auto plan = [&](bool r) {
    return plan_scatter_pa_kv_cache_with_k_scale(key.view(r), value.view(r), kc.view(r), vc.view(r),
                                                 slot.view(r), ks.view(r), ksc.view(r), layout(r));
  };
  const Outcome ref = run_cpp([&] { reference::execute(plan(true)); });
  Outcome tested;
  bool any_status = false;
  if (path == Path::oneshot) {
    tested = run_cpp([&] {
      scatter_pa_kv_cache_with_k_scale(key.view(false), value.view(false), kc.view(false),
                                       vc.view(false), slot.view(false), ks.view(false),
                                       ksc.view(false), layout(false));
    });
  } else if (path == Path::plan_execute) {
    tested = run_cpp([&] { execute(plan(false)); });
  } else {
    CTensors ct;
    kvsTensor* tk = ct.make(key);
    kvsTensor* tv = ct.make(value);
    kvsTensor* tkc = ct.make(kc);
    kvsTensor* tvc = ct.make(vc);
    kvsTensor* ts = ct.make(slot);
    kvsTensor* tks = ct.make(ks);
    kvsTensor* tksc = ct.make(ksc);
    tested = c_two_phase(
        ct, any_status, "kvsScatterPaKvCacheWithKScale",
        [&](std::uint64_t* ws, kvsExecutor** ex) {
          return kvsScatterPaKvCacheWithKScaleGetWorkspaceSize(tk, tv, tkc, tvc, ts, tks, tksc,
                                                               cache_layout.c_str(), ws, ex);
        },
        [](kvsExecutor* ex) { return kvsScatterPaKvCacheWithKScale(nullptr, 0, ex); });
  }
  check(c, tested, ref, any_status);
  return 0;
}

}  // namespace
}  // namespace kvscatter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvscatter::fuzz::run(data, size);
}
