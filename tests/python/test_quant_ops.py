"""scatter_pa_kv_cache_with_k_scale and kv_compress_epilog against the NumPy references."""

import enum

import kvscatter
import ml_dtypes
import numpy as np
import pytest
import refs

FP8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


def raw(rng, shape, dtype):
    dt = np.dtype(dtype)
    return rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape)


def same_bytes(a, b):
    np.testing.assert_array_equal(np.ascontiguousarray(a).view(np.uint8),
                                  np.ascontiguousarray(b).view(np.uint8))


# ---- ScatterPaKvCacheWithKScale --------------------------------------------------------------


@pytest.mark.parametrize("fp8", FP8, ids=lambda t: np.dtype(t).name)
def test_with_k_scale_random(rng, fp8):
    for _ in range(10):
        t, n = int(rng.integers(0, 16)), int(rng.integers(1, 4))
        dk, dv = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        nb, bs = int(rng.integers(1, 5)), int(rng.integers(1, 6))
        key, value = raw(rng, (t, n, dk), fp8), raw(rng, (t, n, dv), fp8)
        kc, vc = raw(rng, (nb, n, bs, dk), fp8), raw(rng, (nb, n, bs, dv), fp8)
        ks = raw(rng, (t, n), np.float32)  # any bits, NaN payloads included: a pure copy
        ksc = raw(rng, (nb, n, bs, 1), np.float32)
        # Slots below 0 and past the cache are skipped (upstream contract; see docs/semantics.md,
        # 'Out-of-range slots').
        slots = rng.integers(-3, nb * bs + 3, size=t).astype(rng.choice([np.int32, np.int64]))
        want = refs.scatter_pa_kv_cache_with_k_scale(key, value, kc, vc, slots, ks, ksc)
        kvscatter.scatter_pa_kv_cache_with_k_scale(key, value, kc, vc, slots, ks, ksc)
        for got, w in zip((kc, vc, ksc), want):
            same_bytes(got, w)


def test_with_k_scale_strided_scale_and_raw_bytes(rng):
    # key_scale may be non-contiguous in its last axis; float8 may travel as uint8 + dtype=.
    t, n, d, nb, bs = 6, 3, 8, 2, 4
    key, value = raw(rng, (t, n, d), np.uint8), raw(rng, (t, n, d), np.uint8)
    kc, vc = np.zeros((nb, n, bs, d), np.uint8), np.zeros((nb, n, bs, d), np.uint8)
    ks = rng.standard_normal((t, 2 * n)).astype(np.float32)[:, ::2]
    ksc = np.zeros((nb, n, bs, 1), np.float32)
    slots = np.array([5, -1, 8, 0, 7, 2], np.int64)
    want = refs.scatter_pa_kv_cache_with_k_scale(key, value, kc, vc, slots, ks, ksc)
    kvscatter.scatter_pa_kv_cache_with_k_scale(key, value, kc, vc, slots, ks, ksc,
                                               dtype="float8_e4m3fn")
    for got, w in zip((kc, vc, ksc), want):
        same_bytes(got, w)


def test_with_k_scale_spec_example():
    nb, n, bs, d, t = 2, 2, 4, 4, 3
    key = np.fromfunction(lambda t, h, i: 16 * (t + 1) + 4 * h + i, (t, n, d)).astype(np.uint8)
    ks = np.fromfunction(lambda t, h: 0.5 * (t + 1) + h, (t, n)).astype(np.float32)
    kc = np.zeros((nb, n, bs, d), np.uint8)
    vc = np.zeros_like(kc)
    ksc = np.zeros((nb, n, bs, 1), np.float32)
    kvscatter.scatter_pa_kv_cache_with_k_scale(
        key.view(ml_dtypes.float8_e4m3fn), key.view(ml_dtypes.float8_e4m3fn),
        kc.view(ml_dtypes.float8_e4m3fn), vc.view(ml_dtypes.float8_e4m3fn),
        np.array([5, -1, 8], np.int32), ks, ksc, cache_layout="BNBD")
    np.testing.assert_array_equal(kc[1, 0, 1], [0x10, 0x11, 0x12, 0x13])
    np.testing.assert_array_equal(kc[1, 1, 1], [0x14, 0x15, 0x16, 0x17])
    np.testing.assert_array_equal(ksc[1, :, 1, 0], [0.5, 1.5])
    assert np.count_nonzero(kc) == 8 and np.count_nonzero(ksc) == 2


# ---- KvCompressEpilog ------------------------------------------------------------------------


def epilog_case(rng, mode, gs, nonneg_rows=True):
    d = int(rng.choice([128, 192, 256, 576]))
    while mode == 2 and (d - 64) % gs:
        d += 64
    concat, total = refs.epilog_row_bytes(d, mode, gs)
    lead = tuple(int(v) for v in rng.integers(1, 4, size=int(rng.integers(1, 3))))
    scale = np.exp2(rng.integers(-20, 20, size=lead + (1,)))  # per-row magnitudes
    x = (rng.standard_normal(lead + (d,)) * scale).astype(np.float32).astype(ml_dtypes.bfloat16)
    x.reshape(-1, d)[0, :64] = 0  # an all-zero group
    nb, bs = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    row_stride = total + int(rng.integers(0, 40))
    # Non-contiguous along the block axis only (a strided block axis), prefilled with 0xEE.
    block_stride = bs * row_stride + int(rng.integers(0, 50))
    buf = np.full(nb * block_stride, 0xEE, np.uint8)
    cache = np.lib.stride_tricks.as_strided(buf, (nb, bs, 1, row_stride), (block_stride, row_stride, row_stride, 1))
    rows = int(np.prod(lead))
    slots = rng.permutation(nb * bs)[:rows] if rows <= nb * bs else rng.integers(0, nb * bs, size=rows)
    slots = np.where(rng.random(slots.size) < 0.2, -1, slots).astype(rng.choice([np.int32, np.int64]))
    return cache, buf, x, slots.reshape(lead)


