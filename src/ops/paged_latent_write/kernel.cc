// The PagedLatentWrite SIMD kernel, compiled once per target: [kv_c | k_pe] rows copied,
// quantized with one scale, or packed into the fp8_ds_mla entry. No threads here.
#include <algorithm>
#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/paged_latent_write/kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/bytes-inl.h"
#include "core/vbmi.h"
#include "formats/fp8-inl.h"
#include "formats/fp8_table-inl.h"
#include "kvscatter/formats.h"
#include "ops/paged_latent_write/internal.h"
#include "ops/paged_latent_write/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::paged_latent_write::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using detail::HWY_NAMESPACE::CopyBytes;
using detail::HWY_NAMESPACE::StagedRows;
using detail::HWY_NAMESPACE::StreamBytes;
using formats::HWY_NAMESPACE::BF16Shortcut;
using formats::HWY_NAMESPACE::MakeBF16Shortcut;
using formats::HWY_NAMESPACE::QuantizeBF16Row;
using formats::HWY_NAMESPACE::QuantizeFp8F32;
using formats::HWY_NAMESPACE::QuantizeRun;

using DF = hn::ScalableTag<float>;

// How many tokens ahead the quantizing writers prefetch their inputs. Four, as first measured,
// left the loads waiting on AMD Zen 5, which reads memory faster: eight made calls of 16,384
// tokens 1.04-1.10 x faster there (AVX-512; fp8_ds_mla 1.06-1.11 x on AVX2), and calls in cache
// 0.97-1.02 x.
constexpr std::int64_t kAhead = 8;

// Largest magnitude of n float32 values (n a multiple of the lane count), NaNs counted as 0:
// the tile scale treats an all-NaN tile like an all-zero one.
HWY_INLINE float AbsMax(const float* HWY_RESTRICT x, std::size_t n) {
  const DF df;
  auto m = hn::Zero(df);
  for (std::size_t i = 0; i < n; i += hn::Lanes(df)) {
    const auto v = hn::LoadU(df, x + i);
    m = hn::Max(m, hn::IfThenZeroElse(hn::IsNaN(v), hn::Abs(v)));
  }
  return hn::GetLane(hn::MaxOfLanes(df, m));
}

// AbsMax of n bfloat16 (or, kF16, float16) values (n a multiple of the u16 lane count), in their
// own bits: the magnitude bits of non-NaN values order like the magnitudes, and NaNs count as 0.
template <bool kF16 = false>
HWY_INLINE float AbsMax16(const std::uint16_t* HWY_RESTRICT x, std::size_t n) {
  const hn::ScalableTag<std::uint16_t> d16;
  const hn::RebindToSigned<decltype(d16)> di16;
  auto m = hn::Zero(di16);
  const auto inf = hn::Set(di16, kF16 ? 0x7C00 : 0x7F80);
  for (std::size_t i = 0; i < n; i += hn::Lanes(d16)) {
    const auto a = hn::BitCast(di16, hn::And(hn::LoadU(d16, x + i), hn::Set(d16, 0x7FFF)));
    m = hn::Max(m, hn::IfThenZeroElse(hn::Gt(a, inf), a));
  }
  const auto bits = static_cast<std::uint16_t>(hn::GetLane(hn::MaxOfLanes(di16, m)));
  if (kF16) return formats::decode_float16(bits);
  const std::uint32_t top = std::uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &top, 4);
  return f;
}

void WriteDsMla(const Job& job, const unsigned char* kv_c, const unsigned char* k_pe,
                unsigned char* row) {
  // Aligned bfloat16 or float16 rows: the tiles' maxima from their bits, then the tiles as runs
  // of QuantizeRuns (float16 widened in registers there, where the target can).
  if (job.dtype != DType::float32 && reinterpret_cast<std::uintptr_t>(kv_c) % 2 == 0 &&
      kDsTile % hn::Lanes(hn::ScalableTag<std::uint16_t>()) == 0) {
    const auto* x = reinterpret_cast<const std::uint16_t*>(kv_c);
    float scales[kDsLatent / kDsTile];
    for (std::int64_t i = 0; i < kDsLatent / kDsTile; ++i) {
      const float q = (job.dtype == DType::float16 ? AbsMax16<true>(x + i * kDsTile, kDsTile)
                                                   : AbsMax16(x + i * kDsTile, kDsTile)) /
                      448.0f;
      scales[i] = q > FLT_MIN ? q : FLT_MIN;
    }
    formats::HWY_NAMESPACE::QuantizeRuns<true>(job.dtype, kv_c, kDsTile * 2, kDsTile,
                                               kDsLatent / kDsTile, scales, row, kDsTile);
    std::memcpy(row + kDsScaleOffset, scales, sizeof scales);
    CopyBytes(row + kDsPeOffset, k_pe, kDsPe * 2);
    return;
  }
  HWY_ALIGN float tile[kDsTile];
  HWY_ALIGN std::uint16_t codes[kDsTile];
  for (std::int64_t i = 0; i < kDsLatent / kDsTile; ++i) {
    std::memcpy(codes, kv_c + i * kDsTile * 2, sizeof codes);
    if (job.dtype == DType::bfloat16)
      formats::bfloat16_to_float32(codes, tile, kDsTile);
    else
      formats::float16_to_float32(codes, tile, kDsTile);
    const float q = AbsMax(tile, kDsTile) / 448.0f;
    const float scale = q > FLT_MIN ? q : FLT_MIN;
    QuantizeFp8F32<true>(tile, kDsTile, scale, row + i * kDsTile);
    std::memcpy(row + kDsScaleOffset + 4 * i, &scale, 4);
  }
  CopyBytes(row + kDsPeOffset, k_pe, kDsPe * 2);
}

#if HWY_TARGET != HWY_SCALAR
// The largest magnitude of n bfloat16 values (n a multiple of the u16 lane count) in its bits,
// NaNs included: above 0x7F80 exactly when one is NaN.
HWY_INLINE std::uint16_t MaxMagnitudeBits(const std::uint16_t* HWY_RESTRICT x, std::size_t n) {
  const hn::ScalableTag<std::int16_t> di16;
  auto m = hn::Zero(di16);
  for (std::size_t i = 0; i < n; i += hn::Lanes(di16)) {
    const auto v = hn::LoadU(di16, reinterpret_cast<const std::int16_t*>(x) + i);
    m = hn::Max(m, hn::And(v, hn::Set(di16, 0x7FFF)));
  }
  return static_cast<std::uint16_t>(hn::GetLane(hn::MaxOfLanes(di16, m)));
}

// The per-tile fallback of the fp8_ds_mla writers: a tile of kDsTile values with largest
// magnitude bits m (a NaN when above 0x7F80) quantized by its scale with the bounded shortcut
// (the scale bounds every product), or, with a NaN, by the checked path.
HWY_INLINE void DsTileByShortcut(const std::uint16_t* HWY_RESTRICT tile, std::uint16_t m,
                                 unsigned char* HWY_RESTRICT codes, float& scale,
                                 hn::Vec<hn::Repartition<std::uint8_t, DF>> shuffle,
                                 typename formats::HWY_NAMESPACE::CodeOrder<true>::Idx lanes) {
  namespace fmt = formats::HWY_NAMESPACE;
  const std::uint32_t top = static_cast<std::uint32_t>(m) << 16;
  float amax;
  std::memcpy(&amax, &top, 4);
  if (m > 0x7F80) amax = AbsMax16(tile, kDsTile);  // a NaN: counted as 0
  const float q = amax / 448.0f;
  scale = q > FLT_MIN ? q : FLT_MIN;
  const BF16Shortcut sc = MakeBF16Shortcut<true>(scale);
  if (m > 0x7F80) {
    fmt::QuantizeBF16Runs<true>(tile, 0, kDsTile, 1, &sc, codes, 0);
  } else {
    fmt::QuantizeBoundedBF16Run<true>(tile, kDsTile, sc, shuffle, lanes, codes);
  }
}

// The fp8_ds_mla tile tables exist on every target with a table kernel; the block form of
// their byte codes on AVX2 and the 16-byte targets.
#undef KVS_DS_BLOCK_BYTES
#define KVS_DS_BLOCK_BYTES (KVS_FP8_TABLE_BLOCKS || KVS_FP8_TABLE_BYTES16)

#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || KVS_DS_BLOCK_BYTES
// The code tables of the fp8_ds_mla tile scales. A tile maximum amax = 1.a * 2^k (a: its
// bfloat16's 7 mantissa bits) has the scale amax / 448 = 2^k * (1.a / 448) (a normal quotient
// scales exactly), and a table serves every power-of-two multiple of its scale
// (the Shifted form of Fp8TableVectors, or of Fp8TableBlockVectors on AVX2): 128 tables, built
// once, cover every tile. scale[a] is 1.a / 448. Of the byte tables, AVX-512 reads byte_code
// itself; AVX2 and the 16-byte targets (SSE4, NEON, SVE) read its block form.
// The per-tile checks read only the small arrays after the tables: k_min[a] .. k_max[a] are the
// exponents k whose shifted table is exact (an empty range where table a is not usable).
struct DsTileTables {
  formats::HWY_NAMESPACE::Fp8Table table[128];
  float scale[128];
  std::int16_t k_min[128], k_max[128];
  // Byte tables (see ByteTableGroup): byte_code[a][m] is the float8 code of 1.m / scale[a]
  // (below 2^9.81, so it fits a byte); byte_ok[a] where every entry is in the range the byte
  // kernel assumes and the tile maximum codes within float8's finite range.
  alignas(64) std::uint8_t byte_code[128][128];
  bool byte_ok[128];
#if KVS_DS_BLOCK_BYTES
  // byte_code[a] in block form, for BlockByteCodes: block_code[a][o][i] is the code of block
  // i & 7's first mantissa, plus 8 (i >> 3) less 8 o; block_step[a][0 or 1][i] is i << 4 or-ed
  // with block i & 7's step point (Fp8Table::step1, step2).
  alignas(16) std::uint8_t block_code[128][2][16];
  alignas(16) std::int8_t block_step[128][2][16];
#endif
};

// From 2^-115 up the quotient amax / 448 is a normal float above FLT_MIN, and up to 2^127 the
// maximum is finite.
constexpr int kDsMinExponent = -115, kDsMaxExponent = 127;

// From 2^-105 up, a tile's bfloat16 subnormals (and zeros) are at least 21 binades below its
// maximum, where the byte kernels count every lane as rounding to zero.
constexpr int kByteMinExponent = -105;

// 2^k * s for a normal float s, exact where the product is a normal float too (the callers keep
// k so).
HWY_INLINE float TimesPow2(float s, int k) {
  std::uint32_t bits;
  std::memcpy(&bits, &s, 4);
  bits += static_cast<std::uint32_t>(k) << 23;
  std::memcpy(&s, &bits, 4);
  return s;
}

