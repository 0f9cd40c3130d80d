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
    (dict(k_scale=np.ones(1, np.float64)), ValueError, "k_scale must be float32, got float64"),
    (dict(slot_mapping=np.array([0, 1, 2, 12, 4, 5])), ValueError,
     "slot_mapping[3] = 12 is out of range [0, 12) (key_cache has 3 blocks of 4 slots; negative slots mark padding)"),
    (dict(slot_mapping=np.arange(6, dtype=np.int16)), ValueError, "slot_mapping dtype must be one of"),
    (dict(k_scale=None), TypeError, "k_scale is required, got None"),
    (dict(key=None), TypeError, "key is required, got None"),
    (dict(slot_mapping=None), TypeError, "slot_mapping is required, got None"),
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
    with pytest.raises(ValueError, match="share memory; outputs of one call must not overlap"):
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


# ---- gathers: worked examples ----------------------------------------------------------------


def test_e6_gather_fp8_to_bfloat16_with_seq_starts():
    src = np.array([[[0x38, 0xB8], [0x40, 0x7F]], [[0x01, 0x7E], [0x00, 0x80]],
                    [[0x44, 0x3C], [0xC4, 0x30]]], np.uint8)
    dst = np.full((5, 2), 0x1234, np.uint16).view(BF16)
    vllm.gather_and_maybe_dequant_cache(
        src, dst, np.array([[2, 0, -1], [1, 1, 9]], np.int32), np.array([0, 3, 4], np.int32),
        np.array([0, 0, 0, 1, 0], np.int32), 4, "fp8", np.array([0.5], np.float32),
        seq_starts=np.array([1, 2], np.int32))
    assert dst.view(np.uint16).tolist() == [[0xBFC0, 0x3E80], [0x3F00, 0xBF00], [0x3F80, 0x7FFF],
                                            [0x3A80, 0x4360], [0x1234, 0x1234]]


def test_e7_gather_auto_float16_skipped_rows():
    src = np.array([[[1], [2]], [[3], [4]]], np.float16)
    dst = np.full((5, 1), 0xAAAA, np.uint16).view(np.float16)
    vllm.gather_and_maybe_dequant_cache(src, dst, np.array([[1], [0]]), np.array([0, 2, 3]),
                                        np.array([0, 0, 1, 0, 0]), 5, "auto",
                                        np.array([1.0], np.float32))
    assert dst.view(np.uint16).ravel().tolist() == [0x4200, 0x4400, 0x3C00, 0xAAAA, 0xAAAA]


def test_e8_cp_gather_uint8_unaligned_seq_starts():
    src = np.array([[[16 * b + 3 * r + i for i in range(3)] for r in range(4)] for b in range(2)],
                   np.uint8)
    dst = np.full((6, 3), 0xEE, np.uint8)
    vllm.cp_gather_cache(src, dst, np.array([[1, 0], [0, 1]]), np.array([0, 3, 5]), 2,
                         seq_starts=np.array([2, 3]))
    assert dst.ravel().tolist() == [0x16, 0x17, 0x18, 0x19, 0x1A, 0x1B, 0x00, 0x01, 0x02, 0x09,
                                    0x0A, 0x0B, 0x10, 0x11, 0x12, 0xEE, 0xEE, 0xEE]


def test_e9_cp_gather_float32_empty_sequence():
    src = np.array([[[0], [1]], [[10], [11]], [[20], [21]]], np.float32)
    dst = np.full((5, 1), -1.0, np.float32)
    vllm.cp_gather_cache(src, dst, np.array([[7, 7], [2, 0], [1, 5]]), np.array([1, 1, 3, 4]), 3)
    assert dst.view(np.uint32).ravel().tolist() == [0xBF800000, 0x41A00000, 0x41A80000,
                                                    0x41200000, 0xBF800000]


# ---- gathers: rejections ---------------------------------------------------------------------


