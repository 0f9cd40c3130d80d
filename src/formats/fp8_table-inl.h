// Float8 codes of bfloat16 values divided by one scale, by a table of the scale's 128 mantissa
// quotients (Highway -inl.h pattern, included once per target from inside a foreach_target
// translation unit; the table kernels exist on every target but the scalar one).
//
// Why it is exact: a finite bfloat16 x = 1.m * 2^(e - 127) (e >= 1) has x / s = 2^(e - 127) *
// (1.m / s). Where that quotient is a normal float8 value (its magnitude at least the smallest
// normal), it is also a normal float32, so rounding it to float32 commutes with the power of
// two: RN(x / s) = 2^(e - 127) * RN(1.m / s). Rounding to float8's mantissa commutes with it too,
// and the float8 code counts the exponent in steps of 2^kMant, so the code is
// code(RN(1.m / s)) + (e - 127) * 2^kMant, the exponent field counted past its width. Above the
// largest finite float8 the same count only grows, so a clamp gives the saturated code. The
// table holds, per 7-bit mantissa m, that code less 127 * 2^kMant and less m's top kMant bits,
// so that the bfloat16 magnitude bits shifted right by 7 - kMant (e * 2^kMant plus those bits)
// complete it. Magnitudes are sorted like their quotients, so two thresholds found once per scale
// split the lanes: quotients that round to zero (code 0 with the sign), normal ones (the table),
// and the rest (subnormal float8 results, infinities, NaNs), which the caller encodes exactly.
//
// AVX-512 looks the entries up with 16-bit permutes. Narrower targets use the table's shape
// instead: within each block of 16 consecutive mantissas an entry exceeds the block's first by
// 0, 1 or 2 (the block's quotients span less than two float8 steps), so an entry is the block's
// first plus two compares of the mantissa's low four bits against the block's step points:
// three lookups into 8-entry tables (TableLookupBytes), about 30 operations per vector of 16-bit
// lanes. That beats the reciprocal shortcut with 256-bit vectors (AVX2); with 128-bit ones
// (SSE4) it measured no faster. The byte form goes further (MakeFp8TableBytes, RowByteCodes):
// the same lookups at one reference exponent, indexed by the exponent's last bit and the
// mantissa's top three, less the lane's distance below it, encode 32 values per vector on AVX2
// and 16 on the 128-bit targets (SSE4, NEON, SVE: Bytes16), where it measured 1.6-1.9 times
// as fast as the shortcut (SSE4); the rare lanes they do not cover are divided by the scale
// (FixByteBlocks, FixBytes16). float16 input has byte tables of its own over its 1,024 mantissas
// (Fp8F16Bytes: F16RowByteCodes on AVX2, F16RowByteCodes512 on AVX-512, F16Bytes16 on the
// 128-bit targets).
#if defined(KVSCATTER_FORMATS_FP8_TABLE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSCATTER_FORMATS_FP8_TABLE_INL_H_
#undef KVSCATTER_FORMATS_FP8_TABLE_INL_H_
#else
#define KVSCATTER_FORMATS_FP8_TABLE_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/bytes-inl.h"
#include "formats/fp8-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::formats::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct Fp8Table {
  bool usable = false;
  std::uint16_t zero_max = 0;    // magnitude bits up to this: the quotient rounds to zero
  std::uint16_t normal_min = 0;  // from this up to below infinity: a normal float8 quotient
  HWY_ALIGN std::int16_t code[128] = {};
  // The blocks of 16 entries (where blocks_usable: every target but AVX-512): block a's first
  // entry, and the low four mantissa bits less one from which it is exceeded by 1 and by 2 (15:
  // never).
  bool blocks_usable = false;
  HWY_ALIGN std::int16_t block_first[8] = {}, step1[8] = {}, step2[8] = {};
  // The byte form of the blocks, where bytes_usable (see MakeFp8TableBytes): three tables of 16
  // entries and the exponent top bits top and zero_d.
  bool bytes_usable = false;
  std::int8_t byte_top = 0, byte_zero_d = 0;
  HWY_ALIGN std::int8_t byte_first[16] = {}, byte_step1[16] = {}, byte_step2[16] = {};
};

// Whether a table kernel exists on this target: AVX-512's permutes, AVX2's blocks, and the byte
// form on 16-byte vectors everywhere else but the scalar target (SSE4, NEON, SVE).
#undef KVS_FP8_TABLE_BLOCKS
#define KVS_FP8_TABLE_BLOCKS (HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2)
#undef KVS_FP8_TABLE_BYTES16
#define KVS_FP8_TABLE_BYTES16                              \
  (HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128 && \
   !(HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2))
