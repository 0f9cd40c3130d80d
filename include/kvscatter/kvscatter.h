/*
 * kvscatter C ABI (plain ISO C, 2011 edition; also valid C++).
 *
 * Every operator is a two-phase pair:
 *
 *   kvsXxxGetWorkspaceSize(tensors..., attributes..., &workspace_size, &executor)
 *       checks every shape, dtype, stride and mode rule and returns a reusable plan;
 *   kvsXxx(workspace, workspace_size, executor)
 *       checks the data-dependent rules (slot values, compress lengths) over all tokens,
 *       then writes the caches in place.
 *
 * An executor is run as often as needed (one plan for every layer of a model; rebind each
 * layer's buffers with kvsExecutorSetTensorAddr) and freed with kvsDestroyExecutor.
 * Tensor descriptors are copied into the executor, so they may be destroyed right after the
 * GetWorkspaceSize call. The CPU operators need no workspace: workspace_size is always 0 and
 * workspace may be NULL.
 *
 * Every function that can fail returns a kvsStatus. On failure, kvsGetLastErrorMessage()
 * returns a message naming the argument, the expected and the actual value; no cache byte has
 * been written and nothing has been allocated.
 * Optional tensors are passed as NULL, mode strings as NUL-terminated strings (NULL or ""
 * selects the default).
 *
 * Documentation: docs/c_api.md.
 */
#ifndef KVSCATTER_KVSCATTER_H_
#define KVSCATTER_KVSCATTER_H_

#include <stdbool.h>
#include <stdint.h>

#include "kvscatter/export.h"

