// Optimized CPU kernel of KvCompressEpilog: Highway SIMD with runtime dispatch, one row per
// token. Group amax is an integer max over (bf16 bits & 0x7FFF) (ordered like the magnitudes,
// NaN above infinity); scales are computed per group in scalar f32 exactly as the reference
// does; the e4m3, e2m1 and HiFloat8 encoders are branch-free lane versions of the scalar rules
// and are bit-identical to them (tests sweep them against kvscatter::formats).
#include <algorithm>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kv_compress_epilog/cpu.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kvscatter/formats.h"
#include "ops/kv_compress_epilog/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 lanes so that one vector never spans two groups of 16 (mode 2, gs = 16).
using DF = hn::CappedTag<float, 16>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using DU16 = hn::Rebind<std::uint16_t, DF>;  // bf16 inputs, one per f32 lane
using DU8 = hn::Rebind<std::uint8_t, DF>;    // one output byte per f32 lane
using DA = hn::CappedTag<std::uint16_t, 16>;   // amax over raw bf16 bits
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;

HWY_INLINE VF LoadBf16(const std::uint16_t* p) {
  const DF df;
  const DU du;
  const DU16 d16;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}

// Largest (bits & 0x7FFF) over count bf16 values; > 0x7F80 means the group holds a NaN.
HWY_INLINE std::uint32_t AmaxBits(const std::uint16_t* x, std::int64_t count) {
  const DA da;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(da));
  const auto mag = hn::Set(da, std::uint16_t{0x7FFF});
  auto m = hn::Zero(da);
  for (std::int64_t i = 0; i < count; i += L) m = hn::Max(m, hn::And(hn::LoadU(da, x + i), mag));
  return hn::GetLane(hn::MaxOfLanes(da, m));
}

// e4m3fn code of clamp(q, -448, 448) with RNE; NaN lanes give 0x7F.
HWY_INLINE VU EncodeE4M3(VF q) {
  const DF df;
  const DU du;
  const DI di;
  const VU sign = hn::And(hn::ShiftRight<24>(hn::BitCast(du, q)), hn::Set(du, 0x80u));
  const VF c = hn::Min(hn::Max(q, hn::Set(df, -448.0f)), hn::Set(df, 448.0f));
  const VU a = hn::And(hn::BitCast(du, c), hn::Set(du, 0x7FFFFFFFu));
  // Normal range: round the f32 mantissa to 3 bits (nearest even) and rebias 127 -> 7.
  const VU odd = hn::And(hn::ShiftRight<20>(a), hn::Set(du, 1u));
  const VU normal = hn::Sub(hn::ShiftRight<20>(hn::Add(a, hn::Add(hn::Set(du, 0x7FFFFu), odd))),
                            hn::Set(du, 960u));
  // Below 2^-6: multiples of 2^-9, i.e. nearest-even integer of |q| * 512 (exact scaling).
  const VU sub = hn::BitCast(
      du, hn::ConvertTo(di, hn::Round(hn::Mul(hn::BitCast(df, a), hn::Set(df, 512.0f)))));
  const auto is_sub = hn::RebindMask(du, hn::Lt(hn::BitCast(di, a), hn::Set(di, 0x3C800000)));
  const VU code = hn::Or(hn::IfThenElse(is_sub, sub, normal), sign);
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(q)), hn::Set(du, 0x7Fu), code);
}

// e2m1 nibble of clamp(bf16_RNE(p), -6, 6) with RNE; NaN lanes give 0.
HWY_INLINE VU EncodeE2M1(VF p) {
  const DF df;
  const DU du;
  const DI di;
  const VU b = hn::BitCast(du, p);
  const VU odd16 = hn::And(hn::ShiftRight<16>(b), hn::Set(du, 1u));
  const VU r = hn::And(hn::Add(b, hn::Add(hn::Set(du, 0x7FFFu), odd16)), hn::Set(du, 0xFFFF0000u));
  const VU sign = hn::ShiftLeft<3>(hn::ShiftRight<31>(r));
  const VF af = hn::Min(hn::BitCast(df, hn::And(r, hn::Set(du, 0x7FFFFFFFu))), hn::Set(df, 6.0f));
  const VU a = hn::BitCast(du, af);
  // [0, 1): steps of 0.5 -> nearest-even integer of 2|x|; [1, 6]: 1 mantissa bit, bias 1.
  const VU small = hn::BitCast(du, hn::ConvertTo(di, hn::Round(hn::Add(af, af))));
  const VU odd = hn::And(hn::ShiftRight<22>(a), hn::Set(du, 1u));
  const VU big = hn::Sub(hn::ShiftRight<22>(hn::Add(a, hn::Add(hn::Set(du, 0x1FFFFFu), odd))),
                         hn::Set(du, 252u));
  const VU code = hn::Or(hn::IfThenElse(hn::RebindMask(du, hn::Lt(af, hn::Set(df, 1.0f))), small, big),
                         sign);
  return hn::IfThenZeroElse(hn::RebindMask(du, hn::IsNaN(p)), code);
}