def gather_args():
    return dict(src_cache=np.ones((5, 4, 4), np.float16), dst=np.full((14, 4), 3, np.float16),
                block_table=np.array([[0, 1, 2], [3, 4, 0]]), cu_seq_lens=np.array([0, 3, 6]),
                token_to_seq=np.array([0, 0, 0, 1, 1, 1]), num_tokens=6, kv_cache_dtype="auto",
                scale=np.array([1.0], np.float32))


GATHER_REJECTIONS = [
    (dict(kv_cache_dtype="fp8_ds_mla"), ValueError,
     "kv_cache_dtype 'fp8_ds_mla' is not supported by gather_and_maybe_dequant_cache"),
    (dict(dst=np.zeros((14, 5), np.float16)), ValueError,
     "dst shape [14, 5] must be [rows, 4] (the entry shape of src_cache [5, 4, 4])"),
    (dict(dst=np.zeros((14, 4), np.float32)), ValueError,
     "dst dtype float32 does not match src_cache dtype float16 (kv_cache_dtype 'auto' stores the "
     "input type)"),
    (dict(src_cache=np.ones((5, 4, 4), np.uint8), dst=np.zeros((14, 4), np.uint8)), ValueError,
     "dst dtype uint8 is not a float type"),
    (dict(kv_cache_dtype="bfloat16"), ValueError,
     "dst dtype float16 does not match kv_cache_dtype 'bfloat16'"),
    (dict(kv_cache_dtype="fp8"), ValueError, "src_cache dtype float16 cannot hold the codes"),
    (dict(cu_seq_lens=np.array([0, 3, 6], np.int32)), ValueError,
     "cu_seq_lens dtype int32 differs from block_table dtype int64 (index tensors share one "
     "dtype)"),
    (dict(num_tokens=15, token_to_seq=np.zeros(15, np.int64)), ValueError,
     "num_tokens = 15 exceeds dst rows 14"),
    (dict(num_tokens=True), TypeError, "num_tokens must be an int"),
    (dict(num_tokens=6.0), TypeError, "num_tokens must be an int"),
    (dict(scale=np.ones(1, np.float64)), ValueError, "scale must be float32, got float64"),
    (dict(src_cache=None), TypeError, "src_cache is required, got None"),
    (dict(num_tokens=2**63), ValueError, "num_tokens = 9223372036854775808 is outside the int64 "
     "range"),
    (dict(num_tokens=np.array(True)), TypeError, "num_tokens must be an int"),
    (dict(scale=np.ones(2, np.float32)), ValueError, "scale has 2 elements; expected 1"),
    (dict(cu_seq_lens=np.array([0, 3, 2])), ValueError,
     "cu_seq_lens must be non-decreasing: cu_seq_lens[2] = 2 < cu_seq_lens[1] = 3"),
    (dict(seq_starts=np.array([0, -2])), ValueError, "seq_starts[1] = -2 is negative"),
    (dict(seq_starts=np.array([0])), ValueError, "seq_starts has 1 entries; needs at least 2"),
    (dict(token_to_seq=np.array([0, 1, 0, 1, 1, 1])), ValueError,
     "token_to_seq[1] = 1 but cu_seq_lens[1] = 3 > 1 (token precedes its sequence)"),
    (dict(token_to_seq=np.array([0, 0, 0, 2, 1, 1])), ValueError,
     "token_to_seq[3] = 2 is out of range [0, 2)"),
    (dict(block_table=np.array([[0, 1, 2], [5, 4, 0]])), ValueError,
     "block_table[1, 0] = 5 is out of range [0, 5) (src_cache has 5 blocks)"),
    (dict(seq_starts=np.array([0, 10])), ValueError,
     "block_table has 3 columns but sequence 1 needs column 3 (position 12 with block_size 4)"),
    (dict(token_to_seq=None), TypeError, "token_to_seq is required, got None"),
    (dict(src_cache=None), TypeError, "src_cache is required, got None"),
]


