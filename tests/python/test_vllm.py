"""kvscatter.vllm: the worked examples byte for byte, the rejections (message, caches untouched),
and a port of the reference logic of vLLM's cache tests (their parameter grids, NHD and HND
caches allocated as vLLM allocates them, per-tensor and per-head scales), checked exactly."""

import itertools

import ml_dtypes
import numpy as np
import pytest

import kvscatter
from kvscatter import vllm

BF16 = ml_dtypes.bfloat16


def fp8_codes(x, scale, fmt):
    """Saturating fp8 codes of float32(x) / scale, the CUDA conversion vLLM ships."""
    q = np.asarray(x, dtype=np.float32) / np.asarray(scale, dtype=np.float32)
    big, dt = (448.0, ml_dtypes.float8_e4m3fn) if fmt == "e4m3" else (57344.0, ml_dtypes.float8_e5m2)
    with np.errstate(invalid="ignore"):
        codes = np.clip(q, -big, big).astype(dt).view(np.uint8)
    return np.where(np.isnan(q), np.uint8(0x7F), codes)


# ---- worked examples -------------------------------------------------------------------------


def test_e1_auto_float16_short_slot_mapping():
    key = np.array([[[1, 2]], [[3, 4]], [[5, 6]]], np.float16)
    value = np.array([[[10, 20]], [[30, 40]], [[50, 60]]], np.float16)
    kc = np.zeros((2, 4, 1, 2), np.float16)
    vc = np.zeros_like(kc)
    one = np.array(1.0, np.float32)
    vllm.reshape_and_cache_flash(key, value, kc, vc, np.array([5, -1], np.int64), "auto", one, one)
    assert kc.view(np.uint16).ravel()[10:12].tolist() == [0x3C00, 0x4000]
    assert vc.view(np.uint16).ravel()[10:12].tolist() == [0x4900, 0x4D00]
    assert np.count_nonzero(kc.view(np.uint16)) == 2 and np.count_nonzero(vc.view(np.uint16)) == 2


def test_e2_fp8_bfloat16_per_tensor():
    key = np.array([1.0, -3.3, 300, 0.002, np.nan, -0.0, -np.inf, 8.5], BF16).reshape(1, 1, 8)
    value = np.array([448, 464, 480, 2**-10, -(2**-9), 3, 2**-20, 96], BF16).reshape(1, 1, 8)
    kc = np.zeros((2, 2, 1, 8), np.uint8)
    vc = np.zeros_like(kc)
    vllm.reshape_and_cache_flash(
        key, value, kc, vc, np.array([2], np.int32), "fp8",
        np.array([0.5], np.float32), np.array([2.0], np.float32),
    )
    assert kc.ravel()[16:24].tolist() == [0x40, 0xCD, 0x7E, 0x02, 0x7F, 0x80, 0xFE, 0x58]
    assert vc.ravel()[16:24].tolist() == [0x76, 0x76, 0x77, 0x00, 0x80, 0x3C, 0x00, 0x64]
    for c in (kc, vc):
        assert not c.ravel()[:16].any() and not c.ravel()[24:].any()


def test_e3_fp8_e5m2_float16_per_head_hnd():
    alloc = np.zeros(16, np.uint8)
    kv = alloc.reshape(1, 2, 2, 2, 2).transpose(0, 1, 3, 2, 4)  # [nb, 2, H, bs, D] seen as NHD
    key = np.array([[[1.0, 60000], [0.1, -3.0]]], np.float16)
    value = np.array([[[5.0, -0.0], [1000, 2**-24]]], np.float16)
    vllm.reshape_and_cache_flash(
        key, value, kv[:, 0], kv[:, 1], np.array([1]), "fp8_e5m2",
        np.array([1.0, 0.25], np.float32), np.array([2.0, 4.0], np.float32),
    )
    assert alloc.tolist() == [0, 0, 0x3C, 0x7B, 0, 0, 0x36, 0xCA, 0, 0, 0x41, 0x80, 0, 0, 0x5C, 0]


# ---- rejections ------------------------------------------------------------------------------


def flash_args(dtype=np.float32, cache_dtype=None, n=6, h=2, d=4, nb=3, bs=4):
    key = np.ones((6, h, d), dtype)
    cache_dtype = cache_dtype or dtype
    kc = np.full((nb, bs, h, d), 7, cache_dtype)
    vc = np.full((nb, bs, h, d), 7, cache_dtype)
    one = np.array([1.0], np.float32)
    return dict(key=key, value=key.copy(), key_cache=kc, value_cache=vc,
                slot_mapping=np.arange(n, dtype=np.int64), kv_cache_dtype="auto",
                k_scale=one, v_scale=one.copy())


