/* ScatterPaKvCacheWithKScale and KvCompressEpilog through the C ABI: the worked examples of
 * their operator pages byte for byte, rebinding, mode strings, and every
 * rejection (status, message, caches untouched). */
#include <string.h>

#include "kvscatter/kvscatter.h"
#include "test_util.h"

/* ---- ScatterPaKvCacheWithKScale --------------------------------------------------------- */

enum { KS_NB = 2, KS_N = 2, KS_BS = 4, KS_DK = 4, KS_DV = 2, KS_T = 3 };

typedef struct {
  uint8_t key[KS_T * KS_N * KS_DK];
  uint8_t value[KS_T * KS_N * KS_DV];
  float key_scale[KS_T * KS_N];
  int64_t slots[KS_T];
  uint8_t key_cache[KS_NB * KS_N * KS_BS * KS_DK];
  uint8_t value_cache[KS_NB * KS_N * KS_BS * KS_DV];
  float key_scale_cache[KS_NB * KS_N * KS_BS];
  kvsTensor *t_key, *t_value, *t_key_cache, *t_value_cache, *t_slots, *t_key_scale,
      *t_key_scale_cache;
} KScaleCase;

/* Section 3.5: key[t][h] = 16(t+1) + 4h + i, key_scale[t][h] = 0.5(t+1) + h,
 * slot_mapping = [5, -1, 8]; value (head size 2, differing from the key's) = 0x80 + 8t + 2h + i. */
static void kscale_setup(KScaleCase* c) {
  memset(c, 0, sizeof *c);
  for (int t = 0; t < KS_T; ++t) {
    for (int h = 0; h < KS_N; ++h) {
      for (int i = 0; i < KS_DK; ++i)
        c->key[(t * KS_N + h) * KS_DK + i] = (uint8_t)(16 * (t + 1) + 4 * h + i);
      for (int i = 0; i < KS_DV; ++i)
        c->value[(t * KS_N + h) * KS_DV + i] = (uint8_t)(0x80 + 8 * t + 2 * h + i);
      c->key_scale[t * KS_N + h] = 0.5f * (float)(t + 1) + (float)h;
    }
  }
  c->slots[0] = 5;
  c->slots[1] = -1;
  /* == num_slots: skipped by this operator (docs/semantics.md, 'Out-of-range slots') */
  c->slots[2] = 8;
  const int64_t key_shape[3] = {KS_T, KS_N, KS_DK}, value_shape[3] = {KS_T, KS_N, KS_DV};
  const int64_t kc_shape[4] = {KS_NB, KS_N, KS_BS, KS_DK},
                vc_shape[4] = {KS_NB, KS_N, KS_BS, KS_DV};
  const int64_t slot_shape[1] = {KS_T}, scale_shape[2] = {KS_T, KS_N};
  const int64_t sc_shape[4] = {KS_NB, KS_N, KS_BS, 1};
  c->t_key = make_tensor(c->key, KVS_FLOAT8_E4M3FN, 3, key_shape, NULL);
  c->t_value = make_tensor(c->value, KVS_FLOAT8_E4M3FN, 3, value_shape, NULL);
  c->t_key_cache = make_tensor(c->key_cache, KVS_FLOAT8_E4M3FN, 4, kc_shape, NULL);
  c->t_value_cache = make_tensor(c->value_cache, KVS_FLOAT8_E4M3FN, 4, vc_shape, NULL);
  c->t_slots = make_tensor(c->slots, KVS_INT64, 1, slot_shape, NULL);
  c->t_key_scale = make_tensor(c->key_scale, KVS_FLOAT32, 2, scale_shape, NULL);
  c->t_key_scale_cache = make_tensor(c->key_scale_cache, KVS_FLOAT32, 4, sc_shape, NULL);
}

static void kscale_teardown(KScaleCase* c) {
  kvsDestroyTensor(c->t_key);
  kvsDestroyTensor(c->t_value);
  kvsDestroyTensor(c->t_key_cache);
  kvsDestroyTensor(c->t_value_cache);
  kvsDestroyTensor(c->t_slots);
  kvsDestroyTensor(c->t_key_scale);
  kvsDestroyTensor(c->t_key_scale_cache);
}