// HiFloat8 code, round half away from zero, saturating: the lane form of spec section 2.7.
HWY_INLINE VU EncodeHiF8(VF x) {
  const DU du;
  const DI di;
  using VI = hn::Vec<DI>;
  const VU b = hn::BitCast(du, x);
  const VU a = hn::And(b, hn::Set(du, 0x7FFFFFFFu));
  const VU s = hn::And(hn::ShiftRight<24>(b), hn::Set(du, 0x80u));
  const VI ai = hn::BitCast(di, a);
  const VI ae = hn::Abs(hn::Sub(hn::ShiftRight<23>(ai), hn::Set(di, 127)));
  // Mantissa bits from the input exponent: 3 (|e| <= 3), 2 (<= 7), 1 (<= 15), 0 (denormals);
  // half = 2^(22 - mb) is the rounding increment, 2*half - 1 the bits cleared.
  const auto le3 = hn::RebindMask(du, hn::Lt(ae, hn::Set(di, 4)));
  const auto le7 = hn::RebindMask(du, hn::Lt(ae, hn::Set(di, 8)));
  const auto le15 = hn::RebindMask(du, hn::Lt(ae, hn::Set(di, 16)));
  const VU half = hn::IfThenElse(
      le3, hn::Set(du, 1u << 19),
      hn::IfThenElse(le7, hn::Set(du, 1u << 20),
                     hn::IfThenElse(le15, hn::Set(du, 1u << 21), hn::Set(du, 1u << 22))));
  const VU r = hn::AndNot(hn::Sub(hn::Add(half, half), hn::Set(du, 1u)), hn::Add(a, half));
  const VI e2 = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(r)), hn::Set(di, 127));
  const VI ae2 = hn::Abs(e2);
  const VU ae2u = hn::BitCast(du, ae2);
  // After a carry into the next binade the mantissa is zero, so the field width can follow
  // the rounded exponent.
  const VU m3 = hn::And(hn::ShiftRight<20>(r), hn::Set(du, 7u));
  const VU m2 = hn::And(hn::ShiftRight<21>(r), hn::Set(du, 3u));
  const VU m1 = hn::And(hn::ShiftRight<22>(r), hn::Set(du, 1u));
  const VU neg = hn::BitCast(du, hn::ShiftRight<31>(hn::BitCast(du, e2)));  // 1 if e2 < 0
  const VU n4 = hn::ShiftLeft<4>(neg);
  const VU c0 = hn::Or(hn::Set(du, 0x08u), m3);
  const VU c1 = hn::Or(hn::Or(hn::Set(du, 0x10u), hn::ShiftLeft<3>(neg)), m3);
  const VU c23 = hn::Or(hn::Or(hn::Set(du, 0x20u), n4),
                        hn::Or(hn::ShiftLeft<3>(hn::Sub(ae2u, hn::Set(du, 2u))), m3));
  const VU c47 = hn::Or(hn::Or(hn::Set(du, 0x40u), n4),
                        hn::Or(hn::ShiftLeft<2>(hn::Sub(ae2u, hn::Set(du, 4u))), m2));
  const VU c815 = hn::Or(hn::Or(hn::Set(du, 0x60u), n4),
                         hn::Or(hn::ShiftLeft<1>(hn::Sub(ae2u, hn::Set(du, 8u))), m1));
  VU c = hn::IfThenElse(hn::RebindMask(du, hn::Lt(ae2, hn::Set(di, 8))), c47, c815);
  c = hn::IfThenElse(hn::RebindMask(du, hn::Lt(ae2, hn::Set(di, 4))), c23, c);
  c = hn::IfThenElse(hn::RebindMask(du, hn::Eq(ae2, hn::Set(di, 1))), c1, c);
  c = hn::IfThenElse(hn::RebindMask(du, hn::Eq(ae2, hn::Set(di, 0))), c0, c);
  // Denormals 2^(c - 23) for e2 in [-23, -16] (2^-23 itself rounds away to code 1).
  const VU den = hn::BitCast(du, hn::Max(hn::Add(e2, hn::Set(di, 23)), hn::Set(di, 1)));
  c = hn::IfThenElse(hn::RebindMask(du, hn::Lt(e2, hn::Set(di, -15))), den, c);
  // Saturation: rounded magnitude >= 1.25 * 2^15 (or any e >= 16, infinities included).
  const auto ovf = hn::Or(hn::Gt(e2, hn::Set(di, 15)),
                          hn::And(hn::Eq(e2, hn::Set(di, 15)),
                                  hn::RebindMask(di, hn::Ne(m1, hn::Zero(du)))));
  c = hn::IfThenElse(hn::RebindMask(du, ovf), hn::Set(du, 0x6Eu), c);
  c = hn::Or(c, s);
  // |x| < 2^-23 rounds to the only zero (no -0); NaN saturates to 0x00.
  const auto zero = hn::Or(hn::Lt(ai, hn::Set(di, 0x34000000)), hn::Gt(ai, hn::Set(di, 0x7F800000)));
  return hn::IfThenZeroElse(hn::RebindMask(du, zero), c);
}

