// The PagedCacheGather SIMD kernel, compiled once per target: entry copies, or fp8 codes decoded,
// scaled and rounded to the destination's float type. No threads here.
#include <cstddef>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/paged_cache_gather/kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/bytes-inl.h"
#include "core/vbmi.h"
#include "formats/fp8-inl.h"
#include "kvscatter/formats.h"
#include "ops/paged_cache_gather/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::paged_cache_gather::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using detail::HWY_NAMESPACE::CopyBytes;
using detail::HWY_NAMESPACE::StreamBytes;

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using DB = hn::Rebind<std::uint8_t, DF>;

// Values dequantized per step into a float buffer before the 16-bit conversions.
constexpr std::size_t kChunk = 512;

// Row k's source entry and destination row.
HWY_INLINE const unsigned char* SrcOf(const Job& job, std::int64_t k) {
  return job.src + job.rows[k].src_offset * job.src_es;
}
HWY_INLINE unsigned char* DstOf(const Job& job, std::int64_t k) {
  return job.dst + job.rows[k].dst_row * job.dst_row_bytes;
}

#if KVS_F16_IN_REGISTERS
// DequantF32 where the CPU widens float16 in one instruction: each code as float16 bits, then
// widened. e5m2 is float16's top byte; an e4m3 code s.eeee.mmm becomes s.0eeee.mmm0000000, its
// value times 2^-8 (float16's exponent bias is 8 more), subnormals included, so its product with
// scale * 2^8 is the exact product of the decoded value and the scale, rounded once as there.
// Writes the first n / (2 lanes) * (2 lanes) values and returns how many; 0 (its writes to be
// overwritten) where a code is NaN (e4m3) or infinite or NaN (e5m2), whose results want the
// canonical NaN, or the scale is not finite or times 2^8 would overflow.
template <bool kE4M3>
HWY_INLINE std::size_t DequantF32ByF16(const std::uint8_t* HWY_RESTRICT codes, std::size_t n,
                                       float scale, float* HWY_RESTRICT out) {
  if (!(scale == scale && scale < 0x1p119f && scale > -0x1p119f)) return 0;
  const DF df;
  const hn::Repartition<std::uint16_t, DF> d16;
  const hn::RebindToSigned<decltype(d16)> di16;
  const hn::Rebind<std::uint8_t, decltype(d16)> d8;
  const hn::Half<decltype(d16)> d16h;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, kE4M3 ? scale * 256.0f : scale);
  auto special = hn::Zero(di16);
  std::size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto c = hn::BitCast(di16, hn::PromoteTo(d16, hn::LoadU(d8, codes + i)));
    // Magnitudes of at least 0x7F (e4m3: NaN) or 0x7C (e5m2: infinity, NaN).
    special = hn::Or(special, hn::VecFromMask(di16, hn::Gt(hn::And(c, hn::Set(di16, 0x7F)),
                                                           hn::Set(di16, kE4M3 ? 0x7E : 0x7B))));
    auto h = hn::ShiftLeft<8>(c);
    if (kE4M3) h = hn::And(hn::ShiftRight<1>(h), hn::Set(di16, static_cast<std::int16_t>(0xBFFF)));
    const auto u = hn::BitCast(d16, h);
    hn::StoreU(hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::LowerHalf(d16h, u))), vs), df,
               out + i);
    hn::StoreU(hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::UpperHalf(d16h, u))), vs), df,
               out + i + N);
  }
  return hn::AllTrue(di16, hn::Eq(special, hn::Zero(di16))) ? i : 0;
}
#endif

// out[i] = float(code[i]) * scale, NaN as the canonical 0x7FFFFFFF (which the 16-bit encoders
// turn into their canonical 0x7FFF). Full vectors only: n is a multiple of the lane count.
template <bool kE4M3>
HWY_INLINE void DequantF32(const std::uint8_t* HWY_RESTRICT codes, std::size_t n, float scale,
                           float* HWY_RESTRICT out) {
  const DF df;
  const DU du;
  const DB d8;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale);
  const auto canonical = hn::BitCast(df, hn::Set(du, 0x7FFFFFFFu));
  std::size_t i = 0;
