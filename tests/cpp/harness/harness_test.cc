// Runs every registered case (tests/cpp/harness/<op>_cases.cc) on every SIMD target compiled in and
// runnable here, at 1, 2 and 3 threads, each buffer placed at its case's misalignment between
// canary bytes; compares every buffer byte for byte with the reference kernel's result. Cases
// expected to fail must throw kvscatter::Error on both paths and leave every buffer as it was.
// KVSCATTER_TEST_SEED (a decimal number) changes the cases drawn; failures print it.
// KVSCATTER_TEST_THREADS ("1,3") narrows the thread counts: the rows split among threads the same
// way on every target, so the aarch64 stage runs 1 and 3 (an uneven split) under emulation.
#include "harness/harness.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/streaming.h"
#include "harness/helpers.h"
#include "kvscatter/error.h"
#include "kvscatter/runtime.h"
#include "simd_targets.h"

namespace kvscatter::harness {

std::vector<OpCases>& registry() {
  static std::vector<OpCases> all;
  return all;
}

// Test names and failure output show the operator, not the struct's bytes.
void PrintTo(const OpCases& op, std::ostream* os) { *os << op.op; }

namespace {

constexpr std::size_t kCanary = 64;  // bytes before and after every buffer

std::uint8_t canary_byte(std::size_t i) { return static_cast<std::uint8_t>(0x5A ^ (i * 167)); }

// One copy of a case's buffers, each at its misalignment past a 64-byte boundary, with canary bytes
// filling the storage around it.
struct Arena {
  std::vector<std::vector<std::uint8_t>> storage;
  std::vector<std::uint8_t*> data;
  std::vector<std::size_t> start;  // index of each buffer's first byte in its storage