// The scale of a tile whose maximum has mantissa bits a and exponent k: 2^k * scale[a].
HWY_INLINE float TileScale(const DsTileTables& t, std::uint32_t a, int k) {
  return TimesPow2(t.scale[a], k);
}

#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || KVS_FP8_TABLE_BLOCKS
// A tile's groups that its tables do not encode (rare) go through the bounded shortcut (the
// tile's scale bounds every product), made once per tile at the first such group.
class TileRedo {
 public:
  TileRedo(float scale, hn::Vec<hn::Repartition<std::uint8_t, DF>> shuffle,
           typename formats::HWY_NAMESPACE::CodeOrder<true>::Idx lanes)
      : scale_(scale), shuffle_(shuffle), lanes_(lanes) {}

  HWY_INLINE void Group(const std::uint16_t* HWY_RESTRICT src, std::int64_t n,
                        unsigned char* HWY_RESTRICT codes) {
    if (!sc_) sc_.emplace(MakeBF16Shortcut<true>(scale_));
    formats::HWY_NAMESPACE::QuantizeBoundedBF16Run<true>(src, n, *sc_, shuffle_, lanes_, codes);
  }

 private:
  float scale_;
  hn::Vec<hn::Repartition<std::uint8_t, DF>> shuffle_;
  typename formats::HWY_NAMESPACE::CodeOrder<true>::Idx lanes_;
  std::optional<BF16Shortcut> sc_;  // nothing to set up for the tiles that never need it
};
#endif

// Fills the k range of table a: the exponents whose shifted table is exact and whose tile maximum
// codes within float8's finite range (then every lane does: the table's codes grow with the
// magnitude, and each lane is at most the maximum).
void SetTileExponents(DsTileTables& t, std::uint32_t a) {
  namespace fmt = formats::HWY_NAMESPACE;
  const fmt::Fp8Table& table = t.table[a];
  t.k_min[a] = 1;
  t.k_max[a] = 0;
  // The maximum's code: its magnitude bits shifted right by 4 plus its table entry, less the
  // shift's 8 k, which cancels the exponent's 8 k.
  if (!table.usable || 1016 + static_cast<int>(a >> 4) + table.code[a] > 0x7E) return;
  // The conditions are linear in k: the valid exponents form one interval.
  for (int k = kDsMinExponent; k <= kDsMaxExponent; ++k) {
    if (!fmt::ShiftedFp8TableValid(table, k)) continue;
    if (t.k_min[a] > t.k_max[a]) t.k_min[a] = static_cast<std::int16_t>(k);
    t.k_max[a] = static_cast<std::int16_t>(k);
  }
}

// The byte kernel's entries of table a: the word table's code plus what it leaves to the lane's
// magnitude bits (1016 + m's top three bits, for the exponent of 1.m).
void SetByteCodes(DsTileTables& t, std::uint32_t a) {
  const formats::HWY_NAMESPACE::Fp8Table& table = t.table[a];
  t.byte_ok[a] = table.usable && t.k_min[a] <= t.k_max[a];
  for (std::uint32_t m = 0; m < 128; ++m) {
    const int code = table.code[m] + 1016 + static_cast<int>(m >> 4);
    // ByteTableGroup adds up to 8 and relies on sums below 176.
    if (code < 8 || code > 167) t.byte_ok[a] = false;
    t.byte_code[a][m] = static_cast<std::uint8_t>(code & 0xFF);
  }
}

#if KVS_DS_BLOCK_BYTES
// The block form of table a's byte codes: byte_code[a][m] for m = 16 c + b is the block's first
// code plus 0, 1 or 2 (the table's step points) plus 1016 + c.
void SetBlockBytes(DsTileTables& t, std::uint32_t a) {
  const formats::HWY_NAMESPACE::Fp8Table& table = t.table[a];
  for (int o = 0; o < 2; ++o) {
    for (int i = 0; i < 16; ++i) {
      const int c = i & 7;
      const int code = table.block_first[c] + 1016 + c + 8 * (i >> 3) - 8 * o;
      t.block_code[a][o][i] = static_cast<std::uint8_t>(code & 0xFF);
      t.block_step[a][0][i] = static_cast<std::int8_t>(i << 4 | table.step1[c]);
      t.block_step[a][1][i] = static_cast<std::int8_t>(i << 4 | table.step2[c]);
    }
  }
}
#endif

const DsTileTables& TileTables() {
  static const DsTileTables* tables = [] {
    auto* t = new DsTileTables;  // lives for the process, as the dispatch tables do
    for (std::uint32_t a = 0; a < 128; ++a) {
      const std::uint32_t bits = (0x3F80u | a) << 16;
      float one_a;
      std::memcpy(&one_a, &bits, 4);
      t->scale[a] = one_a / 448.0f;
      t->table[a] = formats::HWY_NAMESPACE::MakeFp8Table<true>(t->scale[a]);
#if KVS_FP8_TABLE_BYTES16
      // The tiles read the block form only, which these targets' own table kernel (the byte
      // form at one reference exponent) does not need to be usable for.
      t->table[a].usable = t->table[a].blocks_usable;
#endif
      SetTileExponents(*t, a);
      SetByteCodes(*t, a);
#if KVS_DS_BLOCK_BYTES
      SetBlockBytes(*t, a);
#endif
    }
    return t;
  }();
  return *tables;
}
#endif

// The inputs of token t + kAhead prefetched (the hardware prefetchers fall behind the token
// loops), where it exists.
HWY_INLINE void DsMlaPrefetch(const Job& job, std::int64_t t, std::int64_t end) {
  if (t + kAhead >= end) return;
  const unsigned char* ahead = job.kv_c + (t + kAhead) * job.kv_c_token;
  for (int j = 0; j < kDsLatent * 2; j += 64) hwy::Prefetch(ahead + j);
  hwy::Prefetch(job.k_pe + (t + kAhead) * job.k_pe_token);
  hwy::Prefetch(job.k_pe + (t + kAhead) * job.k_pe_token + 64);
}

// Token t's entry (null for padding), where `stage` has it built, and its kv_c. A call that
// writes more than the caches hold builds its bfloat16 entries in L1 and streams their whole
// lines out (StagedRows): 1.05-1.16 x at 16,384 tokens on AMD Zen 2. Calls that fit in the
// caches write their entries in place: staged the same way, they measured 0.86-0.88 x.
HWY_INLINE unsigned char* DsMlaRow(const Job& job, std::int64_t t, const std::uint16_t*& x,
                                   StagedRows& stage) {
  const std::int64_t slot = job.slots[t];
  if (slot < 0) return nullptr;
  x = reinterpret_cast<const std::uint16_t*>(job.kv_c + t * job.kv_c_token);
  return stage.Row(job.split.address(job.cache, job.block_stride, job.slot_stride, slot));
}

// The rest of token t's entry once its codes are written: the tile scales and k_pe.
HWY_INLINE void DsMlaFinish(const Job& job, std::int64_t t, unsigned char* row, const float* scales,
                            StagedRows& stage) {
  std::memcpy(row + kDsScaleOffset, scales, 4 * (kDsLatent / kDsTile));
  CopyBytes(row + kDsPeOffset, job.k_pe + t * job.k_pe_token, kDsPe * 2);
  stage.Done();
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3

// The four tile maxima of a token's kv_c (16 vectors of 32 bfloat16), as magnitude bits with
// NaNs included (above 0x7F80 exactly when one is NaN): tile i in bits 16 i up. The four are
// reduced together, each step halving the lanes of all four at once.
HWY_INLINE std::uint64_t TileMaxima(const std::uint16_t* HWY_RESTRICT x) {
  const __m512i abs = _mm512_set1_epi16(0x7FFF);
  __m512i m[4];
  for (int i = 0; i < 4; ++i) {
    const auto mag = [&](int j) HWY_ATTR {
      return _mm512_and_si512(_mm512_loadu_si512(x + 32 * (4 * i + j)), abs);
    };
    m[i] = _mm512_max_epu16(_mm512_max_epu16(mag(0), mag(1)), _mm512_max_epu16(mag(2), mag(3)));
  }
  // Blocks of 128 bits: tiles 0 and 1, then 2 and 3, to two blocks each; then one block each.
  const __m512i a = _mm512_max_epu16(_mm512_shuffle_i64x2(m[0], m[1], 0x44),
                                     _mm512_shuffle_i64x2(m[0], m[1], 0xEE));
  const __m512i b = _mm512_max_epu16(_mm512_shuffle_i64x2(m[2], m[3], 0x44),
                                     _mm512_shuffle_i64x2(m[2], m[3], 0xEE));
  __m512i c = _mm512_max_epu16(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xDD));
  c = _mm512_max_epu16(c, _mm512_shuffle_epi32(c, _MM_PERM_BADC));
  c = _mm512_max_epu16(c, _mm512_shuffle_epi32(c, _MM_PERM_CDAB));
  c = _mm512_max_epu16(c, _mm512_srli_epi32(c, 16));
  const __m512i first = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0, 0, 24, 16, 8, 0);
  return static_cast<std::uint64_t>(
      _mm_cvtsi128_si64(_mm512_castsi512_si128(_mm512_permutexvar_epi16(first, c))));
}

// The codes of 64 values of a tile whose maximum the shifted table covers (so no lane is above
// float8's range or infinite, and no clamp is needed): false, writing nothing, when a lane is
// neither zero-rounding nor normal.
HWY_INLINE bool BoundedTableGroup(const std::uint16_t* HWY_RESTRICT src,
                                  const formats::HWY_NAMESPACE::Fp8TableVectors& tv,
                                  unsigned char* HWY_RESTRICT dst) {
  const auto codes = [&](__m512i w, __mmask32& bad) HWY_ATTR {
    const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi16(0x7FFF));
    // The permutes read the mantissa's low six bits; its seventh picks the table half.
    const __m512i lo = _mm512_permutex2var_epi16(tv.t[0], w, tv.t[1]);
    const __m512i hi = _mm512_permutex2var_epi16(tv.t[2], w, tv.t[3]);
    const __mmask32 upper = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x40));
    const __mmask32 normal = _mm512_cmpge_epu16_mask(mag, tv.normal_min);
    bad = _mm512_mask_cmpgt_epu16_mask(_knot_mask32(normal), mag, tv.zero_max);
    return _mm512_maskz_add_epi16(normal, _mm512_srli_epi16(mag, 4),
                                  _mm512_mask_blend_epi16(upper, lo, hi));
  };
  const __m512i a = _mm512_loadu_si512(src), b = _mm512_loadu_si512(src + 32);
  __mmask32 bad_a, bad_b;
  const __m512i ca = codes(a, bad_a), cb = codes(b, bad_b);
  if (HWY_UNLIKELY((bad_a | bad_b) != 0)) return false;
  // Codes are at most 0x7E: the signed pack keeps them, the permute restores element order.
  const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  const __m512i packed = _mm512_permutexvar_epi64(order, _mm512_packs_epi16(ca, cb));
  const __mmask64 neg = _mm512_kunpackd(_mm512_movepi16_mask(b), _mm512_movepi16_mask(a));
  _mm512_storeu_si512(dst, _mm512_mask_add_epi8(packed, neg, packed, _mm512_set1_epi8(-128)));
  return true;
}

