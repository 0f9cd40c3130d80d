// Inputs that overlap outputs (docs/semantics.md, "Inputs that overlap outputs"): every input of
// every operator placed over every output (the whole output, one row further on, half inside and
// half past its end, every other row), at 1, 2 and 3 threads. The rule: the result equals reading
// every input before writing anything, i.e. the same call with the inputs in separate buffers
// holding the same bytes; outputs that share memory are rejected naming both, outputs untouched.
#include "core/overlap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kvscatter/formats.h"
#include "kvscatter/gather_pa_kv_cache.h"
#include "kvscatter/indexer_quant_cache.h"
#include "kvscatter/kv_cache_update.h"
#include "kvscatter/kv_compress_epilog.h"
#include "kvscatter/paged_cache_gather.h"
#include "kvscatter/paged_kv_write.h"
#include "kvscatter/paged_latent_write.h"
#include "kvscatter/runtime.h"
#include "kvscatter/scatter_pa_cache.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"
#include "testing.h"

namespace kvscatter {
namespace {

using Bytes = std::vector<unsigned char>;

// One operand of the call under test, placed at a byte offset of one arena.
struct Region {
  const char* name;
  std::int64_t bytes;      // its extent with the natural row stride
  std::int64_t row_bytes;  // one token row (inputs) or one slot row (outputs)
  bool output;
  bool index = false;  // an index tensor: contiguous only, values planted in the arena
};

struct Placement {
  std::vector<std::int64_t> off;   // per region
  std::vector<std::int64_t> mult;  // row stride = mult x natural row (inputs)
};

// Builds views of the call at out_base (outputs) and in_base (inputs) and runs execute() or the
// reference.
using Runner = std::function<void(unsigned char* out_base, unsigned char* in_base,
                                  const Placement& at, bool reference)>;
// Writes the arena's initial bytes (valid index values at the index regions' offsets).
using Filler = std::function<void(Bytes& arena, const Placement& at)>;

struct Op {
  std::vector<Region> regions;
  Runner run;
  Filler fill;
};

// Every region apart, each followed by slack for an input that hangs over its end.
Placement apart(const Op& op, std::int64_t* arena_bytes) {
  Placement p;
  std::int64_t slack = 0, at = 0;
  for (const Region& r : op.regions) slack = std::max(slack, 2 * r.bytes);
  for (const Region& r : op.regions) {
    p.off.push_back(at);
    p.mult.push_back(1);
    at += (r.bytes + slack + 63) / 64 * 64;
  }
  *arena_bytes = at + slack;
  return p;
}

enum class Kind { whole, next_row, partial, strided };
const char* kind_name(Kind k) {
  return k == Kind::whole      ? "whole"
         : k == Kind::next_row ? "next row"
         : k == Kind::partial  ? "partial"
                               : "strided";
}

void check_alias(const Op& op, std::size_t in, std::size_t out, Kind kind) {
  std::int64_t size = 0;
  Placement at = apart(op, &size);
  const Region &ri = op.regions[in], &ro = op.regions[out];
  at.off[in] = at.off[out];
  if (kind == Kind::next_row) at.off[in] += ri.row_bytes;
  // Half of the input (or of the output, for an input larger than it) inside, the rest past it.
  if (kind == Kind::partial) at.off[in] += (ro.bytes - std::min(ri.bytes, ro.bytes) / 2) / 64 * 64;
  if (kind == Kind::strided) at.mult[in] = 2;
  SCOPED_TRACE(std::string(ri.name) + " over " + ro.name + ", " + kind_name(kind));
  Bytes init(static_cast<std::size_t>(size));
  op.fill(init, at);

  // The rule: inputs read from a pristine copy of the arena, outputs written into another.
  set_num_threads(1);
  Bytes want = init, in_copy = init;
  op.run(want.data(), in_copy.data(), at, false);
  Bytes ref = init, ref_in = init;
  op.run(ref.data(), ref_in.data(), at, true);
  ASSERT_EQ(want, ref) << "execute and the reference differ on separate buffers";
  ASSERT_NE(want, init) << "the call wrote nothing";
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Bytes got = init;
    op.run(got.data(), got.data(), at, false);
    EXPECT_EQ(got, want) << threads << " threads";
  }
  set_num_threads(0);
}

void check_all_aliases(const Op& op) {
  for (std::size_t in = 0; in < op.regions.size(); ++in) {
    if (op.regions[in].output) continue;
    for (std::size_t out = 0; out < op.regions.size(); ++out) {
      if (!op.regions[out].output) continue;
      for (Kind k : {Kind::whole, Kind::next_row, Kind::partial, Kind::strided}) {
        if (k == Kind::strided && op.regions[in].index) continue;
        check_alias(op, in, out, k);
      }
    }
  }
}

TensorView strided(void* data, DType dtype, std::vector<std::int64_t> shape,
                   std::vector<std::int64_t> strides) {
  return TensorView(data, dtype, shape, strides);
}

void fill_floats(Bytes& a, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::size_t i = 0; i + 4 <= a.size(); i += 4) {
    const float f = nd(rng);
    std::memcpy(&a[i], &f, 4);
  }
}

