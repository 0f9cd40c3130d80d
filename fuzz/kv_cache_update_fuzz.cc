// Fuzz target of the contiguous cache update: float32/float16/bfloat16 caches, float32 or
// same-dtype inputs (NaN/Inf/subnormal patterns included), any axis order and padding of the
// (B, S, H) axes, broadcast inputs, and positions in range, at the edges and outside. See
// fuzz_common.h for the oracle.
#include <array>
#include <numeric>

#include "fuzz_common.h"
#include "kvscatter/kv_cache_update.h"

namespace kvscatter::fuzz {
namespace {

// (B, S|L, H) axes in a decoded order with optional padding; D stays innermost and dense.
void layout(Tensor& t, Input& in, bool allow_zero) {
  std::array<int, 3> order{0, 1, 2};
  if (in.pick(4) == 3) {
    for (int i = 2; i > 0; --i) std::swap(order[i], order[in.pick(i + 1)]);
  }
  t.strides[3] = 1;
  std::int64_t s = std::max<std::int64_t>(t.shape[3], 1);
  if (in.pick(8) == 7) s += in.pick(5);
  for (int k = 3; k-- > 0;) {
    const int a = order[k];
    t.strides[a] = s;
    s *= std::max<std::int64_t>(t.shape[a], 1);
    if (in.pick(8) == 7) s += in.pick(5);
  }
  if (allow_zero && in.pick(8) == 7) t.strides[in.pick(3)] = 0;  // broadcast input
}

int run(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  decode_runtime(in);
  const Path path = decode_path(in);
  Case c;
  c.rng.s = in.u64();
  c.special = in.pick(4) == 3 ? static_cast<int>(1 + in.pick(16)) : 0;

  static const std::vector<DType> kCache = {DType::bfloat16, DType::float16, DType::float32};
  const std::int64_t b = in.pick(4);
  std::int64_t s = 1 + in.pick(16);
  const std::int64_t h = 1 + in.pick(4);
  const std::int64_t d = head_size(in);
  s = cap_count(s, h * d * 4);
  const std::int64_t l = in.rare(16) ? s : in.pick(s + 1);
  std::int64_t position = in.pick(s - l + 1);
  if (in.rare()) {
    static const std::vector<std::int64_t> kBad = {-1, 1, std::numeric_limits<std::int64_t>::min(),
                                                   std::numeric_limits<std::int64_t>::max()};
    const std::int64_t bad = in.choose(kBad);
    position = bad == 1 ? s - l + 1 : bad;
  }

  Tensor& kc = c.add("key_cache", Role::cache);
  Tensor& vc = c.add("value_cache", Role::cache);
  Tensor& nk = c.add("new_keys", Role::input);
  Tensor& nv = c.add("new_values", Role::input);
  kc.dtype = in.choose(kCache);
  vc.dtype = in.pick(4) == 3 ? in.choose(kCache) : kc.dtype;
  nk.dtype = in.pick(2) ? DType::float32 : kc.dtype;
  nv.dtype = in.pick(2) ? DType::float32 : vc.dtype;
  kc.set_shape({b, s, h, d});
  vc.set_shape({b, s, h, d});
  nk.set_shape({b, l, h, d});
  nv.set_shape({b, l, h, d});
  layout(kc, in, false);
  layout(vc, in, false);
  layout(nk, in, true);
  layout(nv, in, true);
  mutate(c, in);
  if (!materialize(c)) return -1;
  c.note = "kv_cache_update position " + std::to_string(position) + " path " +
           std::to_string(static_cast<int>(path));

  auto plan = [&](bool r) {
    return plan_kv_cache_update(kc.view(r), vc.view(r), nk.view(r), nv.view(r), position);
  };
  const Outcome ref = run_cpp([&] { reference::execute(plan(true)); });
  Outcome tested;
  bool any_status = false;
  if (path == Path::oneshot) {
    tested = run_cpp([&] {
      const std::int64_t n =
          kv_cache_update(kc.view(false), vc.view(false), nk.view(false), nv.view(false), position);
      if (n != position + nk.shape[1]) die("kv_cache_update returned a wrong length");
    });
  } else if (path == Path::plan_execute) {
    tested = run_cpp([&] { execute(plan(false)); });
  } else {
    CTensors ct;
    kvsTensor* tkc = ct.make(kc);
    kvsTensor* tvc = ct.make(vc);
    kvsTensor* tnk = ct.make(nk);
    kvsTensor* tnv = ct.make(nv);
    std::int64_t new_len = -7;
    tested = c_two_phase(
        ct, any_status, "kvsKvCacheUpdate",
        [&](std::uint64_t* ws, kvsExecutor** ex) {
          const kvsStatus st =
              kvsKvCacheUpdateGetWorkspaceSize(tkc, tvc, tnk, tnv, position, &new_len, ws, ex);
          if (st == KVS_SUCCESS && new_len != position + nk.shape[1]) {
            die("kvsKvCacheUpdateGetWorkspaceSize: wrong new length");
          }
          return st;
        },
        [](kvsExecutor* ex) { return kvsKvCacheUpdate(nullptr, 0, ex); });
  }
  check(c, tested, ref, any_status);
  return 0;
}

}  // namespace
}  // namespace kvscatter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvscatter::fuzz::run(data, size);
}
