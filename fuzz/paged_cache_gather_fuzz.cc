// Fuzz target of PagedCacheGather: copy and fp8 dequantizing gathers, entries of rank 1 or 2,
// padded blocks and slots, strided (or broken) dst rows, sequence- and token-driven forms,
// seq_starts, and block tables, cu_seq_lens and token_to_seq of every kind (valid, garbage in
// unread entries, out of range, decreasing). See fuzz_common.h for the oracle.
#include <array>

#include "fuzz_common.h"
#include "kvscatter/paged_cache_gather.h"

namespace kvscatter::fuzz {
namespace {

// A small index value: mostly in [0, n), sometimes -1, n or a huge value.
std::int64_t index_value(Input& in, std::int64_t n) {
  if (in.rare(16)) {
    switch (in.pick(3)) {
      case 0:
        return -1;
      case 1:
        return n;
      default:
        return std::int64_t{1} << (31 + in.pick(32));
    }
  }
  return n > 0 ? in.pick(std::min<std::int64_t>(n, 4096)) : 0;
}

void entry_layout(Tensor& t, Input& in, int first) {
  t.contiguous();
  if (in.pick(4) == 3) {  // padded outer dims
    std::int64_t s = t.strides[first - 1] + in.pick(5);
    for (int i = first - 1; i >= 0; --i) {
      t.strides[i] = s;
      s = s * std::max<std::int64_t>(t.shape[i], 1) + in.pick(3);
    }
  }
  if (in.rare(8)) t.strides[in.pick(t.rank)] = in.pick(2);  // broken entry or zero stride
}

int run(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  decode_runtime(in);
  const Path path = decode_path(in);
  Case c;
  c.rng.s = in.u64();
  c.special = in.pick(4) == 3 ? static_cast<int>(1 + in.pick(16)) : 0;

  PagedCacheGatherOptions o;
  o.format = static_cast<KvCacheFormat>(in.pick(3));
  static const std::vector<DType> kCopy = {DType::bfloat16, DType::uint8, DType::float32,
                                           DType::float16,  DType::int32, DType::int64};
  static const std::vector<DType> kOut = {DType::bfloat16, DType::float16, DType::float32};
  const DType sdt = o.format == KvCacheFormat::copy       ? in.choose(kCopy)
                    : in.pick(2)                          ? DType::uint8
                    : o.format == KvCacheFormat::fp8_e4m3 ? DType::float8_e4m3fn
                                                          : DType::float8_e5m2;
  const DType ddt =
      o.format == KvCacheFormat::copy ? (in.rare() ? in.choose(kCopy) : sdt) : in.choose(kOut);
  const DType idt = in.pick(2) ? DType::int64 : DType::int32;
  static const std::vector<std::int64_t> kEntry = {8, 16, 1, 2, 3, 7, 17, 32, 33, 64, 128, 576};
  const std::int64_t nb = in.pick(6), bs = 1 + in.pick(8), e1 = in.choose(kEntry);
  const std::int64_t e0 = 1 + in.pick(2), B = in.pick(5), W = in.pick(5);
  const bool token_mode = in.pick(2) == 1;

  Tensor& src = c.add("src_cache", Role::input);
  Tensor& dst = c.add("dst", Role::cache);
  Tensor& bt = c.add("block_table", Role::index);
  Tensor& cu = c.add("cu_seq_lens", Role::index);
  Tensor& starts = c.add("seq_starts", Role::index);
  Tensor& tts = c.add("token_to_seq", Role::index);
  Tensor& scale = c.add("scale", Role::input);
  src.dtype = sdt;
  dst.dtype = ddt;
  bt.dtype = cu.dtype = starts.dtype = idt;
  tts.dtype = in.rare() ? DType::int32 : idt;
  scale.dtype = in.rare() ? DType::float16 : DType::float32;
  std::int64_t total = in.pick(3);
  cu.set_shape({B + 1});
  cu.values.push_back(token_mode ? 0 : total);
  for (std::int64_t b = 0; b < B; ++b) {
    total += in.rare() ? -in.pick(3) : in.pick(2 * bs + 1);
    cu.values.push_back(total);
  }
  const std::int64_t rows = std::max<std::int64_t>(0, total + in.pick(3) - (in.rare() ? 2 : 0));
  if (e0 == 1) {
    src.set_shape({nb, bs, e1});
    dst.set_shape({rows, e1});
  } else {
    src.set_shape({nb, bs, e0, e1});
    dst.set_shape({rows, e0, e1});
  }
  entry_layout(src, in, 2);
  entry_layout(dst, in, 1);
  bt.set_shape({B + (in.rare() ? -1 : in.pick(2)), W});
  for (std::int64_t i = 0; i < bt.numel(); ++i) bt.values.push_back(index_value(in, nb));
  starts.present = in.pick(2) == 1;
  starts.set_shape({B});
  for (std::int64_t b = 0; b < B; ++b) starts.values.push_back(in.rare() ? -1 : in.pick(bs + 2));
  tts.present = token_mode;
  o.num_tokens = std::max<std::int64_t>(0, std::min(total, rows)) + (in.rare() ? 1 : 0);
  tts.set_shape({o.num_tokens});
  for (std::int64_t t = 0, b = 0; t < o.num_tokens; ++t) {
    while (b + 1 < B && t >= cu.values[static_cast<std::size_t>(b + 1)]) ++b;
    tts.values.push_back(in.rare(8) ? index_value(in, B) : b);
  }
  scale.present = o.format != KvCacheFormat::copy || in.pick(2);
  scale.set_shape({in.rare() ? 2 : 1});
  o.batch_size = in.rare() ? B + 1 : B;
  mutate(c, in);
  if (!materialize(c)) return -1;
  c.note = std::string("PagedCacheGather format ") + kv_cache_format_name(o.format) +
           " batch_size " + std::to_string(o.batch_size) + " num_tokens " +
           std::to_string(o.num_tokens) + " path " + std::to_string(static_cast<int>(path));

  auto options = [&](bool r) {
    PagedCacheGatherOptions po = o;
    if (scale.present) po.scale = scale.view(r);
    if (starts.present) po.seq_starts = starts.view(r);
    if (tts.present) po.token_to_seq = tts.view(r);
    return po;
  };
  auto plan = [&](bool r) {
    return plan_paged_cache_gather(src.view(r), dst.view(r), bt.view(r), cu.view(r), options(r));
  };
  const Outcome ref = run_cpp([&] { reference::execute(plan(true)); });
  Outcome tested;
  bool any_status = false;
  if (path == Path::oneshot) {
    tested = run_cpp([&] {
      paged_cache_gather(src.view(false), dst.view(false), bt.view(false), cu.view(false),
                         options(false));
    });
  } else if (path == Path::plan_execute) {
    tested = run_cpp([&] { execute(plan(false)); });
  } else {
    static const char* kFormats[] = {"copy", "fp8_e4m3", "fp8_e5m2"};
    CTensors ct;
    kvsTensor* ts = ct.make(src);
    kvsTensor* td = ct.make(dst);
    kvsTensor* tb = ct.make(bt);
    kvsTensor* tc = ct.make(cu);
    kvsTensor* tsc = scale.present ? ct.make(scale) : nullptr;
    kvsTensor* tst = starts.present ? ct.make(starts) : nullptr;
    kvsTensor* ttt = tts.present ? ct.make(tts) : nullptr;
    tested = c_two_phase(
        ct, any_status, "kvsPagedCacheGather",
        [&](std::uint64_t* ws, kvsExecutor** ex) {
          return kvsPagedCacheGatherGetWorkspaceSize(ts, td, tb, tc, tsc, tst, ttt, o.batch_size,
                                                     o.num_tokens,
                                                     kFormats[static_cast<int>(o.format)], ws, ex);
        },
        [](kvsExecutor* ex) { return kvsPagedCacheGather(nullptr, 0, ex); });
  }
  check(c, tested, ref, any_status);
  return 0;
}

}  // namespace
}  // namespace kvscatter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvscatter::fuzz::run(data, size);
}