// Whether the float16 byte tables (Fp8F16Bytes) have a kernel: the x86 one (32 values a vector,
// 64 on AVX-512, which also takes the 32-value form for a run's last 32), or the 16-byte one.
#undef KVS_FP8_F16_BLOCKS
#define KVS_FP8_F16_BLOCKS (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2)
#undef KVS_FP8_F16_BYTES
#define KVS_FP8_F16_BYTES (KVS_FP8_F16_BLOCKS || KVS_FP8_TABLE_BYTES16)
constexpr bool kHaveFp8Table =
    (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || KVS_FP8_TABLE_BLOCKS || KVS_FP8_TABLE_BYTES16;

// The step points of one block of `size` codes e: first1 and first2, the first entries that
// exceed the block's first by 1 and by 2 (size where none does); false where an entry leaves the
// block's 0..2 range or the entries do not rise with their index (the quotients do).
template <class T>
inline bool BlockSteps(const T* e, int size, int& first1, int& first2) {
  first1 = first2 = size;
  for (int b = size - 1; b >= 0; --b) {
    const int d = e[b] - e[0];
    if (d < 0 || d > 2) return false;
    if (d >= 1) first1 = b;
    if (d >= 2) first2 = b;
  }
  for (int b = 0; b < size; ++b) {
    if (e[b] - e[0] != (b >= first1) + (b >= first2)) return false;
  }
  return true;
}

// Fills the block form of t.code; false where an entry leaves its block's 0..2 range.
inline bool MakeFp8TableBlocks(Fp8Table& t) {
  for (int a = 0; a < 8; ++a) {
    const std::int16_t* e = t.code + 16 * a;
    int first1, first2;
    if (!BlockSteps(e, 16, first1, first2)) return false;
    t.block_first[a] = e[0];
    t.step1[a] = static_cast<std::int16_t>(first1 - 1);
    t.step2[a] = static_cast<std::int16_t>(first2 - 1);
  }
  return true;
}

// The byte form of t's blocks (t.code and its block form filled): with H a lane's exponent top
// bits and d = top - H (0 at or above top, capped), a lane's code is the block form's code at
// exponent 2 top or 2 top + 1 (byte_first and the step points, in bytes) less d steps of two
// binades (2^(kMant + 1) codes each), saturated at 0. Lanes above top (saturated, infinite or
// NaN) RowByteCodes leaves to the exact path, which needs top below 127; d >= zero_d holds
// exactly where every magnitude of H is at most the zero threshold, and there the difference
// reaches 0. False where a piece does not fit.
template <int kMant>
bool MakeFp8TableBytes(Fp8Table& t) {
  constexpr int kStep = 2 << kMant, kCap = 255 / kStep, kMaxCode = kMant == 3 ? 0x7E : 0x7B;
  // The code at exponent e of mantissa 16 c: e 2^kMant, c's share of the magnitude bits, the
  // block's first entry.
  const auto code = [&t](int e, int c) {
    return (e << kMant) + (c >> (3 - kMant)) + t.block_first[c];
  };
  int top = 0;
  while (top < 127 && code(2 * top + 2, 0) < kMaxCode) ++top;
  int zero_d = 0;  // the smallest d whose magnitudes (H << 8 | 0xFF at most) all round to zero
  while (zero_d <= top && ((top - zero_d) << 8 | 0xFF) > t.zero_max) ++zero_d;
  int q_min = 255, q_max = 0;
  for (int i = 0; i < 16; ++i) {
    const int c = i & 7, q = code(2 * top + (i >> 3), c);
    q_min = q < q_min ? q : q_min;
    q_max = q + 2 > q_max ? q + 2 : q_max;
    t.byte_first[i] = static_cast<std::int8_t>(q);
    t.byte_step1[i] = static_cast<std::int8_t>(i << 4 | t.step1[c]);
    t.byte_step2[i] = static_cast<std::int8_t>(i << 4 | t.step2[c]);
  }
  t.byte_top = static_cast<std::int8_t>(top);
  t.byte_zero_d = static_cast<std::int8_t>(zero_d);
  // Bytes without wrap; a bfloat16 zero or subnormal (H = 0) among the zero-rounding lanes; their
  // difference reaching 0; infinities and NaNs above top.
  return q_min >= 0 && q_max <= 255 && zero_d <= top && zero_d <= kCap && zero_d * kStep >= q_max &&
         top < 127;
}

// Values per scale from which a caller builds the scale's table: its setup costs about as much
// as quantizing a few thousand values the other way.
constexpr std::int64_t kFp8TableMinValues = 16384;

template <bool kE4M3>
Fp8Table MakeFp8Table(float scale) {
  constexpr int kMant = kE4M3 ? 3 : 2, kBias = kE4M3 ? 7 : 15, kShift = 23 - kMant;
  Fp8Table t;
  // 1.m / s must stay a normal float32; then it is normal for every m.
  if (!kHaveFp8Table || !RecipShortcutScale(scale)) return t;
  const auto quotient = [scale](std::uint32_t mag) {
    const std::uint32_t b = mag << 16;
    float x;
    std::memcpy(&x, &b, 4);
    return x / scale;
  };
  // The smallest magnitude in [lo, 0x7F80] whose quotient passes (monotonic), 0x7F80 if none.
  const auto first = [&](std::uint32_t lo, auto passes) {
    std::uint32_t hi = 0x7F80;
    while (lo < hi) {
      const std::uint32_t mid = (lo + hi) / 2;
      if (passes(quotient(mid))) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  };
  // Half the smallest subnormal rounds to zero (ties to even); the smallest normal.
  const float half_sub = 1.0f / static_cast<float>(std::uint64_t{1} << (kBias + kMant));
  const float min_normal = 1.0f / static_cast<float>(1u << (kBias - 1));
  const std::uint32_t above_zero = first(0, [&](float q) { return q > half_sub; });
  const std::uint32_t normal = first(0, [&](float q) { return q >= min_normal; });
  // The formula needs e >= 1 (no bfloat16 subnormal in the normal range) and some finite lane.
  if (normal < 0x80 || normal >= 0x7F80) return t;
  t.zero_max = static_cast<std::uint16_t>(above_zero - 1);
  t.normal_min = static_cast<std::uint16_t>(normal);
  for (std::uint32_t m = 0; m < 128; ++m) {
    const float y = quotient(0x3F80 | m);
    std::uint32_t b;
    std::memcpy(&b, &y, 4);
    // Rounded to kMant mantissa bits, ties to even: the biased exponent and mantissa, carried.
    const std::uint32_t r = (b + (1u << (kShift - 1)) - 1u + ((b >> kShift) & 1u)) >> kShift;
    const std::int32_t code = static_cast<std::int32_t>(r) - ((127 - kBias) << kMant);
    t.code[m] = static_cast<std::int16_t>(code - (127 << kMant) -
                                          static_cast<std::int32_t>(m >> (7 - kMant)));
  }
  t.blocks_usable = !(HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) && MakeFp8TableBlocks(t);
  t.usable = HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 ? true : t.blocks_usable;
  t.bytes_usable =
      (KVS_FP8_TABLE_BLOCKS || KVS_FP8_TABLE_BYTES16) && t.usable && MakeFp8TableBytes<kMant>(t);
  // The byte form is the only table kernel of those targets.
  if (KVS_FP8_TABLE_BYTES16) t.usable = t.bytes_usable;
  return t;
}

// Whether the table of scale, shifted to scale * 2^shift (Fp8TableVectors), is exact: the
// shifted thresholds must be normal bfloat16 magnitudes, so that the lanes they classify are
// those of the unshifted table scaled by a power of two.
inline bool ShiftedFp8TableValid(const Fp8Table& table, int shift) {
  return table.usable && table.zero_max >= 0x80 && table.zero_max + shift * 128 >= 0x80 &&
         table.normal_min + shift * 128 < 0x7F80;
}

// The float8 codes of the floats x divided by scale (the exact path of the byte kernels), stored
// at dst.
template <bool kE4M3, class DF>
HWY_INLINE void StoreQuotientCodes(DF df, hn::Vec<DF> x, float scale,
                                   unsigned char* HWY_RESTRICT dst) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::uint8_t, DF> d8;
  const auto q = hn::Div(x, hn::Set(df, scale));
  const auto code = kE4M3 ? EncodeE4M3Satfinite(df, q) : EncodeE5M2Satfinite(df, q);
  hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, code)), d8, dst);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// The table's 128 entries as four vectors of 32, for the 16-bit permutes.
struct Fp8TableVectors {
  __m512i t[4];
  __m512i zero_max, normal_min;

  Fp8TableVectors() = default;  // for callers that fill the vectors themselves
  explicit Fp8TableVectors(const Fp8Table& table) {
    for (int k = 0; k < 4; ++k) t[k] = _mm512_load_si512(table.code + 32 * k);
    zero_max = _mm512_set1_epi16(static_cast<std::int16_t>(table.zero_max));
    normal_min = _mm512_set1_epi16(static_cast<std::int16_t>(table.normal_min));
  }

  // The table of scale * 2^shift, from the table of scale (float8 with kMant mantissa bits):
  // x / (scale * 2^shift) is (x * 2^-shift) / scale, whose magnitude bits are x's less shift
  // exponent steps, so the codes drop by shift << kMant and the thresholds rise by shift
  // exponent steps. Valid where both shifted thresholds stay normal bfloat16 magnitudes
  // (ShiftedFp8TableValid).
  template <int kMant>
  static Fp8TableVectors Shifted(const Fp8Table& table, int shift) {
    Fp8TableVectors v(table);
    const __m512i drop = _mm512_set1_epi16(static_cast<std::int16_t>(shift * (1 << kMant)));
    for (int k = 0; k < 4; ++k) v.t[k] = _mm512_sub_epi16(v.t[k], drop);
    v.zero_max = _mm512_set1_epi16(static_cast<std::int16_t>(table.zero_max + shift * 128));
    v.normal_min = _mm512_set1_epi16(static_cast<std::int16_t>(table.normal_min + shift * 128));
    return v;
  }
};

// The float8 codes of the 64 bfloat16 values at src into dst; false, writing nothing, when a
// lane is neither zero-rounding nor normal (the caller encodes the group exactly).
template <bool kE4M3>
HWY_INLINE bool TableGroupAVX3(const std::uint16_t* HWY_RESTRICT src, const Fp8TableVectors& tv,
                               unsigned char* HWY_RESTRICT dst) {
  constexpr int kMant = kE4M3 ? 3 : 2;
  const __m512i max_code = _mm512_set1_epi16(kE4M3 ? 0x7E : 0x7B);
  const auto codes = [&](__m512i w, __mmask32& ok) HWY_ATTR {
    const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi16(0x7FFF));
    // The permutes read the mantissa's low six bits; its seventh picks the table half.
    const __m512i lo = _mm512_permutex2var_epi16(tv.t[0], w, tv.t[1]);
    const __m512i hi = _mm512_permutex2var_epi16(tv.t[2], w, tv.t[3]);
    const __mmask32 upper = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x40));
    __m512i code =
        _mm512_add_epi16(_mm512_srli_epi16(mag, 7 - kMant), _mm512_mask_blend_epi16(upper, lo, hi));
    code = _mm512_min_epi16(code, max_code);
    const __mmask32 normal = _mm512_mask_cmplt_epu16_mask(
        _mm512_cmpge_epu16_mask(mag, tv.normal_min), mag, _mm512_set1_epi16(0x7F80));
    ok = normal | _mm512_cmple_epu16_mask(mag, tv.zero_max);
    return _mm512_maskz_mov_epi16(normal, code);
  };
  const __m512i a = _mm512_loadu_si512(src), b = _mm512_loadu_si512(src + 32);
  __mmask32 ok_a, ok_b;
  const __m512i ca = codes(a, ok_a), cb = codes(b, ok_b);
  if (HWY_UNLIKELY((ok_a & ok_b) != 0xFFFFFFFFu)) return false;
  // Codes are at most 0x7E: the signed pack keeps them, the permute restores element order.
  const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  const __m512i packed = _mm512_permutexvar_epi64(order, _mm512_packs_epi16(ca, cb));
  const __mmask64 neg = _mm512_kunpackd(_mm512_movepi16_mask(b), _mm512_movepi16_mask(a));
  _mm512_storeu_si512(dst, _mm512_mask_add_epi8(packed, neg, packed, _mm512_set1_epi8(-128)));
  return true;
}

