// Concurrency: eight threads call every operator at once, each on its own caches, through the
// three front doors (validate-once plans, one-shot calls, C ABI executors), while another
// thread keeps changing the shared pool's thread count. Every result is compared with the
// reference kernel's, computed once before the threads start. Some calls are large enough to
// take the pool, others run inline, so pooled and inline calls interleave. The tsan preset
// runs this suite under ThreadSanitizer (label `tsan`).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvscatter/error.h"
#include "kvscatter/formats.h"
#include "kvscatter/kv_cache_update.h"
#include "kvscatter/kv_compress_epilog.h"
#include "kvscatter/kvscatter.h"
#include "kvscatter/runtime.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"

namespace kvscatter {
namespace {

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVS_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define KVS_TEST_TSAN 1
#endif

#ifdef KVS_TEST_TSAN
constexpr int kRounds = 2;  // ThreadSanitizer runs every access about ten times slower
#else
constexpr int kRounds = 6;
#endif
constexpr int kThreads = 8;

using Bytes = std::vector<std::uint8_t>;

// Finite values of a float dtype (the Rope mean of NaNs has no fixed payload).
Bytes finite_values(DType dt, std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  Bytes out(n * dtype_size(dt));
  for (std::size_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    if (dt == DType::float32) {
      std::memcpy(&out[4 * i], &v, 4);
    } else {
      const auto code = static_cast<std::uint16_t>(formats::encode(dt, v));
      std::memcpy(&out[2 * i], &code, 2);
    }
  }
  return out;
}

Bytes random_bytes(std::size_t n, std::mt19937_64& rng) {
  Bytes out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>(rng());
  return out;
}

// Slots of a cache with `num_slots` rows: mostly distinct, some padding, some repeated.
std::vector<std::int64_t> slots_for(std::int64_t tokens, std::int64_t num_slots,
                                    std::mt19937_64& rng) {
  std::vector<std::int64_t> s(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const auto r = rng() % 16;
    s[static_cast<std::size_t>(t)] = r == 0   ? -1
                                     : r == 1 ? s[static_cast<std::size_t>(t / 2)]
                                              : static_cast<std::int64_t>(rng() % num_slots);
  }
  return s;
}

// One operator call with its own buffers. `run(way)` resets the caches, writes them through
// front door `way` (0 plan + execute, 1 one-shot call, 2 C ABI executor) and reports whether
// they equal the reference result.
class Job {
 public:
  virtual ~Job() = default;
  bool run(int way, std::string& why) {
    for (std::size_t i = 0; i < caches_.size(); ++i) *caches_[i] = initial_[i];
    if (!call(way, why)) return false;
    for (std::size_t i = 0; i < caches_.size(); ++i) {
      if (*caches_[i] != expected_[i]) {
        why = name_ + ": cache " + std::to_string(i) + " differs from the reference (way " +
              std::to_string(way) + ")";
        return false;
      }
    }
    return true;
  }

 protected:
  // Subclasses fill their buffers, register the caches and call this once.
  void finish(std::string name, std::vector<Bytes*> caches) {
    name_ = std::move(name);
    caches_ = std::move(caches);
    for (Bytes* c : caches_) initial_.push_back(*c);
    reference_run();
    for (Bytes* c : caches_) expected_.push_back(*c);
  }
  virtual void reference_run() = 0;
  virtual bool call(int way, std::string& why) = 0;
  bool c_status(kvsStatus s, std::string& why) {
    if (s == KVS_SUCCESS) return true;
    why = name_ + ": C ABI status " + std::to_string(s) + ": " + kvsGetLastErrorMessage();
    return false;
  }

