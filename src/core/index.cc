#include "core/index.h"

#include <array>

#include "core/strings.h"

namespace kvscatter::detail {

std::int64_t flat_offset(const TensorView& t, std::int64_t i, int axes) noexcept {
  std::int64_t off = 0;
  for (int a = axes - 1; a >= 0; --a) {
    const std::int64_t n = t.dim(a);
    off += (i % n) * t.stride(a);
    i /= n;
  }
  return off;
}

std::string index_str(const TensorView& t, std::int64_t i) {
  if (t.rank <= 1) return cat("[", i, "]");
  std::array<std::int64_t, kMaxRank> idx{};
  for (int a = t.rank - 1; a >= 0; --a) {
    idx[static_cast<std::size_t>(a)] = i % t.dim(a);
    i /= t.dim(a);
  }
  std::string s = "[";
  for (int a = 0; a < t.rank; ++a) s += cat(a ? ", " : "", idx[static_cast<std::size_t>(a)]);
  return s + "]";
}

void read_indices(const TensorView& t, std::vector<std::int64_t>& out) {
  std::int64_t n = 1;
  for (int a = 0; a < t.rank; ++a) n *= t.dim(a);
  out.resize(static_cast<std::size_t>(n));
  if (n == 0) return;
  if (t.is_contiguous() && t.dtype == DType::int64) {
    std::memcpy(out.data(), t.data, static_cast<std::size_t>(n) * 8);
    return;
  }
  const IndexReader reader(t);
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = reader[i];
}

}  // namespace kvscatter::detail
