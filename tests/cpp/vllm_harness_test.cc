// Runs the harness cases of paged_kv_write, paged_cache_gather and paged_latent_write
// (tests/cpp/harness/*_cases.cc) on every SIMD target at 1, 2 and 3 threads, each buffer between
// canaries, comparing every byte with the reference kernel. A stand-in for the shared harness
// driver, which runs the same generators once it is in the tree.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "harness/harness.h"
#include "kvscatter/error.h"
#include "kvscatter/runtime.h"
#include "simd_targets.h"

namespace kvscatter {
namespace harness {
std::vector<OpCases>& registry() {
  static std::vector<OpCases> r;
  return r;
}
}  // namespace harness

namespace {

// Each buffer sits between 64-byte canaries, at its misalignment from a 64-byte boundary.
struct Buffers {
  std::vector<std::vector<std::uint8_t>> storage;
  std::vector<std::uint8_t*> data;
  explicit Buffers(const harness::Case& c) {
    for (std::size_t i = 0; i < c.buffers.size(); ++i) {
      const std::size_t mis = i < c.misalign.size() ? c.misalign[i] : 0;
      storage.emplace_back(c.buffers[i].size() + 256 + mis, 0x5A);
      auto base = reinterpret_cast<std::uintptr_t>(storage.back().data());
      std::uint8_t* p = storage.back().data() + (64 - base % 64) % 64 + 64 + mis;
      std::memcpy(p, c.buffers[i].data(), c.buffers[i].size());
      data.push_back(p);
    }
  }
  // The buffer with 64 canary bytes on each side.
  std::vector<std::uint8_t> guarded(std::size_t i, std::size_t size) const {
    return std::vector<std::uint8_t>(data[i] - 64, data[i] + size + 64);
  }
};

bool run(const harness::Case& c, Buffers& b, bool reference) {
  try {
    c.run(b.data, reference);
    return false;
  } catch (const Error&) {
    return true;
  }
}

TEST(VllmHarness, OptimizedMatchesReferenceEveryTargetAndThreadCount) {
  ASSERT_FALSE(harness::registry().empty());
  for (const harness::OpCases& op : harness::registry()) {
    std::mt19937_64 rng(20261201);
    for (int i = 0; i < op.count; ++i) {
      const harness::Case c = op.generate(rng);
      Buffers ref(c);
      const bool ref_failed = run(c, ref, true);
      EXPECT_EQ(ref_failed, c.expect_error) << op.op << " " << c.name;
      if (ref_failed) {  // a failed call writes nothing
        const Buffers fresh(c);
        for (std::size_t b = 0; b < c.buffers.size(); ++b) {
          EXPECT_EQ(ref.guarded(b, c.buffers[b].size()), fresh.guarded(b, c.buffers[b].size()));
        }
      }
      for (std::int64_t target : simd_test::simd_targets()) {
        simd_test::PinTarget pin(target);
        for (int threads : {1, 2, 3}) {
          set_num_threads(threads);
          Buffers opt(c);
          EXPECT_EQ(run(c, opt, false), ref_failed) << op.op << " " << c.name;
          for (std::size_t b = 0; b < c.buffers.size(); ++b) {
            ASSERT_EQ(opt.guarded(b, c.buffers[b].size()), ref.guarded(b, c.buffers[b].size()))
                << op.op << " case " << i << " (" << c.name << ") buffer " << b << " target "
                << hwy::TargetName(target) << " threads " << threads;
          }
        }
      }
      set_num_threads(0);
    }
  }
}

}  // namespace
}  // namespace kvscatter

#include "harness/paged_cache_gather_cases.cc"  // NOLINT(build/include): registers its cases
#include "harness/paged_kv_write_cases.cc"      // NOLINT(build/include): registers its cases
#include "harness/paged_latent_write_cases.cc"  // NOLINT(build/include): registers its cases