// The table kernel of this target, for QuantizeBF16GroupsByTable.
using Fp8TableKernel = Fp8TableVectors;
template <bool kE4M3>
HWY_INLINE bool TableGroup(const std::uint16_t* HWY_RESTRICT src, const Fp8TableVectors& tv,
                           unsigned char* HWY_RESTRICT dst) {
  return TableGroupAVX3<kE4M3>(src, tv, dst);
}
#elif KVS_FP8_TABLE_BLOCKS
// The block form of a table as vectors (each 8-entry table duplicated per 16-byte block) and
// the thresholds, moved by one for strict compares (16-bit magnitudes: no overflow).
struct Fp8TableBlockVectors {
  using D = hn::ScalableTag<std::int16_t>;
  hn::Vec<D> first, step1, step2, zero_above, normal_above;

  explicit Fp8TableBlockVectors(const Fp8Table& table)
      : first(hn::LoadDup128(D(), table.block_first)),
        step1(hn::LoadDup128(D(), table.step1)),
        step2(hn::LoadDup128(D(), table.step2)),
        zero_above(hn::Set(D(), static_cast<std::int16_t>(table.zero_max + 1))),
        normal_above(hn::Set(D(), static_cast<std::int16_t>(table.normal_min - 1))) {}

  // The table of scale * 2^shift, from the table of scale, as Fp8TableVectors::Shifted: the
  // blocks' first codes drop by shift << kMant (the step points stay), the thresholds rise by
  // shift exponent steps. Valid where ShiftedFp8TableValid holds.
  template <int kMant>
  static Fp8TableBlockVectors Shifted(const Fp8Table& table, int shift) {
    Fp8TableBlockVectors v(table);
    v.first = hn::Sub(v.first, hn::Set(D(), static_cast<std::int16_t>(shift * (1 << kMant))));
    v.zero_above = hn::Set(D(), static_cast<std::int16_t>(table.zero_max + shift * 128 + 1));
    v.normal_above = hn::Set(D(), static_cast<std::int16_t>(table.normal_min + shift * 128 - 1));
    return v;
  }
};

using Fp8TableKernel = Fp8TableBlockVectors;

// TableGroupAVX3 for AVX2, two vectors of 16-bit lanes per group (the shortcut's group size).
// kBounded: every lane is known to lie at or below a magnitude the table covers (a tile's
// maximum), so no lane needs the clamp or the infinity test.
template <bool kE4M3, bool kBounded = false>
HWY_INLINE bool TableGroup(const std::uint16_t* HWY_RESTRICT src, const Fp8TableBlockVectors& tv,
                           unsigned char* HWY_RESTRICT dst) {
  constexpr int kMant = kE4M3 ? 3 : 2;
  using D = Fp8TableBlockVectors::D;
  const D d;
  const hn::Repartition<std::uint8_t, D> dbytes;
  using V = hn::Vec<D>;
  const auto look = [&](V table, V idx) HWY_ATTR {
    return hn::BitCast(d, hn::TableLookupBytes(hn::BitCast(dbytes, table),
                                               hn::BitCast(dbytes, idx)));
  };
  const auto codes = [&](V w, hn::Mask<D>& ok) HWY_ATTR {
    const V mag = hn::And(w, hn::Set(d, 0x7FFF));
    // Byte indices 2a and 2a + 1 of block a's 16-bit entries; b: the mantissa's low four bits.
    const V a = hn::And(hn::ShiftRight<4>(w), hn::Set(d, 7));
    const V idx = hn::Add(hn::Mul(a, hn::Set(d, 0x0202)), hn::Set(d, 0x0100));
    const V b = hn::And(w, hn::Set(d, 15));
    V code = hn::Add(hn::ShiftRight<7 - kMant>(mag), look(tv.first, idx));
    code = hn::Sub(code, hn::VecFromMask(d, hn::Gt(b, look(tv.step1, idx))));
    code = hn::Sub(code, hn::VecFromMask(d, hn::Gt(b, look(tv.step2, idx))));
    auto normal = hn::Gt(mag, tv.normal_above);
    if constexpr (!kBounded) {
      code = hn::Min(code, hn::Set(d, kE4M3 ? 0x7E : 0x7B));
      normal = hn::And(normal, hn::Lt(mag, hn::Set(d, 0x7F80)));
    }
    ok = hn::Or(normal, hn::Lt(mag, tv.zero_above));
    // Codes are at most 0x7E: the sign bit or-ed in keeps them within a byte.
    return hn::Or(hn::IfThenElseZero(normal, code),
                  hn::And(hn::ShiftRight<8>(w), hn::Set(d, 0x80)));
  };
  const std::size_t N = hn::Lanes(d);
  const V wa = hn::BitCast(d, hn::LoadU(hn::RebindToUnsigned<D>(), src));
  const V wb = hn::BitCast(d, hn::LoadU(hn::RebindToUnsigned<D>(), src + N));
  hn::Mask<D> ok_a, ok_b;
  const V ca = codes(wa, ok_a), cb = codes(wb, ok_b);
  if (HWY_UNLIKELY(!hn::AllTrue(d, hn::And(ok_a, ok_b)))) return false;
  // One pack of both vectors (it interleaves their halves), the permute restores element order.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi16(ca.raw, cb.raw), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), packed);
  return true;
}

// The byte kernels of AVX2 read 32 bfloat16 values as two vectors of bytes in element order: low
// (the exponent's last bit, then the mantissa) and high (the sign, then the exponent's top seven
// bits). The inputs come from LoadCrossedPair (core/bytes-inl.h), so that the in-block shuffles
// and 64-bit interleaves leave the bytes in order and no permute precedes the store (AMD Zen 2:
// paged_latent_write fp8_e4m3 1.04 x).
struct BlockByteLanes {
  __m256i low, high;
};

HWY_INLINE BlockByteLanes SplitBlockBytes(const std::uint16_t* HWY_RESTRICT src) {
  // Each 16-byte block: its eight low bytes, then its eight high bytes.
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2,
                                         4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  __m256i first, second;  // values 0-7 and 16-23, 8-15 and 24-31
  detail::HWY_NAMESPACE::LoadCrossedPair(src, first, second);
  const __m256i a = _mm256_shuffle_epi8(first, split);
  const __m256i b = _mm256_shuffle_epi8(second, split);
  return {_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b)};
}

// The block form's code of each lane at one exponent: first[i] plus one per step point passed,
// i the low byte's top four bits (tables of 16 entries, the same in each 16-byte block). The step
// tables hold i << 4 | step: compared with the whole low byte, whose top four bits are i, they
// compare the mantissa's low four bits with the step.
// nibble: 15 in every byte (a caller may keep it in a register of its own).
HWY_INLINE __m256i BlockByteQuotient(__m256i low, __m256i first, __m256i step1, __m256i step2,
                                     __m256i nibble = _mm256_set1_epi8(15)) {
  const __m256i idx = _mm256_and_si256(_mm256_srli_epi16(low, 4), nibble);
  __m256i q = _mm256_shuffle_epi8(first, idx);
  q = _mm256_sub_epi8(q, _mm256_cmpgt_epi8(low, _mm256_shuffle_epi8(step1, idx)));
  return _mm256_sub_epi8(q, _mm256_cmpgt_epi8(low, _mm256_shuffle_epi8(step2, idx)));
}

#endif

#if KVS_FP8_F16_BLOCKS
HWY_INLINE void StoreBlockBytes(__m256i out, unsigned char* HWY_RESTRICT dst) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), out);
}

// A table's byte form as vectors, for RowByteCodes.
struct Fp8F16Bytes;
struct Fp8RowBytes {
  __m256i first, step1, step2, top, zero_d, zero_below;

  explicit Fp8RowBytes(const Fp8Table& t)
      : Fp8RowBytes(t.byte_first, t.byte_step1, t.byte_step2, t.byte_top, t.byte_zero_d,
                    // Lanes whose exponent top bits are below it round to zero (top - zero_d is
                    // at least 0).
                    static_cast<std::int8_t>(t.byte_top - t.byte_zero_d + 1)) {}
  explicit Fp8RowBytes(const Fp8F16Bytes& t);  // the float16 table (F16RowByteCodes)
  Fp8RowBytes(__m256i f, __m256i s1, __m256i s2, __m256i t, __m256i zd, __m256i zb)
      : first(f), step1(s1), step2(s2), top(t), zero_d(zd), zero_below(zb) {}

  // From the parts of a byte form: first, step1 and step2 (16 bytes each, 16-byte aligned) and
  // top, zero_d and zero_below (one byte each).
  Fp8RowBytes(const std::int8_t* f, const std::int8_t* s1, const std::int8_t* s2, std::int8_t t,
              std::int8_t zd, std::int8_t zb) {
    const auto dup = [](const std::int8_t* p) HWY_ATTR {
      return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
    };
    first = dup(f);
    step1 = dup(s1);
    step2 = dup(s2);
    top = _mm256_set1_epi8(t);
    zero_d = _mm256_set1_epi8(zd);
    zero_below = _mm256_set1_epi8(zb);
  }
};

