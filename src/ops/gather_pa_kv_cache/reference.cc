// The GatherPaKvCache oracle: the pseudo-code of
// docs/operators/gather_pa_kv_cache.md as plain loops, one element at a time,
// addressed through the views' strides.
#include <cstring>

#include "core/index.h"
#include "ops/gather_pa_kv_cache/internal.h"

namespace kvscatter::reference {
namespace {

using detail::IndexReader;

unsigned char* at(const TensorView& t, std::int64_t i0, std::int64_t i1, std::int64_t i2,
                  std::int64_t i3 = 0) {
  const std::int64_t e = i0 * t.stride(0) + i1 * t.stride(1) + (t.rank > 2 ? i2 * t.stride(2) : 0) +
                         (t.rank > 3 ? i3 * t.stride(3) : 0);
  return static_cast<unsigned char*>(t.data) + e * static_cast<std::int64_t>(t.element_size());
}

// Output row r of one side from row o of block blk (negative: zero bytes).
void copy_row(const GatherPaKvCachePlan& p, const TensorView& cache, const TensorView& out,
              std::int64_t blk, std::int64_t o, std::int64_t r) {
  const std::size_t es = out.element_size();
  if (p.cache_mode == CacheMode::Norm) {
    for (std::int64_t h = 0; h < out.dim(1); ++h) {
      for (std::int64_t d = 0; d < out.dim(2); ++d) {
        unsigned char* dst = at(out, r, h, d);
        if (blk < 0)
          std::memset(dst, 0, es);
        else
          std::memcpy(dst, at(cache, blk, o, h, d), es);
      }
    }
    return;
  }
  const std::int64_t lanes = cache.dim(3);
  for (std::int64_t c = 0; c < cache.dim(1); ++c) {
    for (std::int64_t e = 0; e < lanes; ++e) {
      unsigned char* dst = at(out, r, c * lanes + e, 0);
      if (blk < 0)
        std::memset(dst, 0, es);
      else
        std::memcpy(dst, at(cache, blk, c, o, e), es);
    }
  }
}

}  // namespace

void execute(const GatherPaKvCachePlan& p) {
  detail::gather::check_bound_data(p);
  detail::gather::CheckedData checked;
  detail::gather::check_data(p, checked);  // every rule before the first write
  const IndexReader sl(p.seq_lens), table(p.block_tables);
  const IndexReader so = p.seq_offset ? IndexReader(*p.seq_offset) : IndexReader();
  std::int64_t start = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t len = p.is_seq_lens_cumsum ? sl[b + 1] - sl[b] : sl[b];
    if (p.is_seq_lens_cumsum) start = sl[b];
    const std::int64_t shift = p.seq_offset ? so[b] / p.block_size : 0;
    for (std::int64_t j = 0; j < len; ++j) {
      const std::int64_t blk = table[b * p.table_width + shift + j / p.block_size];
      const std::int64_t o = j % p.block_size;
      copy_row(p, p.key_cache, p.key, blk, o, start + j);
      if (p.value) copy_row(p, *p.value_cache, *p.value, blk, o, start + j);
    }
    if (!p.is_seq_lens_cumsum) start += len;
  }
}

}  // namespace kvscatter::reference
