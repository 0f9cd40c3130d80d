/* kvsKvCacheUpdate through the C ABI: three worked examples, bfloat16 caches, one
 * executor run for several layers, and every rejection (status, message, caches untouched). */
#include <string.h>

#include "kvscatter/kvscatter.h"
#include "test_util.h"

/* Plans and runs one update; the descriptors stay owned by the caller. */
static kvsStatus run_update(kvsTensor* key_cache, kvsTensor* value_cache, kvsTensor* new_keys,
                            kvsTensor* new_values, int64_t position, int64_t* new_length) {
  uint64_t workspace_size = 1;
  kvsExecutor* executor = NULL;
  kvsStatus status =
      kvsKvCacheUpdateGetWorkspaceSize(key_cache, value_cache, new_keys, new_values, position,
                                       new_length, &workspace_size, &executor);
  if (status != KVS_SUCCESS) {
    CHECK(executor == NULL);
    return status;
  }
  CHECK(workspace_size == 0);
  CHECK(executor != NULL);
  status = kvsKvCacheUpdate(NULL, workspace_size, executor);
  CHECK_OK(kvsDestroyExecutor(executor));
  return status;
}

/* Worked example 1: one token at position 0 of a 4-slot cache. */
static void test_worked_example_1(void) {
  float key_cache[8] = {0}, value_cache[8] = {0};
  float new_keys[2] = {1, 2}, new_values[2] = {3, 4};
  const int64_t cache_shape[4] = {1, 4, 1, 2}, new_shape[4] = {1, 1, 1, 2};
  kvsTensor* kc = make_tensor(key_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* vc = make_tensor(value_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* nk = make_tensor(new_keys, KVS_FLOAT32, 4, new_shape, NULL);
  kvsTensor* nv = make_tensor(new_values, KVS_FLOAT32, 4, new_shape, NULL);
  int64_t length = -1;
  CHECK_OK(run_update(kc, vc, nk, nv, 0, &length));
  CHECK(length == 1);
  const float want_k[8] = {1, 2, 0, 0, 0, 0, 0, 0}, want_v[8] = {3, 4, 0, 0, 0, 0, 0, 0};
  CHECK(memcmp(key_cache, want_k, sizeof want_k) == 0);
  CHECK(memcmp(value_cache, want_v, sizeof want_v) == 0);
  kvsDestroyTensor(kc);
  kvsDestroyTensor(vc);
  kvsDestroyTensor(nk);
  kvsDestroyTensor(nv);
}

/* Worked example 2: two tokens at position 2 fill the cache; length 4. */
static void test_worked_example_2(void) {
  float key_cache[8] = {1, 1, 2, 2, 9, 9, 9, 9}, value_cache[8] = {-1, -1, -2, -2, 9, 9, 9, 9};
  float new_keys[4] = {3, 3, 4, 4}, new_values[4] = {-3, -3, -4, -4};
  const int64_t cache_shape[4] = {1, 4, 1, 2}, new_shape[4] = {1, 2, 1, 2};
  kvsTensor* kc = make_tensor(key_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* vc = make_tensor(value_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* nk = make_tensor(new_keys, KVS_FLOAT32, 4, new_shape, NULL);
  kvsTensor* nv = make_tensor(new_values, KVS_FLOAT32, 4, new_shape, NULL);
  int64_t length = -1;
  CHECK_OK(run_update(kc, vc, nk, nv, 2, &length));
  CHECK(length == 4);
  const float want_k[8] = {1, 1, 2, 2, 3, 3, 4, 4};
  const float want_v[8] = {-1, -1, -2, -2, -3, -3, -4, -4};
  CHECK(memcmp(key_cache, want_k, sizeof want_k) == 0);
  CHECK(memcmp(value_cache, want_v, sizeof want_v) == 0);
  kvsDestroyTensor(kc);
  kvsDestroyTensor(vc);
  kvsDestroyTensor(nk);
  kvsDestroyTensor(nv);
}

/* Worked example 3: B=2, S=3, H=2, D=1, one token at position 1; length 2. */
static void test_worked_example_3(void) {
  float key_cache[12] = {1, 2, 0, 0, 0, 0, 5, 6, 0, 0, 0, 0};
  float value_cache[12] = {0.1f, 0.2f, 0, 0, 0, 0, 0.5f, 0.6f, 0, 0, 0, 0};
  float new_keys[4] = {3, 4, 7, 8}, new_values[4] = {0.3f, 0.4f, 0.7f, 0.8f};
  const int64_t cache_shape[4] = {2, 3, 2, 1}, new_shape[4] = {2, 1, 2, 1};
  kvsTensor* kc = make_tensor(key_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* vc = make_tensor(value_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* nk = make_tensor(new_keys, KVS_FLOAT32, 4, new_shape, NULL);
  kvsTensor* nv = make_tensor(new_values, KVS_FLOAT32, 4, new_shape, NULL);
  int64_t length = -1;
  CHECK_OK(run_update(kc, vc, nk, nv, 1, &length));
  CHECK(length == 2);
  const float want_k[12] = {1, 2, 3, 4, 0, 0, 5, 6, 7, 8, 0, 0};
  const float want_v[12] = {0.1f, 0.2f, 0.3f, 0.4f, 0, 0, 0.5f, 0.6f, 0.7f, 0.8f, 0, 0};
  CHECK(memcmp(key_cache, want_k, sizeof want_k) == 0);
  CHECK(memcmp(value_cache, want_v, sizeof want_v) == 0);
  kvsDestroyTensor(kc);
  kvsDestroyTensor(vc);
  kvsDestroyTensor(nk);
  kvsDestroyTensor(nv);
}

/* bfloat16 caches take float32 inputs rounded to nearest even. */
static void test_bfloat16_cache_rounds_to_nearest_even(void) {
  uint16_t key_cache[8] = {0}, value_cache[8] = {0};
  /* 1.00390625 is halfway between 0x3F80 and 0x3F81: even wins (0x3F80); 1.01171875 is
   * halfway between 0x3F81 and 0x3F82: even wins (0x3F82). */
  float new_keys[4] = {1.0f, -2.0f, 1.00390625f, 1.01171875f};
  float new_values[4] = {0.5f, 3.0f, -0.0f, 65536.0f};
  const int64_t cache_shape[4] = {1, 2, 2, 2}, new_shape[4] = {1, 1, 2, 2};
  kvsTensor* kc = make_tensor(key_cache, KVS_BFLOAT16, 4, cache_shape, NULL);
  kvsTensor* vc = make_tensor(value_cache, KVS_BFLOAT16, 4, cache_shape, NULL);
  kvsTensor* nk = make_tensor(new_keys, KVS_FLOAT32, 4, new_shape, NULL);
  kvsTensor* nv = make_tensor(new_values, KVS_FLOAT32, 4, new_shape, NULL);
  int64_t length = -1;
  CHECK_OK(run_update(kc, vc, nk, nv, 1, &length));
  CHECK(length == 2);
  const uint16_t want_k[8] = {0, 0, 0, 0, 0x3F80, 0xC000, 0x3F80, 0x3F82};
  const uint16_t want_v[8] = {0, 0, 0, 0, 0x3F00, 0x4040, 0x8000, 0x4780};
  CHECK(memcmp(key_cache, want_k, sizeof want_k) == 0);
  CHECK(memcmp(value_cache, want_v, sizeof want_v) == 0);
  kvsDestroyTensor(kc);
  kvsDestroyTensor(vc);
  kvsDestroyTensor(nk);
  kvsDestroyTensor(nv);
}

/* One plan, three layers: rebind every tensor per layer, run, and check each layer. */
static void test_one_executor_many_layers(void) {
  enum { LAYERS = 3, S = 4, D = 2 };
  float key_caches[LAYERS][S * D], value_caches[LAYERS][S * D];
  float new_keys[LAYERS][D], new_values[LAYERS][D];
  memset(key_caches, 0, sizeof key_caches);
  memset(value_caches, 0, sizeof value_caches);
  for (int l = 0; l < LAYERS; ++l) {
    for (int d = 0; d < D; ++d) {
      new_keys[l][d] = (float)(10 * (l + 1) + d);
      new_values[l][d] = -(float)(10 * (l + 1) + d);
    }
  }
  const int64_t cache_shape[4] = {1, S, 1, D}, new_shape[4] = {1, 1, 1, D};
  kvsTensor* kc = make_tensor(key_caches[0], KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* vc = make_tensor(value_caches[0], KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* nk = make_tensor(new_keys[0], KVS_FLOAT32, 4, new_shape, NULL);
  kvsTensor* nv = make_tensor(new_values[0], KVS_FLOAT32, 4, new_shape, NULL);
  uint64_t workspace_size = 1;
  kvsExecutor* executor = NULL;
  CHECK_OK(kvsKvCacheUpdateGetWorkspaceSize(kc, vc, nk, nv, 3, NULL, &workspace_size, &executor));
  /* The executor owns copies: the descriptors can go right away. */
  kvsDestroyTensor(kc);
  kvsDestroyTensor(vc);
  kvsDestroyTensor(nk);
  kvsDestroyTensor(nv);
  for (int l = LAYERS - 1; l >= 0; --l) {
    CHECK_OK(
        kvsExecutorSetTensorAddr(executor, KVS_KV_CACHE_UPDATE_KEY_CACHE_INDEX, key_caches[l]));
    CHECK_OK(
        kvsExecutorSetTensorAddr(executor, KVS_KV_CACHE_UPDATE_VALUE_CACHE_INDEX, value_caches[l]));
    CHECK_OK(kvsExecutorSetTensorAddr(executor, KVS_KV_CACHE_UPDATE_NEW_KEYS_INDEX, new_keys[l]));
    CHECK_OK(
        kvsExecutorSetTensorAddr(executor, KVS_KV_CACHE_UPDATE_NEW_VALUES_INDEX, new_values[l]));
    CHECK_OK(kvsKvCacheUpdate(NULL, 0, executor));
  }
  for (int l = 0; l < LAYERS; ++l) {
    for (int i = 0; i < S * D; ++i) {
      const float want_k = i >= 3 * D ? new_keys[l][i - 3 * D] : 0.0f;
      const float want_v = i >= 3 * D ? new_values[l][i - 3 * D] : 0.0f;
      CHECK(key_caches[l][i] == want_k);
      CHECK(value_caches[l][i] == want_v);
    }
  }
  /* Running again is allowed (idempotent here). */
  CHECK_OK(kvsKvCacheUpdate(NULL, 0, executor));
  CHECK(key_caches[0][3 * D] == new_keys[0][0]);
  CHECK_OK(kvsDestroyExecutor(executor));
}

/* Zero new tokens is a successful no-op. */
static void test_empty_update(void) {
  float key_cache[8] = {7, 7, 7, 7, 7, 7, 7, 7}, value_cache[8] = {7, 7, 7, 7, 7, 7, 7, 7};
  const int64_t cache_shape[4] = {1, 4, 1, 2}, new_shape[4] = {1, 0, 1, 2};
  kvsTensor* kc = make_tensor(key_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* vc = make_tensor(value_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* nk = make_tensor(NULL, KVS_FLOAT32, 4, new_shape, NULL);
  kvsTensor* nv = make_tensor(NULL, KVS_FLOAT32, 4, new_shape, NULL);
  int64_t length = -1;
  CHECK_OK(run_update(kc, vc, nk, nv, 4, &length));
  CHECK(length == 4);
  for (int i = 0; i < 8; ++i) CHECK(key_cache[i] == 7 && value_cache[i] == 7);
  kvsDestroyTensor(kc);
  kvsDestroyTensor(vc);
  kvsDestroyTensor(nk);
  kvsDestroyTensor(nv);
}

/* Every rejection: status, a message naming the argument and value, untouched caches. */
static void test_rejections(void) {
  float key_cache[8], value_cache[8], new_keys[2] = {1, 2}, new_values[2] = {3, 4};
  for (int i = 0; i < 8; ++i) key_cache[i] = value_cache[i] = 5.0f;
  const int64_t cache_shape[4] = {1, 4, 1, 2}, new_shape[4] = {1, 1, 1, 2};
  const int64_t rank3_shape[3] = {4, 1, 2}, wide_shape[4] = {1, 1, 1, 3};
  kvsTensor* kc = make_tensor(key_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* vc = make_tensor(value_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* nk = make_tensor(new_keys, KVS_FLOAT32, 4, new_shape, NULL);
  kvsTensor* nv = make_tensor(new_values, KVS_FLOAT32, 4, new_shape, NULL);
  kvsTensor* kc3 = make_tensor(key_cache, KVS_FLOAT32, 3, rank3_shape, NULL);
  kvsTensor* nk_wide = make_tensor(new_keys, KVS_FLOAT32, 4, wide_shape, NULL);
  kvsTensor* nk_null = make_tensor(NULL, KVS_FLOAT32, 4, new_shape, NULL);
  kvsTensor* kc_int = make_tensor(key_cache, KVS_INT32, 4, cache_shape, NULL);
  uint64_t ws = 0;
  kvsExecutor* ex = NULL;

  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(NULL, vc, nk, nv, 0, NULL, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("kvsKvCacheUpdateGetWorkspaceSize: key_cache is NULL");
  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(kc, NULL, nk, nv, 0, NULL, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("value_cache is NULL");
  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(kc, vc, NULL, nv, 0, NULL, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("new_keys is NULL");
  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(kc, vc, nk, NULL, 0, NULL, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("new_values is NULL");
  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(kc, vc, nk, nv, 0, NULL, NULL, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("workspace_size is NULL");
  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(kc, vc, nk, nv, 0, NULL, &ws, NULL),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("executor is NULL");
  /* A descriptor whose data pointer is NULL although it has elements. */
  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(kc, vc, nk_null, nv, 0, NULL, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("new_keys has a null data pointer");

  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(kc3, vc, nk, nv, 0, NULL, &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("key_cache must be 4-D");
  CHECK_MESSAGE_HAS("got 3-D");
  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(kc, vc, nk_wide, nv, 0, NULL, &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("new_keys.shape[3] (D) must equal key_cache.shape[3] = 2, got 3");
  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(kc_int, vc, nk, nv, 0, NULL, &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("key_cache dtype");
  CHECK_MESSAGE_HAS("int32");
  /* position must satisfy 0 <= position <= S - L = 3. */
  int64_t length = 99;
  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(kc, vc, nk, nv, 4, &length, &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("position = 4 is out of range [0, 3]");
  CHECK(length == 99);
  CHECK_STATUS(kvsKvCacheUpdateGetWorkspaceSize(kc, vc, nk, nv, -1, NULL, &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("position = -1 is out of range [0, 3]");
  CHECK(ex == NULL);
  for (int i = 0; i < 8; ++i) CHECK(key_cache[i] == 5.0f && value_cache[i] == 5.0f);

  /* Executor misuse. */
  CHECK_STATUS(kvsKvCacheUpdate(NULL, 0, NULL), KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("kvsKvCacheUpdate: executor is NULL");
  CHECK_OK(kvsKvCacheUpdateGetWorkspaceSize(kc, vc, nk, nv, 0, NULL, &ws, &ex));
  CHECK_STATUS(kvsExecutorSetTensorAddr(ex, 4, key_cache), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("index = 4 is out of range [0, 4)");
  CHECK_STATUS(kvsExecutorSetTensorAddr(ex, KVS_KV_CACHE_UPDATE_VALUE_CACHE_INDEX, NULL),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("addr is NULL for tensor 1 (value_cache)");
  /* The failed rebinding changed nothing: the plan still writes value_cache. */
  CHECK_OK(kvsKvCacheUpdate(NULL, 0, ex));
  CHECK(value_cache[0] == 3.0f && value_cache[1] == 4.0f && value_cache[2] == 5.0f);
  CHECK_OK(kvsDestroyExecutor(ex));

  kvsDestroyTensor(kc);
  kvsDestroyTensor(vc);
  kvsDestroyTensor(nk);
  kvsDestroyTensor(nv);
  kvsDestroyTensor(kc3);
  kvsDestroyTensor(nk_wide);
  kvsDestroyTensor(nk_null);
  kvsDestroyTensor(kc_int);
}

int main(void) {
  RUN_TEST(test_worked_example_1);
  RUN_TEST(test_worked_example_2);
  RUN_TEST(test_worked_example_3);
  RUN_TEST(test_bfloat16_cache_rounds_to_nearest_even);
  RUN_TEST(test_one_executor_many_layers);
  RUN_TEST(test_empty_update);
  RUN_TEST(test_rejections);
  return TEST_SUMMARY();
}
