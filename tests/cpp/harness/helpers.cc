#include "harness/helpers.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "kvscatter/formats.h"

namespace kvscatter::harness {

std::uint64_t base_seed() {
  if (const char* s = std::getenv("KVSCATTER_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return 20250101;
}

std::vector<int> harness_thread_counts() {
  const char* s = std::getenv("KVSCATTER_TEST_THREADS");
  if (!s) return {1, 2, 3};
  std::vector<int> counts;
  const std::string text(s);
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    char* stop = nullptr;
    const long n = std::strtol(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || n < 1 || n > 256) {
      throw std::invalid_argument(
          "KVSCATTER_TEST_THREADS must list thread counts like \"1,3\", got \"" + text + "\"");
    }
    counts.push_back(static_cast<int>(n));
    at = end + 1;
  }
  return counts;
}

std::int64_t Gen::uniform(std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
}

bool Gen::chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

std::int64_t Gen::log_uniform(std::int64_t lo, std::int64_t hi) {
  const double a = std::log(static_cast<double>(lo)), b = std::log(static_cast<double>(hi) + 1);
  const auto v =
      static_cast<std::int64_t>(std::exp(std::uniform_real_distribution<double>(a, b)(rng_)));
  return std::clamp<std::int64_t>(v, lo, hi);
}

void Gen::fill(std::span<std::uint8_t> bytes) {
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    const std::uint64_t x = rng_();
    std::memcpy(&bytes[i], &x, 8);
  }
  for (; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(rng_());
}

TensorView TensorRef::view(const std::vector<std::uint8_t*>& data) const {
  return TensorView(data[static_cast<std::size_t>(buffer)] + offset, dtype, shape, strides);
}

std::int64_t TensorRef::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::span<const DType> all_dtypes() {
  static constexpr DType kAll[] = {DType::float32,  DType::float16,     DType::bfloat16,
                                   DType::int8,     DType::uint8,       DType::int16,
                                   DType::uint16,   DType::int32,       DType::uint32,
                                   DType::hifloat8, DType::float8_e5m2, DType::float8_e4m3fn};
  return kAll;
}

namespace {

// Elements spanned by a view (0 when any axis is empty).
std::int64_t extent(const std::vector<std::int64_t>& shape,
                    const std::vector<std::int64_t>& strides) {
  std::int64_t e = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return 0;
    e += (shape[i] - 1) * strides[i];
  }
  return e;
}

TensorRef place(Case& c, Gen& g, const std::string& name, DType dtype,
                std::vector<std::int64_t> shape, std::vector<std::int64_t> strides,
                double misalign_chance) {
  TensorRef t;
  t.buffer = static_cast<int>(c.buffers.size());
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.strides = std::move(strides);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(extent(t.shape, t.strides)) *
                                  dtype_size(dtype));
  g.fill(bytes);
  c.buffers.push_back(std::move(bytes));
  c.buffer_names.push_back(name);
  c.misalign.resize(c.buffers.size() - 1, 0);
  c.misalign.push_back(g.chance(misalign_chance) ? static_cast<std::size_t>(g.uniform(1, 7)) : 0);
  return t;
}

}  // namespace

TensorRef add_tensor(Case& c, Gen& g, const std::string& name, DType dtype,
                     std::vector<std::int64_t> shape, int pad_axes, double misalign_chance) {
  const int rank = static_cast<int>(shape.size());
  std::vector<std::int64_t> strides(shape.size(), 1);
  std::int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    strides[static_cast<std::size_t>(i)] = s;
    std::int64_t next = s * std::max<std::int64_t>(shape[static_cast<std::size_t>(i)], 1);
    if (i > 0 && i <= pad_axes && g.chance(0.3)) next += g.uniform(1, 9);
    s = next;
  }
  return place(c, g, name, dtype, std::move(shape), std::move(strides), misalign_chance);
}

TensorRef add_permuted(Case& c, Gen& g, const std::string& name, DType dtype,
                       std::vector<std::int64_t> shape, const std::vector<int>& order,
                       std::int64_t pad) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  std::int64_t s = 1;
  for (auto k = static_cast<int>(order.size()) - 1; k >= 0; --k) {
    const auto a = static_cast<std::size_t>(order[static_cast<std::size_t>(k)]);
    strides[a] = s;
    s *= shape[a] + pad;
  }
  return place(c, g, name, dtype, std::move(shape), std::move(strides), 0.3);
}

