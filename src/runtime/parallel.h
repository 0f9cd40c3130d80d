// parallel_for over [0, n) in chunks of at least `grain` items on the process thread pool.
// The calling thread takes part. Work below two grains, a pool of one thread, and calls made
// while another parallel_for holds the pool (or from inside one) run inline, so the pool never
// deadlocks and decode-size calls pay no synchronisation. Chunks are split identically for any
// thread count; kernels keep results independent of it by never letting two chunks write the
// same bytes (see docs/semantics.md, "Determinism and duplicate slots").
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kvscatter::detail {

using RangeFn = void (*)(void* ctx, std::int64_t begin, std::int64_t end);

void parallel_for_impl(std::int64_t n, std::int64_t grain, RangeFn fn, void* ctx);

// Whether parallel_for(n, grain, ...) called now from this thread may run on more than one
// thread: at least two grains of work, a pool of two threads or more, not inside a job.
bool parallel_may_split(std::int64_t n, std::int64_t grain);

template <class F>
void parallel_for(std::int64_t n, std::int64_t grain, F&& f) {
  if (n <= 0) return;
  using Fn = std::remove_reference_t<F>;
  parallel_for_impl(
      n, grain, [](void* ctx, std::int64_t b, std::int64_t e) { (*static_cast<Fn*>(ctx))(b, e); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

// Grain that gives each chunk about `bytes_per_chunk` bytes of traffic.
inline std::int64_t grain_for_bytes(std::int64_t bytes_per_item,
                                    std::int64_t bytes_per_chunk = 256 * 1024) {
  if (bytes_per_item <= 0) return 1 << 20;
  const std::int64_t g = bytes_per_chunk / bytes_per_item;
  return g < 1 ? 1 : g;
}

}  // namespace kvscatter::detail