#if KVS_F16_IN_REGISTERS
  i = DequantF32ByF16<kE4M3>(codes, n, scale, out);
#endif
  for (; i < n; i += N) {
    const auto c = hn::PromoteTo(du, hn::LoadU(d8, codes + i));
    const auto v = kE4M3 ? formats::HWY_NAMESPACE::DecodeE4M3(df, c)
                         : formats::HWY_NAMESPACE::DecodeE5M2(df, c);
    const auto p = hn::Mul(v, vs);
    hn::StoreU(hn::IfThenElse(hn::IsNaN(p), canonical, p), df, out + i);
  }
}

// Float32 values to a 16-bit destination dtype (bfloat16 or float16).
HWY_INLINE void NarrowTo(DType dt, const float* in, std::uint16_t* out, std::size_t n) {
  if (dt == DType::bfloat16) {
    formats::float32_to_bfloat16(in, out, n);
  } else {
    formats::float32_to_float16(in, out, n);
  }
}

template <bool kE4M3>
HWY_INLINE void DequantRow(const Job& job, const std::uint8_t* src, unsigned char* dst) {
  const std::size_t N = hn::Lanes(DF());
  const auto n = static_cast<std::size_t>(job.entry);
  const auto addr = reinterpret_cast<std::uintptr_t>(dst);
  const bool f32 = job.dst_dtype == DType::float32;
  // Aligned rows are converted in place; others go through a stack buffer.
  const bool direct = addr % (f32 ? alignof(float) : alignof(std::uint16_t)) == 0;
  HWY_ALIGN float buf[kChunk];
  HWY_ALIGN std::uint16_t h[kChunk];
  HWY_ALIGN std::uint8_t tail[HWY_MAX_BYTES];
  for (std::size_t i = 0; i < n; i += kChunk) {
    const std::size_t m = n - i < kChunk ? n - i : kChunk;
    const std::size_t full = m / N * N;
    float* out = f32 && direct ? reinterpret_cast<float*>(dst) + i : buf;
    DequantF32<kE4M3>(src + i, full, job.scale, out);
    if (full < m) {  // the last codes, padded to one vector, through the stack buffer
      std::memset(tail, 0, N);
      std::memcpy(tail, src + i + full, m - full);
      DequantF32<kE4M3>(tail, N, job.scale, buf + full);
      if (out != buf) std::memcpy(out + full, buf + full, 4 * (m - full));
    }
    if (f32) {
      if (out == buf) std::memcpy(dst + 4 * i, buf, 4 * m);
      continue;
    }
    if (out != buf) continue;
    std::uint16_t* o = direct ? reinterpret_cast<std::uint16_t*>(dst) + i : h;
    NarrowTo(job.dst_dtype, buf, o, m);
    if (o == h) std::memcpy(dst + 2 * i, h, 2 * m);
  }
}

// A 16-bit destination holds one of 256 values per call (a function of the code alone), so the
// codes of every row are looked up in a table of those values, made once by DequantRow's own
// steps (256 codes are whole vectors on every target).
struct CodeTable {
  HWY_ALIGN std::uint16_t values[256];
};

template <bool kE4M3>
HWY_INLINE void FillTable(const Job& job, CodeTable& table) {
  HWY_ALIGN std::uint8_t codes[256];
  HWY_ALIGN float values[256];
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<std::uint8_t>(c);
  DequantF32<kE4M3>(codes, 256, job.scale, values);
  NarrowTo(job.dst_dtype, values, table.values, 256);
}

#if HWY_TARGET != HWY_SCALAR
// Without VBMI, AVX-512 has no 16-bit lookup into 256 entries cheaper than four word permutes (and
// narrower vectors none at all), but the table has structure: a code of exponent e and mantissa m
// decodes to 2^e times a value of m alone, and wherever the scaled product and its 16-bit rounding
// stay normal, scaling by 2^e is exact, so the result is the entry of m with e added to its
// exponent field. The codes of exponent 0 (subnormal) get entries of their own, the code's sign
// flips the result's, and the NaN codes give the canonical NaN (e5m2's largest exponent, infinities
// included, has entries of its own too). The entries are read from the exact table, and the rule is
// checked against all 256 of its values before use: a scale that breaks it anywhere (results
// outside the normal range) keeps the exact path (the word permutes on AVX-512).
template <bool kE4M3>
struct CodeRule {
  static constexpr int kMant = kE4M3 ? 3 : 2;                   // mantissa bits
  static constexpr std::uint16_t kMantMask = (1u << kMant) - 1;
  static constexpr std::uint16_t kExpMask = 0x7F & ~kMantMask;  // the exponent field in place