TensorRef add_index(Case& c, const std::string& name, DType dtype,
                    const std::vector<std::int64_t>& values, std::vector<std::int64_t> shape) {
  if (dtype != DType::int32 && dtype != DType::int64) throw std::logic_error("index dtype");
  if (shape.empty()) shape = {static_cast<std::int64_t>(values.size())};
  TensorRef t;
  t.buffer = static_cast<int>(c.buffers.size());
  t.dtype = dtype;
  t.shape = shape;
  const auto cs = contiguous_strides(shape);
  t.strides.assign(cs.begin(), cs.begin() + static_cast<std::ptrdiff_t>(shape.size()));
  const std::size_t es = dtype_size(dtype);
  std::vector<std::uint8_t> bytes(values.size() * es);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::int32) {
      const auto v = static_cast<std::int32_t>(values[i]);
      std::memcpy(&bytes[i * es], &v, es);
    } else {
      std::memcpy(&bytes[i * es], &values[i], es);
    }
  }
  c.buffers.push_back(std::move(bytes));
  c.buffer_names.push_back(name);
  c.misalign.resize(c.buffers.size(), 0);
  return t;
}

std::int64_t read_index(const Case& c, const TensorRef& t, std::int64_t i) {
  const std::uint8_t* p = c.buffers[static_cast<std::size_t>(t.buffer)].data() + t.offset;
  if (t.dtype == DType::int32) {
    std::int32_t v;
    std::memcpy(&v, p + i * 4, 4);
    return v;
  }
  std::int64_t v;
  std::memcpy(&v, p + i * 8, 8);
  return v;
}

void replace_nans(Case& c, Gen& g, const TensorRef& t) {
  if (!dtype_is_floating(t.dtype)) return;
  auto& b = c.buffers[static_cast<std::size_t>(t.buffer)];
  const std::size_t es = dtype_size(t.dtype);
  for (std::size_t i = t.offset % es; i + es <= b.size(); i += es) {
    for (;;) {
      std::uint32_t code = 0;
      std::memcpy(&code, &b[i], es);
      const float v =
          t.dtype == DType::float32 ? std::bit_cast<float>(code) : formats::decode(t.dtype, code);
      if (!std::isnan(v)) break;
      const std::uint64_t r = g.next();
      std::memcpy(&b[i], &r, es);
    }
  }
}

std::vector<std::int64_t> make_slots(Gen& g, std::int64_t t, std::int64_t ns,
                                     const SlotOptions& opt, std::string& desc) {
  std::vector<std::int64_t> slots(static_cast<std::size_t>(t));
  if (t == 0) return slots;
  auto at = [&](std::int64_t i) -> std::int64_t& { return slots[static_cast<std::size_t>(i)]; };
  if (g.chance(opt.consecutive) && t <= ns) {
    const std::int64_t start = g.uniform(0, ns - t);
    for (std::int64_t i = 0; i < t; ++i) at(i) = start + i;
    desc += " consecutive";
  } else {  // distinct slots while they last, padding after
    std::vector<std::int64_t> pool(static_cast<std::size_t>(ns));
    for (std::int64_t i = 0; i < ns; ++i) pool[static_cast<std::size_t>(i)] = i;
    for (std::int64_t i = 0; i < t; ++i) {
      if (i < ns) {
        std::swap(pool[static_cast<std::size_t>(i)],
                  pool[static_cast<std::size_t>(g.uniform(i, ns - 1))]);
        at(i) = pool[static_cast<std::size_t>(i)];
      } else {
        at(i) = -1;
      }
    }
  }
  if (g.chance(opt.last_slot)) {
    at(g.uniform(0, t - 1)) = ns - 1;
    desc += " last-slot";
  }
  if (g.chance(opt.padding)) {
    const std::int64_t n = g.uniform(1, std::max<std::int64_t>(1, t / 4));
    for (std::int64_t i = 0; i < n; ++i) {
      at(g.uniform(0, t - 1)) = opt.only_minus_one || g.chance(0.5) ? -1 : -g.uniform(2, 1000);
    }
    desc += " padding";
  }
  if (g.chance(opt.out_of_range)) {
    const std::int64_t n = g.uniform(1, std::max<std::int64_t>(1, t / 8));
    for (std::int64_t i = 0; i < n; ++i) at(g.uniform(0, t - 1)) = ns + g.uniform(0, 4);
    desc += " out-of-range";
  }
  if (g.chance(opt.duplicates) && t > 1) {
    const std::int64_t n = g.uniform(1, std::max<std::int64_t>(1, t / 3));
    for (std::int64_t i = 0; i < n; ++i) at(g.uniform(0, t - 1)) = at(g.uniform(0, t - 1));
    desc += " duplicates";
  }
  return slots;
}

}  // namespace kvscatter::harness
