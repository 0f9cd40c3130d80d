// Shared machinery of the fuzz targets: decoding the fuzz input into decisions, tensor
// descriptions that a builder fills with a mostly valid call and a mutator breaks now and then,
// guarded buffers, and the oracle that every target applies:
//
//   * the call either fails, and then every cache is byte-identical to its copy taken before
//     the call, with the same status the reference path reports, or it succeeds and every
//     cache equals the caches written by reference::execute of the same plan;
//   * inputs are never written;
//   * an input placed inside a cache's buffer (aliasing) is read as it was before the call:
//     the reference reads a separate copy of those bytes (docs/semantics.md, "Inputs that
//     overlap outputs");
//   * no byte outside any buffer is read or written: each buffer sits between canary zones that
//     are poisoned for AddressSanitizer (reads and writes trap at once) and checked afterwards.
//
// A failed check prints the case and aborts, which libFuzzer reports as a crash.
#pragma once

#include <hwy/targets.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvscatter/dtype.h"
#include "kvscatter/error.h"
#include "kvscatter/formats.h"
#include "kvscatter/kvscatter.h"
#include "kvscatter/runtime.h"
#include "kvscatter/tensor.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVS_FUZZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KVS_FUZZ_ASAN 1
#endif
#ifdef KVS_FUZZ_ASAN
#include <sanitizer/asan_interface.h>
#define KVS_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define KVS_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define KVS_POISON(p, n) ((void)(p), (void)(n))
#define KVS_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace kvscatter::fuzz {

// Byte budget of one case: larger cases are dropped so that runs stay at thousands of
// executions per second.
inline constexpr std::int64_t kMaxBytes = 1 << 20;

// The targets draw block and token counts, then cap them so that one cache or input stays
// near this size: large shapes belong to the randomized tests, here they only slow the search.
inline constexpr std::int64_t kDrawBytes = 16 << 10;
inline std::int64_t cap_count(std::int64_t n, std::int64_t bytes_each) {
  if (bytes_each <= 0 || n * bytes_each <= kDrawBytes) return n;
  return std::max<std::int64_t>(1, kDrawBytes / bytes_each);
}

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "FUZZ CHECK FAILED: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Decisions read from the front of the fuzz input. Past its end every read returns 0, and 0
// always selects the most common valid choice, so short inputs decode to valid calls.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}

  std::uint8_t byte() { return p_ < end_ ? *p_++ : 0; }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | byte();
    return v;
  }
  // Uniform-ish in [0, n) for n <= 65536.
  std::int64_t pick(std::int64_t n) {
    if (n <= 1) return 0;
    const std::uint32_t v = n <= 256 ? byte() : static_cast<std::uint32_t>(byte() << 8 | byte());
    return static_cast<std::int64_t>(v % static_cast<std::uint32_t>(n));
  }
  std::int64_t range(std::int64_t lo, std::int64_t hi) { return lo + pick(hi - lo + 1); }
  // True with probability about k/256; never true once the input is exhausted.
  bool rare(int k = 4) { return byte() >= 256 - k; }
  template <class T>
  const T& choose(const std::vector<T>& v) {
    return v[static_cast<std::size_t>(pick(static_cast<std::int64_t>(v.size())))];
  }

 private:
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

// splitmix64: tensor contents come from a generator seeded by the input, so mutating the
// decisions does not shift the data and vice versa.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// A byte buffer with canary zones on both sides, placed at a chosen misalignment.
class Guarded {
 public:
  static constexpr std::size_t kGuard = 64;

  Guarded() = default;
  Guarded(std::size_t bytes, std::size_t misalign, std::uint8_t salt)
      : bytes_(bytes), misalign_(misalign), salt_(salt), storage_(2 * kGuard + misalign + bytes) {
    write_canaries();
  }
  Guarded(const Guarded& o) : bytes_(o.bytes_), misalign_(o.misalign_), salt_(o.salt_) {
    storage_.resize(o.storage_.size());
    write_canaries();
    if (bytes_ != 0) std::memcpy(data(), o.data(), bytes_);
  }
  Guarded& operator=(const Guarded&) = delete;
  ~Guarded() { KVS_UNPOISON(storage_.data(), storage_.size()); }