@pytest.mark.parametrize("change,exc,message", GATHER_REJECTIONS)
def test_gather_and_maybe_dequant_cache_rejections(change, exc, message):
    args = gather_args()
    args.update(change)
    before = args["dst"].copy()
    with pytest.raises(exc) as info:
        vllm.gather_and_maybe_dequant_cache(**args)
    assert message in str(info.value)
    assert np.array_equal(args["dst"].view(np.uint8), before.view(np.uint8))


CP_REJECTIONS = [
    (dict(dst=np.zeros((14, 4), np.float32)), "dst dtype float32 differs from src_cache dtype float16"),
    (dict(batch_size=4), "cu_seq_lens has 3 entries; batch_size = 4 needs 5"),
    (dict(block_table=np.array([[0, 1, 2]], np.int16)), "block_table dtype must be one of"),
    (dict(cu_seq_lens=np.array([0, 3, 25])), "cu_seq_lens[2] = 25 exceeds dst rows 14"),
    (dict(seq_starts=np.array([0])), "seq_starts has 1 entries; needs at least 2"),
    (dict(block_table=np.array([[0], [1]]), cu_seq_lens=np.array([0, 5, 8])),
     "block_table has 1 columns but sequence 0 needs column 1 (position 4 with block_size 4)"),
    (dict(src_cache=np.ones((5, 4, 4), np.int64), dst=np.zeros((14, 4), np.int64)),
     "copies move elements of 1, 2 or 4 bytes"),
]


@pytest.mark.parametrize("change,message", CP_REJECTIONS)
def test_cp_gather_cache_rejections(change, message):
    args = gather_args()
    for k in ("token_to_seq", "num_tokens", "kv_cache_dtype", "scale"):
        del args[k]
    args["batch_size"] = 2
    args.update(change)
    before = args["dst"].copy()
    with pytest.raises(ValueError) as info:
        vllm.cp_gather_cache(**args)
    assert message in str(info.value)
    assert np.array_equal(args["dst"].view(np.uint8), before.view(np.uint8))


def test_cp_gather_cache_batch_size_type():
    args = gather_args()
    with pytest.raises(TypeError, match="batch_size must be an int"):
        vllm.cp_gather_cache(args["src_cache"], args["dst"], args["block_table"],
                             args["cu_seq_lens"], True)
    with pytest.raises(ValueError, match="batch_size = -18446744073709551616 is outside"):
        vllm.cp_gather_cache(args["src_cache"], args["dst"], args["block_table"],
                             args["cu_seq_lens"], -(2**64))
    vllm.cp_gather_cache(args["src_cache"], args["dst"], args["block_table"],
                         args["cu_seq_lens"], np.int64(0))  # empty: a no-op


@pytest.mark.parametrize("dtype", [bool, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float4_e2m1fn])
def test_cp_gather_cache_copies_any_one_byte_type(rng, dtype):
    # Types the library has no name for travel as the unsigned integers of their width.
    raw = rng.integers(0, 2 if dtype is bool else 16, (3, 4, 5), dtype=np.uint8)
    src = raw.view(dtype)
    dst = np.zeros((6, 5), dtype)
    vllm.cp_gather_cache(src, dst, np.array([[2, 0]]), np.array([0, 6]), 1,
                         seq_starts=np.array([1]))
    want = np.concatenate([raw[2, 1:], raw[0, :3]])
    assert np.array_equal(dst.view(np.uint8), want)
    other = np.zeros((6, 5), np.uint8)
    with pytest.raises(ValueError, match=f"dst dtype uint8 differs from src_cache dtype "
                                         f"{np.dtype(dtype).name}"):
        vllm.cp_gather_cache(src, other, np.array([[2, 0]]), np.array([0, 6]), 1)
    assert not other.any()


