// How many of each vector operation the quantizers use one core issues per cycle, alone and
// mixed half and half with another: the pipe model behind the performance notes' bounds (how
// many cycles a row's operations take at the least). Twelve independent chains of the
// operation (or six of each of the two, alternating) per loop step, so that throughput, not
// latency, decides wherever six chains cover an operation's latency; a pair that issues faster
// mixed than either alone runs on different pipes. x86-64 only: 512-bit rows need AVX-512 with
// VBMI and VNNI, 256-bit rows AVX2; rows the CPU cannot run are skipped with a message.
// Run: build/release/bench/simd_ports_bench
//   counter ops_per_cycle: operations issued per core cycle; the cycle is measured first by a
//   chain of dependent scalar adds, one per cycle on every x86 core.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>

// g++ 12's own headers fill the unused operand of several AVX-512 intrinsics with an
// "undefined" vector that its -Wuninitialized then reports in these loops.
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kvscatter {
namespace {

// Core cycles per nanosecond: dependent register adds, the fastest of five runs of 2^24 * 8.
double cycles_per_ns() {
  static const double rate = [] {
    double best = 0;
    for (int run = 0; run < 5; ++run) {
      std::uint64_t x = 0;
      const auto t = std::chrono::steady_clock::now();
      for (int i = 0; i < (1 << 24); ++i) {
        asm volatile(
            "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
            "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
            : "+r"(x));
      }
      const double ns =
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t).count();
      best = std::max(best, 8.0 * (1 << 24) / ns);
    }
    return best;
  }();
  return rate;
}

constexpr int kSteps = 1024;  // loop steps per timed call: 12 * 1024 operations

#define KVS_PORTS_512 __attribute__((target("avx512bw,avx512vl,avx512vbmi,avx512vnni")))
#define KVS_PORTS_256 __attribute__((target("avx2")))

// Twelve chains; even ones take op A, odd ones op B. The empty asm keeps every chain live and
// stops the compiler from folding steps together.
#define KVS_PORTS_KERNEL(NAME, ATTR, VEC, SET1, A, B)                                       \
  ATTR void NAME() {                                                                        \
    VEC k = SET1(0x01020304);                                                               \
    VEC v0 = SET1(1), v1 = SET1(2), v2 = SET1(3), v3 = SET1(4), v4 = SET1(5), v5 = SET1(6); \
    VEC v6 = SET1(7), v7 = SET1(8), v8 = SET1(9), v9 = SET1(10), v10 = SET1(11);            \
    VEC v11 = SET1(12);                                                                     \
    for (int i = 0; i < kSteps; ++i) {                                                      \
      KVS_PORTS_PAIR(A, B, v0, v1)                                                          \
      KVS_PORTS_PAIR(A, B, v2, v3)                                                          \
      KVS_PORTS_PAIR(A, B, v4, v5)                                                          \
      KVS_PORTS_PAIR(A, B, v6, v7)                                                          \
      KVS_PORTS_PAIR(A, B, v8, v9)                                                          \
      KVS_PORTS_PAIR(A, B, v10, v11)                                                        \
      asm volatile(""                                                                       \
                   : "+v"(v0), "+v"(v1), "+v"(v2), "+v"(v3), "+v"(v4), "+v"(v5), "+v"(v6),  \
                     "+v"(v7), "+v"(v8), "+v"(v9), "+v"(v10), "+v"(v11), "+v"(k));          \
    }                                                                                       \
  }
#define KVS_PORTS_PAIR(A, B, a, b) \
  a = A(a, k);                     \
  b = B(b, k);

// 512-bit operations, each as op(v, k) with v the chain's vector.
#define Z_ADD(v, k) _mm512_add_epi16(v, k)
#define Z_ADD_MERGE(v, k) _mm512_mask_add_epi16(v, 0x55555555u, v, k)  // merge-masked
#define Z_ADD_ZERO(v, k) _mm512_maskz_add_epi16(0x55555555u, v, k)     // zero-masked
#define Z_ADDS(v, k) _mm512_adds_epu16(v, k)
#define Z_SRLI(v, k) _mm512_srli_epi16(v, 5)
#define Z_MAXU8(v, k) _mm512_max_epu8(v, k)
#define Z_UNPACK(v, k) _mm512_unpacklo_epi16(v, k)
#define Z_BLEND(v, k) _mm512_mask_blend_epi8(0x5555555555555555ull, v, k)
#define Z_PERMW(v, k) _mm512_permutexvar_epi16(k, v)
#define Z_PERMT2B(v, k) _mm512_permutex2var_epi8(v, k, v)
#define Z_MULTISHIFT(v, k) _mm512_multishift_epi64_epi8(k, v)
#define Z_DPBUSD(v, k) _mm512_dpbusd_epi32(k, v, k)
#define Z_PACKUS(v, k) _mm512_packus_epi16(v, k)
#define Z_PERMD(v, k) _mm512_permutexvar_epi32(k, v)
#define Z_PSHUFB(v, k) _mm512_shuffle_epi8(v, k)

// 256-bit operations.
#define Y_ADD(v, k) _mm256_add_epi16(v, k)
#define Y_ADDS(v, k) _mm256_adds_epu16(v, k)
#define Y_SRLI(v, k) _mm256_srli_epi16(v, 5)
#define Y_PSHUFB(v, k) _mm256_shuffle_epi8(v, k)
#define Y_PACKUS(v, k) _mm256_packus_epi16(v, k)
#define Y_BLENDV(v, k) _mm256_blendv_epi8(v, k, v)
#define Y_MADDUBS(v, k) _mm256_maddubs_epi16(v, k)
#define Y_PERMD(v, k) _mm256_permutevar8x32_epi32(v, k)

#define KVS_PORTS_512_KERNEL(NAME, A, B) \
  KVS_PORTS_KERNEL(NAME, KVS_PORTS_512, __m512i, _mm512_set1_epi32, A, B)
#define KVS_PORTS_256_KERNEL(NAME, A, B) \
  KVS_PORTS_KERNEL(NAME, KVS_PORTS_256, __m256i, _mm256_set1_epi32, A, B)

KVS_PORTS_512_KERNEL(z_add, Z_ADD, Z_ADD)
KVS_PORTS_512_KERNEL(z_add_merge, Z_ADD_MERGE, Z_ADD_MERGE)
KVS_PORTS_512_KERNEL(z_add_zero, Z_ADD_ZERO, Z_ADD_ZERO)
KVS_PORTS_512_KERNEL(z_adds, Z_ADDS, Z_ADDS)
KVS_PORTS_512_KERNEL(z_srli, Z_SRLI, Z_SRLI)
KVS_PORTS_512_KERNEL(z_maxu8, Z_MAXU8, Z_MAXU8)
KVS_PORTS_512_KERNEL(z_unpack, Z_UNPACK, Z_UNPACK)
KVS_PORTS_512_KERNEL(z_blend, Z_BLEND, Z_BLEND)
KVS_PORTS_512_KERNEL(z_permw, Z_PERMW, Z_PERMW)
KVS_PORTS_512_KERNEL(z_permt2b, Z_PERMT2B, Z_PERMT2B)
KVS_PORTS_512_KERNEL(z_multishift, Z_MULTISHIFT, Z_MULTISHIFT)
KVS_PORTS_512_KERNEL(z_dpbusd, Z_DPBUSD, Z_DPBUSD)
KVS_PORTS_512_KERNEL(z_packus, Z_PACKUS, Z_PACKUS)
KVS_PORTS_512_KERNEL(z_permd, Z_PERMD, Z_PERMD)
KVS_PORTS_512_KERNEL(z_pshufb, Z_PSHUFB, Z_PSHUFB)
KVS_PORTS_512_KERNEL(z_adds_srli, Z_ADDS, Z_SRLI)
KVS_PORTS_512_KERNEL(z_adds_packus, Z_ADDS, Z_PACKUS)
KVS_PORTS_512_KERNEL(z_adds_multishift, Z_ADDS, Z_MULTISHIFT)
KVS_PORTS_512_KERNEL(z_srli_multishift, Z_SRLI, Z_MULTISHIFT)
KVS_PORTS_512_KERNEL(z_srli_packus, Z_SRLI, Z_PACKUS)
KVS_PORTS_512_KERNEL(z_multishift_dpbusd, Z_MULTISHIFT, Z_DPBUSD)
KVS_PORTS_512_KERNEL(z_multishift_packus, Z_MULTISHIFT, Z_PACKUS)
KVS_PORTS_512_KERNEL(z_permw_packus, Z_PERMW, Z_PACKUS)

KVS_PORTS_256_KERNEL(y_add, Y_ADD, Y_ADD)
KVS_PORTS_256_KERNEL(y_adds, Y_ADDS, Y_ADDS)
KVS_PORTS_256_KERNEL(y_srli, Y_SRLI, Y_SRLI)
KVS_PORTS_256_KERNEL(y_pshufb, Y_PSHUFB, Y_PSHUFB)
KVS_PORTS_256_KERNEL(y_packus, Y_PACKUS, Y_PACKUS)
KVS_PORTS_256_KERNEL(y_blendv, Y_BLENDV, Y_BLENDV)
KVS_PORTS_256_KERNEL(y_maddubs, Y_MADDUBS, Y_MADDUBS)
KVS_PORTS_256_KERNEL(y_permd, Y_PERMD, Y_PERMD)
KVS_PORTS_256_KERNEL(y_adds_pshufb, Y_ADDS, Y_PSHUFB)
KVS_PORTS_256_KERNEL(y_pshufb_blendv, Y_PSHUFB, Y_BLENDV)
KVS_PORTS_256_KERNEL(y_srli_maddubs, Y_SRLI, Y_MADDUBS)

bool cpu_has_512() {
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vnni");
}
bool cpu_has_256() { return __builtin_cpu_supports("avx2"); }

void run_ports(benchmark::State& state, void (*kernel)(), bool usable) {
  if (!usable) {
    state.SkipWithError("this CPU lacks the instructions of this row");
    return;
  }
  const double rate = cycles_per_ns();
  double best = 1e30;
  for (auto _ : state) {
    const auto t = std::chrono::steady_clock::now();
    kernel();
    best = std::min(
        best,
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t).count());
  }
  // The fastest call: on a shared machine a preemption would otherwise decide the figure.
  state.counters["ops_per_cycle"] = 12.0 * kSteps / (best * rate);
}

