// Harness cases for paged_kv_write: random dtypes, formats, NHD/HND caches
// (separate or K and V interleaved in one allocation, padded blocks),
// token-strided inputs, per-tensor and per-head scales, padding, duplicate and
// last slots, empty calls, odd head sizes, unaligned rows.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "kvscatter/paged_kv_write.h"

namespace kvscatter::harness::paged_kv_write_cases {
namespace {

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  std::uniform_int_distribution<std::size_t> d(0, values.size() - 1);
  return values.begin()[d(rng)];
}

std::int64_t uniform(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

// Random activations: mostly ordinary values around the scale, some specials
// and raw bits; `tame`: ordinary values of a typical size only, so that whole
// groups take the fp8 shortcuts' fast paths.
void fill_inputs(std::mt19937_64& rng, std::vector<std::uint8_t>& buf, DType dtype, bool tame) {
  const std::size_t es = dtype_size(dtype);
  for (std::size_t i = 0; i + es <= buf.size(); i += es) {
    float v;
    switch (tame ? 2 : uniform(rng, 0, 9)) {
      case 0: {
        const auto bits = static_cast<std::uint32_t>(rng());
        std::memcpy(&v, &bits, 4);
        break;
      }
      case 1:
        v = pick(rng, {0.0f, -0.0f, 448.0f, 464.0f, 57344.0f, 61440.0f, 1e30f, -1e-30f});
        break;
      default:
        v = std::normal_distribution<float>(0.0f, tame ? 2.0f : 50.0f)(rng);
    }
    if (dtype == DType::float32) {
      std::memcpy(&buf[i], &v, 4);
    } else {
      std::uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const auto top = static_cast<std::uint16_t>(bits >> 16);
      const auto r = static_cast<std::uint16_t>(rng());
      std::memcpy(&buf[i], dtype == DType::bfloat16 ? &top : &r, 2);
    }
  }
}

Case generate(std::mt19937_64& rng) {
  // big: 32 to 48 bfloat16 tokens of 4 heads of 128 quantized to fp8 into an HND cache, long
  // enough for the fp8 code table (when the scales are one value).
  const bool big = uniform(rng, 0, 5) == 0;
  const DType dtype =
      big ? DType::bfloat16 : pick(rng, {DType::float32, DType::float16, DType::bfloat16});
  const KvCacheFormat format =
      big ? pick(rng, {KvCacheFormat::fp8_e4m3, KvCacheFormat::fp8_e5m2})
          : pick(rng, {KvCacheFormat::copy, KvCacheFormat::fp8_e4m3, KvCacheFormat::fp8_e5m2});
  const bool hnd = big || uniform(rng, 0, 1) == 1;
  const bool interleaved = uniform(rng, 0, 1) == 1;
  const std::int64_t H = big ? 4 : uniform(rng, 1, 4),
                     D = big ? 128 : pick<std::int64_t>(rng, {1, 3, 8, 16, 17, 64, 128, 130});
  const std::int64_t bs = pick<std::int64_t>(rng, {1, 2, 3, 4, 16}), nb = uniform(rng, 1, 4);
  const std::int64_t N = big                       ? uniform(rng, 32, 48)
                         : uniform(rng, 0, 3) == 0 ? uniform(rng, 0, 2)
                                                   : uniform(rng, 1, 48);
  const std::int64_t T = N + uniform(rng, 0, 2);
  const std::int64_t head_pad = uniform(rng, 0, 1) * uniform(rng, 0, 3);
  const std::int64_t token_stride = H * (D + head_pad) + uniform(rng, 0, 5);
  const bool per_head = uniform(rng, 0, 1) == 1;
  const bool scales = format != KvCacheFormat::copy || uniform(rng, 0, 1) == 1;
  const bool bad_slot = N > 0 && uniform(rng, 0, 19) == 0;
  const bool use_int64 = uniform(rng, 0, 1) == 1;
  const bool tame = uniform(rng, 0, 2) == 0;

  const DType cache_dtype = format == KvCacheFormat::copy       ? dtype
                            : uniform(rng, 0, 1)                ? DType::uint8
                            : format == KvCacheFormat::fp8_e4m3 ? DType::float8_e4m3fn
                                                                : DType::float8_e5m2;
  const auto es = static_cast<std::int64_t>(dtype_size(dtype));
  const auto ces = static_cast<std::int64_t>(dtype_size(cache_dtype));
  // Physical block: [bs, H, D] (NHD) or [H, bs, D] (HND), padded by up to 3
  // elements.
  const std::int64_t block_elems = bs * H * D + uniform(rng, 0, 3);
  const std::int64_t block_stride = interleaved ? 2 * block_elems : block_elems;
  const std::int64_t cache_elems = nb * block_stride;
  const std::int64_t slot_stride = hnd ? D : H * D, head_stride = hnd ? bs * D : D;

  Case c;
  c.name = std::string(dtype_name(dtype)) + " " + kv_cache_format_name(format) +
           (hnd ? " HND" : " NHD") + (interleaved ? " interleaved" : "") +
           " H=" + std::to_string(H) + " D=" + std::to_string(D) + " bs=" + std::to_string(bs) +
           " nb=" + std::to_string(nb) + " N=" + std::to_string(N) +
           (per_head ? " per-head" : " per-tensor") + (tame ? " tame" : "");
  auto bytes = [](std::int64_t n) {
    return std::vector<std::uint8_t>(static_cast<std::size_t>(n));
  };
  c.buffers = {bytes(T * token_stride * es),
               bytes(T * token_stride * es),
               bytes(cache_elems * ces),
               bytes(interleaved ? 1 : cache_elems * ces),
               bytes(N * (use_int64 ? 8 : 4)),
               bytes(H * 4),
               bytes(H * 4)};
  fill_inputs(rng, c.buffers[0], dtype, tame);
  fill_inputs(rng, c.buffers[1], dtype, tame);
  for (int k : {2, 3}) {
    for (auto& b : c.buffers[static_cast<std::size_t>(k)]) b = static_cast<std::uint8_t>(rng());
  }
  const std::int64_t ns = nb * bs;
  for (std::int64_t t = 0; t < N; ++t) {
    std::int64_t s = uniform(rng, 0, 5) == 0   ? -1
                     : uniform(rng, 0, 4) == 0 ? ns - 1
                                               : uniform(rng, 0, ns - 1);
    if (bad_slot && t == N - 1) s = ns + uniform(rng, 0, 3);
    if (use_int64) {
      std::memcpy(&c.buffers[4][static_cast<std::size_t>(8 * t)], &s, 8);
    } else {
      const auto s32 = static_cast<std::int32_t>(s);
      std::memcpy(&c.buffers[4][static_cast<std::size_t>(4 * t)], &s32, 4);
    }
  }
  for (int k : {5, 6}) {
    for (std::int64_t h = 0; h < H; ++h) {
      // 0.05: exact mode with a reciprocal (20) that is not a power of two.
      const float v = pick(rng, {1.0f, 0.5f, 2.0f, 0.03125f, 3.7f, -1.5f, 1e-3f, 0.0f, 0.05f});
      std::memcpy(&c.buffers[static_cast<std::size_t>(k)][static_cast<std::size_t>(4 * h)], &v, 4);
    }
  }
  c.buffer_names = {"key",          "value",   "key_cache", "value_cache",
                    "slot_mapping", "k_scale", "v_scale"};
  c.misalign = {static_cast<std::size_t>(uniform(rng, 0, 3) * 2),
                0,
                static_cast<std::size_t>(uniform(rng, 0, 1) * ces),
                0,
                0,
                0,
                0};
  c.expect_error = bad_slot;
  c.stream = uniform(rng, 0, 3) == 0;  // the non-temporal copy path on small caches
  c.run = [=](const std::vector<std::uint8_t*>& data, bool reference) {
    const std::int64_t in_strides[3] = {token_stride, D + head_pad, 1};
    const TensorView key(data[0], dtype, std::vector<std::int64_t>{T, H, D}, in_strides);
    const TensorView value(data[1], dtype, std::vector<std::int64_t>{T, H, D}, in_strides);
    // Both layouts are passed the way engines do: an NHD-ordered view with the
    // cache's strides.
    const std::int64_t cs[4] = {block_stride, slot_stride, head_stride, 1};
    const std::vector<std::int64_t> shape{nb, bs, H, D};
    const TensorView kc(data[2], cache_dtype, shape, cs);
    const TensorView vc(interleaved ? data[2] + block_elems * ces : data[3], cache_dtype, shape,
                        cs);
    const TensorView sm(data[4], use_int64 ? DType::int64 : DType::int32, {N});
    PagedKvWriteOptions o;
    o.format = format;
    if (scales) {
      const std::int64_t n = per_head ? H : 1;
      o.k_scale = TensorView(data[5], DType::float32, {n});
      o.v_scale = TensorView(data[6], DType::float32, {n});
    }
    const PagedKvWritePlan plan = plan_paged_kv_write(key, value, kc, vc, sm, o);
    if (reference)
      kvscatter::reference::execute(plan);
    else
      kvscatter::execute(plan);
  };
  return c;
}

}  // namespace
}  // namespace kvscatter::harness::paged_kv_write_cases

KVS_HARNESS_CASES(paged_kv_write, kvscatter::harness::paged_kv_write_cases::generate, 300);