# ---- port of vLLM's gather tests (test_gather_and_maybe_dequant_cache_mla, test_cp_gather_cache_mla)
# Their grid: kv_lora_rank 512 + rope 64 (576-wide entries), block sizes 16 and 64, batch of 8
# sequences up to 512 tokens, "auto" and "fp8" caches; num_blocks lowered to what the sequences
# need. Expected rows are computed the way vLLM's reference does (block-table lookups, then
# dequantization), compared byte for byte (NaN codes as canonical NaNs).


def dequant_ref(codes, scale, dtype, fmt="e4m3"):
    dt = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
    p = codes.view(dt).astype(np.float32) * np.float32(scale)
    out = p.astype(dtype)
    bits = {np.float32: np.uint32, np.float16: np.uint16, BF16: np.uint16}[dtype]
    nan = {np.float32: 0x7FFFFFFF, np.float16: 0x7FFF, BF16: 0x7FFF}[dtype]
    return np.where(np.isnan(p), bits(nan), out.view(bits)).astype(bits)


def make_mla_gather(rng, block_size, batch, max_len, cache_dtype, dtype, starts):
    entry = 512 + 64
    lens = rng.integers(1, max_len + 1, batch)
    seq_starts = rng.integers(0, 2 * block_size, batch) if starts else np.zeros(batch, np.int64)
    per_seq = (lens + seq_starts + block_size - 1) // block_size
    num_blocks = int(per_seq.sum()) + 4
    perm = rng.permutation(num_blocks)
    block_table = np.full((batch, int(per_seq.max()) + 1), -1, np.int32)
    k = 0
    for b in range(batch):
        block_table[b, : per_seq[b]] = perm[k : k + per_seq[b]]
        k += per_seq[b]
    if cache_dtype == "auto":
        src = rng.standard_normal((num_blocks, block_size, entry)).astype(dtype)
    else:
        src = rng.integers(0, 256, (num_blocks, block_size, entry), dtype=np.uint8)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return src, block_table, cu, seq_starts.astype(np.int32), lens