void plant_slots(Bytes& a, std::int64_t off, const std::vector<std::int64_t>& slots) {
  std::memcpy(&a[static_cast<std::size_t>(off)], slots.data(), slots.size() * 8);
}

// A shuffled set of distinct slots, with one padding slot (-1).
std::vector<std::int64_t> shuffled_slots(std::int64_t tokens, std::int64_t num_slots) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(num_slots));
  for (std::int64_t i = 0; i < num_slots; ++i) all[static_cast<std::size_t>(i)] = i;
  std::shuffle(all.begin(), all.end(), std::mt19937_64(5));
  all.resize(static_cast<std::size_t>(tokens));
  all[3] = -1;
  return all;
}

// ScatterPaKvCache, Norm: key/value [T, H, D] float32 into [NB, BS, H, D] caches.
Op scatter_op() {
  constexpr std::int64_t T = 400, H = 4, D = 32, NB = 40, BS = 16, row = H * D * 4;
  const std::vector<std::int64_t> slots = shuffled_slots(T, NB * BS);
  Op op;
  op.regions = {{"key_cache", NB * BS * row, row, true},
                {"value_cache", NB * BS * row, row, true},
                {"key", T * row, row, false},
                {"value", T * row, row, false},
                {"slot_mapping", T * 8, 8, false, true}};
  op.fill = [slots](Bytes& a, const Placement& at) {
    fill_floats(a, 1);
    plant_slots(a, at.off[4], slots);
  };
  op.run = [](unsigned char* o, unsigned char* i, const Placement& at, bool reference) {
    auto in = [&](int r) {
      return strided(i + at.off[static_cast<std::size_t>(r)], DType::float32, {T, H, D},
                     {at.mult[static_cast<std::size_t>(r)] * H * D, D, 1});
    };
    const TensorView kc(o + at.off[0], DType::float32, {NB, BS, H, D});
    const TensorView vc(o + at.off[1], DType::float32, {NB, BS, H, D});
    const TensorView sm(i + at.off[4], DType::int64, {T});
    const auto plan = plan_scatter_pa_kv_cache(in(2), in(3), kc, vc, sm);
    reference ? reference::execute(plan) : execute(plan);
  };
  return op;
}

// KvCacheUpdate: new keys/values [B, L, H, D] float32 into [B, S, H, D] caches at position 3.
Op update_op() {
  constexpr std::int64_t B = 2, S = 300, L = 256, H = 4, D = 32, row = H * D * 4;
  Op op;
  op.regions = {{"key_cache", B * S * row, row, true},
                {"value_cache", B * S * row, row, true},
                {"new_keys", B * L * row, row, false},
                {"new_values", B * L * row, row, false}};
  op.fill = [](Bytes& a, const Placement&) { fill_floats(a, 2); };
  op.run = [](unsigned char* o, unsigned char* i, const Placement& at, bool reference) {
    auto in = [&](int r) {
      const std::int64_t m = at.mult[static_cast<std::size_t>(r)];
      return strided(i + at.off[static_cast<std::size_t>(r)], DType::float32, {B, L, H, D},
                     {m * L * H * D, m * H * D, D, 1});
    };
    const TensorView kc(o + at.off[0], DType::float32, {B, S, H, D});
    const TensorView vc(o + at.off[1], DType::float32, {B, S, H, D});
    const auto plan = plan_kv_cache_update(kc, vc, in(2), in(3), 3);
    reference ? reference::execute(plan) : execute(plan);
  };
  return op;
}

// KvCompressEpilog fp8_e8m0: x [T, 576] bfloat16 into a [NB, BS, 1, 648] byte cache.
Op epilog_op() {
  constexpr std::int64_t T = 300, d = 576, NB = 24, BS = 16, row = 648;
  const std::vector<std::int64_t> slots = shuffled_slots(T, NB * BS);
  Op op;
  op.regions = {{"cache", NB * BS * row, row, true},
                {"x", T * d * 2, d * 2, false},
                {"slot_mapping", T * 8, 8, false, true}};
  op.fill = [slots](Bytes& a, const Placement& at) {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (std::size_t k = 0; k + 2 <= a.size(); k += 2) {
      const std::uint16_t v = formats::encode_bfloat16(nd(rng));
      std::memcpy(&a[k], &v, 2);
    }
    plant_slots(a, at.off[2], slots);
  };
  op.run = [](unsigned char* o, unsigned char* i, const Placement& at, bool reference) {
    const TensorView cache(o + at.off[0], DType::uint8, {NB, BS, 1, row});
    const TensorView x = strided(i + at.off[1], DType::bfloat16, {T, d}, {at.mult[1] * d, 1});
    const TensorView sm(i + at.off[2], DType::int64, {T});
    const auto plan = plan_kv_compress_epilog(cache, x, sm, 64, QuantMode::fp8_e8m0, true, 1.0f);
    reference ? reference::execute(plan) : execute(plan);
  };
  return op;
}