static kvsStatus kscale_plan(KScaleCase* c, const char* layout, kvsExecutor** executor) {
  uint64_t workspace_size = 7;
  kvsStatus s = kvsScatterPaKvCacheWithKScaleGetWorkspaceSize(
      c->t_key, c->t_value, c->t_key_cache, c->t_value_cache, c->t_slots, c->t_key_scale,
      c->t_key_scale_cache, layout, &workspace_size, executor);
  if (s == KVS_SUCCESS) CHECK(workspace_size == 0);
  return s;
}

/* Only slot 5 (block 1, offset 1) is written, for both heads. */
static void kscale_check_example(const KScaleCase* c) {
  for (int blk = 0; blk < KS_NB; ++blk) {
    for (int h = 0; h < KS_N; ++h) {
      for (int off = 0; off < KS_BS; ++off) {
        const int hit = blk == 1 && off == 1;
        const int row = (blk * KS_N + h) * KS_BS + off;
        for (int i = 0; i < KS_DK; ++i) {
          CHECK(c->key_cache[row * KS_DK + i] == (hit ? (uint8_t)(16 + 4 * h + i) : 0));
        }
        for (int i = 0; i < KS_DV; ++i) {
          CHECK(c->value_cache[row * KS_DV + i] == (hit ? (uint8_t)(0x80 + 2 * h + i) : 0));
        }
        CHECK(c->key_scale_cache[row] == (hit ? 0.5f + (float)h : 0.0f));
      }
    }
  }
  /* The worked example: key_cache[1][0][1] = 10 11 12 13 and key_cache[1][1][1] = 14 15 16 17. */
  CHECK(c->key_cache[((1 * KS_N + 0) * KS_BS + 1) * KS_DK] == 0x10);
  CHECK(c->key_cache[((1 * KS_N + 1) * KS_BS + 1) * KS_DK + 3] == 0x17);
}

static void test_kscale_worked_example(void) {
  KScaleCase c;
  kscale_setup(&c);
  kvsExecutor* ex = NULL;
  CHECK_OK(kscale_plan(&c, NULL, &ex));
  CHECK_OK(kvsScatterPaKvCacheWithKScale(NULL, 0, ex));
  kscale_check_example(&c);
  CHECK_OK(kvsDestroyExecutor(ex));
  /* "BNBD" spelled out gives the same result. */
  memset(c.key_cache, 0, sizeof c.key_cache);
  memset(c.value_cache, 0, sizeof c.value_cache);
  memset(c.key_scale_cache, 0, sizeof c.key_scale_cache);
  CHECK_OK(kscale_plan(&c, "BNBD", &ex));
  CHECK_OK(kvsScatterPaKvCacheWithKScale(NULL, 0, ex));
  kscale_check_example(&c);
  CHECK_OK(kvsDestroyExecutor(ex));
  kscale_teardown(&c);
}

/* One plan, two layers: rebind the caches and inputs of layer 1, run, check both layers. */
static void test_kscale_rebinding(void) {
  KScaleCase layer0, layer1;
  kscale_setup(&layer0);
  kscale_setup(&layer1);
  for (size_t i = 0; i < sizeof layer1.key; ++i) layer1.key[i] = (uint8_t)(layer1.key[i] + 1);
  kvsExecutor* ex = NULL;
  CHECK_OK(kscale_plan(&layer0, NULL, &ex));
  CHECK_OK(kvsScatterPaKvCacheWithKScale(NULL, 0, ex));
  CHECK_OK(
      kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_INDEX, layer1.key));
  CHECK_OK(kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_CACHE_INDEX,
                                    layer1.key_cache));
  CHECK_OK(kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_VALUE_CACHE_INDEX,
                                    layer1.value_cache));
  CHECK_OK(kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_SCALE_CACHE_INDEX,
                                    layer1.key_scale_cache));
  CHECK_OK(kvsScatterPaKvCacheWithKScale(NULL, 0, ex));
  kscale_check_example(&layer0);
  const int row = (1 * KS_N + 0) * KS_BS + 1;
  CHECK(layer1.key_cache[row * KS_DK] == 0x11);
  CHECK(layer1.value_cache[row * KS_DV] == 0x80);
  CHECK(layer1.key_scale_cache[row] == 0.5f);
  CHECK_OK(kvsDestroyExecutor(ex));
  kscale_teardown(&layer0);
  kscale_teardown(&layer1);
}

