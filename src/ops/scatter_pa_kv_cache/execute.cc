// execute(plan) of scatter_pa_kv_cache: re-checks the bound pointers and the data, resolves the
// plan into the kernel's jobs (byte addresses and pitches), makes duplicate destinations
// deterministic, and splits the rows over the thread pool. kernel.cc moves the bytes.
#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/overlap.h"
#include "core/slots.h"
#include "core/streaming.h"
#include "ops/scatter_pa_kv_cache/internal.h"
#include "ops/scatter_pa_kv_cache/kernel.h"
#include "runtime/parallel.h"

namespace kvscatter {
namespace detail::scatter {
namespace {

// Per-thread scratch reused across calls, so a decode-size call allocates nothing.
struct Scratch {
  CheckedData checked;
  std::vector<CompressRun> runs;
  std::vector<std::int64_t> first_row;
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  std::vector<std::int64_t> batch_first;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
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
  job.split = SlotSplitter(p.block_size);
  job.side[0] = side_job(p, p.key, p.key_cache, p.key_head_size, nct, p.strides[0], p.offsets[0]);
  if (p.value) {
    job.side[1] =
        side_job(p, *p.value, *p.value_cache, p.value_head_size, nct, p.strides[1], p.offsets[1]);
    job.num_sides = 2;
  }
  // Duplicate slots keep their last writer only, so the writes left touch disjoint bytes and
  // any split over threads (or tile order) gives the same result.
  std::vector<std::int64_t>& slots = sc.checked.slots;
  keep_last_writers(slots, p.num_slots);
  job.slots = slots.data();

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
  job.split = SlotSplitter(p.block_size);
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

  // Overlapping runs (the later run wins) are rare; they run in task order on one thread.
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
}  // namespace detail::scatter

void execute(const ScatterPaKvCachePlan& plan) {
  using namespace detail::scatter;
  check_bound_data(plan);
  // Overlapping outputs are rejected, overlapping inputs read from a copy (docs/semantics.md).
  const bool nct = plan.scatter_mode == ScatterMode::Nct;
  const auto nct_rows = [nct](const auto& v) { return v && nct ? v->dim(0) * v->stride(0) : 0; };
  detail::execute_staged(
      plan,
      [&](auto& p) {
        return detail::Operands{
            {{{&p.key_cache, "key_cache"}, {detail::opt(p.value_cache), "value_cache"}}},
            {{{&p.key, "key", nct_rows(&p.key)},
              {detail::opt(p.value), "value", nct_rows(detail::opt(p.value))},
              {&p.slot_mapping, "slot_mapping"},
              {detail::opt(p.compress_lens), "compress_lens"},
              {detail::opt(p.compress_seq_offsets), "compress_seq_offsets"},
              {detail::opt(p.seq_lens), "seq_lens"}}}};
      },
      [](const ScatterPaKvCachePlan& p) {
        Scratch& sc = scratch();
        check_data(p, sc.checked);  // every data rule before the first write
        if (is_compress(p.scatter_mode)) {
          execute_compress(p, sc);
        } else if (p.num_tokens > 0) {
          execute_slots(p, sc);
        }
      });
}

}  // namespace kvscatter
