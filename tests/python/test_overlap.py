"""Inputs that share memory with the caches a call writes (docs/semantics.md, "Inputs that
overlap outputs"): the result is that of reading every input before writing, at every thread
count; caches that share memory with each other are rejected, naming both."""

import kvscatter
import ml_dtypes
import numpy as np
import pytest
import refs

THREADS = [1, 2, 3]


@pytest.fixture(autouse=True)
def _restore_threads():
    yield
    kvscatter.set_num_threads(0)


def test_issue_example_key_is_a_slice_of_the_cache(rng):
    T, NH, D, bs, nb = 4096, 8, 128, 16, 300
    kc0 = rng.standard_normal((nb, bs, NH, D)).astype(np.float32)
    ones = np.ones((T, NH, D), np.float32)
    slots = np.arange(1, T + 1, dtype=np.int64)
    for threads in THREADS:
        kvscatter.set_num_threads(threads)
        kc = kc0.copy()
        vc = kc0 + 1
        key = kc.reshape(-1, NH, D)[0:T]  # the new keys are rows 0..T-1 of the cache
        want_k, want_v = refs.scatter_pa_kv_cache(key.copy(), ones, kc, vc, slots)
        kvscatter.scatter_pa_kv_cache(key, ones, kc, vc, slots)
        flat = kc.reshape(-1, NH, D)
        np.testing.assert_array_equal(flat[1:T + 1], kc0.reshape(-1, NH, D)[0:T])
        np.testing.assert_array_equal(kc, want_k)
        np.testing.assert_array_equal(vc, want_v)


def alias(cache_rows, kind, t):
    """A [t, ...] view of `cache_rows` ([rows, ...]): whole, one row on, partial, strided."""
    if kind == "whole":
        return cache_rows[0:t]
    if kind == "next_row":
        return cache_rows[1:t + 1]
    if kind == "partial":
        return cache_rows[cache_rows.shape[0] - t:]
    return cache_rows[0:2 * t:2]


