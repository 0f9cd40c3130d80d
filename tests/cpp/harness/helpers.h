// Case-building helpers shared by the harness's generators: random draws, tensors placed in a
// Case's buffers (padded strides, permuted axes, unaligned starts), index tensors and slot patterns
// (padding, the last slot, duplicates, consecutive prefills).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "kvscatter/dtype.h"
#include "kvscatter/tensor.h"

namespace kvscatter::harness {

// KVSCATTER_TEST_SEED (decimal) when set, else a fixed seed.
std::uint64_t base_seed();

// The thread counts the harness runs each case at: KVSCATTER_TEST_THREADS (comma-separated, e.g.
// "1,3") when set, else 1, 2 and 3. Throws std::invalid_argument on anything but positive counts.
std::vector<int> harness_thread_counts();

class Gen {
 public:
  explicit Gen(std::mt19937_64& rng) : rng_(rng) {}
  std::uint64_t next() { return rng_(); }
  std::int64_t uniform(std::int64_t lo, std::int64_t hi);  // inclusive
  bool chance(double p);
  // Spread over orders of magnitude: small values as likely as large ones.
  std::int64_t log_uniform(std::int64_t lo, std::int64_t hi);
  template <class T>
  T pick(std::initializer_list<T> items) {
    return items.begin()[uniform(0, static_cast<std::int64_t>(items.size()) - 1)];
  }
  void fill(std::span<std::uint8_t> bytes);
  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64& rng_;
};

// Where one tensor lives in a Case: its buffer and the geometry of its view.
struct TensorRef {
  int buffer = -1;
  DType dtype = DType::uint8;
  std::vector<std::int64_t> shape, strides;  // strides in elements
  std::size_t offset = 0;                    // bytes from the buffer's start to element 0

  TensorView view(const std::vector<std::uint8_t*>& data) const;
  std::int64_t numel() const;
};

// Every dtype a byte-moving operator accepts.
std::span<const DType> all_dtypes();

// Adds a buffer of random bytes holding `shape` of `dtype`. The strides of axes 0 .. pad_axes-1 may
// carry padding; with misalign_chance the buffer starts 1-7 bytes past a 64-byte boundary.
TensorRef add_tensor(Case& c, Gen& g, const std::string& name, DType dtype,
                     std::vector<std::int64_t> shape, int pad_axes = 0,
                     double misalign_chance = 0.3);

// As add_tensor, with the axes laid out in memory in `order` (outermost first) and `pad` elements
// of padding after every axis: non-contiguous views of every kind.
TensorRef add_permuted(Case& c, Gen& g, const std::string& name, DType dtype,
                       std::vector<std::int64_t> shape, const std::vector<int>& order,
                       std::int64_t pad);

// Adds a contiguous int32 or int64 index tensor with the given values (shape: 1-D by default).
TensorRef add_index(Case& c, const std::string& name, DType dtype,
                    const std::vector<std::int64_t>& values, std::vector<std::int64_t> shape = {});

// Element i of a contiguous index tensor, read from the case's initial bytes.
std::int64_t read_index(const Case& c, const TensorRef& t, std::int64_t i);

// Replaces the codes of a floating tensor's buffer that decode to NaN (a mean of two NaN payloads
// depends on operand order, which no rule fixes).
void replace_nans(Case& c, Gen& g, const TensorRef& t);

// Slot pattern knobs: what make_slots may mix into the slots of `tokens` tokens.
struct SlotOptions {
  double consecutive = 0.15;    // a prefill into consecutive slots
  double last_slot = 0.4;       // one token names the very last slot
  double padding = 0.35;        // some tokens are padding
  bool only_minus_one = false;  // padding is -1 only (else also other negative values)
  double duplicates = 0.3;      // some tokens repeat another token's slot
  double out_of_range = 0.0;    // some tokens name slots >= num_slots (operators that skip them)
};

// Slots for `tokens` tokens over `num_slots` slots; appends what it mixed in to `desc`.
std::vector<std::int64_t> make_slots(Gen& g, std::int64_t tokens, std::int64_t num_slots,
                                     const SlotOptions& opt, std::string& desc);

}  // namespace kvscatter::harness