  std::uint8_t* data() { return storage_.data() + kGuard + misalign_; }
  const std::uint8_t* data() const { return storage_.data() + kGuard + misalign_; }
  std::size_t size() const { return bytes_; }
  std::vector<std::uint8_t> snapshot() const { return {data(), data() + bytes_}; }
  bool same_as(const std::vector<std::uint8_t>& v) const {
    return v.size() == bytes_ && (bytes_ == 0 || std::memcmp(data(), v.data(), bytes_) == 0);
  }
  bool same_as(const Guarded& o) const {
    return o.bytes_ == bytes_ && (bytes_ == 0 || std::memcmp(data(), o.data(), bytes_) == 0);
  }
  // Index (in the storage) of the first damaged canary byte, or -1.
  std::int64_t damaged_canary() {
    const std::size_t front = kGuard + misalign_;
    KVS_UNPOISON(storage_.data(), front);
    KVS_UNPOISON(storage_.data() + front + bytes_, kGuard);
    std::int64_t bad = -1;
    for (std::size_t i = 0; i < front && bad < 0; ++i) {
      if (storage_[i] != canary(i)) bad = static_cast<std::int64_t>(i);
    }
    for (std::size_t i = front + bytes_; i < storage_.size() && bad < 0; ++i) {
      if (storage_[i] != canary(i)) bad = static_cast<std::int64_t>(i);
    }
    poison();
    return bad;
  }

 private:
  std::uint8_t canary(std::size_t i) const {
    return static_cast<std::uint8_t>(0xA5 ^ (i * 29) ^ salt_);
  }
  void write_canaries() {
    const std::size_t front = kGuard + misalign_;
    for (std::size_t i = 0; i < front; ++i) storage_[i] = canary(i);
    for (std::size_t i = front + bytes_; i < storage_.size(); ++i) storage_[i] = canary(i);
    poison();
  }
  void poison() {
    KVS_POISON(storage_.data(), kGuard + misalign_);
    KVS_POISON(storage_.data() + kGuard + misalign_ + bytes_, kGuard);
  }

  std::size_t bytes_ = 0, misalign_ = 0;
  std::uint8_t salt_ = 0;
  std::vector<std::uint8_t> storage_;
};

enum class Role { input, cache, index };

// One tensor argument: its description (what the builder and the mutator decide) and, after
// materialize(), its buffers.
struct Tensor {
  std::string name;
  Role role = Role::input;
  bool present = true;     // optional tensors: passed at all
  bool null_data = false;  // pass a null data pointer
  DType dtype = DType::float32;
  int rank = 0;
  std::int64_t shape[kMaxRank] = {};
  std::int64_t strides[kMaxRank] = {};
  std::int64_t min_extent = 0;       // elements the buffer holds at least (Nct row pitch rule)
  std::vector<std::int64_t> values;  // index tensors: flat row-major element values
  std::size_t misalign = 0;
  // Aliasing: this input (or index tensor) lies inside the tested buffer of cache tensor
  // `alias_of` (an index of Case::tensors) at a position drawn from `alias_pos`; the reference
  // reads `a`, a copy of those bytes taken before the call.
  int alias_of = -1;
  std::uint64_t alias_pos = 0;
  std::uint8_t* alias_data = nullptr;

  // Buffers: `a` is what the tested path writes, `b` what the reference writes (caches only).
  std::optional<Guarded> a, b;
  std::vector<std::uint8_t> before;

