// Pieces of scatter_pa_kv_cache shared by plan.cc (validation), reference.cc (the oracle),
// kernel.cc and execute.cc: the checked data and the data-dependent checks.
#pragma once

#include <cstdint>
#include <vector>

#include "core/overlap.h"
#include "kvscatter/scatter_pa_kv_cache.h"

namespace kvscatter::detail::scatter {

inline bool is_compress(ScatterMode m) noexcept {
  return m == ScatterMode::Alibi || m == ScatterMode::Rope || m == ScatterMode::Omni;
}

// One (batch, head) task of a compress mode after its checks, with the "no compression" cases
// normalised: window == 0 means every one of the seq_len tokens is written.
struct CompressRun {
  std::int64_t b = 0, h = 0;
  std::int64_t start = 0;  // first cache row (slot); < 0: the run is skipped
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

// Null data pointers of the bound views (null_pointer); run by plan and by every execute(),
// since an engine may rebind pointers between calls.
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

// The operands of a call, outputs first (see core/overlap.h); P is the plan, const or not.
template <class P>
[[gnu::always_inline]] inline Operands operands(P& p) {
  const bool nct = p.scatter_mode == ScatterMode::Nct;
  const auto nct_rows = [nct](const auto& v) { return v && nct ? v->dim(0) * v->stride(0) : 0; };
  return Operands{{{{&p.key_cache, "key_cache"}, {opt(p.value_cache), "value_cache"}}},
                  {{{&p.key, "key", nct_rows(&p.key)},
                    {opt(p.value), "value", nct_rows(opt(p.value))},
                    {&p.slot_mapping, "slot_mapping"},
                    {opt(p.compress_lens), "compress_lens"},
                    {opt(p.compress_seq_offsets), "compress_seq_offsets"},
                    {opt(p.seq_lens), "seq_lens"}}}};
}

}  // namespace kvscatter::detail::scatter