// One tile (largest magnitude bits m) by its scale's shifted table; false, writing nothing,
// where the table does not cover the maximum (tiny, huge or NaN maxima, unusable tables). A group
// with a lane the table does not encode takes the bounded shortcut.
HWY_INLINE bool TileByTable(const DsTileTables& tt, const std::uint16_t* HWY_RESTRICT tile,
                            std::uint16_t m, unsigned char* HWY_RESTRICT codes, float& scale,
                            hn::Vec<hn::Repartition<std::uint8_t, DF>> shuffle,
                            typename formats::HWY_NAMESPACE::CodeOrder<true>::Idx lanes) {
  const std::uint32_t a = m & 0x7F;
  const int k = static_cast<int>(m >> 7) - 127;
  if (k < tt.k_min[a] || k > tt.k_max[a]) return false;
  scale = TileScale(tt, a, k);
  const auto tv = formats::HWY_NAMESPACE::Fp8TableVectors::Shifted<3>(tt.table[a], k);
  TileRedo redo(scale, shuffle, lanes);
  for (std::int64_t g = 0; g < kDsTile; g += 64) {
    if (HWY_LIKELY(BoundedTableGroup(tile + g, tv, codes + g))) continue;
    redo.Group(tile + g, 64, codes + g);
  }
  return true;
}
#endif

#if KVS_FP8_TABLE_BLOCKS
// TileByTable on AVX2: one tile (largest magnitude bits m) by its scale's shifted block table;
// false, writing nothing, where the table does not cover the maximum. A group with a lane the
// table does not encode takes the bounded shortcut.
HWY_INLINE bool TileByBlocks(const DsTileTables& tt, const std::uint16_t* HWY_RESTRICT tile,
                             std::uint16_t m, unsigned char* HWY_RESTRICT codes, float& scale,
                             hn::Vec<hn::Repartition<std::uint8_t, DF>> shuffle,
                             typename formats::HWY_NAMESPACE::CodeOrder<true>::Idx lanes) {
  namespace fmt = formats::HWY_NAMESPACE;
  const std::uint32_t a = m & 0x7F;
  const int k = static_cast<int>(m >> 7) - 127;
  if (k < tt.k_min[a] || k > tt.k_max[a]) return false;
  scale = TileScale(tt, a, k);
  const auto tv = fmt::Fp8TableBlockVectors::Shifted<3>(tt.table[a], k);
  TileRedo redo(scale, shuffle, lanes);
  constexpr std::int64_t kGroup = 32;
  for (std::int64_t g = 0; g < kDsTile; g += kGroup) {
    if (HWY_LIKELY((fmt::TableGroup<true, true>(tile + g, tv, codes + g)))) continue;
    redo.Group(tile + g, kGroup, codes + g);
  }
  return true;
}

// ByteTableGroup on AVX2: the codes of 32 values of a tile with maximum exponent e (biased) by
// the block form of its byte tables (see DsTileTables): first = block_code[a][e & 1], step1 /
// step2 = block_step[a], top = e >> 1 in every byte. The lanes' low bytes (the exponent's last
// bit and the mantissa) index the 16-entry tables by their top four bits; the exponent term, 16 d
// capped at 240 for d = top less the lane's exponent top bits, is computed, and d >= 11 flags a
// lane that rounds to zero. Stores the codes and returns, for each lane, the larger of its code
// and d - 3 (saturated): at least 8 exactly where the code is exact (at least 8, or flagged).
// The caller keeps the tile's minimum of these, one operation a group where a mask of the exact
// lanes took two compares, an or and an and.
struct BlockBytes {
  __m256i first, step1, step2, top;
};

// The constants of BlockByteCodes (15, 0x7F and 3 in every byte), built once per call. An empty
// asm statement that may change them hides their values from the compiler, which otherwise
// builds them again for every tile (an integer move and a broadcast each, the broadcasts on the
// shuffle pipes that the codes keep busy): 1.04-1.06 x at 1,024 and 4,096 tokens on AMD Zen 2.
struct BlockConstants {
  __m256i nibble, magnitude, three;
};
HWY_INLINE BlockConstants MakeBlockConstants() {
  BlockConstants k{_mm256_set1_epi8(15), _mm256_set1_epi8(0x7F), _mm256_set1_epi8(3)};
  asm volatile("" : "+x"(k.nibble), "+x"(k.magnitude), "+x"(k.three));
  return k;
}

HWY_INLINE __m256i BlockByteCodes(const std::uint16_t* HWY_RESTRICT src, const BlockBytes& t,
                                  const BlockConstants& k, unsigned char* HWY_RESTRICT dst) {
  namespace fmt = formats::HWY_NAMESPACE;
  const fmt::BlockByteLanes v = fmt::SplitBlockBytes(src);
  const __m256i nibble = k.nibble, magnitude = k.magnitude;
  const __m256i q = fmt::BlockByteQuotient(v.low, t.first, t.step1, t.step2, nibble);
  const __m256i d =
      _mm256_min_epu8(_mm256_sub_epi8(t.top, _mm256_and_si256(v.high, magnitude)), nibble);
  // Each byte of d is at most 15: the 16-bit shift stays within its byte.
  const __m256i code = _mm256_subs_epu8(q, _mm256_slli_epi16(d, 4));
  // Codes are at most 0x7E: the sign goes in bit 7.
  fmt::StoreBlockBytes(_mm256_or_si256(code, _mm256_andnot_si256(magnitude, v.high)), dst);
  return _mm256_max_epu8(code, _mm256_subs_epu8(d, k.three));
}

// Whether every lane of BlockByteCodes' results (or of their minimum) is exact. The results are
// at most 0x7E (codes) or 12 (d - 3): a signed compare serves.
HWY_INLINE bool AllExact(__m256i v) {
  return _mm256_movemask_epi8(_mm256_cmpgt_epi8(v, _mm256_set1_epi8(7))) == -1;
}

// The block byte tables of a tile whose maximum has exponent e (biased) and mantissa bits a.
HWY_INLINE BlockBytes TileBlockBytes(const DsTileTables& tt, std::uint32_t a, int e) {
  const auto dup = [](const void* p) HWY_ATTR {
    return _mm256_broadcastsi128_si256(_mm_load_si128(static_cast<const __m128i*>(p)));
  };
  return {dup(tt.block_code[a][e & 1]), dup(tt.block_step[a][0]), dup(tt.block_step[a][1]),
          _mm256_set1_epi8(static_cast<char>(e >> 1))};
}

// The groups of a tile of TileByBlockBytes that its byte tables did not encode exactly (rare),
// written again by the bounded shortcut. Out of line, so that the tile's table vectors need not
// outlive its test (inline, they were spilled for every tile).
HWY_NOINLINE void RedoBlockByteGroups(const DsTileTables& tt,
                                      const std::uint16_t* HWY_RESTRICT tile, std::uint16_t m,
                                      unsigned char* HWY_RESTRICT codes, float scale,
                                      hn::Vec<hn::Repartition<std::uint8_t, DF>> shuffle,
                                      typename formats::HWY_NAMESPACE::CodeOrder<true>::Idx lanes) {
  const BlockBytes t = TileBlockBytes(tt, m & 0x7F, m >> 7);
  const BlockConstants k = MakeBlockConstants();
  TileRedo redo(scale, shuffle, lanes);
  for (std::int64_t g = 0; g < kDsTile; g += 32) {
    if (AllExact(BlockByteCodes(tile + g, t, k, codes + g))) continue;
    redo.Group(tile + g, 32, codes + g);
  }
}