  explicit Arena(const Case& c) {
    for (std::size_t b = 0; b < c.buffers.size(); ++b) {
      const std::size_t mis = b < c.misalign.size() ? c.misalign[b] : 0;
      const std::size_t n = c.buffers[b].size();
      auto& s = storage.emplace_back(kCanary + 64 + mis + n + kCanary);
      const auto base = reinterpret_cast<std::uintptr_t>(s.data()) + kCanary;
      const std::size_t at = kCanary + (64 - base % 64) % 64 + mis;
      for (std::size_t i = 0; i < at; ++i) s[i] = canary_byte(i);
      for (std::size_t i = at + n; i < s.size(); ++i) s[i] = canary_byte(i);
      if (n) std::memcpy(s.data() + at, c.buffers[b].data(), n);
      start.push_back(at);
      data.push_back(s.data() + at);
    }
  }
  std::span<const std::uint8_t> bytes(const Case& c, std::size_t b) const {
    return {data[b], c.buffers[b].size()};
  }
  // The first canary byte overwritten, as "buffer 'name' canary byte k" (empty: none).
  std::string damaged_canary(const Case& c) const {
    for (std::size_t b = 0; b < storage.size(); ++b) {
      const auto& s = storage[b];
      const std::size_t end = start[b] + c.buffers[b].size();
      for (std::size_t i = 0; i < s.size(); i = i + 1 == start[b] ? end : i + 1) {
        if (s[i] != canary_byte(i)) {
          std::ostringstream m;
          m << "buffer '" << c.buffer_names[b] << "' canary byte at "
            << static_cast<std::int64_t>(i) - static_cast<std::int64_t>(start[b])
            << " relative to its data was overwritten";
          return m.str();
        }
      }
    }
    return {};
  }
};

struct Outcome {
  Arena arena;
  std::optional<std::string> error;  // kvscatter::Error message when the call threw
};

Outcome run_case(const Case& c, bool reference) {
  Outcome out{Arena(c), std::nullopt};
  try {
    c.run(out.arena.data, reference);
  } catch (const Error& e) {
    out.error = e.what();
  }
  return out;
}

// The first buffer byte where `got` and `want` differ, described (empty: identical).
std::string first_difference(const Case& c, const Arena& got,
                             const std::vector<std::span<const std::uint8_t>>& want) {
  for (std::size_t b = 0; b < c.buffers.size(); ++b) {
    const auto g = got.bytes(c, b);
    if (g.empty() || std::memcmp(g.data(), want[b].data(), g.size()) == 0) continue;
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (g[i] == want[b][i]) continue;
      std::ostringstream m;
      m << "buffer '" << c.buffer_names[b] << "' (" << g.size() << " bytes) first differs at byte "
        << i << ": got 0x" << std::hex << int(g[i]) << ", want 0x" << int(want[b][i]);
      return m.str();
    }
  }
  return {};
}

std::vector<std::span<const std::uint8_t>> spans(const Case& c, const Arena* a) {
  std::vector<std::span<const std::uint8_t>> out;
  for (std::size_t b = 0; b < c.buffers.size(); ++b) {
    out.push_back(a ? a->bytes(c, b) : std::span<const std::uint8_t>(c.buffers[b]));
  }
  return out;
}

// Checks one run against what it must produce; returns the problem (empty: none).
std::string judge(const Case& c, const Outcome& o,
                  const std::vector<std::span<const std::uint8_t>>& want) {
  if (std::string canary = o.arena.damaged_canary(c); !canary.empty()) return canary;
  if (c.expect_error && !o.error) return "expected kvscatter::Error, the call succeeded";
  if (!c.expect_error && o.error) return "unexpected kvscatter::Error: " + *o.error;
  std::string diff = first_difference(c, o.arena, want);
  if (!diff.empty() && c.expect_error) diff = "failed call changed a buffer: " + diff;
  return diff;
}

class ThreadCount {
 public:
  ThreadCount() : saved_(get_num_threads()) {}
  ~ThreadCount() { set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

// zero: every call streams (no threshold, and no call counted as fitting the cache).
class StreamThreshold {
 public:
  explicit StreamThreshold(bool zero)
      : saved_(detail::set_stream_threshold(zero ? 0 : detail::stream_threshold_bytes().load())),
        saved_cache_(detail::set_cache_bytes(zero ? 0 : detail::cache_bytes().load())) {}
  ~StreamThreshold() {
    detail::set_stream_threshold(saved_);
    detail::set_cache_bytes(saved_cache_);
  }
  StreamThreshold(const StreamThreshold&) = delete;
  StreamThreshold& operator=(const StreamThreshold&) = delete;

 private:
  std::int64_t saved_, saved_cache_;
};

class Harness : public ::testing::TestWithParam<OpCases> {};

TEST_P(Harness, OptimizedMatchesReferenceOnEveryTargetAndThreadCount) {
  const OpCases& op = GetParam();
  const std::uint64_t seed = base_seed();
  const std::vector<std::int64_t> targets = simd_test::simd_targets();
  ASSERT_FALSE(targets.empty());
  const std::vector<int> thread_counts = harness_thread_counts();
  const ThreadCount restore_threads;
  std::uint64_t op_hash = 1469598103934665603ull;  // FNV-1a of the op name
  for (const char* p = op.op; *p; ++p) op_hash = (op_hash ^ std::uint8_t(*p)) * 1099511628211ull;
  int wrote = 0, succeeded = 0, failed = 0;
  for (int i = 0; i < op.count; ++i) {
    std::seed_seq sq{seed, op_hash, static_cast<std::uint64_t>(i)};
    std::mt19937_64 rng(sq);
    const Case c = op.generate(rng);
    auto where = [&](const std::string& path) {
      std::ostringstream m;
      m << op.op << " case " << i << " '" << c.name << "', " << path
        << " (KVSCATTER_TEST_SEED=" << seed << ")";
      return m.str();
    };
    const Outcome ref = run_case(c, true);
    if (c.expect_error || ref.error) {
      if (std::string p = judge(c, ref, spans(c, nullptr)); !p.empty()) {
        FAIL() << where("reference kernel") << ": " << p;
      }
    } else {
      if (std::string canary = ref.arena.damaged_canary(c); !canary.empty()) {
        FAIL() << where("reference kernel") << ": " << canary;
      }
      ++succeeded;
      wrote += !first_difference(c, ref.arena, spans(c, nullptr)).empty();
    }
    const auto want = c.expect_error ? spans(c, nullptr) : spans(c, &ref.arena);
    for (std::int64_t target : targets) {
      const simd_test::PinTarget pin(target);
      const StreamThreshold stream(c.stream);
      for (int threads : thread_counts) {
        set_num_threads(threads);
        const Outcome opt = run_case(c, false);
        if (std::string p = judge(c, opt, want); !p.empty()) {
          ++failed;
          ADD_FAILURE() << where("target " + simd_test::target_name(target) + ", threads " +
                                 std::to_string(threads))
                        << ": " << p;
          if (failed >= 3) return;  // enough to debug with; keeps the log readable
        }
      }
    }
  }
  // A harness whose cases never write proves nothing.
  EXPECT_GT(wrote, succeeded / 2) << op.op << ": too few generated cases write anything";
}

INSTANTIATE_TEST_SUITE_P(Ops, Harness, ::testing::ValuesIn(registry()),
                         [](const ::testing::TestParamInfo<OpCases>& param) {
                           return std::string(param.param.op);
                         });

// The driver's own checks catch what they are there to catch.
Case two_buffers(std::function<void(const std::vector<std::uint8_t*>&, bool)> run) {
  Case c;
  c.name = "self-test";
  c.buffers = {std::vector<std::uint8_t>(10, 1), std::vector<std::uint8_t>(3, 2)};
  c.buffer_names = {"a", "b"};
  c.misalign = {3, 0};
  c.run = std::move(run);
  return c;
}

TEST(HarnessSelfTest, ReportsTheFirstDifferingByte) {
  const Case c = two_buffers(
      [](const std::vector<std::uint8_t*>& d, bool reference) { d[1][2] = reference ? 7 : 8; });
  const Outcome ref = run_case(c, true), opt = run_case(c, false);
  EXPECT_EQ(judge(c, ref, spans(c, &ref.arena)), "");
  EXPECT_EQ(judge(c, opt, spans(c, &ref.arena)),
            "buffer 'b' (3 bytes) first differs at byte 2: got 0x8, want 0x7");
}

TEST(HarnessSelfTest, ReportsOverwrittenCanaries) {
  for (std::ptrdiff_t at : {-1, 10, 20}) {
    const Case c = two_buffers([at](const std::vector<std::uint8_t*>& d, bool) { d[0][at] ^= 1; });
    const Outcome o = run_case(c, false);
    EXPECT_NE(
        judge(c, o, spans(c, &o.arena)).find("buffer 'a' canary byte at " + std::to_string(at)),
        std::string::npos)
        << at;
  }
}

TEST(HarnessSelfTest, ExpectedErrorsMustThrowAndLeaveBuffersUnchanged) {
  Case quiet = two_buffers([](const std::vector<std::uint8_t*>&, bool) {});
  quiet.expect_error = true;
  EXPECT_EQ(judge(quiet, run_case(quiet, false), spans(quiet, nullptr)),
            "expected kvscatter::Error, the call succeeded");
  Case partial = two_buffers([](const std::vector<std::uint8_t*>& d, bool) {
    d[0][0] = 9;
    throw Error(Status::invalid_parameter, "late check");
  });
  partial.expect_error = true;
  EXPECT_EQ(judge(partial, run_case(partial, false), spans(partial, nullptr)),
            "failed call changed a buffer: buffer 'a' (10 bytes) first differs at byte 0: got "
            "0x9, want 0x1");
  Case throws = two_buffers([](const std::vector<std::uint8_t*>&, bool) {
    throw Error(Status::invalid_parameter, "bad slot");
  });
  EXPECT_EQ(judge(throws, run_case(throws, false), spans(throws, nullptr)),
            "unexpected kvscatter::Error: bad slot");
}

// Sets an environment variable for one scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (saved_) {
      setenv(name_, saved_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

TEST(HarnessSelfTest, ThreadCountsComeFromTheEnvironment) {
  {
    const ScopedEnv env("KVSCATTER_TEST_THREADS", "1,3");
    EXPECT_EQ(harness_thread_counts(), (std::vector<int>{1, 3}));
  }
  {
    const ScopedEnv env("KVSCATTER_TEST_THREADS", "4");
    EXPECT_EQ(harness_thread_counts(), (std::vector<int>{4}));
  }
  for (const char* bad : {"", "1,,3", "0", "2x", "1,-1", ","}) {
    const ScopedEnv env("KVSCATTER_TEST_THREADS", bad);
    try {
      harness_thread_counts();
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("KVSCATTER_TEST_THREADS must list thread counts like \"1,3\", got \"") +
                    bad + "\"");
    }
  }
  if (std::getenv("KVSCATTER_TEST_THREADS") == nullptr) {
    EXPECT_EQ(harness_thread_counts(), (std::vector<int>{1, 2, 3}));
  }
}

TEST(HarnessRegistry, EveryOperatorHasOneGenerator) {
  std::set<std::string> names;
  for (const OpCases& op : registry()) {
    EXPECT_TRUE(names.insert(op.op).second) << op.op << " registered twice";
    EXPECT_GT(op.count, 0) << op.op;
  }
  for (const char* op : {"scatter_pa_kv_cache", "scatter_pa_kv_cache_with_k_scale",
                         "kv_compress_epilog", "kv_cache_update"}) {
    EXPECT_TRUE(names.count(op)) << op << " has no case generator";
  }
}

}  // namespace
}  // namespace kvscatter::harness
