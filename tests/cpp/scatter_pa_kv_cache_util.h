// Test helpers for ScatterPaKvCache: owning typed tensors, views, and a runner that applies the
// optimized kernel and the reference to separate copies of the caches.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <vector>

#include "kvscatter/dtype.h"
#include "kvscatter/error.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "kvscatter/tensor.h"

namespace kvscatter::testing {

// An owning byte buffer viewed as a tensor of `dtype` (contiguous unless strides are given).
struct Buf {
  std::vector<unsigned char> bytes;
  DType dtype = DType::float32;
  std::vector<std::int64_t> shape, strides;  // strides empty: contiguous
  std::size_t offset = 0;                    // bytes from the storage start to element 0

  Buf() = default;
  Buf(DType dt, std::vector<std::int64_t> shp, std::int64_t extra_elems = 0)
      : dtype(dt), shape(std::move(shp)) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    bytes.assign(static_cast<std::size_t>(n + extra_elems) * dtype_size(dt), 0);
  }
  std::int64_t elems() const { return static_cast<std::int64_t>(bytes.size() / dtype_size(dtype)); }
  TensorView view() {
    if (strides.empty()) return TensorView(bytes.data() + offset, dtype, shape);
    return TensorView(bytes.data() + offset, dtype, shape, strides);
  }
  template <class T>
  T get(std::int64_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
    return v;
  }
  template <class T>
  void set(std::int64_t i, T v) {
    std::memcpy(bytes.data() + i * static_cast<std::int64_t>(sizeof(T)), &v, sizeof(T));
  }
};

// An index tensor (int32 or int64) with the given values and shape.
inline Buf index_buf(DType dt, const std::vector<std::int64_t>& values,
                     std::vector<std::int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(values.size())};
  Buf b(dt, shape);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dt == DType::int32) {
      b.set<std::int32_t>(static_cast<std::int64_t>(i), static_cast<std::int32_t>(values[i]));
    } else {
      b.set<std::int64_t>(static_cast<std::int64_t>(i), values[i]);
    }
  }
  return b;
}

// Everything one call needs, owned.
struct Call {
  Buf key, key_cache, slot, value, value_cache;
  bool has_value = true;
  std::optional<Buf> compress_lens, compress_seq_offsets, seq_lens;
  ScatterPaKvCacheOptions opts;  // mode/array options; tensors are bound by bind()

  ScatterPaKvCacheOptions bind() {
    ScatterPaKvCacheOptions o = opts;
    if (compress_lens) o.compress_lens = compress_lens->view();
    if (compress_seq_offsets) o.compress_seq_offsets = compress_seq_offsets->view();
    if (seq_lens) o.seq_lens = seq_lens->view();
    return o;
  }
  std::optional<TensorView> value_view() {
    return has_value ? std::optional<TensorView>(value.view()) : std::nullopt;
  }
  std::optional<TensorView> value_cache_view() {
    return has_value ? std::optional<TensorView>(value_cache.view()) : std::nullopt;
  }
  ScatterPaKvCachePlan plan() {
    return plan_scatter_pa_kv_cache(key.view(), value_view(), key_cache.view(), value_cache_view(),
                                    slot.view(), bind());
  }
  // Optimized kernel on this call's caches.
  void run() {
    scatter_pa_kv_cache(key.view(), value_view(), key_cache.view(), value_cache_view(), slot.view(),
                        bind());
  }
  // Reference on this call's caches.
  void run_reference() { reference::execute(plan()); }
};

// Runs both kernels on copies of `c`; expects identical caches and returns the optimized copy.
inline Call run_both(const Call& c) {
  Call opt = c, ref = c;
  opt.run();
  ref.run_reference();
  EXPECT_EQ(opt.key_cache.bytes, ref.key_cache.bytes) << "key_cache: optimized != reference";
  if (c.has_value) {
    EXPECT_EQ(opt.value_cache.bytes, ref.value_cache.bytes)
        << "value_cache: optimized != reference";
  }
  return opt;
}

}  // namespace kvscatter::testing