// ByteTiles::Tile on AVX2: one tile (largest magnitude bits m) by BlockByteCodes, the groups it
// does not encode exactly again by the bounded shortcut; false, writing nothing, where the byte
// tables do not cover the maximum.
HWY_INLINE bool TileByBlockBytes(const DsTileTables& tt, const BlockConstants& k,
                                 const std::uint16_t* HWY_RESTRICT tile, std::uint16_t m,
                                 unsigned char* HWY_RESTRICT codes, float& scale,
                                 hn::Vec<hn::Repartition<std::uint8_t, DF>> shuffle,
                                 typename formats::HWY_NAMESPACE::CodeOrder<true>::Idx lanes) {
  const std::uint32_t a = m & 0x7F;
  const int e = m >> 7, kexp = e - 127;
  if (!tt.byte_ok[a] || kexp < kByteMinExponent || kexp > kDsMaxExponent) return false;
  scale = TileScale(tt, a, kexp);
  const BlockBytes t = TileBlockBytes(tt, a, e);
  // All groups first, one test for the tile; the rare inexact group is written again.
  __m256i ok = BlockByteCodes(tile, t, k, codes);
  for (std::int64_t g = 32; g < kDsTile; g += 32) {
    ok = _mm256_min_epu8(ok, BlockByteCodes(tile + g, t, k, codes + g));
  }
  if (HWY_UNLIKELY(!AllExact(ok))) {
    RedoBlockByteGroups(tt, tile, m, codes, scale, shuffle, lanes);
  }
  return true;
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// The byte kernels need AVX-512 VBMI's byte permutes (core/vbmi.h): they run where
// vbmi_usable() says so, the word kernels elsewhere.

// The constants of ByteTableGroup: the permutes that gather the low and the high bytes of 64
// bfloat16 values, and the table of the exponent term by d = 127 - (the difference of the
// lane's and the maximum's exponents' top seven bits): 16 d capped at 240 (the difference of the
// exponents, 8 per binade), with bit 0 set where the lane is at least 21 binades below the
// maximum (its quotient is below 2^-10: code 0).
struct ByteConstants {
  __m512i low, high, term_lo, term_hi;
};

HWY_INLINE ByteConstants MakeByteConstants() {
  HWY_ALIGN std::uint8_t idx[2][64], term[128];
  for (int i = 0; i < 64; ++i) {
    idx[0][i] = static_cast<std::uint8_t>(2 * i);
    idx[1][i] = static_cast<std::uint8_t>(2 * i + 1);
  }
  for (int j = 0; j < 128; ++j) {
    const int d = 127 - j;
    term[j] = static_cast<std::uint8_t>(16 * (d < 15 ? d : 15) | (d >= 11 ? 1 : 0));
  }
  return {_mm512_load_si512(idx[0]), _mm512_load_si512(idx[1]), _mm512_load_si512(term),
          _mm512_load_si512(term + 64)};
}

// The codes of 64 values of a tile with maximum exponent e (biased) by byte tables: tlo / thi
// hold byte_code[a] less 8 (e & 1), top is 127 - (e >> 1) in every byte. A lane with exponent
// el and mantissa m gets byte_code[a][m] - 8 (e - el) (saturated at 0), the formula of the word
// tables counted in bytes: for every lane at most the maximum the difference is never negative,
// and a code of at least 8 is the exact one (a quotient just below float8's normal range that
// the formula rounds up to 2^-6 rounds there on the subnormal grid too). False, writing nothing,
// when a lane is below 8 and not flagged as rounding to zero.
KVS_VBMI_ATTR HWY_INLINE bool ByteTableGroup(const std::uint16_t* HWY_RESTRICT src,
                                             const ByteConstants& k, __m512i tlo, __m512i thi,
                                             __m512i top, unsigned char* HWY_RESTRICT dst) {
  const __m512i a = _mm512_loadu_si512(src), b = _mm512_loadu_si512(src + 32);
  // low: the exponent's last bit and the mantissa; high: the sign and the exponent's top bits.
  const __m512i low = _mm512_permutex2var_epi8(a, k.low, b);
  const __m512i high = _mm512_permutex2var_epi8(a, k.high, b);
  // The permutes read seven index bits: the mantissa, and the exponent's top bits less the sign.
  __m512i q = _mm512_permutex2var_epi8(tlo, low, thi);
  q = _mm512_mask_add_epi8(q, _mm512_movepi8_mask(low), q, _mm512_set1_epi8(8));
  const __m512i term = _mm512_permutex2var_epi8(k.term_lo, _mm512_add_epi8(high, top), k.term_hi);
  const __m512i code = _mm512_subs_epu8(q, term);
  const __mmask64 normal = _mm512_cmpge_epu8_mask(code, _mm512_set1_epi8(8));
  const __mmask64 zero = _mm512_test_epi8_mask(term, _mm512_set1_epi8(1));
  if (HWY_UNLIKELY(!_kortestc_mask64_u8(normal, zero))) return false;
  // Codes are at most 0x7E: the sign goes in bit 7.
  _mm512_storeu_si512(dst, _mm512_ternarylogic_epi32(code, high, _mm512_set1_epi8(-128), 0xF8));
  return true;
}

// The tiles of the byte kernel: a tile whose maximum the byte tables cover by them, the others
// as the word kernel does.
struct ByteTiles {
  const DsTileTables& tt;
  ByteConstants k;
  hn::Vec<hn::Repartition<std::uint8_t, DF>> shuffle;
  typename formats::HWY_NAMESPACE::CodeOrder<true>::Idx lanes;

  HWY_INLINE void Fetch(std::uint64_t all) const {
    for (int i = 0; i < 4; ++i) hwy::Prefetch(tt.byte_code[(all >> (16 * i)) & 0x7F]);
  }

  // A token's tiles (maxima in all, 16 bits each).
  KVS_VBMI_ATTR HWY_INLINE void Token(const std::uint16_t* HWY_RESTRICT x, std::uint64_t all,
                                      unsigned char* HWY_RESTRICT row, float* scales) const {
    // In registers: the codes' stores could alias what `this` points to.
    const ByteConstants constants = k;
    for (int i = 0; i < 4; ++i) {
      Tile(x + i * kDsTile, static_cast<std::uint16_t>(all >> (16 * i)), row + i * kDsTile,
           scales[i], constants);
    }
  }

  KVS_VBMI_ATTR HWY_INLINE void Tile(const std::uint16_t* HWY_RESTRICT tile, std::uint16_t m,
                                     unsigned char* HWY_RESTRICT codes, float& scale,
                                     const ByteConstants& constants) const {
    const std::uint32_t a = m & 0x7F;
    const int e = m >> 7, kexp = e - 127;
    if (!tt.byte_ok[a] || kexp < kByteMinExponent || kexp > kDsMaxExponent) {
      if (!TileByTable(tt, tile, m, codes, scale, shuffle, lanes)) {
        DsTileByShortcut(tile, m, codes, scale, shuffle, lanes);
      }
      return;
    }
    scale = TileScale(tt, a, kexp);
    const __m512i odd = _mm512_set1_epi8(static_cast<char>(8 * (e & 1)));
    const __m512i tlo = _mm512_sub_epi8(_mm512_load_si512(tt.byte_code[a]), odd);
    const __m512i thi = _mm512_sub_epi8(_mm512_load_si512(tt.byte_code[a] + 64), odd);
    const __m512i top = _mm512_set1_epi8(static_cast<char>(127 - (e >> 1)));
    TileRedo redo(scale, shuffle, lanes);
    for (std::int64_t g = 0; g < kDsTile; g += 64) {
      if (HWY_LIKELY(ByteTableGroup(tile + g, constants, tlo, thi, top, codes + g))) continue;
      redo.Group(tile + g, 64, codes + g);
    }
  }
};

// The tiles of the word kernel (AVX-512 without VBMI).
struct WordTiles {
  const DsTileTables& tt;
  hn::Vec<hn::Repartition<std::uint8_t, DF>> shuffle;
  typename formats::HWY_NAMESPACE::CodeOrder<true>::Idx lanes;

  HWY_INLINE void Fetch(std::uint64_t all) const {
    for (int i = 0; i < 4; ++i) {
      const std::int16_t* code = tt.table[(all >> (16 * i)) & 0x7F].code;
      for (int j = 0; j < 4; ++j) hwy::Prefetch(code + 32 * j);
    }
  }

  HWY_INLINE void Token(const std::uint16_t* HWY_RESTRICT x, std::uint64_t all,
                        unsigned char* HWY_RESTRICT row, float* scales) const {
    for (int i = 0; i < 4; ++i) {
      const std::uint16_t m = static_cast<std::uint16_t>(all >> (16 * i));
      if (TileByTable(tt, x + i * kDsTile, m, row + i * kDsTile, scales[i], shuffle, lanes)) {
        continue;
      }
      DsTileByShortcut(x + i * kDsTile, m, row + i * kDsTile, scales[i], shuffle, lanes);
    }
  }
};

// The maxima of token t (TileMaxima), its tables' lines fetched; 0 past the range.
template <class Tiles>
HWY_INLINE std::uint64_t DsMlaMaxima(const Job& job, std::int64_t t, std::int64_t end,
                                     const Tiles& tiles) {
  if (t >= end) return 0;
  const std::uint64_t all =
      TileMaxima(reinterpret_cast<const std::uint16_t*>(job.kv_c + t * job.kv_c_token));
  tiles.Fetch(all);
  return all;
}

// fp8_ds_mla entries of aligned bfloat16 kv_c rows on AVX-512, by the byte tables (compiled with
// VBMI, so that the tiles inline) or the word tables. One token ahead, the next token's maxima
// (a long chain of reductions) and its tables' lines, so that they overlap this token's
// quantization.
KVS_VBMI_ATTR HWY_NOINLINE void WriteDsMlaBytes(const Job& job, std::int64_t begin,
                                                std::int64_t end) {
  const formats::HWY_NAMESPACE::CodeOrder<true>& order =
      formats::HWY_NAMESPACE::CodeOrder<true>::Get();
  const ByteTiles tiles{TileTables(), MakeByteConstants(), order.Shuffle(), order.Lanes()};
  std::uint64_t next = DsMlaMaxima(job, begin, end, tiles);
  StagedRows stage(job.stream, kDsEntryBytes);
  for (std::int64_t t = begin; t < end; ++t) {
    const std::uint64_t all = next;
    next = DsMlaMaxima(job, t + 1, end, tiles);
    DsMlaPrefetch(job, t, end);
    const std::uint16_t* x;
    unsigned char* row = DsMlaRow(job, t, x, stage);
    if (row == nullptr) continue;
    float scales[kDsLatent / kDsTile];
    tiles.Token(x, all, row, scales);
    DsMlaFinish(job, t, row, scales, stage);
  }
}

HWY_NOINLINE void WriteDsMlaWords(const Job& job, std::int64_t begin, std::int64_t end) {
  const formats::HWY_NAMESPACE::CodeOrder<true>& order =
      formats::HWY_NAMESPACE::CodeOrder<true>::Get();
  const WordTiles tiles{TileTables(), order.Shuffle(), order.Lanes()};
  std::uint64_t next = DsMlaMaxima(job, begin, end, tiles);
  StagedRows stage(job.stream, kDsEntryBytes);
  for (std::int64_t t = begin; t < end; ++t) {
    const std::uint64_t all = next;
    next = DsMlaMaxima(job, t + 1, end, tiles);
    DsMlaPrefetch(job, t, end);
    const std::uint16_t* x;
    unsigned char* row = DsMlaRow(job, t, x, stage);
    if (row == nullptr) continue;
    float scales[kDsLatent / kDsTile];
    tiles.Token(x, all, row, scales);
    DsMlaFinish(job, t, row, scales, stage);
  }
}
#endif

#if KVS_FP8_F16_BYTES
// The float16 tile tables of fp8_ds_mla (x86 and the 16-byte targets). A float16 tile maximum
// 1.a * 2^(e - 15) (a: its 10 mantissa bits, 1 <= e <= 30) has the scale 2^(e - 15) * (1.a /
// 448), exactly (the quotient is a normal float). Table a is the float16 byte form
// (Fp8F16Bytes) of the scale 2^15 * (1.a / 448), whose top exponent is 30: the scale of a tile
// with exponent e is that one times 2^(e - 30), whose table is the same one with its exponents
// (top, zero_below) moved by e - 30. One 64-byte line a table, 1,024 of them, built once.
struct alignas(64) DsF16Table {
  std::int8_t first[16], step1[16], step2[16];
  float scale;                     // 1.a / 448
  std::int8_t zero_d, zero_below;  // zero_below at top 30
  bool usable;
};

const DsF16Table* F16TileTables() {
  static const DsF16Table* tables = [] {
    auto* t = new DsF16Table[1024];  // lives for the process, as the dispatch tables do
    for (int a = 0; a < 1024; ++a) {
      DsF16Table& e = t[a];
      e.scale = (1.0f + static_cast<float>(a) / 1024.0f) / 448.0f;
      const auto bytes = formats::HWY_NAMESPACE::MakeFp8F16Bytes<true>(e.scale * 32768.0f);
      e.usable = bytes.usable && bytes.top == 30;
      std::memcpy(e.first, bytes.first, 16);
      std::memcpy(e.step1, bytes.step1, 16);
      std::memcpy(e.step2, bytes.step2, 16);
      e.zero_d = bytes.zero_d;
      e.zero_below = bytes.zero_below;
    }
    return t;
  }();
  return tables;
}

// A float16 tile whose maximum no table covers (zero, subnormal, infinite or NaN maxima, the
// rare unusable table): its largest finite magnitude, NaNs counted as 0, sets the scale, and the
// values are widened and divided.
HWY_NOINLINE void DsF16TileByDivision(const std::uint16_t* HWY_RESTRICT tile,
                                      unsigned char* HWY_RESTRICT codes, float& scale) {
  const float q = AbsMax16<true>(tile, kDsTile) / 448.0f;
  scale = q > FLT_MIN ? q : FLT_MIN;
  formats::HWY_NAMESPACE::QuantizeRuns<true>(DType::float16,
                                             reinterpret_cast<const unsigned char*>(tile), 0,
                                             kDsTile, 1, &scale, codes, 0);
}

// One float16 tile (largest magnitude bits m) by its maximum's table (F16RunBytesOneTest or
// F16RunBytes16, zeros exact), the groups it does not encode exactly divided again; by division
// where no table covers the maximum.
HWY_INLINE void DsF16Tile(const DsF16Table* tables, const std::uint16_t* HWY_RESTRICT tile,
                          std::uint16_t m, unsigned char* HWY_RESTRICT codes, float& scale) {
  namespace fmt = formats::HWY_NAMESPACE;
  const DsF16Table& t = tables[m & 0x3FF];
  const int e = m >> 10;
  if (HWY_UNLIKELY(e == 0 || e > 30 || !t.usable)) {
    DsF16TileByDivision(tile, codes, scale);
    return;
  }
  scale = TimesPow2(t.scale, e - 15);
  const int zero_below = std::max(t.zero_below + e - 30, 0);
#if KVS_FP8_F16_BLOCKS
  const fmt::Fp8RowBytes rb(t.first, t.step1, t.step2, static_cast<std::int8_t>(e), t.zero_d,
                            static_cast<std::int8_t>(zero_below));
  fmt::F16RunBytesOneTest<true, true>(tile, kDsTile, rb, scale, codes);
#else
  fmt::F16RunBytes16<true, true>(tile, kDsTile, t.first, t.step1, t.step2, e, t.zero_d, zero_below,
                                 scale, codes, 0);
#endif
}
#endif

#if KVS_FP8_F16_BLOCKS && HWY_TARGET <= HWY_AVX3
// The carry form of the float16 tile tables (AVX-512 with VBMI). For table a's scale s
// (F16TileTables), code[m] is the code of 1.m / s counted past the exponent field's width
// (Fp8F16Codes), so a lane of exponent field e (1 to 30) in a tile of exponent et has the code
// code[m] + 8 * (e - 15) + 8 * (30 - et) wherever that is a normal float8 value. A quotient in
// float8's binade [2^k, 2^(k+1)) steps every 2^k / 8, that is every 128 * s * 2^k mantissas, and
// 1 <= 1.m < 2 puts s * 2^k between 1/2 and 2: the code steps (rounding midpoints, across a
// binade's edge too) lie more than 64 mantissas apart, so at most one falls in each bucket of 64
// mantissas (m >> 6), and one 16-bit entry per bucket carries a lane past it. With v(m) = code[m]
// + 136 (at least 128), ent[b] = 128 * v(64 b) - 64 b, or where v steps after mantissa t,
// 128 * (v(t) + 1) - (t + 1), gives (m + ent[m >> 6]) >> 7 = v(m). The magnitude bits h = 1024 e
// + m then give (h + ent) >> 7 = 8 e + v(m) (below 2^16 for e <= 30), and the lane's code is
// that less 16 + 8 et. The builder checks every mantissa of every table.
struct alignas(64) DsF16Carry {
  std::uint16_t ent[16];  // both halves of a word permute's table (the index's bit 4 is e's last)
  bool usable = false;
};

const DsF16Carry* F16CarryTables() {
  static const DsF16Carry* tables = [] {
    auto* t = new DsF16Carry[1024];  // lives for the process, as the dispatch tables do
    int code[1024];
    for (int a = 0; a < 1024; ++a) {
      const float scale = (1.0f + static_cast<float>(a) / 1024.0f) / 448.0f * 32768.0f;
      if (!formats::HWY_NAMESPACE::Fp8F16Codes<true>(scale, code)) continue;
      const auto v = [&](int m) { return code[m] + 136; };
      // The tile's largest magnitude (mantissa a, exponent et) codes as code[a] + 120, at most
      // 0x7E (448), and every other lane lies at or below it: no clamp needed.
      bool ok = v(0) >= 128 && v(1023) <= 200 && code[a] + 120 <= 0x7E;
      for (int b = 0; b < 16; ++b) {
        const int lo = 64 * b, hi = lo + 63;
        int last = lo;  // the bucket's last mantissa before its step (hi: none)
        while (last < hi && v(last + 1) == v(lo)) ++last;
        t[a].ent[b] = static_cast<std::uint16_t>(last == hi ? 128 * v(lo) - lo
                                                            : 128 * (v(last) + 1) - (last + 1));
      }
      // A bucket with more than one step, or a step of more than one code, fails here.
      for (int m = 0; m < 1024 && ok; ++m) ok = ((m + t[a].ent[m >> 6]) >> 7) == v(m);
      t[a].usable = ok;
    }
    return t;
  }();
  return tables;
}

// The constants of DsF16TileCarry, built once per call and hidden from the compiler by an empty
// asm statement (as BlockConstants), which would otherwise build each again (an integer move and
// a broadcast) in every tile. odd gathers the high bytes of two vectors of 16-bit lanes, even
// their low bytes (HighBytesOfWordPairs).
struct CarryConstants {
  __m512i magnitude, exponent, eight, sign, subnormal, odd, even;
};
KVS_VBMI_ATTR HWY_INLINE CarryConstants MakeCarryConstants() {
  const __m512i odd = detail::HWY_NAMESPACE::HighBytesOfWordPairs();
  CarryConstants k{_mm512_set1_epi16(0x7FFF),
                   _mm512_set1_epi8(0x7C),
                   _mm512_set1_epi8(8),
                   _mm512_set1_epi8(static_cast<char>(0x80)),
                   _mm512_set1_epi16(0x3FF),
                   odd,
                   _mm512_sub_epi8(odd, _mm512_set1_epi8(1))};
  asm volatile(""
               : "+v"(k.magnitude), "+v"(k.exponent), "+v"(k.eight), "+v"(k.sign),
                 "+v"(k.subnormal), "+v"(k.odd), "+v"(k.even));
  return k;
}

// The codes of one float16 tile of exponent et by its carry table c into codes; lanes whose
// exponent field is below zb round to zero. False where a lane of exponent field max(zb, 1) or
// more has a code below 8 (a float8 subnormal, which the carry does not give), or (zb 0) a lane
// is a float16 subnormal: the caller codes the tile again. Zeros code as 0 with their sign.
// About 25 operations per 64 values where F16RowByteCodes512 takes about 45.
KVS_VBMI_ATTR HWY_INLINE bool DsF16TileCarry(const CarryConstants& k, const DsF16Carry& c, int et,
                                             int zb, const std::uint16_t* HWY_RESTRICT tile,
                                             unsigned char* HWY_RESTRICT codes) {
  const __m512i ent =
      _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(c.ent)));
  const __m512i less = _mm512_set1_epi16(static_cast<short>(16 + 8 * et));
  const __m512i zb4 = _mm512_set1_epi8(static_cast<char>(4 * (zb > 1 ? zb : 1)));
  __mmask64 bad = 0;
  for (int i = 0; i < kDsTile; i += 64) {
    const __m512i x0 = _mm512_loadu_si512(tile + i), x1 = _mm512_loadu_si512(tile + i + 32);
    const __m512i h0 = _mm512_and_si512(x0, k.magnitude), h1 = _mm512_and_si512(x1, k.magnitude);
    const auto code16 = [&](__m512i h) KVS_VBMI_ATTR {
      const __m512i sum =
          _mm512_add_epi16(h, _mm512_permutexvar_epi16(_mm512_srli_epi16(h, 6), ent));
      return _mm512_subs_epu16(_mm512_srli_epi16(sum, 7), less);
    };
    const __m512i code = _mm512_permutex2var_epi8(code16(h0), k.even, code16(h1));
    const __m512i high = _mm512_permutex2var_epi8(x0, k.odd, x1);
    const __mmask64 live = _mm512_cmpge_epu8_mask(_mm512_and_si512(high, k.exponent), zb4);
    bad |= _mm512_mask_cmplt_epu8_mask(live, code, k.eight);
    if (zb == 0) {  // float16 subnormals: 1 <= h < 0x400, so h - 1 < 0x3FF
      const __m512i minus1 = _mm512_set1_epi32(-1);
      bad |= _mm512_kunpackd(_mm512_cmplt_epu16_mask(_mm512_add_epi16(h1, minus1), k.subnormal),
                             _mm512_cmplt_epu16_mask(_mm512_add_epi16(h0, minus1), k.subnormal));
    }
    // (code, 0 where not live) | sign
    _mm512_storeu_si512(codes + i, _mm512_ternarylogic_epi32(_mm512_maskz_mov_epi8(live, code),
                                                             high, k.sign, 0xF8));
  }
  return bad == 0;
}
#endif