  void set_shape(std::initializer_list<std::int64_t> dims) {
    rank = static_cast<int>(dims.size());
    int i = 0;
    for (std::int64_t d : dims) shape[i++] = d;
    contiguous();
  }
  void contiguous() {
    std::int64_t s = 1;
    for (int i = rank; i-- > 0;) {
      strides[i] = s;
      s *= std::max<std::int64_t>(shape[i], 1);
    }
  }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
  // Elements spanned by the view (0 when empty); -1 when it does not fit the byte budget, -2
  // for a description the library must reject anyway (a negative dim or stride).
  std::int64_t extent() const {
    std::int64_t last = 0;
    for (int i = 0; i < rank; ++i) {
      if (shape[i] < 0 || strides[i] < 0) return -2;
    }
    for (int i = 0; i < rank; ++i) {
      if (shape[i] == 0) return std::max<std::int64_t>(min_extent, 0);
    }
    for (int i = 0; i < rank; ++i) {
      if (shape[i] > kMaxBytes || strides[i] > kMaxBytes) return -1;
      last += (shape[i] - 1) * strides[i];
      if (last > kMaxBytes) return -1;
    }
    return std::max(last + 1, min_extent);
  }
  std::int64_t flat_offset(std::int64_t i) const {
    std::int64_t off = 0;
    for (int ax = rank - 1; ax >= 0; --ax) {
      off += (i % shape[ax]) * strides[ax];
      i /= shape[ax];
    }
    return off;
  }
  TensorView view(bool reference) const {
    TensorView v;
    v.dtype = dtype;
    v.rank = rank;
    for (int i = 0; i < rank; ++i) {
      v.shape[static_cast<std::size_t>(i)] = shape[i];
      v.strides[static_cast<std::size_t>(i)] = strides[i];
    }
    if (!null_data) {
      const Guarded& g = reference && b ? *b : *a;
      v.data = const_cast<std::uint8_t*>(g.data());
      if (!reference && alias_data != nullptr) v.data = alias_data;
    }
    return v;
  }
  std::string describe() const {
    std::string s =
        name + (present ? "" : " (absent)") + " " + std::string(dtype_name(dtype)) + " shape [";
    for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    s += "] strides [";
    for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(strides[i]);
    s += "]";
    if (null_data) s += " null";
    if (alias_data != nullptr) s += " inside tensor #" + std::to_string(alias_of);
    if (!values.empty() && values.size() <= 64) {
      s += " values {";
      for (std::size_t i = 0; i < values.size(); ++i) {
        s += (i ? ", " : "") + std::to_string(values[i]);
      }
      s += "}";
    }
    return s;
  }
};

// Interesting bit patterns per element size: NaNs, infinities, signed zeros, extremes and
// subnormals of the float formats of that size.
inline std::uint64_t special_bits(std::size_t es, Rng& rng) {
  static const std::uint64_t k1[] = {0x7F, 0xFF, 0x80, 0x00, 0x7C, 0xFC, 0x7E, 0x01, 0x81, 0x7B};
  static const std::uint64_t k2[] = {0x7E00, 0xFE00, 0x7C00, 0xFC00, 0x7FC0, 0x7F80, 0xFF80,
                                     0x8000, 0x0001, 0x7BFF, 0x7F7F, 0x7FFF, 0xFFFF, 0x7F81};
  static const std::uint64_t k4[] = {0x7FC00000, 0xFFC00000, 0x7F800000, 0xFF800000,
                                     0x80000000, 0x00000001, 0x7F7FFFFF, 0xFF7FFFFF,
                                     0x7FA00000, 0x7FFFFFFF, 0x80000001, 0x00800000};
  const std::uint64_t r = rng.next();
  switch (es) {
    case 1:
      return k1[r % std::size(k1)];
    case 2:
      return k2[r % std::size(k2)];
    case 4:
      return k4[r % std::size(k4)];
    default:
      return r;
  }
}

