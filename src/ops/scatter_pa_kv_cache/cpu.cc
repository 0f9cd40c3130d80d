// The optimized ScatterPaKvCache kernel: resolves the plan into byte addresses, makes duplicate
// destinations deterministic (G4), and splits the rows over the thread pool. The bytes are moved
// by kernel_hwy.cc.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/streaming.h"
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
  std::vector<std::int64_t> batch_first;
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
    std::size_t i =
        static_cast<std::size_t>((static_cast<std::uint64_t>(s) * 0x9E3779B97F4A7C15ull) >> shift);
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
    // [num_blocks, num_heads, block_size, head_size], each axis at its own stride.
    j.head_pitch = cache.stride(1) * es;
    j.slot_pitch = cache.stride(2) * es;
    j.merged = src_heads_contiguous && (p.num_heads <= 1 || j.head_pitch == j.head_bytes);
  } else {
    // [num_blocks, block_size, num_heads, head_size], each axis at its own stride.
    j.slot_pitch = cache.stride(1) * es;
    j.head_pitch = cache.stride(2) * es;
    j.merged = src_heads_contiguous && (p.num_heads <= 1 || j.head_pitch == j.head_bytes);
  }
  return j;
}


void execute_slots(const ScatterPaKvCachePlan& p, Scratch& sc) {
  const bool nct = p.scatter_mode == ScatterMode::Nct;
  RowJob job;
  job.block_size = p.block_size;
  job.side[0] = side_job(p, p.key, p.key_cache, p.key_head_size, nct, p.strides[0], p.offsets[0]);
  if (p.value) {
    job.side[1] =
        side_job(p, *p.value, *p.value_cache, p.value_head_size, nct, p.strides[1], p.offsets[1]);
    job.num_sides = 2;
  }
  const std::vector<std::int64_t>& slots = sc.checked.slots;
  job.slots = slots.data();
  if (mark_overwritten(slots, sc)) job.skip = sc.skip.data();

  // Layouts whose slot rows are split into pieces far apart (PA_NZ chunks, NHSD heads) gain
  // from writing consecutive slots piece by piece.
  job.group = p.cache_mode == CacheMode::PA_NZ || p.scatter_mode == ScatterMode::NHSD;
  std::int64_t token_bytes = 0;
  for (int k = 0; k < job.num_sides; ++k)
    token_bytes += job.side[k].num_heads * job.side[k].head_bytes;
  job.stream = use_streaming_stores(p.num_tokens * token_bytes);
  parallel_for(p.num_tokens, grain_for_bytes(token_bytes),
               [&](std::int64_t b, std::int64_t e) { scatter_token_range(job, b, e); });
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

template <class T>
T load_as(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <class T>
void store_as(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// One Rope mean row being accumulated (S4): fp32 sums for floating types (token order, from
// +0.0, `x + acc`), wrapping (u)int32 sums for integer types.
class MeanAcc {
 public:
  void reset(DType dtype, std::int64_t n) {
    dtype_ = dtype;
    n_ = static_cast<std::size_t>(n);
    if (dtype_is_floating(dtype))
      f_.assign(n_, 0.0f);
    else
      u_.assign(n_, 0);
  }

  void add(const unsigned char* row) {
    const std::size_t n = n_;
    switch (dtype_) {
      case DType::float32:
        tmp_.resize(n);
        std::memcpy(tmp_.data(), row, n * 4);
        break;
      case DType::bfloat16:
      case DType::float16:
        tmp_.resize(n);
        c16_.resize(n);
        std::memcpy(c16_.data(), row, n * 2);
        if (dtype_ == DType::bfloat16)
          formats::bfloat16_to_float32(c16_.data(), tmp_.data(), n);
        else
          formats::float16_to_float32(c16_.data(), tmp_.data(), n);
        break;
      case DType::hifloat8:
      case DType::float8_e5m2:
      case DType::float8_e4m3fn: {
        const float* table = decode_table(dtype_);
        tmp_.resize(n);
        for (std::size_t e = 0; e < n; ++e) tmp_[e] = table[row[e]];
        break;
      }
      case DType::int8:
        for (std::size_t e = 0; e < n; ++e)
          u_[e] += static_cast<std::uint32_t>(
              static_cast<std::int32_t>(static_cast<std::int8_t>(row[e])));
        return;
      case DType::uint8:
        for (std::size_t e = 0; e < n; ++e) u_[e] += row[e];
        return;
      case DType::int16:
        for (std::size_t e = 0; e < n; ++e)
          u_[e] += static_cast<std::uint32_t>(
              static_cast<std::int32_t>(load_as<std::int16_t>(row + 2 * e)));
        return;
      case DType::uint16:
        for (std::size_t e = 0; e < n; ++e) u_[e] += load_as<std::uint16_t>(row + 2 * e);
        return;
      default:  // int32, uint32: the same wrapping 32-bit sum
        for (std::size_t e = 0; e < n; ++e) u_[e] += load_as<std::uint32_t>(row + 4 * e);
        return;
    }
    for (std::size_t e = 0; e < n; ++e) f_[e] = tmp_[e] + f_[e];
  }

  void store(std::int64_t w, unsigned char* dst) {
    const std::size_t n = n_;
    switch (dtype_) {
      case DType::int8:
      case DType::int16:
      case DType::int32: {
        // Division truncating toward zero, then the low bits.
        const auto wi = static_cast<std::int32_t>(w);
        for (std::size_t e = 0; e < n; ++e) {
          const std::int32_t q = static_cast<std::int32_t>(u_[e]) / wi;
          if (dtype_ == DType::int8)
            dst[e] = static_cast<unsigned char>(q);
          else if (dtype_ == DType::int16)
            store_as(dst + 2 * e, static_cast<std::int16_t>(q));
          else
            store_as(dst + 4 * e, q);
        }
        return;
      }
      case DType::uint8:
      case DType::uint16:
      case DType::uint32: {
        const auto wu = static_cast<std::uint32_t>(w);
        for (std::size_t e = 0; e < n; ++e) {
          const std::uint32_t q = u_[e] / wu;
          if (dtype_ == DType::uint8)
            dst[e] = static_cast<unsigned char>(q);
          else if (dtype_ == DType::uint16)
            store_as(dst + 2 * e, static_cast<std::uint16_t>(q));
          else
            store_as(dst + 4 * e, q);
        }
        return;
      }
      default:
        break;
    }
    const auto wf = static_cast<float>(w);
    for (std::size_t e = 0; e < n; ++e) f_[e] = f_[e] / wf;  // one IEEE division per element
    switch (dtype_) {
      case DType::float32:
        std::memcpy(dst, f_.data(), n * 4);
        return;
      case DType::bfloat16:
      case DType::float16:
        c16_.resize(n);
        if (dtype_ == DType::bfloat16)
          formats::float32_to_bfloat16(f_.data(), c16_.data(), n);
        else
          formats::float32_to_float16(f_.data(), c16_.data(), n);
        std::memcpy(dst, c16_.data(), n * 2);
        return;
      case DType::hifloat8:  // round half away from zero; infinities and NaN kept
        for (std::size_t e = 0; e < n; ++e) dst[e] = formats::encode_hifloat8(f_[e], false);
        return;
      case DType::float8_e5m2:
        for (std::size_t e = 0; e < n; ++e) dst[e] = formats::encode_float8_e5m2(f_[e]);
        return;
      default:
        for (std::size_t e = 0; e < n; ++e) dst[e] = formats::encode_float8_e4m3fn(f_[e]);
        return;
    }
  }

 private:
  DType dtype_ = DType::float32;
  std::size_t n_ = 0;
  std::vector<float> f_, tmp_;
  std::vector<std::uint32_t> u_;
  std::vector<std::uint16_t> c16_;
};

unsigned char* cache_row(const CompressJob& job, const CompressSide& s, std::int64_t row) {
  return s.dst + (row / job.block_size) * s.block_stride + (row % job.block_size) * s.row_bytes;
}

// Every Rope mean row of batch b on one side. The batch's tokens are read in order (a token's
// heads are adjacent in the source) and each head whose window holds the token accumulates it,
// so every head keeps its own token-order sum.
void batch_mean_rows(const CompressJob& job, const CompressSide& s, std::int64_t b) {
  thread_local std::vector<MeanAcc> accs;
  const std::int64_t nh = job.num_heads;
  const CompressRun* runs = job.all_runs + b * nh;
  if (static_cast<std::int64_t>(accs.size()) < nh) accs.resize(static_cast<std::size_t>(nh));
  std::int64_t lo = -1, hi = -1;
  for (std::int64_t h = 0; h < nh; ++h) {
    const CompressRun& r = runs[h];
    if (r.rows == 0 || r.window == 0) continue;
    accs[static_cast<std::size_t>(h)].reset(s.dtype, s.head_size);
    lo = lo < 0 ? r.offset : std::min(lo, r.offset);
    hi = std::max(hi, r.offset + r.window);
  }
  if (lo < 0) return;
  const unsigned char* src0 =
      s.src + (job.packed ? job.batch_first[b] * s.src_token : b * s.src_batch);
  for (std::int64_t pos = lo; pos < hi; ++pos) {
    for (std::int64_t h = 0; h < nh; ++h) {
      const CompressRun& r = runs[h];
      if (r.rows == 0 || pos < r.offset || pos >= r.offset + r.window) continue;
      accs[static_cast<std::size_t>(h)].add(src0 + pos * s.src_token + h * s.src_head);
    }
  }
  for (std::int64_t h = 0; h < nh; ++h) {
    const CompressRun& r = runs[h];
    if (r.rows == 0 || r.window == 0) continue;
    accs[static_cast<std::size_t>(h)].store(r.window, cache_row(job, s, r.start + r.offset));
  }
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
  if (overlap) {
    compress_row_range(job, 0, total);
    return;
  }
  // Disjoint runs: every row has one writer, so any order gives the same bytes. Walk the source
  // tokens in order (all heads of a token at once), then the Rope mean rows.
  std::int64_t row_bytes = 0;
  for (int k = 0; k < job.num_sides; ++k) row_bytes += job.side[k].row_bytes;
  job.all_runs = sc.checked.runs.data();
  job.num_heads = p.num_heads;
  job.batch = p.batch;
  job.seq_len = p.seq_len;
  sc.batch_first.assign(1, 0);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    sc.batch_first.push_back(sc.batch_first.back() + sc.checked.runs[b * p.num_heads].seq_len);
  }
  job.batch_first = sc.batch_first.data();
  const std::int64_t sources = job.packed ? p.num_tokens : p.batch * p.seq_len;
  parallel_for(sources, grain_for_bytes(row_bytes * std::max<std::int64_t>(p.num_heads, 1)),
               [&](std::int64_t b, std::int64_t e) { compress_token_range(job, b, e); });
  if (p.scatter_mode != ScatterMode::Rope) return;
  parallel_for(p.batch, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      for (int k = 0; k < job.num_sides; ++k) batch_mean_rows(job, job.side[k], b);
    }
  });
}

}  // namespace

void rope_mean_row(DType dtype, const unsigned char* src, std::int64_t stride, std::int64_t w,
                   std::int64_t n, unsigned char* dst) {
  thread_local MeanAcc acc;
  acc.reset(dtype, n);
  for (std::int64_t k = 0; k < w; ++k) acc.add(src + k * stride);
  acc.store(w, dst);
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
