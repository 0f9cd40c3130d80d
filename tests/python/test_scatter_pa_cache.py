"""kvscatter.scatter_pa_cache: the worked examples, packed FP4, agreement with the key side of
scatter_pa_kv_cache, and errors (messages, untouched caches)."""

import kvscatter
import ml_dtypes
import numpy as np
import pytest


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def test_plain_hifloat8():
    key = np.array([[[0x08, 0x88, 0x18, 0x14]], [[0x09, 0x4A, 0xB2, 0x6E]], [[1, 2, 3, 4]]],
                   np.uint8)
    cache = np.zeros((2, 2, 1, 4), np.uint8)
    kvscatter.scatter_pa_cache(key, cache, np.array([3, -1, 0], np.int32), dtype="hifloat8")
    assert cache.reshape(-1).tolist() == [1, 2, 3, 4] + [0] * 8 + [0x08, 0x88, 0x18, 0x14]


@pytest.mark.parametrize("fp4", ["float4_e2m1", "float4_e1m2"])
def test_plain_packed_fp4(fp4):
    key = np.array([[[0x21, 0x7F]], [[0x9A, 0x00]]], np.uint8)
    cache = np.full((2, 2, 1, 2), 0xEE, np.uint8)
    kvscatter.npu_scatter_pa_cache(key, cache, np.array([2, 0], np.int64), dtype=fp4)
    assert cache.reshape(-1).tolist() == [0x9A, 0x00, 0xEE, 0xEE, 0x21, 0x7F, 0xEE, 0xEE]


def test_packed_fp4_torch_and_strided_bytes():
    # Python counts packed bytes (the library counts elements, twice as many): a torch
    # float4_e2m1fn_x2 tensor or uint8 bytes with dtype=; a block axis with any byte stride
    # passes, a last axis that is not contiguous does not.
    key = np.array([[[0x21, 0x7F]], [[0x9A, 0x00]]], np.uint8)
    padded = np.full((2, 3, 1, 2), 0xEE, np.uint8)
    kvscatter.scatter_pa_cache(key, padded[:, 1:], np.array([2, 0]), dtype="float4_e2m1")
    assert padded[:, 1:].reshape(-1).tolist() == [0x9A, 0x00, 0xEE, 0xEE, 0x21, 0x7F, 0xEE, 0xEE]
    with pytest.raises(ValueError, match=r"key_cache.strides\[3\] must be 1 \(float4_e2m1 elements "
                                         r"are packed two per byte\), got 4"):
        kvscatter.scatter_pa_cache(key, np.zeros((2, 2, 1, 4), np.uint8)[..., ::2], np.array([0, 1]),
                                   dtype="float4_e2m1")
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    cache = torch.full((2, 2, 1, 2), 0xEE, dtype=torch.uint8)
    kvscatter.scatter_pa_cache(torch.from_numpy(key).view(torch.float4_e2m1fn_x2),
                               cache.view(torch.float4_e2m1fn_x2), torch.tensor([2, 0]))
    assert cache.reshape(-1).tolist() == [0x9A, 0x00, 0xEE, 0xEE, 0x21, 0x7F, 0xEE, 0xEE]


def test_unpacked_fp4_rejected():
    key = np.zeros((2, 1, 4), ml_dtypes.float4_e2m1fn)
    cache = np.zeros((2, 2, 1, 4), ml_dtypes.float4_e2m1fn)
    with pytest.raises((TypeError, ValueError), match="packs two per byte"):
        kvscatter.scatter_pa_cache(key, cache, np.array([0, 1]))


def test_reduce_mean_float16():
    k = np.arange(5, dtype=np.float16)
    key = np.stack([k, 10 * k], axis=-1).reshape(1, 5, 1, 2).astype(np.float16)
    cache = np.zeros((2, 4, 1, 2), np.float16)
    kvscatter.scatter_pa_cache(key, cache, np.array([[4]]), compress_lens=np.array([[2]]),
                               compress_seq_offsets=np.array([1]), seq_lens=np.array([5]))
    assert bits(cache[1]).view(np.uint16).reshape(-1).tolist() == [
        0x0000, 0x0000, 0x3E00, 0x4B80, 0x4200, 0x4F80, 0x4400, 0x5100]
    assert not cache[0].any()
    before = cache.copy()
    with pytest.raises(kvscatter.Error, match=r"slot_mapping\[0\] = 4 starts a run of 5 rows"):
        kvscatter.scatter_pa_cache(key, cache, np.array([[4]]), compress_lens=np.array([[0]]),
                                   compress_seq_offsets=np.array([1]), seq_lens=np.array([5]))
    np.testing.assert_array_equal(bits(cache), bits(before))


