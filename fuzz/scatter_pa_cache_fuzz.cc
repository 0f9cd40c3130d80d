// Fuzz target of ScatterPaCache: plain rows of every copy dtype and both packed FP4 types,
// ReduceMean and tail keep over the arithmetic dtypes, slots and runs of every kind (padding,
// repeats, past the cache), compress values in and out of range, a cache strided along its
// block axis, and every front door. See fuzz_common.h for the oracle.
#include "fuzz_common.h"
#include "kvscatter/scatter_pa_cache.h"

namespace kvscatter::fuzz {
namespace {

const std::vector<DType> kPlain = {DType::float16,     DType::bfloat16,    DType::float32,
                                   DType::int8,        DType::uint8,       DType::int16,
                                   DType::uint16,      DType::int32,       DType::uint32,
                                   DType::hifloat8,    DType::float8_e5m2, DType::float8_e4m3fn,
                                   DType::float4_e2m1, DType::float4_e1m2};
const std::vector<DType> kMath = {DType::float16, DType::bfloat16, DType::float32,
                                  DType::int8,    DType::uint8,    DType::int16,
                                  DType::uint16,  DType::int32,    DType::uint32};

std::int64_t small(Input& in, std::int64_t hi) {
  return in.rare() ? -1 - in.pick(3) : in.pick(hi + 1);
}

Outcome run_tested(Path path, Tensor& key, Tensor& cache, Tensor& slots, Tensor& lens, Tensor& offs,
                   Tensor& seq, bool& any_status) {
  ScatterPaCacheOptions o;
  auto opt_view = [](Tensor& t) {
    return t.present ? std::optional<TensorView>(t.view(false)) : std::nullopt;
  };
  o.compress_lens = opt_view(lens);
  o.compress_seq_offsets = opt_view(offs);
  o.seq_lens = opt_view(seq);
  if (path == Path::oneshot) {
    return run_cpp(
        [&] { scatter_pa_cache(key.view(false), cache.view(false), slots.view(false), o); });
  }
  if (path == Path::plan_execute) {
    return run_cpp([&] {
      execute(plan_scatter_pa_cache(key.view(false), cache.view(false), slots.view(false), o));
    });
  }
  CTensors ct;
  kvsTensor* tk = ct.make(key);
  kvsTensor* tc = ct.make(cache);
  kvsTensor* ts = ct.make(slots);
  kvsTensor* tl = ct.make(lens);
  kvsTensor* to = ct.make(offs);
  kvsTensor* tq = ct.make(seq);
  return c_two_phase(
      ct, any_status, "kvsScatterPaCache",
      [&](std::uint64_t* ws, kvsExecutor** ex) {
        return kvsScatterPaCacheGetWorkspaceSize(tk, tc, ts, tl, to, tq, ws, ex);
      },
      [](kvsExecutor* ex) { return kvsScatterPaCache(nullptr, 0, ex); });
}

int run(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  decode_runtime(in);
  const Path path = decode_path(in);
  Case c;
  c.rng.s = in.u64();
  const bool four = in.pick(2) == 1, reduce_mean = four && in.pick(2) == 1;
  const DType dt = four ? in.choose(kMath) : in.choose(kPlain);
  const DType idt = in.pick(2) ? DType::int64 : DType::int32;
  static const std::vector<std::int64_t> kBlock = {4, 1, 2, 3, 8, 16, 5};
  const std::int64_t nb = in.pick(7), bs = in.choose(kBlock), nh = 1 + in.pick(3);
  // A packed FP4 view counts elements, an even number per row (odd ones, rarely, are errors).
  const bool fp4 = dtype_bits(dt) == 4;
  const std::int64_t d = head_size(in) * (fp4 && !in.rare() ? 2 : 1), ns = nb * bs;
  Tensor& key = c.add("key", Role::input);
  Tensor& cache = c.add("key_cache", Role::cache);
  Tensor& slots = c.add("slot_mapping", Role::index);
  Tensor& lens = c.add("compress_lens", Role::index);
  Tensor& offs = c.add("compress_seq_offsets", Role::index);
  Tensor& seq = c.add("seq_lens", Role::index);
  key.dtype = cache.dtype = dt;
  slots.dtype = lens.dtype = offs.dtype = seq.dtype = idt;
  lens.present = seq.present = four;
  offs.present = reduce_mean;
  if (!four) {
    const std::int64_t t = in.rare(16) ? in.range(17, 300) : in.pick(17);
    key.set_shape({t, nh, d});
    cache.set_shape({nb, bs, nh, d});
    slots.set_shape({t});
    for (std::int64_t i = 0; i < t; ++i)
      slots.values.push_back(slot_value(in, ns, idt, slots.values));
  } else {
    const std::int64_t b = in.pick(4), s = 1 + in.pick(8);
    key.set_shape({b, s, nh, d});
    cache.set_shape({nb, bs, 1, d});
    slots.set_shape({b, nh});
    lens.set_shape({b * nh});
    offs.set_shape({b * nh});
    seq.set_shape({b});
    for (std::int64_t x = 0; x < b; ++x) seq.values.push_back(in.rare() ? s + 1 : in.pick(s + 1));
    for (std::int64_t i = 0; i < b * nh; ++i) {
      const std::int64_t l =
          std::max<std::int64_t>(seq.values[static_cast<std::size_t>(i / nh)], 0);
      const std::int64_t w = small(in, l);
      lens.values.push_back(w);
      offs.values.push_back(small(in, std::max<std::int64_t>(l - std::max<std::int64_t>(w, 0), 0)));
      slots.values.push_back(in.pick(4) == 3 ? -1 : slot_value(in, ns, idt, slots.values));
    }
    c.nan_tolerant = true;  // a window holding NaNs has a NaN mean of unspecified payload
  }
  if (in.pick(4) == 3) cache.strides[0] += fp4 ? 2 * in.pick(20) : in.pick(40);
  key.misalign = cache.misalign = static_cast<std::size_t>(in.pick(8));
  for (const Tensor* t : {&key, &cache}) {
    if (t->extent() * static_cast<std::int64_t>(dtype_size(t->dtype)) > (std::int64_t{1} << 16))
      return -1;
  }
  mutate(c, in);
  if (!materialize(c)) return -1;
  c.note = std::string("ScatterPaCache ") +
           (four ? (reduce_mean ? "ReduceMean" : "TailKeep") : "Plain") + " path " +
           std::to_string(static_cast<int>(path));
  const Outcome ref = run_cpp([&] {
    ScatterPaCacheOptions o;
    if (lens.present) o.compress_lens = lens.view(true);
    if (offs.present) o.compress_seq_offsets = offs.view(true);
    if (seq.present) o.seq_lens = seq.view(true);
    reference::execute(
        plan_scatter_pa_cache(key.view(true), cache.view(true), slots.view(true), o));
  });
  bool any_status = false;
  const Outcome tested = run_tested(path, key, cache, slots, lens, offs, seq, any_status);
  check(c, tested, ref, any_status);
  return 0;
}

}  // namespace
}  // namespace kvscatter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvscatter::fuzz::run(data, size);
}