#endif

#if KVS_FP8_TABLE_BLOCKS
// The float8 codes of the 32 bfloat16 values at src by a table's byte form (MakeFp8TableBytes)
// into dst; returns the lanes whose code is exact (normal or zero-rounding), all ones where the
// group is. The others (subnormal results, and every lane above top: saturated ones, infinities
// and NaNs, all rare) the caller encodes again (FixByteBlocks).
template <bool kE4M3>
HWY_INLINE __m256i RowByteCodes(const std::uint16_t* HWY_RESTRICT src, const Fp8RowBytes& t,
                                unsigned char* HWY_RESTRICT dst) {
  constexpr int kMant = kE4M3 ? 3 : 2;
  const BlockByteLanes v = SplitBlockBytes(src);
  const __m256i magnitude = _mm256_set1_epi8(0x7F);
  const __m256i h = _mm256_and_si256(v.high, magnitude);
  const __m256i q = BlockByteQuotient(v.low, t.first, t.step1, t.step2);
  // d = top - h capped at zero_d (at most kCap: each byte's 16-bit shift stays within it), where
  // every lane's code reaches 0. Lanes above top wrap to at least 129 and so get code 0 too,
  // which the test below counts as inexact: no compare of their own.
  const __m256i d = _mm256_min_epu8(_mm256_sub_epi8(t.top, h), t.zero_d);
  // Lanes at top may pass the largest finite code: the clamp.
  const __m256i code = _mm256_min_epu8(_mm256_subs_epu8(q, _mm256_slli_epi16(d, kMant + 1)),
                                       _mm256_set1_epi8(kE4M3 ? 0x7E : 0x7B));
  // Codes are at most 0x7E: the sign goes in bit 7.
  StoreBlockBytes(_mm256_or_si256(code, _mm256_andnot_si256(magnitude, v.high)), dst);
  // Exact: normal codes of lanes at or below top, and the lanes at least zero_d below top.
  return _mm256_or_si256(_mm256_cmpgt_epi8(code, _mm256_set1_epi8(7)),
                         _mm256_cmpgt_epi8(t.zero_below, h));
}

// The 8-value blocks of a group of RowByteCodes with a lane not in ok (its movemask) encoded
// again as x / scale: bit j of ok is value j (SplitBlockBytes leaves the bytes in element order).
template <bool kE4M3>
HWY_NOINLINE void FixByteBlocks(const std::uint16_t* HWY_RESTRICT src, std::uint32_t ok,
                                float scale, unsigned char* HWY_RESTRICT dst) {
  const hn::Full256<float> df;
  const hn::Rebind<std::uint16_t, decltype(df)> d16;
  const hn::RebindToUnsigned<decltype(df)> du;
  for (int k = 0; k < 4; ++k) {
    if (((ok >> (8 * k)) & 0xFF) == 0xFF) continue;
    const int at = 8 * k;
    const auto x = hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, src + at))));
    StoreQuotientCodes<kE4M3>(df, x, scale, dst + at);
  }
}

// The codes of the 32 bfloat16 values at src by RowByteCodes, the blocks it does not encode
// exactly again by FixByteBlocks.
template <bool kE4M3>
HWY_INLINE void ByteGroup(const std::uint16_t* HWY_RESTRICT src, const Fp8RowBytes& t,
                          float scale, unsigned char* HWY_RESTRICT dst) {
  const auto ok =
      static_cast<std::uint32_t>(_mm256_movemask_epi8(RowByteCodes<kE4M3>(src, t, dst)));
  if (HWY_UNLIKELY(ok != 0xFFFFFFFFu)) FixByteBlocks<kE4M3>(src, ok, scale, dst);
}

// The codes of n bfloat16 values at src (n a multiple of 32) by ByteGroup. Each group prefetches
// its line at src + ahead (a later row's), cheaper than a loop of prefetches of its own.
template <bool kE4M3>
HWY_INLINE void QuantizeBF16RunBytes(const std::uint16_t* HWY_RESTRICT src, std::size_t n,
                                     const Fp8RowBytes& table, float scale,
                                     unsigned char* HWY_RESTRICT dst, std::ptrdiff_t ahead) {
  const Fp8RowBytes t = table;  // in registers: the stores could alias the caller's copy
  for (std::size_t i = 0; i < n; i += 32) {
    hwy::Prefetch(src + ahead + i);
    ByteGroup<kE4M3>(src + i, t, scale, dst + i);
  }
}
#endif

#if KVS_FP8_TABLE_BLOCKS
// QuantizeBF16GroupsByTable on AVX2 where the table has its byte form: each group of 32 values
// (the group size here) by ByteGroup.
template <bool kE4M3, class Next>
HWY_INLINE void QuantizeBF16GroupsByBytes(const Fp8Table& table, const BF16Shortcut& sc,
                                          Next next) {
  const Fp8RowBytes rb(table);
  const std::uint16_t* src;
  unsigned char* dst;
  while (next(src, dst)) ByteGroup<kE4M3>(src, rb, sc.scale, dst);
}
#endif

#if KVS_FP8_TABLE_BYTES16
// RowByteCodes on 16-byte vectors, for the targets without AVX2's or AVX-512's kernels: the same
// byte form of the table (MakeFp8TableBytes), 16 values per vector. Each vector's bytes are split
// into low bytes then high bytes by one lookup, and two 64-bit interleaves gather the low and
// the high bytes of 16 values in element order, so no permute follows. The table's vectors are
// passed one by one: SVE vectors cannot be struct members.
using Fp8Bytes16Tag = hn::Full128<std::uint8_t>;

// The 16 words of wa and wb as bytes in element order: low bytes, then high bytes.
template <class W, class V>
HWY_INLINE void SplitWords16(W wa, W wb, V& low, V& high) {
  const Fp8Bytes16Tag d8;
  const hn::Repartition<std::uint64_t, Fp8Bytes16Tag> d64;
  alignas(16) static constexpr std::uint8_t kSplit[16] = {0, 2, 4, 6, 8, 10, 12, 14,
                                                          1, 3, 5, 7, 9, 11, 13, 15};
  const auto split = hn::Load(d8, kSplit);
  const auto a = hn::BitCast(d64, hn::TableLookupBytes(hn::BitCast(d8, wa), split));
  const auto b = hn::BitCast(d64, hn::TableLookupBytes(hn::BitCast(d8, wb), split));
  low = hn::BitCast(d8, hn::InterleaveLower(d64, a, b));
  high = hn::BitCast(d8, hn::InterleaveUpper(d64, a, b));
}

// The 16 bfloat16 values at src as bytes in element order: low (the exponent's last bit, then
// the mantissa) and high (the sign, then the exponent's top seven bits).
template <class V>
HWY_INLINE void SplitBytes16(const std::uint16_t* HWY_RESTRICT src, V& low, V& high) {
  const hn::Repartition<std::uint16_t, Fp8Bytes16Tag> d16;
  SplitWords16(hn::LoadU(d16, src), hn::LoadU(d16, src + 8), low, high);
}

// The block form's code of each lane at the reference exponent: first[i] plus one per step point
// passed, i the low byte's top four bits (BlockByteQuotient on 16-byte vectors). A byte lookup
// reads an index's low four bits on some targets and all eight on others: the index is masked.
template <class V>
HWY_INLINE V ByteQuotient16(V low, V first, V step1, V step2) {
  const Fp8Bytes16Tag d8;
  const hn::RebindToSigned<Fp8Bytes16Tag> di8;
  const hn::Repartition<std::uint16_t, Fp8Bytes16Tag> d16;
  const auto idx =
      hn::And(hn::BitCast(d8, hn::ShiftRight<4>(hn::BitCast(d16, low))), hn::Set(d8, 15));
  const auto passed = [&](V step) HWY_ATTR {
    return hn::BitCast(
        d8, hn::VecFromMask(di8, hn::Gt(hn::BitCast(di8, low),
                                        hn::BitCast(di8, hn::TableLookupBytes(step, idx)))));
  };
  return hn::Sub(hn::Sub(hn::TableLookupBytes(first, idx), passed(step1)), passed(step2));
}

