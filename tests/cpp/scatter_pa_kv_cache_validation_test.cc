// Every rejection of ScatterPaKvCache (docs/operators/scatter_pa_kv_cache.md, 'Errors'): the status
// code, a message naming the offending argument and value, and caches bit-identical afterwards,
// through the one-call API, the plan/execute split and the reference.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "scatter_pa_kv_cache_util.h"

namespace kvscatter::testing {
namespace {

// Views and options of one call, after the owning buffers are bound; a case may edit them.
struct Args {
  TensorView key, key_cache, slot;
  std::optional<TensorView> value, value_cache;
  ScatterPaKvCacheOptions opts;
};

Args args_of(Call& c) {
  return Args{c.key.view(),   c.key_cache.view(),   c.slot.view(),
              c.value_view(), c.value_cache_view(), c.bind()};
}

ScatterPaKvCachePlan plan_of(const Args& a) {
  return plan_scatter_pa_kv_cache(a.key, a.value, a.key_cache, a.value_cache, a.slot, a.opts);
}

void randomize(Buf& b, std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (auto& x : b.bytes) x = static_cast<unsigned char>(rng());
}

// ---- valid base calls ---------------------------------------------------------------------

Call norm() {  // bfloat16 key [4,2,8], value [4,2,6]; 3 blocks of 4 slots
  Call c;
  c.key = Buf(DType::bfloat16, {4, 2, 8});
  c.value = Buf(DType::bfloat16, {4, 2, 6});
  c.key_cache = Buf(DType::bfloat16, {3, 4, 2, 8});
  c.value_cache = Buf(DType::bfloat16, {3, 4, 2, 6});
  c.slot = index_buf(DType::int32, {0, 5, -1, 11});
  return c;
}

Call nz() {  // float16 key [3,2,16] and bfloat16 value [3,2,32]
  Call c;
  c.key = Buf(DType::float16, {3, 2, 16});
  c.value = Buf(DType::bfloat16, {3, 2, 32});
  c.key_cache = Buf(DType::float16, {2, 2, 4, 16});
  c.value_cache = Buf(DType::bfloat16, {2, 4, 4, 16});
  c.slot = index_buf(DType::int64, {1, 6, -1});
  c.opts.cache_mode = CacheMode::PA_NZ;
  return c;
}

Call nhsd() {
  Call c;
  c.key = Buf(DType::float32, {3, 2, 4});
  c.value = Buf(DType::float32, {3, 2, 4});
  c.key_cache = Buf(DType::float32, {2, 2, 4, 4});
  c.value_cache = Buf(DType::float32, {2, 2, 4, 4});
  c.slot = index_buf(DType::int32, {7, 0, 3});
  c.opts.scatter_mode = ScatterMode::NHSD;
  return c;
}

Call nct() {  // E3: one 12-element buffer read as key [2,1,2] and value [2,1,3]
  Call c;
  c.key = Buf(DType::int32, {2, 1, 2}, 8);
  c.key.strides = {6, 2, 1};
  c.value = Buf(DType::int32, {2, 1, 3}, 6);
  c.value.strides = {6, 3, 1};
  c.slot = index_buf(DType::int32, {1, 0});
  c.key_cache = Buf(DType::int32, {1, 2, 1, 2});
  c.value_cache = Buf(DType::int32, {1, 2, 1, 3});
  c.opts.scatter_mode = ScatterMode::Nct;
  c.opts.strides = std::array<std::int64_t, 2>{6, 6};
  c.opts.offsets = std::array<std::int64_t, 2>{0, 2};
  return c;
}

Call alibi3() {  // E5 shapes: NH=2, seq_lens [3,3], 4 blocks of 4
  Call c;
  c.key = Buf(DType::float16, {6, 2, 16});
  c.value = Buf(DType::float16, {6, 2, 16});
  c.seq_lens = index_buf(DType::int32, {3, 3});
  c.compress_lens = index_buf(DType::int32, {2, 1, 1, 2});
  c.slot = index_buf(DType::int32, {0, 4, 8, 12});
  c.key_cache = Buf(DType::float16, {4, 4, 1, 16});
  c.value_cache = Buf(DType::float16, {4, 4, 1, 16});
  c.opts.scatter_mode = ScatterMode::Alibi;
  return c;
}

Call rope3(const char* mode = "Rope") {  // E6 shapes: NH=1, seq_lens [4,3], 3 blocks of 4
  Call c;
  c.key = Buf(DType::bfloat16, {7, 1, 16});
  c.value = Buf(DType::bfloat16, {7, 1, 16});
  c.seq_lens = index_buf(DType::int64, {4, 3});
  c.compress_lens = index_buf(DType::int64, {2, 2});
  c.compress_seq_offsets = index_buf(DType::int64, {1, -1});
  c.slot = index_buf(DType::int64, {0, 8});
  c.key_cache = Buf(DType::bfloat16, {3, 4, 1, 16});
  c.value_cache = Buf(DType::bfloat16, {3, 4, 1, 16});
  c.opts.scatter_mode = parse_scatter_mode(mode);
  return c;
}

Call rope4() {  // E8 shapes: key [1,5,1,2]
  Call c;
  c.key = Buf(DType::float32, {1, 5, 1, 2});
  c.value = Buf(DType::float32, {1, 5, 1, 2});
  c.seq_lens = index_buf(DType::int32, {5});
  c.compress_seq_offsets = index_buf(DType::int32, {1});
  c.compress_lens = index_buf(DType::int32, {2}, {1, 1});
  c.slot = index_buf(DType::int32, {4}, {1, 1});
  c.key_cache = Buf(DType::float32, {2, 4, 1, 2});
  c.value_cache = Buf(DType::float32, {2, 4, 1, 2});
  return c;
}

Call alibi4() {  // E9 shapes
  Call c;
  c.key = Buf(DType::int16, {2, 4, 1, 2});
  c.value = Buf(DType::int16, {2, 4, 1, 2});
  c.seq_lens = index_buf(DType::int64, {3, 4});
  c.compress_lens = index_buf(DType::int64, {2, 3});
  c.slot = index_buf(DType::int64, {0, 4}, {2, 1});
  c.key_cache = Buf(DType::int16, {2, 4, 1, 2});
  c.value_cache = Buf(DType::int16, {2, 4, 1, 2});
  return c;
}

// ---- the rejection table ------------------------------------------------------------------

struct Rejection {
  std::string name;
  std::function<Call()> base;
  std::function<void(Call&)> prep;   // edits the owning buffers (may be empty)
  std::function<void(Args&)> tweak;  // edits the bound views and options (may be empty)
  Status status;
  std::vector<std::string> needles;  // substrings the message must contain
  bool data_error = false;           // raised by execute(), after a successful plan
};

void PrintTo(const Rejection& r, std::ostream* os) { *os << r.name; }

Buf resized(DType dt, std::vector<std::int64_t> shape) { return Buf(dt, std::move(shape)); }

std::function<Call()> rope3_default() {
  return [] { return rope3("Rope"); };
}

std::vector<Rejection> rejections() {
  using S = Status;
  const S nullp = S::null_pointer, inv = S::invalid_parameter;
  std::vector<Rejection> r;
  auto add = [&](std::string name, std::function<Call()> base, std::function<void(Call&)> prep,
                 std::function<void(Args&)> tweak, S st, std::vector<std::string> needles,
                 bool data = false) {
    r.push_back({std::move(name), std::move(base), std::move(prep), std::move(tweak), st,
                 std::move(needles), data});
  };
  // Null pointers and missing tensors (161001).
  add("KeyNull", norm, {}, [](Args& a) { a.key.data = nullptr; }, nullp,
      {"key has a null data pointer"});
  add("KeyCacheNull", norm, {}, [](Args& a) { a.key_cache.data = nullptr; }, nullp,
      {"key_cache has a null"});
  add("SlotNull", norm, {}, [](Args& a) { a.slot.data = nullptr; }, nullp,
      {"slot_mapping has a null"});
  add("ValueNull", norm, {}, [](Args& a) { a.value->data = nullptr; }, nullp, {"value has a null"});
  add("ValueCacheNull", norm, {}, [](Args& a) { a.value_cache->data = nullptr; }, nullp,
      {"value_cache has a null"});
  add("ValueCacheMissing", norm, {}, [](Args& a) { a.value_cache.reset(); }, nullp,
      {"value_cache is missing", "[4, 2, 6] bfloat16"});
  add("CompressLensNull", alibi3, {}, [](Args& a) { a.opts.compress_lens->data = nullptr; }, nullp,
      {"compress_lens has a null"});
  add("SeqLensNull", rope3_default(), {}, [](Args& a) { a.opts.seq_lens->data = nullptr; }, nullp,
      {"seq_lens has a null"});
  add("OffsetsNull", rope3_default(), {},
      [](Args& a) { a.opts.compress_seq_offsets->data = nullptr; }, nullp,
      {"compress_seq_offsets has a null"});
  add("SeqLensMissing", alibi3, {}, [](Args& a) { a.opts.seq_lens.reset(); }, nullp,
      {"seq_lens is missing", "Alibi"});
  add("CompressLensMissing", rope3_default(), {}, [](Args& a) { a.opts.compress_lens.reset(); },
      nullp, {"compress_lens is missing", "Rope"});
  add(
      "OffsetsMissingForOmni", [] { return rope3("Omni"); }, {},
      [](Args& a) { a.opts.compress_seq_offsets.reset(); }, nullp,
      {"compress_seq_offsets is missing", "Omni"});

  // Mode values and combinations (names are parsed by parse_cache_mode / parse_scatter_mode,
  // tested below).
  add("CacheModeOutOfRange", norm, {},
      [](Args& a) { a.opts.cache_mode = static_cast<CacheMode>(7); }, inv,
      {"cache_mode must be Norm or PA_NZ", "7"});
  add("ScatterModeOutOfRange", norm, {},
      [](Args& a) { a.opts.scatter_mode = static_cast<ScatterMode>(9); }, inv,
      {"scatter_mode must be None, Nct, Alibi, Rope, Omni or NHSD", "9"});
  add("PaNzWithNct", nz, {}, [](Args& a) { a.opts.scatter_mode = ScatterMode::Nct; }, inv,
      {"PA_NZ combines only with scatter_mode None", "\"Nct\""});
  add("PaNzWithRope", rope3_default(), {}, [](Args& a) { a.opts.cache_mode = CacheMode::PA_NZ; },
      inv, {"PA_NZ", "\"Rope\""});
  add("Key4DWithNct", rope4, {}, [](Args& a) { a.opts.scatter_mode = ScatterMode::Nct; }, inv,
      {"scatter_mode Nct needs a 3-D key", "[1, 5, 1, 2]"});
  add("Key4DWithOmni", rope4, {}, [](Args& a) { a.opts.scatter_mode = ScatterMode::Omni; }, inv,
      {"scatter_mode Omni needs a 3-D key"});
  add("Key4DWithNhsd", rope4, {}, [](Args& a) { a.opts.scatter_mode = ScatterMode::NHSD; }, inv,
      {"scatter_mode NHSD needs a 3-D key"});
  add("Key4DWithPaNz", rope4, {}, [](Args& a) { a.opts.cache_mode = CacheMode::PA_NZ; }, inv,
      {"4-D key", "PA_NZ"});
  add("Key4DWithoutCompressLens", rope4, {}, [](Args& a) { a.opts.compress_lens.reset(); }, inv,
      {"4-D key", "compress_lens is missing"});
  add("Key4DWithoutSeqLens", alibi4, {}, [](Args& a) { a.opts.seq_lens.reset(); }, inv,
      {"4-D key", "seq_lens is missing"});
  add("StridesOutsideNct", norm, {},
      [](Args& a) {
        a.opts.strides = std::array<std::int64_t, 2>{4, 4};
      },
      inv, {"strides are used only by scatter_mode Nct", "[4, 4]", "None"});
  add("OffsetsOutsideNct", nz, {},
      [](Args& a) {
        a.opts.offsets = std::array<std::int64_t, 2>{1, 0};
      },
      inv, {"offsets are used only by scatter_mode Nct", "[1, 0]"});
  add("SeqLensWithNone", norm, [](Call& c) { c.seq_lens = index_buf(DType::int32, {4}); }, {}, inv,
      {"seq_lens is used only by scatter_mode Alibi, Rope and Omni", "None"});
  add("CompressLensWithNhsd", nhsd, [](Call& c) { c.compress_lens = index_buf(DType::int32, {1}); },
      {}, inv, {"compress_lens is used only", "NHSD"});
  add("OffsetsWithAlibi", alibi3,
      [](Call& c) {
        c.compress_seq_offsets = index_buf(DType::int32, {0, 0, 0, 0});
      },
      {}, inv, {"compress_seq_offsets must not be given for scatter_mode Alibi", "[4]"});
  add("OffsetsWith4DAlibi", alibi4, {},
      [](Args& a) {
        a.opts.scatter_mode = ScatterMode::Alibi;
        a.opts.compress_seq_offsets = a.opts.compress_lens;
      },
      inv, {"compress_seq_offsets must not be given for scatter_mode Alibi"});

  // Ranks and dtypes.
  add("KeyRank2", norm, {},
      [](Args& a) {
        a.key.rank = 2;
        a.key.shape[1] = 16;
        a.key.strides[1] = 1;
      },
      inv, {"key must be 3-D", "got 2-D [4, 16]"});
  add("ValueRankDiffers", norm, {},
      [](Args& a) {
        a.value->rank = 4;
        a.value->shape[3] = 1;
        a.value->strides[3] = 1;
      },
      inv, {"value must have the same rank as key (3-D)", "got 4-D"});
  add("ValueCacheWithoutValue", norm, {}, [](Args& a) { a.value.reset(); }, inv,
      {"value_cache is given", "[3, 4, 2, 6] bfloat16", "value is absent"});
  add("ValueCache0DWithValue", norm, {}, [](Args& a) { a.value_cache->rank = 0; }, inv,
      {"value_cache must be a 4-D or 5-D tensor when value is given", "0-D"});
  add("KeyDtypeInt64", norm, {}, [](Args& a) { a.key.dtype = DType::int64; }, inv,
      {"key dtype must be one of", "got int64"});
  add("KeyDtypeE8M0", norm, {}, [](Args& a) { a.key.dtype = DType::float8_e8m0; }, inv,
      {"key dtype", "got float8_e8m0"});
  add("KeyDtypeFp4", norm, {}, [](Args& a) { a.key.dtype = DType::float4_e2m1; }, inv,
      {"key dtype", "got float4_e2m1"});
  add("KeyCacheDtypeDiffers", norm, {}, [](Args& a) { a.key_cache.dtype = DType::float16; }, inv,
      {"key_cache dtype must match key (bfloat16), got float16"});
  add("ValueDtypeDiffersOutsidePaNz", norm, {},
      [](Args& a) {
        a.value->dtype = DType::float16;
        a.value_cache->dtype = DType::float16;
      },
      inv, {"value dtype must match key (bfloat16), got float16"});
  add("ValueDtypeNotS8", nz, {}, [](Args& a) { a.value->dtype = DType::int64; }, inv,
      {"value dtype must be one of", "got int64"});
  add("ValueCacheDtypeDiffers", nz, {}, [](Args& a) { a.value_cache->dtype = DType::float16; }, inv,
      {"value_cache dtype must match value (bfloat16), got float16"});
  add("SlotDtypeInt16", norm, {}, [](Args& a) { a.slot.dtype = DType::int16; }, inv,
      {"slot_mapping dtype must be one of {int32, int64}, got int16"});
  add("SlotDtypeFloat", norm, {}, [](Args& a) { a.slot.dtype = DType::float32; }, inv,
      {"slot_mapping dtype", "got float32"});
  add("CompressLensDtypeDiffers", alibi3,
      [](Call& c) {
        c.compress_lens = index_buf(DType::int64, {2, 1, 1, 2});
      },
      {}, inv, {"compress_lens dtype must match slot_mapping (int32), got int64"});
  add("SeqLensDtypeDiffers", rope3_default(),
      [](Call& c) {
        c.seq_lens = index_buf(DType::int32, {4, 3});
      },
      {}, inv, {"seq_lens dtype must match slot_mapping (int64), got int32"});
  add("OffsetsDtypeNotIndex", rope3_default(), {},
      [](Args& a) { a.opts.compress_seq_offsets->dtype = DType::uint32; }, inv,
      {"compress_seq_offsets dtype must be one of {int32, int64}, got uint32"});

  // Layout: strides and 64-bit extents.
  add("KeyNegativeStride", norm, {}, [](Args& a) { a.key.strides[0] = -16; }, inv,
      {"key.strides[0] must be >= 0, got -16"});
  add("KeyNegativeDim", norm, {}, [](Args& a) { a.key.shape[0] = -1; }, inv,
      {"key.shape[0] must be >= 0, got -1"});
  add("KeyExtentOverflows", norm, {},
      [](Args& a) {
        a.key.shape[0] = std::int64_t{1} << 62;
        a.key.strides[0] = 16;
      },
      inv, {"key", "overflows 64 bits"});
  add("CacheExtentOverflows", norm, {},
      [](Args& a) {
        a.key_cache.shape[0] = std::int64_t{1} << 61;
        a.key_cache.strides[0] = 64;
      },
      inv, {"key_cache", "overflows 64 bits"});
  add("KeyLastAxisStrided", norm, {}, [](Args& a) { a.key.strides[2] = 2; }, inv,
      {"key.strides[2] must be 1", "got 2"});
  add("ValueLastAxisStrided", norm, {}, [](Args& a) { a.value->strides[2] = 0; }, inv,
      {"value.strides[2] must be 1", "got 0"});
  // Norm caches take any block, slot and head strides whose elements stay distinct.
  add("CacheSlotsCollide", norm, {}, [](Args& a) { a.key_cache.strides[1] = 32; }, inv,
      {"key_cache must not overlap itself", "dimension 0 has stride 64, needs at least 112"});
  add("CacheHeadSizeStrided", norm, {}, [](Args& a) { a.key_cache.strides[3] = 2; }, inv,
      {"key_cache.strides[3] must be 1", "head_size axis must be contiguous", "got 2"});
  add("CacheBlocksOverlap", norm, {}, [](Args& a) { a.value_cache->strides[0] = 40; }, inv,
      {"value_cache must not overlap itself", "dimension 0 has stride 40, needs at least 48"});
  add("CachesAlias", norm, {}, [](Args& a) { a.value_cache->data = a.key_cache.data; }, inv,
      {"key_cache and value_cache must be different memory"});

  // Shapes: Norm, Nct, NHSD.
  add("SlotLengthDiffers", norm,
      [](Call& c) {
        c.slot = index_buf(DType::int32, {0, 1, 2});
      },
      {}, inv, {"slot_mapping must have shape [4]", "got [3]"});
  add("Slot2D", norm,
      [](Call& c) {
        c.slot = index_buf(DType::int32, {0, 1, 2, 3}, {2, 2});
      },
      {}, inv, {"slot_mapping must have shape [4]", "got [2, 2]"});
  add("KeyCacheRank3", norm,
      [](Call& c) {
        c.key_cache = resized(DType::bfloat16, {3, 4, 16});
      },
      {}, inv,
      {"key_cache must be 4-D [num_blocks, block_size, num_head, head_size]",
       "got 3-D [3, 4, 16]"});
  add("KeyCacheHeadsDiffer", norm,
      [](Call& c) {
        c.key_cache = resized(DType::bfloat16, {3, 4, 1, 8});
      },
      {}, inv, {"key_cache.shape[2] must be 2 (num_head)", "got 1"});
  add("KeyCacheHeadSizeDiffers", norm,
      [](Call& c) {
        c.key_cache = resized(DType::bfloat16, {3, 4, 2, 6});
      },
      {}, inv, {"key_cache.shape[3] must be 8 (key head size)", "got 6"});
  add("ValueCacheHeadSizeDiffers", norm,
      [](Call& c) {
        c.value_cache = resized(DType::bfloat16, {3, 4, 2, 8});
      },
      {}, inv, {"value_cache.shape[3] must be 6 (value head size)", "got 8"});
  add("ValueTokensDiffer", norm,
      [](Call& c) {
        c.value = resized(DType::bfloat16, {3, 2, 6});
      },
      {}, inv, {"value.shape[0] must be 4", "got 3"});
  add("ValueHeadsDiffer", norm,
      [](Call& c) {
        c.value = resized(DType::bfloat16, {4, 1, 6});
      },
      {}, inv, {"value.shape[1] must be 2 (num_head", "got 1"});
  add("ValueCacheBlocksDiffer", norm,
      [](Call& c) {
        c.value_cache = resized(DType::bfloat16, {2, 4, 2, 6});
      },
      {}, inv, {"value_cache has 2 blocks but key_cache has 3"});
  add("ValueCacheBlockSizeDiffers", norm,
      [](Call& c) {
        c.value_cache = resized(DType::bfloat16, {3, 2, 2, 6});
      },
      {}, inv, {"value_cache block_size 2 must match key_cache block_size 4"});
  add("NhsdCacheHeadsDiffer", nhsd,
      [](Call& c) {
        c.key_cache = resized(DType::float32, {2, 1, 4, 4});
      },
      {}, inv, {"key_cache.shape[1] must be 2 (num_head, NHSD layout)", "got 1"});
  add("NhsdValueCacheHeadSize", nhsd,
      [](Call& c) {
        c.value_cache = resized(DType::float32, {2, 2, 4, 3});
      },
      {}, inv, {"value_cache.shape[3] must be 4", "got 3"});

  // PA_NZ.
  add("NzKeyHeadNotAligned", nz,
      [](Call& c) {
        c.key = resized(DType::float16, {3, 2, 8});
        c.key_cache = resized(DType::float16, {2, 1, 4, 16});
      },
      {}, inv, {"key head size 8 x 2 bytes = 16 bytes must be a multiple of 32 bytes"});
  add("NzValueHeadNotAligned", nz,
      [](Call& c) {
        c.value = resized(DType::bfloat16, {3, 2, 24});
        c.value_cache = resized(DType::bfloat16, {2, 3, 4, 16});
      },
      {}, inv, {"value head size 24 x 2 bytes = 48 bytes must be a multiple of 32 bytes"});
  add("NzCacheChunksDiffer", nz,
      [](Call& c) {
        c.key_cache = resized(DType::float16, {2, 4, 2, 16});
      },
      {}, inv, {"key_cache.shape[1] must be 2 (num_head * head_size / L", "got 4"});
  add("NzCacheLanesDiffer", nz,
      [](Call& c) {
        c.key_cache = resized(DType::float16, {2, 2, 4, 8});
      },
      {}, inv, {"key_cache.shape[3] must be 16 (L = 32 bytes / element size", "got 8"});
  add("NzCacheLastDimNotL", nz,
      [](Call& c) {
        c.value_cache = resized(DType::bfloat16, {2, 4, 2, 32});
      },
      {}, inv, {"value_cache.shape[3] must be 16 (L = 32 bytes / element size", "got 32"});
  add("NzCacheRank3", nz,
      [](Call& c) {
        c.key_cache = resized(DType::float16, {2, 8, 16});
      },
      {}, inv, {"key_cache must be 4-D", "or 5-D", "for PA_NZ, got 3-D [2, 8, 16]"});
  add("Nz5DHeadsDiffer", nz,
      [](Call& c) {
        c.key_cache = resized(DType::float16, {2, 1, 2, 4, 16});
      },
      {}, inv, {"key_cache.shape[1] must be 2 (num_head for a 5-D PA_NZ cache)", "got 1"});
  add("Nz5DChunksDiffer", nz,
      [](Call& c) {
        c.key_cache = resized(DType::float16, {2, 2, 2, 4, 16});
      },
      {}, inv, {"key_cache.shape[2] must be 1 (head_size / L", "got 2"});
  add("NzBlockSizeDiffers", nz,
      [](Call& c) {
        c.value_cache = resized(DType::bfloat16, {2, 4, 2, 16});
      },
      {}, inv, {"value_cache block_size 2 must match key_cache block_size 4"});
  add("NzBlocksDiffer", nz,
      [](Call& c) {
        c.value_cache = resized(DType::bfloat16, {3, 4, 4, 16});
      },
      {}, inv, {"value_cache has 3 blocks but key_cache has 2"});

  // Nct.
  add("NctStrideNegative", nct, {},
      [](Args& a) {
        a.opts.strides = std::array<std::int64_t, 2>{-6, 6};
      },
      inv, {"strides[0] must be >= 0, got -6"});
  add("NctOffsetNegative", nct, {},
      [](Args& a) {
        a.opts.offsets = std::array<std::int64_t, 2>{0, -1};
      },
      inv, {"offsets[1] must be >= 0, got -1"});
  add("NctValueRowPastBuffer", nct, {},
      [](Args& a) {
        a.opts.offsets = std::array<std::int64_t, 2>{0, 4};
      },
      inv,
      {"value Nct row 1 reads elements [10, 13)", "offsets[1] 4", "strides[1] 6",
       "past the end of the buffer (12 elements"});
  add("NctKeyRowPastBuffer", nct, {},
      [](Args& a) {
        a.opts.strides = std::array<std::int64_t, 2>{11, 6};
      },
      inv, {"key Nct row 1 reads elements [11, 13)", "strides[0] 11"});
  add("NctViewNotContiguous", nct, {}, [](Args& a) { a.key.strides[2] = 3; }, inv,
      {"key.strides[2] must be 1", "got 3"});

  // Compress shapes.
  add("Alibi3DValueHeadSizeDiffers", alibi3,
      [](Call& c) {
        c.value = resized(DType::float16, {6, 2, 32});
        c.value_cache = resized(DType::float16, {4, 4, 1, 32});
      },
      {}, inv, {"value.shape[2] must be 16", "packed 3-D compress modes"});
  add("SeqLens2D", alibi3,
      [](Call& c) {
        c.seq_lens = index_buf(DType::int32, {3, 3}, {1, 2});
      },
      {}, inv, {"seq_lens must be 1-D [batch], got 2-D [1, 2]"});
  add("CompressLensLength", alibi3,
      [](Call& c) {
        c.compress_lens = index_buf(DType::int32, {1, 1, 1});
      },
      {}, inv, {"compress_lens must have shape [4] (batch 2 x num_head 2), got [3]"});
  add("CompressSlotLength", alibi3,
      [](Call& c) {
        c.slot = index_buf(DType::int32, {0, 4});
      },
      {}, inv, {"slot_mapping must have shape [4]", "got [2]"});
  add("Compress3DSlot2D", alibi3,
      [](Call& c) {
        c.slot = index_buf(DType::int32, {0, 4, 8, 12}, {2, 2});
      },
      {}, inv, {"slot_mapping must have shape [4]", "got [2, 2]"});
  add("RopeOffsetsLength", rope3_default(),
      [](Call& c) {
        c.compress_seq_offsets = index_buf(DType::int64, {1, -1, 0});
      },
      {}, inv, {"compress_seq_offsets must have shape [2]", "got [3]"});
  add("CompressCacheHeadAxisNot1", alibi3,
      [](Call& c) {
        c.key_cache = resized(DType::float16, {4, 4, 2, 16});
      },
      {}, inv, {"key_cache.shape[2] must be 1", "got 2"});
  add("CompressCacheHeadSize", rope3_default(),
      [](Call& c) {
        c.value_cache = resized(DType::bfloat16, {3, 4, 1, 8});
      },
      {}, inv, {"value_cache.shape[3] must be 16", "got 8"});
  add("CompressCacheRank", rope3_default(),
      [](Call& c) {
        c.key_cache = resized(DType::bfloat16, {3, 4, 16});
      },
      {}, inv, {"key_cache must be 4-D [num_blocks, block_size, 1, head_size]", "got 3-D"});
  add("Compress4DSeqLensLength", rope4,
      [](Call& c) {
        c.seq_lens = index_buf(DType::int32, {5, 5});
      },
      {}, inv, {"seq_lens.shape[0] must be 1 (batch = key.shape[0])", "got 2"});
  add("Compress4DSlotShape", alibi4,
      [](Call& c) {
        c.slot = index_buf(DType::int64, {0, 4, 8});
      },
      {}, inv, {"slot_mapping must have shape [2, 1] or [2]", "got [3]"});
  add("Compress4DLensShape", rope4,
      [](Call& c) {
        c.compress_lens = index_buf(DType::int32, {2, 2}, {1, 2});
      },
      {}, inv, {"compress_lens must have shape [1, 1] or [1]", "got [1, 2]"});
  add("Compress4DValueSeqDiffers", rope4,
      [](Call& c) {
        c.value = resized(DType::float32, {1, 4, 1, 2});
      },
      {}, inv, {"value.shape[1] must be 5", "got 4"});

  // Data-dependent rules, raised by execute() before any write.
  add(
      "SlotPastLastSlot", norm,
      [](Call& c) {
        c.slot = index_buf(DType::int32, {0, 5, -1, 12});
      },
      {}, inv, {"slot_mapping[3] = 12 is out of range [0, 12) (key_cache has 3 blocks of 4 slots"},
      true);
  add(
      "SlotHugeInt64", nz,
      [](Call& c) {
        c.slot = index_buf(DType::int64, {1, std::int64_t{1} << 40, 2});
      },
      {}, inv, {"slot_mapping[1] = 1099511627776 is out of range [0, 8)"}, true);
  add(
      "NhsdSlotOutOfRange", nhsd,
      [](Call& c) {
        c.slot = index_buf(DType::int32, {7, 8, 3});
      },
      {}, inv, {"slot_mapping[1] = 8 is out of range [0, 8)"}, true);
  add(
      "NctSlotOutOfRange", nct,
      [](Call& c) {
        c.slot = index_buf(DType::int32, {1, 2});
      },
      {}, inv, {"slot_mapping[1] = 2 is out of range [0, 2)"}, true);
  add(
      "WindowNegative", alibi3,
      [](Call& c) {
        c.compress_lens = index_buf(DType::int32, {2, -1, 1, 2});
      },
      {}, inv, {"compress_lens[1] = -1 must be >= 0 (batch 0, head 1)"}, true);
  add(
      "AlibiWindowPastSeqLen", alibi3,
      [](Call& c) {
        c.compress_lens = index_buf(DType::int32, {2, 1, 1, 4});
      },
      {}, inv, {"compress_lens[3] = 4 exceeds seq_lens[1] = 3", "batch 1, head 1"}, true);
  add(
      "Alibi4DWindowPastSeqLen", alibi4,
      [](Call& c) {
        c.compress_lens = index_buf(DType::int64, {2, 5});
      },
      {}, inv, {"compress_lens[1] = 5 exceeds seq_lens[1] = 4"}, true);
  add(
      "RopeOffsetBelowMinusOne", rope3_default(),
      [](Call& c) {
        c.compress_seq_offsets = index_buf(DType::int64, {-2, -1});
      },
      {}, inv, {"compress_seq_offsets[0] = -2 must be -1 or in [0, seq_lens[0] = 4]"}, true);
  add(
      "OmniOffsetPastSeqLen", [] { return rope3("Omni"); },
      [](Call& c) {
        c.compress_seq_offsets = index_buf(DType::int64, {1, 4});
      },
      {}, inv, {"compress_seq_offsets[1] = 4 must be -1 or in [0, seq_lens[1] = 3]"}, true);
  add(
      "RopeOffsetPlusWindowPastSeqLen", rope3_default(),
      [](Call& c) {
        c.compress_seq_offsets = index_buf(DType::int64, {3, -1});
      },
      {}, inv, {"compress_seq_offsets[0] + compress_lens[0] = 3 + 2 = 5 exceeds seq_lens[0] = 4"},
      true);
  add(
      "Rope4DOffsetMinusOne", rope4,
      [](Call& c) { c.compress_seq_offsets = index_buf(DType::int32, {-1}); }, {}, inv,
      {"compress_seq_offsets[0] = -1 must be in [0, seq_lens[0] = 5]"}, true);
  add(
      "SeqLensSumDiffers", alibi3,
      [](Call& c) {
        c.seq_lens = index_buf(DType::int32, {3, 2});
      },
      {}, inv, {"sum(seq_lens) = 5 must equal the number of tokens key.shape[0] = 6"}, true);
  add(
      "SeqLensNegative", rope3_default(),
      [](Call& c) {
        c.seq_lens = index_buf(DType::int64, {-1, 8});
      },
      {}, inv, {"seq_lens[0] = -1 must be >= 0"}, true);
  add(
      "SeqLens4DPastS", rope4, [](Call& c) { c.seq_lens = index_buf(DType::int32, {6}); }, {}, inv,
      {"seq_lens[0] = 6 exceeds key.shape[1] = 5"}, true);
  add(
      "RunPastLastSlot", alibi3,
      [](Call& c) {
        c.slot = index_buf(DType::int32, {0, 4, 8, 15});
      },
      {}, inv,
      {"slot_mapping[3] = 15 starts a run of 2 rows (batch 1, head 1) that ends at row 16",
       "out of range [0, 16)"},
      true);
  add(
      "RopeRunPastLastSlot", rope3_default(),
      [](Call& c) {
        c.slot = index_buf(DType::int64, {0, 10});
      },
      {}, inv, {"slot_mapping[1] = 10 starts a run of 3 rows", "ends at row 12", "[0, 12)"}, true);
  add(
      "EmptyRunStartPastLastSlot", [] { return rope3("Omni"); },
      [](Call& c) {
        c.compress_lens = index_buf(DType::int64, {4, 2});
        c.compress_seq_offsets = index_buf(DType::int64, {0, -1});
        c.slot = index_buf(DType::int64, {12, 8});
      },
      {}, inv, {"slot_mapping[0] = 12 is out of range [0, 12) (batch 0, head 0"}, true);
  return r;
}

class ScatterPaKvCacheRejects : public ::testing::TestWithParam<Rejection> {};

void expect_error(const std::function<void()>& f, const Rejection& r, const char* path) {
  try {
    f();
    ADD_FAILURE() << path << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), r.status) << path << ": " << e.what();
    for (const auto& n : r.needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << path << ": message lacks \"" << n << "\": " << e.what();
    }
  }
}