  std::string name_;
  std::vector<Bytes*> caches_;
  std::vector<Bytes> initial_, expected_;
};

// kvsTensor holder.
struct CTensor {
  kvsTensor* t = nullptr;
  explicit CTensor(const TensorView& v) {
    if (kvsCreateTensor(v.data, static_cast<kvsDataType>(v.dtype), v.rank, v.shape.data(),
                        v.strides.data(), &t) != KVS_SUCCESS) {
      t = nullptr;
    }
  }
  ~CTensor() { kvsDestroyTensor(t); }
  CTensor(const CTensor&) = delete;
  CTensor& operator=(const CTensor&) = delete;
};

struct ExecutorDeleter {
  void operator()(kvsExecutor* e) const { kvsDestroyExecutor(e); }
};
using Executor = std::unique_ptr<kvsExecutor, ExecutorDeleter>;

// ScatterPaKvCache, Norm layout (tokens split over the pool when large) or packed Rope
// (per-(batch, head) runs with a mean row).
class ScatterJob : public Job {
 public:
  ScatterJob(std::uint64_t seed, bool large, bool rope) : rope_(rope) {
    std::mt19937_64 rng(seed);
    const DType dt = rope ? DType::float16 : DType::bfloat16;
    const std::int64_t nh = rope ? 2 : 4, d = rope ? 64 : 128, nb = rope ? 128 : 64, bs = 16;
    if (rope) {
      const std::int64_t b = large ? 8 : 2, l = large ? 96 : 5;
      tokens_ = b * l;
      seq_.assign(static_cast<std::size_t>(b), l);
      for (std::int64_t i = 0; i < b * nh; ++i) {
        lens_.push_back(static_cast<std::int64_t>(rng() % 4));
        offs_.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(l - 4)));
        slot_.push_back(i * l);  // disjoint runs
      }
      kshape_ = {tokens_, nh, d};
      cshape_ = {nb, bs, 1, d};
    } else {
      tokens_ = large ? 700 : 3;
      slot_ = slots_for(tokens_, nb * bs, rng);
      kshape_ = {tokens_, nh, d};
      cshape_ = {nb, bs, nh, d};
    }
    const std::size_t kn = static_cast<std::size_t>(tokens_ * nh * d);
    key_ = finite_values(dt, kn, rng);
    value_ = finite_values(dt, kn, rng);
    std::size_t cn = 1;
    for (auto x : cshape_) cn *= static_cast<std::size_t>(x);
    kc_ = finite_values(dt, cn, rng);
    vc_ = finite_values(dt, cn, rng);
    dt_ = dt;
    if (rope) opt_.scatter_mode = ScatterMode::Rope;
    plan_ = plan_scatter_pa_kv_cache(v(key_, kshape_), v(value_, kshape_), v(kc_, cshape_),
                                     v(vc_, cshape_), idx(slot_), options());
    finish(rope ? "ScatterPaKvCache Rope" : "ScatterPaKvCache Norm", {&kc_, &vc_});
  }

 private:
  TensorView v(Bytes& b, const std::vector<std::int64_t>& shape) {
    return TensorView(b.data(), dt_, std::span<const std::int64_t>(shape));
  }
  TensorView idx(std::vector<std::int64_t>& x) {
    return TensorView(x.data(), DType::int64, {static_cast<std::int64_t>(x.size())});
  }
  ScatterPaKvCacheOptions options() {
    ScatterPaKvCacheOptions o = opt_;
    if (rope_) {
      o.seq_lens = idx(seq_);
      o.compress_lens = idx(lens_);
      o.compress_seq_offsets = idx(offs_);
    }
    return o;
  }
  void reference_run() override { reference::execute(plan_); }
  bool call(int way, std::string& why) override {
    if (way == 0) {
      execute(plan_);
    } else if (way == 1) {
      scatter_pa_kv_cache(v(key_, kshape_), v(value_, kshape_), v(kc_, cshape_), v(vc_, cshape_),
                          idx(slot_), options());
    } else {
      if (!exec_) {
        CTensor k(v(key_, kshape_)), kc(v(kc_, cshape_)), s(idx(slot_)), val(v(value_, kshape_)),
            vc(v(vc_, cshape_)), sl(idx(seq_)), cl(idx(lens_)), co(idx(offs_));
        std::uint64_t ws = 0;
        kvsExecutor* e = nullptr;
        if (!c_status(kvsScatterPaKvCacheGetWorkspaceSize(
                          k.t, val.t, kc.t, vc.t, s.t, rope_ ? cl.t : nullptr,
                          rope_ ? co.t : nullptr, rope_ ? sl.t : nullptr, "Norm",
                          rope_ ? "Rope" : "None", nullptr, 0, nullptr, 0, &ws, &e),
                      why)) {
          return false;
        }
        exec_.reset(e);
      }
      return c_status(kvsScatterPaKvCache(nullptr, 0, exec_.get()), why);
    }
    return true;
  }