// The float8 codes of the 16 bfloat16 values at src into dst by the byte form; false where a code
// is not exact (a subnormal result, or a lane above top: saturated, infinite or NaN), which the
// caller encodes again (FixBytes16).
template <bool kE4M3, class V = hn::Vec<Fp8Bytes16Tag>>
HWY_INLINE bool Bytes16(const std::uint16_t* HWY_RESTRICT src, V first, V step1, V step2, V top,
                        V zero_d, V zero_below, unsigned char* HWY_RESTRICT dst) {
  constexpr int kMant = kE4M3 ? 3 : 2;
  using D = Fp8Bytes16Tag;
  const D d8;
  const hn::RebindToSigned<D> di8;
  const hn::Repartition<std::uint16_t, D> d16;
  V low, high;
  SplitBytes16(src, low, high);
  const V q = ByteQuotient16(low, first, step1, step2);
  const auto magnitude = hn::Set(d8, 0x7F);
  const auto h = hn::And(high, magnitude);
  // As in RowByteCodes: d = top - h capped at zero_d (lanes above top wrap and are capped too),
  // each byte's 16-bit shift staying within it; the clamp at the largest finite code.
  const auto d = hn::Min(hn::Sub(top, h), zero_d);
  const auto dropped = hn::BitCast(d8, hn::ShiftLeft<kMant + 1>(hn::BitCast(d16, d)));
  const auto code = hn::Min(hn::SaturatedSub(q, dropped),
                            hn::Set(d8, static_cast<std::uint8_t>(kE4M3 ? 0x7E : 0x7B)));
  hn::StoreU(hn::Or(code, hn::AndNot(magnitude, high)), d8, dst);
  const auto exact = hn::Or(hn::Gt(hn::BitCast(di8, code), hn::Set(di8, 7)),
                            hn::Gt(hn::BitCast(di8, zero_below), hn::BitCast(di8, h)));
  return hn::AllTrue(di8, exact);
}

// The 16 values at src encoded again as x / scale, every lane exact.
template <bool kE4M3>
HWY_NOINLINE void FixBytes16(const std::uint16_t* HWY_RESTRICT src, float scale,
                             unsigned char* HWY_RESTRICT dst) {
  const hn::FixedTag<float, 4> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<std::uint16_t, decltype(df)> d16;
  for (int k = 0; k < 16; k += 4) {
    const auto x = hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, src + k))));
    StoreQuotientCodes<kE4M3>(df, x, scale, dst + k);
  }
}

// QuantizeBF16GroupsByTable on these targets: each group (a multiple of 16 values) by Bytes16.
template <bool kE4M3, class Next>
HWY_INLINE void QuantizeBF16GroupsByBytes16(const Fp8Table& table, const BF16Shortcut& sc,
                                            Next next) {
  const Fp8Bytes16Tag d8;
  const auto bytes = [d8](const std::int8_t* p) HWY_ATTR {
    return hn::Load(d8, reinterpret_cast<const std::uint8_t*>(p));
  };
  const auto splat = [d8](int v) HWY_ATTR { return hn::Set(d8, static_cast<std::uint8_t>(v)); };
  const auto first = bytes(table.byte_first), step1 = bytes(table.byte_step1),
             step2 = bytes(table.byte_step2), top = splat(table.byte_top),
             zero_d = splat(table.byte_zero_d),
             zero_below = splat(table.byte_top - table.byte_zero_d + 1);
  const std::size_t group = BF16GroupSize();
  const std::uint16_t* src;
  unsigned char* dst;
  while (next(src, dst)) {
    for (std::size_t i = 0; i < group; i += 16) {
      if (HWY_UNLIKELY(
              !Bytes16<kE4M3>(src + i, first, step1, step2, top, zero_d, zero_below, dst + i))) {
        FixBytes16<kE4M3>(src + i, sc.scale, dst + i);
      }
    }
  }
}
#endif

// ---- float16 input: the byte form on x86 and the 16-byte targets ----------------------------
// A finite float16 x = 1.m * 2^(e - 15) (1 <= e <= 30, m of 10 bits) has, by the argument at the
// top of this file, the code code(RN(1.m / s)) + (e - 15) * 2^kMant wherever its quotient is a
// normal float8 value. The table holds those codes for m's 1,024 values in eight blocks of 128
// (block b = m's top three bits), where an entry exceeds its block's first by 0, 1 or 2 as in the
// bfloat16 block form. A doubled float16 drops its sign and splits into bytes: the high byte is
// e * 8 + b, the low byte m's low seven bits times 2. The kernel looks the code up at one
// reference exponent `top` (first[b] plus one per step point passed) and subtracts the lane's
// distance below it, top - e, in steps of 2^kMant codes, saturated at 0. The distance is capped
// at zero_d, from which every code reaches 0. Exact lanes: codes of at least 8 (normal) with
// 1 <= e <= top, and lanes whose exponent lies below zero_below, all of whose magnitudes round to
// zero (their codes reach 0; a float16 subnormal reads the code of 1.m * 2^-15, below 2^-14, and
// where every subnormal rounds to zero that quotient lies far below float8's normal range too).
// The rest (float8 subnormal results, float16 subnormals that do not round to zero, lanes above
// top: saturated, infinite, NaN) go to the exact path (FixF16ByteBlocks).
struct Fp8F16Bytes {
  bool usable = false;
  std::int8_t top = 0, zero_d = 0, zero_below = 0;
  // first[b], and the step points as (2 * step) ^ 0x80: the kernel compares them with the low
  // byte ^ 0x80, an unsigned compare by signed instructions. Blocks 8-15 are unused.
  HWY_ALIGN std::int8_t first[16] = {}, step1[16] = {}, step2[16] = {};
};

// The codes of 1.m / scale for float16's 1,024 mantissas m (the float16 values with exponent
// field 15), counted past the exponent field's width; false where some quotient is not a normal
// float32 (then neither is the argument above).
template <bool kE4M3>
bool Fp8F16Codes(float scale, int* code) {
  constexpr int kMant = kE4M3 ? 3 : 2, kBias = kE4M3 ? 7 : 15, kShift = 23 - kMant;
  // 1.m / s must stay a normal float32; then it is normal for every m.
  if (!RecipShortcutScale(scale)) return false;
  for (int m = 0; m < 1024; ++m) {
    const float y = (1.0f + static_cast<float>(m) / 1024.0f) / scale;
    std::uint32_t b;
    std::memcpy(&b, &y, 4);
    const std::uint32_t r = (b + (1u << (kShift - 1)) - 1u + ((b >> kShift) & 1u)) >> kShift;
    code[m] = static_cast<int>(r) - ((127 - kBias) << kMant);
  }
  return true;
}

template <bool kE4M3>
Fp8F16Bytes MakeFp8F16Bytes(float scale) {
  constexpr int kMant = kE4M3 ? 3 : 2, kBias = kE4M3 ? 7 : 15;
  constexpr int kMaxCode = kE4M3 ? 0x7E : 0x7B;
  Fp8F16Bytes t;
  int code[1024];  // at e = 15, counted past the exponent field's width
  if (!KVS_FP8_F16_BYTES || !Fp8F16Codes<kE4M3>(scale, code)) return t;
  int first[8], step1[8], step2[8];
  for (int blk = 0; blk < 8; ++blk) {
    const int* e = code + 128 * blk;
    int first1, first2;
    if (!BlockSteps(e, 128, first1, first2)) return t;
    first[blk] = e[0];
    step1[blk] = first1 - 1;
    step2[blk] = first2 - 1;
  }
  // top: the largest exponent whose smallest code is finite (above it every lane saturates).
  int top = 0;
  for (int e = 1; e <= 30; ++e) {
    if (code[0] + ((e - 15) << kMant) <= kMaxCode) top = e;
  }
  if (top == 0) return t;
  // The float16 magnitudes whose quotient rounds to zero: half the smallest subnormal or less.
  const float half_sub = 1.0f / static_cast<float>(std::uint64_t{1} << (kBias + kMant));
  int lo = 0, hi = 0x7C00;  // the first magnitude that does not (monotonic), 0x7C00 if none
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (decode_float16(static_cast<std::uint16_t>(mid)) / scale > half_sub) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const int zero_max = lo - 1;
  int q_min = 255, q_max = 0;
  for (int blk = 0; blk < 8; ++blk) {
    const int q = first[blk] + ((top - 15) << kMant);
    q_min = q < q_min ? q : q_min;
    q_max = q + 2 > q_max ? q + 2 : q_max;
    t.first[blk] = static_cast<std::int8_t>(q);
    t.step1[blk] = static_cast<std::int8_t>((2 * step1[blk]) ^ 0x80);
    t.step2[blk] = static_cast<std::int8_t>((2 * step2[blk]) ^ 0x80);
  }
  const int zero_d = (q_max + (1 << kMant) - 1) >> kMant;  // d * 2^kMant reaches q_max
  t.top = static_cast<std::int8_t>(top);
  t.zero_d = static_cast<std::int8_t>(zero_d);
  t.zero_below = static_cast<std::int8_t>((zero_max + 1) >> 10);
  // Bytes without wrap; the cap within a byte's shift; the exponents that round to zero below
  // top.
  t.usable = q_min >= 0 && q_max <= 255 && (zero_d << kMant) <= 255 && t.zero_below <= top;
  return t;
}

