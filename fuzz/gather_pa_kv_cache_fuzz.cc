// Fuzz target of GatherPaKvCache: Norm and PA_NZ caches of every dtype (key and
// value dtypes may differ in PA_NZ), key-only calls, plain and cumulative
// lengths, seq_offset, block ids of every kind (padding, repeats, past the
// cache, huge), tables too short for their sequences, strided caches and output
// rows, and every front door. The dense key/value outputs are what the operator
// writes, so the oracle treats them as the caches. See fuzz_common.h.
#include <limits>

#include "fuzz_common.h"
#include "kvscatter/gather_pa_kv_cache.h"

namespace kvscatter::fuzz {
namespace {

const std::vector<DType> kDtypes = {DType::float16,  DType::bfloat16,    DType::float32,
                                    DType::int8,     DType::uint8,       DType::int16,
                                    DType::uint16,   DType::int32,       DType::uint32,
                                    DType::hifloat8, DType::float8_e5m2, DType::float8_e4m3fn};

std::int64_t block_id(Input& in, std::int64_t nb, DType idt) {
  if (in.rare(12)) {
    switch (in.pick(5)) {
      case 0:
        return nb;  // one past the cache
      case 1:
        return idt == DType::int32 ? std::numeric_limits<std::int32_t>::max()
                                   : std::int64_t{1} << (32 + in.pick(31));
      case 2:
        return std::numeric_limits<std::int32_t>::min();
      default:
        return -1 - in.pick(3);  // padding block
    }
  }
  return in.pick(8) == 7 ? -1 : (nb > 0 ? in.pick(nb) : -1);
}

// Cache [nb, a, b, c] with an optionally padded block axis; output rows
// optionally padded.
void pad_outer(Tensor& t, Input& in) {
  if (in.pick(4) == 3) t.strides[0] += in.pick(40);
}

struct Call {
  Tensor *kc, *vc, *tables, *lens, *offset, *key, *value;
  CacheMode mode;
  bool cumsum;
};

Outcome run_tested(Path path, const Call& k, bool& any_status) {
  GatherPaKvCacheOptions opt;
  opt.cache_mode = k.mode;
  opt.is_seq_lens_cumsum = k.cumsum;
  auto opt_view = [](Tensor* t) {
    return t->present ? std::optional<TensorView>(t->view(false)) : std::nullopt;
  };
  opt.seq_offset = opt_view(k.offset);
  if (path == Path::oneshot) {
    return run_cpp([&] {
      gather_pa_kv_cache(k.kc->view(false), opt_view(k.vc), k.tables->view(false),
                         k.lens->view(false), k.key->view(false), opt_view(k.value), opt);
    });
  }
  if (path == Path::plan_execute) {
    return run_cpp([&] {
      execute(plan_gather_pa_kv_cache(k.kc->view(false), opt_view(k.vc), k.tables->view(false),
                                      k.lens->view(false), k.key->view(false), opt_view(k.value),
                                      opt));
    });
  }
  CTensors ct;
  kvsTensor* tkc = ct.make(*k.kc);
  kvsTensor* tvc = ct.make(*k.vc);
  kvsTensor* tt = ct.make(*k.tables);
  kvsTensor* tl = ct.make(*k.lens);
  kvsTensor* tk = ct.make(*k.key);
  kvsTensor* tv = ct.make(*k.value);
  kvsTensor* to = ct.make(*k.offset);
  const char* mode = k.mode == CacheMode::PA_NZ ? "PA_NZ" : "Norm";
  return c_two_phase(
      ct, any_status, "kvsGatherPaKvCache",
      [&](std::uint64_t* ws, kvsExecutor** ex) {
        return kvsGatherPaKvCacheGetWorkspaceSize(tkc, tvc, tt, tl, tk, tv, to, mode, k.cumsum, ws,
                                                  ex);
      },
      [](kvsExecutor* ex) { return kvsGatherPaKvCache(nullptr, 0, ex); });
}

int run(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  decode_runtime(in);
  const Path path = decode_path(in);
  Case c;
  c.rng.s = in.u64();
  const CacheMode mode = in.pick(3) == 2 ? CacheMode::PA_NZ : CacheMode::Norm;
  const DType kd = in.choose(kDtypes);
  const DType vd = mode == CacheMode::PA_NZ && in.pick(2) ? in.choose(kDtypes) : kd;
  const DType idt = in.pick(2) ? DType::int64 : DType::int32;
  const bool with_value = in.pick(4) != 3, cumsum = in.pick(2), with_offset = in.pick(3) == 2;
  static const std::vector<std::int64_t> kBlock = {4, 1, 2, 3, 8, 16, 5, 32};
  const std::int64_t nb = in.pick(9), bs = in.choose(kBlock), heads = 1 + in.pick(3);
  const std::int64_t batch = in.pick(6), width = in.pick(6);
  Tensor& kc = c.add("key_cache", Role::input);
  Tensor& vc = c.add("value_cache", Role::input);
  Tensor& tables = c.add("block_tables", Role::index);
  Tensor& lens = c.add("seq_lens", Role::index);
  Tensor& offset = c.add("seq_offset", Role::index);
  Tensor& key = c.add("key", Role::cache);
  Tensor& value = c.add("value", Role::cache);
  vc.present = value.present = with_value;
  offset.present = with_offset;
  kc.dtype = key.dtype = kd;
  vc.dtype = value.dtype = vd;
  tables.dtype = lens.dtype = offset.dtype = idt;
  std::int64_t total = 0;
  tables.set_shape({batch, width});
  for (std::int64_t i = 0; i < batch * width; ++i) tables.values.push_back(block_id(in, nb, idt));
  if (cumsum) lens.values.push_back(in.rare() ? 1 : 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t off = in.rare() ? -1 - in.pick(4) : in.pick(2 * bs);
    offset.values.push_back(off);
    const std::int64_t room =
        std::max<std::int64_t>(width - std::max<std::int64_t>(off, 0) / bs, 0);
    const std::int64_t n = in.rare(12) ? in.pick(4 * bs + 1) : in.pick(room * bs + 1);
    total += n;
    lens.values.push_back(cumsum ? lens.values.back() + (in.rare() ? -1 : n) : n);
  }
  lens.set_shape({static_cast<std::int64_t>(lens.values.size())});
  offset.set_shape({batch});
  const std::int64_t rows = std::max<std::int64_t>(total + in.pick(3) - (in.rare() ? 1 : 0), 0);
  for (auto [cache, out, dt] : {std::tuple{&kc, &key, kd}, std::tuple{&vc, &value, vd}}) {
    const auto lanes = static_cast<std::int64_t>(32 / dtype_size(dt));
    if (mode == CacheMode::PA_NZ) {
      const std::int64_t c1 = 1 + in.pick(4);
      cache->set_shape({nb, c1, bs, lanes});
      out->set_shape({rows, c1 * lanes});
    } else {
      const std::int64_t d = head_size(in);
      cache->set_shape({nb, bs, heads, d});
      out->set_shape({rows, heads, d});
    }
    pad_outer(*cache, in);
    pad_outer(*out, in);
    cache->misalign = out->misalign = static_cast<std::size_t>(in.pick(8));
  }
  // Small cases keep the run at thousands of executions per second.
  for (const Tensor* t : {&kc, &vc, &key, &value}) {
    if (t->extent() * static_cast<std::int64_t>(dtype_size(t->dtype)) > (std::int64_t{1} << 18))
      return -1;
  }
  mutate(c, in);
  if (!materialize(c)) return -1;
  c.note = std::string("GatherPaKvCache ") + (mode == CacheMode::PA_NZ ? "PA_NZ" : "Norm") +
           (cumsum ? " cumsum" : "") + " path " + std::to_string(static_cast<int>(path));
  const Call call{&kc, &vc, &tables, &lens, &offset, &key, &value, mode, cumsum};
  const Outcome ref = run_cpp([&] {
    GatherPaKvCacheOptions opt;
    opt.cache_mode = mode;
    opt.is_seq_lens_cumsum = cumsum;
    if (offset.present) opt.seq_offset = offset.view(true);
    std::optional<TensorView> rvc, rv;
    if (with_value) rvc = vc.view(true), rv = value.view(true);
    reference::execute(plan_gather_pa_kv_cache(kc.view(true), rvc, tables.view(true),
                                               lens.view(true), key.view(true), rv, opt));
  });
  bool any_status = false;
  const Outcome tested = run_tested(path, call, any_status);
  check(c, tested, ref, any_status);
  return 0;
}

}  // namespace
}  // namespace kvscatter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvscatter::fuzz::run(data, size);
}
