/* Writing one decoding step of a 4-layer model into paged KV caches through the kvscatter C
 * ABI: validate once, then execute once per layer after pointing the plan at that layer's
 * buffers. Build against an installed kvscatter; see CMakeLists.txt next to this file. */
#include <kvscatter/kvscatter.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  LAYERS = 4,
  TOKENS = 3, /* tokens in this step */
  HEADS = 2,
  HEAD_SIZE = 8,
  BLOCKS = 4,     /* cache blocks per layer */
  BLOCK_SIZE = 4, /* slots per block */
  TOKEN_ELEMS = HEADS * HEAD_SIZE,
  CACHE_ELEMS = BLOCKS * BLOCK_SIZE * TOKEN_ELEMS
};

/* Every layer has its own new keys/values and its own caches. */
static float keys[LAYERS][TOKENS * TOKEN_ELEMS];
static float values[LAYERS][TOKENS * TOKEN_ELEMS];
static float key_caches[LAYERS][CACHE_ELEMS];
static float value_caches[LAYERS][CACHE_ELEMS];

/* Where each token goes: slot = block * BLOCK_SIZE + offset; -1 marks a padding token. */
static const int32_t slots[TOKENS] = {5, -1, 12};

#define TRY(call)                                                                             \
  do {                                                                                        \
    kvsStatus status_ = (call);                                                               \
    if (status_ != KVS_SUCCESS) {                                                             \
      fprintf(stderr, "%s failed (%d): %s\n", #call, (int)status_, kvsGetLastErrorMessage()); \
      goto done;                                                                              \
    }                                                                                         \
  } while (0)

/* True when every layer's caches hold exactly the expected rows. */
static int verify(void) {
  for (int layer = 0; layer < LAYERS; ++layer) {
    for (int slot = 0; slot < BLOCKS * BLOCK_SIZE; ++slot) {
      int token = -1;
      for (int t = 0; t < TOKENS; ++t) {
        if (slots[t] == slot) token = t;
      }
      for (int e = 0; e < TOKEN_ELEMS; ++e) {
        const float want_k = token >= 0 ? keys[layer][token * TOKEN_ELEMS + e] : 0.0f;
        const float want_v = token >= 0 ? values[layer][token * TOKEN_ELEMS + e] : 0.0f;
        if (key_caches[layer][slot * TOKEN_ELEMS + e] != want_k ||
            value_caches[layer][slot * TOKEN_ELEMS + e] != want_v) {
          printf("layer %d slot %d element %d differs\n", layer, slot, e);
          return 0;
        }
      }
    }
  }
  return 1;
}

int main(void) {
  int ok = 0;
  kvsTensor *key = NULL, *value = NULL, *key_cache = NULL, *value_cache = NULL;
  kvsTensor *slot_mapping = NULL;
  kvsExecutor *executor = NULL;

  for (int layer = 0; layer < LAYERS; ++layer) {
    for (int i = 0; i < TOKENS * TOKEN_ELEMS; ++i) {
      keys[layer][i] = (float)(1000 * layer + i);
      values[layer][i] = -(float)(1000 * layer + i);
    }
  }
  printf("kvscatter %s\n", kvsGetVersionString());

  /* 1. Describe the tensors once. Shapes: key/value [tokens, heads, head_size]; Norm caches
   *    [blocks, block_size, heads, head_size]; slot_mapping [tokens]. Layer 0's buffers are
   *    bound here; the others are bound per layer below. */
  const int64_t token_shape[3] = {TOKENS, HEADS, HEAD_SIZE};
  const int64_t cache_shape[4] = {BLOCKS, BLOCK_SIZE, HEADS, HEAD_SIZE};
  const int64_t slot_shape[1] = {TOKENS};
  TRY(kvsCreateTensor(keys[0], KVS_FLOAT32, 3, token_shape, NULL, &key));
  TRY(kvsCreateTensor(values[0], KVS_FLOAT32, 3, token_shape, NULL, &value));
  TRY(kvsCreateTensor(key_caches[0], KVS_FLOAT32, 4, cache_shape, NULL, &key_cache));
  TRY(kvsCreateTensor(value_caches[0], KVS_FLOAT32, 4, cache_shape, NULL, &value_cache));
  TRY(kvsCreateTensor((void *)slots, KVS_INT32, 1, slot_shape, NULL, &slot_mapping));

  /* 2. Validate once: shapes, dtypes, strides and modes. Optional tensors are NULL, NULL
   *    mode strings mean "Norm" / "None". */
  uint64_t workspace_size = 0;
  TRY(kvsScatterPaKvCacheGetWorkspaceSize(key, value, key_cache, value_cache, slot_mapping, NULL,
                                          NULL, NULL, NULL, NULL, NULL, 0, NULL, 0, &workspace_size,
                                          &executor));
  /* The executor holds its own copies, so the descriptors can go now. */
  kvsDestroyTensor(key);
  kvsDestroyTensor(value);
  kvsDestroyTensor(key_cache);
  kvsDestroyTensor(value_cache);
  kvsDestroyTensor(slot_mapping);
  key = value = key_cache = value_cache = slot_mapping = NULL;

  /* 3. Execute per layer: point the plan at the layer's buffers, then run it. The slot
   *    values are checked at every execution, before anything is written. */
  for (int layer = 0; layer < LAYERS; ++layer) {
    TRY(kvsExecutorSetTensorAddr(executor, KVS_SCATTER_PA_KV_CACHE_KEY_INDEX, keys[layer]));
    TRY(kvsExecutorSetTensorAddr(executor, KVS_SCATTER_PA_KV_CACHE_VALUE_INDEX, values[layer]));
    TRY(kvsExecutorSetTensorAddr(executor, KVS_SCATTER_PA_KV_CACHE_KEY_CACHE_INDEX,
                                 key_caches[layer]));
    TRY(kvsExecutorSetTensorAddr(executor, KVS_SCATTER_PA_KV_CACHE_VALUE_CACHE_INDEX,
                                 value_caches[layer]));
    TRY(kvsScatterPaKvCache(NULL, workspace_size, executor));
  }
  if (!verify()) goto done;

  /* 4. Errors leave the caches untouched: slot 16 is past the last slot (4 blocks of 4). */
  static const int32_t bad_slots[TOKENS] = {0, 1, 16};
  TRY(kvsExecutorSetTensorAddr(executor, KVS_SCATTER_PA_KV_CACHE_SLOT_MAPPING_INDEX,
                               (void *)bad_slots));
  kvsStatus status = kvsScatterPaKvCache(NULL, workspace_size, executor);
  printf("bad slot: status %d, \"%s\"\n", (int)status, kvsGetLastErrorMessage());
  if (status != KVS_ERROR_INVALID_PARAMETER || !verify()) goto done;

  printf("all layers verified\n");
  ok = 1;

done:
  kvsDestroyExecutor(executor);
  kvsDestroyTensor(key);
  kvsDestroyTensor(value);
  kvsDestroyTensor(key_cache);
  kvsDestroyTensor(value_cache);
  kvsDestroyTensor(slot_mapping);
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