// A call under test: its tensors plus run-wide settings decoded from the input.
struct Case {
  std::deque<Tensor> tensors;  // stable references while the builder adds more
  std::string note;            // op-specific description of the non-tensor arguments
  // Caches in which two different NaN codes count as equal: the Rope mean of a window holding
  // NaNs (or +inf and -inf) is a NaN whose sign and payload depend on the order of the float
  // additions' operands, which the Rope mean rule leaves open
  // (docs/operators/scatter_pa_kv_cache.md).
  bool nan_tolerant = false;
  Rng rng{0};
  int special = 0;  // 0: random data; else 1 in `special` elements gets a special pattern

  Tensor& add(const std::string& name, Role role) {
    tensors.emplace_back();
    tensors.back().name = name;
    tensors.back().role = role;
    return tensors.back();
  }
  Tensor& get(const std::string& name) {
    for (Tensor& t : tensors) {
      if (t.name == name) return t;
    }
    die("no tensor " + name);
  }
  std::string describe() const {
    std::string s = note;
    for (const Tensor& t : tensors) s += "\n  " + t.describe();
    return s;
  }
};

// Global settings every target decodes first: thread count and SIMD target.
inline void decode_runtime(Input& in) {
  static const int kThreads[] = {1, 2, 4, 3};
  const int threads = kThreads[in.pick(4)];
  if (get_num_threads() != threads) set_num_threads(threads);
  std::int64_t target = 0;  // 0: the best target the CPU has
#if HWY_ARCH_ARM
  // Arm: the second-best target this CPU runs (an SVE one, or NEON) and NEON, the last.
  hwy::SetSupportedTargetsForTest(0);
  const std::vector<std::int64_t> runnable = hwy::SupportedAndGeneratedTargets();
  switch (in.pick(4)) {
    case 1:
      if (runnable.size() > 1) target = runnable[1];
      break;
    case 2:
      target = runnable.back();
      break;
    default:
      break;
  }
#else
  switch (in.pick(4)) {
    case 1:
      target = HWY_SSE4;
      break;
    case 2:
      target = HWY_BASELINE_SCALAR;
      break;
    default:
      break;
  }
#endif
  if (target != 0 && (hwy::SupportedTargets() & target) == 0) target = 0;
  hwy::SetSupportedTargetsForTest(target);
}

// Breaks the description now and then: a dim or stride off by one, a zero or negative stride,
// a different dtype, a dropped or extra axis, a null pointer, a missing optional tensor.
inline void mutate_descriptions(Case& c, Input& in) {
  static const DType kAll[] = {DType::float32,       DType::float16,     DType::bfloat16,
                               DType::int8,          DType::uint8,       DType::int16,
                               DType::uint16,        DType::int32,       DType::uint32,
                               DType::int64,         DType::hifloat8,    DType::float8_e5m2,
                               DType::float8_e4m3fn, DType::float8_e8m0, DType::float4_e2m1,
                               DType::float4_e1m2};
  for (int round = 0; round < 3; ++round) {
    if (!in.rare(12)) return;
    Tensor& t =
        c.tensors[static_cast<std::size_t>(in.pick(static_cast<std::int64_t>(c.tensors.size())))];
    const int axis = t.rank > 0 ? static_cast<int>(in.pick(t.rank)) : 0;
    switch (in.pick(10)) {
      case 0:
        if (t.rank > 0) t.shape[axis] += 1;
        break;
      case 1:
        if (t.rank > 0 && t.shape[axis] > 0) t.shape[axis] -= 1;
        break;
      case 2:
        if (t.rank > 0) t.strides[axis] += 1;
        break;
      case 3:
        if (t.rank > 0) t.strides[axis] = std::max<std::int64_t>(t.strides[axis] - 1, 0);
        break;
      case 4:
        if (t.rank > 0) t.strides[axis] = in.rare(64) ? -t.strides[axis] - 1 : 0;
        break;
      case 5:
        t.dtype = kAll[in.pick(std::size(kAll))];
        break;
      case 6:
        if (t.rank > 0) {
          --t.rank;
        }
        break;
      case 7:
        if (t.rank < kMaxRank) {
          t.shape[t.rank] = 1 + in.pick(2);
          t.strides[t.rank] = 1;
          ++t.rank;
        }
        break;
      case 8:
        t.null_data = true;
        break;
      case 9:
        if (t.rank > 0) t.shape[axis] = -1 - in.pick(2);
        break;
    }
  }
}

