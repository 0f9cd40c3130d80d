#include "core/overlap.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace kvscatter::detail {
namespace {

// Byte stride of each dimension longer than one, largest first, with the dimension lengths.
struct Dims {
  int m = 0;
  std::array<std::int64_t, kMaxRank> stride{}, len{};
};

Dims sorted_dims(const TensorView& t) {
  Dims d;
  const auto es = static_cast<std::int64_t>(t.element_size());
  for (int a = 0; a < t.rank; ++a) {
    if (t.dim(a) <= 1) continue;
    int j = d.m++;
    for (; j > 0 && d.stride[static_cast<std::size_t>(j - 1)] < t.stride(a) * es; --j) {
      d.stride[static_cast<std::size_t>(j)] = d.stride[static_cast<std::size_t>(j - 1)];
      d.len[static_cast<std::size_t>(j)] = d.len[static_cast<std::size_t>(j - 1)];
    }
    d.stride[static_cast<std::size_t>(j)] = t.stride(a) * es;
    d.len[static_cast<std::size_t>(j)] = t.dim(a);
  }
  return d;
}

// Is there c with |c_k| < len_k and |target - sum_{k >= level} c_k * stride_k| <= reach[level]?
// reach[k] bounds what the dimensions inside k (plus one element's width) can still add; with
// strides that step over the inner extent at most two c_k fit per level, so this is cheap.
bool reachable(const Dims& d, const std::array<std::int64_t, kMaxRank + 1>& reach, int level,
               std::int64_t target) {
  if (level == d.m)
    return target > -reach[static_cast<std::size_t>(level)] &&
           target < reach[static_cast<std::size_t>(level)];
  const auto k = static_cast<std::size_t>(level);
  const std::int64_t s = d.stride[k], r = reach[k + 1] - 1, n = d.len[k] - 1;
  // c * s in [target - r, target + r]
  std::int64_t lo = target - r >= 0 ? (target - r + s - 1) / s : -((r - target) / s);
  std::int64_t hi = target + r >= 0 ? (target + r) / s : -((-(target + r) + s - 1) / s);
  lo = std::max(lo, -n);
  hi = std::min(hi, n);
  for (std::int64_t c = lo; c <= hi; ++c) {
    if (reachable(d, reach, level + 1, target - c * s)) return true;
  }
  return false;
}

}  // namespace

ByteSpan byte_span(const TensorView& t, std::int64_t read_elems) {
  if (t.data == nullptr) return {};
  std::int64_t lo = 0, hi = 0;  // element offsets of the first and last element
  for (int a = 0; a < t.rank; ++a) {
    const std::int64_t n = t.shape[static_cast<std::size_t>(a)];
    if (n == 0) return {};
    const std::int64_t reach = t.strides[static_cast<std::size_t>(a)] * (n - 1);
    (reach < 0 ? lo : hi) += reach;
  }
  hi = std::max(hi + 1, read_elems);
  const auto base = reinterpret_cast<std::uintptr_t>(t.data);
  // Every dtype addresses whole bytes: the float4 types' elements are packed byte pairs.
  const auto es = static_cast<std::int64_t>(t.element_size());
  return {base + static_cast<std::uintptr_t>(lo * es), base + static_cast<std::uintptr_t>(hi * es)};
}

OperandExtents extents_of(const Operands& ops) {
  OperandExtents e;
  for (std::size_t i = 0; i < 2 * kMaxOperands; ++i) {
    const Operand& op = i < kMaxOperands ? ops.outputs[i] : ops.inputs[i - kMaxOperands];
    if (op.view == nullptr) continue;
    e.present = static_cast<std::uint16_t>(e.present | (1u << i));
    // The span of the same view at address 0 (a non-null stand-in: only offsets matter).
    TensorView at_zero = *op.view;
    at_zero.data = reinterpret_cast<void*>(std::uintptr_t{1} << 62);
    const ByteSpan s = byte_span(at_zero, op.read_elems);
    if (s.lo == s.hi) continue;
    const auto base = reinterpret_cast<std::uintptr_t>(at_zero.data);
    e.lo[i] = static_cast<std::int64_t>(s.lo - base);
    e.hi[i] = static_cast<std::int64_t>(s.hi - base);
  }
  e.ready = true;
  return e;
}