TEST_P(ScatterPaKvCacheRejects, StatusMessageAndUntouchedCaches) {
  const Rejection& r = GetParam();
  Call c = r.base();
  if (r.prep) r.prep(c);
  randomize(c.key, 1);
  randomize(c.value, 2);
  randomize(c.key_cache, 3);
  randomize(c.value_cache, 4);
  const auto kc = c.key_cache.bytes, vc = c.value_cache.bytes;
  Args a = args_of(c);
  if (r.tweak) r.tweak(a);
  expect_error(
      [&] { scatter_pa_kv_cache(a.key, a.value, a.key_cache, a.value_cache, a.slot, a.opts); }, r,
      "scatter_pa_kv_cache");
  expect_error([&] { reference::execute(plan_of(a)); }, r, "reference");
  if (r.data_error) {
    // The plan is valid; execute() finds the bad value before writing anything.
    ScatterPaKvCachePlan p = plan_of(a);
    expect_error([&] { execute(p); }, r, "execute(plan)");
  } else {
    expect_error([&] { plan_of(a); }, r, "plan");
  }
  EXPECT_EQ(c.key_cache.bytes, kc) << "key_cache changed";
  EXPECT_EQ(c.value_cache.bytes, vc) << "value_cache changed";
}

INSTANTIATE_TEST_SUITE_P(All, ScatterPaKvCacheRejects, ::testing::ValuesIn(rejections()),
                         [](const ::testing::TestParamInfo<Rejection>& i) { return i.param.name; });