@pytest.mark.parametrize("mode,gs", [(0, 64), (1, 64), (2, 16), (2, 32), (2, 64)])
@pytest.mark.parametrize("round_scale", [True, False])
def test_kv_compress_epilog_random(rng, mode, gs, round_scale):
    for _ in range(4):
        cache, buf, x, slots = epilog_case(rng, mode, gs)
        x_scale = float(rng.choice([1.0, 0.5, 1 / 3, 7.25]))
        want = refs.kv_compress_epilog(cache, x, slots, quant_group_size=gs, quant_mode=mode,
                                       round_scale=round_scale, x_scale=x_scale)
        before = buf.copy()
        kvscatter.kv_compress_epilog(cache, x, slots, quant_group_size=gs, quant_mode=mode,
                                     round_scale=round_scale, x_scale=x_scale)
        same_bytes(cache, want)
        # Bytes between blocks are not part of the cache: untouched.
        mask = np.ones(buf.size, bool)
        mask[np.lib.stride_tricks.as_strided(np.arange(buf.size), cache.shape, tuple(s * 8 for s in cache.strides)).reshape(-1)] = False
        np.testing.assert_array_equal(buf[mask], before[mask])


def spec_row():
    x = np.zeros(128, np.float32)
    x[:64] = (np.arange(64) - 32) / 4
    x[64:72] = [1, -1, 0.5, 3, 1.0625, 100, -0.3, 40000]
    return x.astype(ml_dtypes.bfloat16).reshape(1, 128)


def hexbytes(text):
    return np.array([int(v, 16) for v in text.split()], np.uint8)


def test_kv_compress_epilog_spec_examples():
    x = spec_row()
    cache = np.zeros((1, 1, 1, 256), np.uint8)
    kvscatter.kv_compress_epilog(cache, x, np.array([0], np.int32), quant_mode="fp8_e8m0")
    row = cache[0, 0, 0]
    np.testing.assert_array_equal(row[:16], hexbytes("80 3F 80 BF 00 3F 40 40 88 3F C8 42 9A BE 1C 47"))
    np.testing.assert_array_equal(row[128:160], hexbytes(
        "F8 F8 F7 F6 F6 F6 F5 F4 F4 F4 F3 F2 F2 F2 F1 F0 F0 EF EE ED EC EB EA E9 E8 E6 E4 E2 E0 DC D8 D0"))
    assert row[192] == 0x7A and (row[193:] == 0).all()

    cache[:] = 0xEE
    kvscatter.kv_compress_epilog(cache, x, np.array([0], np.int64), quant_mode=0, round_scale=False)
    row = cache[0, 0, 0]
    np.testing.assert_array_equal(row[128:144], hexbytes("FE FE FD FD FC FC FB FB FA FA FA F9 F9 F8 F8 F7"))
    np.testing.assert_array_equal(row[192:194], [0x92, 0x3C])
    assert (row[194:224] == 0).all() and (row[224:] == 0xEE).all()

    kvscatter.kv_compress_epilog(cache, x, np.array([0], np.int32), quant_mode="HIFLOAT8_FP4 ",
                                 quant_group_size=32)
    row = cache[0, 0, 0]
    np.testing.assert_array_equal(row[:9], hexbytes("08 88 18 14 09 4A B2 6E 00"))
    np.testing.assert_array_equal(row[64:96], hexbytes(
        "FF FF FF EE EE EE EE DD DD CD CC BC BB AA 9A 89 00 11 22 32 33 44 54 55 55 65 66 66 66 77 77 77"))
    np.testing.assert_array_equal(row[96:100], hexbytes("AB 3F A5 3F"))
    kvscatter.kv_compress_epilog(cache, x, np.array([0], np.int32), quant_mode=2,
                                 quant_group_size=32, x_scale=0.5)
    np.testing.assert_array_equal(cache[0, 0, 0, :8], hexbytes("18 98 30 0C 19 46 BA 6C"))


class Mode(enum.IntEnum):
    FP8_BF16 = 0
    FP8_E8M0 = 1


@pytest.mark.parametrize("spelling,mode", [("fp8_bf16", 0), ("FP8_E8M0", 1), ("  fp8_e8m0 ", 1),
                                           (0, 0), (1, 1), (np.int64(1), 1), (Mode.FP8_BF16, 0)])
def test_quant_mode_spellings(rng, spelling, mode):
    cache, _, x, slots = epilog_case(rng, mode, 64)
    want = refs.kv_compress_epilog(cache, x, slots, quant_mode=mode)
    kvscatter.kv_compress_epilog(cache, x, slots, quant_mode=spelling)
    same_bytes(cache, want)


def test_bfloat16_through_uint16_with_dtype(rng):
    cache, _, x, slots = epilog_case(rng, 1, 64)
    want = refs.kv_compress_epilog(cache, x, slots)
    kvscatter.kv_compress_epilog(cache, x.view(np.uint16), slots, dtype="bfloat16")
    same_bytes(cache, want)
