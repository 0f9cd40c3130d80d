"""Every operator called from several Python threads at once (the bindings release the GIL
while the kernels run): on separate caches, and on one shared cache with disjoint slots, each
result checked against the NumPy reference."""

import threading

import kvscatter
import ml_dtypes
import numpy as np
import refs

THREADS = 6
ROUNDS = 4


def run_together(work):
    """Runs work(i) on THREADS threads released at once; re-raises the first failure."""
    barrier = threading.Barrier(THREADS)
    errors = []

    def body(i):
        try:
            barrier.wait()
            for _ in range(ROUNDS):
                work(i)
        except BaseException as e:  # noqa: BLE001 - reported on the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def scatter_case(rng, t=512, nh=4, d=64, bs=16, nb=64):
    key = rng.standard_normal((t, nh, d)).astype(np.float32)
    value = rng.standard_normal((t, nh, d)).astype(np.float32)
    slots = rng.permutation(nb * bs)[:t].astype(np.int64)
    slots[::7] = -1
    return key, value, np.zeros((nb, bs, nh, d), np.float32), np.zeros((nb, bs, nh, d), np.float32), slots


def test_scatter_pa_kv_cache_separate_caches(rng):
    cases = [scatter_case(rng) for _ in range(THREADS)]
    wants = [refs.scatter_pa_kv_cache(k, v, kc, vc, s) for k, v, kc, vc, s in cases]

    def work(i):
        k, v, kc, vc, s = cases[i]
        kvscatter.scatter_pa_kv_cache(k, v, kc, vc, s)

    run_together(work)
    for (_, _, kc, vc, _), (wk, wv) in zip(cases, wants):
        np.testing.assert_array_equal(kc, wk)
        np.testing.assert_array_equal(vc, wv)


def test_scatter_pa_kv_cache_shared_cache_disjoint_slots(rng):
    t, nh, d, bs, nb = 256, 4, 64, 16, 128
    kc = np.zeros((nb, bs, nh, d), np.float32)
    vc = np.zeros_like(kc)
    perm = rng.permutation(nb * bs).astype(np.int64)
    keys = [rng.standard_normal((t, nh, d)).astype(np.float32) for _ in range(THREADS)]
    vals = [rng.standard_normal((t, nh, d)).astype(np.float32) for _ in range(THREADS)]
    slots = [perm[i * t:(i + 1) * t] for i in range(THREADS)]
    want_k, want_v = kc, vc
    for i in range(THREADS):
        want_k, want_v = refs.scatter_pa_kv_cache(keys[i], vals[i], want_k, want_v, slots[i])

    run_together(lambda i: kvscatter.scatter_pa_kv_cache(keys[i], vals[i], kc, vc, slots[i]))
    np.testing.assert_array_equal(kc, want_k)
    np.testing.assert_array_equal(vc, want_v)


def k_scale_inputs(rng, t, n, d):
    f8 = ml_dtypes.float8_e4m3fn
    key = rng.integers(0, 120, (t, n, d), dtype=np.uint8).view(f8)
    value = rng.integers(0, 120, (t, n, d), dtype=np.uint8).view(f8)
    return key, value, rng.standard_normal((t, n)).astype(np.float32)


def test_with_k_scale_separate_and_shared(rng):
    t, n, d, nb, bs = 128, 2, 64, 64, 16
    f8 = ml_dtypes.float8_e4m3fn
    inputs = [k_scale_inputs(rng, t, n, d) for _ in range(THREADS)]
    perm = rng.permutation(nb * bs).astype(np.int64)
    slots = [perm[i * t:(i + 1) * t] for i in range(THREADS)]
    fresh = lambda: (np.zeros((nb, n, bs, d), f8), np.zeros((nb, n, bs, d), f8),  # noqa: E731
                     np.zeros((nb, n, bs, 1), np.float32))
    separate = [fresh() for _ in range(THREADS)]
    shared = fresh()
    want_shared = shared
    for i in range(THREADS):
        want_shared = refs.scatter_pa_kv_cache_with_k_scale(*inputs[i][:2], *want_shared[:2],
                                                            slots[i], inputs[i][2],
                                                            want_shared[2])
    want_sep = [refs.scatter_pa_kv_cache_with_k_scale(*inputs[i][:2], *separate[i][:2], slots[i],
                                                      inputs[i][2], separate[i][2])
                for i in range(THREADS)]

    def work(i):
        k, v, ks = inputs[i]
        kvscatter.scatter_pa_kv_cache_with_k_scale(k, v, *separate[i][:2], slots[i], ks,
                                                   separate[i][2])
        kvscatter.scatter_pa_kv_cache_with_k_scale(k, v, *shared[:2], slots[i], ks, shared[2])

    run_together(work)
    for got, want in list(zip(separate, want_sep)) + [(shared, want_shared)]:
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))


def test_kv_compress_epilog_separate_and_shared(rng):
    t, d, bs, nb, row = 64, 576, 16, 48, 648
    xs = [(rng.standard_normal((t, d)) * 3).astype(ml_dtypes.bfloat16) for _ in range(THREADS)]
    perm = rng.permutation(nb * bs).astype(np.int64)
    slots = [perm[i * t:(i + 1) * t] for i in range(THREADS)]
    separate = [np.zeros((nb, bs, 1, row), np.uint8) for _ in range(THREADS)]
    shared = np.zeros((nb, bs, 1, row), np.uint8)
    want_sep = [refs.kv_compress_epilog(separate[i], xs[i], slots[i]) for i in range(THREADS)]
    want_shared = shared
    for i in range(THREADS):
        want_shared = refs.kv_compress_epilog(want_shared, xs[i], slots[i])

    def work(i):
        kvscatter.kv_compress_epilog(separate[i], xs[i], slots[i])
        kvscatter.kv_compress_epilog(shared, xs[i], slots[i])

    run_together(work)
    for got, want in zip(separate, want_sep):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(shared, want_shared)


def test_kv_cache_update_separate_and_shared(rng):
    b, s, l, h, d = 2, THREADS * 32, 32, 4, 64
    nks = [rng.standard_normal((b, l, h, d)).astype(np.float32) for _ in range(THREADS)]
    nvs = [rng.standard_normal((b, l, h, d)).astype(np.float32) for _ in range(THREADS)]
    separate = [(np.zeros((b, s, h, d), np.float32), np.zeros((b, s, h, d), ml_dtypes.bfloat16))
                for _ in range(THREADS)]
    shared = (np.zeros((b, s, h, d), np.float32), np.zeros((b, s, h, d), ml_dtypes.bfloat16))

    def work(i):
        kvscatter.kv_cache_update(*separate[i], nks[i], nvs[i], 0)
        kvscatter.kv_cache_update(*shared, nks[i], nvs[i], i * l)  # disjoint positions

    run_together(work)
    for i in range(THREADS):
        np.testing.assert_array_equal(separate[i][0][:, :l], nks[i])
        np.testing.assert_array_equal(separate[i][1][:, :l], nvs[i].astype(ml_dtypes.bfloat16))
        np.testing.assert_array_equal(shared[0][:, i * l:(i + 1) * l], nks[i])
        np.testing.assert_array_equal(shared[1][:, i * l:(i + 1) * l],
                                      nvs[i].astype(ml_dtypes.bfloat16))