// Now and then places one input or index tensor inside a cache (see Tensor::alias_of).
inline void decide_alias(Case& c, Input& in) {
  if (!in.rare(24)) return;
  std::vector<int> caches, others;
  for (std::size_t i = 0; i < c.tensors.size(); ++i) {
    (c.tensors[i].role == Role::cache ? caches : others).push_back(static_cast<int>(i));
  }
  if (caches.empty() || others.empty()) return;
  Tensor& t = c.tensors[static_cast<std::size_t>(others[in.pick(static_cast<std::int64_t>(others.size()))])];
  t.alias_of = caches[in.pick(static_cast<std::int64_t>(caches.size()))];
  t.alias_pos = in.u64();
}

inline void mutate(Case& c, Input& in) {
  mutate_descriptions(c, in);
  decide_alias(c, in);
}

// Puts an aliasing tensor inside its cache, element-aligned, when it fits; an index tensor's
// values are written into the cache (both copies), an input takes the cache's bytes.
inline void place_alias(Case& c, Tensor& t) {
  Tensor& cache = c.tensors[static_cast<std::size_t>(t.alias_of)];
  if (!t.present || !cache.present || !t.a || !cache.a || t.null_data || cache.null_data) return;
  const std::size_t n = t.a->size(), room = cache.a->size();
  const auto es = static_cast<std::size_t>(dtype_size(t.dtype));
  if (n == 0 || n > room) return;
  std::size_t off = static_cast<std::size_t>(t.alias_pos % (room - n + 1));
  const std::size_t mis = reinterpret_cast<std::uintptr_t>(cache.a->data() + off) % es;
  if (mis != 0) off = off >= mis ? off - mis : off + (es - mis);
  if (off + n > room) return;
  if (t.role == Role::index) {
    std::memcpy(cache.a->data() + off, t.a->data(), n);
    std::memcpy(cache.b->data() + off, t.a->data(), n);
    cache.before = cache.a->snapshot();
  } else {
    std::memcpy(t.a->data(), cache.a->data() + off, n);
    t.before = t.a->snapshot();
  }
  t.alias_data = cache.a->data() + off;
}

// Fills `n` bytes with random data: a copy from a fixed pool of random bytes at a random
// offset (a per-byte generator loop costs more than the call under test).
inline void fill_random(std::uint8_t* d, std::size_t n, Rng& rng) {
  static const std::vector<std::uint8_t> pool = [] {
    std::vector<std::uint8_t> v(std::size_t{1} << 20);
    Rng r{0x5EED};
    for (std::size_t i = 0; i < v.size(); i += 8) {
      const std::uint64_t x = r.next();
      std::memcpy(&v[i], &x, 8);
    }
    return v;
  }();
  for (std::size_t done = 0; done < n;) {
    const std::size_t at = rng.next() % (pool.size() / 2);
    const std::size_t len = std::min(n - done, pool.size() - at);
    std::memcpy(d + done, pool.data() + at, len);
    done += len;
  }
}

