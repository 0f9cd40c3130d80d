// Realistic slot mappings and cache storage for the benchmarks (the `kvscatter bench` tables
// and the Google Benchmark targets share them, so both measure the same access pattern).
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <numeric>
#include <random>
#include <vector>

namespace kvscatter::cli {

// Allocates the bench's tensors (inputs and caches) as the front doors' are: every block 64-byte
// aligned, as PyTorch's and JAX's CPU allocators align theirs, and blocks of 4 MiB or more 2 MiB
// aligned with transparent huge pages advised, as NumPy does for large arrays. Engines' caches
// are large allocations like these; PA_NZ writes touch one 4 KiB page per 32-byte chunk, so on
// small pages a decode call would measure page walks rather than the kernel. malloc's 16-byte
// alignment (a NumPy array under 4 MiB) puts every 64-byte vector access of a row across two
// cache lines, which costs the quantizers 3-8 % and memcpy nothing (bench/performance_notes.md).
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}  // NOLINT: rebinding
  T* allocate(std::size_t n) {
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    const std::size_t bytes = n * sizeof(T);
    if (bytes < 2 * kHuge) {
      if (void* p = std::aligned_alloc(64, (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64)) {
        return static_cast<T*>(p);
      }
      throw std::bad_alloc();
    }
    void* p = std::aligned_alloc(kHuge, (bytes + kHuge - 1) / kHuge * kHuge);
    if (p == nullptr) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using TensorVector = std::vector<T, HugePageAllocator<T>>;

// Slots of `tokens` tokens spread over a shuffled set of blocks, as a paged allocator hands
// them out: consecutive tokens share a block, blocks are scattered.
inline std::vector<std::int64_t> paged_slots(std::int64_t tokens, std::int64_t block_size,
                                             std::int64_t num_blocks, std::uint64_t seed = 42) {
  std::vector<std::int64_t> blocks(static_cast<std::size_t>(num_blocks));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(seed));
  std::vector<std::int64_t> slots(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) {
    slots[static_cast<std::size_t>(t)] =
        blocks[static_cast<std::size_t>(t / block_size)] * block_size + t % block_size;
  }
  return slots;
}

// Padding tokens of a decode batch of `tokens` sequences: batches are rounded up (CUDA-graph
// style) and the extra entries carry slot -1; one in eight here.
inline std::int64_t decode_padding(std::int64_t tokens) { return tokens / 8; }

// A decode step: every token is the next one of its own sequence, at a random offset of a
// distinct random block; the last decode_padding(tokens) entries are -1 (skipped).
// Needs num_blocks >= tokens.
inline std::vector<std::int64_t> decode_slots(std::int64_t tokens, std::int64_t block_size,
                                              std::int64_t num_blocks, std::uint64_t seed = 42) {
  std::vector<std::int64_t> blocks(static_cast<std::size_t>(num_blocks));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::uniform_int_distribution<std::int64_t> offset(0, block_size - 1);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(tokens), -1);
  const std::int64_t valid = tokens - decode_padding(tokens);
  for (std::int64_t t = 0; t < valid; ++t) {
    slots[static_cast<std::size_t>(t)] =
        blocks[static_cast<std::size_t>(t)] * block_size + offset(rng);
  }
  return slots;
}

// Decode sizes (up to 64 tokens) get decode_slots, larger batches are a prefill of one
// sequence through paged_slots.
constexpr std::int64_t kMaxDecodeTokens = 64;

inline std::vector<std::int64_t> realistic_slots(std::int64_t tokens, std::int64_t block_size,
                                                 std::int64_t num_blocks) {
  return tokens <= kMaxDecodeTokens ? decode_slots(tokens, block_size, num_blocks)
                                    : paged_slots(tokens, block_size, num_blocks);
}

// Tokens of a realistic_slots() mapping that are written (not padding).
inline std::int64_t written_tokens(std::int64_t tokens) {
  return tokens <= kMaxDecodeTokens ? tokens - decode_padding(tokens) : tokens;
}

}  // namespace kvscatter::cli