#if KVS_FP8_TABLE_BYTES16
// F16RowByteCodes on 16-byte vectors (SSE4, NEON, SVE): the codes of the 16 float16 values at src
// into dst by the parts of a float16 byte form (first, step1, step2 as vectors; top, zero_d and
// zero_below in every byte); false where a code is not exact, which the caller encodes again
// (FixF16Bytes16). kZeros as there.
template <bool kE4M3, bool kZeros, class V>
HWY_INLINE bool F16Bytes16(const std::uint16_t* HWY_RESTRICT src, V first, V step1, V step2, V top,
                           V zero_d, V zero_below, unsigned char* HWY_RESTRICT dst) {
  constexpr int kMant = kE4M3 ? 3 : 2;
  using D = Fp8Bytes16Tag;
  const D d8;
  const hn::RebindToSigned<D> di8;
  const hn::Repartition<std::uint16_t, D> d16;
  const hn::Repartition<std::int16_t, D> di16;
  const hn::Rebind<std::int8_t, decltype(di16)> di8_half;
  const auto a = hn::LoadU(d16, src), b = hn::LoadU(d16, src + 8);
  // Doubled: the sign dropped, the high byte e * 8 + the block, the low byte the rest * 2.
  V low, high;
  SplitWords16(hn::Add(a, a), hn::Add(b, b), low, high);
  const auto idx = hn::And(high, hn::Set(d8, 7));
  const auto low_x = hn::BitCast(di8, hn::Xor(low, hn::Set(d8, 0x80)));
  const auto passed = [&](V step) HWY_ATTR {
    return hn::BitCast(
        d8, hn::VecFromMask(di8, hn::Gt(low_x, hn::BitCast(di8, hn::TableLookupBytes(step, idx)))));
  };
  const auto q = hn::Sub(hn::Sub(hn::TableLookupBytes(first, idx), passed(step1)), passed(step2));
  const auto e =
      hn::And(hn::BitCast(d8, hn::ShiftRight<3>(hn::BitCast(d16, high))), hn::Set(d8, 0x1F));
  // As in F16RowByteCodes: lanes above top wrap and take the cap, code 0.
  const auto d = hn::Min(hn::Sub(top, e), zero_d);
  const auto dropped = hn::BitCast(d8, hn::ShiftLeft<kMant>(hn::BitCast(d16, d)));
  auto code = hn::Min(hn::SaturatedSub(q, dropped),
                      hn::Set(d8, static_cast<std::uint8_t>(kE4M3 ? 0x7E : 0x7B)));
  const auto zero = hn::Eq(hn::Or(low, high), hn::Zero(d8));
  if (kZeros) code = hn::IfThenZeroElse(zero, code);
  // The signs: a signed narrowing keeps each word's sign in its byte.
  const auto narrow = hn::Combine(di8, hn::DemoteTo(di8_half, hn::BitCast(di16, b)),
                                  hn::DemoteTo(di8_half, hn::BitCast(di16, a)));
  hn::StoreU(hn::Or(code, hn::And(hn::BitCast(d8, narrow), hn::Set(d8, 0x80))), d8, dst);
  // Normal codes count for e >= 1 only, as there.
  const auto subnormal = hn::RebindMask(di8, hn::Eq(e, hn::Zero(d8)));
  auto exact = hn::Or(hn::AndNot(subnormal, hn::Gt(hn::BitCast(di8, code), hn::Set(di8, 7))),
                      hn::Gt(hn::BitCast(di8, zero_below), hn::BitCast(di8, e)));
  if (kZeros) exact = hn::Or(exact, hn::RebindMask(di8, zero));
  return hn::AllTrue(di8, exact);
}

// The 16 float16 values at src encoded again as x / scale, every lane exact (widened through
// the formats module's conversion where the target's own is not exact for every code).
template <bool kE4M3>
HWY_NOINLINE void FixF16Bytes16(const std::uint16_t* HWY_RESTRICT src, float scale,
                                unsigned char* HWY_RESTRICT dst) {
  const hn::FixedTag<float, 4> df;
#if !KVS_F16_IN_REGISTERS
  HWY_ALIGN float wide[16];
  float16_to_float32(src, wide, 16);
#endif
  for (int k = 0; k < 16; k += 4) {
#if KVS_F16_IN_REGISTERS
    StoreQuotientCodes<kE4M3>(df, WidenF16(df, src + k), scale, dst + k);
#else
    StoreQuotientCodes<kE4M3>(df, hn::Load(df, wide + k), scale, dst + k);
#endif
  }
}

// dst[i] = fp8(float16 src[i] / scale) for n values (a multiple of 32) by F16Bytes16 with the
// parts of a byte form (first, step1, step2: 16 bytes each, 16-byte aligned), each 16-value block
// it does not encode exactly again by FixF16Bytes16. Each 32 values prefetch their line at src +
// ahead, as F16RunBytes does.
template <bool kE4M3, bool kZeros = false>
HWY_INLINE void F16RunBytes16(const std::uint16_t* HWY_RESTRICT src, std::size_t n,
                              const std::int8_t* first, const std::int8_t* step1,
                              const std::int8_t* step2, int top, int zero_d, int zero_below,
                              float scale, unsigned char* HWY_RESTRICT dst, std::ptrdiff_t ahead) {
  const Fp8Bytes16Tag d8;
  const auto bytes = [d8](const std::int8_t* p) HWY_ATTR {
    return hn::Load(d8, reinterpret_cast<const std::uint8_t*>(p));
  };
  const auto splat = [d8](int v) HWY_ATTR { return hn::Set(d8, static_cast<std::uint8_t>(v)); };
  const auto vf = bytes(first), v1 = bytes(step1), v2 = bytes(step2), vt = splat(top),
             vz = splat(zero_d), vb = splat(zero_below);
  for (std::size_t i = 0; i < n; i += 32) {
    hwy::Prefetch(src + ahead + i);
    for (std::size_t j = i; j < i + 32; j += 16) {
      if (HWY_UNLIKELY(!(F16Bytes16<kE4M3, kZeros>(src + j, vf, v1, v2, vt, vz, vb, dst + j)))) {
        FixF16Bytes16<kE4M3>(src + j, scale, dst + j);
      }
    }
  }
}

// F16RunBytes16 by the table t.
template <bool kE4M3>
HWY_INLINE void F16RunBytes16(const std::uint16_t* HWY_RESTRICT src, std::size_t n,
                              const Fp8F16Bytes& t, float scale, unsigned char* HWY_RESTRICT dst,
                              std::ptrdiff_t ahead) {
  F16RunBytes16<kE4M3>(src, n, t.first, t.step1, t.step2, t.top, t.zero_d, t.zero_below, scale, dst,
                       ahead);
}

// QuantizeF16RunsBytes (below, AVX2) on these targets.
template <bool kE4M3>
HWY_NOINLINE void QuantizeF16RunsBytes(const std::uint16_t* HWY_RESTRICT src, std::int64_t src_head,
                                       std::size_t n, std::int64_t heads, const Fp8F16Bytes& table,
                                       float scale, unsigned char* HWY_RESTRICT dst,
                                       std::int64_t dst_head) {
  for (std::int64_t h = 0; h < heads; ++h) {
    F16RunBytes16<kE4M3>(src + h * src_head, n, table, scale, dst + h * dst_head, 0);
  }
}
#endif

#if KVS_FP8_F16_BLOCKS
inline Fp8RowBytes::Fp8RowBytes(const Fp8F16Bytes& t)
    : Fp8RowBytes(t.first, t.step1, t.step2, t.top, t.zero_d, t.zero_below) {}