// ScatterPaKvCacheWithKScale, BNBD: float8_e4m3fn K/V [T, H, D] and float32 scales [T, H].
Op k_scale_op() {
  constexpr std::int64_t T = 300, H = 4, D = 64, NB = 24, BS = 16;
  const std::vector<std::int64_t> slots = shuffled_slots(T, NB * BS);
  Op op;
  op.regions = {{"key_cache", NB * H * BS * D, D, true},
                {"value_cache", NB * H * BS * D, D, true},
                {"key_scale_cache", NB * H * BS * 4, 4, true},
                {"key", T * H * D, H * D, false},
                {"value", T * H * D, H * D, false},
                {"key_scale", T * H * 4, H * 4, false},
                {"slot_mapping", T * 8, 8, false, true}};
  op.fill = [slots](Bytes& a, const Placement& at) {
    fill_floats(a, 4);
    plant_slots(a, at.off[6], slots);
  };
  op.run = [](unsigned char* o, unsigned char* i, const Placement& at, bool reference) {
    const DType f8 = DType::float8_e4m3fn;
    auto kv = [&](int r) {
      return strided(i + at.off[static_cast<std::size_t>(r)], f8, {T, H, D},
                     {at.mult[static_cast<std::size_t>(r)] * H * D, D, 1});
    };
    const auto plan = plan_scatter_pa_kv_cache_with_k_scale(
        kv(3), kv(4), TensorView(o + at.off[0], f8, {NB, H, BS, D}),
        TensorView(o + at.off[1], f8, {NB, H, BS, D}), TensorView(i + at.off[6], DType::int64, {T}),
        strided(i + at.off[5], DType::float32, {T, H}, {at.mult[5] * H, 1}),
        TensorView(o + at.off[2], DType::float32, {NB, H, BS, 1}));
    reference ? reference::execute(plan) : execute(plan);
  };
  return op;
}

template <class T>
void plant(Bytes &a, std::int64_t off, const std::vector<T> &values) {
  std::memcpy(&a[static_cast<std::size_t>(off)], values.data(), values.size() * sizeof(T));
}

// GatherPaKvCache, Norm: float32 caches [NB, BS, H, D] gathered into key/value
// [R, H, D] for four sequences of a [4, 4] int32 block table; the caches and
// index tensors are the inputs. Strided caches and outputs place every other
// block / row.
Op gather_op() {
  constexpr std::int64_t B = 4, W = 4, H = 2, D = 32, NB = 40, BS = 16, row = H * D * 4;
  const std::vector<std::int32_t> lens{50, 64, 1, 37};
  constexpr std::int64_t R = 152;  // the sum of lens
  std::vector<std::int32_t> blocks(NB);
  for (std::int32_t b = 0; b < NB; ++b) blocks[static_cast<std::size_t>(b)] = b;
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(11));
  blocks.resize(B * W);
  Op op;
  op.regions = {{"key", R * row, row, true},
                {"value", R * row, row, true},
                {"key_cache", NB * BS * row, row, false},
                {"value_cache", NB * BS * row, row, false},
                {"block_tables", B * W * 4, 4, false, true},
                {"seq_lens", B * 4, 4, false, true}};
  op.fill = [blocks, lens](Bytes &a, const Placement &at) {
    fill_floats(a, 12);
    plant(a, at.off[4], blocks);
    plant(a, at.off[5], lens);
  };
  op.run = [](unsigned char *o, unsigned char *i, const Placement &at, bool reference) {
    auto cache = [&](int r) {
      return strided(i + at.off[static_cast<std::size_t>(r)], DType::float32, {NB, BS, H, D},
                     {at.mult[static_cast<std::size_t>(r)] * BS * H * D, H * D, D, 1});
    };
    const TensorView k(o + at.off[0], DType::float32, {R, H, D});
    const TensorView v(o + at.off[1], DType::float32, {R, H, D});
    const TensorView tables(i + at.off[4], DType::int32, {B, W});
    const TensorView sl(i + at.off[5], DType::int32, {B});
    const auto plan = plan_gather_pa_kv_cache(cache(2), cache(3), tables, sl, k, v);
    reference ? reference::execute(plan) : execute(plan);
  };
  return op;
}

