// Byte movers shared by the per-target kernels (Highway -inl.h pattern: included once per
// target from inside a foreach_target translation unit). Every access is an unaligned vector
// load or store, or an aligned streaming store, so rows at any address and of any length are
// safe.
#if defined(KVSCATTER_CORE_BYTES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSCATTER_CORE_BYTES_INL_H_
#undef KVSCATTER_CORE_BYTES_INL_H_
#else
#define KVSCATTER_CORE_BYTES_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvscatter::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// n contiguous bytes. Below one vector: memcpy (a few bytes), not called for none (a call to
// the C library, twice a row for StreamBytes' empty ends where rows on whole lines stream one by
// one, which held a third of the streamed key-scale scatter's time on AMD Zen 2); otherwise
// full vectors, the last one overlapping the previous store so no scalar tail is needed.
HWY_INLINE void CopyBytes(unsigned char* HWY_RESTRICT dst, const unsigned char* HWY_RESTRICT src,
                          std::size_t n) {
  const hn::ScalableTag<std::uint8_t> d;
  const std::size_t N = hn::Lanes(d);
  if (n < N) {
    if (n != 0) std::memcpy(dst, src, n);
    return;
  }
  std::size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto a = hn::LoadU(d, src + i);
    const auto b = hn::LoadU(d, src + i + N);
    const auto c = hn::LoadU(d, src + i + 2 * N);
    const auto e = hn::LoadU(d, src + i + 3 * N);
    hn::StoreU(a, d, dst + i);
    hn::StoreU(b, d, dst + i + N);
    hn::StoreU(c, d, dst + i + 2 * N);
    hn::StoreU(e, d, dst + i + 3 * N);
  }
  for (; i + N <= n; i += N) hn::StoreU(hn::LoadU(d, src + i), d, dst + i);
  if (i < n) hn::StoreU(hn::LoadU(d, src + n - N), d, dst + n - N);
}

// CopyBytes with non-temporal stores for the whole 64-byte lines inside [dst, dst + n), for
// calls writing more than the caches hold: it skips the read-for-ownership of every line it
// fills. The partial lines at the ends use ordinary stores (a line never mixes both kinds within
// one call). The caller issues hwy::FlushStream() before publishing the bytes.
HWY_INLINE void StreamBytes(unsigned char* HWY_RESTRICT dst, const unsigned char* HWY_RESTRICT src,
                            std::size_t n) {
  constexpr std::size_t kLine = 64;
  const hn::ScalableTag<std::uint8_t> d;
  const std::size_t N = hn::Lanes(d);
  const std::size_t head = (kLine - reinterpret_cast<std::uintptr_t>(dst) % kLine) % kLine;
  if (n < head + 2 * kLine || N > kLine) {
    CopyBytes(dst, src, n);
    return;
  }
  const std::size_t end = head + (n - head) / kLine * kLine;
  CopyBytes(dst, src, head);
  for (std::size_t i = head; i < end; i += N) hn::Stream(hn::LoadU(d, src + i), d, dst + i);
  CopyBytes(dst + end, src + end, n - end);
}

// Rows bound for cache rows, for calls that write more than the caches hold (`stream`): each row is
// built in an L1 buffer right after what is left of the rows before it, and once the buffer holds
// kBurst bytes past the run's first line boundary, every whole 64-byte line of the cache that it
// covers goes out by non-temporal stores, which skip the line's read-for-ownership. Rows that
// follow each other in the cache form a run, whose first and last lines alone can be partial:
// those take ordinary stores, the last one once the run ends. Lines going out after every row,
// rather than four rows' worth at a time with a partial line wherever four rows ended, measured
// 1.08-1.11 x faster at 16,384 rows on AMD Zen 2 for kv_compress_epilog's fp8 rows. With no
// partial line inside a run, 2 KiB at a time made those rows 1.06-1.11 x (fp8_bf16) and 1.0-1.06 x
// (fp8_e8m0) faster than every row on AMD Zen 5 with AVX-512, and paged_latent_write's bfloat16
// fp8_ds_mla entries 1.05 x; level on AVX2, for hifloat8_fp4's shorter rows and for float16
// entries. 1, 1.5, 3, 4 and 8 KiB measured 2-13 % slower than 2 there. Rows go out in the order
// they were handed out (a repeated slot keeps its last writer), all of them, drained by
// hwy::FlushStream(), before the object dies. Without `stream`, or for rows over kMaxRow bytes
// (past the rows measured), Row hands out the cache row itself.
class StagedRows {
 public:
  static constexpr std::size_t kMaxRow = 3 << 10;

