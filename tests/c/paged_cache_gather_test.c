/* kvsPagedCacheGather through the C ABI: a sequence-driven byte copy with unaligned seq_starts,
 * the token-driven fp8 dequantization into bfloat16, and a rejection (status, message, dst
 * untouched). */
#include <string.h>

#include "kvscatter/kvscatter.h"
#include "test_util.h"

static void test_copy_with_seq_starts(void) {
  uint8_t src[24], dst[18];
  for (int i = 0; i < 24; ++i) src[i] = (uint8_t)(16 * (i / 12) + i % 12);
  memset(dst, 0xEE, sizeof dst);
  int64_t bt[4] = {1, 0, 0, 1}, cu[3] = {0, 3, 5}, starts[2] = {2, 3};
  const int64_t src_shape[3] = {2, 4, 3}, dst_shape[2] = {6, 3}, bt_shape[2] = {2, 2};
  const int64_t three[1] = {3}, two[1] = {2};
  kvsTensor* ts = make_tensor(src, KVS_UINT8, 3, src_shape, NULL);
  kvsTensor* td = make_tensor(dst, KVS_UINT8, 2, dst_shape, NULL);
  kvsTensor* tb = make_tensor(bt, KVS_INT64, 2, bt_shape, NULL);
  kvsTensor* tc = make_tensor(cu, KVS_INT64, 1, three, NULL);
  kvsTensor* tst = make_tensor(starts, KVS_INT64, 1, two, NULL);
  uint64_t ws = 1;
  kvsExecutor* ex = NULL;
  CHECK_OK(kvsPagedCacheGatherGetWorkspaceSize(ts, td, tb, tc, NULL, tst, NULL, 2, 0, "copy", &ws,
                                               &ex));
  CHECK(ws == 0);
  CHECK_OK(kvsPagedCacheGather(NULL, 0, ex));
  const uint8_t want[18] = {0x16, 0x17, 0x18, 0x19, 0x1A, 0x1B, 0x00, 0x01, 0x02,
                            0x09, 0x0A, 0x0B, 0x10, 0x11, 0x12, 0xEE, 0xEE, 0xEE};
  CHECK(memcmp(dst, want, 18) == 0);
  kvsDestroyExecutor(ex);
  kvsDestroyTensor(ts);
  kvsDestroyTensor(td);
  kvsDestroyTensor(tb);
  kvsDestroyTensor(tc);
  kvsDestroyTensor(tst);
}

static void test_dequant_and_rejection(void) {
  uint8_t src[12] = {0x38, 0xB8, 0x40, 0x7F, 0x01, 0x7E, 0x00, 0x80, 0x44, 0x3C, 0xC4, 0x30};
  uint16_t dst[10];
  for (int i = 0; i < 10; ++i) dst[i] = 0x1234;
  int32_t bt[6] = {2, 0, -1, 1, 1, 9}, cu[3] = {0, 3, 4}, tts[5] = {0, 0, 0, 1, 0};
  int32_t starts[2] = {1, 2};
  float scale = 0.5f;
  const int64_t src_shape[3] = {3, 2, 2}, dst_shape[2] = {5, 2}, bt_shape[2] = {2, 3};
  const int64_t three[1] = {3}, two[1] = {2}, five[1] = {5}, one[1] = {1};
  kvsTensor* ts = make_tensor(src, KVS_UINT8, 3, src_shape, NULL);
  kvsTensor* td = make_tensor(dst, KVS_BFLOAT16, 2, dst_shape, NULL);
  kvsTensor* tb = make_tensor(bt, KVS_INT32, 2, bt_shape, NULL);
  kvsTensor* tc = make_tensor(cu, KVS_INT32, 1, three, NULL);
  kvsTensor* tst = make_tensor(starts, KVS_INT32, 1, two, NULL);
  kvsTensor* tt = make_tensor(tts, KVS_INT32, 1, five, NULL);
  kvsTensor* tsc = make_tensor(&scale, KVS_FLOAT32, 1, one, NULL);
  uint64_t ws = 1;
  kvsExecutor* ex = NULL;
  CHECK_OK(kvsPagedCacheGatherGetWorkspaceSize(ts, td, tb, tc, tsc, tst, tt, -1, 4, "fp8_e4m3",
                                               &ws, &ex));
  CHECK_OK(kvsPagedCacheGather(NULL, 0, ex));
  const uint16_t want[10] = {0xBFC0, 0x3E80, 0x3F00, 0xBF00, 0x3F80,
                             0x7FFF, 0x3A80, 0x4360, 0x1234, 0x1234};
  CHECK(memcmp(dst, want, sizeof want) == 0);
  /* A block-table entry past the cache, found at execution: nothing written. */
  bt[0] = 3;
  for (int i = 0; i < 10; ++i) dst[i] = 0x1234;
  CHECK_STATUS(kvsPagedCacheGather(NULL, 0, ex), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("block_table[0, 0] = 3 is out of range [0, 3) (src_cache has 3 blocks)");
  for (int i = 0; i < 10; ++i) CHECK(dst[i] == 0x1234);
  kvsDestroyExecutor(ex);
  ex = NULL;
  CHECK_STATUS(kvsPagedCacheGatherGetWorkspaceSize(ts, td, tb, tc, tsc, tst, tt, -1, 4, "fp8_inc",
                                                   &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("format 'fp8_inc' is not supported");
  CHECK(ex == NULL);
  kvsDestroyTensor(ts);
  kvsDestroyTensor(td);
  kvsDestroyTensor(tb);
  kvsDestroyTensor(tc);
  kvsDestroyTensor(tst);
  kvsDestroyTensor(tt);
  kvsDestroyTensor(tsc);
}

int main(void) {
  RUN_TEST(test_copy_with_seq_starts);
  RUN_TEST(test_dequant_and_rejection);
  return TEST_SUMMARY();
}