// Allocates and fills every present tensor. Returns false when a buffer would be too large.
inline bool materialize(Case& c) {
  for (Tensor& t : c.tensors) {
    if (!t.present) continue;
    const std::int64_t ext = t.extent();
    const std::int64_t es = static_cast<std::int64_t>(dtype_size(t.dtype));
    if (ext == -2) {
      // Negative dims or strides still go to the library, which must reject them without
      // reading: an empty guarded buffer traps any access.
      t.a.emplace(0, t.misalign, static_cast<std::uint8_t>(c.rng.next()));
      t.before.clear();
      if (t.role == Role::cache) t.b.emplace(*t.a);
      continue;
    }
    if (ext < 0 || ext * es > kMaxBytes) return false;
    // A packed FP4 view counts elements, two to a byte: the buffer ends with the last one's
    // byte, so that the guard catches a write one byte past it.
    const auto bytes =
        static_cast<std::size_t>(dtype_bits(t.dtype) == 4 ? (ext + 1) / 2 : ext * es);
    t.a.emplace(bytes, t.misalign, static_cast<std::uint8_t>(c.rng.next()));
    std::uint8_t* d = t.a->data();
    fill_random(d, bytes, c.rng);
    if (t.role != Role::index && c.special > 0 && bytes > 0 && (es == 1 || es == 2 || es == 4)) {
      // About one element in `special` gets a special pattern, at random positions.
      const auto n = static_cast<std::uint64_t>(bytes) / static_cast<std::uint64_t>(es);
      for (std::uint64_t k = n / static_cast<std::uint64_t>(c.special) + 1; k-- > 0;) {
        const std::uint64_t i = c.rng.next() % n;
        const std::uint64_t v = special_bits(static_cast<std::size_t>(es), c.rng);
        std::memcpy(d + i * static_cast<std::uint64_t>(es), &v, static_cast<std::size_t>(es));
      }
    }
    if (t.role == Role::index && ext > 0) {
      // Values in row-major order of the (possibly mutated) shape; int64 values are truncated
      // to 32 bits for int32 tensors, as a caller's cast would.
      const std::int64_t n = t.numel();
      for (std::int64_t i = 0; i < n && i < static_cast<std::int64_t>(t.values.size()); ++i) {
        const std::int64_t off = t.flat_offset(i) * es;
        const std::int64_t v = t.values[static_cast<std::size_t>(i)];
        if (es == 4) {
          const auto v32 = static_cast<std::int32_t>(v);
          std::memcpy(d + off, &v32, 4);
        } else if (es == 8) {
          std::memcpy(d + off, &v, 8);
        }
      }
    }
    t.before = t.a->snapshot();
    if (t.role == Role::cache) t.b.emplace(*t.a);
  }
  for (Tensor& t : c.tensors) {
    if (t.alias_of >= 0) place_alias(c, t);
  }
  return true;
}

struct Outcome {
  bool ok = true;
  std::int32_t status = 0;
  std::string message;
};

inline Outcome run_cpp(const std::function<void()>& fn) {
  Outcome o;
  try {
    fn();
  } catch (const Error& e) {
    o.ok = false;
    o.status = static_cast<std::int32_t>(e.status());
    o.message = e.what();
  }
  return o;
}

inline Outcome from_c(kvsStatus s) {
  Outcome o;
  o.ok = s == KVS_SUCCESS;
  o.status = s;
  if (!o.ok) o.message = kvsGetLastErrorMessage();
  return o;
}

// A C descriptor for a tensor (nullptr for an absent one); freed with the holder.
class CTensors {
 public:
  ~CTensors() {
    for (kvsTensor* t : held_) kvsDestroyTensor(t);
  }
  kvsTensor* make(const Tensor& t) {
    if (!t.present) return nullptr;
    const TensorView v = t.view(false);
    kvsTensor* out = nullptr;
    const kvsStatus s = kvsCreateTensor(v.data, static_cast<kvsDataType>(v.dtype), v.rank,
                                        v.shape.data(), v.strides.data(), &out);
    if (s != KVS_SUCCESS) {
      ok = false;
      first_error = from_c(s);
      return nullptr;
    }
    held_.push_back(out);
    return out;
  }
  bool ok = true;
  Outcome first_error;

 private:
  std::vector<kvsTensor*> held_;
};