def test_tail_keep_int8():
    b, k = np.meshgrid(np.arange(2), np.arange(4), indexing="ij")
    v = 10 * b + k
    key = np.stack([v, -v], axis=-1).reshape(2, 4, 1, 2).astype(np.int8)
    cache = np.zeros((2, 4, 1, 2), np.int8)
    kvscatter.scatter_pa_cache(key, cache, np.array([[0], [4]]), compress_lens=np.array([2, 3]),
                               seq_lens=np.array([3, 4]))
    assert bits(cache).reshape(-1).tolist() == [
        0x01, 0xFF, 0x02, 0xFE, 0, 0, 0, 0, 0x0B, 0xF5, 0x0C, 0xF4, 0x0D, 0xF3, 0, 0]


@pytest.mark.parametrize("dtype, rows, want", [
    (np.int8, [[1, -1], [2, -2], [2, -2]], [0x01, 0xFF]),
    (np.uint8, [[255, 3], [255, 4], [1, 4]], [0xAA, 0x03]),
    (ml_dtypes.bfloat16, [[1], [1], [2]], [0xAB, 0x3F]),
    (np.float16, [[2048], [1], [1]], [0x57, 0x61]),
])
def test_mean_of_a_three_token_window(dtype, rows, want):
    key = np.array(rows, dtype).reshape(1, 3, 1, -1)
    cache = np.zeros((1, 1, 1, key.shape[-1]), dtype)
    kvscatter.scatter_pa_cache(key, cache, np.array([[0]], np.int32),
                               compress_lens=np.array([3], np.int32),
                               compress_seq_offsets=np.array([0], np.int32),
                               seq_lens=np.array([3], np.int32))
    assert bits(cache).reshape(-1).tolist() == want


@pytest.mark.parametrize("scenario", ["plain", "reduce_mean", "tail_keep"])
def test_equals_key_side_of_scatter_pa_kv_cache(rng, scenario):
    nb, bs, nh, d = 6, 4, 2, 24
    if scenario == "plain":
        key = rng.standard_normal((9, nh, d)).astype(ml_dtypes.bfloat16)
        cache = rng.standard_normal((nb, bs, nh, d)).astype(ml_dtypes.bfloat16)
        slots = rng.integers(-1, nb * bs, size=9)
        kw = {}
    else:
        key = rng.standard_normal((2, 5, nh, d)).astype(np.float32)
        cache = rng.standard_normal((nb, bs, 1, d)).astype(np.float32)
        slots = np.array([[0, 6], [12, -1]])
        kw = {"compress_lens": np.array([2, 1, 3, 0]), "seq_lens": np.array([5, 4])}
        if scenario == "reduce_mean":
            kw["compress_seq_offsets"] = np.array([1, 0, 1, 2])
    want = cache.copy()
    kvscatter.scatter_pa_kv_cache(key, None, want, None, slots, **kw)
    kvscatter.scatter_pa_cache(key, cache, slots, **kw)
    np.testing.assert_array_equal(bits(cache), bits(want))


@pytest.mark.parametrize("mutate, message", [
    (lambda a: a.update(key=a["key"].reshape(6, 8)), "key must be 3-D [tokens, num_heads"),
    (lambda a: a.update(cache=a["cache"].astype(np.float32)),
     "key_cache dtype float32 differs from key dtype float16"),
    (lambda a: a.update(seq_lens=np.array([1], np.int32)),
     "compress_lens, compress_seq_offsets and seq_lens must be None with a 3-D key"),
    (lambda a: a["slots"].__setitem__(5, 12),
     "slot_mapping[5] = 12 is out of range [0, 12) (key_cache has 3 blocks of 4 slots"),
    (lambda a: a.update(compress_lens=np.array([1], np.int64)),
     "compress_lens dtype int64 differs from slot_mapping dtype int32"),
])
def test_errors_leave_the_cache_untouched(mutate, message):
    a = {"key": np.ones((6, 2, 4), np.float16), "cache": np.full((3, 4, 2, 4), 7, np.float16),
         "slots": np.arange(6, dtype=np.int32)}
    mutate(a)
    before = a["cache"].copy()
    kw = {k: a[k] for k in ("seq_lens", "compress_lens") if k in a}
    with pytest.raises(kvscatter.Error) as err:
        kvscatter.scatter_pa_cache(a["key"], a["cache"], a["slots"], **kw)
    assert message in str(err.value)
    np.testing.assert_array_equal(bits(a["cache"]), bits(before))