static void test_kscale_rejections(void) {
  KScaleCase c;
  kscale_setup(&c);
  memset(c.key_cache, 0xAB, sizeof c.key_cache);
  kvsExecutor* ex = NULL;
  uint64_t ws = 0;
  CHECK_STATUS(kvsScatterPaKvCacheWithKScaleGetWorkspaceSize(
                   c.t_key, NULL, c.t_key_cache, c.t_value_cache, c.t_slots, c.t_key_scale,
                   c.t_key_scale_cache, NULL, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("kvsScatterPaKvCacheWithKScaleGetWorkspaceSize: value is NULL");
  CHECK_STATUS(kvsScatterPaKvCacheWithKScaleGetWorkspaceSize(c.t_key, c.t_value, c.t_key_cache,
                                                             c.t_value_cache, c.t_slots,
                                                             c.t_key_scale, NULL, NULL, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("key_scale_cache is NULL");
  CHECK_STATUS(kscale_plan(&c, "BSND", &ex), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("BSND");
  /* key must be float8: a uint8 key is rejected. */
  const int64_t key_shape[3] = {KS_T, KS_N, KS_DK};
  kvsTensor* saved = c.t_key;
  c.t_key = make_tensor(c.key, KVS_UINT8, 3, key_shape, NULL);
  CHECK_STATUS(kscale_plan(&c, NULL, &ex), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("key dtype");
  CHECK_MESSAGE_HAS("uint8");
  kvsDestroyTensor(c.t_key);
  /* key must be 3-D. */
  c.t_key = make_tensor(c.key, KVS_FLOAT8_E4M3FN, 2, key_shape, NULL);
  CHECK_STATUS(kscale_plan(&c, NULL, &ex), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("key must be 3-D");
  kvsDestroyTensor(c.t_key);
  c.t_key = saved;
  CHECK(ex == NULL);
  for (size_t i = 0; i < sizeof c.key_cache; ++i) CHECK(c.key_cache[i] == 0xAB);
  for (size_t i = 0; i < sizeof c.key_scale_cache / sizeof(float); ++i)
    CHECK(c.key_scale_cache[i] == 0.0f);
  /* The executor of one operator cannot be run by another. */
  CHECK_OK(kscale_plan(&c, NULL, &ex));
  CHECK_STATUS(kvsKvCompressEpilog(NULL, 0, ex), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS(
      "created by kvsScatterPaKvCacheWithKScaleGetWorkspaceSize and must be run "
      "with kvsScatterPaKvCacheWithKScale, not kvsKvCompressEpilog");
  for (size_t i = 0; i < sizeof c.key_cache; ++i) CHECK(c.key_cache[i] == 0xAB);
  CHECK_OK(kvsDestroyExecutor(ex));
  CHECK_STATUS(kvsScatterPaKvCacheWithKScale(NULL, 0, NULL), KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("kvsScatterPaKvCacheWithKScale: executor is NULL");
  kscale_teardown(&c);
}

/* ---- KvCompressEpilog (section 4.8, d = 128) -------------------------------------------- */

enum { D = 128 };

static uint16_t bf16_of(float f) { /* exact for the values used here */
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return (uint16_t)(bits >> 16);
}

/* Nope x[k] = (k - 32) / 4 for k < 64; rope x[64..71] = 1, -1, 0.5, 3, 1.0625, 100, -0.3
 * (bf16 0xBE9A), 40000 (bf16 0x471C); the rest 0. */
static void epilog_row(uint16_t* x) {
  for (int k = 0; k < 64; ++k) x[k] = bf16_of((float)(k - 32) / 4.0f);
  const uint16_t rope[8] = {0x3F80, 0xBF80, 0x3F00, 0x4040, 0x3F88, 0x42C8, 0xBE9A, 0x471C};
  for (int j = 0; j < 64; ++j) x[64 + j] = j < 8 ? rope[j] : 0;
}

static const uint8_t kRopeBf16[16] = {0x80, 0x3F, 0x80, 0xBF, 0x00, 0x3F, 0x40, 0x40,
                                      0x88, 0x3F, 0xC8, 0x42, 0x9A, 0xBE, 0x1C, 0x47};
static const uint8_t kMode1Data[64] = {
    0xF8, 0xF8, 0xF7, 0xF6, 0xF6, 0xF6, 0xF5, 0xF4, 0xF4, 0xF4, 0xF3, 0xF2, 0xF2, 0xF2, 0xF1, 0xF0,
    0xF0, 0xEF, 0xEE, 0xED, 0xEC, 0xEB, 0xEA, 0xE9, 0xE8, 0xE6, 0xE4, 0xE2, 0xE0, 0xDC, 0xD8, 0xD0,
    0x00, 0x50, 0x58, 0x5C, 0x60, 0x62, 0x64, 0x66, 0x68, 0x69, 0x6A, 0x6B, 0x6C, 0x6D, 0x6E, 0x6F,
    0x70, 0x70, 0x71, 0x72, 0x72, 0x72, 0x73, 0x74, 0x74, 0x74, 0x75, 0x76, 0x76, 0x76, 0x77, 0x78};
static const uint8_t kNoRoundData[64] = {
    0xFE, 0xFE, 0xFD, 0xFD, 0xFC, 0xFC, 0xFB, 0xFB, 0xFA, 0xFA, 0xFA, 0xF9, 0xF9, 0xF8, 0xF8, 0xF7,
    0xF6, 0xF5, 0xF4, 0xF3, 0xF2, 0xF2, 0xF1, 0xF0, 0xEE, 0xEC, 0xEA, 0xE9, 0xE6, 0xE2, 0xDE, 0xD6,
    0x00, 0x56, 0x5E, 0x62, 0x66, 0x69, 0x6A, 0x6C, 0x6E, 0x70, 0x71, 0x72, 0x72, 0x73, 0x74, 0x75,
    0x76, 0x77, 0x78, 0x78, 0x79, 0x79, 0x7A, 0x7A, 0x7A, 0x7B, 0x7B, 0x7C, 0x7C, 0x7D, 0x7D, 0x7E};

/* Builds the expected row of an fp8 mode: rope bf16, zeros to 128, data, scale bytes, pad. */
static void fp8_expected(uint8_t* row, const uint8_t* data, const uint8_t* scale, int scale_bytes,
                         int written) {
  memset(row, 0, (size_t)written);
  memcpy(row, kRopeBf16, sizeof kRopeBf16);
  memcpy(row + 128, data, 64);
  memcpy(row + 192, scale, (size_t)scale_bytes);
}

/* Runs one token through a [1, 1, 1, 256] cache prefilled with 0xEE; checks the first
 * `written` bytes against `want` and that the rest of the row is untouched. */
static void epilog_one(const char* mode, int64_t group, bool round_scale, float x_scale,
                       const uint8_t* want, int written) {
  uint16_t x[D];
  uint8_t cache[256];
  int32_t slot = 0;
  epilog_row(x);
  memset(cache, 0xEE, sizeof cache);
  const int64_t cache_shape[4] = {1, 1, 1, 256}, x_shape[2] = {1, D}, slot_shape[1] = {1};
  kvsTensor* tc = make_tensor(cache, KVS_UINT8, 4, cache_shape, NULL);
  kvsTensor* tx = make_tensor(x, KVS_BFLOAT16, 2, x_shape, NULL);
  kvsTensor* ts = make_tensor(&slot, KVS_INT32, 1, slot_shape, NULL);
  uint64_t ws = 9;
  kvsExecutor* ex = NULL;
  CHECK_OK(
      kvsKvCompressEpilogGetWorkspaceSize(tc, tx, ts, group, mode, round_scale, x_scale, &ws, &ex));
  CHECK(ws == 0);
  CHECK_OK(kvsKvCompressEpilog(NULL, 0, ex));
  CHECK(memcmp(cache, want, (size_t)written) == 0);
  for (int i = written; i < 256; ++i) CHECK(cache[i] == 0xEE);
  if (memcmp(cache, want, (size_t)written) != 0) {
    for (int i = 0; i < written; ++i) {
      if (cache[i] != want[i])
        fprintf(stderr, "  byte %d: got %02X want %02X\n", i, cache[i], want[i]);
    }
  }
  CHECK_OK(kvsDestroyExecutor(ex));
  kvsDestroyTensor(tc);
  kvsDestroyTensor(tx);
  kvsDestroyTensor(ts);
}

static void test_epilog_mode1_round_scale(void) {
  uint8_t want[193];
  const uint8_t scale = 0x7A;
  fp8_expected(want, kMode1Data, &scale, 1, 193);
  epilog_one("fp8_e8m0", 64, true, 1.0f, want, 193);
  /* NULL selects the default mode, fp8_e8m0; the integer spelling and any case work too. */
  epilog_one(NULL, 64, true, 1.0f, want, 193);
  epilog_one("1", 64, true, 1.0f, want, 193);
  epilog_one("  FP8_E8M0 ", 64, true, 1.0f, want, 193);
}

static void test_epilog_mode0(void) {
  uint8_t want[224];
  const uint8_t scale_round[2] = {0x00, 0x3D}, scale_exact[2] = {0x92, 0x3C};
  fp8_expected(want, kMode1Data, scale_round, 2, 224);
  epilog_one("fp8_bf16", 64, true, 1.0f, want, 224);
  fp8_expected(want, kNoRoundData, scale_exact, 2, 224);
  epilog_one("fp8_bf16", 64, false, 1.0f, want, 224);
  /* Mode 1 without rounding: same data bytes, scale byte 0x79. */
  const uint8_t scale_floor = 0x79;
  fp8_expected(want, kNoRoundData, &scale_floor, 1, 193);
  epilog_one("fp8_e8m0", 64, false, 1.0f, want, 193);
}

static void test_epilog_mode2(void) {
  static const uint8_t fp4[32] = {0xFF, 0xFF, 0xFF, 0xEE, 0xEE, 0xEE, 0xEE, 0xDD, 0xDD, 0xCD, 0xCC,
                                  0xBC, 0xBB, 0xAA, 0x9A, 0x89, 0x00, 0x11, 0x22, 0x32, 0x33, 0x44,
                                  0x54, 0x55, 0x55, 0x65, 0x66, 0x66, 0x66, 0x77, 0x77, 0x77};
  static const uint8_t rope1[8] = {0x08, 0x88, 0x18, 0x14, 0x09, 0x4A, 0xB2, 0x6E};
  static const uint8_t rope_half[8] = {0x18, 0x98, 0x30, 0x0C, 0x19, 0x46, 0xBA, 0x6C};
  uint8_t want[128];
  memset(want, 0, sizeof want);
  memcpy(want, rope1, sizeof rope1);
  memcpy(want + 64, fp4, sizeof fp4);
  want[96] = 0xAB;
  want[97] = 0x3F;
  want[98] = 0xA5;
  want[99] = 0x3F;
  epilog_one("hifloat8_fp4", 32, true, 1.0f, want, 128);
  epilog_one("2", 32, false, 1.0f, want, 128); /* round_scale is ignored in mode 2 */
  memcpy(want, rope_half, sizeof rope_half);
  epilog_one("hifloat8_fp4", 32, true, 0.5f, want, 128);
}

/* Section 4.8 "paged scatter": cache [3, 2, 1, 200] with block stride 500, prefilled 0xEE,
 * slot_mapping [3, -1, 0], mode 1; then the same plan rebound to a second cache. */
static void test_epilog_paged_scatter_and_rebinding(void) {
  uint16_t x[3 * D];
  uint8_t cache[2][1500];
  int64_t slots[3] = {3, -1, 0};
  for (int r = 0; r < 3; ++r) epilog_row(x + r * D);
  memset(cache, 0xEE, sizeof cache);
  const int64_t cache_shape[4] = {3, 2, 1, 200}, cache_strides[4] = {500, 200, 200, 1};
  const int64_t x_shape[2] = {3, D}, slot_shape[1] = {3};
  kvsTensor* tc = make_tensor(cache[0], KVS_UINT8, 4, cache_shape, cache_strides);
  kvsTensor* tx = make_tensor(x, KVS_BFLOAT16, 2, x_shape, NULL);
  kvsTensor* ts = make_tensor(slots, KVS_INT64, 1, slot_shape, NULL);
  uint64_t ws = 0;
  kvsExecutor* ex = NULL;
  CHECK_OK(kvsKvCompressEpilogGetWorkspaceSize(tc, tx, ts, 64, NULL, true, 1.0f, &ws, &ex));
  kvsDestroyTensor(tc);
  kvsDestroyTensor(tx);
  kvsDestroyTensor(ts);
  CHECK_OK(kvsKvCompressEpilog(NULL, 0, ex));
  CHECK_OK(kvsExecutorSetTensorAddr(ex, KVS_KV_COMPRESS_EPILOG_CACHE_INDEX, cache[1]));
  CHECK_OK(kvsKvCompressEpilog(NULL, 0, ex));
  CHECK_OK(kvsDestroyExecutor(ex));
  uint8_t want[193];
  const uint8_t scale = 0x7A;
  fp8_expected(want, kMode1Data, &scale, 1, 193);
  for (int layer = 0; layer < 2; ++layer) {
    for (int i = 0; i < 1500; ++i) {
      int expected = 0xEE;
      if (i < 193) expected = want[i];
      if (i >= 700 && i < 700 + 193) expected = want[i - 700];
      if (cache[layer][i] != expected) {
        fprintf(stderr, "  layer %d byte %d: got %02X want %02X\n", layer, i, cache[layer][i],
                expected);
        CHECK(cache[layer][i] == expected);
        break;
      }
    }
  }
}

static void test_epilog_rejections(void) {
  uint16_t x[2 * D];
  uint8_t cache[4 * 200];
  int32_t slots[2] = {0, 1};
  epilog_row(x);
  epilog_row(x + D);
  memset(cache, 0x5A, sizeof cache);
  const int64_t cache_shape[4] = {2, 2, 1, 200}, x_shape[2] = {2, D}, slot_shape[1] = {2};
  const int64_t x_bad_d[2] = {2, 100};
  kvsTensor* tc = make_tensor(cache, KVS_UINT8, 4, cache_shape, NULL);
  kvsTensor* tx = make_tensor(x, KVS_BFLOAT16, 2, x_shape, NULL);
  kvsTensor* ts = make_tensor(slots, KVS_INT32, 1, slot_shape, NULL);
  kvsTensor* tx_f32 = make_tensor(x, KVS_FLOAT32, 2, x_shape, NULL);
  kvsTensor* tx_d100 = make_tensor(x, KVS_BFLOAT16, 2, x_bad_d, NULL);
  kvsTensor* tc_i8 = make_tensor(cache, KVS_INT8, 4, cache_shape, NULL);
  uint64_t ws = 0;
  kvsExecutor* ex = NULL;

  CHECK_STATUS(kvsKvCompressEpilogGetWorkspaceSize(NULL, tx, ts, 64, NULL, true, 1.0f, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("kvsKvCompressEpilogGetWorkspaceSize: cache is NULL");
  CHECK_STATUS(kvsKvCompressEpilogGetWorkspaceSize(tc, NULL, ts, 64, NULL, true, 1.0f, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("x is NULL");
  CHECK_STATUS(kvsKvCompressEpilogGetWorkspaceSize(tc, tx, NULL, 64, NULL, true, 1.0f, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("slot_mapping is NULL");
  CHECK_STATUS(kvsKvCompressEpilogGetWorkspaceSize(tc, tx, ts, 64, "fp8", true, 1.0f, &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("fp8");
  CHECK_STATUS(kvsKvCompressEpilogGetWorkspaceSize(tc, tx, ts, 64, "3", true, 1.0f, &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_STATUS(
      kvsKvCompressEpilogGetWorkspaceSize(tc, tx, ts, 48, "hifloat8_fp4", true, 1.0f, &ws, &ex),
      KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("quant_group_size");
  CHECK_MESSAGE_HAS("48");
  CHECK_STATUS(kvsKvCompressEpilogGetWorkspaceSize(tc, tx_f32, ts, 64, NULL, true, 1.0f, &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("x dtype");
  CHECK_MESSAGE_HAS("float32");
  CHECK_STATUS(kvsKvCompressEpilogGetWorkspaceSize(tc, tx_d100, ts, 64, NULL, true, 1.0f, &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("d = 100");
  CHECK_STATUS(kvsKvCompressEpilogGetWorkspaceSize(tc_i8, tx, ts, 64, NULL, true, 1.0f, &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("cache dtype");
  CHECK_MESSAGE_HAS("int8");
  /* A null data pointer is reported before a bad mode text, as the C++ plan does. */
  kvsTensor* ts_null = make_tensor(NULL, KVS_INT32, 1, slot_shape, NULL);
  CHECK_STATUS(kvsKvCompressEpilogGetWorkspaceSize(tc, tx, ts_null, 64, "3", true, 1.0f, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("slot_mapping has a null data pointer");
  kvsDestroyTensor(ts_null);
  CHECK(ex == NULL);

  /* Data-dependent rules are checked at execution, over all tokens before any write: slot 4 is
   * out of range [0, 4), and -2 is a negative value other than -1 (only -1 marks padding here). */
  CHECK_OK(kvsKvCompressEpilogGetWorkspaceSize(tc, tx, ts, 64, NULL, true, 1.0f, &ws, &ex));
  slots[1] = 4;
  CHECK_STATUS(kvsKvCompressEpilog(NULL, 0, ex), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("kvsKvCompressEpilog: ");
  CHECK_MESSAGE_HAS("slot_mapping[1] = 4 is out of range [0, 4)");
  slots[1] = -2;
  CHECK_STATUS(kvsKvCompressEpilog(NULL, 0, ex), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("slot_mapping[1] = -2");
  for (size_t i = 0; i < sizeof cache; ++i) CHECK(cache[i] == 0x5A);
  CHECK_STATUS(kvsExecutorSetTensorAddr(ex, 3, cache), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("index = 3 is out of range [0, 3)");
  CHECK_OK(kvsDestroyExecutor(ex));
  CHECK_STATUS(kvsKvCompressEpilog(NULL, 0, NULL), KVS_ERROR_NULL_POINTER);

  kvsDestroyTensor(tc);
  kvsDestroyTensor(tx);
  kvsDestroyTensor(ts);
  kvsDestroyTensor(tx_f32);
  kvsDestroyTensor(tx_d100);
  kvsDestroyTensor(tc_i8);
}

int main(void) {
  RUN_TEST(test_kscale_worked_example);
  RUN_TEST(test_kscale_rebinding);
  RUN_TEST(test_kscale_rejections);
  RUN_TEST(test_epilog_mode1_round_scale);
  RUN_TEST(test_epilog_mode0);
  RUN_TEST(test_epilog_mode2);
  RUN_TEST(test_epilog_paged_scatter_and_rebinding);
  RUN_TEST(test_epilog_rejections);
  return TEST_SUMMARY();
}
