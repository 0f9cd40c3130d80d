// The optimized ScatterPaKvCache kernel: resolves the plan into byte addresses, makes duplicate
// destinations deterministic (G4), and splits the rows over the thread pool. The bytes are moved
// by kernel_hwy.cc.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kvscatter/formats.h"
#include "ops/scatter_pa_kv_cache/internal.h"
#include "ops/scatter_pa_kv_cache/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {
namespace detail::scatter {
namespace {

// Per-thread scratch reused across calls, so a decode-size call allocates nothing.
struct Scratch {
  CheckedData checked;
  std::vector<std::int64_t> keys, last;
  std::vector<std::uint8_t> skip;
  std::vector<CompressRun> runs;
  std::vector<std::int64_t> first_row;
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Marks every token whose slot is written again by a later token (last writer wins, G4), so the
// remaining writes touch disjoint bytes and any split over threads gives the same result.
// Returns whether any token was marked.
bool mark_overwritten(const std::vector<std::int64_t>& slots, Scratch& sc) {
  const auto n = static_cast<std::int64_t>(slots.size());
  // Strictly increasing slots (a prefill into fresh blocks) cannot repeat.
  std::int64_t prev = -1;
  bool increasing = true;
  for (std::int64_t s : slots) {
    if (s < 0) continue;
    if (s <= prev) {
      increasing = false;
      break;
    }
    prev = s;
  }
  if (increasing) return false;
  std::size_t cap = 16;
  while (cap < 2 * static_cast<std::size_t>(n)) cap *= 2;
  const int shift = 64 - __builtin_ctzll(cap);
  sc.keys.assign(cap, -1);
  sc.last.resize(cap);
  bool any = false;
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int64_t s = slots[static_cast<std::size_t>(t)];
    if (s < 0) continue;
    std::size_t i = static_cast<std::size_t>(
        (static_cast<std::uint64_t>(s) * 0x9E3779B97F4A7C15ull) >> shift);
    for (;;) {
      if (sc.keys[i] == s) {
        if (!any) {
          sc.skip.assign(static_cast<std::size_t>(n), 0);
          any = true;
        }
        sc.skip[static_cast<std::size_t>(sc.last[i])] = 1;
        sc.last[i] = t;
        break;
      }
      if (sc.keys[i] < 0) {
        sc.keys[i] = s;
        sc.last[i] = t;
        break;
      }
      i = (i + 1) & (cap - 1);
    }
  }
  return any;
}

SideJob side_job(const ScatterPaKvCachePlan& p, const TensorView& x, const TensorView& cache,
                 std::int64_t d, bool nct, std::int64_t nct_stride, std::int64_t nct_offset) {
  const auto es = static_cast<std::int64_t>(x.element_size());
  SideJob j;
  j.num_heads = p.num_heads;
  j.head_bytes = d * es;
  j.src = static_cast<const unsigned char*>(x.data);
  if (nct) {
    j.src += nct_offset * es;
    j.src_token = nct_stride * es;
    j.src_head = d * es;
  } else {
    j.src_token = x.stride(0) * es;
    j.src_head = x.stride(1) * es;
  }
  j.dst = static_cast<unsigned char*>(cache.data);
  j.block_stride = cache.stride(0) * es;
  const bool src_heads_contiguous = p.num_heads <= 1 || j.src_head == j.head_bytes;
  if (p.cache_mode == CacheMode::PA_NZ) {
    j.slot_pitch = 32;
    j.chunk_pitch = p.block_size * 32;
    j.head_pitch = (j.head_bytes / 32) * j.chunk_pitch;
    j.merged = src_heads_contiguous;
  } else if (p.scatter_mode == ScatterMode::NHSD) {
    j.slot_pitch = j.head_bytes;
    j.head_pitch = p.block_size * j.head_bytes;
    j.merged = src_heads_contiguous && (p.num_heads <= 1 || p.block_size == 1);
  } else {
    j.slot_pitch = p.num_heads * j.head_bytes;
    j.head_pitch = j.head_bytes;
    j.merged = src_heads_contiguous;
  }
  return j;
}

// Rows of at least this many bytes in calls writing at least kStreamMinBytes use non-temporal
// stores: such a call evicts the last-level cache anyway, and skipping the read-for-ownership of
// every destination line saves a third of the memory traffic.
constexpr std::int64_t kStreamMinRow = 512;
constexpr std::int64_t kStreamMinBytes = std::int64_t{64} << 20;

void execute_slots(const ScatterPaKvCachePlan& p, Scratch& sc) {
  const bool nct = p.scatter_mode == ScatterMode::Nct;
  RowJob job;
  job.block_size = p.block_size;
  job.side[0] = side_job(p, p.key, p.key_cache, p.key_head_size, nct, p.strides[0], p.offsets[0]);
  if (p.value) {
    job.side[1] = side_job(p, *p.value, *p.value_cache, p.value_head_size, nct, p.strides[1],
                           p.offsets[1]);
    job.num_sides = 2;
  }
  const std::vector<std::int64_t>& slots = sc.checked.slots;
  job.slots = slots.data();
  if (mark_overwritten(slots, sc)) job.skip = sc.skip.data();

  std::int64_t token_bytes = 0;
  bool long_rows = true;
  for (int k = 0; k < job.num_sides; ++k) {
    const SideJob& s = job.side[k];
    token_bytes += s.num_heads * s.head_bytes;
    long_rows = long_rows && s.chunk_pitch == 0 && s.merged &&
                s.num_heads * s.head_bytes >= kStreamMinRow;
  }
  job.stream = long_rows && token_bytes * p.num_tokens >= kStreamMinBytes;
  parallel_for(p.num_tokens, grain_for_bytes(token_bytes),
               [&](std::int64_t b, std::int64_t e) { scatter_token_range(job, b, e); });
}

CompressSide compress_side(const TensorView& x, const TensorView& cache, std::int64_t d,
                           bool packed) {
  const auto es = static_cast<std::int64_t>(x.element_size());
  CompressSide s;
  s.src = static_cast<const unsigned char*>(x.data);
  if (packed) {
    s.src_token = x.stride(0) * es;
    s.src_head = x.stride(1) * es;
  } else {
    s.src_batch = x.stride(0) * es;
    s.src_token = x.stride(1) * es;
    s.src_head = x.stride(2) * es;
  }
  s.dst = static_cast<unsigned char*>(cache.data);
  s.block_stride = cache.stride(0) * es;
  s.row_bytes = d * es;
  s.head_size = d;
  s.dtype = x.dtype;
  return s;
}

void execute_compress(const ScatterPaKvCachePlan& p, Scratch& sc) {
  CompressJob job;
  job.mode = p.scatter_mode;
  job.packed = p.key.rank == 3;
  job.block_size = p.block_size;
  job.side[0] = compress_side(p.key, p.key_cache, p.key_head_size, job.packed);
  if (p.value) {
    job.side[1] = compress_side(*p.value, *p.value_cache, p.value_head_size, job.packed);
    job.num_sides = 2;
  }
  sc.runs.clear();
  sc.first_row.clear();
  std::int64_t total = 0;
  for (const CompressRun& r : sc.checked.runs) {
    if (r.rows <= 0) continue;
    sc.runs.push_back(r);
    sc.first_row.push_back(total);
    total += r.rows;
  }
  if (total == 0) return;
  job.runs = sc.runs.data();
  job.first_row = sc.first_row.data();
  job.num_runs = static_cast<std::int64_t>(sc.runs.size());

  // Overlapping runs (G4: the later run wins) are rare; they run in task order on one thread.
  sc.spans.clear();
  for (const CompressRun& r : sc.runs) sc.spans.emplace_back(r.start, r.start + r.rows);
  std::sort(sc.spans.begin(), sc.spans.end());
  bool overlap = false;
  for (std::size_t i = 1; i < sc.spans.size() && !overlap; ++i) {
    overlap = sc.spans[i].first < sc.spans[i - 1].second;
  }
  std::int64_t row_bytes = 0;
  for (int k = 0; k < job.num_sides; ++k) row_bytes += job.side[k].row_bytes;
  if (overlap) {
    compress_row_range(job, 0, total);
    return;
  }
  parallel_for(total, grain_for_bytes(row_bytes),
               [&](std::int64_t b, std::int64_t e) { compress_row_range(job, b, e); });
}

// ---- Rope mean (S4) ------------------------------------------------------------------------

// Decoded value of every code of an 8-bit float format.
const float* decode_table(DType d) {
  struct Tables {
    float t[3][256];
    Tables() {
      const DType types[3] = {DType::hifloat8, DType::float8_e5m2, DType::float8_e4m3fn};
      for (int k = 0; k < 3; ++k) {
        for (std::uint32_t c = 0; c < 256; ++c) t[k][c] = formats::decode(types[k], c);
      }
    }
  };
  static const Tables tables;
  return tables.t[d == DType::hifloat8 ? 0 : d == DType::float8_e5m2 ? 1 : 2];
}

template <class Acc, class T>
void int_mean(const unsigned char* src, std::int64_t stride, std::int64_t w, std::int64_t n,
              unsigned char* dst) {
  thread_local std::vector<Acc> acc;
  thread_local std::vector<T> row;
  acc.assign(static_cast<std::size_t>(n), Acc{0});
  row.resize(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < w; ++k) {
    std::memcpy(row.data(), src + k * stride, static_cast<std::size_t>(n) * sizeof(T));
    for (std::int64_t e = 0; e < n; ++e) {
      // Wrapping (u)int32 accumulation, done in unsigned arithmetic to keep it defined.
      acc[e] = static_cast<Acc>(static_cast<std::uint32_t>(acc[e]) +
                                static_cast<std::uint32_t>(static_cast<Acc>(row[e])));
    }
  }
  for (std::int64_t e = 0; e < n; ++e) row[e] = static_cast<T>(acc[e] / static_cast<Acc>(w));
  std::memcpy(dst, row.data(), static_cast<std::size_t>(n) * sizeof(T));
}

}  // namespace

void rope_mean_row(DType dtype, const unsigned char* src, std::int64_t stride, std::int64_t w,
                   std::int64_t n, unsigned char* dst) {
  const auto un = static_cast<std::size_t>(n);
  switch (dtype) {
    case DType::int8: return int_mean<std::int32_t, std::int8_t>(src, stride, w, n, dst);
    case DType::int16: return int_mean<std::int32_t, std::int16_t>(src, stride, w, n, dst);
    case DType::int32: return int_mean<std::int32_t, std::int32_t>(src, stride, w, n, dst);
    case DType::uint8: return int_mean<std::uint32_t, std::uint8_t>(src, stride, w, n, dst);
    case DType::uint16: return int_mean<std::uint32_t, std::uint16_t>(src, stride, w, n, dst);
    case DType::uint32: return int_mean<std::uint32_t, std::uint32_t>(src, stride, w, n, dst);
    default: break;
  }
  // Floating types: fp32 accumulation in token order from +0.0, one fp32 division, then the
  // format's rounding.
  thread_local std::vector<float> acc, row;
  thread_local std::vector<std::uint16_t> codes16;
  thread_local std::vector<std::uint8_t> codes8;
  acc.assign(un, 0.0f);
  row.resize(un);
  const std::size_t es = dtype_size(dtype);
  for (std::int64_t k = 0; k < w; ++k) {
    const unsigned char* r = src + k * stride;
    if (dtype == DType::float32) {
      std::memcpy(row.data(), r, un * 4);
    } else if (es == 2) {
      codes16.resize(un);
      std::memcpy(codes16.data(), r, un * 2);
      if (dtype == DType::bfloat16) {
        formats::bfloat16_to_float32(codes16.data(), row.data(), un);
      } else {
        formats::float16_to_float32(codes16.data(), row.data(), un);
      }
    } else {
      const float* table = decode_table(dtype);
      for (std::size_t e = 0; e < un; ++e) row[e] = table[r[e]];
    }
    for (std::size_t e = 0; e < un; ++e) acc[e] = row[e] + acc[e];
  }
  const auto wf = static_cast<float>(w);
  for (std::size_t e = 0; e < un; ++e) acc[e] = acc[e] / wf;
  if (dtype == DType::float32) {
    std::memcpy(dst, acc.data(), un * 4);
  } else if (es == 2) {
    codes16.resize(un);
    if (dtype == DType::bfloat16) {
      formats::float32_to_bfloat16(acc.data(), codes16.data(), un);
    } else {
      formats::float32_to_float16(acc.data(), codes16.data(), un);
    }
    std::memcpy(dst, codes16.data(), un * 2);
  } else {
    codes8.resize(un);
    for (std::size_t e = 0; e < un; ++e) {
      codes8[e] = dtype == DType::hifloat8 ? formats::encode_hifloat8(acc[e], false)
                  : dtype == DType::float8_e5m2 ? formats::encode_float8_e5m2(acc[e])
                                                : formats::encode_float8_e4m3fn(acc[e]);
    }
    std::memcpy(dst, codes8.data(), un);
  }
}

}  // namespace detail::scatter

void execute(const ScatterPaKvCachePlan& plan) {
  using namespace detail::scatter;
  check_bound_data(plan);
  Scratch& sc = scratch();
  check_data(plan, sc.checked);  // every data rule before the first write (G1)
  if (is_compress(plan.scatter_mode)) {
    execute_compress(plan, sc);
  } else if (plan.num_tokens > 0) {
    execute_slots(plan, sc);
  }
}

}  // namespace kvscatter
