// paged_cache_gather on NumPy / DLPack arrays; dst is written in place.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bindings.h"
#include "kvscatter/paged_cache_gather.h"
#include "tensor_arg.h"

namespace nb = nanobind;

namespace kvscatter::python {
namespace {

// The vLLM adapter's promise about dst: None (none), "float" (a float type) or a dtype name.
void check_dst_rule(nb::handle rule, const TensorView& dst, const TensorView& src) {
  if (rule.is_none()) return;
  const std::string want = nb::cast<std::string>(rule);
  const std::string got(dtype_name(dst.dtype));
  if (want == "float") {
    if (dst.dtype != DType::float32 && dst.dtype != DType::float16 &&
        dst.dtype != DType::bfloat16) {
      throw nb::value_error(("dst dtype " + got +
                             " is not a float type (kv_cache_dtype 'auto' gathers float32, "
                             "float16 or bfloat16 caches)")
                                .c_str());
    }
    if (dst.dtype != src.dtype) {
      throw nb::value_error(("dst dtype " + got + " does not match src_cache dtype " +
                             std::string(dtype_name(src.dtype)) +
                             " (kv_cache_dtype 'auto' stores the input type)")
                                .c_str());
    }
  } else if (got != want) {
    throw nb::value_error(
        ("dst dtype " + got + " does not match kv_cache_dtype '" + want + "'").c_str());
  }
}

}  // namespace

void bind_paged_cache_gather(nb::module_& m) {
  m.def(
      "paged_cache_gather",
      [](nb::handle src_cache, nb::handle dst, nb::handle block_table, nb::handle cu_seq_lens,
         nb::handle format, nb::handle scale, nb::handle batch_size, nb::handle seq_starts,
         nb::handle token_to_seq, nb::handle num_tokens, nb::handle dst_rule) {
        ArgScope scope;
        PagedCacheGatherOptions o;
        o.format = parse_kv_cache_format(str_arg(format, "format", "copy"));
        o.batch_size = int_arg(batch_size, "batch_size");
        if (!token_to_seq.is_none()) o.num_tokens = int_arg(num_tokens, "num_tokens");
        const TensorView src = scope.tensor(src_cache, "src_cache", Access::read);
        const TensorView out = scope.tensor(dst, "dst", Access::write);
        const TensorView bt = scope.tensor(block_table, "block_table", Access::read);
        const TensorView cu = scope.tensor(cu_seq_lens, "cu_seq_lens", Access::read);
        o.scale = scope.optional_tensor(scale, "scale", Access::read);
        o.seq_starts = scope.optional_tensor(seq_starts, "seq_starts", Access::read);
        o.token_to_seq = scope.optional_tensor(token_to_seq, "token_to_seq", Access::read);
        check_dst_rule(dst_rule, out, src);
        const PagedCacheGatherPlan plan = plan_paged_cache_gather(src, out, bt, cu, o);
        nb::gil_scoped_release release;
        execute(plan);
      },
      nb::arg("src_cache").none(), nb::arg("dst").none(), nb::arg("block_table").none(),
      nb::arg("cu_seq_lens").none(), nb::arg("format").none(), nb::arg("scale").none(),
      nb::arg("batch_size").none(), nb::arg("seq_starts").none(), nb::arg("token_to_seq").none(),
      nb::arg("num_tokens").none(), nb::arg("dst_rule").none());
}

}  // namespace kvscatter::python
