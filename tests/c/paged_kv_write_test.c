/* kvsPagedKvWrite through the C ABI: the HND fp8_e5m2 worked example (K and V interleaved in
 * one allocation, per-head scales), one executor rebound to a second layer, and rejections
 * (status, message, caches untouched). */
#include <string.h>

#include "kvscatter/kvscatter.h"
#include "test_util.h"

/* float16 codes of key [[1, 60000], [0.1, -3]] and value [[5, -0], [1000, 2^-24]]. */
static uint16_t g_key[4] = {0x3C00, 0x7B53, 0x2E66, 0xC200};
static uint16_t g_value[4] = {0x4500, 0x8000, 0x63D0, 0x0001};
static float g_k_scale[2] = {1.0f, 0.25f}, g_v_scale[2] = {2.0f, 4.0f};
static int64_t g_slots[1] = {1};
static const uint8_t g_want[16] = {0x00, 0x00, 0x3C, 0x7B, 0x00, 0x00, 0x36, 0xCA,
                                   0x00, 0x00, 0x41, 0x80, 0x00, 0x00, 0x5C, 0x00};

static kvsStatus plan(uint8_t* kv, const char* format, kvsExecutor** executor) {
  const int64_t in_shape[3] = {1, 2, 2}, cache_shape[4] = {1, 2, 2, 2};
  const int64_t cache_strides[4] = {16, 2, 4, 1}, one[1] = {1}, two[1] = {2};
  kvsTensor* key = make_tensor(g_key, KVS_FLOAT16, 3, in_shape, NULL);
  kvsTensor* value = make_tensor(g_value, KVS_FLOAT16, 3, in_shape, NULL);
  kvsTensor* kc = make_tensor(kv, KVS_UINT8, 4, cache_shape, cache_strides);
  kvsTensor* vc = make_tensor(kv + 8, KVS_UINT8, 4, cache_shape, cache_strides);
  kvsTensor* sm = make_tensor(g_slots, KVS_INT64, 1, one, NULL);
  kvsTensor* ks = make_tensor(g_k_scale, KVS_FLOAT32, 1, two, NULL);
  kvsTensor* vs = make_tensor(g_v_scale, KVS_FLOAT32, 1, two, NULL);
  uint64_t ws = 1;
  const kvsStatus status = kvsPagedKvWriteGetWorkspaceSize(key, value, kc, vc, sm, ks, vs, format,
                                                           "NHD", &ws, executor);
  kvsDestroyTensor(key);
  kvsDestroyTensor(value);
  kvsDestroyTensor(kc);
  kvsDestroyTensor(vc);
  kvsDestroyTensor(sm);
  kvsDestroyTensor(ks);
  kvsDestroyTensor(vs);
  return status;
}

static void test_hnd_example_and_rebind(void) {
  uint8_t layer0[16] = {0}, layer1[16] = {0};
  kvsExecutor* executor = NULL;
  CHECK_OK(plan(layer0, "fp8_e5m2", &executor));
  CHECK_OK(kvsPagedKvWrite(NULL, 0, executor));
  CHECK(memcmp(layer0, g_want, 16) == 0);
  CHECK_OK(kvsExecutorSetTensorAddr(executor, KVS_PAGED_KV_WRITE_KEY_CACHE_INDEX, layer1));
  CHECK_OK(kvsExecutorSetTensorAddr(executor, KVS_PAGED_KV_WRITE_VALUE_CACHE_INDEX, layer1 + 8));
  CHECK_OK(kvsPagedKvWrite(NULL, 0, executor));
  CHECK(memcmp(layer1, g_want, 16) == 0);
  kvsDestroyExecutor(executor);
}

static void test_rejections(void) {
  uint8_t kv[16] = {0};
  kvsExecutor* executor = NULL;
  CHECK_STATUS(plan(kv, "fp8_inc", &executor), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("format 'fp8_inc' is not supported");
  CHECK(executor == NULL);
  /* copy format: uint8 caches cannot hold float16 keys */
  CHECK_STATUS(plan(kv, "copy", &executor), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("key_cache dtype uint8 must equal the key dtype float16");
  g_slots[0] = 2; /* one block of two slots */
  CHECK_OK(plan(kv, "fp8_e4m3", &executor));
  CHECK_STATUS(kvsPagedKvWrite(NULL, 0, executor), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("slot_mapping[0] = 2 is out of range [0, 2)");
  kvsDestroyExecutor(executor);
  g_slots[0] = 1;
  const uint8_t zero[16] = {0};
  CHECK(memcmp(kv, zero, 16) == 0);
}

int main(void) {
  RUN_TEST(test_hnd_example_and_rebind);
  RUN_TEST(test_rejections);
  return TEST_SUMMARY();
}