// The float8 codes of the 32 float16 values at src by the table t into dst; returns the lanes
// whose code is exact (see Fp8F16Bytes), all ones where the group is. kZeros: zeros are exact
// too, whatever zero_below says (for tables whose zero_below cannot reach the float16
// subnormals, where a zero is otherwise left to the exact path).
template <bool kE4M3, bool kZeros = false>
HWY_INLINE __m256i F16RowByteCodes(const std::uint16_t* HWY_RESTRICT src, const Fp8RowBytes& t,
                                   unsigned char* HWY_RESTRICT dst) {
  constexpr int kMant = kE4M3 ? 3 : 2;
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2,
                                         4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  __m256i a, b;  // values 0-7 and 16-23, 8-15 and 24-31
  detail::HWY_NAMESPACE::LoadCrossedPair(src, a, b);
  const __m256i sa = _mm256_shuffle_epi8(_mm256_add_epi16(a, a), split);
  const __m256i sb = _mm256_shuffle_epi8(_mm256_add_epi16(b, b), split);
  const __m256i low = _mm256_unpacklo_epi64(sa, sb), high = _mm256_unpackhi_epi64(sa, sb);
  const __m256i idx = _mm256_and_si256(high, _mm256_set1_epi8(7));
  const __m256i low_x = _mm256_xor_si256(low, _mm256_set1_epi8(static_cast<char>(0x80)));
  __m256i q = _mm256_shuffle_epi8(t.first, idx);
  q = _mm256_sub_epi8(q, _mm256_cmpgt_epi8(low_x, _mm256_shuffle_epi8(t.step1, idx)));
  q = _mm256_sub_epi8(q, _mm256_cmpgt_epi8(low_x, _mm256_shuffle_epi8(t.step2, idx)));
  const __m256i e = _mm256_and_si256(_mm256_srli_epi16(high, 3), _mm256_set1_epi8(0x1F));
  // Lanes above top wrap to at least 225 and take the cap: code 0, which the test counts as
  // inexact.
  const __m256i d = _mm256_min_epu8(_mm256_sub_epi8(t.top, e), t.zero_d);
  __m256i code = _mm256_min_epu8(_mm256_subs_epu8(q, _mm256_slli_epi16(d, kMant)),
                                 _mm256_set1_epi8(kE4M3 ? 0x7E : 0x7B));
  // A zero's bytes are both 0 (the doubling dropped its sign); its code is 0.
  const __m256i zero = kZeros
                           ? _mm256_cmpeq_epi8(_mm256_or_si256(low, high), _mm256_setzero_si256())
                           : _mm256_setzero_si256();
  if (kZeros) code = _mm256_andnot_si256(zero, code);
  // The signs: each word's sign is its byte's in a signed saturating pack, in element order.
  const __m256i sign =
      _mm256_and_si256(_mm256_packs_epi16(a, b), _mm256_set1_epi8(static_cast<char>(0x80)));
  StoreBlockBytes(_mm256_or_si256(code, sign), dst);
  // Normal codes count for e >= 1 only: float16 subnormals (e = 0) are not of the form 1.m.
  const __m256i normal = _mm256_andnot_si256(_mm256_cmpeq_epi8(e, _mm256_setzero_si256()),
                                             _mm256_cmpgt_epi8(code, _mm256_set1_epi8(7)));
  const __m256i ok = _mm256_or_si256(normal, _mm256_cmpgt_epi8(t.zero_below, e));
  return kZeros ? _mm256_or_si256(ok, zero) : ok;
}

// The 8-value blocks of a group of F16RowByteCodes with a lane not in ok (its movemask) encoded
// again as x / scale.
template <bool kE4M3>
HWY_NOINLINE void FixF16ByteBlocks(const std::uint16_t* HWY_RESTRICT src, std::uint32_t ok,
                                   float scale, unsigned char* HWY_RESTRICT dst) {
  const hn::Full256<float> df;
  for (int k = 0; k < 4; ++k) {
    if (((ok >> (8 * k)) & 0xFF) == 0xFF) continue;
    const int at = 8 * k;
    const hn::Vec<decltype(df)> x{
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at)))};
    StoreQuotientCodes<kE4M3>(df, x, scale, dst + at);
  }
}

#if HWY_TARGET <= HWY_AVX3
// F16RowByteCodes on 512-bit vectors: the same lookups for 64 values, the lane tests as masks.
struct Fp8RowBytes512 {
  __m512i first, step1, step2, top, zero_d, zero_below;

  explicit Fp8RowBytes512(const Fp8RowBytes& t)
      : first(Dup(t.first)),
        step1(Dup(t.step1)),
        step2(Dup(t.step2)),
        top(Dup(t.top)),
        zero_d(Dup(t.zero_d)),
        zero_below(Dup(t.zero_below)) {}
  explicit Fp8RowBytes512(const Fp8F16Bytes& t) : Fp8RowBytes512(Fp8RowBytes(t)) {}

  // The 256-bit form, for a run's last 32 values.
  Fp8RowBytes Narrow() const {
    const auto low = [](__m512i v) HWY_ATTR { return _mm512_castsi512_si256(v); };
    return Fp8RowBytes(low(first), low(step1), low(step2), low(top), low(zero_d), low(zero_below));
  }

 private:
  static __m512i Dup(__m256i v) { return _mm512_inserti64x4(_mm512_castsi256_si512(v), v, 1); }
};

// The codes of the 64 float16 values at src by the table t into dst; returns the lanes whose
// code is exact, bit j for value j (see F16RowByteCodes, and kZeros there).
template <bool kE4M3, bool kZeros = false>
HWY_INLINE __mmask64 F16RowByteCodes512(const std::uint16_t* HWY_RESTRICT src,
                                        const Fp8RowBytes512& t, unsigned char* HWY_RESTRICT dst) {
  constexpr int kMant = kE4M3 ? 3 : 2;
  const __m512i split =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m512i x0 = _mm512_loadu_si512(src), x1 = _mm512_loadu_si512(src + 32);
  // Blocks of 8 values: a holds 0, 2, 4, 6 and b 1, 3, 5, 7, so that the in-block shuffles,
  // interleaves and packs below leave their results in element order.
  const __m512i a = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i b = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(3, 1, 3, 1));
  const __m512i sa = _mm512_shuffle_epi8(_mm512_add_epi16(a, a), split);
  const __m512i sb = _mm512_shuffle_epi8(_mm512_add_epi16(b, b), split);
  const __m512i low = _mm512_unpacklo_epi64(sa, sb), high = _mm512_unpackhi_epi64(sa, sb);
  const __m512i idx = _mm512_and_si512(high, _mm512_set1_epi8(7));
  const __m512i low_x = _mm512_xor_si512(low, _mm512_set1_epi8(static_cast<char>(0x80)));
  const __m512i one = _mm512_set1_epi8(1);
  __m512i q = _mm512_shuffle_epi8(t.first, idx);
  q = _mm512_mask_add_epi8(q, _mm512_cmpgt_epi8_mask(low_x, _mm512_shuffle_epi8(t.step1, idx)), q,
                           one);
  q = _mm512_mask_add_epi8(q, _mm512_cmpgt_epi8_mask(low_x, _mm512_shuffle_epi8(t.step2, idx)), q,
                           one);
  const __m512i e = _mm512_and_si512(_mm512_srli_epi16(high, 3), _mm512_set1_epi8(0x1F));
  const __m512i d = _mm512_min_epu8(_mm512_sub_epi8(t.top, e), t.zero_d);
  __m512i code = _mm512_min_epu8(_mm512_subs_epu8(q, _mm512_slli_epi16(d, kMant)),
                                 _mm512_set1_epi8(kE4M3 ? 0x7E : 0x7B));
  const __mmask64 zero =
      kZeros ? _mm512_testn_epi8_mask(_mm512_or_si512(low, high), _mm512_set1_epi8(-1)) : 0;
  if (kZeros) code = _mm512_maskz_mov_epi8(~zero, code);
  const __m512i sign =
      _mm512_and_si512(_mm512_packs_epi16(a, b), _mm512_set1_epi8(static_cast<char>(0x80)));
  _mm512_storeu_si512(dst, _mm512_or_si512(code, sign));
  const __mmask64 normal =
      _mm512_mask_cmpgt_epi8_mask(_mm512_test_epi8_mask(e, e), code, _mm512_set1_epi8(7));
  return normal | _mm512_cmpgt_epi8_mask(t.zero_below, e) | zero;
}
#endif

// The table form F16RunBytes takes, built once for a loop of runs (AVX-512's vectors take an
// operation each to build).
#if HWY_TARGET <= HWY_AVX3
using F16RunTable = Fp8RowBytes512;
#else
using F16RunTable = Fp8RowBytes;
#endif