#if KVS_FP8_TABLE_BLOCKS
// TileMaxima on AVX2: the four tile maxima of a token's kv_c (32 vectors of 16 bfloat16), tile i
// in bits 16 i up, reduced together.
HWY_INLINE std::uint64_t TileMaximaAVX2(const std::uint16_t* HWY_RESTRICT x) {
  const __m256i abs = _mm256_set1_epi16(0x7FFF);
  __m256i m[4];
  for (int i = 0; i < 4; ++i) {
    const auto mag = [&](int j) HWY_ATTR {
      return _mm256_and_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16 * (8 * i + j))), abs);
    };
    m[i] = _mm256_max_epu16(
        _mm256_max_epu16(_mm256_max_epu16(mag(0), mag(1)), _mm256_max_epu16(mag(2), mag(3))),
        _mm256_max_epu16(_mm256_max_epu16(mag(4), mag(5)), _mm256_max_epu16(mag(6), mag(7))));
  }
  // Halves: tiles 0 and 1 in a, 2 and 3 in b; then per half, four lanes of tile 0 (or 1) and
  // four of tile 2 (or 3), reduced to lanes 0 and 4.
  const __m256i a = _mm256_max_epu16(_mm256_permute2x128_si256(m[0], m[1], 0x20),
                                     _mm256_permute2x128_si256(m[0], m[1], 0x31));
  const __m256i b = _mm256_max_epu16(_mm256_permute2x128_si256(m[2], m[3], 0x20),
                                     _mm256_permute2x128_si256(m[2], m[3], 0x31));
  __m256i c = _mm256_max_epu16(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
  c = _mm256_max_epu16(c, _mm256_shuffle_epi32(c, _MM_SHUFFLE(2, 3, 0, 1)));
  c = _mm256_max_epu16(c, _mm256_srli_epi32(c, 16));
  const __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
  const __m128i all = _mm_unpacklo_epi32(_mm_unpacklo_epi16(lo, hi), _mm_unpackhi_epi16(lo, hi));
  return static_cast<std::uint64_t>(_mm_cvtsi128_si64(all));
}

