// Harness cases for paged_latent_write: copy, fp8 and fp8_ds_mla rows, token-strided inputs,
// padded cache entries and blocks, padding, duplicate and last slots, empty calls, odd widths,
// special values (NaN, infinities) inside ds_mla tiles and tiles of zeros, subnormals or a
// power-of-two scale, unaligned rows; the fp8 formats on both AVX-512 table kernels.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "kvscatter/paged_latent_write.h"

namespace kvscatter::harness::paged_latent_write_cases {
namespace {

std::int64_t uniform(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  return values.begin()[uniform(rng, 0, static_cast<std::int64_t>(values.size()) - 1)];
}

void fill(std::mt19937_64& rng, std::vector<std::uint8_t>& buf, DType dtype, float sigma) {
  const std::size_t es = dtype_size(dtype);
  for (std::size_t i = 0; i + es <= buf.size(); i += es) {
    float v = std::normal_distribution<float>(0.0f, sigma)(rng);
    if (uniform(rng, 0, 40) == 0) v = pick(rng, {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f});
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if (dtype == DType::float32) {
      std::memcpy(&buf[i], &bits, 4);
    } else if (dtype == DType::bfloat16) {
      const auto top = static_cast<std::uint16_t>(bits >> 16);
      std::memcpy(&buf[i], &top, 2);
    } else {
      const auto r =
          static_cast<std::uint16_t>(uniform(rng, 0, 3) ? 0x3C00 + (rng() & 0x7FF) : rng());
      std::memcpy(&buf[i], &r, 2);
    }
  }
}

// Gives some fp8_ds_mla tiles (128 two-byte values, rows `stride` values apart) the contents
// that take the rarer ways through the tile scale: all zeros, one NaN, subnormal values only, a
// largest magnitude of 448 (a power-of-two scale), one of the largest finite bfloat16.
void shape_tiles(std::mt19937_64& rng, std::vector<std::uint8_t>& buf, std::int64_t rows,
                 std::int64_t stride) {
  for (std::int64_t t = 0; t < rows; ++t) {
    for (std::int64_t k = 0; k < 4; ++k) {
      auto* x = reinterpret_cast<std::uint16_t*>(buf.data()) + t * stride + k * 128;
      const auto at = static_cast<std::size_t>(uniform(rng, 0, 127));
      switch (uniform(rng, 0, 9)) {
        case 0:
          for (std::size_t i = 0; i < 128; ++i) x[i] = uniform(rng, 0, 1) ? 0x8000 : 0;
          break;
        case 1:
          x[at] = static_cast<std::uint16_t>(uniform(rng, 0x7F81, 0x7FFF));
          break;
        case 2:
          for (std::size_t i = 0; i < 128; ++i) x[i] = static_cast<std::uint16_t>(rng() & 0x807F);
          break;
        case 3:
          x[at] = uniform(rng, 0, 1) ? 0x43E0 : 0xC3E0;
          break;
        case 4:
          x[at] = 0x7F7F;
          break;
        default:
          break;
      }
    }
  }
}

Case generate(std::mt19937_64& rng) {
  // big: a call of 29 to 48 bfloat16 rows of 512 + 64 values quantized to fp8, long enough for
  // the fp8 code table and its tiles of rows.
  const bool big = uniform(rng, 0, 5) == 0;
  const LatentCacheFormat format =
      big ? pick(rng, {LatentCacheFormat::fp8_e4m3, LatentCacheFormat::fp8_e5m2})
          : pick(rng, {LatentCacheFormat::copy, LatentCacheFormat::fp8_e4m3,
                       LatentCacheFormat::fp8_e5m2, LatentCacheFormat::fp8_ds_mla});
  const bool ds = format == LatentCacheFormat::fp8_ds_mla;
  const DType dtype = big  ? DType::bfloat16
                      : ds ? pick(rng, {DType::float16, DType::bfloat16})
                           : pick(rng, {DType::float32, DType::float16, DType::bfloat16});
  const std::int64_t r = ds || big ? 512 : pick<std::int64_t>(rng, {1, 4, 16, 31, 64, 512});
  const std::int64_t pe = ds || big ? 64 : pick<std::int64_t>(rng, {1, 2, 8, 17, 64});
  const std::int64_t bs = pick<std::int64_t>(rng, {1, 2, 3, 16}), nb = uniform(rng, 1, 4);
  const std::int64_t N = big                       ? uniform(rng, 29, 48)
                         : uniform(rng, 0, 3) == 0 ? uniform(rng, 0, 2)
                                                   : uniform(rng, 1, 24);
  const std::int64_t c_stride = r + uniform(rng, 0, 1) * uniform(rng, 0, 9);
  const std::int64_t p_stride = pe + uniform(rng, 0, 1) * uniform(rng, 0, 9);
  const DType cdt = format == LatentCacheFormat::copy       ? dtype
                    : ds || uniform(rng, 0, 1)              ? DType::uint8
                    : format == LatentCacheFormat::fp8_e4m3 ? DType::float8_e4m3fn
                                                            : DType::float8_e5m2;
  const std::int64_t entry = ds ? 656 : r + pe;
  const std::int64_t slot_stride = entry + uniform(rng, 0, 1) * uniform(rng, 0, 5);
  const std::int64_t block_stride = bs * slot_stride + uniform(rng, 0, 3);
  const bool wide = uniform(rng, 0, 1) == 1, bad_slot = N > 0 && uniform(rng, 0, 19) == 0;
  const bool scale_given = format == LatentCacheFormat::fp8_e4m3 ||
                           format == LatentCacheFormat::fp8_e5m2 || uniform(rng, 0, 1) == 1;
  const auto es = static_cast<std::int64_t>(dtype_size(dtype));
  const auto ces = static_cast<std::int64_t>(dtype_size(cdt));

  Case c;
  c.name = std::string(latent_cache_format_name(format)) + " " + std::string(dtype_name(dtype)) +
           " r=" + std::to_string(r) + " pe=" + std::to_string(pe) + " bs=" + std::to_string(bs) +
           " nb=" + std::to_string(nb) + " N=" + std::to_string(N);
  auto bytes = [](std::int64_t n) {
    return std::vector<std::uint8_t>(static_cast<std::size_t>(n));
  };
  c.buffers = {bytes(std::max<std::int64_t>(N, 1) * c_stride * es),
               bytes(std::max<std::int64_t>(N, 1) * p_stride * es), bytes(nb * block_stride * ces),
               bytes(std::max<std::int64_t>(N, 1) * 8), bytes(4)};
  const float sigma = pick(rng, {1.0f, 50.0f, 1e-3f});
  fill(rng, c.buffers[0], dtype, sigma);
  fill(rng, c.buffers[1], dtype, sigma);
  if (ds) shape_tiles(rng, c.buffers[0], N, c_stride);
  for (auto& b : c.buffers[2]) b = static_cast<std::uint8_t>(rng());
  const std::int64_t ns = nb * bs;
  for (std::int64_t t = 0; t < N; ++t) {
    std::int64_t s = uniform(rng, 0, 5) == 0   ? -1
                     : uniform(rng, 0, 4) == 0 ? ns - 1
                                               : uniform(rng, 0, ns - 1);
    if (bad_slot && t == N - 1) s = ns + uniform(rng, 0, 2);
    if (wide) {
      std::memcpy(&c.buffers[3][static_cast<std::size_t>(8 * t)], &s, 8);
    } else {
      const auto s32 = static_cast<std::int32_t>(s);
      std::memcpy(&c.buffers[3][static_cast<std::size_t>(4 * t)], &s32, 4);
    }
  }
  // 0.05: an exact-mode scale whose reciprocal (20) is not a power of two.
  const float scale = pick(rng, {1.0f, 0.5f, 4.0f, 0.01f, -3.0f, 0.05f});
  std::memcpy(c.buffers[4].data(), &scale, 4);
  c.buffer_names = {"kv_c", "k_pe", "kv_cache", "slot_mapping", "scale"};
  c.misalign = {static_cast<std::size_t>(uniform(rng, 0, 2)), 0,
                static_cast<std::size_t>(uniform(rng, 0, 3) * ces)};
  c.expect_error = bad_slot;
  c.stream = uniform(rng, 0, 3) == 0;  // the non-temporal copy path on small calls
  c.run = [=](const std::vector<std::uint8_t*>& data, bool reference) {
    const std::int64_t cs[2] = {c_stride, 1}, ps[2] = {p_stride, 1};
    const std::int64_t ks[3] = {block_stride, slot_stride, 1};
    PagedLatentWriteOptions o;
    o.format = format;
    if (scale_given) o.scale = TensorView(data[4], DType::float32, {1});
    const PagedLatentWritePlan plan = plan_paged_latent_write(
        TensorView(data[0], dtype, std::vector<std::int64_t>{N, r}, cs),
        TensorView(data[1], dtype, std::vector<std::int64_t>{N, pe}, ps),
        TensorView(data[2], cdt, std::vector<std::int64_t>{nb, bs, entry}, ks),
        TensorView(data[3], wide ? DType::int64 : DType::int32, {N}), o);
    if (reference)
      kvscatter::reference::execute(plan);
    else
      kvscatter::execute(plan);
  };
  return c;
}

}  // namespace
}  // namespace kvscatter::harness::paged_latent_write_cases

KVS_HARNESS_CASES(paged_latent_write, kvscatter::harness::paged_latent_write_cases::generate, 300);