// ---- accepted edge cases --------------------------------------------------------------------

TEST(ScatterPaKvCacheAccepts, EveryBaseCallIsValid) {
  for (auto base : {norm, nz, nhsd, nct, alibi3, rope4, alibi4}) {
    Call c = base();
    EXPECT_NO_THROW(run_both(c));
  }
  EXPECT_NO_THROW(run_both(rope3("Rope")));
  EXPECT_NO_THROW(run_both(rope3("Omni")));
}

TEST(ScatterPaKvCacheAccepts, UpstreamDefaultStridesAndOffsetsOutsideNct) {
  Call c = norm();
  c.opts.strides = std::array<std::int64_t, 2>{1, 1};
  c.opts.offsets = std::array<std::int64_t, 2>{0, 0};
  EXPECT_NO_THROW(run_both(c));
}

TEST(ScatterPaKvCacheAccepts, EmptyModeStringsMeanNormAndNone) {
  EXPECT_EQ(parse_cache_mode(""), CacheMode::Norm);
  EXPECT_EQ(parse_scatter_mode(""), ScatterMode::None);
  EXPECT_EQ(parse_cache_mode("PA_NZ"), CacheMode::PA_NZ);
  for (ScatterMode m : {ScatterMode::None, ScatterMode::Nct, ScatterMode::Alibi, ScatterMode::Rope,
                        ScatterMode::Omni, ScatterMode::NHSD}) {
    EXPECT_EQ(parse_scatter_mode(scatter_mode_name(m)), m);
  }
  EXPECT_STREQ(cache_mode_name(CacheMode::PA_NZ), "PA_NZ");
}