  // m's entries, eight 16-bit values: one 16-byte block for TableLookupBytes.
  HWY_ALIGN std::uint16_t low[8] = {}, normal[8] = {}, top[8] = {};
  int shift = 0;  // the exponent field in place, shifted by this, is e exponent steps

  std::uint16_t Apply(std::uint16_t c) const {
    const std::uint16_t t = c & kExpMask, m = c & kMantMask;
    std::uint16_t v = static_cast<std::uint16_t>(normal[m] + (t << shift));
    if (t == 0) v = low[m];
    if (!kE4M3 && t == kExpMask) v = top[m];
    v = static_cast<std::uint16_t>(v ^ ((c & 0x80) << 8));
    if (kE4M3) return (c & 0x7F) == 0x7F ? std::uint16_t{0x7FFF} : v;
    return t == kExpMask && m != 0 ? std::uint16_t{0x7FFF} : v;
  }

  // From the exact table; false where the rule does not reproduce every entry.
  bool From(const CodeTable& table, DType dst) {
    const std::uint16_t* v = table.values;
    shift = (dst == DType::bfloat16 ? 7 : 10) - kMant;
    for (std::uint16_t m = 0; m <= kMantMask; ++m) {
      low[m] = v[m];
      top[m] = v[kExpMask | m];
      normal[m] = static_cast<std::uint16_t>(v[(1u << kMant) | m] - (1u << (kMant + shift)));
    }
    for (int c = 0; c < 256; ++c) {
      if (Apply(static_cast<std::uint16_t>(c)) != v[c]) return false;
    }
    return true;
  }
};

// One vector of codes by CodeRule, each sign-extended to 16 bits (bit 15 is the code's sign);
// the tables are duplicated per 16-byte block.
template <bool kE4M3, class D, class V = hn::Vec<D>>
HWY_INLINE V RuleVector(D d16, V c, V low, V normal, V top, int shift) {
  using R = CodeRule<kE4M3>;
  const hn::Repartition<std::uint8_t, D> dbytes;
  const auto t = hn::And(c, hn::Set(d16, R::kExpMask));
  const auto m = hn::And(c, hn::Set(d16, R::kMantMask));
  // Byte indices 2m and 2m + 1 of m's 16-bit entry.
  const auto idx =
      hn::BitCast(dbytes, hn::Add(hn::Mul(m, hn::Set(d16, 0x0202)), hn::Set(d16, 0x0100)));
  const auto look = [&](V table) {
    return hn::BitCast(d16, hn::TableLookupBytes(hn::BitCast(dbytes, table), idx));
  };
  auto v = hn::Add(look(normal), hn::ShiftLeftSame(t, shift));
  v = hn::IfThenElse(hn::Eq(t, hn::Zero(d16)), look(low), v);
  const auto canonical = hn::Set(d16, 0x7FFF);
  if (kE4M3) {
    v = hn::Xor(v, hn::And(c, hn::Set(d16, 0x8000)));
    return hn::IfThenElse(hn::Eq(hn::And(c, hn::Set(d16, 0x7F)), hn::Set(d16, 0x7F)), canonical, v);
  }
  const auto top_e = hn::Eq(t, hn::Set(d16, R::kExpMask));
  v = hn::IfThenElse(top_e, look(top), v);
  v = hn::Xor(v, hn::And(c, hn::Set(d16, 0x8000)));
  return hn::IfThenElse(hn::AndNot(hn::Eq(m, hn::Zero(d16)), top_e), canonical, v);
}