  bool rope_;
  DType dt_ = DType::bfloat16;
  std::int64_t tokens_ = 0;
  std::vector<std::int64_t> kshape_, cshape_, slot_, seq_, lens_, offs_;
  Bytes key_, value_, kc_, vc_;
  ScatterPaKvCacheOptions opt_;
  ScatterPaKvCachePlan plan_;
  Executor exec_;
};

class KScaleJob : public Job {
 public:
  KScaleJob(std::uint64_t seed, bool large) {
    std::mt19937_64 rng(seed);
    t_ = large ? 700 : 3;
    slot_ = slots_for(t_, nb_ * bs_, rng);
    key_ = random_bytes(static_cast<std::size_t>(t_ * n_ * d_), rng);
    value_ = random_bytes(key_.size(), rng);
    scale_ = random_bytes(static_cast<std::size_t>(t_ * n_ * 4), rng);
    kc_ = random_bytes(static_cast<std::size_t>(nb_ * n_ * bs_ * d_), rng);
    vc_ = random_bytes(kc_.size(), rng);
    sc_ = random_bytes(static_cast<std::size_t>(nb_ * n_ * bs_ * 4), rng);
    plan_ = make_plan();
    finish("ScatterPaKvCacheWithKScale", {&kc_, &vc_, &sc_});
  }

 private:
  static constexpr DType kDt = DType::float8_e4m3fn;
  TensorView key() { return TensorView(key_.data(), kDt, {t_, n_, d_}); }
  TensorView value() { return TensorView(value_.data(), kDt, {t_, n_, d_}); }
  TensorView kc() { return TensorView(kc_.data(), kDt, {nb_, n_, bs_, d_}); }
  TensorView vc() { return TensorView(vc_.data(), kDt, {nb_, n_, bs_, d_}); }
  TensorView slot() { return TensorView(slot_.data(), DType::int64, {t_}); }
  TensorView scale() { return TensorView(scale_.data(), DType::float32, {t_, n_}); }
  TensorView sc() { return TensorView(sc_.data(), DType::float32, {nb_, n_, bs_, 1}); }
  ScatterPaKvCacheWithKScalePlan make_plan() {
    return plan_scatter_pa_kv_cache_with_k_scale(key(), value(), kc(), vc(), slot(), scale(), sc());
  }
  void reference_run() override { reference::execute(plan_); }
  bool call(int way, std::string& why) override {
    if (way == 0) {
      execute(plan_);
    } else if (way == 1) {
      scatter_pa_kv_cache_with_k_scale(key(), value(), kc(), vc(), slot(), scale(), sc());
    } else {
      if (!exec_) {
        CTensor a(key()), b(value()), c(kc()), d(vc()), e(slot()), f(scale()), g(sc());
        std::uint64_t ws = 0;
        kvsExecutor* x = nullptr;
        if (!c_status(kvsScatterPaKvCacheWithKScaleGetWorkspaceSize(a.t, b.t, c.t, d.t, e.t, f.t,
                                                                    g.t, "BNBD", &ws, &x),
                      why)) {
          return false;
        }
        exec_.reset(x);
      }
      return c_status(kvsScatterPaKvCacheWithKScale(nullptr, 0, exec_.get()), why);
    }
    return true;
  }

  std::int64_t t_ = 0, n_ = 4, d_ = 128, nb_ = 64, bs_ = 16;
  std::vector<std::int64_t> slot_;
  Bytes key_, value_, scale_, kc_, vc_, sc_;
  ScatterPaKvCacheWithKScalePlan plan_;
  Executor exec_;
};

class EpilogJob : public Job {
 public:
  EpilogJob(std::uint64_t seed, bool large, QuantMode mode) : mode_(mode) {
    std::mt19937_64 rng(seed);
    rows_ = large ? 300 : 2;
    slot_ = slots_for(rows_, nb_ * bs_, rng);
    x_ = finite_values(DType::bfloat16, static_cast<std::size_t>(rows_ * d_), rng);
    cache_ = random_bytes(static_cast<std::size_t>(nb_ * bs_ * row_), rng);
    plan_ = plan_kv_compress_epilog(cache(), x(), slot(), 32, mode_);
    finish("KvCompressEpilog", {&cache_});
  }