REJECTIONS = [
    (dict(kv_cache_dtype="fp8_inc"), ValueError,
     "kv_cache_dtype 'fp8_inc' is not supported by reshape_and_cache_flash (expected one of "
     "'auto', 'float16', 'bfloat16', 'fp8', 'fp8_e4m3', 'fp8_e5m2')"),
    (dict(kv_cache_dtype="fp8_ds_mla"), ValueError, "not supported by reshape_and_cache_flash"),
    (dict(kv_cache_dtype="FP8"), ValueError, "kv_cache_dtype 'FP8' is not supported"),
    (dict(kv_cache_dtype=None), TypeError, "kv_cache_dtype must be a str"),
    (dict(kv_cache_dtype="float16"), ValueError,
     "key dtype float32 does not match kv_cache_dtype 'float16'"),
    (dict(value=np.ones((6, 2, 5), np.float32)), ValueError,
     "value shape [6, 2, 5] must be [num_tokens, 2, 4] like key"),
    (dict(key_cache=np.zeros((3, 4, 3, 4), np.float32)), ValueError,
     "key_cache shape [3, 4, 3, 4] must be [num_blocks, block_size, 2, 4]"),
    (dict(kv_cache_dtype="fp8"), ValueError,
     "key_cache dtype float32 cannot hold the codes of format 'fp8_e4m3' (expected uint8 or "
     "float8_e4m3fn)"),
    (dict(slot_mapping=np.arange(7)), ValueError, "slot_mapping has 7 entries but key has only 6 rows"),
    (dict(k_scale=np.ones(3, np.float32), v_scale=np.ones(3, np.float32)), ValueError,
     "k_scale has 3 elements; expected 1 or 2"),
    (dict(k_scale=np.ones(2, np.float32)), ValueError, "v_scale shape [1] must equal k_scale shape [2]"),
    (dict(k_scale=np.ones(1, np.int32)), ValueError, "k_scale must be float32, got int32"),
    (dict(k_scale=np.ones(1, np.float64)), TypeError, "k_scale: unsupported element type float64"),
    (dict(slot_mapping=np.array([0, 1, 2, 12, 4, 5])), ValueError,
     "slot_mapping[3] = 12 is out of range [0, 12) (key_cache has 3 blocks of 4 slots)"),
    (dict(slot_mapping=np.arange(6, dtype=np.int16)), ValueError, "slot_mapping dtype must be one of"),
    (dict(k_scale=None), TypeError, "k_scale is required, got None"),
    (dict(key=None), TypeError, "key is required, got None"),
]


@pytest.mark.parametrize("change,exc,message", REJECTIONS)
def test_reshape_and_cache_flash_rejections(change, exc, message):
    args = flash_args()
    args.update(change)
    kc0, vc0 = args["key_cache"].copy(), args["value_cache"].copy()
    with pytest.raises(exc) as info:
        vllm.reshape_and_cache_flash(**args)
    assert message in str(info.value)
    assert np.array_equal(args["key_cache"], kc0) and np.array_equal(args["value_cache"], vc0)


def test_overlapping_caches_rejected():
    args = flash_args()
    args["value_cache"] = args["key_cache"]
    before = args["key_cache"].copy()
    with pytest.raises(ValueError, match="key_cache and value_cache overlap"):
        vllm.reshape_and_cache_flash(**args)
    assert np.array_equal(args["key_cache"], before)


def test_empty_slot_mapping_is_a_no_op():
    args = flash_args(n=0)
    before = args["key_cache"].copy()
    vllm.reshape_and_cache_flash(**args)
    assert np.array_equal(args["key_cache"], before)


def test_float8_typed_cache_and_keywords():
    args = flash_args(cache_dtype=ml_dtypes.float8_e5m2)
    args["kv_cache_dtype"] = "fp8_e5m2"
    vllm.reshape_and_cache_flash(**args)
    assert args["key_cache"].view(np.uint8)[0, 0].ravel().tolist() == [0x3C] * 8


# ---- port of vLLM's reshape_and_cache_flash test ---------------------------------------------
# vLLM's grid: dtypes half/bfloat16/float, 42 tokens, 8 heads, head sizes 64/80/120/256, block
# sizes 8/16/32, "auto" and "fp8" caches, NHD and HND layouts. Its num_blocks values (1024,
# 10000) are lowered to 64 to bound memory on a shared CPU; the slot sampling covers them the
# same way. vLLM compares dequantized fp8 caches with a tolerance; this port compares codes
# exactly against the saturating conversion and also runs vLLM's tolerance check.

DTYPES = [np.float16, BF16, np.float32]
HEAD_SIZES = [64, 80, 120, 256]
BLOCK_SIZES = [8, 16, 32]
CACHE_DTYPES = ["auto", "fp8", "fp8_e5m2"]
LAYOUTS = ["NHD", "HND"]
SCALES = ["per_tensor", "per_head"]


