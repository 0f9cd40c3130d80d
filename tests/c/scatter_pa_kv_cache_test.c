/* kvsScatterPaKvCache through the C ABI: worked examples E1-E9 (numbered here, each with its
 * inputs and expected bytes), one executor rebound across layers, and every rejection (status,
 * message, caches untouched). */
#include <string.h>

#include "kvscatter/kvscatter.h"
#include "test_util.h"

/* float16 code of a value that float16 represents exactly (normal or zero). */
static uint16_t f16(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  const uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
  if ((b & 0x7FFFFFFFu) == 0) return sign;
  const int exponent = (int)((b >> 23) & 0xFF) - 127 + 15;
  return (uint16_t)(sign | (uint16_t)(exponent << 10) | (uint16_t)((b >> 13) & 0x3FF));
}

/* Plans and runs one call with the optional arguments given; returns the first failure. */
typedef struct {
  kvsTensor *value, *value_cache, *compress_lens, *compress_seq_offsets, *seq_lens;
  const char *cache_mode, *scatter_mode;
  const int64_t *strides, *offsets;
} Extras;

static kvsStatus scatter(kvsTensor* key, kvsTensor* key_cache, kvsTensor* slot_mapping,
                         const Extras* x) {
  uint64_t ws = 5;
  kvsExecutor* ex = NULL;
  kvsStatus s = kvsScatterPaKvCacheGetWorkspaceSize(
      key, x->value, key_cache, x->value_cache, slot_mapping, x->compress_lens,
      x->compress_seq_offsets, x->seq_lens, x->cache_mode, x->scatter_mode, x->strides,
      x->strides ? 2 : 0, x->offsets, x->offsets ? 2 : 0, &ws, &ex);
  if (s != KVS_SUCCESS) {
    CHECK(ex == NULL);
    return s;
  }
  CHECK(ws == 0);
  s = kvsScatterPaKvCache(NULL, ws, ex);
  CHECK_OK(kvsDestroyExecutor(ex));
  return s;
}

/* E1: PA_NZ, fp16, 2 heads: key [2,2,16], value [2,2,32], caches [2,2,2,16] and [2,4,2,16]. */
static void e1_run(const int32_t* slots, uint16_t* key_cache, uint16_t* value_cache) {
  uint16_t key[2 * 2 * 16], value[2 * 2 * 32];
  for (int t = 0; t < 2; ++t) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 16; ++d) key[(t * 2 + h) * 16 + d] = f16((float)(100 * t + 20 * h + d));
      for (int d = 0; d < 32; ++d) {
        value[(t * 2 + h) * 32 + d] = f16((float)(500 + 100 * t + 40 * h + d));
      }
    }
  }
  const int64_t key_shape[3] = {2, 2, 16}, value_shape[3] = {2, 2, 32}, slot_shape[1] = {2};
  const int64_t kc_shape[4] = {2, 2, 2, 16}, vc_shape[4] = {2, 4, 2, 16};
  kvsTensor* tk = make_tensor(key, KVS_FLOAT16, 3, key_shape, NULL);
  kvsTensor* tv = make_tensor(value, KVS_FLOAT16, 3, value_shape, NULL);
  kvsTensor* tkc = make_tensor(key_cache, KVS_FLOAT16, 4, kc_shape, NULL);
  kvsTensor* tvc = make_tensor(value_cache, KVS_FLOAT16, 4, vc_shape, NULL);
  kvsTensor* ts = make_tensor((void*)slots, KVS_INT32, 1, slot_shape, NULL);
  Extras x = {tv, tvc, NULL, NULL, NULL, "PA_NZ", NULL, NULL, NULL};
  CHECK_OK(scatter(tk, tkc, ts, &x));
  kvsDestroyTensor(tk);
  kvsDestroyTensor(tv);
  kvsDestroyTensor(tkc);
  kvsDestroyTensor(tvc);
  kvsDestroyTensor(ts);
}

static void test_e1_pa_nz(void) {
  static const int32_t slots[2] = {3, 0};
  uint16_t key_cache[128] = {0}, value_cache[256] = {0};
  e1_run(slots, key_cache, value_cache);
  uint16_t want_k[128] = {0};
  for (int r = 0; r < 16; ++r) {
    want_k[80 + r] = f16((float)r);
    want_k[112 + r] = f16((float)(20 + r));
    want_k[0 + r] = f16((float)(100 + r));
    want_k[32 + r] = f16((float)(120 + r));
  }
  CHECK(memcmp(key_cache, want_k, sizeof want_k) == 0);
  /* valueCache[blk][c][o][:], c = 16-element chunk of token's [2 heads x 32] row. */
  uint16_t want_v[256] = {0};
  const int starts[4] = {500, 516, 540, 556};
  for (int c = 0; c < 4; ++c) {
    for (int r = 0; r < 16; ++r) {
      want_v[((1 * 4 + c) * 2 + 1) * 16 + r] = f16((float)(starts[c] + r));       /* token 0 */
      want_v[((0 * 4 + c) * 2 + 0) * 16 + r] = f16((float)(starts[c] + 100 + r)); /* token 1 */
    }
  }
  CHECK(memcmp(value_cache, want_v, sizeof want_v) == 0);

  /* Variant: slot_mapping [3, -1] leaves block 0 row 0 untouched. */
  static const int32_t padded[2] = {3, -1};
  memset(key_cache, 0, sizeof key_cache);
  memset(value_cache, 0, sizeof value_cache);
  e1_run(padded, key_cache, value_cache);
  for (int r = 0; r < 16; ++r) want_k[0 + r] = want_k[32 + r] = 0;
  CHECK(memcmp(key_cache, want_k, sizeof want_k) == 0);
}