bool may_overlap(const TensorView& a, const TensorView& b) {
  const ByteSpan sa = byte_span(a), sb = byte_span(b);
  if (sa.lo >= sa.hi || sb.lo >= sb.hi || sa.hi <= sb.lo || sb.hi <= sa.lo) return false;
  // Same layout at two addresses: element i of `a` meets element j of `b` only if
  // offset(j) - offset(i) comes within one element of the byte distance between the views.
  if (a.dtype != b.dtype || a.rank != b.rank || dtype_bits(a.dtype) % 8 != 0) return true;
  for (int k = 0; k < a.rank; ++k) {
    if (a.dim(k) != b.dim(k) || (a.dim(k) > 1 && a.stride(k) != b.stride(k))) return true;
    if (a.stride(k) < 0) return true;
  }
  const Dims d = sorted_dims(a);
  std::array<std::int64_t, kMaxRank + 1> reach{};
  reach[static_cast<std::size_t>(d.m)] = static_cast<std::int64_t>(a.element_size());
  for (int k = d.m; k-- > 0;) {
    const auto i = static_cast<std::size_t>(k);
    // A stride that does not step over the inner extent: give up on exactness.
    if (d.stride[i] < reach[i + 1]) return true;
    reach[i] = reach[i + 1] + d.stride[i] * (d.len[i] - 1);
  }
  const auto delta = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(b.data) -
                                               reinterpret_cast<std::uintptr_t>(a.data));
  return reachable(d, reach, 0, delta);
}

bool StagedInputs::stage(const Operands& ops) {
  // Byte spans of the outputs, computed once; the exact test runs only when spans meet.
  const auto count = [](const std::array<Operand, kMaxOperands>& list) {
    std::size_t n = list.size();
    while (n > 0 && list[n - 1].view == nullptr) --n;
    return n;
  };
  const std::size_t n_out = count(ops.outputs), n_in = count(ops.inputs);
  std::array<ByteSpan, kMaxOperands> out;  // the first n_out are set
  for (std::size_t i = 0; i < n_out; ++i) {
    out[i] = ops.outputs[i].view != nullptr ? byte_span(*ops.outputs[i].view) : ByteSpan{};
  }
  const auto meet = [](const ByteSpan& x, const ByteSpan& y) {
    return x.lo < x.hi && y.lo < y.hi && x.lo < y.hi && y.lo < x.hi;
  };
  for (std::size_t i = 0; i < n_out; ++i) {
    for (std::size_t j = i + 1; j < n_out; ++j) {
      const Operand &a = ops.outputs[i], &b = ops.outputs[j];
      if (meet(out[i], out[j]) && may_overlap(*a.view, *b.view)) {
        invalid(a.name, " ", a.view->describe(), " and ", b.name, " ", b.view->describe(),
                " share memory; outputs of one call must not overlap");
      }
    }
  }
  for (std::size_t i = 0; i < n_in; ++i) {
    const Operand& in = ops.inputs[i];
    if (in.view == nullptr) continue;
    const ByteSpan s = byte_span(*in.view, in.read_elems);
    bool overlaps = false;
    for (std::size_t k = 0; k < n_out && !overlaps; ++k) {
      overlaps =
          meet(s, out[k]) && (in.read_elems > 0 || may_overlap(*in.view, *ops.outputs[k].view));
    }
    if (!overlaps) continue;
    const std::size_t bytes = s.hi - s.lo;
    buffers_.push_back(std::make_unique<unsigned char[]>(bytes));
    std::memcpy(buffers_.back().get(), reinterpret_cast<const void*>(s.lo), bytes);
    const auto shift = reinterpret_cast<std::uintptr_t>(in.view->data) - s.lo;
    copies_.push_back({static_cast<int>(i), in.view->data, buffers_.back().get() + shift});
  }
  return !copies_.empty();
}

void StagedInputs::rebind(const Operands& ops) const {
  for (const Copy& c : copies_) {
    auto* view = const_cast<TensorView*>(ops.inputs[static_cast<std::size_t>(c.index)].view);
    if (view != nullptr && view->data == c.original) view->data = c.data;
  }
}

}  // namespace kvscatter::detail
