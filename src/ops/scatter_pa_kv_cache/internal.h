// Pieces of ScatterPaKvCache shared by plan.cc (validation), reference.cc (the oracle) and
// cpu.cc (the optimized kernel): index reading and the data-dependent checks of G1/G5/G6/S9.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kvscatter/scatter_pa_kv_cache.h"

namespace kvscatter::detail::scatter {

inline bool is_compress(ScatterMode m) noexcept {
  return m == ScatterMode::Alibi || m == ScatterMode::Rope || m == ScatterMode::Omni;
}

const char* cache_mode_name(CacheMode m) noexcept;
const char* scatter_mode_name(ScatterMode m) noexcept;

// Element i (row-major flat index) of a rank-1 or rank-2 int32/int64 index tensor, read at its
// true width (G7) through memcpy so an unaligned buffer is never accessed through a typed
// pointer.
class IndexReader {
 public:
  IndexReader() = default;
  explicit IndexReader(const TensorView& t)
      : data_(static_cast<const unsigned char*>(t.data)),
        wide_(t.dtype == DType::int64),
        s0_(t.rank >= 1 ? t.stride(0) : 0),
        s1_(t.rank == 2 ? t.stride(1) : 0),
        d1_(t.rank == 2 ? t.dim(1) : 1) {}

  std::int64_t operator[](std::int64_t i) const noexcept {
    const std::int64_t off = d1_ == 1 ? i * s0_ : (i / d1_) * s0_ + (i % d1_) * s1_;
    if (wide_) {
      std::int64_t v;
      std::memcpy(&v, data_ + off * 8, 8);
      return v;
    }
    std::int32_t v;
    std::memcpy(&v, data_ + off * 4, 4);
    return v;
  }

 private:
  const unsigned char* data_ = nullptr;
  bool wide_ = false;
  std::int64_t s0_ = 0, s1_ = 0, d1_ = 1;
};

// One (batch, head) task of a compress mode after the S9 checks, with the "no compression"
// cases normalised as the spec's pseudo-code does: window == 0 after normalisation means every
// one of the seq_len tokens is written.
struct CompressRun {
  std::int64_t b = 0, h = 0;
  std::int64_t start = 0;  // first cache row (slot); < 0: the run is skipped (G5)
  std::int64_t seq_len = 0;
  std::int64_t offset = 0;  // Rope/Omni: first window position (== seq_len when not compressed)
  std::int64_t window = 0;  // tokens folded (Rope) or dropped (Omni), or kept (Alibi)
  std::int64_t base = 0;    // packed 3-D key: row of the batch's first token
  std::int64_t rows = 0;    // cache rows written (0 when skipped)
};

// What the data-dependent validation learned; kernels may reuse it.
struct CheckedData {
  std::vector<std::int64_t> slots;  // slot-per-token modes: slot_mapping, widened
  std::vector<CompressRun> runs;    // compress modes: one per (batch, head), task order
};

// Null data pointers of the bound views (161001); run by every execute() since an engine may
// rebind pointers between calls.
void check_bound_data(const ScatterPaKvCachePlan& plan);

// Every data-dependent rule (slot range, compress lengths, offsets, seq_lens) over all tokens,
// before any write. Throws kvscatter::Error naming the offending element.
void check_data(const ScatterPaKvCachePlan& plan, CheckedData& out);

// Source position (token index inside the batch) of row j of a run, or -1 for the Rope mean row.
inline std::int64_t run_source(ScatterMode mode, const CompressRun& r, std::int64_t j) noexcept {
  if (mode == ScatterMode::Alibi) return r.seq_len - r.window + j;
  if (r.window == 0 || j < r.offset) return j;
  if (mode == ScatterMode::Rope) return j == r.offset ? -1 : j - 1 + r.window;
  return j + r.window;  // Omni: the window is dropped
}

}  // namespace kvscatter::detail::scatter
