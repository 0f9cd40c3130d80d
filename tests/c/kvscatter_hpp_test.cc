// <kvscatter/kvscatter.hpp> alone gives the whole public API: one name from every header.
#include <cstdio>
#include <cstring>
#include <kvscatter/kvscatter.hpp>

int main() {
  using namespace kvscatter;
  int failures = 0;
  const auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::printf("FAILED: %s\n", what);
      ++failures;
    }
  };
  check(dtype_size(DType::bfloat16) == 2, "dtype.h");
  check(TensorView(nullptr, DType::int32, {0}).numel() == 0, "tensor.h");
  check(Error(Status::invalid_parameter, "x").status() == Status::invalid_parameter, "error.h");
  check(get_num_threads() >= 1, "runtime.h");
  check(formats::decode(DType::bfloat16, formats::encode(DType::bfloat16, 1.0f)) == 1.0f,
        "formats.h");
  check(parse_cache_mode("PA_NZ") == CacheMode::PA_NZ, "scatter_pa_kv_cache.h");
  check(parse_k_scale_cache_layout("") == KScaleCacheLayout::BNBD,
        "scatter_pa_kv_cache_with_k_scale.h");
  check(parse_quant_mode("fp8_bf16") == QuantMode::fp8_bf16, "kv_compress_epilog.h");
  check(sizeof(KvCacheUpdatePlan) > 0, "kv_cache_update.h");
  check(std::strcmp(kvsGetVersionString(), version_string()) == 0, "kvscatter.h");
  check(std::strcmp(KVSCATTER_VERSION, version_string()) == 0, "version.h");
  std::printf("%d passed, %d failed\n", failures == 0 ? 1 : 0, failures == 0 ? 0 : 1);
  return failures == 0 ? 0 : 1;
}
