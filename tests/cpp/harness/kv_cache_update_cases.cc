// kv_cache_update cases: float32 inputs into float32, bfloat16 and float16 caches and 16-bit inputs
// into caches of their own dtype, values with infinities, NaNs, subnormals and signed zeros mixed
// in, 1-3 batches, sequences of 1-40, 1-9 heads of 1-140 elements, zero to S new tokens at every
// valid position (the last one included), padded strides on every axis but the last, unaligned
// buffers, prefills split over threads, and positions outside [0, S - L], which must fail.
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "harness/harness.h"
#include "harness/helpers.h"
#include "kvscatter/kv_cache_update.h"

namespace kvscatter::harness {
namespace {

struct Call {
  TensorRef key_cache, value_cache, new_keys, new_values;
  std::int64_t position = 0;
};

// float32 storage: mostly normal values, with specials sprinkled in.
void fill_floats(Case& c, Gen& g, const TensorRef& t) {
  if (t.dtype != DType::float32) return;
  auto& b = c.buffers[static_cast<std::size_t>(t.buffer)];
  const float specials[] = {0.f,
                            -0.f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            1e-40f,
                            -3e38f,
                            65520.f};
  std::normal_distribution<float> nd(0.f, 3.f);
  for (std::size_t i = 0; i + 4 <= b.size(); i += 4) {
    const float f = g.chance(1.0 / 16) ? specials[g.uniform(0, 7)] : nd(g.rng());
    std::memcpy(&b[i], &f, 4);
  }
}

Case generate(std::mt19937_64& rng) {
  Gen g(rng);
  Case c;
  std::ostringstream d;
  const auto [in, out] = g.pick<std::pair<DType, DType>>({{DType::float32, DType::float32},
                                                          {DType::float32, DType::bfloat16},
                                                          {DType::float32, DType::float16},
                                                          {DType::bfloat16, DType::bfloat16},
                                                          {DType::float16, DType::float16}});
  const bool threads = g.chance(0.05);
  const std::int64_t b = threads ? 1 : g.uniform(1, 3), s = threads ? 300 : g.uniform(1, 40);
  const std::int64_t h = threads ? 8 : g.uniform(1, 9), hd = threads ? 128 : g.uniform(1, 140);
  const std::int64_t l = threads ? 200 : g.uniform(0, s);
  Call call;
  call.position = g.uniform(0, s - l);
  d << (threads ? "threads " : "") << dtype_name(in) << " into " << dtype_name(out) << " B=" << b
    << " S=" << s << " H=" << h << " D=" << hd << " L=" << l << " position " << call.position;
  if (g.chance(0.05)) {
    call.position = g.chance(0.5) ? s - l + g.uniform(1, 3) : -g.uniform(1, 3);
    c.expect_error = true;
    d << " -> " << call.position << " (out of range)";
  }
  const int pad = threads ? 0 : 3;
  call.key_cache = add_tensor(c, g, "key_cache", out, {b, s, h, hd}, pad);
  call.value_cache = add_tensor(c, g, "value_cache", out, {b, s, h, hd}, pad);
  call.new_keys = add_tensor(c, g, "new_keys", in, {b, l, h, hd}, pad);
  call.new_values = add_tensor(c, g, "new_values", in, {b, l, h, hd}, pad);
  for (const TensorRef* t : {&call.key_cache, &call.value_cache, &call.new_keys, &call.new_values})
    fill_floats(c, g, *t);
  c.stream = g.chance(1.0 / 3);  // the non-temporal row copies on small calls
  if (c.stream) d << " streamed";
  c.name = d.str();
  c.run = [call](const std::vector<std::uint8_t*>& data, bool reference) {
    const KvCacheUpdatePlan plan =
        plan_kv_cache_update(call.key_cache.view(data), call.value_cache.view(data),
                             call.new_keys.view(data), call.new_values.view(data), call.position);
    if (reference) {
      reference::execute(plan);
    } else {
      execute(plan);
    }
  };
  return c;
}

}  // namespace

KVS_HARNESS_CASES(kv_cache_update, generate, 200);

}  // namespace kvscatter::harness