/* E2: Norm, Dk = 2 != Dv = 3, a padding slot; int32 data. */
static const int32_t kE2Key[16] = {0, 0, 0, 0, 9, 10, 11, 12, 1, 2, 3, 4, 0, 0, 0, 0};
static const int32_t kE2Value[24] = {0,   0,   0,   0,   0,   0,   300, 301, 302, 310, 311, 312,
                                     100, 101, 102, 110, 111, 112, 0,   0,   0,   0,   0,   0};

typedef struct {
  int32_t key[12], value[18];
  int64_t slots[3];
  int32_t key_cache[16], value_cache[24];
  kvsTensor *key_t, *value_t, *slots_t, *key_cache_t, *value_cache_t;
} E2;

static void e2_setup(E2* c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < 12; ++i) c->key[i] = i + 1;
  for (int t = 0; t < 3; ++t) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 3; ++d) c->value[(t * 2 + h) * 3 + d] = 100 * (t + 1) + 10 * h + d;
    }
  }
  c->slots[0] = 2;
  c->slots[1] = -1;
  c->slots[2] = 1;
  const int64_t key_shape[3] = {3, 2, 2}, value_shape[3] = {3, 2, 3}, slot_shape[1] = {3};
  const int64_t kc_shape[4] = {2, 2, 2, 2}, vc_shape[4] = {2, 2, 2, 3};
  c->key_t = make_tensor(c->key, KVS_INT32, 3, key_shape, NULL);
  c->value_t = make_tensor(c->value, KVS_INT32, 3, value_shape, NULL);
  c->slots_t = make_tensor(c->slots, KVS_INT64, 1, slot_shape, NULL);
  c->key_cache_t = make_tensor(c->key_cache, KVS_INT32, 4, kc_shape, NULL);
  c->value_cache_t = make_tensor(c->value_cache, KVS_INT32, 4, vc_shape, NULL);
}

static void e2_teardown(E2* c) {
  kvsDestroyTensor(c->key_t);
  kvsDestroyTensor(c->value_t);
  kvsDestroyTensor(c->slots_t);
  kvsDestroyTensor(c->key_cache_t);
  kvsDestroyTensor(c->value_cache_t);
}