#endif

#if KVS_FP8_F16_BLOCKS
// The token loop of the fp8_ds_mla writers of AVX2 (bfloat16 and float16) and AVX-512 (float16):
// tile(tile, m, codes, scale) writes one tile of largest magnitude bits m; fetch(all) is told the
// next token's four maxima, so that a writer can fetch its tables' lines. As in WriteDsMlaBytes,
// the next token's maxima are reduced one token ahead, so that the reductions overlap this
// token's quantization.
template <class Tile, class Fetch>
HWY_INLINE void DsMlaBlockTokens(const Job& job, std::int64_t begin, std::int64_t end,
                                 const Tile& tile, const Fetch& fetch) {
  const auto maxima = [&job, end, &fetch](std::int64_t t) HWY_ATTR {
    if (t >= end) return std::uint64_t{0};
    const auto* x = reinterpret_cast<const std::uint16_t*>(job.kv_c + t * job.kv_c_token);
#if HWY_TARGET <= HWY_AVX3
    const std::uint64_t all = TileMaxima(x);
#else
    const std::uint64_t all = TileMaximaAVX2(x);
#endif
    fetch(all);
    return all;
  };
  std::uint64_t next = maxima(begin);
  StagedRows stage(job.stream, kDsEntryBytes);
  for (std::int64_t t = begin; t < end; ++t) {
    const std::uint64_t all = next;
    next = maxima(t + 1);
    DsMlaPrefetch(job, t, end);
    const std::uint16_t* x;
    unsigned char* row = DsMlaRow(job, t, x, stage);
    if (row == nullptr) continue;
    float scales[kDsLatent / kDsTile];
    for (int i = 0; i < kDsLatent / kDsTile; ++i) {
      tile(x + i * kDsTile, static_cast<std::uint16_t>(all >> (16 * i)), row + i * kDsTile,
           scales[i]);
    }
    DsMlaFinish(job, t, row, scales, stage);
  }
}

#if KVS_FP8_TABLE_BLOCKS
// fp8_ds_mla entries of aligned bfloat16 kv_c rows on AVX2: each tile by the block byte tables,
// else the block word tables, else the shortcut.
HWY_NOINLINE void WriteDsMlaBlocks(const Job& job, std::int64_t begin, std::int64_t end) {
  const formats::HWY_NAMESPACE::CodeOrder<true>& order =
      formats::HWY_NAMESPACE::CodeOrder<true>::Get();
  const auto shuffle = order.Shuffle();
  const auto lanes = order.Lanes();
  const DsTileTables& tt = TileTables();
  const BlockConstants k = MakeBlockConstants();
  DsMlaBlockTokens(
      job, begin, end,
      // By value: the codes' stores could alias what a reference names.
      [=, &tt](const std::uint16_t* tile, std::uint16_t m, unsigned char* codes, float& scale)
          HWY_ATTR {
            if (TileByBlockBytes(tt, k, tile, m, codes, scale, shuffle, lanes) ||
                TileByBlocks(tt, tile, m, codes, scale, shuffle, lanes)) {
              return;
            }
            DsTileByShortcut(tile, m, codes, scale, shuffle, lanes);
          },
      [](std::uint64_t) {});
}
#endif

// fp8_ds_mla entries of aligned float16 kv_c rows on AVX2 and AVX-512: each tile by its maximum's
// table (DsF16Tile), the tables' lines fetched a token ahead.
HWY_NOINLINE void WriteDsMlaF16Blocks(const Job& job, std::int64_t begin, std::int64_t end) {
  const DsF16Table* tables = F16TileTables();
  DsMlaBlockTokens(
      job, begin, end,
      [tables](const std::uint16_t* tile, std::uint16_t m, unsigned char* codes, float& scale)
          HWY_ATTR { DsF16Tile(tables, tile, m, codes, scale); },
      [tables](std::uint64_t all) {
        for (int i = 0; i < 4; ++i) hwy::Prefetch(tables + ((all >> (16 * i)) & 0x3FF));
      });
}

#if HWY_TARGET <= HWY_AVX3
// WriteDsMlaF16Blocks where the CPU has VBMI: each tile by the carry form (DsF16TileCarry) where
// its table has one and a lane's exponent below 1 rounds to zero, else as there.
KVS_VBMI_ATTR HWY_NOINLINE void WriteDsMlaF16Carry(const Job& job, std::int64_t begin,
                                                   std::int64_t end) {
  const DsF16Table* tables = F16TileTables();
  const DsF16Carry* carry = F16CarryTables();
  const CarryConstants k = MakeCarryConstants();
  DsMlaBlockTokens(
      job, begin, end,
      [tables, carry, &k](const std::uint16_t* tile, std::uint16_t m, unsigned char* codes,
                          float& scale) KVS_VBMI_ATTR {
        const int a = m & 0x3FF, e = m >> 10;
        const DsF16Table& t = tables[a];
        const int zb = std::max(t.zero_below + e - 30, 0);
        if (HWY_LIKELY(e >= 1 && e <= 30 && t.usable && carry[a].usable) &&
            DsF16TileCarry(k, carry[a], e, zb, tile, codes)) {
          scale = TimesPow2(t.scale, e - 15);
          return;
        }
        DsF16Tile(tables, tile, m, codes, scale);
      },
      [tables, carry](std::uint64_t all) {
        for (int i = 0; i < 4; ++i) {
          hwy::Prefetch(tables + ((all >> (16 * i)) & 0x3FF));
          hwy::Prefetch(carry + ((all >> (16 * i)) & 0x3FF));
        }
      });
}
#endif
#endif

#if KVS_FP8_TABLE_BYTES16
// BlockByteCodes on 16-byte vectors (SSE4, NEON, SVE): the codes of the 16 values at src of a
// tile with maximum exponent e (biased) by the block form of its byte tables (first =
// block_code[a][e & 1], step1 / step2 = block_step[a], top = e >> 1 in every byte) into dst.
// Returns, as BlockByteCodes does, the larger of each lane's code and d - 3: at least 8 exactly
// where the code is exact (at least 8, or at least 11 binade pairs below top, where it rounds
// to zero).
template <class V>
HWY_INLINE V BlockBytes16(const std::uint16_t* HWY_RESTRICT src, V first, V step1, V step2, V top,
                          unsigned char* HWY_RESTRICT dst) {
  namespace fmt = formats::HWY_NAMESPACE;
  const fmt::Fp8Bytes16Tag d8;
  const hn::Repartition<std::uint16_t, decltype(d8)> d16;
  V low, high;
  fmt::SplitBytes16(src, low, high);
  const V q = fmt::ByteQuotient16(low, first, step1, step2);
  const auto magnitude = hn::Set(d8, 0x7F);
  const auto d = hn::Min(hn::Sub(top, hn::And(high, magnitude)), hn::Set(d8, 15));
  // Each byte of d is at most 15: the 16-bit shift stays within its byte.
  const auto code = hn::SaturatedSub(q, hn::BitCast(d8, hn::ShiftLeft<4>(hn::BitCast(d16, d))));
  // Codes are at most 0x7E: the sign goes in bit 7.
  hn::StoreU(hn::Or(code, hn::AndNot(magnitude, high)), d8, dst);
  return hn::Max(code, hn::SaturatedSub(d, hn::Set(d8, 3)));
}

// Whether every lane of BlockBytes16's results (or of their minimum) is exact.
template <class V>
HWY_INLINE bool AllExact16(V v) {
  const formats::HWY_NAMESPACE::Fp8Bytes16Tag d8;
  return hn::AllFalse(d8, hn::Lt(v, hn::Set(d8, 8)));
}

// TileByBlockBytes on 16-byte vectors: one tile (largest magnitude bits m) by BlockBytes16, the
// 16-value blocks it does not encode exactly divided again (FixBytes16); false, writing nothing,
// where the byte tables do not cover the maximum.
HWY_INLINE bool TileByBytes16(const DsTileTables& tt, const std::uint16_t* HWY_RESTRICT tile,
                              std::uint16_t m, unsigned char* HWY_RESTRICT codes, float& scale) {
  namespace fmt = formats::HWY_NAMESPACE;
  const std::uint32_t a = m & 0x7F;
  const int e = m >> 7, kexp = e - 127;
  if (!tt.byte_ok[a] || kexp < kByteMinExponent || kexp > kDsMaxExponent) return false;
  scale = TileScale(tt, a, kexp);
  const fmt::Fp8Bytes16Tag d8;
  const auto bytes = [d8](const void* p) HWY_ATTR {
    return hn::Load(d8, static_cast<const std::uint8_t*>(p));
  };
  const auto first = bytes(tt.block_code[a][e & 1]), step1 = bytes(tt.block_step[a][0]),
             step2 = bytes(tt.block_step[a][1]);
  const auto top = hn::Set(d8, static_cast<std::uint8_t>(e >> 1));
  // All blocks first, one test for the tile; the rare inexact block is written again.
  auto ok = BlockBytes16(tile, first, step1, step2, top, codes);
  for (std::int64_t g = 16; g < kDsTile; g += 16) {
    ok = hn::Min(ok, BlockBytes16(tile + g, first, step1, step2, top, codes + g));
  }
  if (HWY_LIKELY(AllExact16(ok))) return true;
  for (std::int64_t g = 0; g < kDsTile; g += 16) {
    if (AllExact16(BlockBytes16(tile + g, first, step1, step2, top, codes + g))) continue;
    fmt::FixBytes16<true>(tile + g, scale, codes + g);
  }
  return true;
}

// The token loop of the 16-byte targets' fp8_ds_mla writers: tile(tile, m, codes, scale) writes
// one tile of largest magnitude bits m. A token's four maxima are reduced first: their
// reductions then overlap one another.
template <class Tile>
HWY_INLINE void DsMlaBytes16Tokens(const Job& job, std::int64_t begin, std::int64_t end,
                                   const Tile& tile) {
  StagedRows stage(job.stream, kDsEntryBytes);
  for (std::int64_t t = begin; t < end; ++t) {
    DsMlaPrefetch(job, t, end);
    const std::uint16_t* x;
    unsigned char* row = DsMlaRow(job, t, x, stage);
    if (row == nullptr) continue;
    float scales[kDsLatent / kDsTile];
    std::uint16_t maxima[kDsLatent / kDsTile];
    for (int i = 0; i < kDsLatent / kDsTile; ++i) {
      maxima[i] = MaxMagnitudeBits(x + i * kDsTile, kDsTile);
    }
    for (int i = 0; i < kDsLatent / kDsTile; ++i) {
      tile(x + i * kDsTile, maxima[i], row + i * kDsTile, scales[i]);
    }
    DsMlaFinish(job, t, row, scales, stage);
  }
}

