#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include <sched.h>

#include "kvscatter/runtime.h"
#include "runtime/parallel.h"

namespace kvscatter {
namespace detail {
namespace {

int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

int default_threads() {
  if (const char* env = std::getenv("KVSCATTER_NUM_THREADS")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v > 0 && v <= 1024) return static_cast<int>(v);
  }
  return cores_available();
}

thread_local bool t_in_parallel = false;

class Pool {
 public:
  ~Pool() { resize(1); }

  int threads() const { return target_.load(std::memory_order_relaxed); }

  void set_threads(int n) {
    if (n <= 0) n = default_threads();
    std::lock_guard<std::mutex> run(run_mutex_);  // never resize under a running job
    target_.store(n, std::memory_order_relaxed);
  }

  // At least two chunks, two threads or more, not inside a job.
  bool may_split(std::int64_t n, std::int64_t grain) const {
    return n > std::max<std::int64_t>(grain, 1) && !t_in_parallel && threads() >= 2;
  }

  void run(std::int64_t n, std::int64_t grain, RangeFn fn, void* ctx) {
    // Calls that run inline skip the lock: its atomic read-modify-write and release made calls
    // of a few tokens 1.04-1.09 x slower.
    if (!may_split(n, grain)) {
      fn(ctx, 0, n);
      return;
    }
    grain = std::max<std::int64_t>(grain, 1);
    const std::int64_t chunks = (n + grain - 1) / grain;
    std::unique_lock<std::mutex> run(run_mutex_, std::try_to_lock);
    if (!run.owns_lock()) {  // another caller's job holds the workers
      fn(ctx, 0, n);
      return;
    }
    resize(threads());
    Job job{fn, ctx, n, grain, chunks};
    {
      std::lock_guard<std::mutex> lk(mutex_);
      job_ = &job;
      wanted_ = static_cast<int>(std::min<std::int64_t>(static_cast<std::int64_t>(workers_.size()),
                                                        chunks - 1));
      ++generation_;
    }
    cv_.notify_all();
    t_in_parallel = true;
    job.work();
    t_in_parallel = false;
    // Every chunk finished; a worker that was woken but not yet scheduled must not find this
    // job afterwards, and one still inside it must leave before `job` goes out of scope.
    while (job.done.load(std::memory_order_acquire) != chunks) std::this_thread::yield();
    {
      std::lock_guard<std::mutex> lk(mutex_);
      job_ = nullptr;
    }
    while (job.users.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }

 private:
  // One parallel_for call, on the caller's stack. Workers join it under mutex_ (users + 1) and
  // leave when no chunk is left (users - 1).
  struct Job {
    RangeFn fn;
    void* ctx;
    std::int64_t n, grain, chunks;
    std::atomic<std::int64_t> next{0}, done{0};
    std::atomic<int> users{0};

    Job(RangeFn f, void* c, std::int64_t n_, std::int64_t g, std::int64_t ch)
        : fn(f), ctx(c), n(n_), grain(g), chunks(ch) {}

    void work() {
      for (;;) {
        const std::int64_t c = next.fetch_add(1, std::memory_order_relaxed);
        if (c >= chunks) return;
        const std::int64_t b = c * grain;
        fn(ctx, b, std::min(n, b + grain));
        done.fetch_add(1, std::memory_order_release);
      }
    }
  };

  void worker_loop(int index) {
    std::uint64_t seen = 0;
    for (;;) {
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lk(mutex_);
        cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (job_ == nullptr || index >= wanted_) continue;  // finished already, or not needed
        job = job_;
        job->users.fetch_add(1, std::memory_order_relaxed);
      }
      t_in_parallel = true;
      job->work();
      t_in_parallel = false;
      job->users.fetch_sub(1, std::memory_order_release);
    }
  }

  // Grows or shrinks the worker set to n - 1 threads (the caller is the n-th).
  void resize(int n) {
    const std::size_t want = static_cast<std::size_t>(std::max(n, 1) - 1);
    if (workers_.size() == want) return;
    {
      std::lock_guard<std::mutex> lk(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
    for (std::size_t i = 0; i < want; ++i) {
      workers_.emplace_back([this, i] { worker_loop(static_cast<int>(i)); });
    }
  }

  std::mutex run_mutex_;  // one job at a time; other callers run inline
  std::mutex mutex_;      // guards job_, wanted_, generation_, stop_
  std::condition_variable cv_;
  std::vector<std::thread> workers_;
  std::atomic<int> target_{default_threads()};
  Job* job_ = nullptr;
  int wanted_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

bool parallel_may_split(std::int64_t n, std::int64_t grain) { return pool().may_split(n, grain); }

void parallel_for_impl(std::int64_t n, std::int64_t grain, RangeFn fn, void* ctx) {
  if (n <= 0) return;
  pool().run(n, grain, fn, ctx);
}

}  // namespace detail

void set_num_threads(int n) { detail::pool().set_threads(n); }
int get_num_threads() { return detail::pool().threads(); }

}  // namespace kvscatter
