// Fuzz target of PagedLatentWrite: copy, fp8 and fp8_ds_mla rows from token-strided kv_c and
// k_pe, caches with padded entries and blocks (zero strides included, which must be rejected),
// scales of any value, and slots of every kind. See fuzz_common.h for the oracle.
#include "fuzz_common.h"
#include "kvscatter/paged_latent_write.h"

namespace kvscatter::fuzz {
namespace {

void rows(Tensor& t, Input& in) {
  t.contiguous();
  if (in.pick(4) == 3) t.strides[0] = t.shape[1] + in.pick(9);
  if (in.rare(16)) t.strides[in.pick(2)] = in.pick(2);
}

int run(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  decode_runtime(in);
  const Path path = decode_path(in);
  Case c;
  c.rng.s = in.u64();
  c.special = in.pick(4) == 3 ? static_cast<int>(1 + in.pick(16)) : 0;

  PagedLatentWriteOptions o;
  o.format = static_cast<LatentCacheFormat>(in.pick(4));
  const bool ds = o.format == LatentCacheFormat::fp8_ds_mla;
  static const std::vector<DType> kIn = {DType::bfloat16, DType::float16, DType::float32};
  const DType dt = in.choose(kIn);
  const DType cdt = o.format == LatentCacheFormat::copy       ? dt
                    : ds || in.pick(2)                        ? DType::uint8
                    : o.format == LatentCacheFormat::fp8_e4m3 ? DType::float8_e4m3fn
                                                              : DType::float8_e5m2;
  const DType idt = in.pick(2) ? DType::int64 : DType::int32;
  const std::int64_t n = in.rare(16) ? in.range(17, 48) : in.pick(9);
  const std::int64_t r = ds && !in.rare() ? 512 : head_size(in);
  const std::int64_t pe = ds && !in.rare() ? 64 : 1 + in.pick(64);
  const std::int64_t nb = in.pick(4), bs = 1 + in.pick(8);
  const std::int64_t entry = ds ? (in.rare() ? 576 : 656) : r + pe + (in.rare() ? 1 : 0);

  Tensor& kv_c = c.add("kv_c", Role::input);
  Tensor& k_pe = c.add("k_pe", Role::input);
  Tensor& cache = c.add("kv_cache", Role::cache);
  Tensor& slot = c.add("slot_mapping", Role::index);
  Tensor& scale = c.add("scale", Role::input);
  kv_c.dtype = k_pe.dtype = dt;
  cache.dtype = in.rare() ? DType::float16 : cdt;
  slot.dtype = idt;
  scale.dtype = in.rare() ? DType::float16 : DType::float32;
  kv_c.set_shape({n + (in.rare() ? -1 : in.pick(2)), r});
  k_pe.set_shape({n, pe});
  cache.set_shape({nb, bs, entry});
  rows(kv_c, in);
  rows(k_pe, in);
  if (in.pick(4) == 3) {
    cache.strides[1] = entry + in.pick(7);
    cache.strides[0] = cache.strides[1] * bs + in.pick(5);
  }
  if (in.rare(16)) cache.strides[in.pick(3)] = in.pick(2);
  slot.set_shape({n});
  for (std::int64_t i = 0; i < n; ++i)
    slot.values.push_back(slot_value(in, nb * bs, idt, slot.values));
  scale.present = !ds || in.pick(2);
  scale.set_shape({in.rare() ? 2 : 1});
  kv_c.misalign = static_cast<std::size_t>(in.pick(4)) * 2;
  cache.misalign = static_cast<std::size_t>(in.pick(4));
  mutate(c, in);
  if (!materialize(c)) return -1;
  c.note = std::string("PagedLatentWrite format ") + latent_cache_format_name(o.format) + " path " +
           std::to_string(static_cast<int>(path));

  auto options = [&](bool ref) {
    PagedLatentWriteOptions po = o;
    if (scale.present) po.scale = scale.view(ref);
    return po;
  };
  auto plan = [&](bool ref) {
    return plan_paged_latent_write(kv_c.view(ref), k_pe.view(ref), cache.view(ref), slot.view(ref),
                                   options(ref));
  };
  const Outcome ref = run_cpp([&] { reference::execute(plan(true)); });
  Outcome tested;
  bool any_status = false;
  if (path == Path::oneshot) {
    tested = run_cpp([&] {
      paged_latent_write(kv_c.view(false), k_pe.view(false), cache.view(false), slot.view(false),
                         options(false));
    });
  } else if (path == Path::plan_execute) {
    tested = run_cpp([&] { execute(plan(false)); });
  } else {
    CTensors ct;
    kvsTensor* tc = ct.make(kv_c);
    kvsTensor* tp = ct.make(k_pe);
    kvsTensor* tk = ct.make(cache);
    kvsTensor* ts = ct.make(slot);
    kvsTensor* tsc = scale.present ? ct.make(scale) : nullptr;
    const char* format = latent_cache_format_name(o.format);
    tested = c_two_phase(
        ct, any_status, "kvsPagedLatentWrite",
        [&](std::uint64_t* ws, kvsExecutor** ex) {
          return kvsPagedLatentWriteGetWorkspaceSize(tc, tp, tk, ts, tsc, format, ws, ex);
        },
        [](kvsExecutor* ex) { return kvsPagedLatentWrite(nullptr, 0, ex); });
  }
  check(c, tested, ref, any_status);
  return 0;
}

}  // namespace
}  // namespace kvscatter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvscatter::fuzz::run(data, size);
}