// fp8_ds_mla entries of aligned bfloat16 kv_c rows on the 16-byte targets: each tile by
// TileByBytes16 where its byte tables cover it, else by the shortcut.
HWY_NOINLINE void WriteDsMlaBytes16(const Job& job, std::int64_t begin, std::int64_t end) {
  const formats::HWY_NAMESPACE::CodeOrder<true>& order =
      formats::HWY_NAMESPACE::CodeOrder<true>::Get();
  const auto shuffle = order.Shuffle();
  const auto lanes = order.Lanes();
  const DsTileTables& tt = TileTables();
  // By reference: SVE vectors cannot be captured by copy.
  DsMlaBytes16Tokens(
      job, begin, end,
      [&](const std::uint16_t* tile, std::uint16_t m, unsigned char* codes, float& scale) HWY_ATTR {
        if (TileByBytes16(tt, tile, m, codes, scale)) return;
        DsTileByShortcut(tile, m, codes, scale, shuffle, lanes);
      });
}

// fp8_ds_mla entries of aligned float16 kv_c rows on the 16-byte targets: each tile by its
// maximum's table (DsF16Tile).
HWY_NOINLINE void WriteDsMlaF16Bytes16(const Job& job, std::int64_t begin, std::int64_t end) {
  const DsF16Table* tables = F16TileTables();
  DsMlaBytes16Tokens(job, begin, end,
                     [tables](const std::uint16_t* tile, std::uint16_t m, unsigned char* codes,
                              float& scale) HWY_ATTR { DsF16Tile(tables, tile, m, codes, scale); });
}
#endif

// fp8_ds_mla entries of aligned bfloat16 kv_c rows: on AVX-512 by the code tables (byte tables
// where VBMI is available), on AVX2 each tile by its block table where one covers it, on the
// 16-byte targets by their byte form, and otherwise (and for the tiles no table covers) by
// DsTileByShortcut.
void WriteDsMlaBF16Tokens(const Job& job, std::int64_t begin, std::int64_t end) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (vbmi_usable()) {
    WriteDsMlaBytes(job, begin, end);
  } else {
    WriteDsMlaWords(job, begin, end);
  }
#elif KVS_FP8_TABLE_BLOCKS
  WriteDsMlaBlocks(job, begin, end);
#elif KVS_FP8_TABLE_BYTES16
  WriteDsMlaBytes16(job, begin, end);
#else
  const formats::HWY_NAMESPACE::CodeOrder<true>& order =
      formats::HWY_NAMESPACE::CodeOrder<true>::Get();
  const auto shuffle = order.Shuffle();
  const auto lanes = order.Lanes();
  constexpr std::int64_t kTiles = kDsLatent / kDsTile;
  StagedRows stage(job.stream, kDsEntryBytes);
  for (std::int64_t t = begin; t < end; ++t) {
    const std::uint16_t* x;
    unsigned char* row = DsMlaRow(job, t, x, stage);
    if (row == nullptr) continue;
    float scales[kTiles];
    for (std::int64_t i = 0; i < kTiles; ++i) {
      DsTileByShortcut(x + i * kDsTile, MaxMagnitudeBits(x + i * kDsTile, kDsTile),
                       row + i * kDsTile, scales[i], shuffle, lanes);
    }
    DsMlaFinish(job, t, row, scales, stage);
  }
#endif
}
#endif

// The groups of the rows of tokens [begin, end), for QuantizeBF16GroupsByTable: each written
// token's kv_c then its k_pe (both lengths multiples of the group), in token order. The walk's
// state lives in the generator, so that the group loop keeps it in registers.
HWY_INLINE auto TokenGroups(const Job& job, std::int64_t begin, std::int64_t end) {
  const auto group = static_cast<std::int64_t>(formats::HWY_NAMESPACE::BF16GroupSize());
  return [&job, end, group, t = begin - 1, i = std::int64_t{0}, n = std::int64_t{0}, pe = true,
          x = static_cast<const unsigned char*>(nullptr),
          out = static_cast<unsigned char*>(nullptr)](const std::uint16_t*& src,
                                                      unsigned char*& dst) KVS_MUTABLE_HWY_ATTR {
    while (i == n) {
      if (pe) {
        do {
          if (++t >= end) return false;
        } while (job.slots[t] < 0);
        out = job.split.address(job.cache, job.block_stride, job.slot_stride, job.slots[t]);
        x = job.kv_c + t * job.kv_c_token;
        n = job.latent_dim;
        // A few tokens ahead, the inputs: the hardware prefetchers fall behind this loop.
        if (t + kAhead < end) {
          const unsigned char* ahead = job.kv_c + (t + kAhead) * job.kv_c_token;
          for (std::int64_t j = 0; j < 2 * job.latent_dim; j += 64) hwy::Prefetch(ahead + j);
          hwy::Prefetch(job.k_pe + (t + kAhead) * job.k_pe_token);
        }
      } else {
        out += job.latent_dim;
        x = job.k_pe + t * job.k_pe_token;
        n = job.pe_dim;
      }
      pe = !pe;
      i = 0;
    }
    src = reinterpret_cast<const std::uint16_t*>(x) + i;
    dst = out + i;
    i += group;
    return true;
  };
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// Byte tables of one fp8 row scale s (see RowByteGroup): code[m] the code of 1.m / s moved by
// e0 exponents (2 ref binades of bfloat16, ref its exponent's top seven bits) into [64, 96); by a
// lane's exponent top bits e: plus[e] and minus[e] the code steps of 2 (e - ref) binades above
// or below (capped at 0xF8), plus[e] bit 0 where every quotient of that exponent rounds to zero,
// bit 1 where the lane needs the exact path (bfloat16 subnormals that may not round to zero,
// infinities, NaNs and the largest binades). A quotient that overflows float32 saturates like
// the clamp.
struct RowByteTables {
  __m512i code_lo, code_hi, plus_lo, plus_hi, minus_lo, minus_hi;
};

template <bool kE4M3>
bool MakeRowByteTables(const formats::HWY_NAMESPACE::Fp8Table& table, float scale,
                       RowByteTables& out) {
  constexpr int kMant = kE4M3 ? 3 : 2, kStep = 2 << kMant;
  if (!table.usable) return false;
  const auto quotient_code = [&](std::uint32_t m) {  // the code of 1.m / s, unclamped
    return table.code[m] + (127 << kMant) + static_cast<int>(m >> (7 - kMant));
  };
  const int ref = (64 - quotient_code(0) + (127 << kMant) + kStep - 1) / kStep;
  if (64 - quotient_code(0) + (127 << kMant) < 0 || ref > 126) return false;
  HWY_ALIGN std::uint8_t code[128], plus[128], minus[128];
  for (std::uint32_t m = 0; m < 128; ++m) {
    const int c = quotient_code(m) + (((2 * ref) - 127) << kMant);
    if (c < 64 || c >= 96) return false;
    code[m] = static_cast<std::uint8_t>(c);
  }
  for (int e = 0; e < 128; ++e) {
    const std::uint32_t top = (static_cast<std::uint32_t>(2 * e + 1) << 23 | 0x7F0000u);
    float largest;  // the largest magnitude with these exponent bits
    std::memcpy(&largest, &top, 4);
    const float q = largest / scale;
    const int up = e > ref ? kStep * (e - ref) : 0, down = e < ref ? kStep * (ref - e) : 0;
    plus[e] = static_cast<std::uint8_t>(up < 0xF8 ? up : 0xF8);
    minus[e] = static_cast<std::uint8_t>(down < 0xF8 ? down : 0xF8);
    if (e < 127 && q <= (kE4M3 ? 0x1p-10f : 0x1p-17f)) {
      plus[e] = 1;  // half the smallest subnormal or less: code 0
      minus[e] = 0xF8;
    } else if (e == 0 || e == 127) {
      plus[e] |= 2;
    }
  }
  out = {_mm512_load_si512(code),      _mm512_load_si512(code + 64), _mm512_load_si512(plus),
         _mm512_load_si512(plus + 64), _mm512_load_si512(minus),     _mm512_load_si512(minus + 64)};
  return true;
}

// The codes of 64 bfloat16 values divided by the tables' scale: a lane with exponent
// 2 e + e0 and mantissa m gets code[m] + e0 code steps, plus plus[e], less minus[e] (saturated),
// clamped to the largest finite code: the word tables' formula counted in bytes. A code of at
// least the smallest normal one is exact (a quotient just below the normal range that the
// formula rounds up to it rounds there on the subnormal grid too). False, writing nothing, when a
// lane is below that and not flagged as rounding to zero, or flagged for the exact path.
template <bool kE4M3>
KVS_VBMI_ATTR HWY_INLINE bool RowByteGroup(const std::uint16_t* HWY_RESTRICT src,
                                           const ByteConstants& k, const RowByteTables& t,
                                           unsigned char* HWY_RESTRICT dst) {
  constexpr char kNormal = kE4M3 ? 8 : 4, kMax = kE4M3 ? 0x7E : 0x7B;
  const __m512i a = _mm512_loadu_si512(src), b = _mm512_loadu_si512(src + 32);
  const __m512i low = _mm512_permutex2var_epi8(a, k.low, b);
  const __m512i high = _mm512_permutex2var_epi8(a, k.high, b);
  __m512i q = _mm512_permutex2var_epi8(t.code_lo, low, t.code_hi);
  q = _mm512_mask_add_epi8(q, _mm512_movepi8_mask(low), q, _mm512_set1_epi8(kNormal));
  const __m512i plus = _mm512_permutex2var_epi8(t.plus_lo, high, t.plus_hi);
  const __m512i minus = _mm512_permutex2var_epi8(t.minus_lo, high, t.minus_hi);
  const __m512i code =
      _mm512_min_epu8(_mm512_subs_epu8(_mm512_adds_epu8(q, plus), minus), _mm512_set1_epi8(kMax));
  const __mmask64 normal = _mm512_cmpge_epu8_mask(code, _mm512_set1_epi8(kNormal));
  const __mmask64 zero = _mm512_test_epi8_mask(plus, _mm512_set1_epi8(1));
  const __mmask64 exact = _mm512_test_epi8_mask(plus, _mm512_set1_epi8(2));
  if (HWY_UNLIKELY(!_kortestc_mask64_u8(_kandn_mask64(exact, normal), zero))) return false;
  _mm512_storeu_si512(dst, _mm512_ternarylogic_epi32(code, high, _mm512_set1_epi8(-128), 0xF8));
  return true;
}

// fp8 rows of tokens [begin, end) by byte tables: groups the tables do not encode by the
// shortcut's exact row path.
template <bool kE4M3>
KVS_VBMI_ATTR HWY_NOINLINE void WriteRowsBytes(const Job& job, std::int64_t begin, std::int64_t end,
                                               const RowByteTables& tables,
                                               const BF16Shortcut& sc) {
  const ByteConstants k = MakeByteConstants();
  const RowByteTables t = tables;
  auto next = TokenGroups(job, begin, end);
  const std::uint16_t* src;
  unsigned char* dst;
  while (next(src, dst)) {
    if (HWY_LIKELY(RowByteGroup<kE4M3>(src, k, t, dst))) continue;
    QuantizeBF16Row<kE4M3>(src, formats::HWY_NAMESPACE::BF16GroupSize(), sc, dst);
  }
}
#endif

#if KVS_FP8_F16_BYTES
// The byte-form writers' token loop (AVX2, and the 16-byte targets' float16 rows): run(src, n,
// row, ahead) for each written token's
// kv_c and then its k_pe, each in a loop of its own, cheaper than a group generator's walk. A few
// tokens ahead, the inputs are prefetched (ahead, in elements): the hardware prefetchers fall
// behind this loop. The last tokens prefetch their own lines.
template <class Run>
HWY_INLINE void ByteRows(const Job& job, std::int64_t begin, std::int64_t end, const Run& run) {
  const auto latent = static_cast<std::size_t>(job.latent_dim);
  const auto pe = static_cast<std::size_t>(job.pe_dim);
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t slot = job.slots[t];
    if (slot < 0) continue;
    unsigned char* row = job.split.address(job.cache, job.block_stride, job.slot_stride, slot);
    const std::int64_t ahead = t + kAhead < end ? kAhead : 0;
    run(reinterpret_cast<const std::uint16_t*>(job.kv_c + t * job.kv_c_token), latent, row,
        ahead * job.kv_c_token / 2);
    run(reinterpret_cast<const std::uint16_t*>(job.k_pe + t * job.k_pe_token), pe, row + latent,
        ahead * job.k_pe_token / 2);
  }
}