// ScatterPaCache: key [T, H, D] float32 into one [NB, BS, H, D] cache (the
// key-only scatter).
Op scatter_cache_op() {
  constexpr std::int64_t T = 300, H = 4, D = 32, NB = 30, BS = 16, row = H * D * 4;
  const std::vector<std::int64_t> slots = shuffled_slots(T, NB * BS);
  Op op;
  op.regions = {{"key_cache", NB * BS * row, row, true},
                {"key", T * row, row, false},
                {"slot_mapping", T * 8, 8, false, true}};
  op.fill = [slots](Bytes &a, const Placement &at) {
    fill_floats(a, 13);
    plant_slots(a, at.off[2], slots);
  };
  op.run = [](unsigned char *o, unsigned char *i, const Placement &at, bool reference) {
    const TensorView key =
        strided(i + at.off[1], DType::float32, {T, H, D}, {at.mult[1] * H * D, D, 1});
    const TensorView kc(o + at.off[0], DType::float32, {NB, BS, H, D});
    const TensorView sm(i + at.off[2], DType::int64, {T});
    const auto plan = plan_scatter_pa_cache(key, kc, sm);
    reference ? reference::execute(plan) : execute(plan);
  };
  return op;
}

// IndexerQuantCache: x [T, 128] float16 into a float8_e4m3fn cache [NB, BS, 1, 128] and a
// float32 scale cache [NB, BS, 1, 1] (fp8), a HiFloat8 cache (hifloat8), or a packed FP4 cache
// [NB, BS, 1, 64] with uint8 scales [NB, BS, 1, 4] (mxfp4); every arena byte pair is a finite
// float16.
Op indexer_op(IndexerQuantMode mode) {
  constexpr std::int64_t T = 300, d = 128, NB = 24, BS = 16;
  const std::vector<std::int64_t> slots = shuffled_slots(T, NB * BS);
  Op op;
  // MX-FP4 packs two codes per cache byte (rows of d / 2 bytes; the view counts the d elements)
  // and keeps d / 32 one-byte scales; the others store a byte per element and one float32 scale.
  const bool fp4 = mode == IndexerQuantMode::mxfp4;
  const std::int64_t row = fp4 ? d / 2 : d;
  op.regions = {{"cache", NB * BS * row, row, true},
                {"cache_scale", NB * BS * 4, 4, true},
                {"x", T * d * 2, d * 2, false},
                {"slot_mapping", T * 8, 8, false, true}};
  op.fill = [slots](Bytes &a, const Placement &at) {
    std::mt19937_64 rng(14);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (std::size_t k = 0; k + 2 <= a.size(); k += 2) {
      const auto v = static_cast<std::uint16_t>(formats::encode(DType::float16, nd(rng)));
      std::memcpy(&a[k], &v, 2);
    }
    plant_slots(a, at.off[3], slots);
  };
  op.run = [mode, fp4, row](unsigned char *o, unsigned char *i, const Placement &at,
                            bool reference) {
    const DType cdt = fp4                                 ? DType::float4_e2m1
                      : mode == IndexerQuantMode::hifloat8 ? DType::hifloat8
                                                          : DType::float8_e4m3fn;
    const TensorView cache(o + at.off[0], cdt, {NB, BS, 1, fp4 ? 2 * row : row});
    const TensorView scale = fp4 ? TensorView(o + at.off[1], DType::uint8, {NB, BS, 1, d / 32})
                                 : TensorView(o + at.off[1], DType::float32, {NB, BS, 1, 1});
    const TensorView x = strided(i + at.off[2], DType::float16, {T, d}, {at.mult[2] * d, 1});
    const TensorView sm(i + at.off[3], DType::int64, {T});
    IndexerQuantCacheOptions opt;
    opt.quant_mode = mode;
    const auto plan = plan_indexer_quant_cache(cache, scale, x, sm, opt);
    reference ? reference::execute(plan) : execute(plan);
  };
  return op;
}

