// The optimized kernel's job descriptors and dispatched entry points. execute.cc resolves a plan
// into byte addresses and pitches; kernel.cc (compiled once per SIMD target, chosen at run time)
// moves the bytes.
#pragma once

#include <cstdint>

#include "core/slots.h"
#include "kvscatter/dtype.h"
#include "ops/scatter_pa_kv_cache/internal.h"

namespace kvscatter::detail::scatter {

// One side (key or value) of a slot-per-token mode. Every quantity is in bytes.
// Token t, head h is read at src + t*src_token + h*src_head (head_bytes contiguous bytes).
// Slot s starts at split.address(dst, block_stride, slot_pitch, s); head h of
// the slot starts head_pitch further. A head is one contiguous run (chunk_pitch == 0: Norm,
// NHSD) or head_bytes/32 chunks of 32 bytes, chunk_pitch apart (PA_NZ).
struct SideJob {
  const unsigned char* src = nullptr;
  std::int64_t src_token = 0, src_head = 0;
  unsigned char* dst = nullptr;
  std::int64_t block_stride = 0, slot_pitch = 0, head_pitch = 0, chunk_pitch = 0;
  std::int64_t head_bytes = 0, num_heads = 0;
  bool merged = false;  // all heads form one run (or one uniform chunk sequence)
};

struct RowJob {
  SideJob side[2];
  int num_sides = 1;
  SlotSplitter split;
  const std::int64_t* slots = nullptr;  // per token; < 0: padding, or a later token writes it
  bool group = false;                   // write runs of consecutive slots piece-major
  bool stream = false;                  // groups may use non-temporal stores (large calls)
};

// Compress modes: row j of a run is token run_source(j) of its batch (or the Rope mean row).
struct CompressSide {
  const unsigned char* src = nullptr;
  std::int64_t src_batch = 0, src_token = 0, src_head = 0;  // 4-D keys use src_batch
  unsigned char* dst = nullptr;
  std::int64_t block_stride = 0, row_bytes = 0, head_size = 0;
  DType dtype = DType::float32;
};

struct CompressJob {
  CompressSide side[2];
  int num_sides = 1;
  bool packed = true;  // 3-D key
  ScatterMode mode = ScatterMode::Alibi;
  SlotSplitter split;
  // Row-major order (compress_row_range): the runs that write rows, in task order, and the
  // exclusive prefix sum of their rows.
  const CompressRun* runs = nullptr;
  const std::int64_t* first_row = nullptr;
  std::int64_t num_runs = 0;
  // Source-major order (compress_token_range): every (batch, head) run (rows == 0: none), the
  // first token of each batch (packed keys, batch + 1 entries) or the padded length S (4-D).
  const CompressRun* all_runs = nullptr;
  const std::int64_t* batch_first = nullptr;
  std::int64_t batch = 0, num_heads = 0, seq_len = 0;
};

// Dispatched entry points: tokens [begin, end) / flattened rows [begin, end).
void scatter_token_range(const RowJob& job, std::int64_t begin, std::int64_t end);
void compress_row_range(const CompressJob& job, std::int64_t begin, std::int64_t end);
// Source tokens [begin, end) (packed index, or b * S + position for 4-D keys): every row they
// feed except Rope mean rows. Only for runs that do not overlap, where the order is free.
void compress_token_range(const CompressJob& job, std::int64_t begin, std::int64_t end);

// Rope mean row (see docs/semantics.md, "scatter_pa_kv_cache"): the mean of window rows at src,
// src + stride, ..., written to dst.
void rope_mean_row(DType dtype, const unsigned char* src, std::int64_t stride, std::int64_t window,
                   std::int64_t head_size, unsigned char* dst);
// Every Rope mean row of batch b on one side.
void batch_mean_rows(const CompressJob& job, const CompressSide& side, std::int64_t b);

}  // namespace kvscatter::detail::scatter