#define KVS_PORTS_ROW(NAME, HAS)                                             \
  void BM_##NAME(benchmark::State& state) { run_ports(state, NAME, HAS()); } \
  BENCHMARK(BM_##NAME)

KVS_PORTS_ROW(z_add, cpu_has_512);
KVS_PORTS_ROW(z_add_merge, cpu_has_512);
KVS_PORTS_ROW(z_add_zero, cpu_has_512);
KVS_PORTS_ROW(z_adds, cpu_has_512);
KVS_PORTS_ROW(z_srli, cpu_has_512);
KVS_PORTS_ROW(z_maxu8, cpu_has_512);
KVS_PORTS_ROW(z_unpack, cpu_has_512);
KVS_PORTS_ROW(z_blend, cpu_has_512);
KVS_PORTS_ROW(z_permw, cpu_has_512);
KVS_PORTS_ROW(z_permt2b, cpu_has_512);
KVS_PORTS_ROW(z_multishift, cpu_has_512);
KVS_PORTS_ROW(z_dpbusd, cpu_has_512);
KVS_PORTS_ROW(z_packus, cpu_has_512);
KVS_PORTS_ROW(z_permd, cpu_has_512);
KVS_PORTS_ROW(z_pshufb, cpu_has_512);
KVS_PORTS_ROW(z_adds_srli, cpu_has_512);
KVS_PORTS_ROW(z_adds_packus, cpu_has_512);
KVS_PORTS_ROW(z_adds_multishift, cpu_has_512);
KVS_PORTS_ROW(z_srli_multishift, cpu_has_512);
KVS_PORTS_ROW(z_srli_packus, cpu_has_512);
KVS_PORTS_ROW(z_multishift_dpbusd, cpu_has_512);
KVS_PORTS_ROW(z_multishift_packus, cpu_has_512);
KVS_PORTS_ROW(z_permw_packus, cpu_has_512);
KVS_PORTS_ROW(y_add, cpu_has_256);
KVS_PORTS_ROW(y_adds, cpu_has_256);
KVS_PORTS_ROW(y_srli, cpu_has_256);
KVS_PORTS_ROW(y_pshufb, cpu_has_256);
KVS_PORTS_ROW(y_packus, cpu_has_256);
KVS_PORTS_ROW(y_blendv, cpu_has_256);
KVS_PORTS_ROW(y_maddubs, cpu_has_256);
KVS_PORTS_ROW(y_permd, cpu_has_256);
KVS_PORTS_ROW(y_adds_pshufb, cpu_has_256);
KVS_PORTS_ROW(y_pshufb_blendv, cpu_has_256);
KVS_PORTS_ROW(y_srli_maddubs, cpu_has_256);

}  // namespace
}  // namespace kvscatter
#endif  // __x86_64__

BENCHMARK_MAIN();
