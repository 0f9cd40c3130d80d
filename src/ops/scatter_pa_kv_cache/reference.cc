// reference::execute(plan) of scatter_pa_kv_cache, the oracle: element-by-element loops over
// every view's full strides, written from the rules of docs/operators/scatter_pa_kv_cache.md.
// Slow on purpose; the tests compare the optimized kernel against it byte for byte.
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/index.h"
#include "core/unaligned.h"
#include "kvscatter/formats.h"
#include "ops/scatter_pa_kv_cache/internal.h"

namespace kvscatter::reference {
namespace {

using detail::IndexReader;
using detail::load_as;
using detail::store_as;
using detail::scatter::CheckedData;

struct Elem {
  const TensorView* t;
  // Byte address of the element at the given multi-index (elements, strided).
  template <class... I>
  unsigned char* at(I... idx) const {
    const std::int64_t ix[] = {idx...};
    std::int64_t off = 0;
    for (std::size_t i = 0; i < sizeof...(I); ++i) off += ix[i] * t->strides[i];
    return static_cast<unsigned char*>(t->data) +
           off * static_cast<std::int64_t>(t->element_size());
  }
};

void copy_elem(unsigned char* dst, const unsigned char* src, std::size_t es) {
  std::memcpy(dst, src, es);
}

// ---- Rope mean ----------------------------------------------------------------------------

// Floating types: float32 sum in token order from +0.0 (`x + acc`), one division, rounded back.
void mean_float(DType d, const std::vector<const unsigned char*>& srcs, unsigned char* dst) {
  const auto w = static_cast<float>(srcs.size());
  float acc = 0.0f;
  if (d == DType::float32) {
    for (const unsigned char* s : srcs) acc = load_as<float>(s) + acc;
    store_as<float>(dst, acc / w);
    return;
  }
  for (const unsigned char* s : srcs) {
    const std::uint32_t code = dtype_size(d) == 2 ? load_as<std::uint16_t>(s) : s[0];
    acc = formats::decode(d, code) + acc;
  }
  const float q = acc / w;
  switch (d) {
    case DType::float16:
      store_as<std::uint16_t>(dst, formats::encode_float16(q));
      break;
    case DType::bfloat16:
      store_as<std::uint16_t>(dst, formats::encode_bfloat16(q));
      break;
    case DType::float8_e5m2:
      store_as<std::uint8_t>(dst, formats::encode_float8_e5m2(q));
      break;
    case DType::float8_e4m3fn:
      store_as<std::uint8_t>(dst, formats::encode_float8_e4m3fn(q));
      break;
    default:  // hifloat8: round half away from zero, infinities and NaN kept
      store_as<std::uint8_t>(dst, formats::encode_hifloat8(q, /*saturate=*/false));
      break;
  }
}

// Signed integers: wrapping int32 sum, division truncating toward zero, low bits kept.
void mean_signed(DType d, const std::vector<const unsigned char*>& srcs, unsigned char* dst) {
  std::uint32_t acc = 0;
  for (const unsigned char* s : srcs) {
    const std::int32_t x = d == DType::int8    ? load_as<std::int8_t>(s)
                           : d == DType::int16 ? load_as<std::int16_t>(s)
                                               : load_as<std::int32_t>(s);
    acc += static_cast<std::uint32_t>(x);
  }
  const std::int32_t q = static_cast<std::int32_t>(acc) / static_cast<std::int32_t>(srcs.size());
  if (d == DType::int8)
    store_as<std::int8_t>(dst, static_cast<std::int8_t>(q));
  else if (d == DType::int16)
    store_as<std::int16_t>(dst, static_cast<std::int16_t>(q));
  else
    store_as<std::int32_t>(dst, q);
}

// Unsigned integers: wrapping uint32 sum, division, low bits kept.
void mean_unsigned(DType d, const std::vector<const unsigned char*>& srcs, unsigned char* dst) {
  std::uint32_t acc = 0;
  for (const unsigned char* s : srcs) {
    acc += d == DType::uint8    ? load_as<std::uint8_t>(s)
           : d == DType::uint16 ? load_as<std::uint16_t>(s)
                                : load_as<std::uint32_t>(s);
  }
  const std::uint32_t q = acc / static_cast<std::uint32_t>(srcs.size());
  if (d == DType::uint8)
    store_as<std::uint8_t>(dst, static_cast<std::uint8_t>(q));
  else if (d == DType::uint16)
    store_as<std::uint16_t>(dst, static_cast<std::uint16_t>(q));
  else
    store_as<std::uint32_t>(dst, q);
}

// Mean of the elements at srcs[0..w-1] (all of dtype d), written to dst.
void mean_element(DType d, const std::vector<const unsigned char*>& srcs, unsigned char* dst) {
  switch (d) {
    case DType::float32:
    case DType::float16:
    case DType::bfloat16:
    case DType::float8_e5m2:
    case DType::float8_e4m3fn:
    case DType::hifloat8:
      return mean_float(d, srcs, dst);
    case DType::int8:
    case DType::int16:
    case DType::int32:
      return mean_signed(d, srcs, dst);
    case DType::uint8:
    case DType::uint16:
    case DType::uint32:
      return mean_unsigned(d, srcs, dst);
    default:
      detail::fail(Status::internal_error, "Rope mean: unsupported dtype");
  }
}

// ---- slot-per-token modes -------------------------------------------------------------------

// Norm / Nct / NHSD / PA_NZ for one side (key or value). `nct_stride` < 0: not Nct.
void scatter_side(const ScatterPaKvCachePlan& p, const TensorView& x, const TensorView& cache,
                  std::int64_t d, std::int64_t nct_stride, std::int64_t nct_offset,
                  const std::vector<std::int64_t>& slots) {
  const std::int64_t nh = p.num_heads, bs = p.block_size;
  const std::size_t es = x.element_size();
  const Elem src{&x};
  const Elem dst{&cache};
  const auto* buf = static_cast<const unsigned char*>(x.data);
  for (std::int64_t t = 0; t < p.num_tokens; ++t) {
    const std::int64_t s = slots[static_cast<std::size_t>(t)];
    if (s < 0) continue;  // padding
    const std::int64_t blk = s / bs, o = s % bs;
    for (std::int64_t h = 0; h < nh; ++h) {
      for (std::int64_t e = 0; e < d; ++e) {
        // Source element key[t][h][e] (Nct: key_buf[offset + t*stride + h*D + e]).
        const unsigned char* from =
            nct_stride >= 0
                ? buf + (nct_offset + t * nct_stride + h * d + e) * static_cast<std::int64_t>(es)
                : src.at(t, h, e);
        unsigned char* to = nullptr;
        if (p.cache_mode == CacheMode::PA_NZ) {
          const std::int64_t lanes = 32 / static_cast<std::int64_t>(es);
          if (cache.rank == 4) {
            const std::int64_t f = h * d + e;
            to = dst.at(blk, f / lanes, o, f % lanes);
          } else {
            to = dst.at(blk, h, e / lanes, o, e % lanes);
          }
        } else if (p.scatter_mode == ScatterMode::NHSD) {
          to = dst.at(blk, h, o, e);
        } else {
          to = dst.at(blk, o, h, e);
        }
        copy_elem(to, from, es);
      }
    }
  }
}

// ---- compress modes -------------------------------------------------------------------------

// Row r of a [nb, bs, 1, D] cache, element e.
unsigned char* cache_row(const TensorView& c, std::int64_t r, std::int64_t e) {
  return Elem{&c}.at(r / c.dim(1), r % c.dim(1), std::int64_t{0}, e);
}

void compress_side(const ScatterPaKvCachePlan& p, const TensorView& x, const TensorView& cache,
                   std::int64_t d) {
  const std::size_t es = x.element_size();
  const Elem src{&x};
  const bool packed = x.rank == 3;
  const IndexReader slot(p.slot_mapping);
  const IndexReader lens(*p.compress_lens);
  const IndexReader offs =
      p.compress_seq_offsets ? IndexReader(*p.compress_seq_offsets) : IndexReader();
  const IndexReader seq(*p.seq_lens);
  // Token k of batch b, head h, element e: packed key[base + k][h][e] or key[b][k][h][e].
  auto token = [&](std::int64_t b, std::int64_t base, std::int64_t k, std::int64_t h,
                   std::int64_t e) { return packed ? src.at(base + k, h, e) : src.at(b, k, h, e); };
  auto copy_row = [&](std::int64_t row, std::int64_t b, std::int64_t base, std::int64_t k,
                      std::int64_t h) {
    for (std::int64_t e = 0; e < d; ++e)
      copy_elem(cache_row(cache, row, e), token(b, base, k, h, e), es);
  };

  std::int64_t base = 0;  // csum_excl[b]
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t len = seq[b];
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      const std::int64_t i = b * p.num_heads + h;
      const std::int64_t s0 = slot[i];
      std::int64_t w = lens[i];
      if (s0 < 0) continue;  // a negative start slot skips the whole run
      if (p.scatter_mode == ScatterMode::Alibi) {
        // The last w tokens of the batch go to rows s0 .. s0+w-1.
        for (std::int64_t k = 0; k < w; ++k) copy_row(s0 + k, b, base, len - w + k, h);
        continue;
      }
      std::int64_t o = offs[i];
      if (o == -1 || w == 0) o = len;  // "-1 => do not compress this head"
      if (o == len) w = 0;
      for (std::int64_t k = 0; k < o; ++k) copy_row(s0 + k, b, base, k, h);  // part A
      if (w > 0) {
        if (p.scatter_mode == ScatterMode::Rope) {
          // Part B: one mean row, then part C shifted by one row.
          std::vector<const unsigned char*> window(static_cast<std::size_t>(w));
          for (std::int64_t e = 0; e < d; ++e) {
            for (std::int64_t k = 0; k < w; ++k) {
              window[static_cast<std::size_t>(k)] = token(b, base, o + k, h, e);
            }
            mean_element(x.dtype, window, cache_row(cache, s0 + o, e));
          }
          for (std::int64_t m = 0; m < len - o - w; ++m)
            copy_row(s0 + o + 1 + m, b, base, o + w + m, h);
        } else {
          // Omni: the window is dropped.
          for (std::int64_t m = 0; m < len - o - w; ++m)
            copy_row(s0 + o + m, b, base, o + w + m, h);
        }
      }
    }
    base += len;
  }
}

}  // namespace

void execute(const ScatterPaKvCachePlan& plan) {
  detail::scatter::check_bound_data(plan);
  CheckedData checked;
  detail::scatter::check_data(plan, checked);  // every check before the first write
  const bool compress = detail::scatter::is_compress(plan.scatter_mode);
  const bool nct = plan.scatter_mode == ScatterMode::Nct;
  if (compress) {
    compress_side(plan, plan.key, plan.key_cache, plan.key_head_size);
    if (plan.value) compress_side(plan, *plan.value, *plan.value_cache, plan.value_head_size);
  } else {
    scatter_side(plan, plan.key, plan.key_cache, plan.key_head_size, nct ? plan.strides[0] : -1,
                 plan.offsets[0], checked.slots);
    if (plan.value) {
      scatter_side(plan, *plan.value, *plan.value_cache, plan.value_head_size,
                   nct ? plan.strides[1] : -1, plan.offsets[1], checked.slots);
    }
  }
}

}  // namespace kvscatter::reference