// dst[i] = fp8(float16 src[i] / scale) for n values (a multiple of 32) by F16RowByteCodes, the
// blocks it does not encode exactly again by FixF16ByteBlocks. table: the scale's usable table.
// Each group prefetches its line at src + ahead (a later row's), as QuantizeBF16RunBytes does.
// AVX-512 takes 64 values a step (F16RowByteCodes512).
template <bool kE4M3, bool kZeros = false>
HWY_INLINE void F16RunBytes(const std::uint16_t* HWY_RESTRICT src, std::size_t n,
                            const F16RunTable& table, float scale, unsigned char* HWY_RESTRICT dst,
                            std::ptrdiff_t ahead) {
  std::size_t i = 0;
#if HWY_TARGET <= HWY_AVX3
  for (; i + 64 <= n; i += 64) {
    hwy::Prefetch(src + ahead + i);
    hwy::Prefetch(src + ahead + i + 32);
    const __mmask64 ok = F16RowByteCodes512<kE4M3, kZeros>(src + i, table, dst + i);
    if (HWY_UNLIKELY(ok != ~__mmask64{0})) {
      FixF16ByteBlocks<kE4M3>(src + i, static_cast<std::uint32_t>(ok), scale, dst + i);
      FixF16ByteBlocks<kE4M3>(src + i + 32, static_cast<std::uint32_t>(ok >> 32), scale,
                              dst + i + 32);
    }
  }
  if (i == n) return;
  const Fp8RowBytes t = table.Narrow();
#else
  const Fp8RowBytes& t = table;
#endif
  for (; i < n; i += 32) {
    hwy::Prefetch(src + ahead + i);
    const auto ok = static_cast<std::uint32_t>(
        _mm256_movemask_epi8(F16RowByteCodes<kE4M3, kZeros>(src + i, t, dst + i)));
    if (HWY_UNLIKELY(ok != 0xFFFFFFFFu)) FixF16ByteBlocks<kE4M3>(src + i, ok, scale, dst + i);
  }
}

// F16RunBytes for runs whose lanes are almost all exact (fp8_ds_mla's tiles): every group first
// and one test for the run, which is written again by F16RunBytes where a lane was not exact. n:
// a multiple of 64.
template <bool kE4M3, bool kZeros = false>
HWY_INLINE void F16RunBytesOneTest(const std::uint16_t* HWY_RESTRICT src, std::size_t n,
                                   const Fp8RowBytes& t, float scale,
                                   unsigned char* HWY_RESTRICT dst) {
#if HWY_TARGET <= HWY_AVX3
  const Fp8RowBytes512 w(t);
  __mmask64 ok = ~__mmask64{0};
  for (std::size_t i = 0; i < n; i += 64) {
    ok &= F16RowByteCodes512<kE4M3, kZeros>(src + i, w, dst + i);
  }
  if (HWY_LIKELY(ok == ~__mmask64{0})) return;
  F16RunBytes<kE4M3, kZeros>(src, n, w, scale, dst, 0);
#else
  __m256i ok = _mm256_set1_epi8(-1);
  for (std::size_t i = 0; i < n; i += 32) {
    ok = _mm256_and_si256(ok, F16RowByteCodes<kE4M3, kZeros>(src + i, t, dst + i));
  }
  if (HWY_LIKELY(_mm256_movemask_epi8(ok) == -1)) return;
  F16RunBytes<kE4M3, kZeros>(src, n, t, scale, dst, 0);
#endif
}

// F16RunBytes for `heads` runs of n values sharing one table: run h is read at src + h * src_head
// (elements) and written at dst + h * dst_head (bytes). No prefetches: a token's heads are read in
// order, which the hardware prefetchers follow (four tokens ahead measured no faster).
template <bool kE4M3>
HWY_NOINLINE void QuantizeF16RunsBytes(const std::uint16_t* HWY_RESTRICT src, std::int64_t src_head,
                                       std::size_t n, std::int64_t heads, const Fp8F16Bytes& table,
                                       float scale, unsigned char* HWY_RESTRICT dst,
                                       std::int64_t dst_head) {
  const F16RunTable t(table);  // in registers: the stores could alias the caller's copy
  for (std::int64_t h = 0; h < heads; ++h) {
    F16RunBytes<kE4M3>(src + h * src_head, n, t, scale, dst + h * dst_head, 0);
  }
}
#endif

// QuantizeBF16Groups with the scale's code table (when not null and usable): the groups that
// next names by the table where it covers them, the others by the shortcut's checked path (exact
// for every lane), as QuantizeBF16RowByTable does for one row.
template <bool kE4M3, class Next>
HWY_INLINE void QuantizeBF16GroupsByTable(const Fp8Table* table, const BF16Shortcut& sc,
                                          Next next) {
#if KVS_FP8_TABLE_BYTES16
  if (table != nullptr && table->bytes_usable && sc.mode != Shortcut::none) {
    QuantizeBF16GroupsByBytes16<kE4M3>(*table, sc, next);
    return;
  }
#endif
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || KVS_FP8_TABLE_BLOCKS
#if KVS_FP8_TABLE_BLOCKS
  if (table != nullptr && table->bytes_usable && sc.mode != Shortcut::none) {
    QuantizeBF16GroupsByBytes<kE4M3>(*table, sc, next);
    return;
  }
#endif
  if (table != nullptr && table->usable && sc.mode != Shortcut::none) {
    const Fp8TableKernel tv(*table);
    const QDF df;
    const hn::RebindToUnsigned<QDF> du;
    const CodeOrder<true>& order = CodeOrder<true>::Get();
    const auto vr = hn::Set(df, sc.r);
    const auto hi = hn::Set(du, 0xFFFF0000u);
    const std::size_t half = hn::Lanes(du);  // a group is four float vectors' worth
    const std::uint16_t* src;
    unsigned char* dst;
    while (next(src, dst)) {
      if (HWY_LIKELY(TableGroup<kE4M3>(src, tv, dst))) continue;
      const auto a = hn::LoadU(du, reinterpret_cast<const std::uint32_t*>(src));
      const auto b = hn::LoadU(du, reinterpret_cast<const std::uint32_t*>(src + 2 * half));
      QuantizeGroup<kE4M3, false, true>(
          hn::BitCast(df, hn::ShiftLeft<16>(a)), hn::BitCast(df, hn::And(a, hi)),
          hn::BitCast(df, hn::ShiftLeft<16>(b)), hn::BitCast(df, hn::And(b, hi)), vr, sc.scale,
          order.Shuffle(), order.Lanes(), dst);
    }
    return;
  }
#else
  (void)table;
#endif
  QuantizeBF16Groups<kE4M3>(sc, next);
}

// dst[i] = fp8(bfloat16 src[i] / sc.scale) as QuantizeBF16Row: the row's full groups through
// QuantizeBF16GroupsByTable, the tail by QuantizeBF16Row.
template <bool kE4M3>
HWY_NOINLINE void QuantizeBF16RowByTable(const std::uint16_t* HWY_RESTRICT src, std::size_t n,
                                         const Fp8Table& table, const BF16Shortcut& sc,
                                         unsigned char* HWY_RESTRICT dst) {
  const std::size_t full = n / BF16GroupSize() * BF16GroupSize();
  QuantizeBF16GroupsByTable<kE4M3>(&table, sc, RowGroups(src, full, dst));
  if (full < n) QuantizeBF16Row<kE4M3>(src + full, n - full, sc, dst + full);
}

// How many tokens ahead QuantizeBF16HeadRuns prefetches its inputs.
constexpr std::int64_t kAhead = 4;

// The heads of a tile of tokens, sharing one shortcut sc (and its code table, when not null): for
// each token k < tokens whose rows[k] is not null and each head h < heads, the n values (a multiple
// of BF16GroupSize()) at src + k * src_token + h * src_head (steps in elements) are written to
// rows[k] + h * head_stride. Tokens are written in order (so a row named twice keeps the later
// token's codes), each one's heads together: token-major reads are the ones prefetchers follow.
template <bool kE4M3>
HWY_NOINLINE void QuantizeBF16HeadRuns(const std::uint16_t* src, std::int64_t src_token,
                                       std::int64_t src_head, std::size_t n, std::int64_t heads,
                                       std::int64_t tokens, unsigned char* const* rows,
                                       std::int64_t head_stride, const BF16Shortcut& sc,
                                       const Fp8Table* table) {
  if (n == 0 || heads <= 0) return;
  const std::size_t group = BF16GroupSize();
  // The walk's state lives in the generator itself, so that the group loop keeps it in registers.
  QuantizeBF16GroupsByTable<kE4M3>(
      table, sc,
      [=, h = heads, k = std::int64_t{-1}, i = n, x = src, out = rows[0]](
          const std::uint16_t*& s, unsigned char*& d) KVS_MUTABLE_HWY_ATTR {
        if (i == n) {
          if (++h >= heads) {
            h = 0;
            do {
              if (++k == tokens) return false;
            } while (rows[k] == nullptr);
          }
          x = src + k * src_token + h * src_head;
          out = rows[k] + h * head_stride;
          i = 0;
        }
        s = x + i;
        d = out + i;
        // A few tokens ahead: without it the hardware prefetchers fall behind this loop when the
        // inputs come from memory.
        hwy::Prefetch(s + kAhead * src_token);
        hwy::Prefetch(s + kAhead * src_token + 32);
        i += group;
        return true;
      });
}

}  // namespace kvscatter::formats::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVSCATTER_FORMATS_FP8_TABLE_INL_H_
