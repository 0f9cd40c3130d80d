// The PagedKvWrite SIMD kernel, compiled once per target: byte copies for the
// copy format, and division by the scale plus saturating fp8 encoding for the
// fp8 formats. No threads here.
#include <cstddef>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/paged_kv_write/kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/bytes-inl.h"
#include "formats/fp8-inl.h"
#include "kvscatter/formats.h"
#include "ops/paged_kv_write/kernel.h"
#include "ops/quant_common/slots.h"

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::paged_kv_write::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using detail::HWY_NAMESPACE::CopyBytes;
using detail::HWY_NAMESPACE::StreamBytes;

using DF = hn::ScalableTag<float>;
using D8 = hn::Rebind<std::uint8_t, DF>;

// Elements widened per step from a 16-bit source (a stack buffer of floats).
constexpr std::size_t kChunk = 512;

template <bool kE4M3>
HWY_INLINE hn::Vec<D8> Encode(DF df, hn::Vec<DF> q) {
  const hn::RebindToSigned<DF> di;
  const auto code = kE4M3 ? formats::HWY_NAMESPACE::EncodeE4M3Satfinite(df, q)
                          : formats::HWY_NAMESPACE::EncodeE5M2Satfinite(df, q);
  return hn::DemoteTo(D8(), hn::BitCast(di, code));
}

// dst[i] = fp8(src[i] / scale) for n float32 values.
template <bool kE4M3>
HWY_INLINE void QuantizeF32(const float* HWY_RESTRICT src, std::size_t n, float scale,
                            unsigned char* HWY_RESTRICT dst) {
  const DF df;
  const D8 d8;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale);
  std::size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto a = hn::Div(hn::LoadU(df, src + i), vs);
    const auto b = hn::Div(hn::LoadU(df, src + i + N), vs);
    hn::StoreU(Encode<kE4M3>(df, a), d8, dst + i);
    hn::StoreU(Encode<kE4M3>(df, b), d8, dst + i + N);
  }
  for (; i < n; i += N) {
    const std::size_t count = n - i < N ? n - i : N;
    HWY_ALIGN float in[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN std::uint8_t out[HWY_MAX_BYTES / sizeof(float)];
    std::memcpy(in, src + i, count * sizeof(float));
    hn::Store(Encode<kE4M3>(df, hn::Div(hn::Load(df, in), vs)), d8, out);
    std::memcpy(dst + i, out, count);
  }
}

// dst[i] = fp8(bfloat16 src[i] / scale): the widening is a shift, done in registers.
template <bool kE4M3>
HWY_INLINE void QuantizeBF16(const std::uint16_t* HWY_RESTRICT src, std::size_t n, float scale,
                             unsigned char* HWY_RESTRICT dst) {
  const DF df;
  const D8 d8;
  const hn::Rebind<std::uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> du;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale);
  const auto widen = [&](auto v) HWY_ATTR {
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, v)));
  };
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(Encode<kE4M3>(df, hn::Div(widen(hn::LoadU(d16, src + i)), vs)), d8, dst + i);
  }
  if (i < n) {
    HWY_ALIGN std::uint16_t in[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN std::uint8_t out[HWY_MAX_BYTES / sizeof(float)];
    std::memcpy(in, src + i, (n - i) * 2);
    hn::Store(Encode<kE4M3>(df, hn::Div(widen(hn::Load(d16, in)), vs)), d8, out);
    std::memcpy(dst + i, out, n - i);
  }
}