// n codes -> n 16-bit values at dst (any address) by CodeRule.
template <bool kE4M3>
HWY_INLINE void RuleRow(const CodeRule<kE4M3>& rule, const std::uint8_t* HWY_RESTRICT src,
                        std::size_t n, unsigned char* HWY_RESTRICT dst) {
  const hn::ScalableTag<std::uint16_t> d16;
  const hn::Rebind<std::int8_t, decltype(d16)> d8;
  const hn::RebindToSigned<decltype(d16)> di16;
  const hn::Repartition<std::uint8_t, decltype(d16)> dbytes;
  const std::size_t N = hn::Lanes(d16);
  const auto low = hn::LoadDup128(d16, rule.low), normal = hn::LoadDup128(d16, rule.normal);
  const auto top = hn::LoadDup128(d16, rule.top);
  const auto one = [&](const std::uint8_t* s, unsigned char* o) HWY_ATTR {
    const auto codes = hn::LoadU(d8, reinterpret_cast<const std::int8_t*>(s));
    const auto c = hn::BitCast(d16, hn::PromoteTo(di16, codes));
    const auto v = RuleVector<kE4M3>(d16, c, low, normal, top, rule.shift);
    hn::StoreU(hn::BitCast(dbytes, v), dbytes, o);  // bytes: any alignment
  };
  std::size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    one(src + i, dst + 2 * i);
    one(src + i + N, dst + 2 * (i + N));
  }
  for (; i + N <= n; i += N) one(src + i, dst + 2 * i);
  if (i == n) return;
  HWY_ALIGN std::uint8_t tail_src[HWY_MAX_BYTES] = {};
  HWY_ALIGN unsigned char tail_dst[HWY_MAX_BYTES * 2];
  std::memcpy(tail_src, src + i, n - i);
  one(tail_src, tail_dst);
  std::memcpy(dst + 2 * i, tail_dst, 2 * (n - i));
}

// e4m3's CodeRule on bytes, one vector of codes per step: every term of a result's 16 bits
// splits into its low and high bytes. The exponent e = 2 x + y adds y to the entry of m (the
// code's low nibble c & 15 indexes those sums) and x, whole, to the high byte, as the sign adds
// 0x80 (both read by the high nibble). The subnormal codes (c & 0x7F below 8) add the
// difference of their entry and the normal one, read at index 8 + (c & 0x7F), and at an index
// whose top bit (a zero result) is set for every other code; the NaN codes are set to 0x7FFF by
// a mask.
// The lookups are 16-byte blocks, as are the interleaves that make the 16-bit results, so the
// codes' 8-byte halves of blocks are first reordered (on AVX2, quadwords 0, 2, 1, 3).
// The tables live as bytes and the vectors are loaded where the rows are walked: SVE vectors
// are sizeless and cannot be members.
class ByteRule {
 public:
  explicit ByteRule(const CodeRule<true>& rule) {
    using R = CodeRule<true>;
    // The exponent field starts at bit kMant + shift of a result, so x at bit x_shift of its
    // high byte; the high nibble is the sign and x.
    const int x_shift = rule.shift + R::kMant + 1 - 8;
    for (int i = 0; i < 16; ++i) {
      const std::uint16_t m = i & R::kMantMask, y = static_cast<std::uint16_t>(i >> R::kMant);
      const auto base = static_cast<std::uint16_t>(rule.normal[m] + (y << (R::kMant + rule.shift)));
      t_[0][i] = static_cast<std::uint8_t>(base);
      t_[1][i] = static_cast<std::uint8_t>(base >> 8);
      t_[2][i] = static_cast<std::uint8_t>(((i & 7) << x_shift) + (i & 8) * 16);
      // Subnormal code m sits at index 8 + m; its normal entry is the base of y = 0.
      const std::uint16_t own = rule.low[i & 7], normal = rule.normal[i & 7];
      t_[3][i] = i < 8 ? 0 : static_cast<std::uint8_t>((own & 0xFF) - (normal & 0xFF));
      t_[4][i] = i < 8 ? 0 : static_cast<std::uint8_t>((own >> 8) - (normal >> 8));
    }
    // Quadword 2 k + h of the reordered codes is quadword k of the lower (h = 0) or upper half.
    const std::size_t n64 = hn::Lanes(hn::ScalableTag<std::uint64_t>());
    for (std::size_t i = 0; i < n64; ++i) order_[i] = i / 2 + (i % 2) * (n64 / 2);
  }