#if KVS_FP8_TABLE_BLOCKS
// fp8 rows of tokens [begin, end) by the bfloat16 table's byte form (AVX2).
template <bool kE4M3>
HWY_NOINLINE void WriteRowsBlockBytes(const Job& job, std::int64_t begin, std::int64_t end,
                                      const formats::HWY_NAMESPACE::Fp8Table& table, float scale) {
  namespace fmt = formats::HWY_NAMESPACE;
  const fmt::Fp8RowBytes rb(table);
  ByteRows(job, begin, end,
           [&](const std::uint16_t* src, std::size_t n, unsigned char* dst, std::ptrdiff_t ahead)
               HWY_ATTR { fmt::QuantizeBF16RunBytes<kE4M3>(src, n, rb, scale, dst, ahead); });
}
#endif

// fp8 rows of aligned float16 inputs (rows of whole groups of 32) by the scale's float16 byte
// table; false, writing nothing, where the table is not usable.
template <bool kE4M3>
HWY_NOINLINE bool WriteRowsF16Bytes(const Job& job, std::int64_t begin, std::int64_t end) {
  namespace fmt = formats::HWY_NAMESPACE;
  const fmt::Fp8F16Bytes table = fmt::MakeFp8F16Bytes<kE4M3>(job.scale);
  if (!table.usable) return false;
#if KVS_FP8_F16_BLOCKS
  const fmt::F16RunTable rb(table);
  ByteRows(job, begin, end,
           [&](const std::uint16_t* src, std::size_t n, unsigned char* dst, std::ptrdiff_t ahead)
               HWY_ATTR { fmt::F16RunBytes<kE4M3>(src, n, rb, job.scale, dst, ahead); });
#else
  ByteRows(job, begin, end,
           [&](const std::uint16_t* src, std::size_t n, unsigned char* dst, std::ptrdiff_t ahead)
               HWY_ATTR { fmt::F16RunBytes16<kE4M3>(src, n, table, job.scale, dst, ahead); });
#endif
  return true;
}
#endif

// fp8_e4m3 / fp8_e5m2 rows of aligned bfloat16 inputs: the shortcut's setup (and, for a long
// enough chunk, the code table) done once.
template <bool kE4M3>
void QuantizeBF16Tokens(const Job& job, std::int64_t begin, std::int64_t end) {
  namespace fmt = formats::HWY_NAMESPACE;
  const BF16Shortcut sc = MakeBF16Shortcut<kE4M3>(job.scale);
  const fmt::Fp8Table table =
      (end - begin) * (job.latent_dim + job.pe_dim) >= fmt::kFp8TableMinValues
          ? fmt::MakeFp8Table<kE4M3>(job.scale)
          : fmt::Fp8Table();
  const auto quantize = [&](const std::uint16_t* src, std::int64_t n, unsigned char* dst) {
    if (table.usable) {
      fmt::QuantizeBF16RowByTable<kE4M3>(src, static_cast<std::size_t>(n), table, sc, dst);
    } else {
      QuantizeBF16Row<kE4M3>(src, static_cast<std::size_t>(n), sc, dst);
    }
  };
  const auto group = static_cast<std::int64_t>(fmt::BF16GroupSize());
  if (job.latent_dim % group == 0 && job.pe_dim % group == 0) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    RowByteTables tables;
    if (vbmi_usable() && MakeRowByteTables<kE4M3>(table, job.scale, tables)) {
      WriteRowsBytes<kE4M3>(job, begin, end, tables, sc);
      return;
    }
#endif
#if KVS_FP8_TABLE_BLOCKS
    if (table.bytes_usable && group == 32) {
      WriteRowsBlockBytes<kE4M3>(job, begin, end, table, job.scale);
      return;
    }
#endif
    fmt::QuantizeBF16GroupsByTable<kE4M3>(table.usable ? &table : nullptr, sc,
                                          TokenGroups(job, begin, end));
    return;
  }
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t slot = job.slots[t];
    if (slot < 0) continue;
    unsigned char* row = job.split.address(job.cache, job.block_stride, job.slot_stride, slot);
    quantize(reinterpret_cast<const std::uint16_t*>(job.kv_c + t * job.kv_c_token),
             job.latent_dim, row);
    quantize(reinterpret_cast<const std::uint16_t*>(job.k_pe + t * job.k_pe_token), job.pe_dim,
             row + job.latent_dim);
  }
}

void WriteTokenRange(const Job& job, std::int64_t begin, std::int64_t end) {
  const bool fp8 =
      job.format == LatentCacheFormat::fp8_e4m3 || job.format == LatentCacheFormat::fp8_e5m2;
  const auto even = [](const void* p, std::int64_t step) {
    return reinterpret_cast<std::uintptr_t>(p) % 2 == 0 && step % 2 == 0;
  };
#if HWY_TARGET != HWY_SCALAR
  if (job.format == LatentCacheFormat::fp8_ds_mla && job.dtype == DType::bfloat16 &&
      even(job.kv_c, job.kv_c_token) && kDsTile % (4 * hn::Lanes(DF())) == 0) {
    WriteDsMlaBF16Tokens(job, begin, end);
    return;
  }
#endif
#if KVS_FP8_F16_BYTES
  if (job.format == LatentCacheFormat::fp8_ds_mla && job.dtype == DType::float16 &&
      even(job.kv_c, job.kv_c_token)) {
#if KVS_FP8_F16_BLOCKS
#if HWY_TARGET <= HWY_AVX3
    if (vbmi_usable()) {
      WriteDsMlaF16Carry(job, begin, end);
      return;
    }
#endif
    WriteDsMlaF16Blocks(job, begin, end);
#else
    WriteDsMlaF16Bytes16(job, begin, end);
#endif
    return;
  }
#endif
  if (fp8 && job.dtype == DType::bfloat16 && even(job.kv_c, job.kv_c_token) &&
      even(job.k_pe, job.k_pe_token)) {
    if (job.format == LatentCacheFormat::fp8_e4m3)
      QuantizeBF16Tokens<true>(job, begin, end);
    else
      QuantizeBF16Tokens<false>(job, begin, end);
    return;
  }
  const std::size_t es = job.dtype == DType::float32 ? 4 : 2;
  const auto r = static_cast<std::size_t>(job.latent_dim),
             pe = static_cast<std::size_t>(job.pe_dim);
#if KVS_FP8_F16_BYTES
  // float16: the scale's byte table (formats/fp8_table-inl.h), where the chunk pays for it.
  if (fp8 && job.dtype == DType::float16 && even(job.kv_c, job.kv_c_token) &&
      even(job.k_pe, job.k_pe_token) && r % 32 == 0 && pe % 32 == 0 &&
      (end - begin) * static_cast<std::int64_t>(r + pe) >=
          formats::HWY_NAMESPACE::kFp8TableMinValues) {
    if (job.format == LatentCacheFormat::fp8_e4m3 ? WriteRowsF16Bytes<true>(job, begin, end)
                                                  : WriteRowsF16Bytes<false>(job, begin, end)) {
      return;
    }
  }
#endif
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t slot = job.slots[t];
    if (slot < 0) continue;
    unsigned char* row = job.split.address(job.cache, job.block_stride, job.slot_stride, slot);
    const unsigned char* kv_c = job.kv_c + t * job.kv_c_token;
    const unsigned char* k_pe = job.k_pe + t * job.k_pe_token;
    switch (job.format) {
      case LatentCacheFormat::copy:
        if (job.stream) {
          StreamBytes(row, kv_c, r * es);
          StreamBytes(row + r * es, k_pe, pe * es);
        } else {
          CopyBytes(row, kv_c, r * es);
          CopyBytes(row + r * es, k_pe, pe * es);
        }
        break;
      case LatentCacheFormat::fp8_e4m3:
        QuantizeRun<true>(job.dtype, kv_c, r, job.scale, row);
        QuantizeRun<true>(job.dtype, k_pe, pe, job.scale, row + r);
        break;
      case LatentCacheFormat::fp8_e5m2:
        QuantizeRun<false>(job.dtype, kv_c, r, job.scale, row);
        QuantizeRun<false>(job.dtype, k_pe, pe, job.scale, row + r);
        break;
      case LatentCacheFormat::fp8_ds_mla:
        WriteDsMla(job, kv_c, k_pe, row);
        break;
    }
  }
  // Streaming stores are weakly ordered: drain them before the pool reports the chunk done.
  if (job.stream) hwy::FlushStream();
}

}  // namespace kvscatter::detail::paged_latent_write::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail::paged_latent_write {

HWY_EXPORT(WriteTokenRange);

void write_token_range(const Job& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(WriteTokenRange)(job, begin, end);
}

}  // namespace kvscatter::detail::paged_latent_write
#endif  // HWY_ONCE