TEST(ScatterPaKvCacheRejects, UnknownModeNames) {
  const struct {
    std::function<void()> parse;
    std::vector<std::string> needles;
  } cases[] = {
      {[] { parse_cache_mode("NZ"); }, {"cache_mode", "\"NZ\""}},
      {[] { parse_cache_mode("norm"); }, {"cache_mode", "\"norm\""}},
      {[] { parse_scatter_mode("ALIBI"); }, {"scatter_mode", "\"ALIBI\""}},
      {[] { parse_scatter_mode("None "); }, {"scatter_mode", "\"None \""}},
  };
  for (const auto& c : cases) {
    try {
      c.parse();
      ADD_FAILURE() << "no error for " << c.needles[1];
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::invalid_parameter);
      for (const auto& n : c.needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  }
}

TEST(ScatterPaKvCacheAccepts, ZeroTokensIsANoOpEvenWithNullData) {
  Call c = norm();
  randomize(c.key_cache, 9);
  const auto before = c.key_cache.bytes;
  Args a = args_of(c);
  a.key.shape[0] = 0;
  a.key.data = nullptr;
  a.value->shape[0] = 0;
  a.value->data = nullptr;
  a.slot.shape[0] = 0;
  a.slot.data = nullptr;
  EXPECT_NO_THROW(scatter_pa_kv_cache(a.key, a.value, a.key_cache, a.value_cache, a.slot, a.opts));
  EXPECT_EQ(c.key_cache.bytes, before);
}

TEST(ScatterPaKvCacheAccepts, EveryNegativeSlotIsPadding) {
  Call c = norm();
  c.slot = index_buf(DType::int32, {-1, -7, -2147483647 - 1, -1});
  randomize(c.key_cache, 5);
  const auto before = c.key_cache.bytes;
  Call out = run_both(c);
  EXPECT_EQ(out.key_cache.bytes, before);
}

TEST(ScatterPaKvCacheAccepts, EmptyCacheWithOnlyPaddingSlots) {
  Call c = norm();
  c.key_cache = Buf(DType::bfloat16, {0, 4, 2, 8});
  c.value_cache = Buf(DType::bfloat16, {0, 4, 2, 6});
  c.slot = index_buf(DType::int32, {-1, -1, -1, -1});
  EXPECT_NO_THROW(run_both(c));
}

TEST(ScatterPaKvCacheAccepts, PlanReportsResolvedGeometry) {
  const auto p = nz().plan();
  EXPECT_EQ(p.num_tokens, 3);
  EXPECT_EQ(p.num_heads, 2);
  EXPECT_EQ(p.key_head_size, 16);
  EXPECT_EQ(p.value_head_size, 32);
  EXPECT_EQ(p.num_blocks, 2);
  EXPECT_EQ(p.block_size, 4);
  EXPECT_EQ(p.num_slots, 8);
  const auto q = alibi4().plan();
  EXPECT_EQ(q.batch, 2);
  EXPECT_EQ(q.seq_len, 4);
  EXPECT_EQ(q.num_tokens, 8);
  EXPECT_EQ(q.scatter_mode, ScatterMode::Alibi);
}

TEST(ScatterPaKvCacheAccepts, ExecuteRechecksReboundNullPointers) {
  Call c = norm();
  ScatterPaKvCachePlan p = c.plan();
  p.key.data = nullptr;
  try {
    execute(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::null_pointer);
    EXPECT_NE(std::string(e.what()).find("key has a null data pointer"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvscatter::testing
