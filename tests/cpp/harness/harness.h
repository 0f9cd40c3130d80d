// The shared optimized-versus-reference harness. Every operator contributes one case generator
// (tests/cpp/harness/<op>_cases.cc); harness_test.cc runs each generated case on every SIMD target
// compiled in, at 1, 2 and 3 threads, in canary-guarded buffers, and compares every buffer byte for
// byte with the reference kernel's result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace kvscatter::harness {

// One call of an operator, with the initial bytes of every tensor's storage.
struct Case {
  std::string name;  // shapes, dtypes and modes, printed when the case fails
  std::vector<std::vector<std::uint8_t>> buffers;
  // Name of each buffer (the tensor it holds), printed when its bytes differ; may be empty.
  std::vector<std::string> buffer_names;
  // Byte offset of each buffer's data from a 64-byte boundary (unaligned rows); empty: 0.
  std::vector<std::size_t> misalign;
  // Builds the views over `data` (one pointer per buffer, holding a fresh copy of `buffers`) and
  // runs the operator: its optimized execute() when `reference` is false, its reference kernel when
  // true. Both paths must produce identical bytes in every buffer.
  std::function<void(const std::vector<std::uint8_t*>& data, bool reference)> run;
  // The call must fail with kvscatter::Error on both paths, leaving every buffer unchanged.
  bool expect_error = false;
  // The optimized path runs with the streaming-store threshold at zero (src/core/streaming.h), so
  // the non-temporal store paths of large calls are exercised on small buffers.
  bool stream = false;
};

using Generator = Case (*)(std::mt19937_64& rng);

struct OpCases {
  const char* op;
  Generator generate;
  int count;  // cases drawn per run (KVSCATTER_TEST_SEED fixes the seed)
};

// The flat list of every registered generator, in registration order.
std::vector<OpCases>& registry();

struct Register {
  Register(const char* op, Generator generate, int count) {
    registry().push_back({op, generate, count});
  }
};

}  // namespace kvscatter::harness

// In an <op>_cases.cc: KVS_HARNESS_CASES(scatter_pa_kv_cache, generate_case, 200);
#define KVS_HARNESS_CASES(op, generator, count) \
  static const ::kvscatter::harness::Register kvs_harness_register_##op(#op, generator, count)