// The C ABI's two phases on descriptors made by `ct`: get_workspace(&workspace, &executor),
// then run(executor) on success. A descriptor that could not be made decides the outcome
// instead (and sets any_status: its status is compared, not only success). Dies when the pair
// breaks its contract (a nonzero workspace, a missing executor, or an executor returned with a
// failure).
template <class GetWorkspace, class Run>
Outcome c_two_phase(const CTensors& ct, bool& any_status, const char* name,
                    GetWorkspace get_workspace, Run run) {
  if (!ct.ok) {
    any_status = true;
    return ct.first_error;
  }
  std::uint64_t ws = 1;
  kvsExecutor* ex = nullptr;
  kvsStatus s = get_workspace(&ws, &ex);
  if (s == KVS_SUCCESS) {
    if (ws != 0 || ex == nullptr) die(std::string(name) + "GetWorkspaceSize: bad outputs");
    s = run(ex);
    kvsDestroyExecutor(ex);
  } else if (ex != nullptr) {
    die(std::string(name) + "GetWorkspaceSize failed but returned an executor");
  }
  return from_c(s);
}

// True when every element that differs between the tested and the reference cache is a NaN
// in both (floating dtypes only).
inline bool differ_only_in_nans(const Tensor& t) {
  if (!dtype_is_floating(t.dtype)) return false;
  const std::size_t es = dtype_size(t.dtype);
  auto is_nan = [&](const std::uint8_t* p) {
    std::uint32_t code = 0;
    std::memcpy(&code, p, es);
    return std::isnan(t.dtype == DType::float32 ? std::bit_cast<float>(code)
                                                : formats::decode(t.dtype, code));
  };
  for (std::size_t i = 0; i + es <= t.a->size(); i += es) {
    const std::uint8_t* x = t.a->data() + i;
    const std::uint8_t* y = t.b->data() + i;
    if (std::memcmp(x, y, es) != 0 && !(is_nan(x) && is_nan(y))) return false;
  }
  return true;
}

// KVSCATTER_FUZZ_STATS=1 prints, at exit, how many cases succeeded and the most common error
// messages: a decoder that rarely reaches valid calls finds little.
class Stats {
 public:
  static Stats& get() {
    static Stats s;
    return s;
  }
  void count(const Outcome& o) {
    if (!enabled_) return;
    ++total_;
    if (o.ok) {
      ++ok_;
      return;
    }
    std::string key = o.message.substr(0, 60);
    for (char& ch : key) {
      if (ch >= '0' && ch <= '9') ch = '#';
    }
    ++errors_[key];
  }
  ~Stats() {
    if (!enabled_ || total_ == 0) return;
    std::fprintf(stderr, "kvscatter fuzz stats: %lld cases, %lld succeeded (%.1f%%)\n",
                 static_cast<long long>(total_), static_cast<long long>(ok_),
                 100.0 * static_cast<double>(ok_) / static_cast<double>(total_));
    std::vector<std::pair<std::int64_t, std::string>> v;
    for (const auto& [k, n] : errors_) v.emplace_back(n, k);
    std::sort(v.rbegin(), v.rend());
    for (std::size_t i = 0; i < v.size() && i < 25; ++i) {
      std::fprintf(stderr, "  %7lld  %s\n", static_cast<long long>(v[i].first),
                   v[i].second.c_str());
    }
  }

 private:
  Stats() : enabled_(std::getenv("KVSCATTER_FUZZ_STATS") != nullptr) {}
  bool enabled_;
  std::int64_t total_ = 0, ok_ = 0;
  std::map<std::string, std::int64_t> errors_;
};