// PagedKvWrite, NHD copy: key/value [T, H, D] float32 into [NB, BS, H, D] caches.
Op paged_kv_write_op() {
  constexpr std::int64_t T = 300, H = 4, D = 32, NB = 30, BS = 16, row = H * D * 4;
  const std::vector<std::int64_t> slots = shuffled_slots(T, NB * BS);
  Op op;
  op.regions = {{"key_cache", NB * BS * row, row, true},
                {"value_cache", NB * BS * row, row, true},
                {"key", T * row, row, false},
                {"value", T * row, row, false},
                {"slot_mapping", T * 8, 8, false, true}};
  op.fill = [slots](Bytes& a, const Placement& at) {
    fill_floats(a, 17);
    plant_slots(a, at.off[4], slots);
  };
  op.run = [](unsigned char* o, unsigned char* i, const Placement& at, bool reference) {
    auto in = [&](int r) {
      return strided(i + at.off[static_cast<std::size_t>(r)], DType::float32, {T, H, D},
                     {at.mult[static_cast<std::size_t>(r)] * H * D, D, 1});
    };
    const TensorView kc(o + at.off[0], DType::float32, {NB, BS, H, D});
    const TensorView vc(o + at.off[1], DType::float32, {NB, BS, H, D});
    const TensorView sm(i + at.off[4], DType::int64, {T});
    const auto plan = plan_paged_kv_write(in(2), in(3), kc, vc, sm);
    reference ? reference::execute(plan) : execute(plan);
  };
  return op;
}

// PagedLatentWrite, copy: kv_c [T, 64] and k_pe [T, 16] float32 into a [NB, BS, 80] cache.
Op paged_latent_write_op() {
  constexpr std::int64_t T = 300, L = 64, R = 16, NB = 30, BS = 16, row = (L + R) * 4;
  const std::vector<std::int64_t> slots = shuffled_slots(T, NB * BS);
  Op op;
  op.regions = {{"kv_cache", NB * BS * row, row, true},
                {"kv_c", T * L * 4, L * 4, false},
                {"k_pe", T * R * 4, R * 4, false},
                {"slot_mapping", T * 8, 8, false, true}};
  op.fill = [slots](Bytes& a, const Placement& at) {
    fill_floats(a, 18);
    plant_slots(a, at.off[3], slots);
  };
  op.run = [](unsigned char* o, unsigned char* i, const Placement& at, bool reference) {
    const TensorView kv_c = strided(i + at.off[1], DType::float32, {T, L}, {at.mult[1] * L, 1});
    const TensorView k_pe = strided(i + at.off[2], DType::float32, {T, R}, {at.mult[2] * R, 1});
    const TensorView cache(o + at.off[0], DType::float32, {NB, BS, L + R});
    const TensorView sm(i + at.off[3], DType::int64, {T});
    const auto plan = plan_paged_latent_write(kv_c, k_pe, cache, sm);
    reference ? reference::execute(plan) : execute(plan);
  };
  return op;
}

// PagedCacheGather, copy: a float32 [NB, BS, 64] cache into dst [152, 64] for four sequences of
// a [4, 4] int32 block table (cu_seq_lens the prefix sums of 50, 64, 1, 37).
Op paged_cache_gather_op() {
  constexpr std::int64_t B = 4, W = 4, E = 64, NB = 40, BS = 16, R = 152, row = E * 4;
  const std::vector<std::int32_t> cu{0, 50, 114, 115, 152};
  std::vector<std::int32_t> blocks(NB);
  for (std::int32_t b = 0; b < NB; ++b) blocks[static_cast<std::size_t>(b)] = b;
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(19));
  blocks.resize(B * W);
  Op op;
  op.regions = {{"dst", R * row, row, true},
                {"src_cache", NB * BS * row, row, false},
                {"block_table", B * W * 4, 4, false, true},
                {"cu_seq_lens", (B + 1) * 4, 4, false, true}};
  op.fill = [blocks, cu](Bytes& a, const Placement& at) {
    fill_floats(a, 20);
    plant(a, at.off[2], blocks);
    plant(a, at.off[3], cu);
  };
  op.run = [](unsigned char* o, unsigned char* i, const Placement& at, bool reference) {
    const TensorView src = strided(i + at.off[1], DType::float32, {NB, BS, E},
                                   {at.mult[1] * BS * E, E, 1});
    const TensorView dst(o + at.off[0], DType::float32, {R, E});
    const TensorView table(i + at.off[2], DType::int32, {B, W});
    const TensorView cu_lens(i + at.off[3], DType::int32, {B + 1});
    const auto plan = plan_paged_cache_gather(src, dst, table, cu_lens);
    reference ? reference::execute(plan) : execute(plan);
  };
  return op;
}

