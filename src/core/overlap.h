// Inputs and outputs of one call that share memory (see docs/semantics.md, "Inputs that overlap
// outputs"). Outputs whose elements may share memory are rejected, naming both; an input whose
// bytes meet an output's is copied once before any write, so a call always gives the result of
// reading every input first, whatever the thread count. A call without overlap pays one
// address-interval test per (output, output) and (input, output) pair, on byte ranges that
// plan_<op>() works out once (OperandExtents).
//
// An operator's execute() lists its operands once, as a generic lambda over its plan, and hands
// the rest to execute_staged():
//
//   void execute(const FooPlan& plan) {
//     detail::execute_staged(
//         plan,
//         [](auto& p) {  // outputs, then inputs (at most 8 each; null: an absent optional)
//           return detail::Operands{{{{&p.cache, "cache"}}},
//                                   {{{&p.x, "x"}, {&p.slot_mapping, "slot_mapping"}}}};
//         },
//         run);  // run(const FooPlan&): the execute body (data checks, then writes)
//   }
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvscatter/tensor.h"

namespace kvscatter::detail {

// One operand: its view (null when an optional operand is absent), its name for messages, and,
// for reads that go past the view's own elements (Nct rows read at data + offset + t * stride),
// the number of elements read from `data` onward (0: the view's own elements).
struct Operand {
  const TensorView* view = nullptr;
  const char* name = "";
  std::int64_t read_elems = 0;
};

inline constexpr int kMaxOperands = 8;

struct Operands {
  std::array<Operand, kMaxOperands> outputs{};
  std::array<Operand, kMaxOperands> inputs{};
};

// [lo, hi) bytes a view can touch; lo == hi when it has no elements or no data.
struct ByteSpan {
  std::uintptr_t lo = 0, hi = 0;
};
ByteSpan byte_span(const TensorView& t, std::int64_t read_elems = 0);

// Each operand's byte range relative to its data pointer, for a plan (see OperandExtents).
OperandExtents extents_of(const Operands& ops);

// The address-interval test of a call: false only when no two outputs, and no input and output,
// have byte ranges that meet, which needs nothing more. Without plan-time extents, or with an
// operand given that was absent at plan time, it answers true and the full test decides.
// Inlined with the operator's operand list and constant loop bounds, the slots an operator does
// not list fold away, leaving a few comparisons per operand it has.
[[gnu::always_inline]] inline bool ranges_may_meet(const Operands& ops, const OperandExtents& e) {
  if (!e.ready) return true;
  // Operands given now, against those given at plan time, in one comparison.
  unsigned given = 0;
#pragma GCC unroll 8
  for (std::size_t i = 0; i < kMaxOperands; ++i) {
    given |= static_cast<unsigned>(ops.outputs[i].view != nullptr) << i;
    given |= static_cast<unsigned>(ops.inputs[i].view != nullptr) << (kMaxOperands + i);
  }
  if (given != e.present) return true;
  const auto range = [&](const TensorView* v, std::size_t i, std::uintptr_t& a,
                         std::uintptr_t& b) {
    if (v == nullptr || v->data == nullptr || e.lo[i] == e.hi[i]) return false;
    const auto base = reinterpret_cast<std::uintptr_t>(v->data);
    a = base + static_cast<std::uintptr_t>(e.lo[i]);
    b = base + static_cast<std::uintptr_t>(e.hi[i]);
    return true;
  };
  std::array<std::uintptr_t, kMaxOperands> lo{}, hi{};  // outputs' ranges; none: [0, 0)
#pragma GCC unroll 8
  for (std::size_t i = 0; i < kMaxOperands; ++i) {
    std::uintptr_t a = 0, b = 0;
    if (!range(ops.outputs[i].view, i, a, b)) continue;
#pragma GCC unroll 8
    for (std::size_t k = 0; k < i; ++k) {
      if (a < hi[k] && lo[k] < b) return true;
    }
    lo[i] = a;
    hi[i] = b;
  }
#pragma GCC unroll 8
  for (std::size_t i = 0; i < kMaxOperands; ++i) {
    std::uintptr_t a = 0, b = 0;
    if (!range(ops.inputs[i].view, kMaxOperands + i, a, b)) continue;
#pragma GCC unroll 8
    for (std::size_t k = 0; k < kMaxOperands; ++k) {
      if (a < hi[k] && lo[k] < b) return true;
    }
  }
  return false;
}

// True when some element of `a` may share a byte with some element of `b`. Exact for views of
// one dtype, shape and strides at different addresses (e.g. K and V interleaved in one buffer);
// otherwise true whenever the byte spans meet.
bool may_overlap(const TensorView& a, const TensorView& b);

// Copies of the inputs that overlap an output, owned until the call returns.
class StagedInputs {
 public:
  // Throws invalid_parameter when two outputs may share memory; returns true when some input
  // overlaps an output (and copies each such input).
  bool stage(const Operands& ops);
  // Points the overlapping inputs of `ops` (the same operands, listed from a copy of the plan)
  // at their copies.
  void rebind(const Operands& ops) const;

 private:
  struct Copy {
    int index;
    const void* original;  // the input's data pointer
    void* data;            // where that pointer lands in the copy
  };
  std::vector<Copy> copies_;
  std::vector<std::unique_ptr<unsigned char[]>> buffers_;
};

// The full test and the staging, out of line so that a call without overlap keeps a small frame.
template <class Plan, class List, class Run>
[[gnu::noinline]] void execute_staged_full(const Plan& plan, List list, Run run) {
  StagedInputs staged;
  if (!staged.stage(list(plan))) {
    run(plan);
    return;
  }
  Plan copy = plan;
  staged.rebind(list(copy));
  run(copy);
}

// Runs `run(plan)`, or `run(copy)` with overlapping inputs read from copies; see the top.
template <class Plan, class List, class Run>
void execute_staged(const Plan& plan, List list, Run run) {
  if constexpr (requires { plan.extents; }) {
    if (!ranges_may_meet(list(plan), plan.extents)) {
      run(plan);
      return;
    }
  }
  execute_staged_full(plan, list, run);  // a plan type without extents gets the full test
}

// An optional view as an operand pointer (null when absent).
template <class Opt>
const TensorView* opt(const Opt& v) {
  return v ? &*v : nullptr;
}

}  // namespace kvscatter::detail