#ifdef __cplusplus
#define KVS_NOEXCEPT noexcept
extern "C" {
#else
#define KVS_NOEXCEPT
#endif

/* ---- Status codes ------------------------------------------------------------------------ */

typedef int32_t kvsStatus;

#define KVS_SUCCESS 0
#define KVS_ERROR_NULL_POINTER 161001      /* a required pointer argument is NULL */
#define KVS_ERROR_INVALID_PARAMETER 161002 /* shape, dtype, stride, mode or value rule broken */
#define KVS_ERROR_INTERNAL 561000          /* out of memory or a library bug */

/* Message of the calling thread's most recent failed call ("" if none has failed). The
 * pointer stays valid until the next failing call on the same thread. */
KVSCATTER_API const char *kvsGetLastErrorMessage(void) KVS_NOEXCEPT;

/* ---- Version and runtime ----------------------------------------------------------------- */

/* Version of the loaded library, e.g. "0.1.0". */
KVSCATTER_API const char *kvsGetVersionString(void) KVS_NOEXCEPT;
/* Any of the outputs may be NULL. */
KVSCATTER_API kvsStatus kvsGetVersion(int32_t *major, int32_t *minor, int32_t *patch) KVS_NOEXCEPT;

/* Worker threads of the CPU kernels; n <= 0 restores the default (KVSCATTER_NUM_THREADS or the
 * available cores). Results never depend on the thread count. */
KVSCATTER_API kvsStatus kvsSetNumThreads(int32_t n) KVS_NOEXCEPT;
KVSCATTER_API kvsStatus kvsGetNumThreads(int32_t *n) KVS_NOEXCEPT;

/* ---- Tensor descriptors ------------------------------------------------------------------ */

/* In C++ the enum has the fixed type int32_t, so that any value a C caller passes is a valid
 * kvsDataType there too (unknown values are rejected with KVS_ERROR_INVALID_PARAMETER). */
#ifdef __cplusplus
#define KVS_ENUM_INT32 : int32_t
#else
#define KVS_ENUM_INT32
#endif

typedef enum kvsDataType KVS_ENUM_INT32 {
  KVS_FLOAT32 = 0,
  KVS_FLOAT16 = 1,
  KVS_BFLOAT16 = 2,
  KVS_INT8 = 3,
  KVS_UINT8 = 4,
  KVS_INT16 = 5,
  KVS_UINT16 = 6,
  KVS_INT32 = 7,
  KVS_UINT32 = 8,
  KVS_INT64 = 9,
  KVS_HIFLOAT8 = 10,
  KVS_FLOAT8_E5M2 = 11,
  KVS_FLOAT8_E4M3FN = 12,
  KVS_FLOAT8_E8M0 = 13,
  KVS_FLOAT4_E2M1 = 14, /* two elements per byte; shapes and strides count elements */
  KVS_FLOAT4_E1M2 = 15  /* likewise */
} kvsDataType;

#define KVS_MAX_RANK 8

/* A non-owning description of a strided tensor. */
typedef struct kvsTensor kvsTensor;

/* Describes `rank` (0..8) dims of `shape` with `strides` in ELEMENTS; strides == NULL means
 * row-major contiguous. shape may be NULL when rank is 0. data may be NULL only for a tensor
 * with no elements. The memory behind data is never owned, allocated or freed by kvscatter. */
KVSCATTER_API kvsStatus kvsCreateTensor(void *data, kvsDataType dtype, int64_t rank,
                                        const int64_t *shape, const int64_t *strides,
                                        kvsTensor **tensor) KVS_NOEXCEPT;
/* NULL is accepted and ignored. */
KVSCATTER_API kvsStatus kvsDestroyTensor(kvsTensor *tensor) KVS_NOEXCEPT;

/* ---- Executors --------------------------------------------------------------------------- */

/* A validated plan returned by a GetWorkspaceSize call. It owns copies of the descriptors. */
typedef struct kvsExecutor kvsExecutor;

/* NULL is accepted and ignored. */
KVSCATTER_API kvsStatus kvsDestroyExecutor(kvsExecutor *executor) KVS_NOEXCEPT;

/* Rebinds one tensor of a plan to another buffer with the same shape, dtype and strides (for
 * example the next layer's caches), in the style of aclSetInputTensorAddr. `index` is the
 * tensor's position among the operator's tensor arguments; use the KVS_*_INDEX constants
 * below. Rebinding a tensor that was passed as NULL is an error. The new address is used by
 * every following execution; data-dependent rules are checked again at each execution. */
KVSCATTER_API kvsStatus kvsExecutorSetTensorAddr(kvsExecutor *executor, uint64_t index,
                                                 void *addr) KVS_NOEXCEPT;

/* ---- ScatterPaKvCache (docs/operators/scatter_pa_kv_cache.md) --------------------------- */

enum {
  KVS_SCATTER_PA_KV_CACHE_KEY_INDEX = 0,
  KVS_SCATTER_PA_KV_CACHE_VALUE_INDEX = 1,
  KVS_SCATTER_PA_KV_CACHE_KEY_CACHE_INDEX = 2,
  KVS_SCATTER_PA_KV_CACHE_VALUE_CACHE_INDEX = 3,
  KVS_SCATTER_PA_KV_CACHE_SLOT_MAPPING_INDEX = 4,
  KVS_SCATTER_PA_KV_CACHE_COMPRESS_LENS_INDEX = 5,
  KVS_SCATTER_PA_KV_CACHE_COMPRESS_SEQ_OFFSETS_INDEX = 6,
  KVS_SCATTER_PA_KV_CACHE_SEQ_LENS_INDEX = 7
};

/* value/value_cache NULL: key-only call. compress_lens, compress_seq_offsets, seq_lens: NULL
 * when absent. cache_mode: "Norm" (default) | "PA_NZ". scatter_mode: "None" (default) |
 * "Nct" | "Alibi" | "Rope" | "Omni" | "NHSD". strides = {strideK, strideV} and
 * offsets = {offsetK, offsetV} (Nct only): NULL with count 0 when absent, otherwise count
 * must be 2. */
KVSCATTER_API kvsStatus kvsScatterPaKvCacheGetWorkspaceSize(
    const kvsTensor *key, const kvsTensor *value, kvsTensor *key_cache, kvsTensor *value_cache,
    const kvsTensor *slot_mapping, const kvsTensor *compress_lens,
    const kvsTensor *compress_seq_offsets, const kvsTensor *seq_lens, const char *cache_mode,
    const char *scatter_mode, const int64_t *strides, uint64_t strides_count,
    const int64_t *offsets, uint64_t offsets_count, uint64_t *workspace_size,
    kvsExecutor **executor) KVS_NOEXCEPT;

KVSCATTER_API kvsStatus kvsScatterPaKvCache(void *workspace, uint64_t workspace_size,
                                            kvsExecutor *executor) KVS_NOEXCEPT;

/* ---- ScatterPaKvCacheWithKScale (docs/operators/scatter_pa_kv_cache_with_k_scale.md) ---- */

enum {
  KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_INDEX = 0,
  KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_VALUE_INDEX = 1,
  KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_CACHE_INDEX = 2,
  KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_VALUE_CACHE_INDEX = 3,
  KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_SLOT_MAPPING_INDEX = 4,
  KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_SCALE_INDEX = 5,
  KVS_SCATTER_PA_KV_CACHE_WITH_K_SCALE_KEY_SCALE_CACHE_INDEX = 6
};

/* cache_layout: "BNBD" (default). Slots < 0 or >= num_blocks * block_size are skipped. */
KVSCATTER_API kvsStatus kvsScatterPaKvCacheWithKScaleGetWorkspaceSize(
    const kvsTensor *key, const kvsTensor *value, kvsTensor *key_cache, kvsTensor *value_cache,
    const kvsTensor *slot_mapping, const kvsTensor *key_scale, kvsTensor *key_scale_cache,
    const char *cache_layout, uint64_t *workspace_size, kvsExecutor **executor) KVS_NOEXCEPT;

KVSCATTER_API kvsStatus kvsScatterPaKvCacheWithKScale(void *workspace, uint64_t workspace_size,
                                                      kvsExecutor *executor) KVS_NOEXCEPT;

/* ---- KvCompressEpilog (docs/operators/kv_compress_epilog.md) ----------------------------- */

enum {
  KVS_KV_COMPRESS_EPILOG_CACHE_INDEX = 0,
  KVS_KV_COMPRESS_EPILOG_X_INDEX = 1,
  KVS_KV_COMPRESS_EPILOG_SLOT_MAPPING_INDEX = 2
};

/* quant_mode: "fp8_bf16" | "fp8_e8m0" (default) | "hifloat8_fp4" (case-insensitive) or
 * "0" | "1" | "2". quant_group_size (16 | 32 | 64) is used by hifloat8_fp4 only; round_scale
 * by the fp8 modes only; x_scale by hifloat8_fp4 only. The usual values are quant_group_size
 * 64, round_scale true, x_scale 1.0. */
KVSCATTER_API kvsStatus kvsKvCompressEpilogGetWorkspaceSize(
    kvsTensor *cache, const kvsTensor *x, const kvsTensor *slot_mapping, int64_t quant_group_size,
    const char *quant_mode, bool round_scale, float x_scale, uint64_t *workspace_size,
    kvsExecutor **executor) KVS_NOEXCEPT;

KVSCATTER_API kvsStatus kvsKvCompressEpilog(void *workspace, uint64_t workspace_size,
                                            kvsExecutor *executor) KVS_NOEXCEPT;

/* ---- PagedKvWrite (docs/operators/paged_kv_write.md) ------------------------------------- */

enum {
  KVS_PAGED_KV_WRITE_KEY_INDEX = 0,
  KVS_PAGED_KV_WRITE_VALUE_INDEX = 1,
  KVS_PAGED_KV_WRITE_KEY_CACHE_INDEX = 2,
  KVS_PAGED_KV_WRITE_VALUE_CACHE_INDEX = 3,
  KVS_PAGED_KV_WRITE_SLOT_MAPPING_INDEX = 4,
  KVS_PAGED_KV_WRITE_K_SCALE_INDEX = 5,
  KVS_PAGED_KV_WRITE_V_SCALE_INDEX = 6
};

/* key, value [T, H, D] float32/float16/bfloat16; key_cache, value_cache 4-D views with any
 * strides (unit stride on head_size), each addressed through its own strides; slot_mapping [N]
 * int32/int64 (negative: padding). format: "copy" (default) | "fp8_e4m3" | "fp8_e5m2".
 * layout: "NHD" (default, [blocks, block_size, H, D]) | "HND" ([blocks, H, block_size, D]).
 * k_scale, v_scale: float32 with 1 or H elements, NULL when absent (required by fp8). */
KVSCATTER_API kvsStatus kvsPagedKvWriteGetWorkspaceSize(
    const kvsTensor *key, const kvsTensor *value, kvsTensor *key_cache, kvsTensor *value_cache,
    const kvsTensor *slot_mapping, const kvsTensor *k_scale, const kvsTensor *v_scale,
    const char *format, const char *layout, uint64_t *workspace_size,
    kvsExecutor **executor) KVS_NOEXCEPT;

KVSCATTER_API kvsStatus kvsPagedKvWrite(void *workspace, uint64_t workspace_size,
                                        kvsExecutor *executor) KVS_NOEXCEPT;

/* ---- PagedCacheGather (docs/operators/paged_cache_gather.md) ----------------------------- */

enum {
  KVS_PAGED_CACHE_GATHER_SRC_CACHE_INDEX = 0,
  KVS_PAGED_CACHE_GATHER_DST_INDEX = 1,
  KVS_PAGED_CACHE_GATHER_BLOCK_TABLE_INDEX = 2,
  KVS_PAGED_CACHE_GATHER_CU_SEQ_LENS_INDEX = 3,
  KVS_PAGED_CACHE_GATHER_SCALE_INDEX = 4,
  KVS_PAGED_CACHE_GATHER_SEQ_STARTS_INDEX = 5,
  KVS_PAGED_CACHE_GATHER_TOKEN_TO_SEQ_INDEX = 6
};

/* src_cache [num_blocks, block_size, *entry]; dst [rows, *entry]; block_table [>= B, W];
 * cu_seq_lens [>= B + 1]; index tensors int32 or int64, one dtype. batch_size B: -1 means
 * len(cu_seq_lens) - 1. token_to_seq NULL: every row of [cu[0], cu[B]) is gathered; otherwise
 * rows t < num_tokens, row t from sequence token_to_seq[t]. seq_starts, scale: NULL when
 * absent. format: "copy" (default) | "fp8_e4m3" | "fp8_e5m2" (dequantize; scale required). */
KVSCATTER_API kvsStatus kvsPagedCacheGatherGetWorkspaceSize(
    const kvsTensor *src_cache, kvsTensor *dst, const kvsTensor *block_table,
    const kvsTensor *cu_seq_lens, const kvsTensor *scale, const kvsTensor *seq_starts,
    const kvsTensor *token_to_seq, int64_t batch_size, int64_t num_tokens, const char *format,
    uint64_t *workspace_size, kvsExecutor **executor) KVS_NOEXCEPT;

KVSCATTER_API kvsStatus kvsPagedCacheGather(void *workspace, uint64_t workspace_size,
                                            kvsExecutor *executor) KVS_NOEXCEPT;

/* ---- PagedLatentWrite (docs/operators/paged_latent_write.md) ----------------------------- */

enum {
  KVS_PAGED_LATENT_WRITE_KV_C_INDEX = 0,
  KVS_PAGED_LATENT_WRITE_K_PE_INDEX = 1,
  KVS_PAGED_LATENT_WRITE_KV_CACHE_INDEX = 2,
  KVS_PAGED_LATENT_WRITE_SLOT_MAPPING_INDEX = 3,
  KVS_PAGED_LATENT_WRITE_SCALE_INDEX = 4
};

/* kv_c [T, latent_dim], k_pe [T, pe_dim] float32/float16/bfloat16; kv_cache [num_blocks,
 * block_size, entry] with entry = latent_dim + pe_dim (656 bytes for fp8_ds_mla); slot_mapping
 * [N] int32/int64 (negative: padding). format: "copy" (default) | "fp8_e4m3" | "fp8_e5m2" |
 * "fp8_ds_mla". scale: float32 with 1 element, NULL when absent (required by fp8_e4m3/e5m2). */
KVSCATTER_API kvsStatus kvsPagedLatentWriteGetWorkspaceSize(
    const kvsTensor *kv_c, const kvsTensor *k_pe, kvsTensor *kv_cache,
    const kvsTensor *slot_mapping, const kvsTensor *scale, const char *format,
    uint64_t *workspace_size, kvsExecutor **executor) KVS_NOEXCEPT;

KVSCATTER_API kvsStatus kvsPagedLatentWrite(void *workspace, uint64_t workspace_size,
                                            kvsExecutor *executor) KVS_NOEXCEPT;

/* ---- KvCacheUpdate: contiguous cache update (docs/operators/kv_cache_update.md) ---------- */

enum {
  KVS_KV_CACHE_UPDATE_KEY_CACHE_INDEX = 0,
  KVS_KV_CACHE_UPDATE_VALUE_CACHE_INDEX = 1,
  KVS_KV_CACHE_UPDATE_NEW_KEYS_INDEX = 2,
  KVS_KV_CACHE_UPDATE_NEW_VALUES_INDEX = 3
};

/* Caches (B, S, H, D), new keys/values (B, L, H, D); requires 0 <= position <= S - L.
 * new_length (may be NULL) receives position + L. */
KVSCATTER_API kvsStatus kvsKvCacheUpdateGetWorkspaceSize(
    kvsTensor *key_cache, kvsTensor *value_cache, const kvsTensor *new_keys,
    const kvsTensor *new_values, int64_t position, int64_t *new_length, uint64_t *workspace_size,
    kvsExecutor **executor) KVS_NOEXCEPT;

KVSCATTER_API kvsStatus kvsKvCacheUpdate(void *workspace, uint64_t workspace_size,
                                         kvsExecutor *executor) KVS_NOEXCEPT;

/* ---- GatherPaKvCache ----------------------------------------------------------------------- */

enum {
  KVS_GATHER_PA_KV_CACHE_KEY_CACHE_INDEX = 0,
  KVS_GATHER_PA_KV_CACHE_VALUE_CACHE_INDEX = 1,
  KVS_GATHER_PA_KV_CACHE_BLOCK_TABLES_INDEX = 2,
  KVS_GATHER_PA_KV_CACHE_SEQ_LENS_INDEX = 3,
  KVS_GATHER_PA_KV_CACHE_KEY_INDEX = 4,
  KVS_GATHER_PA_KV_CACHE_VALUE_INDEX = 5,
  KVS_GATHER_PA_KV_CACHE_SEQ_OFFSET_INDEX = 6
};

/* Reads each sequence's tokens out of paged caches through its row of block_tables into
 * consecutive rows of key (and value), which are written in place; the caches are only read.
 * value_cache/value NULL together: key-only call. seq_offset: NULL when absent. cache_mode:
 * "Norm" (default) | "PA_NZ", exact case. is_seq_lens_cumsum: seq_lens holds batch + 1 prefix
 * sums starting at 0. Negative block ids are padding blocks (rows written as zero bytes). */
KVSCATTER_API kvsStatus kvsGatherPaKvCacheGetWorkspaceSize(
    const kvsTensor *key_cache, const kvsTensor *value_cache, const kvsTensor *block_tables,
    const kvsTensor *seq_lens, kvsTensor *key, kvsTensor *value, const kvsTensor *seq_offset,
    const char *cache_mode, bool is_seq_lens_cumsum, uint64_t *workspace_size,
    kvsExecutor **executor) KVS_NOEXCEPT;

KVSCATTER_API kvsStatus kvsGatherPaKvCache(void *workspace, uint64_t workspace_size,
                                           kvsExecutor *executor) KVS_NOEXCEPT;

/* ---- ScatterPaCache ------------------------------------------------------------------------- */

enum {
  KVS_SCATTER_PA_CACHE_KEY_INDEX = 0,
  KVS_SCATTER_PA_CACHE_KEY_CACHE_INDEX = 1,
  KVS_SCATTER_PA_CACHE_SLOT_MAPPING_INDEX = 2,
  KVS_SCATTER_PA_CACHE_COMPRESS_LENS_INDEX = 3,
  KVS_SCATTER_PA_CACHE_COMPRESS_SEQ_OFFSETS_INDEX = 4,
  KVS_SCATTER_PA_CACHE_SEQ_LENS_INDEX = 5
};

/* One tensor into one paged cache. 3-D key [T, heads, D] with slot_mapping [T] and no compress
 * tensors: a row copy (any of the twelve copy dtypes, or packed float4_e2m1 / float4_e1m2, whose
 * shapes count elements: D even). 4-D key [B, S, heads, D] into a [blocks, block_size, 1, D] cache
 * with slot_mapping [B, heads], compress_lens and seq_lens: tail keep, or ReduceMean when
 * compress_seq_offsets is given. Absent tensors are NULL. */
KVSCATTER_API kvsStatus kvsScatterPaCacheGetWorkspaceSize(
    const kvsTensor *key, kvsTensor *key_cache, const kvsTensor *slot_mapping,
    const kvsTensor *compress_lens, const kvsTensor *compress_seq_offsets,
    const kvsTensor *seq_lens, uint64_t *workspace_size, kvsExecutor **executor) KVS_NOEXCEPT;

KVSCATTER_API kvsStatus kvsScatterPaCache(void *workspace, uint64_t workspace_size,
                                          kvsExecutor *executor) KVS_NOEXCEPT;

/* ---- IndexerQuantCache ---------------------------------------------------------------------- */

enum {
  KVS_INDEXER_QUANT_CACHE_CACHE_INDEX = 0,
  KVS_INDEXER_QUANT_CACHE_CACHE_SCALE_INDEX = 1,
  KVS_INDEXER_QUANT_CACHE_X_INDEX = 2,
  KVS_INDEXER_QUANT_CACHE_SLOT_MAPPING_INDEX = 3
};

/* x [..., d] float16/bfloat16 quantized row by row into cache [blocks, block_size, 1, W] and
 * cache_scale [blocks, block_size, 1, Ws] at slot_mapping (x.shape[:-1]; -1 skips a row).
 * W >= d counts elements, also for a packed float4 cache (W even: d / 2 bytes are written).
 * quant_mode: "mxfp8" | "fp8" (default) | "hifloat8" | "mxfp4" (any case, blanks ignored) or
 * "0".."3". round_scale: fp8 mode only; x_scale: hifloat8 mode only. */
KVSCATTER_API kvsStatus kvsIndexerQuantCacheGetWorkspaceSize(
    kvsTensor *cache, kvsTensor *cache_scale, const kvsTensor *x, const kvsTensor *slot_mapping,
    const char *quant_mode, bool round_scale, float x_scale, uint64_t *workspace_size,
    kvsExecutor **executor) KVS_NOEXCEPT;

KVSCATTER_API kvsStatus kvsIndexerQuantCache(void *workspace, uint64_t workspace_size,
                                             kvsExecutor *executor) KVS_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVSCATTER_KVSCATTER_H_ */