  // Rows [begin, end) of job, one vector of codes per step.
  HWY_INLINE void Rows(const Job& job, std::int64_t begin, std::int64_t end) const {
    const hn::ScalableTag<std::uint8_t> d8;
    const hn::Repartition<std::uint16_t, decltype(d8)> d16;
    const hn::Repartition<std::uint64_t, decltype(d8)> d64;
    const auto lo = hn::LoadDup128(d8, t_[0]), hi = hn::LoadDup128(d8, t_[1]);
    const auto high_nibble = hn::LoadDup128(d8, t_[2]);
    const auto sub_lo = hn::LoadDup128(d8, t_[3]), sub_hi = hn::LoadDup128(d8, t_[4]);
    const auto order = hn::SetTableIndices(d64, order_);
    // One vector of codes at s -> as many results at o (any address).
    const auto step = [&](const std::uint8_t* s, unsigned char* o) HWY_ATTR {
      const auto nibble = hn::Set(d8, 15), magnitude = hn::Set(d8, 0x7F);
      const auto c =
          hn::BitCast(d8, hn::TableLookupLanes(hn::BitCast(d64, hn::LoadU(d8, s)), order));
      const auto low_nibble = hn::And(c, nibble);
      const auto mag = hn::And(c, magnitude);
      // (mag + 0x78) & 0x8F: 8 + mag below 8, else an index with the top bit set (zero); the
      // and keeps indices below 16 for the targets whose byte lookups read more than 4 bits.
      const auto sub = hn::And(hn::Add(mag, hn::Set(d8, 0x78)), hn::Set(d8, 0x8F));
      const auto nan = hn::VecFromMask(d8, hn::Eq(mag, magnitude));
      const auto top = hn::And(hn::BitCast(d8, hn::ShiftRight<4>(hn::BitCast(d16, c))), nibble);
      auto l = hn::Add(hn::TableLookupBytes(lo, low_nibble), hn::TableLookupBytesOr0(sub_lo, sub));
      auto h = hn::Add(hn::TableLookupBytes(hi, low_nibble), hn::TableLookupBytesOr0(sub_hi, sub));
      h = hn::Add(h, hn::TableLookupBytes(high_nibble, top));
      l = hn::Or(l, nan);
      h = hn::Xor(hn::Or(h, nan), hn::And(nan, hn::Set(d8, 0x80)));
      hn::StoreU(hn::InterleaveLower(d8, l, h), d8, o);
      hn::StoreU(hn::InterleaveUpper(d8, l, h), d8, o + hn::Lanes(d8));
    };
    const std::size_t N = hn::Lanes(d8);
    const auto n = static_cast<std::size_t>(job.entry);
    for (std::int64_t k = begin; k < end; ++k) {
      const unsigned char* src = SrcOf(job, k);
      unsigned char* dst = DstOf(job, k);
      std::size_t i = 0;
      for (; i + N <= n; i += N) step(src + i, dst + 2 * i);
      if (i == n) continue;
      HWY_ALIGN std::uint8_t tail_src[HWY_MAX_BYTES] = {};
      HWY_ALIGN unsigned char tail_dst[2 * HWY_MAX_BYTES];
      std::memcpy(tail_src, src + i, n - i);
      step(tail_src, tail_dst);
      std::memcpy(dst + 2 * i, tail_dst, 2 * (n - i));
    }
  }

 private:
  HWY_ALIGN std::uint8_t t_[5][16];
  HWY_ALIGN std::uint64_t order_[HWY_MAX_BYTES / 8];
};

// Rows [begin, end) by CodeRule, e4m3 codes by ByteRule and e5m2 codes by RuleRow; false
// (nothing written) where the rule does not hold for the table.
template <bool kE4M3>
HWY_INLINE bool GatherByRule(const Job& job, const CodeTable& table, std::int64_t begin,
                             std::int64_t end) {
  CodeRule<kE4M3> rule;
  if (!rule.From(table, job.dst_dtype)) return false;
  if constexpr (kE4M3) {
    ByteRule(rule).Rows(job, begin, end);
  } else {
    for (std::int64_t k = begin; k < end; ++k) {
      RuleRow(rule, SrcOf(job, k), static_cast<std::size_t>(job.entry), DstOf(job, k));
    }
  }
  return true;
}