KINDS = ["whole", "next_row", "partial", "strided"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("which", ["key>key_cache", "value>key_cache", "key>value_cache",
                                   "value>value_cache"])
def test_scatter_pa_kv_cache_inputs_over_caches(rng, kind, which):
    t, nh, d, bs, nb = 300, 4, 32, 16, 40
    kc0 = rng.standard_normal((nb, bs, nh, d)).astype(np.float32)
    vc0 = rng.standard_normal((nb, bs, nh, d)).astype(np.float32)
    key0 = rng.standard_normal((t, nh, d)).astype(np.float32)
    val0 = rng.standard_normal((t, nh, d)).astype(np.float32)
    slots = rng.permutation(nb * bs)[:t].astype(np.int64)
    for threads in THREADS:
        kvscatter.set_num_threads(threads)
        kc, vc = kc0.copy(), vc0.copy()
        src, dst = which.split(">")
        view = alias((kc if dst == "key_cache" else vc).reshape(-1, nh, d), kind, t)
        key, val = (view, val0) if src == "key" else (key0, view)
        want_k, want_v = refs.scatter_pa_kv_cache(key.copy(), val.copy(), kc, vc, slots)
        kvscatter.scatter_pa_kv_cache(key, val, kc, vc, slots)
        np.testing.assert_array_equal(kc, want_k)
        np.testing.assert_array_equal(vc, want_v)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("which", ["new_keys>key_cache", "new_values>key_cache",
                                   "new_values>value_cache"])
def test_kv_cache_update_inputs_over_caches(rng, kind, which):
    b, s, l, h, d, pos = 2, 300, 128, 4, 32, 3
    kc0 = rng.standard_normal((b, s, h, d)).astype(np.float32)
    vc0 = rng.standard_normal((b, s, h, d)).astype(np.float32)
    nk0 = rng.standard_normal((b, l, h, d)).astype(np.float32)
    for threads in THREADS:
        kvscatter.set_num_threads(threads)
        kc, vc = kc0.copy(), vc0.copy()
        src, dst = which.split(">")
        cache = kc if dst == "key_cache" else vc
        # Batch i of the new rows is a view of batch i of the cache.
        full = {"whole": cache[:, 0:l], "next_row": cache[:, 1:l + 1],
                "partial": cache[:, s - l:], "strided": cache[:, 0:2 * l:2]}[kind]
        nk, nv = (full, nk0) if src == "new_keys" else (nk0, full)
        want_k, want_v = kc.copy(), vc.copy()
        want_k[:, pos:pos + l] = nk.copy()
        want_v[:, pos:pos + l] = nv.copy()
        kvscatter.kv_cache_update(kc, vc, nk, nv, pos)
        np.testing.assert_array_equal(kc, want_k)
        np.testing.assert_array_equal(vc, want_v)


@pytest.mark.parametrize("kind", KINDS)
def test_kv_compress_epilog_x_over_cache(rng, kind):
    t, d, bs, nb, row = 64, 576, 16, 12, 648
    x0 = (rng.standard_normal((nb * bs * row // (2 * d) + 2, d))).astype(ml_dtypes.bfloat16)
    for threads in THREADS:
        kvscatter.set_num_threads(threads)
        # The cache's bytes are bfloat16 values: x can be a view of them.
        storage = np.zeros(nb * bs * row + 2 * 2 * d * t, np.uint8)
        storage[:x0.nbytes] = x0.view(np.uint8).reshape(-1)[:storage.size]
        cache = storage[:nb * bs * row].reshape(nb, bs, 1, row)
        rows = storage[:(storage.size // (2 * d)) * 2 * d].view(ml_dtypes.bfloat16).reshape(-1, d)
        x = {"whole": rows[0:t], "next_row": rows[1:t + 1],
             "partial": rows[(nb * bs * row) // (2 * d) - t // 2:][:t],
             "strided": rows[0:2 * t:2]}[kind]
        slots = np.random.default_rng(threads).permutation(nb * bs)[:t].astype(np.int64)
        want = refs.kv_compress_epilog(cache, x.copy(), slots)
        kvscatter.kv_compress_epilog(cache, x, slots)
        np.testing.assert_array_equal(cache, want)


def test_with_k_scale_inputs_over_caches(rng):
    t, n, d, nb, bs = 64, 2, 32, 8, 16
    f8 = ml_dtypes.float8_e4m3fn
    kc0 = rng.integers(0, 120, (nb, n, bs, d), dtype=np.uint8).view(f8)
    for threads in THREADS:
        kvscatter.set_num_threads(threads)
        kc, vc = kc0.copy(), kc0.copy()
        ksc = rng.standard_normal((nb, n, bs, 1)).astype(np.float32)
        key = kc.reshape(-1)[:t * n * d].reshape(t, n, d)  # key inside key_cache
        value = kc.reshape(-1)[n * d:(t + 1) * n * d].reshape(t, n, d)  # one row further on
        ks = ksc.reshape(-1)[1:t * n + 1].reshape(t, n)  # key_scale inside key_scale_cache
        slots = np.random.default_rng(threads).permutation(nb * bs)[:t].astype(np.int64)
        want = refs.scatter_pa_kv_cache_with_k_scale(key.copy(), value.copy(), kc, vc, slots,
                                                     ks.copy(), ksc)
        kvscatter.scatter_pa_kv_cache_with_k_scale(key, value, kc, vc, slots, ks, ksc)
        for got, w in zip((kc, vc, ksc), want):
            np.testing.assert_array_equal(got.view(np.uint8), w.view(np.uint8))


def test_caches_that_share_memory_are_rejected(rng):
    nb, bs, nh, d, t = 8, 16, 2, 16, 16
    buf = rng.standard_normal(nb * bs * nh * d + nh * d).astype(np.float32)
    kc = buf[:nb * bs * nh * d].reshape(nb, bs, nh, d)
    vc = buf[nh * d:].reshape(nb, bs, nh, d)  # one row further on
    before = buf.copy()
    key = np.ones((t, nh, d), np.float32)
    with pytest.raises(kvscatter.Error, match="key_cache .* and value_cache .* share memory"):
        kvscatter.scatter_pa_kv_cache(key, key, kc, vc, np.arange(t, dtype=np.int64))
    np.testing.assert_array_equal(buf, before)


def test_interleaved_key_value_cache_is_accepted(rng):
    nb, bs, nh, d, t = 8, 16, 2, 16, 100
    kv = np.zeros((nb, 2, bs, nh, d), np.float32)
    key = rng.standard_normal((t, nh, d)).astype(np.float32)
    value = rng.standard_normal((t, nh, d)).astype(np.float32)
    slots = rng.permutation(nb * bs)[:t].astype(np.int64)
    want_k, want_v = refs.scatter_pa_kv_cache(key, value, kv[:, 0], kv[:, 1], slots)
    kvscatter.scatter_pa_kv_cache(key, value, kv[:, 0], kv[:, 1], slots)
    np.testing.assert_array_equal(kv[:, 0], want_k)
    np.testing.assert_array_equal(kv[:, 1], want_v)