TEST(Overlap, ScatterPaKvCacheInputsOverOutputs) { check_all_aliases(scatter_op()); }
TEST(Overlap, KvCacheUpdateInputsOverOutputs) { check_all_aliases(update_op()); }
TEST(Overlap, KvCompressEpilogInputsOverOutputs) { check_all_aliases(epilog_op()); }
TEST(Overlap, ScatterPaKvCacheWithKScaleInputsOverOutputs) { check_all_aliases(k_scale_op()); }
TEST(Overlap, GatherPaKvCacheInputsOverOutputs) { check_all_aliases(gather_op()); }
TEST(Overlap, PagedKvWriteInputsOverOutputs) { check_all_aliases(paged_kv_write_op()); }
TEST(Overlap, PagedLatentWriteInputsOverOutputs) { check_all_aliases(paged_latent_write_op()); }
TEST(Overlap, PagedCacheGatherInputsOverOutputs) { check_all_aliases(paged_cache_gather_op()); }
TEST(Overlap, ScatterPaCacheInputsOverOutputs) { check_all_aliases(scatter_cache_op()); }
TEST(Overlap, IndexerQuantCacheInputsOverOutputs) {
  check_all_aliases(indexer_op(IndexerQuantMode::fp8));
  check_all_aliases(indexer_op(IndexerQuantMode::hifloat8));  // writes no scales
  check_all_aliases(indexer_op(IndexerQuantMode::mxfp4));     // packed FP4: byte addressing
}

// Outputs that share memory: rejected naming both, every byte untouched.
void expect_rejected(const std::function<void()>& call, const Bytes& arena, const Bytes& before,
                     std::initializer_list<std::string> names) {
  testing::expect_error(call, Status::invalid_parameter, names);
  EXPECT_EQ(arena, before);
}

TEST(Overlap, ScatterPaKvCacheOutputsThatShareMemory) {
  constexpr std::int64_t T = 64, H = 2, D = 16, NB = 8, BS = 16, row = H * D;
  Bytes arena(static_cast<std::size_t>(3 * NB * BS * row * 4));
  fill_floats(arena, 6);
  std::vector<float> key(T * row, 1.0f), value(T * row, 2.0f);
  std::vector<std::int64_t> slots(T);
  for (std::int64_t t = 0; t < T; ++t) slots[static_cast<std::size_t>(t)] = 2 * t;
  const TensorView k(key.data(), DType::float32, {T, H, D}),
      v(value.data(), DType::float32, {T, H, D});
  const TensorView sm(slots.data(), DType::int64, {T});
  float* base = reinterpret_cast<float*>(arena.data());
  const TensorView kc(base, DType::float32, {NB, BS, H, D});
  const Bytes before = arena;
  const TensorView same(base, DType::float32, {NB, BS, H, D});
  expect_rejected([&] { scatter_pa_kv_cache(k, v, kc, same, sm); }, arena, before,
                  {"key_cache", "value_cache"});
  for (std::int64_t shift : {row, std::int64_t{1}, NB * BS * row - 1}) {
    const TensorView vc(base + shift, DType::float32, {NB, BS, H, D});
    expect_rejected([&] { scatter_pa_kv_cache(k, v, kc, vc, sm); }, arena, before,
                    {"key_cache [8, 16, 2, 16] float32 and value_cache [8, 16, 2, 16] float32 "
                     "share memory; outputs of one call must not overlap"});
  }
  // A plan made for separate caches and rebound onto one buffer is rejected by execute().
  std::vector<float> other(static_cast<std::size_t>(NB * BS * row));
  auto plan = plan_scatter_pa_kv_cache(
      k, v, kc, TensorView(other.data(), DType::float32, {NB, BS, H, D}), sm);
  plan.value_cache->data = base + row;
  expect_rejected([&] { execute(plan); }, arena, before,
                  {"key_cache", "value_cache", "share memory"});
}

TEST(Overlap, InterleavedKeyValueCacheIsAccepted) {
  // K and V of a block side by side in one buffer, [NB, 2, BS, H, D]: the two views meet in
  // their address ranges but never share an element.
  constexpr std::int64_t T = 200, H = 2, D = 16, NB = 16, BS = 16, row = H * D;
  std::vector<float> key(T * row), value(T * row);
  std::mt19937 rng(8);
  for (auto& x : key) x = static_cast<float>(rng() % 1000);
  for (auto& x : value) x = -static_cast<float>(rng() % 1000);
  const std::vector<std::int64_t> slots = shuffled_slots(T, NB * BS);
  const TensorView k(key.data(), DType::float32, {T, H, D}),
      v(value.data(), DType::float32, {T, H, D});
  const TensorView sm(const_cast<std::int64_t*>(slots.data()), DType::int64, {T});
  const std::vector<std::int64_t> shape{NB, BS, H, D}, st{2 * BS * row, row, D, 1};
  std::vector<float> kv(static_cast<std::size_t>(2 * NB * BS * row), 0.5f);
  std::vector<float> sep_k(static_cast<std::size_t>(NB * BS * row), 0.5f), sep_v = sep_k;
  scatter_pa_kv_cache(k, v, TensorView(sep_k.data(), DType::float32, {NB, BS, H, D}),
                      TensorView(sep_v.data(), DType::float32, {NB, BS, H, D}), sm);
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::fill(kv.begin(), kv.end(), 0.5f);
    scatter_pa_kv_cache(k, v, TensorView(kv.data(), DType::float32, shape, st),
                        TensorView(kv.data() + BS * row, DType::float32, shape, st), sm);
    for (std::int64_t b = 0; b < NB; ++b) {
      const auto n = static_cast<std::size_t>(BS * row);
      const auto at = static_cast<std::ptrdiff_t>(b * 2 * BS * row);
      EXPECT_TRUE(std::equal(kv.begin() + at, kv.begin() + at + static_cast<std::ptrdiff_t>(n),
                             sep_k.begin() + b * BS * row));
      EXPECT_TRUE(std::equal(kv.begin() + at + static_cast<std::ptrdiff_t>(n),
                             kv.begin() + at + static_cast<std::ptrdiff_t>(2 * n),
                             sep_v.begin() + b * BS * row));
    }
  }
  set_num_threads(0);
}