static void test_e2_norm(void) {
  E2 c;
  e2_setup(&c);
  Extras x = {c.value_t, c.value_cache_t, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  CHECK_OK(scatter(c.key_t, c.key_cache_t, c.slots_t, &x));
  CHECK(memcmp(c.key_cache, kE2Key, sizeof kE2Key) == 0);
  CHECK(memcmp(c.value_cache, kE2Value, sizeof kE2Value) == 0);
  /* The defaults spelled out give the same bytes. */
  memset(c.key_cache, 0, sizeof c.key_cache);
  memset(c.value_cache, 0, sizeof c.value_cache);
  Extras named = {c.value_t, c.value_cache_t, NULL, NULL, NULL, "Norm", "None", NULL, NULL};
  CHECK_OK(scatter(c.key_t, c.key_cache_t, c.slots_t, &named));
  CHECK(memcmp(c.key_cache, kE2Key, sizeof kE2Key) == 0);
  CHECK(memcmp(c.value_cache, kE2Value, sizeof kE2Value) == 0);
  e2_teardown(&c);
}

/* E4: key only, value passed as NULL or as 0-D descriptors. */
static void test_e4_key_only(void) {
  E2 c;
  e2_setup(&c);
  Extras none = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  CHECK_OK(scatter(c.key_t, c.key_cache_t, c.slots_t, &none));
  CHECK(memcmp(c.key_cache, kE2Key, sizeof kE2Key) == 0);
  memset(c.key_cache, 0, sizeof c.key_cache);
  kvsTensor* scalar = make_tensor(NULL, KVS_INT32, 0, NULL, NULL);
  Extras zero_d = {scalar, scalar, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  CHECK_OK(scatter(c.key_t, c.key_cache_t, c.slots_t, &zero_d));
  CHECK(memcmp(c.key_cache, kE2Key, sizeof kE2Key) == 0);
  for (int i = 0; i < 24; ++i) CHECK(c.value_cache[i] == 0);
  kvsDestroyTensor(scalar);
  e2_teardown(&c);
}

/* E3: Nct, one fused buffer [k0 k1 v0 v1 v2 pad] per token read through strides/offsets. */
static void test_e3_nct(void) {
  int32_t buf[12] = {1, 2, 10, 20, 30, 99, 3, 4, 40, 50, 60, 99};
  int32_t slots[2] = {1, 0};
  int32_t key_cache[4] = {0}, value_cache[6] = {0};
  const int64_t key_shape[3] = {2, 1, 2}, key_strides[3] = {6, 2, 1};
  const int64_t value_shape[3] = {2, 1, 3}, value_strides[3] = {6, 3, 1};
  const int64_t slot_shape[1] = {2}, kc_shape[4] = {1, 2, 1, 2}, vc_shape[4] = {1, 2, 1, 3};
  const int64_t strides[2] = {6, 6}, offsets[2] = {0, 2};
  kvsTensor* tk = make_tensor(buf, KVS_INT32, 3, key_shape, key_strides);
  kvsTensor* tv = make_tensor(buf, KVS_INT32, 3, value_shape, value_strides);
  kvsTensor* ts = make_tensor(slots, KVS_INT32, 1, slot_shape, NULL);
  kvsTensor* tkc = make_tensor(key_cache, KVS_INT32, 4, kc_shape, NULL);
  kvsTensor* tvc = make_tensor(value_cache, KVS_INT32, 4, vc_shape, NULL);
  Extras x = {tv, tvc, NULL, NULL, NULL, NULL, "Nct", strides, offsets};
  CHECK_OK(scatter(tk, tkc, ts, &x));
  const int32_t want_k[4] = {3, 4, 1, 2}, want_v[6] = {40, 50, 60, 10, 20, 30};
  CHECK(memcmp(key_cache, want_k, sizeof want_k) == 0);
  CHECK(memcmp(value_cache, want_v, sizeof want_v) == 0);

  /* strideV differs from strideK and is honoured: separate buffers, strides {4, 3}. */
  int32_t kbuf[8] = {1, 2, 0, 0, 3, 4, 0, 0}, vbuf[6] = {10, 20, 30, 40, 50, 60};
  int64_t slots2[2] = {0, 1};
  const int64_t kstrides[3] = {4, 2, 1}, strides2[2] = {4, 3}, offsets2[2] = {0, 0};
  kvsTensor* tk2 = make_tensor(kbuf, KVS_INT32, 3, key_shape, kstrides);
  kvsTensor* tv2 = make_tensor(vbuf, KVS_INT32, 3, value_shape, NULL);
  kvsTensor* ts2 = make_tensor(slots2, KVS_INT64, 1, slot_shape, NULL);
  Extras x2 = {tv2, tvc, NULL, NULL, NULL, NULL, "Nct", strides2, offsets2};
  CHECK_OK(scatter(tk2, tkc, ts2, &x2));
  const int32_t want_k2[4] = {1, 2, 3, 4}, want_v2[6] = {10, 20, 30, 40, 50, 60};
  CHECK(memcmp(key_cache, want_k2, sizeof want_k2) == 0);
  CHECK(memcmp(value_cache, want_v2, sizeof want_v2) == 0);

  /* strides/offsets counts other than 2 are rejected at the boundary. */
  uint64_t ws = 0;
  kvsExecutor* ex = NULL;
  CHECK_STATUS(kvsScatterPaKvCacheGetWorkspaceSize(tk, tv, tkc, tvc, ts, NULL, NULL, NULL, NULL,
                                                   "Nct", strides, 3, offsets, 2, &ws, &ex),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("strides must have 2 entries, got strides_count = 3");
  CHECK_STATUS(kvsScatterPaKvCacheGetWorkspaceSize(tk, tv, tkc, tvc, ts, NULL, NULL, NULL, NULL,
                                                   "Nct", strides, 2, NULL, 2, &ws, &ex),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("offsets is NULL but offsets_count is 2");
  CHECK(ex == NULL);

  kvsDestroyTensor(tk);
  kvsDestroyTensor(tv);
  kvsDestroyTensor(ts);
  kvsDestroyTensor(tkc);
  kvsDestroyTensor(tvc);
  kvsDestroyTensor(tk2);
  kvsDestroyTensor(tv2);
  kvsDestroyTensor(ts2);
}

/* E5: packed 3-D Alibi, fp16, NH = 2, D = 16; cache rows r = keyCache[r / 4][r % 4][0]. */
static void test_e5_alibi(void) {
  uint16_t key[6 * 2 * 16], value[6 * 2 * 16], key_cache[16 * 16] = {0}, value_cache[16 * 16] = {0};
  for (int i = 0; i < 6 * 2; ++i) {
    for (int d = 0; d < 16; ++d) {
      key[i * 16 + d] = f16((float)(64 * i + d));
      value[i * 16 + d] = f16((float)(1000 + 64 * i + d));
    }
  }
  int32_t seq_lens[2] = {3, 3}, compress_lens[4] = {2, 1, 1, 2}, slots[4] = {0, 4, 8, 12};
  const int64_t key_shape[3] = {6, 2, 16}, cache_shape[4] = {4, 4, 1, 16};
  const int64_t two[1] = {2}, four[1] = {4};
  kvsTensor* tk = make_tensor(key, KVS_FLOAT16, 3, key_shape, NULL);
  kvsTensor* tv = make_tensor(value, KVS_FLOAT16, 3, key_shape, NULL);
  kvsTensor* tkc = make_tensor(key_cache, KVS_FLOAT16, 4, cache_shape, NULL);
  kvsTensor* tvc = make_tensor(value_cache, KVS_FLOAT16, 4, cache_shape, NULL);
  kvsTensor* tsl = make_tensor(seq_lens, KVS_INT32, 1, two, NULL);
  kvsTensor* tcl = make_tensor(compress_lens, KVS_INT32, 1, four, NULL);
  kvsTensor* ts = make_tensor(slots, KVS_INT32, 1, four, NULL);
  Extras x = {tv, tvc, tcl, NULL, tsl, NULL, "Alibi", NULL, NULL};
  CHECK_OK(scatter(tk, tkc, ts, &x));
  /* row -> source (token * NH + head), or -1 for untouched. */
  const int src[16] = {1 * 2 + 0, 2 * 2 + 0, -1, -1, 2 * 2 + 1, -1,        -1, -1,
                       5 * 2 + 0, -1,        -1, -1, 4 * 2 + 1, 5 * 2 + 1, -1, -1};
  for (int row = 0; row < 16; ++row) {
    for (int d = 0; d < 16; ++d) {
      CHECK(key_cache[row * 16 + d] == (src[row] < 0 ? 0 : f16((float)(64 * src[row] + d))));
      CHECK(value_cache[row * 16 + d] ==
            (src[row] < 0 ? 0 : f16((float)(1000 + 64 * src[row] + d))));
    }
  }
  CHECK(key_cache[1 * 16] == f16(256.0f));       /* row1 = [256..271] */
  CHECK(key_cache[13 * 16 + 15] == f16(719.0f)); /* row13 = [704..719] */

  /* Alibi needs seq_lens. */
  Extras missing = {tv, tvc, tcl, NULL, NULL, NULL, "Alibi", NULL, NULL};
  CHECK(scatter(tk, tkc, ts, &missing) != KVS_SUCCESS);
  CHECK_MESSAGE_HAS("seq_lens");

  kvsDestroyTensor(tk);
  kvsDestroyTensor(tv);
  kvsDestroyTensor(tkc);
  kvsDestroyTensor(tvc);
  kvsDestroyTensor(tsl);
  kvsDestroyTensor(tcl);
  kvsDestroyTensor(ts);
}

/* E6 (Rope) and E7 (Omni): packed 3-D, fp16, NH = 1, D = 16, key[t][0][d] = 4t + d. */
static void e6_run(const char* mode, uint16_t* key_cache, uint16_t* value_cache) {
  uint16_t key[7 * 16], value[7 * 16];
  for (int t = 0; t < 7; ++t) {
    for (int d = 0; d < 16; ++d) {
      key[t * 16 + d] = f16((float)(4 * t + d));
      value[t * 16 + d] = f16((float)(1000 + 4 * t + d));
    }
  }
  int64_t seq_lens[2] = {4, 3}, compress_lens[2] = {2, 2}, offsets[2] = {1, -1}, slots[2] = {0, 8};
  const int64_t key_shape[3] = {7, 1, 16}, cache_shape[4] = {3, 4, 1, 16}, two[1] = {2};
  kvsTensor* tk = make_tensor(key, KVS_FLOAT16, 3, key_shape, NULL);
  kvsTensor* tv = make_tensor(value, KVS_FLOAT16, 3, key_shape, NULL);
  kvsTensor* tkc = make_tensor(key_cache, KVS_FLOAT16, 4, cache_shape, NULL);
  kvsTensor* tvc = make_tensor(value_cache, KVS_FLOAT16, 4, cache_shape, NULL);
  kvsTensor* tsl = make_tensor(seq_lens, KVS_INT64, 1, two, NULL);
  kvsTensor* tcl = make_tensor(compress_lens, KVS_INT64, 1, two, NULL);
  kvsTensor* tco = make_tensor(offsets, KVS_INT64, 1, two, NULL);
  kvsTensor* ts = make_tensor(slots, KVS_INT64, 1, two, NULL);
  Extras x = {tv, tvc, tcl, tco, tsl, NULL, mode, NULL, NULL};
  CHECK_OK(scatter(tk, tkc, ts, &x));
  kvsDestroyTensor(tk);
  kvsDestroyTensor(tv);
  kvsDestroyTensor(tkc);
  kvsDestroyTensor(tvc);
  kvsDestroyTensor(tsl);
  kvsDestroyTensor(tcl);
  kvsDestroyTensor(tco);
  kvsDestroyTensor(ts);
}

/* Cache row `row` holds base + d (key) and 1000 + base + d (value); base < 0: zeros. */
static void check_row(const uint16_t* kc, const uint16_t* vc, int row, int base) {
  for (int d = 0; d < 16; ++d) {
    CHECK(kc[row * 16 + d] == (base < 0 ? 0 : f16((float)(base + d))));
    CHECK(vc[row * 16 + d] == (base < 0 ? 0 : f16((float)(1000 + base + d))));
  }
}

static void test_e6_rope_and_e7_omni(void) {
  uint16_t kc[12 * 16] = {0}, vc[12 * 16] = {0};
  e6_run("Rope", kc, vc);
  const int rope[12] = {0, 6, 12, -1, -1, -1, -1, -1, 16, 20, 24, -1};
  for (int r = 0; r < 12; ++r) check_row(kc, vc, r, rope[r]);
  memset(kc, 0, sizeof kc);
  memset(vc, 0, sizeof vc);
  e6_run("Omni", kc, vc);
  const int omni[12] = {0, 12, -1, -1, -1, -1, -1, -1, 16, 20, 24, -1};
  for (int r = 0; r < 12; ++r) check_row(kc, vc, r, omni[r]);
}

/* E6b: the Rope mean accumulates in fp32 and rounds once (key only, window = whole sequence). */
static uint16_t rope_mean(kvsDataType dtype, const uint16_t* codes, int64_t w) {
  uint16_t key[4 * 16], key_cache[4 * 16] = {0};
  for (int64_t t = 0; t < w; ++t) {
    for (int d = 0; d < 16; ++d) key[t * 16 + d] = codes[t];
  }
  int32_t seq_lens[1] = {(int32_t)w}, compress_lens[1] = {(int32_t)w}, offsets[1] = {0};
  int32_t slots[1] = {0};
  const int64_t key_shape[3] = {w, 1, 16}, cache_shape[4] = {1, 4, 1, 16}, one[1] = {1};
  kvsTensor* tk = make_tensor(key, dtype, 3, key_shape, NULL);
  kvsTensor* tkc = make_tensor(key_cache, dtype, 4, cache_shape, NULL);
  kvsTensor* tsl = make_tensor(seq_lens, KVS_INT32, 1, one, NULL);
  kvsTensor* tcl = make_tensor(compress_lens, KVS_INT32, 1, one, NULL);
  kvsTensor* tco = make_tensor(offsets, KVS_INT32, 1, one, NULL);
  kvsTensor* ts = make_tensor(slots, KVS_INT32, 1, one, NULL);
  Extras x = {NULL, NULL, tcl, tco, tsl, NULL, "Rope", NULL, NULL};
  CHECK_OK(scatter(tk, tkc, ts, &x));
  kvsDestroyTensor(tk);
  kvsDestroyTensor(tkc);
  kvsDestroyTensor(tsl);
  kvsDestroyTensor(tcl);
  kvsDestroyTensor(tco);
  kvsDestroyTensor(ts);
  return key_cache[0];
}

static void test_e6b_rope_mean_rounding(void) {
  const uint16_t f16_112[3] = {0x3C00, 0x3C00, 0x4000}, bf16_112[3] = {0x3F80, 0x3F80, 0x4000};
  const uint16_t f16_big[3] = {0x6800, 0x3C00, 0x3C00}, f16_12[2] = {0x3C00, 0x4000};
  CHECK(rope_mean(KVS_FLOAT16, f16_112, 3) == 0x3D55);
  CHECK(rope_mean(KVS_BFLOAT16, bf16_112, 3) == 0x3FAB);
  CHECK(rope_mean(KVS_FLOAT16, f16_big, 3) == 0x6157);
  CHECK(rope_mean(KVS_FLOAT16, f16_12, 2) == 0x3E00);
}

/* E8: 4-D Rope (compress_seq_offsets given, scatter_mode NULL), fp32, documented formula. */
static void test_e8_rope_4d(void) {
  float key[10], value[10], key_cache[16] = {0}, value_cache[16] = {0};
  for (int k = 0; k < 5; ++k) {
    key[2 * k] = (float)k;
    key[2 * k + 1] = (float)(10 * k);
    value[2 * k] = (float)k + 100;
    value[2 * k + 1] = (float)(10 * k) + 100;
  }
  int32_t seq_lens[1] = {5}, offsets[1] = {1}, compress_lens[1] = {2}, slots[1] = {4};
  const int64_t key_shape[4] = {1, 5, 1, 2}, cache_shape[4] = {2, 4, 1, 2};
  const int64_t one[1] = {1}, one_by_one[2] = {1, 1};
  kvsTensor* tk = make_tensor(key, KVS_FLOAT32, 4, key_shape, NULL);
  kvsTensor* tv = make_tensor(value, KVS_FLOAT32, 4, key_shape, NULL);
  kvsTensor* tkc = make_tensor(key_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* tvc = make_tensor(value_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* tsl = make_tensor(seq_lens, KVS_INT32, 1, one, NULL);
  kvsTensor* tco = make_tensor(offsets, KVS_INT32, 1, one, NULL);
  kvsTensor* tcl = make_tensor(compress_lens, KVS_INT32, 2, one_by_one, NULL);
  kvsTensor* ts = make_tensor(slots, KVS_INT32, 2, one_by_one, NULL);
  Extras x = {tv, tvc, tcl, tco, tsl, NULL, NULL, NULL, NULL};
  CHECK_OK(scatter(tk, tkc, ts, &x));
  const float want_k[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.5f, 15, 3, 30, 4, 40};
  const float want_v[16] = {0, 0, 0, 0, 0, 0, 0, 0, 100, 100, 101.5f, 115, 103, 130, 104, 140};
  CHECK(memcmp(key_cache, want_k, sizeof want_k) == 0);
  CHECK(memcmp(value_cache, want_v, sizeof want_v) == 0);

  /* A zero window writes all five tokens from row 4: row 8 is past the 8 slots, so the call
   * fails at execution and nothing is written. */
  compress_lens[0] = 0;
  float before_k[16], before_v[16];
  memcpy(before_k, key_cache, sizeof before_k);
  memcpy(before_v, value_cache, sizeof before_v);
  CHECK_STATUS(scatter(tk, tkc, ts, &x), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("kvsScatterPaKvCache: ");
  CHECK_MESSAGE_HAS("slot_mapping[0] = 4");
  CHECK(memcmp(key_cache, before_k, sizeof before_k) == 0);
  CHECK(memcmp(value_cache, before_v, sizeof before_v) == 0);

  kvsDestroyTensor(tk);
  kvsDestroyTensor(tv);
  kvsDestroyTensor(tkc);
  kvsDestroyTensor(tvc);
  kvsDestroyTensor(tsl);
  kvsDestroyTensor(tco);
  kvsDestroyTensor(tcl);
  kvsDestroyTensor(ts);
}

/* E9: 4-D Alibi (no compress_seq_offsets), fp32. */
static void test_e9_alibi_4d(void) {
  float key[16], value[16], key_cache[16] = {0}, value_cache[16] = {0};
  for (int b = 0; b < 2; ++b) {
    for (int k = 0; k < 4; ++k) {
      const int i = (b * 4 + k) * 2;
      key[i] = (float)(10 * b + k);
      key[i + 1] = (float)(100 + 10 * b + k);
      value[i] = -key[i];
      value[i + 1] = -key[i + 1];
    }
  }
  int64_t seq_lens[2] = {3, 4}, compress_lens[2] = {2, 3}, slots[2] = {0, 4};
  const int64_t key_shape[4] = {2, 4, 1, 2}, cache_shape[4] = {2, 4, 1, 2};
  const int64_t two[1] = {2}, two_by_one[2] = {2, 1};
  kvsTensor* tk = make_tensor(key, KVS_FLOAT32, 4, key_shape, NULL);
  kvsTensor* tv = make_tensor(value, KVS_FLOAT32, 4, key_shape, NULL);
  kvsTensor* tkc = make_tensor(key_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* tvc = make_tensor(value_cache, KVS_FLOAT32, 4, cache_shape, NULL);
  kvsTensor* tsl = make_tensor(seq_lens, KVS_INT64, 1, two, NULL);
  kvsTensor* tcl = make_tensor(compress_lens, KVS_INT64, 1, two, NULL);
  kvsTensor* ts = make_tensor(slots, KVS_INT64, 2, two_by_one, NULL);
  Extras x = {tv, tvc, tcl, NULL, tsl, NULL, NULL, NULL, NULL};
  CHECK_OK(scatter(tk, tkc, ts, &x));
  const float want[16] = {1, 101, 2, 102, 0, 0, 0, 0, 11, 111, 12, 112, 13, 113, 0, 0};
  for (int i = 0; i < 16; ++i) {
    CHECK(key_cache[i] == want[i]);
    CHECK(value_cache[i] == -want[i]);
  }
  kvsDestroyTensor(tk);
  kvsDestroyTensor(tv);
  kvsDestroyTensor(tkc);
  kvsDestroyTensor(tvc);
  kvsDestroyTensor(tsl);
  kvsDestroyTensor(tcl);
  kvsDestroyTensor(ts);
}

/* Validate once with layer 0's buffers, then rebind and run for each of three layers. */
static void test_one_executor_many_layers(void) {
  enum { LAYERS = 3 };
  E2 layers[LAYERS];
  for (int l = 0; l < LAYERS; ++l) {
    e2_setup(&layers[l]);
    for (int i = 0; i < 12; ++i) layers[l].key[i] += 1000 * l;
    for (int i = 0; i < 18; ++i) layers[l].value[i] += 1000 * l;
  }
  uint64_t ws = 0;
  kvsExecutor* ex = NULL;
  CHECK_OK(kvsScatterPaKvCacheGetWorkspaceSize(
      layers[0].key_t, layers[0].value_t, layers[0].key_cache_t, layers[0].value_cache_t,
      layers[0].slots_t, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0, &ws, &ex));
  for (int l = 0; l < LAYERS; ++l) {
    CHECK_OK(kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_KEY_INDEX, layers[l].key));
    CHECK_OK(kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_VALUE_INDEX, layers[l].value));
    CHECK_OK(
        kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_KEY_CACHE_INDEX, layers[l].key_cache));
    CHECK_OK(kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_VALUE_CACHE_INDEX,
                                      layers[l].value_cache));
    CHECK_OK(kvsScatterPaKvCache(NULL, ws, ex));
  }
  for (int l = 0; l < LAYERS; ++l) {
    for (int i = 0; i < 16; ++i) {
      CHECK(layers[l].key_cache[i] == (kE2Key[i] == 0 ? 0 : kE2Key[i] + 1000 * l));
    }
    for (int i = 0; i < 24; ++i) {
      CHECK(layers[l].value_cache[i] == (kE2Value[i] == 0 ? 0 : kE2Value[i] + 1000 * l));
    }
  }

  /* Rebinding slot_mapping to out-of-range slots fails at execution and writes nothing;
   * binding good slots again works. */
  int32_t before[16];
  memcpy(before, layers[2].key_cache, sizeof before);
  const int64_t bad_slots[3] = {0, -1, 4};
  CHECK_OK(
      kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_SLOT_MAPPING_INDEX, (void*)bad_slots));
  CHECK_STATUS(kvsScatterPaKvCache(NULL, ws, ex), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("slot_mapping[2] = 4 is out of range [0, 4)");
  CHECK(memcmp(layers[2].key_cache, before, sizeof before) == 0);
  CHECK_OK(
      kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_SLOT_MAPPING_INDEX, layers[0].slots));
  CHECK_OK(kvsScatterPaKvCache(NULL, ws, ex));

  /* Indices of tensors that were not given, or past the last one. */
  CHECK_STATUS(kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_SEQ_LENS_INDEX, before),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS(
      "tensor 7 (seq_lens) was passed as NULL to kvsScatterPaKvCacheGetWorkspaceSize");
  CHECK_STATUS(kvsExecutorSetTensorAddr(ex, 8, before), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("index = 8 is out of range [0, 8)");
  CHECK_STATUS(kvsExecutorSetTensorAddr(ex, KVS_SCATTER_PA_KV_CACHE_KEY_INDEX, NULL),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("addr is NULL for tensor 0 (key)");
  CHECK_OK(kvsDestroyExecutor(ex));
  for (int l = 0; l < LAYERS; ++l) e2_teardown(&layers[l]);
}

/* Zero tokens: a successful no-op, NULL data allowed for the empty tensors. */
static void test_empty(void) {
  int32_t key_cache[16];
  for (int i = 0; i < 16; ++i) key_cache[i] = 7;
  const int64_t key_shape[3] = {0, 2, 2}, slot_shape[1] = {0}, kc_shape[4] = {2, 2, 2, 2};
  kvsTensor* tk = make_tensor(NULL, KVS_INT32, 3, key_shape, NULL);
  kvsTensor* ts = make_tensor(NULL, KVS_INT32, 1, slot_shape, NULL);
  kvsTensor* tkc = make_tensor(key_cache, KVS_INT32, 4, kc_shape, NULL);
  Extras none = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  CHECK_OK(scatter(tk, tkc, ts, &none));
  for (int i = 0; i < 16; ++i) CHECK(key_cache[i] == 7);
  kvsDestroyTensor(tk);
  kvsDestroyTensor(ts);
  kvsDestroyTensor(tkc);
}

static void test_rejections(void) {
  E2 c;
  e2_setup(&c);
  memset(c.key_cache, 0x11, sizeof c.key_cache);
  memset(c.value_cache, 0x22, sizeof c.value_cache);
  uint64_t ws = 0;
  kvsExecutor* ex = NULL;
  Extras x = {c.value_t, c.value_cache_t, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
#define PLAN(key, kc, slot, value, vc, cache_mode, scatter_mode)                              \
  kvsScatterPaKvCacheGetWorkspaceSize(key, value, kc, vc, slot, NULL, NULL, NULL, cache_mode, \
                                      scatter_mode, NULL, 0, NULL, 0, &ws, &ex)
  CHECK_STATUS(PLAN(NULL, c.key_cache_t, c.slots_t, c.value_t, c.value_cache_t, NULL, NULL),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("kvsScatterPaKvCacheGetWorkspaceSize: key is NULL");
  CHECK_STATUS(PLAN(c.key_t, NULL, c.slots_t, c.value_t, c.value_cache_t, NULL, NULL),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("key_cache is NULL");
  CHECK_STATUS(PLAN(c.key_t, c.key_cache_t, NULL, c.value_t, c.value_cache_t, NULL, NULL),
               KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("slot_mapping is NULL");
  CHECK_STATUS(
      kvsScatterPaKvCacheGetWorkspaceSize(c.key_t, NULL, c.key_cache_t, NULL, c.slots_t, NULL, NULL,
                                          NULL, NULL, NULL, NULL, 0, NULL, 0, NULL, &ex),
      KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("workspace_size is NULL");
  CHECK_STATUS(
      kvsScatterPaKvCacheGetWorkspaceSize(c.key_t, NULL, c.key_cache_t, NULL, c.slots_t, NULL, NULL,
                                          NULL, NULL, NULL, NULL, 0, NULL, 0, &ws, NULL),
      KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("executor is NULL");
  /* A value without a value_cache. */
  CHECK(PLAN(c.key_t, c.key_cache_t, c.slots_t, c.value_t, NULL, NULL, NULL) != KVS_SUCCESS);
  CHECK_MESSAGE_HAS("value_cache is missing");
  /* Mode strings are checked: unknown ones are errors. */
  CHECK_STATUS(PLAN(c.key_t, c.key_cache_t, c.slots_t, c.value_t, c.value_cache_t, "NZ", NULL),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("cache_mode");
  CHECK_MESSAGE_HAS("NZ");
  CHECK_STATUS(PLAN(c.key_t, c.key_cache_t, c.slots_t, c.value_t, c.value_cache_t, NULL, "Bogus"),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("scatter_mode");
  CHECK_MESSAGE_HAS("Bogus");
  /* Bad ranks and dtypes. */
  const int64_t rank2[2] = {3, 4}, slot_shape[1] = {3};
  kvsTensor* key2d = make_tensor(c.key, KVS_INT32, 2, rank2, NULL);
  kvsTensor* float_slots = make_tensor(c.slots, KVS_FLOAT32, 1, slot_shape, NULL);
  const int64_t key_shape[3] = {3, 2, 2};
  kvsTensor* null_key = make_tensor(NULL, KVS_INT32, 3, key_shape, NULL);
  CHECK_STATUS(PLAN(key2d, c.key_cache_t, c.slots_t, c.value_t, c.value_cache_t, NULL, NULL),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("key");
  CHECK_MESSAGE_HAS("2-D");
  CHECK_STATUS(PLAN(c.key_t, c.key_cache_t, float_slots, c.value_t, c.value_cache_t, NULL, NULL),
               KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("slot_mapping");
  CHECK_MESSAGE_HAS("float32");
  /* A descriptor with elements but a NULL data pointer. */
  CHECK_STATUS(scatter(null_key, c.key_cache_t, c.slots_t, &x), KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("key has a null data pointer");
  CHECK(ex == NULL);
#undef PLAN
  /* Out-of-range slot: found at execution, before token 0's valid row is written. */
  c.slots[2] = 4;
  CHECK_STATUS(scatter(c.key_t, c.key_cache_t, c.slots_t, &x), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS("kvsScatterPaKvCache: slot_mapping[2] = 4 is out of range [0, 4)");
  for (size_t i = 0; i < sizeof c.key_cache; ++i) CHECK(((uint8_t*)c.key_cache)[i] == 0x11);
  for (size_t i = 0; i < sizeof c.value_cache; ++i) CHECK(((uint8_t*)c.value_cache)[i] == 0x22);
  /* Executor misuse. */
  CHECK_STATUS(kvsScatterPaKvCache(NULL, 0, NULL), KVS_ERROR_NULL_POINTER);
  CHECK_MESSAGE_HAS("kvsScatterPaKvCache: executor is NULL");
  c.slots[2] = 1;
  CHECK_OK(kvsScatterPaKvCacheGetWorkspaceSize(c.key_t, NULL, c.key_cache_t, NULL, c.slots_t, NULL,
                                               NULL, NULL, NULL, NULL, NULL, 0, NULL, 0, &ws, &ex));
  CHECK_STATUS(kvsScatterPaKvCacheWithKScale(NULL, 0, ex), KVS_ERROR_INVALID_PARAMETER);
  CHECK_MESSAGE_HAS(
      "executor was created by kvsScatterPaKvCacheGetWorkspaceSize and must be run "
      "with kvsScatterPaKvCache, not kvsScatterPaKvCacheWithKScale");
  for (size_t i = 0; i < sizeof c.key_cache; ++i) CHECK(((uint8_t*)c.key_cache)[i] == 0x11);
  CHECK_OK(kvsDestroyExecutor(ex));
  kvsDestroyTensor(key2d);
  kvsDestroyTensor(float_slots);
  kvsDestroyTensor(null_key);
  e2_teardown(&c);
}

int main(void) {
  RUN_TEST(test_e1_pa_nz);
  RUN_TEST(test_e2_norm);
  RUN_TEST(test_e3_nct);
  RUN_TEST(test_e4_key_only);
  RUN_TEST(test_e5_alibi);
  RUN_TEST(test_e6_rope_and_e7_omni);
  RUN_TEST(test_e6b_rope_mean_rounding);
  RUN_TEST(test_e8_rope_4d);
  RUN_TEST(test_e9_alibi_4d);
  RUN_TEST(test_one_executor_many_layers);
  RUN_TEST(test_empty);
  RUN_TEST(test_rejections);
  return TEST_SUMMARY();
}