HWY_INLINE void StoreBytes(VU code, std::uint8_t* out) {
  const DU8 d8;
  hn::StoreU(hn::TruncateTo(d8, code), d8, out);
}

#if HWY_TARGET != HWY_SCALAR
// Two adjacent lanes -> one byte, the even element in the low nibble.
HWY_INLINE void StorePacked(VU code, std::uint8_t* out) {
  const hn::Repartition<std::uint64_t, DU> d64;
  const hn::Rebind<std::uint8_t, decltype(d64)> dp;
  const auto w = hn::BitCast(d64, code);
  hn::StoreU(hn::TruncateTo(dp, hn::Or(w, hn::ShiftRight<28>(w))), dp, out);
}
#endif

HWY_INLINE void PutBf16(std::uint8_t* out, std::uint16_t code) {
  out[0] = static_cast<std::uint8_t>(code & 0xFF);
  out[1] = static_cast<std::uint8_t>(code >> 8);
}

template <bool kMode0, bool kRoundScale>
void Fp8Row(const std::uint16_t* HWY_RESTRICT x, std::uint8_t* HWY_RESTRICT out, std::int64_t n,
            std::int64_t groups) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const float C448 = f32_from_bits(kC448Bits);
  const float EPS = f32_from_bits(kEpsBits);
  std::memcpy(out, x + n, 128);  // rope: raw little-endian bf16
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::uint16_t* xg = x + 64 * g;
    std::uint8_t* data = out + 128 + 64 * g;
    std::uint8_t* scale = kMode0 ? out + 128 + n + 2 * g : out + 128 + n + g;
    const std::uint32_t amax_bits = AmaxBits(xg, 64);
    if (amax_bits > 0x7F80u) {
      std::memset(data, 0x7F, 64);
      if (kMode0) {
        PutBf16(scale, kBf16CanonicalNaN);
      } else {
        scale[0] = 0xFF;
      }
      continue;
    }
    float s = std::max(f32_from_bits(amax_bits << 16), EPS) * C448;
    if (kRoundScale) {
      std::uint32_t u = bits_of(s);
      std::uint32_t e = u >> 23;
      if (u & 0x7FFFFFu) e += 1;
      s = f32_from_bits(e << 23);
      // s is a power of two (or +inf), so 1/s is exact and v * (1/s) == v / s bit for bit.
      const VF inv = hn::Set(df, 1.0f / s);
      for (std::int64_t k = 0; k < 64; k += L) {
        StoreBytes(EncodeE4M3(hn::Mul(LoadBf16(xg + k), inv)), data + k);
      }
    } else {
      const VF vs = hn::Set(df, s);
      for (std::int64_t k = 0; k < 64; k += L) {
        StoreBytes(EncodeE4M3(hn::Div(LoadBf16(xg + k), vs)), data + k);
      }
    }
    if (kMode0) {
      PutBf16(scale, formats::encode_bfloat16(s));
    } else {
      scale[0] = static_cast<std::uint8_t>((bits_of(s) >> 23) & 0xFF);
    }
  }
}

void Hif8Fp4Row(const std::uint16_t* HWY_RESTRICT x, std::uint8_t* HWY_RESTRICT out,
                std::int64_t n, std::int64_t gs, std::int64_t groups, float x_scale) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const float C6 = f32_from_bits(kC6Bits);
  const VF xs = hn::Set(df, x_scale);
  for (std::int64_t j = 0; j < 64; j += L) {
    StoreBytes(EncodeHiF8(hn::Mul(LoadBf16(x + n + j), xs)), out + j);
  }
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::uint16_t* xg = x + gs * g;
    std::uint8_t* data = out + 64 + gs * g / 2;
    std::uint8_t* scale = out + 64 + n / 2 + 2 * g;
    const std::uint32_t amax_bits = AmaxBits(xg, gs);
    if (amax_bits > 0x7F80u) {
      std::memset(data, 0, static_cast<std::size_t>(gs / 2));
      PutBf16(scale, kBf16CanonicalNaN);
      continue;
    }
    const float amax = f32_from_bits(amax_bits << 16);
    const float inv = amax != 0.0f ? 6.0f / amax : 0.0f;
    const std::uint16_t inv_code = formats::encode_bfloat16(inv);
    PutBf16(scale, formats::encode_bfloat16(amax * C6));
    const VF vinv = hn::Set(df, f32_from_bits(static_cast<std::uint32_t>(inv_code) << 16));