TEST(Overlap, KvCacheUpdateOutputsThatShareMemory) {
  constexpr std::int64_t B = 2, S = 32, L = 4, H = 2, D = 8;
  Bytes arena(static_cast<std::size_t>(2 * B * S * H * D * 4));
  fill_floats(arena, 9);
  std::vector<float> nk(B * L * H * D, 1.0f), nv = nk;
  float* base = reinterpret_cast<float*>(arena.data());
  const Bytes before = arena;
  const TensorView kc(base, DType::float32, {B, S, H, D});
  const TensorView vc(base + H * D, DType::float32, {B, S, H, D});
  expect_rejected(
      [&] {
        kv_cache_update(kc, vc, TensorView(nk.data(), DType::float32, {B, L, H, D}),
                        TensorView(nv.data(), DType::float32, {B, L, H, D}), 0);
      },
      arena, before, {"key_cache", "value_cache", "share memory"});
}

TEST(Overlap, ScatterPaKvCacheWithKScaleOutputsThatShareMemory) {
  constexpr std::int64_t T = 8, H = 2, D = 32, NB = 4, BS = 16;
  Bytes arena(static_cast<std::size_t>(3 * NB * H * BS * D));
  fill_floats(arena, 10);
  std::vector<std::uint8_t> key(T * H * D, 0x38), value = key;
  std::vector<float> scale(T * H, 0.5f);
  std::vector<std::int64_t> slots(T);
  for (std::int64_t t = 0; t < T; ++t) slots[static_cast<std::size_t>(t)] = t;
  const DType f8 = DType::float8_e4m3fn;
  const Bytes before = arena;
  unsigned char* a = arena.data();
  expect_rejected(
      [&] {
        scatter_pa_kv_cache_with_k_scale(
            TensorView(key.data(), f8, {T, H, D}), TensorView(value.data(), f8, {T, H, D}),
            TensorView(a, f8, {NB, H, BS, D}), TensorView(a + NB * H * BS * D, f8, {NB, H, BS, D}),
            TensorView(slots.data(), DType::int64, {T}),
            TensorView(scale.data(), DType::float32, {T, H}),
            TensorView(a + 64, DType::float32, {NB, H, BS, 1}));
      },
      arena, before, {"key_cache", "key_scale_cache", "share memory"});
}

TEST(Overlap, GatherPaKvCacheOutputsThatShareMemory) {
  constexpr std::int64_t H = 2, D = 16, NB = 4, BS = 16, R = 20, row = H * D;
  std::vector<float> kc(NB * BS * row, 1.0f), vc(NB * BS * row, 2.0f);
  std::vector<std::int32_t> tables{2, 0}, lens{R};
  Bytes arena(static_cast<std::size_t>(3 * R * row * 4));
  fill_floats(arena, 15);
  const Bytes before = arena;
  float *base = reinterpret_cast<float *>(arena.data());
  const TensorView kcv(kc.data(), DType::float32, {NB, BS, H, D}),
      vcv(vc.data(), DType::float32, {NB, BS, H, D});
  const TensorView tv(tables.data(), DType::int32, {1, 2}), lv(lens.data(), DType::int32, {1});
  const TensorView key(base, DType::float32, {R, H, D});
  for (std::int64_t shift : {std::int64_t{0}, row, std::int64_t{1}, R * row - 1}) {
    const TensorView value(base + shift, DType::float32, {R, H, D});
    expect_rejected([&] { gather_pa_kv_cache(kcv, vcv, tv, lv, key, value); }, arena, before,
                    {"key [20, 2, 16] float32 and value [20, 2, 16] float32 share memory; "
                     "outputs of one call must not overlap"});
  }
  // Key and value rows interleaved in one buffer never share an element:
  // accepted.
  const std::vector<std::int64_t> st{2 * row, D, 1};
  gather_pa_kv_cache(kcv, vcv, tv, lv, strided(base, DType::float32, {R, H, D}, st),
                     strided(base + row, DType::float32, {R, H, D}, st));
  for (std::int64_t r = 0; r < R; ++r) {
    EXPECT_EQ(base[2 * r * row], 1.0f);
    EXPECT_EQ(base[(2 * r + 1) * row], 2.0f);
  }
}