 private:
  TensorView cache() { return TensorView(cache_.data(), DType::uint8, {nb_, bs_, 1, row_}); }
  TensorView x() { return TensorView(x_.data(), DType::bfloat16, {rows_, d_}); }
  TensorView slot() { return TensorView(slot_.data(), DType::int64, {rows_}); }
  void reference_run() override { reference::execute(plan_); }
  bool call(int way, std::string& why) override {
    if (way == 0) {
      execute(plan_);
    } else if (way == 1) {
      kv_compress_epilog(cache(), x(), slot(), 32, mode_);
    } else {
      if (!exec_) {
        CTensor a(cache()), b(x()), c(slot());
        std::uint64_t ws = 0;
        kvsExecutor* e = nullptr;
        const std::string mode = std::to_string(static_cast<int>(mode_));
        if (!c_status(kvsKvCompressEpilogGetWorkspaceSize(a.t, b.t, c.t, 32, mode.c_str(), true,
                                                          1.0f, &ws, &e),
                      why)) {
          return false;
        }
        exec_.reset(e);
      }
      return c_status(kvsKvCompressEpilog(nullptr, 0, exec_.get()), why);
    }
    return true;
  }

  QuantMode mode_;
  std::int64_t rows_ = 0, d_ = 576, nb_ = 32, bs_ = 16, row_ = 704;
  std::vector<std::int64_t> slot_;
  Bytes x_, cache_;
  KvCompressEpilogPlan plan_;
  Executor exec_;
};

class UpdateJob : public Job {
 public:
  UpdateJob(std::uint64_t seed, bool large) {
    std::mt19937_64 rng(seed);
    l_ = large ? 128 : 1;
    pos_ = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(s_ - l_ + 1));
    const auto cn = static_cast<std::size_t>(b_ * s_ * h_ * d_);
    const auto in = static_cast<std::size_t>(b_ * l_ * h_ * d_);
    kc_ = finite_values(DType::bfloat16, cn, rng);
    vc_ = finite_values(DType::bfloat16, cn, rng);
    nk_ = finite_values(DType::float32, in, rng);
    nv_ = finite_values(DType::bfloat16, in, rng);
    plan_ = plan_kv_cache_update(kc(), vc(), nk(), nv(), pos_);
    finish("kv_cache_update", {&kc_, &vc_});
  }

 private:
  TensorView kc() { return TensorView(kc_.data(), DType::bfloat16, {b_, s_, h_, d_}); }
  TensorView vc() { return TensorView(vc_.data(), DType::bfloat16, {b_, s_, h_, d_}); }
  TensorView nk() { return TensorView(nk_.data(), DType::float32, {b_, l_, h_, d_}); }
  TensorView nv() { return TensorView(nv_.data(), DType::bfloat16, {b_, l_, h_, d_}); }
  void reference_run() override { reference::execute(plan_); }
  bool call(int way, std::string& why) override {
    if (way == 0) {
      execute(plan_);
    } else if (way == 1) {
      if (kv_cache_update(kc(), vc(), nk(), nv(), pos_) != pos_ + l_) {
        why = "kv_cache_update returned a wrong length";
        return false;
      }
    } else {
      if (!exec_) {
        CTensor a(kc()), b(vc()), c(nk()), d(nv());
        std::uint64_t ws = 0;
        std::int64_t len = 0;
        kvsExecutor* e = nullptr;
        if (!c_status(kvsKvCacheUpdateGetWorkspaceSize(a.t, b.t, c.t, d.t, pos_, &len, &ws, &e),
                      why)) {
          return false;
        }
        exec_.reset(e);
      }
      return c_status(kvsKvCacheUpdate(nullptr, 0, exec_.get()), why);
    }
    return true;
  }

  std::int64_t b_ = 2, s_ = 256, h_ = 8, d_ = 64, l_ = 0, pos_ = 0;
  Bytes kc_, vc_, nk_, nv_;
  KvCacheUpdatePlan plan_;
  Executor exec_;
};

// Every operator, large and small, for one thread.
std::vector<std::unique_ptr<Job>> jobs_for(std::uint64_t seed) {
  std::vector<std::unique_ptr<Job>> jobs;
  for (bool large : {true, false}) {
    jobs.push_back(std::make_unique<ScatterJob>(seed + 1, large, false));
    jobs.push_back(std::make_unique<ScatterJob>(seed + 2, large, true));
    jobs.push_back(std::make_unique<KScaleJob>(seed + 3, large));
    jobs.push_back(std::make_unique<EpilogJob>(seed + 4, large, QuantMode::fp8_e8m0));
    jobs.push_back(std::make_unique<EpilogJob>(seed + 5, large, QuantMode::hifloat8_fp4));
    jobs.push_back(std::make_unique<UpdateJob>(seed + 6, large));
    seed += 100;
  }
  return jobs;
}