// n elements of `dtype` at src (any address) quantized into n bytes at dst.
template <bool kE4M3>
HWY_INLINE void QuantizeRun(DType dtype, const unsigned char* src, std::size_t n, float scale,
                            unsigned char* dst) {
  const auto addr = reinterpret_cast<std::uintptr_t>(src);
  if (dtype == DType::float32 && addr % alignof(float) == 0) {
    QuantizeF32<kE4M3>(reinterpret_cast<const float*>(src), n, scale, dst);
    return;
  }
  if (dtype == DType::bfloat16 && addr % alignof(std::uint16_t) == 0) {
    QuantizeBF16<kE4M3>(reinterpret_cast<const std::uint16_t*>(src), n, scale, dst);
    return;
  }
  // float16 (widened by the formats module's batch conversion) and unaligned rows.
  HWY_ALIGN float buf[kChunk];
  HWY_ALIGN std::uint16_t codes[kChunk];
  const std::size_t es = dtype == DType::float32 ? 4 : 2;
  for (std::size_t i = 0; i < n; i += kChunk) {
    const std::size_t m = n - i < kChunk ? n - i : kChunk;
    if (dtype == DType::float32) {
      std::memcpy(buf, src + i * es, m * 4);
    } else {
      const std::uint16_t* in = reinterpret_cast<const std::uint16_t*>(src + i * es);
      if (addr % alignof(std::uint16_t) != 0) {
        std::memcpy(codes, src + i * es, m * 2);
        in = codes;
      }
      if (dtype == DType::bfloat16)
        formats::bfloat16_to_float32(in, buf, m);
      else
        formats::float16_to_float32(in, buf, m);
    }
    QuantizeF32<kE4M3>(buf, m, scale, dst + i);
  }
}

template <bool kE4M3>
HWY_INLINE void QuantizeToken(const Job& job, const Side& s, std::int64_t t, unsigned char* row) {
  const unsigned char* src = s.src + t * s.src_token;
  const auto d = static_cast<std::size_t>(job.head_size);
  if (s.merged && job.uniform_scale) {
    QuantizeRun<kE4M3>(job.dtype, src, d * static_cast<std::size_t>(job.num_heads), s.scales[0],
                       row);
    return;
  }
  for (std::int64_t h = 0; h < job.num_heads; ++h) {
    QuantizeRun<kE4M3>(job.dtype, src + h * s.src_head, d, s.scales[h], row + h * s.head_stride);
  }
}

HWY_INLINE void CopyToken(const Job& job, const Side& s, std::int64_t t, unsigned char* row) {
  const std::size_t es = job.dtype == DType::float32 ? 4 : 2;
  const unsigned char* src = s.src + t * s.src_token;
  const std::size_t head_bytes = static_cast<std::size_t>(job.head_size) * es;
  if (s.merged) {
    const std::size_t n = head_bytes * static_cast<std::size_t>(job.num_heads);
    if (job.stream)
      StreamBytes(row, src, n);
    else
      CopyBytes(row, src, n);
    return;
  }
  for (std::int64_t h = 0; h < job.num_heads; ++h) {
    CopyBytes(row + h * s.head_stride, src + h * s.src_head, head_bytes);
  }
}

void WriteTokenRange(const Job& job, std::int64_t begin, std::int64_t end) {
  const SlotSplitter split(job.block_size);
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t slot = job.slots[t];
    if (slot < 0) continue;
    const std::int64_t blk = split.block(slot), off = split.offset(slot);
    for (const Side& s : job.side) {
      unsigned char* row = s.dst + blk * s.block_stride + off * s.slot_stride;
      switch (job.format) {
        case KvCacheFormat::copy:
          CopyToken(job, s, t, row);
          break;
        case KvCacheFormat::fp8_e4m3:
          QuantizeToken<true>(job, s, t, row);
          break;
        case KvCacheFormat::fp8_e5m2:
          QuantizeToken<false>(job, s, t, row);
          break;
      }
    }
  }
  // Streaming stores are weakly ordered: drain them before the pool reports the
  // chunk done.
  if (job.stream) hwy::FlushStream();
}

}  // namespace kvscatter::detail::paged_kv_write::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvscatter::detail::paged_kv_write {

HWY_EXPORT(WriteTokenRange);

void write_token_range(const Job& job, std::int64_t begin, std::int64_t end) {
  HWY_DYNAMIC_DISPATCH(WriteTokenRange)(job, begin, end);
}

}  // namespace kvscatter::detail::paged_kv_write
#endif  // HWY_ONCE