  StagedRows(bool stream, std::size_t row_bytes)
      : row_bytes_(row_bytes), on_(stream && row_bytes <= kMaxRow) {}
  StagedRows(const StagedRows&) = delete;
  StagedRows& operator=(const StagedRows&) = delete;

  // Where the row bound for cache row `out` is built.
  unsigned char* Row(unsigned char* out) {
    if (!on_) return out;
    if (out != dst_ + held_) {  // a new run: the last one's lines go out
      StreamBytes(dst_, buf_, held_);
      dst_ = out;
      held_ = 0;
    }
    return buf_ + held_;
  }

  // The row last handed out is complete.
  void Done() {
    if (!on_) return;
    held_ += row_bytes_;
    const std::size_t head = (kLine - reinterpret_cast<std::uintptr_t>(dst_) % kLine) % kLine;
    if (held_ < head + kBurst) return;  // not yet a burst's worth
    const std::size_t end = head + (held_ - head) / kLine * kLine;
    StreamBytes(dst_, buf_, end);  // ends on a line: nothing partial past `head`
    std::memcpy(buf_, buf_ + end, held_ - end);  // under a line, after `end` >= one line
    dst_ += end;
    held_ -= end;
  }

  ~StagedRows() {
    if (!on_) return;
    StreamBytes(dst_, buf_, held_);
    hwy::FlushStream();  // streaming stores are weakly ordered
  }

 private:
  static constexpr std::size_t kLine = 64;
  static constexpr std::size_t kBurst = 2 << 10;
  const std::size_t row_bytes_;
  const bool on_;
  unsigned char* dst_ = nullptr;  // where buf_[0] goes
  std::size_t held_ = 0;          // bytes in buf_ not yet written
  // Under head + kBurst bytes held before a row (head < kLine), and the row.
  alignas(64) unsigned char buf_[kMaxRow + kBurst + kLine];
};

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// The 32 16-bit values at x as two vectors for kernels that narrow them by in-block packs or
// shuffles: a holds values 0-7 and 16-23, b values 8-15 and 24-31, so that a pack or interleave
// of a and b, which works within 128-bit blocks, leaves its results in element order, with no
// lane-crossing permute after it (one takes about two cycles of the shuffle pipes on some CPUs,
// AMD Zen 2 among them, and ends the chain from a load to its store). Three overlapping loads
// (values 0-15, 8-23 and 16-31) and two blends, which the load ports and any ALU pipe run; four
// 16-byte broadcasts and two blends measured 2-8 % slower on Zen 2, one operation more.
HWY_INLINE void LoadCrossedPair(const std::uint16_t* HWY_RESTRICT x, __m256i& a, __m256i& b) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i mid = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16));
  a = _mm256_blend_epi32(lo, mid, 0xF0);
  b = _mm256_blend_epi32(mid, hi, 0xF0);
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// The index of a two-vector byte permute (vpermt2b, VBMI) that gathers the high bytes of two
// vectors of 16-bit lanes: byte i is byte 2i + 1 of the first (i < 32) or of the second (bit 6).
// Less one in every byte, it gathers their low bytes.
HWY_INLINE __m512i HighBytesOfWordPairs() {
  return _mm512_set_epi64(0x7F7D7B7977757371, 0x6F6D6B6967656361, 0x5F5D5B5957555351,
                          0x4F4D4B4947454341, 0x3F3D3B3937353331, 0x2F2D2B2927252321,
                          0x1F1D1B1917151311, 0x0F0D0B0907050301);
}
#endif

}  // namespace kvscatter::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVSCATTER_CORE_BYTES_INL_H_