@pytest.mark.parametrize(
    "block_size,kv_cache_dtype,dtype,starts",
    list(itertools.product([16, 64], ["auto", "fp8", "fp8_e5m2"], [np.float32, np.float16, BF16],
                           [False, True])),
)
def test_gather_and_maybe_dequant_cache_vllm_grid(rng, block_size, kv_cache_dtype, dtype, starts):
    batch, max_len = 8, 512
    src, block_table, cu, seq_starts, lens = make_mla_gather(
        rng, block_size, batch, max_len, kv_cache_dtype, dtype, starts)
    total = int(cu[-1])
    token_to_seq = np.repeat(np.arange(batch, dtype=np.int32), lens)
    scale = np.array([0.25 + rng.random()], np.float32)
    pad = 7  # vLLM pads token_to_seq with zeros; the padded rows are skipped
    token_to_seq = np.concatenate([token_to_seq, np.zeros(pad, np.int32)])
    dst = np.zeros((total + pad, 576), dtype)
    dst.view(np.uint8)[:] = 0xA5
    before = dst.copy()
    vllm.gather_and_maybe_dequant_cache(src, dst, block_table, cu, token_to_seq, total + pad,
                                        kv_cache_dtype, scale,
                                        seq_starts=seq_starts if starts else None)
    bits = np.uint32 if dtype == np.float32 else np.uint16
    for b in range(batch):
        pos = np.arange(lens[b]) + seq_starts[b]
        blocks = block_table[b, pos // block_size]
        rows = src[blocks, pos % block_size]
        got = dst[cu[b] : cu[b + 1]].view(bits)
        if kv_cache_dtype == "auto":
            assert np.array_equal(got, rows.view(bits))
        else:
            fmt = "e5m2" if kv_cache_dtype == "fp8_e5m2" else "e4m3"
            assert np.array_equal(got, dequant_ref(rows, scale[0], dtype, fmt))
    assert np.array_equal(dst[total:].view(bits), before[total:].view(bits))


@pytest.mark.parametrize(
    "block_size,kv_cache_dtype,starts",
    list(itertools.product([16, 64], ["auto", "fp8"], [False, True])),
)
def test_cp_gather_cache_vllm_grid(rng, block_size, kv_cache_dtype, starts):
    batch, max_len = 8, 512
    src, block_table, cu, seq_starts, lens = make_mla_gather(
        rng, block_size, batch, max_len, kv_cache_dtype, np.float32, starts)
    dst = np.full((int(cu[-1]) + 3,) + src.shape[2:], 0x5A, src.dtype) if src.dtype == np.uint8 \
        else np.full((int(cu[-1]) + 3,) + src.shape[2:], -7.0, src.dtype)
    before = dst.copy()
    vllm.cp_gather_cache(src, dst, block_table, cu, batch,
                         seq_starts=seq_starts if starts else None)
    for b in range(batch):
        pos = np.arange(lens[b]) + seq_starts[b]
        expected = src[block_table[b, pos // block_size], pos % block_size]
        assert np.array_equal(dst[cu[b] : cu[b + 1]].view(np.uint8), expected.view(np.uint8))
    assert np.array_equal(dst[cu[-1] :], before[cu[-1] :])


def test_gather_from_torch_like_strided_views(rng):
    # A cache with padded slots (entry stride > entry) and a dst with padded rows.
    big = rng.integers(0, 256, (4, 8, 40), dtype=np.uint8)
    src = big[:, :, :32]
    out = np.zeros((10, 48), np.float32)
    dst = out[:, :32]
    vllm.gather_and_maybe_dequant_cache(src, dst, np.array([[3, 1]]), np.array([0, 10]),
                                        np.zeros(10, np.int64), 10, "fp8_e5m2",
                                        np.array([2.0], np.float32))
    pos = np.arange(10)
    rows = src[np.array([3, 1])[pos // 8], pos % 8]
    assert np.array_equal(dst.view(np.uint32), dequant_ref(np.ascontiguousarray(rows), 2.0,
                                                           np.float32, "e5m2"))
    assert not out[:, 32:].any()


# ---- concat_and_cache_mla --------------------------------------------------------------------


def test_e4_mla_fp8_bfloat16():
    kv_c = np.array([[1, 2, 3, 4], [10, 0.3, -500, 2**-12]], BF16)
    k_pe = np.array([[0.5, -1], [0.0625, 7]], BF16)
    cache = np.zeros((1, 2, 6), np.uint8)
    vllm.concat_and_cache_mla(kv_c, k_pe, cache, np.array([-1, 1]), "fp8",
                              np.array([2.0], np.float32))
    assert cache.ravel().tolist() == [0] * 6 + [0x4A, 0x22, 0xF8, 0x00, 0x10, 0x46]


def test_e5_mla_fp8_ds_mla():
    kv_c = np.zeros((1, 512), BF16)
    kv_c[0, :4] = [7, 1, -0.5, 7 / 128]
    kv_c[0, 256] = 1
    kv_c[0, 384:387] = [np.inf, 3, np.nan]
    k_pe = np.zeros((1, 64), BF16)
    k_pe[0, :2] = [1.0, -2.0]
    cache = np.zeros((1, 1, 656), np.uint8)
    vllm.concat_and_cache_mla(kv_c, k_pe, cache, np.array([0]), "fp8_ds_mla",
                              np.array([1.0], np.float32))
    e = cache.ravel()
    assert e[:4].tolist() == [0x7E, 0x68, 0xE0, 0x46] and e[256] == 0x7E
    assert e[384:387].tolist() == [0x7F, 0x00, 0x7F]
    assert np.count_nonzero(e[:512]) == 7
    assert e[512:528].tolist() == [0, 0, 0x80, 0x3C, 0, 0, 0x80, 0, 0x25, 0x49, 0x12, 0x3B,
                                   0, 0, 0x80, 0x7F]
    assert e[528:532].tolist() == [0x80, 0x3F, 0x00, 0xC0] and not e[532:].any()


def mla_args():
    return dict(kv_c=np.ones((5, 16), BF16), k_pe=np.ones((5, 8), BF16),
                kv_cache=np.full((3, 4, 24), 2, BF16), slot_mapping=np.arange(5),
                kv_cache_dtype="auto", scale=np.array([1.0], np.float32))


MLA_REJECTIONS = [
    (dict(kv_cache_dtype="FP8_DS_MLA"), ValueError,
     "kv_cache_dtype 'FP8_DS_MLA' is not supported by concat_and_cache_mla"),
    (dict(k_pe=np.ones((5, 8), np.float16)), ValueError,
     "k_pe dtype float16 differs from kv_c dtype bfloat16"),
    (dict(kv_cache=np.zeros((3, 4, 1, 24), BF16)), ValueError,
     "kv_cache must be 3-D [num_blocks, block_size, entry], got 4-D [3, 4, 1, 24]"),
    (dict(kv_cache=np.zeros((3, 4, 25), BF16)), ValueError,
     "kv_cache.shape[2] = 25 must equal kv_lora_rank + pe_dim = 24"),
    (dict(k_pe=np.ones((5, 1, 8), BF16)), ValueError, "k_pe must be 2-D [num_tokens, pe_dim]"),
    (dict(kv_cache_dtype="fp8_ds_mla", kv_cache=np.zeros((3, 4, 576), np.uint8),
          kv_c=np.ones((5, 512), BF16), k_pe=np.ones((5, 64), BF16)), ValueError,
     "kv_cache.shape[2] must be 656 bytes for fp8_ds_mla, got 576"),
    (dict(kv_cache_dtype="fp8_ds_mla", kv_cache=np.zeros((3, 4, 656), np.uint8)), ValueError,
     "fp8_ds_mla needs kv_lora_rank = 512 and pe_dim = 64, got 16 and 8"),
    (dict(slot_mapping=np.arange(6)), ValueError, "slot_mapping has 6 entries but kv_c has only 5 rows"),
    (dict(scale=np.ones(2, np.float32)), ValueError, "scale has 2 elements; expected 1"),
    (dict(slot_mapping=np.array([0, 1, 2**33, 3, 4])), ValueError,
     "slot_mapping[2] = 8589934592 is out of range [0, 12) (kv_cache has 3 blocks of 4 slots; negative slots mark padding)"),
    (dict(kv_cache_dtype="fp8"), ValueError, "kv_cache dtype bfloat16 cannot hold the codes"),
    (dict(kv_cache_dtype="float16"), ValueError, "kv_c dtype bfloat16 does not match kv_cache_dtype 'float16'"),
    (dict(scale=None), TypeError, "scale is required, got None"),
    (dict(kv_cache_dtype=3), TypeError, "kv_cache_dtype must be a str"),
]


@pytest.mark.parametrize("change,exc,message", MLA_REJECTIONS)
def test_concat_and_cache_mla_rejections(change, exc, message):
    args = mla_args()
    args.update(change)
    before = args["kv_cache"].copy()
    with pytest.raises(exc) as info:
        vllm.concat_and_cache_mla(**args)
    assert message in str(info.value)
    assert np.array_equal(args["kv_cache"].view(np.uint8), before.view(np.uint8))


# Port of vLLM's test_concat_and_cache_mla / test_concat_and_cache_ds_mla: kv_lora_rank 512,
# rope dim 64, 42 tokens, block sizes 16 and 64, 8 blocks; kv_c and k_pe are column slices of
# one projection output as in the model (token-strided); the reference builds each row the way
# vLLM's test does and compares bytes exactly.


@pytest.mark.parametrize(
    "dtype,block_size,kv_cache_dtype",
    list(itertools.product([np.float16, BF16, np.float32], [16, 64],
                           ["auto", "fp8", "fp8_e5m2"])),
)
def test_concat_and_cache_mla_vllm_grid(rng, dtype, block_size, kv_cache_dtype):
    num_tokens, rank, rope, num_blocks = 42, 512, 64, 8
    slots = rng.choice(num_blocks * block_size, num_tokens, replace=False)
    proj = rng.standard_normal((num_tokens, rank + rope + 16)).astype(dtype)
    kv_c, k_pe = proj[:, :rank], proj[:, rank : rank + rope]
    scale = np.array([rng.random() + 0.1], np.float32)
    if kv_cache_dtype == "auto":
        cache = rng.standard_normal((num_blocks, block_size, rank + rope)).astype(dtype)
    else:
        cache = rng.integers(0, 256, (num_blocks, block_size, rank + rope), dtype=np.uint8)
    expected = cache.copy()
    fmt = "e5m2" if kv_cache_dtype == "fp8_e5m2" else "e4m3"
    for i, s in enumerate(slots):
        row = np.concatenate([kv_c[i], k_pe[i]])
        blk, off = divmod(int(s), block_size)
        expected[blk, off] = row if kv_cache_dtype == "auto" else fp8_codes(
            row.astype(np.float32), scale[0], fmt)
    vllm.concat_and_cache_mla(kv_c, k_pe, cache, slots.astype(np.int64), kv_cache_dtype, scale)
    assert np.array_equal(cache.view(np.uint8), expected.view(np.uint8))


def ds_mla_entry(kv_c_row, k_pe_row):
    x = kv_c_row.astype(np.float32)
    entry = np.zeros(656, np.uint8)
    for i in range(4):
        tile = x[128 * i : 128 * (i + 1)]
        finite = np.abs(tile[~np.isnan(tile)])
        amax = finite.max() if finite.size else np.float32(0)
        s = max(np.float32(amax) / np.float32(448.0), np.finfo(np.float32).tiny)
        s = np.float32(s)
        with np.errstate(invalid="ignore", divide="ignore"):
            entry[128 * i : 128 * (i + 1)] = fp8_codes(tile, s, "e4m3")
        entry[512 + 4 * i : 516 + 4 * i] = np.frombuffer(s.tobytes(), np.uint8)
    entry[528:] = np.ascontiguousarray(k_pe_row).view(np.uint8)
    return entry


@pytest.mark.parametrize("dtype,block_size", list(itertools.product([BF16, np.float16], [16, 64])))
def test_concat_and_cache_ds_mla_vllm_grid(rng, dtype, block_size):
    num_tokens, num_blocks = 42, 8
    slots = rng.choice(num_blocks * block_size, num_tokens, replace=False)
    kv_c = (rng.standard_normal((num_tokens, 512)) * rng.choice([0.01, 1, 100], (num_tokens, 1)))
    kv_c = kv_c.astype(dtype)
    kv_c[3, 7] = np.nan
    kv_c[5, 200] = np.inf
    kv_c[6, 384:512] = 0
    k_pe = rng.standard_normal((num_tokens, 64)).astype(dtype)
    cache = rng.integers(0, 256, (num_blocks, block_size, 656), dtype=np.uint8)
    expected = cache.copy()
    for i, s in enumerate(slots):
        blk, off = divmod(int(s), block_size)
        expected[blk, off] = ds_mla_entry(kv_c[i], k_pe[i])
    vllm.concat_and_cache_mla(kv_c, k_pe, cache, slots, "fp8_ds_mla", np.array([1.0], np.float32))
    assert np.array_equal(cache, expected)


# ---- PyTorch tensors (the way vLLM calls these operators) ----------------------------------


def test_torch_hnd_fp8_and_gather_round_trip():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    num_blocks, block_size, heads, head_size, tokens = 6, 16, 4, 64, 40
    # vLLM's HND allocation: [nb, 2, H, bs, D] permuted to NHD order.
    kv = torch.zeros(num_blocks, 2, heads, block_size, head_size, dtype=torch.uint8)
    kv_nhd = kv.permute(0, 1, 3, 2, 4)
    qkv = torch.randn(tokens, 3, heads, head_size, generator=g).to(torch.bfloat16)
    key, value = qkv[:, 1], qkv[:, 2]
    slots = torch.randperm(num_blocks * block_size, generator=g)[:tokens].to(torch.int64)
    k_scale = torch.tensor([0.05, 0.1, 0.2, 0.4], dtype=torch.float32)
    v_scale = torch.tensor(0.03, dtype=torch.float32)
    v_scale = v_scale.expand(4).contiguous()
    vllm.reshape_and_cache_flash(key, value, kv_nhd[:, 0], kv_nhd[:, 1], slots, "fp8", k_scale,
                                 v_scale)
    # Eager reference as vLLM's tests write it: index the permuted view, convert with torch.
    blk, off = slots // block_size, slots % block_size
    q = (key.float() / k_scale[None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(kv_nhd[:, 0][blk, off], q.view(torch.uint8))
    # Gather the key rows back, dequantized, through cp-style sequences.
    src = kv_nhd[:, 0].reshape(num_blocks, block_size, heads * head_size)  # copy (not a view)
    dst = torch.zeros(tokens, heads * head_size, dtype=torch.float32)
    block_table = blk.reshape(tokens, 1).to(torch.int32)
    # Each token is its own sequence of length 1 starting at its slot's row.
    cu = torch.arange(tokens + 1, dtype=torch.int32)
    vllm.gather_and_maybe_dequant_cache(src, dst, block_table, cu,
                                        torch.arange(tokens, dtype=torch.int32), tokens, "fp8",
                                        torch.tensor([1.0]), seq_starts=off.to(torch.int32))
    assert torch.equal(dst, q.float().reshape(tokens, -1))


def test_torch_arguments_that_are_not_tensors():
    torch = pytest.importorskip("torch")
    args = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
            for k, v in flash_args().items()}
    before = args["key_cache"].clone()
    for change, exc, message in [
            (dict(key=None), TypeError, "key is required, got None"),
            (dict(slot_mapping=args["slot_mapping"].numpy()), TypeError,
             "slot_mapping must be a torch.Tensor like key_cache, got ndarray"),
            (dict(k_scale=torch.ones(1, dtype=torch.float64)), ValueError,
             "k_scale must be float32, got float64")]:
        with pytest.raises(exc, match=message):
            vllm.reshape_and_cache_flash(**{**args, **change})
        assert torch.equal(args["key_cache"], before)


def test_torch_cp_gather_cache_packed_float4():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    raw = torch.arange(2 * 4 * 3, dtype=torch.uint8).reshape(2, 4, 3)
    dst = torch.zeros(5, 3, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    vllm.cp_gather_cache(raw.view(torch.float4_e2m1fn_x2), dst,
                         torch.tensor([[1, 0]], dtype=torch.int32),
                         torch.tensor([0, 5], dtype=torch.int32), 1)
    assert torch.equal(dst.view(torch.uint8), torch.cat([raw[1], raw[0, :1]]))


def test_torch_concat_and_cache_mla_auto():
    torch = pytest.importorskip("torch")
    proj = torch.randn(10, 512 + 64 + 8).to(torch.bfloat16)
    kv_c, k_pe = proj[:, :512], proj[:, 512:576]
    cache = torch.zeros(2, 16, 576, dtype=torch.bfloat16)
    slots = torch.tensor([0, 17, -1, 3, 31, 5, 6, 7, 8, 9])
    vllm.concat_and_cache_mla(kv_c, k_pe, cache, slots, "auto", torch.tensor([1.0]))
    flat = cache.view(-1, 576)
    keep = slots >= 0
    assert torch.equal(flat[slots[keep]], torch.cat([kv_c, k_pe], 1)[keep])
