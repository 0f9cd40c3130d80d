// scatter_pa_kv_cache_with_k_scale cases: both float8 dtypes, key and value head sizes that differ,
// int32 and int64 slots, slots that are padding (-1 and other negatives), past the last slot
// (skipped), repeated or consecutive, empty input, permuted and padded views of every tensor
// (key_scale with a non-contiguous last axis), unaligned buffers, calls split over threads with
// many tokens on few slots, the streaming-store path, and unknown cache layouts, which must fail.
#include <sstream>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "harness/helpers.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"

namespace kvscatter::harness {
namespace {

struct Call {
  TensorRef key, value, key_cache, value_cache, slot_mapping, key_scale, key_scale_cache;
  std::string cache_layout = "BNBD";
};

std::vector<int> identity(int rank) {
  std::vector<int> o;
  for (int i = 0; i < rank; ++i) o.push_back(i);
  return o;
}

Case generate(std::mt19937_64& rng) {
  Gen g(rng);
  Case c;
  std::ostringstream d;
  const bool threads = g.chance(0.05);
  std::int64_t t = threads ? 8000 : g.chance(0.1) ? g.uniform(40, 3000) : g.uniform(1, 40);
  if (!threads && g.chance(0.03)) t = 0;
  // A prefill of eight heads from the start of a block: whole tiles of eight tokens on
  // consecutive slots, whose scales the kernel transposes in registers.
  const bool prefill = !threads && g.chance(0.15);
  const std::int64_t nh = threads ? 2 : prefill ? 8 : g.uniform(1, 4);
  // The common head sizes take the kernel's fixed-size row copies; the others its general one.
  const std::int64_t dk = threads         ? 64
                          : g.chance(0.3) ? g.pick<std::int64_t>({64, 128, 256})
                                          : g.uniform(1, 130);
  const std::int64_t dv = threads || g.chance(0.5) ? dk : g.uniform(1, 70);
  const std::int64_t bs = threads ? 4 : prefill ? g.pick<std::int64_t>({8, 16}) : g.uniform(1, 16);
  const std::int64_t nb = threads ? 2 : 1 + (t + bs - 1) / bs + g.uniform(0, 2);
  const DType dt = g.chance(0.5) ? DType::float8_e4m3fn : DType::float8_e5m2;
  const DType idt = g.chance(0.5) ? DType::int32 : DType::int64;
  const bool strided = !threads && g.chance(0.33);
  c.stream = g.chance(0.3);  // the streaming-store path of large calls
  const std::int64_t pad = strided ? 1 : 0;
  d << (threads ? "threads " : "") << dtype_name(dt) << " index " << dtype_name(idt) << " T=" << t
    << " NH=" << nh << " Dk=" << dk << " Dv=" << dv << " bs=" << bs << " nb=" << nb
    << (strided ? " strided" : "") << (c.stream ? " stream" : "");
  auto order = [&](std::vector<int> permuted, int rank) {
    return strided ? permuted : identity(rank);
  };
  Call call;
  call.key = add_permuted(c, g, "key", dt, {t, nh, dk}, order({1, 0, 2}, 3), pad);
  call.value = add_permuted(c, g, "value", dt, {t, nh, dv}, identity(3), pad);
  call.key_scale = add_permuted(c, g, "key_scale", DType::float32, {t, nh}, order({1, 0}, 2), pad);
  call.key_cache =
      add_permuted(c, g, "key_cache", dt, {nb, nh, bs, dk}, order({2, 0, 1, 3}, 4), pad);
  call.value_cache = add_permuted(c, g, "value_cache", dt, {nb, nh, bs, dv}, identity(4), pad);
  call.key_scale_cache = add_permuted(c, g, "key_scale_cache", DType::float32, {nb, nh, bs, 1},
                                      order({1, 0, 2, 3}, 4), pad);
  std::string desc;
  SlotOptions opt;
  opt.out_of_range = 0.5;  // skipped by this operator, not an error
  std::vector<std::int64_t> slots;
  if (threads) {
    for (std::int64_t i = 0; i < t; ++i) slots.push_back(g.uniform(-1, 8));  // 8: past the end
    desc = " few slots, -1, past the end";
  } else if (prefill) {
    const std::int64_t first = bs * g.uniform(0, nb - (t + bs - 1) / bs);
    for (std::int64_t i = 0; i < t; ++i) slots.push_back(first + i);
    desc = " prefill from slot " + std::to_string(first);
  } else {
    slots = make_slots(g, t, nb * bs, opt, desc);
  }
  d << desc;
  call.slot_mapping = add_index(c, "slot_mapping", idt, slots);
  if (g.chance(0.03)) {
    call.cache_layout = g.pick<const char*>({"BSND", "bnbd", "PA_NZ"});
    c.expect_error = true;
    d << " cache_layout " << call.cache_layout;
  }
  c.name = d.str();
  c.run = [call](const std::vector<std::uint8_t*>& data, bool reference) {
    const ScatterPaKvCacheWithKScalePlan plan = plan_scatter_pa_kv_cache_with_k_scale(
        call.key.view(data), call.value.view(data), call.key_cache.view(data),
        call.value_cache.view(data), call.slot_mapping.view(data), call.key_scale.view(data),
        call.key_scale_cache.view(data), parse_k_scale_cache_layout(call.cache_layout));
    if (reference) {
      reference::execute(plan);
    } else {
      execute(plan);
    }
  };
  return c;
}

}  // namespace

KVS_HARNESS_CASES(scatter_pa_kv_cache_with_k_scale, generate, 150);

}  // namespace kvscatter::harness
