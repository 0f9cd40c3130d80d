// Harness cases for paged_cache_gather: copy and fp8 dequantizing gathers, entries of rank 1 or
// 2 and odd sizes, padded blocks and slots, strided dst rows, the sequence-driven and the
// token-driven (token_to_seq) forms, seq_starts at any alignment, garbage in unread block-table
// entries, empty sequences and calls, and the occasional broken data rule.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "kvscatter/paged_cache_gather.h"

namespace kvscatter::harness::paged_cache_gather_cases {
namespace {

std::int64_t uniform(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  return values.begin()[uniform(rng, 0, static_cast<std::int64_t>(values.size()) - 1)];
}

void put_index(std::vector<std::uint8_t>& buf, std::int64_t i, std::int64_t v, bool wide) {
  if (wide) {
    std::memcpy(&buf[static_cast<std::size_t>(8 * i)], &v, 8);
  } else {
    const auto v32 = static_cast<std::int32_t>(v);
    std::memcpy(&buf[static_cast<std::size_t>(4 * i)], &v32, 4);
  }
}

std::vector<std::uint8_t> random_bytes(std::mt19937_64& rng, std::int64_t n) {
  std::vector<std::uint8_t> b(static_cast<std::size_t>(n));
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

Case generate(std::mt19937_64& rng) {
  const KvCacheFormat format =
      pick(rng, {KvCacheFormat::copy, KvCacheFormat::fp8_e4m3, KvCacheFormat::fp8_e5m2});
  const DType src_dtype =
      format == KvCacheFormat::copy
          ? pick(rng, {DType::uint8, DType::float16, DType::bfloat16, DType::float32, DType::int32})
          : pick(rng, {DType::uint8, format == KvCacheFormat::fp8_e4m3 ? DType::float8_e4m3fn
                                                                       : DType::float8_e5m2});
  const DType dst_dtype = format == KvCacheFormat::copy
                              ? src_dtype
                              : pick(rng, {DType::float32, DType::float16, DType::bfloat16});
  const bool token_mode = uniform(rng, 0, 1) == 1;
  const bool wide = uniform(rng, 0, 1) == 1;
  const std::int64_t nb = uniform(rng, 1, 5), bs = pick<std::int64_t>(rng, {1, 2, 3, 4, 16});
  const std::int64_t e1 = pick<std::int64_t>(rng, {1, 3, 8, 17, 64, 2}), e0 = uniform(rng, 1, 2);
  const std::int64_t entry = e0 * e1;
  const std::int64_t slot_stride = entry + uniform(rng, 0, 1) * uniform(rng, 0, 3);
  const std::int64_t block_stride = bs * slot_stride + uniform(rng, 0, 3);
  const std::int64_t B = uniform(rng, 0, 3) == 0 ? uniform(rng, 0, 1) : uniform(rng, 1, 4);
  const bool starts = uniform(rng, 0, 1) == 1;
  const bool scale_given = uniform(rng, 0, 1) == 1;

  std::vector<std::int64_t> cu{token_mode ? 0 : uniform(rng, 0, 2)}, start(B);
  std::int64_t max_pos = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t len = uniform(rng, 0, 4) == 0 ? 0 : uniform(rng, 1, 12);
    cu.push_back(cu.back() + len);
    start[static_cast<std::size_t>(b)] = starts ? uniform(rng, 0, 2 * bs + 1) : 0;
    max_pos = std::max(max_pos, len + start[static_cast<std::size_t>(b)]);
  }
  const std::int64_t W = (max_pos + bs - 1) / bs + uniform(rng, 0, 1);
  const std::int64_t bt_rows = B + uniform(rng, 0, 1);
  const std::int64_t num_tokens = token_mode && B > 0 ? cu.back() + uniform(rng, 0, 3) : 0;
  const std::int64_t rows = std::max(cu.back(), num_tokens) + uniform(rng, 0, 2);
  const std::int64_t dst_row_stride = entry + uniform(rng, 0, 1) * uniform(rng, 0, 5);
  const auto ses = static_cast<std::int64_t>(dtype_size(src_dtype));
  const auto des = static_cast<std::int64_t>(dtype_size(dst_dtype));
  const std::int64_t iw = wide ? 8 : 4;

  Case c;
  c.name = std::string(kv_cache_format_name(format)) + " " + std::string(dtype_name(src_dtype)) +
           "->" + std::string(dtype_name(dst_dtype)) + (token_mode ? " token_to_seq" : " cu") +
           " nb=" + std::to_string(nb) + " bs=" + std::to_string(bs) +
           " entry=" + std::to_string(entry) + " B=" + std::to_string(B);
  c.buffers = {
      random_bytes(rng, nb * block_stride * ses),
      random_bytes(rng, std::max<std::int64_t>(rows, 1) * dst_row_stride * des),
      std::vector<std::uint8_t>(
          static_cast<std::size_t>(std::max<std::int64_t>(bt_rows * W, 1) * iw)),
      std::vector<std::uint8_t>(static_cast<std::size_t>((B + 1) * iw)),
      std::vector<std::uint8_t>(static_cast<std::size_t>(std::max<std::int64_t>(B, 1) * iw)),
      std::vector<std::uint8_t>(
          static_cast<std::size_t>(std::max<std::int64_t>(num_tokens, 1) * iw)),
      std::vector<std::uint8_t>(4)};
  // Block-table entries: valid where read; garbage (-1, huge) in columns past a sequence's end.
  for (std::int64_t b = 0; b < bt_rows; ++b) {
    const std::int64_t used =
        b < B ? (cu[static_cast<std::size_t>(b + 1)] - cu[static_cast<std::size_t>(b)] +
                 start[static_cast<std::size_t>(std::min(b, B - 1))] + bs - 1) /
                    bs
              : 0;
    for (std::int64_t w = 0; w < W; ++w) {
      const std::int64_t v = w < used || uniform(rng, 0, 1) ? uniform(rng, 0, nb - 1)
                                                            : pick<std::int64_t>(rng, {-1, 99});
      put_index(c.buffers[2], b * W + w, v, wide);
    }
  }
  for (std::int64_t b = 0; b <= B; ++b)
    put_index(c.buffers[3], b, cu[static_cast<std::size_t>(b)], wide);
  for (std::int64_t b = 0; b < B; ++b)
    put_index(c.buffers[4], b, start[static_cast<std::size_t>(b)], wide);
  for (std::int64_t t = 0, b = 0; t < num_tokens; ++t) {
    while (b < B && t >= cu[static_cast<std::size_t>(b + 1)]) ++b;
    put_index(c.buffers[5], t, b < B ? b : 0, wide);  // padded with zeros, as engines do
  }
  const float scale = pick(rng, {1.0f, 0.5f, 3.0f, 1e-3f, 1e30f, -2.0f});
  std::memcpy(c.buffers[6].data(), &scale, 4);
  // Sometimes break one data rule (the call must then fail and write nothing).
  if (B > 0 && cu[1] > cu[0] && uniform(rng, 0, 14) == 0) {
    switch (uniform(rng, 0, 2)) {
      case 0:  // every column of sequence 0 (not empty) points past the cache
        for (std::int64_t w = 0; w < W; ++w) {
          put_index(c.buffers[2], w, nb + uniform(rng, 0, 3), wide);
        }
        break;
      case 1:  // decreasing
        put_index(c.buffers[3], 0, cu.back() + 1, wide);
        break;
      default:  // a negative start, or without seq_starts a column past the table
        if (starts) {
          put_index(c.buffers[4], 0, -1, wide);
        } else {
          for (std::int64_t w = 0; w < W; ++w) put_index(c.buffers[2], w, -1, wide);
        }
        break;
    }
    c.expect_error = true;
  }
  c.buffer_names = {"src_cache", "dst", "block_table", "cu_seq_lens", "seq_starts", "token_to_seq", "scale"};
  c.misalign = {static_cast<std::size_t>(uniform(rng, 0, 3) * ses),
                static_cast<std::size_t>(uniform(rng, 0, 1) * des)};
  c.stream = uniform(rng, 0, 3) == 0;  // the non-temporal copy path on small calls

  c.run = [=](const std::vector<std::uint8_t*>& data, bool reference) {
    std::vector<std::int64_t> src_shape{nb, bs}, src_strides{block_stride, slot_stride};
    std::vector<std::int64_t> dst_shape{rows}, dst_strides{dst_row_stride};
    const std::vector<std::int64_t> entry_dims =
        e0 == 1 ? std::vector<std::int64_t>{e1} : std::vector<std::int64_t>{e0, e1};
    std::int64_t inner = entry;
    for (std::int64_t d : entry_dims) {
      inner /= d;
      src_shape.push_back(d);
      src_strides.push_back(inner);
      dst_shape.push_back(d);
      dst_strides.push_back(inner);
    }
    const DType idx = wide ? DType::int64 : DType::int32;
    PagedCacheGatherOptions o;
    o.format = format;
    o.batch_size = B;
    if (format != KvCacheFormat::copy || scale_given)
      o.scale = TensorView(data[6], DType::float32, {1});
    if (starts) o.seq_starts = TensorView(data[4], idx, {B});
    if (token_mode) {
      o.token_to_seq = TensorView(data[5], idx, {num_tokens});
      o.num_tokens = num_tokens;
    }
    const PagedCacheGatherPlan plan = plan_paged_cache_gather(
        TensorView(data[0], src_dtype, src_shape, src_strides),
        TensorView(data[1], dst_dtype, dst_shape, dst_strides),
        TensorView(data[2], idx, {bt_rows, W}), TensorView(data[3], idx, {B + 1}), o);
    if (reference)
      kvscatter::reference::execute(plan);
    else
      kvscatter::execute(plan);
  };
  return c;
}

}  // namespace
}  // namespace kvscatter::harness::paged_cache_gather_cases

KVS_HARNESS_CASES(paged_cache_gather, kvscatter::harness::paged_cache_gather_cases::generate, 300);