def create_kv_caches_flash(rng, num_blocks, block_size, num_heads, head_size, cache_dtype,
                           dtype, layout):
    """Like vLLM's create_kv_caches_with_random_flash: one [num_blocks, 2, ...] allocation,
    permuted to NHD order for HND, with K = kv[:, 0] and V = kv[:, 1]."""
    if layout == "NHD":
        shape, order = (num_blocks, 2, block_size, num_heads, head_size), (0, 1, 2, 3, 4)
    else:
        shape, order = (num_blocks, 2, num_heads, block_size, head_size), (0, 1, 3, 2, 4)
    if cache_dtype == "auto":
        kv = rng.uniform(-1, 1, shape).astype(dtype)
    else:
        kv = rng.integers(0, 256, shape, dtype=np.uint8)
    kv = kv.transpose(order)
    return kv[:, 0], kv[:, 1]


def dequant(codes, scale, fmt):
    dt = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
    return codes.view(dt).astype(np.float32) * scale


@pytest.mark.parametrize(
    "dtype,head_size,block_size,kv_cache_dtype,layout,scales",
    list(itertools.product(DTYPES, HEAD_SIZES, BLOCK_SIZES, CACHE_DTYPES, LAYOUTS, SCALES)),
)
def test_reshape_and_cache_flash_vllm_grid(rng, dtype, head_size, block_size, kv_cache_dtype,
                                           layout, scales):
    num_tokens, num_heads, num_blocks = 42, 8, 64
    num_slots = block_size * num_blocks
    slot_mapping = rng.choice(num_slots, num_tokens, replace=False).astype(np.int64)
    qkv = rng.standard_normal((num_tokens, 3, num_heads, head_size)).astype(dtype)
    _, key, value = qkv[:, 0], qkv[:, 1], qkv[:, 2]  # token-strided views, as vLLM passes them
    key_cache, value_cache = create_kv_caches_flash(
        rng, num_blocks, block_size, num_heads, head_size, kv_cache_dtype, dtype, layout)
    if scales == "per_tensor":
        k_scale = np.array([np.abs(key.astype(np.float32)).max() / 64.0], np.float32)
        v_scale = np.array([np.abs(value.astype(np.float32)).max() / 64.0], np.float32)
    else:
        k_scale = (np.abs(key.astype(np.float32)).max(axis=(0, 2)) / 64.0).astype(np.float32)
        v_scale = (np.abs(value.astype(np.float32)).max(axis=(0, 2)) / 64.0).astype(np.float32)

    expected_k, expected_v = key_cache.copy(), value_cache.copy()
    fmt = "e5m2" if kv_cache_dtype == "fp8_e5m2" else "e4m3"
    ks = np.broadcast_to(k_scale, (num_heads,))[:, None]
    vs = np.broadcast_to(v_scale, (num_heads,))[:, None]
    for i, slot in enumerate(slot_mapping):
        blk, off = divmod(int(slot), block_size)
        if kv_cache_dtype == "auto":
            expected_k[blk, off] = key[i]
            expected_v[blk, off] = value[i]
        else:
            expected_k[blk, off] = fp8_codes(key[i].astype(np.float32), ks, fmt)
            expected_v[blk, off] = fp8_codes(value[i].astype(np.float32), vs, fmt)
    alloc_before = key_cache.base.copy() if key_cache.base is not None else None

    vllm.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping,
                                 kv_cache_dtype, k_scale, v_scale)

    assert np.array_equal(key_cache.view(np.uint8), expected_k.view(np.uint8))
    assert np.array_equal(value_cache.view(np.uint8), expected_v.view(np.uint8))
    assert alloc_before is not None
    if kv_cache_dtype != "auto":
        # vLLM's own check: the dequantized cache matches the inputs within its tolerance.
        blk, off = np.divmod(slot_mapping, block_size)
        got = dequant(np.ascontiguousarray(key_cache[blk, off]), ks[None], fmt)
        tol = dict(atol=0.001, rtol=0.1) if fmt == "e4m3" else dict(atol=0.001, rtol=0.25)
        np.testing.assert_allclose(got, key.astype(np.float32), **tol)


def test_threads_do_not_change_the_result(rng):
    key = rng.standard_normal((5000, 4, 32)).astype(np.float32)
    slots = rng.integers(-10, 64 * 16, 5000)
    k_scale = np.array([0.05, 1, 2, 3], np.float32)
    results = []
    for threads in (1, 3):
        kvscatter.set_num_threads(threads)
        kc = np.zeros((64, 16, 4, 32), np.uint8)
        vc = np.zeros_like(kc)
        vllm.reshape_and_cache_flash(key, key, kc, vc, slots, "fp8", k_scale, k_scale)
        results.append(kc)
    kvscatter.set_num_threads(0)
    assert np.array_equal(results[0], results[1])
