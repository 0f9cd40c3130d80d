"""kvscatter.kv_cache_update on NumPy arrays against a NumPy reference."""

import kvscatter
import ml_dtypes
import numpy as np
import pytest

CACHE_DTYPES = [np.float32, ml_dtypes.bfloat16, np.float16]


def reference(kc, vc, nk, nv, pos):
    kc, vc = kc.copy(), vc.copy()
    L = nk.shape[1]
    kc[:, pos:pos + L] = nk.astype(kc.dtype)
    vc[:, pos:pos + L] = nv.astype(vc.dtype)
    return kc, vc


def random_case(rng, cache_dtype, new_dtype):
    b, s, h, d = (int(rng.integers(1, 4)), int(rng.integers(1, 40)), int(rng.integers(1, 5)),
                  int(rng.choice([1, 3, 8, 64, 130])))
    L = int(rng.integers(0, s + 1))
    kc = rng.standard_normal((b, s, h, d)).astype(np.float32).astype(cache_dtype)
    vc = rng.standard_normal((b, s, h, d)).astype(np.float32).astype(cache_dtype)
    nk = (rng.standard_normal((b, L, h, d)) * 100).astype(np.float32).astype(new_dtype)
    nv = (rng.standard_normal((b, L, h, d)) * 1e-3).astype(np.float32).astype(new_dtype)
    return kc, vc, nk, nv, int(rng.integers(0, s - L + 1))


@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("same_dtype", [False, True], ids=["float32_new", "cache_dtype_new"])
def test_random_against_reference(rng, cache_dtype, same_dtype):
    for _ in range(20):
        kc, vc, nk, nv, pos = random_case(rng, cache_dtype, cache_dtype if same_dtype else np.float32)
        want_k, want_v = reference(kc, vc, nk, nv, pos)
        out = kvscatter.kv_cache_update(kc, vc, nk, nv, pos)
        assert out["key_cache"] is kc and out["value_cache"] is vc
        assert out["length"] == pos + nk.shape[1]
        np.testing.assert_array_equal(kc.view(np.uint8), want_k.view(np.uint8))
        np.testing.assert_array_equal(vc.view(np.uint8), want_v.view(np.uint8))


def test_worked_examples():
    kc = np.zeros((1, 4, 1, 2), np.float32)
    vc = np.zeros((1, 4, 1, 2), np.float32)
    out = kvscatter.kv_cache_update(kc, vc, np.array([[[[1, 2]]]], np.float32),
                                    np.array([[[[3, 4]]]], np.float32), 0)
    assert out["length"] == 1
    np.testing.assert_array_equal(kc[0, :, 0], [[1, 2], [0, 0], [0, 0], [0, 0]])
    np.testing.assert_array_equal(vc[0, :, 0], [[3, 4], [0, 0], [0, 0], [0, 0]])


def test_float32_to_16_bit_rounds_to_nearest_even(rng):
    x = rng.standard_normal((1, 64, 1, 16)).astype(np.float32) * np.float32(3.7)
    x.reshape(-1)[:6] = [np.inf, -np.inf, 65504.0, 65520.0, 1e-8, -0.0]
    for dt in (ml_dtypes.bfloat16, np.float16):
        kc = np.zeros((1, 64, 1, 16), dt)
        vc = np.zeros_like(kc)
        kvscatter.kv_cache_update(kc, vc, x, x, 0)
        with np.errstate(over="ignore"):  # 65520 overflows float16 to infinity, as intended
            want = x.astype(dt)
        np.testing.assert_array_equal(kc.view(np.uint16), want.view(np.uint16))


def test_nan_stays_nan():
    x = np.full((1, 1, 1, 4), np.nan, np.float32)
    x.view(np.uint32)[0, 0, 0, 1] = 0xFF800001  # negative signalling NaN
    for dt in (ml_dtypes.bfloat16, np.float16):
        kc = np.zeros((1, 2, 1, 4), dt)
        kvscatter.kv_cache_update(kc, kc.copy(), x, x, 1)
        assert np.isnan(kc[0, 1].astype(np.float32)).all()


def test_bfloat16_through_uint16_with_dtype(rng):
    kc, vc, nk, nv, pos = random_case(rng, ml_dtypes.bfloat16, np.float32)
    want_k, want_v = reference(kc, vc, nk, nv, pos)
    kraw, vraw = kc.view(np.uint16), vc.view(np.uint16)
    kvscatter.kv_cache_update(kraw, vraw, nk, nv, pos, dtype="bfloat16")
    np.testing.assert_array_equal(kraw, want_k.view(np.uint16))
    np.testing.assert_array_equal(vraw, want_v.view(np.uint16))


def test_result_does_not_depend_on_threads(rng):
    kc = np.zeros((4, 512, 8, 64), ml_dtypes.bfloat16)
    nk = rng.standard_normal((4, 100, 8, 64)).astype(np.float32)
    results = []
    before = kvscatter.get_num_threads()
    try:
        for n in (1, 2, 5):
            kvscatter.set_num_threads(n)
            k, v = kc.copy(), kc.copy()
            kvscatter.kv_cache_update(k, v, nk, -nk, 300)
            results.append((k.view(np.uint16).copy(), v.view(np.uint16).copy()))
    finally:
        kvscatter.set_num_threads(before)
    for k, v in results[1:]:
        np.testing.assert_array_equal(k, results[0][0])
        np.testing.assert_array_equal(v, results[0][1])


def test_position_accepts_numpy_integers():
    kc = np.zeros((1, 4, 1, 2), np.float32)
    new = np.ones((1, 2, 1, 2), np.float32)
    assert kvscatter.kv_cache_update(kc, kc.copy(), new, new, np.int32(2))["length"] == 4