// The oracle (see the top of this file). `tested` ran on the `a` buffers, `ref` on the `b`
// buffers of the caches.
// any_status: the tested path failed before reaching the operator (a C descriptor was
// refused), so only "both failed" is required.
inline void check(Case& c, const Outcome& tested, const Outcome& ref, bool any_status = false) {
  auto fail = [&](const std::string& what) {
    die(what +
        "\n  tested: " + (tested.ok ? "ok" : std::to_string(tested.status) + " " + tested.message) +
        "\n  reference: " + (ref.ok ? "ok" : std::to_string(ref.status) + " " + ref.message) +
        "\n  threads " + std::to_string(get_num_threads()) + ", target " + simd_target() +
        "\n  case: " + c.describe());
  };
  if (tested.ok != ref.ok || (!any_status && tested.status != ref.status)) {
    fail("the tested path and the reference disagree on the outcome");
  }
  if (!tested.ok && tested.message.empty()) fail("an error without a message");
  Stats::get().count(ref);
  for (Tensor& t : c.tensors) {
    if (!t.a) continue;
    if (const std::int64_t at = t.a->damaged_canary(); at >= 0) {
      fail(t.name + ": canary byte " + std::to_string(at) + " outside the buffer was written");
    }
    if (t.b) {
      if (const std::int64_t at = t.b->damaged_canary(); at >= 0) {
        fail(t.name + ": the reference wrote canary byte " + std::to_string(at));
      }
    }
    if (t.role != Role::cache) {
      if (!t.a->same_as(t.before)) fail(t.name + ": an input was written");
      continue;
    }
    if (!tested.ok) {
      if (!t.a->same_as(t.before)) fail(t.name + ": a failed call changed the cache");
      if (!t.b->same_as(t.before)) fail(t.name + ": a failed reference call changed the cache");
    } else if (!t.a->same_as(*t.b) && !(c.nan_tolerant && differ_only_in_nans(t))) {
      std::size_t i = 0;
      while (t.a->data()[i] == t.b->data()[i]) ++i;
      fail(t.name + ": differs from the reference at byte " + std::to_string(i) + " (" +
           std::to_string(t.a->data()[i]) + " vs " + std::to_string(t.b->data()[i]) + ", was " +
           std::to_string(t.before[i]) + ")");
    }
  }
}

// Which front door a case goes through.
enum class Path { oneshot, plan_execute, c_abi };

inline Path decode_path(Input& in) {
  switch (in.pick(4)) {
    case 1:
      return Path::plan_execute;
    case 2:
      return Path::c_abi;
    default:
      return Path::oneshot;
  }
}

// Sizes that hit the SIMD kernels' edges (vector tails, 32-byte rows, large heads).
inline std::int64_t head_size(Input& in) {
  static const std::vector<std::int64_t> k = {8,  16, 1,  2,  3,  4,   7,   15,  17,  31,
                                              32, 33, 63, 64, 65, 127, 128, 129, 256, 576};
  return in.choose(k);
}

// A slot for a table of num_slots entries: mostly valid, sometimes padding, off by one,
// negative, huge or a repeat of an earlier slot. `dtype` is the index dtype.
inline std::int64_t slot_value(Input& in, std::int64_t num_slots, DType dtype,
                               const std::vector<std::int64_t>& earlier) {
  const bool narrow = dtype == DType::int32;
  if (in.rare(16)) {
    switch (in.pick(8)) {
      case 0:
        return num_slots;  // one past the end
      case 1:
        return narrow ? std::numeric_limits<std::int32_t>::max()
                      : std::numeric_limits<std::int64_t>::max();
      case 2:
        return narrow ? std::numeric_limits<std::int32_t>::min()
                      : std::numeric_limits<std::int64_t>::min();
      case 3:
        return -2 - in.pick(100);
      case 4:
        return num_slots + in.pick(1000);
      case 5:
        return std::int64_t{1} << (32 + in.pick(31));
      default:
        return -1;
    }
  }
  switch (in.pick(8)) {
    case 6:
      return -1;
    case 7:
      if (!earlier.empty())
        return earlier[static_cast<std::size_t>(
            in.pick(static_cast<std::int64_t>(earlier.size())))];
      [[fallthrough]];
    default:
      return num_slots > 0 ? in.pick(std::min<std::int64_t>(num_slots, 65536)) : -1;
  }
}

}  // namespace kvscatter::fuzz