TEST(Overlap, IndexerQuantCacheOutputsThatShareMemory) {
  constexpr std::int64_t T = 4, d = 128, NB = 2, BS = 16;
  Bytes arena(static_cast<std::size_t>(2 * NB * BS * d));
  fill_floats(arena, 16);
  std::vector<std::uint16_t> x(T * d, 0x3c00);  // 1.0 in float16
  std::vector<std::int64_t> slots{0, 1, 2, 3};
  const Bytes before = arena;
  const TensorView xv(x.data(), DType::float16, {T, d}), sm(slots.data(), DType::int64, {T});
  const TensorView cache(arena.data(), DType::float8_e4m3fn, {NB, BS, 1, d});
  const TensorView scale(arena.data() + 256, DType::float32, {NB, BS, 1, 1});
  expect_rejected([&] { indexer_quant_cache(cache, scale, xv, sm); }, arena, before,
                  {"cache", "cache_scale", "share memory"});
}

TEST(Overlap, MayOverlapIsExactForOneLayoutAtTwoAddresses) {
  std::vector<float> buf(4096);
  const std::vector<std::int64_t> shape{4, 8, 16}, st{256, 16, 1};
  const TensorView a(buf.data(), DType::float32, shape, st);
  EXPECT_FALSE(detail::may_overlap(a, TensorView(buf.data() + 128, DType::float32, shape, st)));
  EXPECT_TRUE(detail::may_overlap(a, TensorView(buf.data() + 127, DType::float32, shape, st)));
  EXPECT_TRUE(detail::may_overlap(a, TensorView(buf.data() + 256, DType::float32, shape, st)));
  EXPECT_TRUE(detail::may_overlap(a, a));
  EXPECT_FALSE(detail::may_overlap(a, TensorView(buf.data() + 1024, DType::float32, shape, st)));
  // Half an element apart: the views share bytes.
  const TensorView half(reinterpret_cast<unsigned char*>(buf.data()) + 2 + 128 * 4, DType::float32,
                        shape, st);
  EXPECT_TRUE(detail::may_overlap(a, half));
  // Different layouts whose ranges meet are taken as overlapping.
  EXPECT_TRUE(detail::may_overlap(a, TensorView(buf.data() + 128, DType::float32, {4, 128})));
}

// The plan-time quick test: byte ranges fixed at plan time, addresses read at execute time.
TEST(Overlap, QuickTestFollowsReboundAddressesAndGivenOperands) {
  std::vector<float> buf(4096);
  const TensorView out(buf.data(), DType::float32, {4, 128});
  const TensorView in(buf.data() + 1024, DType::float32, {4, 128});
  const TensorView packed(reinterpret_cast<unsigned char*>(buf.data()) + 8192, DType::float4_e2m1,
                          {4, 64});
  detail::Operands ops{{{{&out, "out"}, {&packed, "packed"}}},
                       {{{&in, "in"}, {nullptr, "optional"}}}};
  const OperandExtents e = detail::extents_of(ops);
  EXPECT_EQ(e.present, 0b11u | (0b1u << detail::kMaxOperands));
  EXPECT_FALSE(detail::ranges_may_meet(ops, e));
  // An input moved onto the last byte of a packed FP4 output (the plans hold packed FP4 views
  // in bytes).
  TensorView moved = in;
  moved.data = reinterpret_cast<unsigned char*>(buf.data()) + 8192 + 255;
  ops.inputs[0].view = &moved;
  EXPECT_TRUE(detail::ranges_may_meet(ops, e));
  moved.data = reinterpret_cast<unsigned char*>(buf.data()) + 8192 + 256;
  EXPECT_FALSE(detail::ranges_may_meet(ops, e));
  // An operand absent at plan time and given now: the full test decides.
  ops.inputs[1].view = &in;
  EXPECT_TRUE(detail::ranges_may_meet(ops, e));
  ops.inputs[1].view = nullptr;
  // Outputs moved onto each other.
  TensorView out2 = packed;
  out2.data = buf.data() + 100;
  ops.outputs[1].view = &out2;
  EXPECT_TRUE(detail::ranges_may_meet(ops, e));
}

}  // namespace
}  // namespace kvscatter