#endif  // HWY_TARGET != HWY_SCALAR

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// n codes -> n 16-bit values at dst (any address), 32 per step: vpermi2w reads 64 entries of
// two registers, so four of them cover the table and bits 6 and 7 of the code pick the result.
HWY_INLINE void LookupRow(const CodeTable& table, const std::uint8_t* src, std::size_t n,
                          unsigned char* dst) {
  __m512i t[8];
  for (int k = 0; k < 8; ++k) t[k] = _mm512_load_si512(table.values + 32 * k);
  const __m512i bit6 = _mm512_set1_epi16(0x40), bit7 = _mm512_set1_epi16(0x80);
  for (std::size_t i = 0; i < n; i += 32) {
    const __mmask32 live = n - i >= 32 ? ~__mmask32{0} : (__mmask32{1} << (n - i)) - 1;
    const __m512i idx = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(live, src + i));
    const __m512i r0 = _mm512_permutex2var_epi16(t[0], idx, t[1]);
    const __m512i r1 = _mm512_permutex2var_epi16(t[2], idx, t[3]);
    const __m512i r2 = _mm512_permutex2var_epi16(t[4], idx, t[5]);
    const __m512i r3 = _mm512_permutex2var_epi16(t[6], idx, t[7]);
    const __mmask32 m6 = _mm512_test_epi16_mask(idx, bit6);
    const __m512i lo = _mm512_mask_mov_epi16(r0, m6, r1);
    const __m512i hi = _mm512_mask_mov_epi16(r2, m6, r3);
    const __m512i v = _mm512_mask_mov_epi16(lo, _mm512_test_epi16_mask(idx, bit7), hi);
    _mm512_mask_storeu_epi16(dst + 2 * i, live, v);
  }
}

// With VBMI's byte permutes the table is two tables of the results' low and high bytes, and two
// vpermt2b interleave them into the 16-bit results, 64 codes per step. The high bytes are two
// vpermi2b (the code's low seven bits) and a blend (its top bit). The low bytes are one: a
// code's sign flips only the sign of its result (or gives the same canonical NaN), so codes c
// and c | 0x80 share theirs; ByteLookupRows checks that per call. It runs where vbmi_usable()
// (core/vbmi.h); elsewhere e4m3 goes by CodeRule where it holds, else by the word permutes above.

// False (nothing written) where the low bytes of the table are not shared as above.
KVS_VBMI_ATTR HWY_NOINLINE bool ByteLookupRows(const Job& job, const CodeTable& table,
                                               std::int64_t begin, std::int64_t end) {
  HWY_ALIGN std::uint8_t bytes[2][256];
  for (int c = 0; c < 256; ++c) {
    bytes[0][c] = static_cast<std::uint8_t>(table.values[c]);
    bytes[1][c] = static_cast<std::uint8_t>((table.values[c] >> 8));
  }
  if (std::memcmp(bytes[0], bytes[0] + 128, 128) != 0) return false;
  __m512i lo[2], hi[4];
  for (int k = 0; k < 4; ++k) hi[k] = _mm512_load_si512(bytes[1] + 64 * k);
  for (int k = 0; k < 2; ++k) lo[k] = _mm512_load_si512(bytes[0] + 64 * k);
  // Byte j of the first output is byte j / 2 of the low bytes (j even) or of the high bytes
  // (j odd, index bit 6 set); the second output is the same for bytes 32 to 63.
  HWY_ALIGN std::uint8_t inter[2][64];
  for (int j = 0; j < 64; ++j) {
    inter[0][j] = static_cast<std::uint8_t>(j / 2 + (j % 2) * 64);
    inter[1][j] = static_cast<std::uint8_t>(32 + j / 2 + (j % 2) * 64);
  }
  const __m512i inter0 = _mm512_load_si512(inter[0]), inter1 = _mm512_load_si512(inter[1]);
  const auto Look = [&](__m512i c, __m512i& v0, __m512i& v1) KVS_VBMI_ATTR {
    const __mmask64 top = _mm512_movepi8_mask(c);
    const __m512i l = _mm512_permutex2var_epi8(lo[0], c, lo[1]);
    const __m512i h = _mm512_mask_mov_epi8(_mm512_permutex2var_epi8(hi[0], c, hi[1]), top,
                                           _mm512_permutex2var_epi8(hi[2], c, hi[3]));
    v0 = _mm512_permutex2var_epi8(l, inter0, h);
    v1 = _mm512_permutex2var_epi8(l, inter1, h);
  };
  const auto n = static_cast<std::size_t>(job.entry);
  for (std::int64_t k = begin; k < end; ++k) {
    const unsigned char* src = SrcOf(job, k);
    unsigned char* dst = DstOf(job, k);
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      __m512i v0, v1;
      Look(_mm512_loadu_si512(src + i), v0, v1);
      _mm512_storeu_si512(dst + 2 * i, v0);
      _mm512_storeu_si512(dst + 2 * i + 64, v1);
    }
    if (i == n) continue;
    const auto left = static_cast<unsigned>(n - i);
    __m512i v0, v1;
    Look(_mm512_maskz_loadu_epi8((__mmask64{1} << left) - 1, src + i), v0, v1);
    const __mmask32 m0 = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
    const __mmask32 m1 = left > 32 ? (__mmask32{1} << (left - 32)) - 1 : 0;
    _mm512_mask_storeu_epi16(dst + 2 * i, m0, v0);
    _mm512_mask_storeu_epi16(dst + 2 * i + 64, m1, v1);
  }
  return true;
}

