/* The operator-independent part of the C ABI: version, runtime settings, tensor descriptors
 * and the per-thread error message. */
#include <string.h>
#include <threads.h>

#include "kvscatter/kvscatter.h"
#include "kvscatter/version.h"
#include "test_util.h"

static void test_version(void) {
  const char* version = kvsGetVersionString();
  CHECK(version != NULL);
  CHECK(version != NULL && strcmp(version, KVSCATTER_VERSION) == 0);
  int32_t major = -1, minor = -1, patch = -1;
  CHECK_OK(kvsGetVersion(&major, &minor, &patch));
  CHECK(major == KVSCATTER_VERSION_MAJOR);
  CHECK(minor == KVSCATTER_VERSION_MINOR);
  CHECK(patch == KVSCATTER_VERSION_PATCH);
  CHECK_OK(kvsGetVersion(NULL, NULL, NULL));
}

static void test_num_threads(void) {
  int32_t n = 0;
  CHECK_OK(kvsSetNumThreads(3));
  CHECK_OK(kvsGetNumThreads(&n));
  CHECK(n == 3);
  CHECK_OK(kvsSetNumThreads(0));
  CHECK_OK(kvsGetNumThreads(&n));
  CHECK(n >= 1);
  CHECK_STATUS(kvsGetNumThreads(NULL), KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("kvsGetNumThreads: n is NULL");
}

static void test_create_tensor(void) {
  float data[24] = {0};
  const int64_t shape[3] = {2, 3, 4};
  const int64_t strides[3] = {1, 2, 6};
  kvsTensor* t = NULL;
  CHECK_OK(kvsCreateTensor(data, KVS_FLOAT32, 3, shape, NULL, &t));
  CHECK(t != NULL);
  CHECK_OK(kvsDestroyTensor(t));
  t = NULL;
  CHECK_OK(kvsCreateTensor(data, KVS_BFLOAT16, 3, shape, strides, &t));
  CHECK(t != NULL);
  CHECK_OK(kvsDestroyTensor(t));
  /* rank 0: shape may be NULL; empty tensors may have a NULL data pointer. */
  t = NULL;
  CHECK_OK(kvsCreateTensor(NULL, KVS_INT64, 0, NULL, NULL, &t));
  CHECK(t != NULL);
  CHECK_OK(kvsDestroyTensor(t));
  const int64_t empty_shape[2] = {0, 5};
  t = NULL;
  CHECK_OK(kvsCreateTensor(NULL, KVS_FLOAT4_E2M1, 2, empty_shape, NULL, &t));
  CHECK_OK(kvsDestroyTensor(t));
  /* Every dtype of the enum is accepted. */
  for (int d = KVS_FLOAT32; d <= KVS_FLOAT4_E2M1; ++d) {
    t = NULL;
    CHECK_OK(kvsCreateTensor(data, (kvsDataType)d, 1, shape, NULL, &t));
    CHECK_OK(kvsDestroyTensor(t));
  }
  CHECK_OK(kvsDestroyTensor(NULL));
  CHECK_OK(kvsDestroyExecutor(NULL));
}

static void test_create_tensor_rejects(void) {
  float data[8] = {0};
  const int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  kvsTensor* t = (kvsTensor*)data; /* any non-NULL value: a failed call must reset it */

  CHECK_STATUS(kvsCreateTensor(data, KVS_FLOAT32, 1, shape, NULL, NULL), KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("kvsCreateTensor: tensor is NULL");

  CHECK_STATUS(kvsCreateTensor(data, KVS_FLOAT32, 9, shape, NULL, &t), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("rank must be in [0, 8], got 9");
  CHECK(t == NULL);

  t = (kvsTensor*)data;
  CHECK_STATUS(kvsCreateTensor(data, KVS_FLOAT32, -1, shape, NULL, &t),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("got -1");
  CHECK(t == NULL);

  CHECK_STATUS(kvsCreateTensor(data, KVS_FLOAT32, 2, NULL, NULL, &t), KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("shape is NULL");

  CHECK_STATUS(kvsCreateTensor(data, (kvsDataType)99, 1, shape, NULL, &t),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("dtype = 99 is not a kvsDataType");
  CHECK_STATUS(kvsCreateTensor(data, (kvsDataType)-1, 1, shape, NULL, &t),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("dtype = -1");

  const int64_t negative[3] = {2, -3, 4};
  CHECK_STATUS(kvsCreateTensor(data, KVS_FLOAT32, 3, negative, NULL, &t),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("shape[1] must be >= 0, got -3");

  /* Row-major strides of this shape overflow 64 bits. */
  const int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, INT64_C(1) << 40};
  CHECK_STATUS(kvsCreateTensor(data, KVS_FLOAT32, 3, huge, NULL, &t), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("overflows 64 bits");
  CHECK(t == NULL);
}

static void test_executor_rebind_rejects_null_executor(void) {
  float x = 0.0f;
  CHECK_STATUS(kvsExecutorSetTensorAddr(NULL, 0, &x), KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("kvsExecutorSetTensorAddr: executor is NULL");
}

/* The message survives successful calls: it is the last *error*. */
static void test_message_survives_success(void) {
  CHECK_STATUS(kvsGetNumThreads(NULL), KVS_ERROR_NULL_POINTER);
  int32_t n = 0;
  CHECK_OK(kvsGetNumThreads(&n));
  CHECK_MESSAGE_HAS("kvsGetNumThreads: n is NULL");
}

static int thread_body(void* arg) {
  char* seen = (char*)arg;
  /* A new thread starts without an error message. */
  strncpy(seen, kvsGetLastErrorMessage(), 127);
  kvsTensor* t = NULL;
  (void)kvsCreateTensor(NULL, KVS_FLOAT32, 12, NULL, NULL, &t);
  strncpy(seen + 128, kvsGetLastErrorMessage(), 127);
  return 0;
}

static void test_message_is_per_thread(void) {
  CHECK_STATUS(kvsGetNumThreads(NULL), KVS_ERROR_NULL_POINTER);
  char seen[256] = {0};
  thrd_t thread;
  CHECK(thrd_create(&thread, thread_body, seen) == thrd_success);
  CHECK(thrd_join(thread, NULL) == thrd_success);
  CHECK(seen[0] == '\0');
  CHECK(strstr(seen + 128, "rank must be in [0, 8], got 12") != NULL);
  /* The other thread's failure did not replace this thread's message. */
  CHECK_MESSAGE_HAS("kvsGetNumThreads: n is NULL");
}

int main(void) {
  RUN_TEST(test_version);
  RUN_TEST(test_num_threads);
  RUN_TEST(test_create_tensor);
  RUN_TEST(test_create_tensor_rejects);
  RUN_TEST(test_executor_rebind_rejects_null_executor);
  RUN_TEST(test_message_survives_success);
  RUN_TEST(test_message_is_per_thread);
  return TEST_SUMMARY();
}
