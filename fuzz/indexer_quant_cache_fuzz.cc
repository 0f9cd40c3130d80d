// Fuzz target of IndexerQuantCache: the four modes with every cache, scale and x dtype, both
// round_scale settings, x of rank 2 or 3 with padded rows, rows wider than d, slots of every
// kind (skip, repeats, past the cache, other negatives), any bit pattern in x (NaN and infinity
// included: their codes are unspecified, but both paths must agree and stay inside the rows),
// caches strided along the block axis, and every front door. See fuzz_common.h.
#include "fuzz_common.h"
#include "kvscatter/indexer_quant_cache.h"

namespace kvscatter::fuzz {
namespace {

const char* kModeNames[] = {"mxfp8", "fp8", "hifloat8", "mxfp4"};

Outcome run_tested(Path path, Tensor& cache, Tensor& scale, Tensor& x, Tensor& slots,
                   const IndexerQuantCacheOptions& o, bool& any_status) {
  if (path == Path::oneshot) {
    return run_cpp([&] {
      indexer_quant_cache(cache.view(false), scale.view(false), x.view(false), slots.view(false),
                          o);
    });
  }
  if (path == Path::plan_execute) {
    return run_cpp([&] {
      execute(plan_indexer_quant_cache(cache.view(false), scale.view(false), x.view(false),
                                       slots.view(false), o));
    });
  }
  CTensors ct;
  kvsTensor* tc = ct.make(cache);
  kvsTensor* ts = ct.make(scale);
  kvsTensor* tx = ct.make(x);
  kvsTensor* tm = ct.make(slots);
  const char* mode = kModeNames[static_cast<int>(o.quant_mode)];
  return c_two_phase(
      ct, any_status, "kvsIndexerQuantCache",
      [&](std::uint64_t* ws, kvsExecutor** ex) {
        return kvsIndexerQuantCacheGetWorkspaceSize(tc, ts, tx, tm, mode, o.round_scale, o.x_scale,
                                                    ws, ex);
      },
      [](kvsExecutor* ex) { return kvsIndexerQuantCache(nullptr, 0, ex); });
}

int run(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  decode_runtime(in);
  const Path path = decode_path(in);
  Case c;
  c.rng.s = in.u64();
  c.special = in.pick(4) == 3 ? static_cast<int>(1 + in.pick(16)) : 0;
  IndexerQuantCacheOptions o;
  o.quant_mode = static_cast<IndexerQuantMode>((in.pick(4) + 1) % 4);  // 0 decodes to fp8
  o.round_scale = in.pick(2) == 0;
  o.x_scale = static_cast<float>(in.range(1, 16)) / 8.0f;
  const bool mx =
      o.quant_mode == IndexerQuantMode::mxfp8 || o.quant_mode == IndexerQuantMode::mxfp4;
  const std::int64_t d = 32 * (1 + in.pick(8)), rows = in.pick(24), nb = in.pick(5);
  static const std::vector<std::int64_t> kBlock = {4, 1, 2, 3, 8, 16};
  const std::int64_t bs = in.choose(kBlock);
  Tensor& cache = c.add("cache", Role::cache);
  Tensor& scale = c.add("cache_scale", Role::cache);
  Tensor& x = c.add("x", Role::input);
  Tensor& slots = c.add("slot_mapping", Role::index);
  x.dtype = in.pick(2) ? DType::bfloat16 : DType::float16;
  switch (o.quant_mode) {
    case IndexerQuantMode::hifloat8:
      cache.dtype = in.pick(2) ? DType::uint8 : DType::hifloat8;
      break;
    case IndexerQuantMode::mxfp4:
      cache.dtype = in.pick(2) ? DType::float4_e1m2 : DType::float4_e2m1;
      break;
    default:
      cache.dtype = in.pick(2) ? DType::float8_e5m2 : DType::float8_e4m3fn;
  }
  scale.dtype = mx ? (in.pick(2) ? DType::uint8 : DType::float8_e8m0) : DType::float32;
  slots.dtype = in.pick(2) ? DType::int64 : DType::int32;
  // A packed FP4 view counts elements, two to a byte: its row and block strides stay even.
  const std::int64_t e = o.quant_mode == IndexerQuantMode::mxfp4 ? 2 : 1;
  cache.set_shape({nb, bs, 1, d + e * in.pick(3)});
  scale.set_shape({nb, bs, 1, (mx ? d / 32 : 1) + in.pick(2)});
  if (in.pick(4) == 3) cache.strides[0] += e * in.pick(40);
  if (in.pick(3) == 2 && rows % 2 == 0) {
    x.set_shape({2, rows / 2, d});
    slots.set_shape({2, rows / 2});
  } else {
    x.set_shape({rows, d});
    slots.set_shape({rows});
  }
  if (in.pick(4) == 3) x.strides[x.rank - 2] += in.pick(5);
  std::vector<std::int64_t> earlier;
  for (std::int64_t i = 0; i < rows; ++i) {
    std::int64_t s = slot_value(in, nb * bs, slots.dtype, earlier);
    if (s < -1 && !in.rare(32)) s = -1;  // other negatives are errors here: keep them rare
    slots.values.push_back(s);
    earlier.push_back(s);
  }
  cache.misalign = static_cast<std::size_t>(in.pick(8));
  x.misalign = 2 * static_cast<std::size_t>(in.pick(4));
  mutate(c, in);
  if (!materialize(c)) return -1;
  c.note = std::string("IndexerQuantCache ") + kModeNames[static_cast<int>(o.quant_mode)] +
           (o.round_scale ? " round" : " exact") + " path " +
           std::to_string(static_cast<int>(path));
  const Outcome ref = run_cpp([&] {
    reference::execute(plan_indexer_quant_cache(cache.view(true), scale.view(true), x.view(true),
                                                slots.view(true), o));
  });
  bool any_status = false;
  const Outcome tested = run_tested(path, cache, scale, x, slots, o, any_status);
  check(c, tested, ref, any_status);
  return 0;
}

}  // namespace
}  // namespace kvscatter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvscatter::fuzz::run(data, size);
}