template <bool kE4M3>
HWY_INLINE bool GatherByTable(const Job& job, std::int64_t begin, std::int64_t end) {
  if (job.dst_dtype == DType::float32) return false;
  CodeTable table;
  FillTable<kE4M3>(job, table);
  if (vbmi_usable() && ByteLookupRows(job, table, begin, end)) return true;
  if constexpr (kE4M3) {
    if (GatherByRule<true>(job, table, begin, end)) return true;
  }
  for (std::int64_t k = begin; k < end; ++k) {
    LookupRow(table, SrcOf(job, k), static_cast<std::size_t>(job.entry), DstOf(job, k));
  }
  return true;
}
#elif HWY_TARGET != HWY_SCALAR
template <bool kE4M3>
HWY_INLINE bool GatherByTable(const Job& job, std::int64_t begin, std::int64_t end) {
  if (job.dst_dtype == DType::float32) return false;
  CodeTable table;
  FillTable<kE4M3>(job, table);
  return GatherByRule<kE4M3>(job, table, begin, end);
}
#else
template <bool kE4M3>
HWY_INLINE bool GatherByTable(const Job&, std::int64_t, std::int64_t) {
  return false;
}
#endif

void GatherRows(const Job& job, std::int64_t begin, std::int64_t end) {
  const auto entry_bytes = static_cast<std::size_t>(job.entry * job.src_es);
  if (job.format == KvCacheFormat::fp8_e4m3 && GatherByTable<true>(job, begin, end)) return;
  if (job.format == KvCacheFormat::fp8_e5m2 && GatherByTable<false>(job, begin, end)) return;
  for (std::int64_t k = begin; k < end; ++k) {
    const unsigned char* src = SrcOf(job, k);
    unsigned char* dst = DstOf(job, k);
    switch (job.format) {
      case KvCacheFormat::copy:
        if (job.stream)
          StreamBytes(dst, src, entry_bytes);
        else
          CopyBytes(dst, src, entry_bytes);
        break;
      case KvCacheFormat::fp8_e4m3:
        DequantRow<true>(job, src, dst);
        break;
      case KvCacheFormat::fp8_e5m2:
        DequantRow<false>(job, src, dst);
        break;
    }
  }
  // Streaming stores are weakly ordered: drain them before the pool reports the chunk done.
  if (job.stream) hwy::FlushStream();
}

}  // namespace kvscatter::detail::paged_cache_gather::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail::paged_cache_gather {

HWY_EXPORT(GatherRows);

void gather_rows(const Job& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(GatherRows)(job, begin, end);
}

}  // namespace kvscatter::detail::paged_cache_gather
#endif  // HWY_ONCE