#if HWY_TARGET == HWY_SCALAR  // one lane: pack pairs by hand
    for (std::int64_t i = 0; i < gs; i += 2) {
      const std::uint32_t lo = hn::GetLane(EncodeE2M1(hn::Mul(LoadBf16(xg + i), vinv)));
      const std::uint32_t hi = hn::GetLane(EncodeE2M1(hn::Mul(LoadBf16(xg + i + 1), vinv)));
      data[i / 2] = static_cast<std::uint8_t>(lo | hi << 4);
    }
#else
    for (std::int64_t i = 0; i < gs; i += L) {
      StorePacked(EncodeE2M1(hn::Mul(LoadBf16(xg + i), vinv)), data + i / 2);
    }
#endif
  }
}

void QuantizeRows(const KvCompressEpilogPlan& p, const std::int64_t* slots, std::int64_t begin,
                  std::int64_t end) {
  const auto* x = static_cast<const std::uint16_t*>(p.x.data);
  auto* cache = static_cast<std::uint8_t*>(p.cache.data);
  const std::int64_t n = p.d - kRopeDim;
  const bool x_rows_dense = p.x.is_contiguous();
  const std::size_t pad = static_cast<std::size_t>(p.row_bytes - p.payload_bytes);
  for (std::int64_t r = begin; r < end; ++r) {
    const std::int64_t slot = slots[r];
    if (slot == -1) continue;
    const std::uint16_t* xr = x + (x_rows_dense ? r * p.d : x_row_offset(p.x, r));
    std::uint8_t* out = cache + cache_row_offset(p, slot);
    switch (p.quant_mode) {
      case QuantMode::fp8_bf16:
        if (p.round_scale) {
          Fp8Row<true, true>(xr, out, n, p.num_groups);
        } else {
          Fp8Row<true, false>(xr, out, n, p.num_groups);
        }
        break;
      case QuantMode::fp8_e8m0:
        if (p.round_scale) {
          Fp8Row<false, true>(xr, out, n, p.num_groups);
        } else {
          Fp8Row<false, false>(xr, out, n, p.num_groups);
        }
        break;
      case QuantMode::hifloat8_fp4:
        Hif8Fp4Row(xr, out, n, p.group_size, p.num_groups, p.x_scale);
        break;
    }
    if (pad) std::memset(out + p.payload_bytes, 0, pad);
  }
}

// Batch forms of the lane encoders; n need not be a multiple of the vector length.
template <class Encode>
void EncodeBatch(const float* in, std::uint8_t* out, std::size_t n, Encode encode) {
  const DF df;
  const std::size_t L = hn::Lanes(df);
  alignas(64) float tail_in[16] = {};
  alignas(64) std::uint8_t tail_out[16] = {};
  std::size_t i = 0;
  for (; i + L <= n; i += L) StoreBytes(encode(hn::LoadU(df, in + i)), out + i);
  if (i < n) {
    std::memcpy(tail_in, in + i, (n - i) * sizeof(float));
    StoreBytes(encode(hn::LoadU(df, tail_in)), tail_out);
    std::memcpy(out + i, tail_out, n - i);
  }
}

void EncodeE4M3Batch(const float* q, std::uint8_t* out, std::size_t n) {
  EncodeBatch(q, out, n, [](VF v) { return EncodeE4M3(v); });
}
void EncodeE2M1Batch(const float* p, std::uint8_t* out, std::size_t n) {
  EncodeBatch(p, out, n, [](VF v) { return EncodeE2M1(v); });
}
void EncodeHiF8Batch(const float* x, std::uint8_t* out, std::size_t n) {
  EncodeBatch(x, out, n, [](VF v) { return EncodeHiF8(v); });
}

}  // namespace HWY_NAMESPACE
}  // namespace kvscatter::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail {

HWY_EXPORT(QuantizeRows);
HWY_EXPORT(EncodeE4M3Batch);
HWY_EXPORT(EncodeE2M1Batch);
HWY_EXPORT(EncodeHiF8Batch);

void kv_compress_epilog_cpu(const KvCompressEpilogPlan& p, const std::int64_t* slots,
                            std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(QuantizeRows)(p, slots, begin, end);
}

void simd_encode_e4m3_clamped(const float* q, std::uint8_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(EncodeE4M3Batch)(q, out, n);
}
void simd_encode_e2m1_from_product(const float* p, std::uint8_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(EncodeE2M1Batch)(p, out, n);
}
void simd_encode_hifloat8_sat(const float* x, std::uint8_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(EncodeHiF8Batch)(x, out, n);
}

}  // namespace kvscatter::detail
#endif  // HWY_ONCE