struct ThreadResult {
  int checked = 0;
  std::string failure;
};

// Runs every job of every thread kRounds times; `changer` runs next to them until they finish.
void run_threads(const std::function<void(const std::atomic<bool>&)>& changer) {
  std::vector<std::vector<std::unique_ptr<Job>>> jobs;
  for (int i = 0; i < kThreads; ++i) jobs.push_back(jobs_for(1000 * static_cast<std::uint64_t>(i)));
  std::vector<ThreadResult> results(kThreads);
  std::atomic<bool> done{false};
  std::thread side([&] { changer(done); });
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ThreadResult& r = results[static_cast<std::size_t>(i)];
      for (int round = 0; round < kRounds && r.failure.empty(); ++round) {
        for (auto& job : jobs[static_cast<std::size_t>(i)]) {
          const int way = (round + i) % 3;
          try {
            if (!job->run(way, r.failure)) break;
          } catch (const std::exception& e) {
            r.failure = std::string("exception: ") + e.what();
            break;
          }
          ++r.checked;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  done = true;
  side.join();
  const int per_thread = kRounds * static_cast<int>(jobs[0].size());
  for (int i = 0; i < kThreads; ++i) {
    const ThreadResult& r = results[static_cast<std::size_t>(i)];
    EXPECT_EQ(r.failure, "") << "thread " << i;
    EXPECT_EQ(r.checked, per_thread) << "thread " << i;
  }
}

class Concurrency : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = get_num_threads(); }
  void TearDown() override { set_num_threads(saved_); }
  int saved_ = 1;
};

TEST_F(Concurrency, EveryOperatorFromEightThreads) {
  set_num_threads(4);
  run_threads([](const std::atomic<bool>&) {});
}

TEST_F(Concurrency, EveryOperatorWhileTheThreadCountChanges) {
  run_threads([](const std::atomic<bool>& done) {
    static const int kCounts[] = {1, 2, 3, 4, 8, 0, 2, 5};
    for (std::size_t i = 0; !done; ++i) {
      set_num_threads(kCounts[i % std::size(kCounts)]);
      EXPECT_GE(get_num_threads(), 1);
      if (i % 2) {
        EXPECT_EQ(kvsSetNumThreads(kCounts[(i + 3) % std::size(kCounts)]), KVS_SUCCESS);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
}

// The C ABI's last-error message is per thread: failures on one thread never show up on
// another, even while other threads fail at the same time.
TEST_F(Concurrency, ErrorMessagesStayOnTheirThread) {
  std::vector<std::string> seen(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 200; ++round) {
        kvsTensor* t = nullptr;
        const std::int64_t shape[] = {-1 - i};
        kvsCreateTensor(nullptr, KVS_UINT8, 1, shape, nullptr, &t);
        const std::string msg = kvsGetLastErrorMessage();
        if (msg.find("got " + std::to_string(-1 - i)) == std::string::npos) {
          seen[static_cast<std::size_t>(i)] = msg;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], "") << i;
}

// Determinism for kv_cache_update: a cache whose distinct elements share memory (here all sequence
// positions alias one row) would be written by several threads in an unspecified order, so the
// result would depend on the thread count; the plan rejects it, as the other operators' plans
// do.
TEST(ConcurrencyDeterminism, KvCacheUpdateRejectsSelfOverlappingCaches) {
  constexpr std::int64_t s = 512, h = 8, d = 64;
  std::vector<float> kc(static_cast<std::size_t>(h * d)), vc(kc.size());
  std::vector<float> nk(static_cast<std::size_t>(s * h * d)), nv(nk.size());
  const std::int64_t shape[] = {1, s, h, d}, aliased[] = {h * d, 0, d, 1};
  try {
    plan_kv_cache_update(TensorView(kc.data(), DType::float32, shape, aliased),
                         TensorView(vc.data(), DType::float32, shape, aliased),
                         TensorView(nk.data(), DType::float32, {1, s, h, d}),
                         TensorView(nv.data(), DType::float32, {1, s, h, d}), 0);
    ADD_FAILURE() << "a cache whose sequence positions share memory was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_parameter);
    EXPECT_NE(std::string(e.what()).find("key_cache"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvscatter
