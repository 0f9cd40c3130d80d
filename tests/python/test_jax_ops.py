"""kvscatter.jax for every operator: all modes, positions of any integer dtype, vmap."""

import functools

import numpy as np
import pytest
import refs
from needs import need

jax = need("jax")
import jax.numpy as jnp  # noqa: E402

import kvscatter.jax as kj  # noqa: E402


def same(a, b):
    a, b = np.atleast_1d(np.asarray(a)), np.atleast_1d(np.asarray(b))
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.fixture(params=["auto", "kvscatter", "xla"])
def update(request):
    return functools.partial(kj.kv_cache_update, method=request.param)


def reference_update(key_cache, value_cache, new_keys, new_values, position):
    position = jnp.asarray(position)
    zero = jnp.zeros((), position.dtype)  # dynamic_update_slice wants one index dtype
    start = (zero, position, zero, zero)
    k = jax.lax.dynamic_update_slice(key_cache, new_keys.astype(key_cache.dtype), start)
    v = jax.lax.dynamic_update_slice(value_cache, new_values.astype(value_cache.dtype), start)
    return {"key_cache": k, "value_cache": v, "length": position + new_keys.shape[1]}


# ---- positions ------------------------------------------------------------------------------

INT_DTYPES = [np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32]


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_positions_of_any_integer_dtype_match_dynamic_update_slice(update, rng, dtype):
    b, s, h, d, L = 2, 12, 2, 4, 3
    kc = jnp.asarray(rng.standard_normal((b, s, h, d)), jnp.float32)
    vc = jnp.asarray(rng.standard_normal((b, s, h, d)), jnp.float32)
    nk = jnp.asarray(rng.standard_normal((b, L, h, d)), jnp.float32)
    info = np.iinfo(dtype)
    values = {0, 1, s - L, s - L + 1, s, s + 5, info.max, info.max - 1, 2**31 if info.max >= 2**31 else 0}
    if info.min < 0:
        values |= {-1, -L, -s, -s - 1, info.min, info.min + 1}
    ours, theirs = jax.jit(update), jax.jit(reference_update)
    for value in sorted(values):
        pos = jnp.asarray(value, dtype)
        got, want = ours(kc, vc, nk, -nk, pos), theirs(kc, vc, nk, -nk, pos)
        same(got["key_cache"], want["key_cache"])
        same(got["value_cache"], want["value_cache"])
        same(got["length"], want["length"])


def test_uint32_two_to_the_31_clamps_to_the_end(update):
    kc = jnp.zeros((1, 8, 1, 2))
    out = update(kc, kc, jnp.ones((1, 2, 1, 2)), jnp.ones((1, 2, 1, 2)), jnp.uint32(2**31))
    np.testing.assert_array_equal(np.asarray(out["key_cache"][0, :, 0, 0]), [0, 0, 0, 0, 0, 0, 1, 1])


# ---- vmap ------------------------------------------------------------------------------------

def test_vmap_kv_cache_update_one_position_per_sequence(rng):
    # The ragged decode case: each sequence (a (1, S, H, D) cache) at its own position.
    n, s, h, d = 5, 16, 2, 8
    kc = jnp.asarray(rng.standard_normal((n, 1, s, h, d)), jnp.bfloat16)
    vc = jnp.asarray(rng.standard_normal((n, 1, s, h, d)), jnp.bfloat16)
    nk = jnp.asarray(rng.standard_normal((n, 1, 1, h, d)), jnp.float32)
    pos = jnp.asarray([0, 3, 15, 40, -2], jnp.int32)
    want = jax.vmap(reference_update)(kc, vc, nk, nk, pos)
    # One custom call for all sequences, not a loop.
    hlo = jax.jit(jax.vmap(kj.kv_cache_update)).lower(kc, vc, nk, nk, pos).as_text()
    assert hlo.count("kvscatter_kv_cache_update") == 1 and "while" not in hlo
    got = jax.jit(jax.vmap(kj.kv_cache_update), donate_argnums=(0, 1))(kc, vc, nk, nk, pos)
    for name in ("key_cache", "value_cache", "length"):
        same(got[name], want[name])


def test_vmap_kv_cache_update_mixed_and_nested(update, rng):
    s, h, d = 10, 1, 4
    kc = jnp.asarray(rng.standard_normal((2, s, h, d)), jnp.float32)  # not mapped
    nk = jnp.asarray(rng.standard_normal((2, 1, h, d)), jnp.float32)
    pos = jnp.arange(3, dtype=jnp.int32) * 4  # mapped: 3 instances of the whole batch
    got = jax.vmap(update, in_axes=(None, None, None, None, 0))(kc, kc, nk, nk, pos)
    want = jax.vmap(reference_update, in_axes=(None, None, None, None, 0))(kc, kc, nk, nk, pos)
    same(got["key_cache"], want["key_cache"])
    # Nested: 2 x 3 instances, positions mapped on both axes.
    kc2 = jnp.asarray(rng.standard_normal((2, 3, 1, s, h, d)), jnp.float32)
    nk2 = jnp.asarray(rng.standard_normal((2, 3, 1, 2, h, d)), jnp.float32)
    pos2 = jnp.asarray([[0, 5, 9], [-1, 2, 100]], jnp.int32)
    got = jax.vmap(jax.vmap(update))(kc2, kc2, nk2, nk2, pos2)
    want = jax.vmap(jax.vmap(reference_update))(kc2, kc2, nk2, nk2, pos2)
    same(got["key_cache"], want["key_cache"])
    same(got["length"], want["length"])


def test_vmap_scatter_and_quant_ops_sequentially(rng):
    n, t, nh, dk, nb, bs = 3, 4, 2, 8, 3, 4
    key = rng.standard_normal((n, t, nh, dk)).astype(np.float32)
    kc = rng.standard_normal((n, nb, bs, nh, dk)).astype(np.float32)
    slots = np.stack([rng.permutation(nb * bs)[:t] for _ in range(n)]).astype(np.int32)
    slots[:, 0] = -1
    got_k, _ = jax.vmap(lambda k, c, s: kj.scatter_pa_kv_cache(k, None, c, None, s))(key, kc, slots)
    for i in range(n):
        same(got_k[i], refs.scatter_pa_kv_cache(key[i], None, kc[i], None, slots[i])[0])

    x = jnp.asarray(rng.standard_normal((n, 2, 128)), jnp.bfloat16)
    cache = jnp.zeros((n, 2, 2, 1, 224), jnp.uint8)
    eslots = jnp.asarray([[0, 3], [1, -1], [2, 1]], jnp.int32)
    got = jax.vmap(lambda c, xx, s: kj.kv_compress_epilog(c, xx, s, quant_mode=0))(cache, x, eslots)
    for i in range(n):
        want = refs.kv_compress_epilog(np.asarray(cache[i]), np.asarray(x[i]), np.asarray(eslots[i]),
                                       quant_mode=0)
        same(got[i], want)


# ---- every operator, every mode --------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float16, jnp.bfloat16, np.int8], ids=["float16", "bfloat16", "int8"])
def test_scatter_pa_nz_with_donation(rng, dtype):
    t, nh, d, nb, bs = 6, 2, 32, 3, 16
    itemsize = np.dtype(dtype).itemsize
    lanes = 32 // itemsize
    key = (rng.standard_normal((t, nh, d)) * 10).astype(dtype)
    value = (rng.standard_normal((t, nh, d)) * 10).astype(dtype)
    kc = (rng.standard_normal((nb, nh * d // lanes, bs, lanes)) * 10).astype(dtype)
    vc = (rng.standard_normal((nb, nh * d // lanes, bs, lanes)) * 10).astype(dtype)
    slots = np.array([0, 17, -1, 47, 5, 30], np.int64)
    want_k, want_v = refs.scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode="PA_NZ")
    kcj, vcj = jnp.asarray(kc), jnp.asarray(vc)
    ptr = kcj.unsafe_buffer_pointer()
    f = jax.jit(lambda *a: kj.scatter_pa_kv_cache(*a, cache_mode="PA_NZ"), donate_argnums=(2, 3))
    k, v = f(key, value, kcj, vcj, slots.astype(np.int32))
    assert k.unsafe_buffer_pointer() == ptr
    same(k, want_k)
    same(v, want_v)


def test_with_k_scale_matches_reference(rng):
    f8 = jnp.float8_e5m2
    t, n, dk, dv, nb, bs = 5, 2, 16, 8, 2, 4
    key = jnp.asarray(rng.standard_normal((t, n, dk)), f8)
    value = jnp.asarray(rng.standard_normal((t, n, dv)), f8)
    kc, vc = jnp.zeros((nb, n, bs, dk), f8), jnp.zeros((nb, n, bs, dv), f8)
    slots = jnp.asarray([3, -1, 7, 100, 0], jnp.int32)
    scale = jnp.asarray(rng.standard_normal((t, n)), jnp.float32)
    ksc = jnp.zeros((nb, n, bs, 1), jnp.float32)
    want = refs.scatter_pa_kv_cache_with_k_scale(*(np.asarray(a) for a in (key, value, kc, vc, slots, scale, ksc)))
    got = jax.jit(kj.scatter_pa_kv_cache_with_k_scale, donate_argnums=(2, 3, 6))(
        key, value, kc, vc, slots, scale, ksc)
    for g, w in zip(got, want):
        same(g, w)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_kv_compress_epilog_matches_reference(rng, mode):
    gs = 64 if mode < 2 else 32
    _, row_bytes = refs.epilog_row_bytes(192, mode, gs)
    cache = jnp.asarray(rng.integers(0, 256, (2, 4, 1, row_bytes)), jnp.uint8)
    x = jnp.asarray(rng.standard_normal((3, 192)) * 4, jnp.bfloat16)
    slots = jnp.asarray([6, -1, 1], jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)
    want = refs.kv_compress_epilog(np.asarray(cache), np.asarray(x), np.asarray(slots),
                                   quant_group_size=gs, quant_mode=mode, round_scale=mode != 1,
                                   x_scale=0.75)
    f = jax.jit(lambda c, xx, s: kj.kv_compress_epilog(c, xx, s, quant_group_size=gs, quant_mode=mode,
                                                       round_scale=mode != 1, x_scale=0.75),
                donate_argnums=(0,))
    same(f(cache, x, slots), want)


def test_quant_op_errors_carry_the_library_message():
    cache = jnp.zeros((1, 4, 1, 100), jnp.uint8)
    with pytest.raises(Exception, match="row_bytes"):
        jax.block_until_ready(kj.kv_compress_epilog(cache, jnp.ones((1, 128), jnp.bfloat16),
                                                    jnp.array([0]), quant_mode="fp8_bf16"))
    with pytest.raises(Exception, match="fp7"):
        jax.block_until_ready(kj.kv_compress_epilog(cache, jnp.ones((1, 128), jnp.bfloat16),
                                                    jnp.array([0]), quant_mode="fp7"))
    with pytest.raises(TypeError, match="quant_mode"):
        kj.kv_compress_epilog(cache, jnp.ones((1, 128), jnp.bfloat16), jnp.array([0]), quant_mode=1.5)


# ---- gather_pa_kv_cache, scatter_pa_cache, indexer_quant_cache against the NumPy path -------

import kvscatter  # noqa: E402
import ml_dtypes  # noqa: E402


def test_gather_pa_kv_cache_matches_numpy_with_donation(rng):
    kc = rng.standard_normal((4, 2, 2, 8)).astype(ml_dtypes.bfloat16)
    vc = rng.standard_normal((4, 2, 2, 4)).astype(ml_dtypes.bfloat16)
    tables = np.array([[2, 0], [-1, 3]], np.int32)
    lens = np.array([3, 2], np.int32)
    key = rng.standard_normal((6, 2, 8)).astype(ml_dtypes.bfloat16)
    value = rng.standard_normal((6, 2, 4)).astype(ml_dtypes.bfloat16)
    want_k, want_v = key.copy(), value.copy()
    kvscatter.gather_pa_kv_cache(kc, vc, tables, lens, want_k, want_v)
    kj_key = jnp.asarray(key)
    ptr = kj_key.unsafe_buffer_pointer()
    f = jax.jit(kj.gather_pa_kv_cache, donate_argnums=(4, 5))
    k, v = f(kc, vc, tables, lens, kj_key, jnp.asarray(value))
    assert k.unsafe_buffer_pointer() == ptr
    same(k, want_k)
    same(v, want_v)
    # Key only, prefix sums, seq_offset, hifloat8 bytes.
    kc8 = rng.integers(0, 256, (3, 4, 1, 16), dtype=np.uint8)
    out = np.zeros((5, 1, 16), np.uint8)
    kw = {"seq_offset": np.array([4, 1], np.int32), "is_seq_lens_cumsum": True, "dtype": "hifloat8"}
    args = (kc8, None, np.array([[0, 2], [1, 0]], np.int32), np.array([0, 3, 5], np.int32))
    k, none = jax.jit(lambda *a: kj.gather_pa_kv_cache(*a, None, **kw))(*args, out)
    want = out.copy()
    kvscatter.gather_pa_kv_cache(*args, want, None, **kw)
    assert none is None
    same(k, want)


def test_gather_pa_kv_cache_errors():
    kc = jnp.zeros((2, 2, 1, 4))
    with pytest.raises(Exception, match="block_tables"):
        jax.block_until_ready(kj.gather_pa_kv_cache(kc, None, jnp.array([[5]], jnp.int32),
                                                    jnp.array([1], jnp.int32), jnp.zeros((1, 1, 4)),
                                                    None)[0])
    with pytest.raises(ValueError, match="both"):
        kj.gather_pa_kv_cache(kc, kc, jnp.array([[0]]), jnp.array([1]), jnp.zeros((1, 1, 4)), None)
    with pytest.raises(TypeError, match="is_seq_lens_cumsum"):
        kj.gather_pa_kv_cache(kc, None, jnp.array([[0]]), jnp.array([1]), jnp.zeros((1, 1, 4)), None,
                              is_seq_lens_cumsum=1)


def test_scatter_pa_cache_matches_numpy(rng):
    key = rng.standard_normal((3, 2, 16)).astype(np.float16)
    cache = rng.standard_normal((2, 4, 2, 16)).astype(np.float16)
    slots = np.array([5, -1, 0], np.int64)
    want = cache.copy()
    kvscatter.scatter_pa_cache(key, want, slots)
    same(jax.jit(kj.scatter_pa_cache, donate_argnums=(1,))(key, jnp.asarray(cache),
                                                           slots.astype(np.int32)), want)
    # Packed FP4 bytes.
    codes = rng.integers(0, 256, (2, 1, 8), dtype=np.uint8)
    c4 = np.full((2, 2, 1, 8), 0xEE, np.uint8)
    want = c4.copy()
    kvscatter.scatter_pa_cache(codes, want, np.array([3, 0]), dtype="float4_e1m2")
    same(kj.scatter_pa_cache(codes, c4, np.array([3, 0], np.int32), dtype="float4_e1m2"), want)
    # ReduceMean and tail keep.
    key4 = rng.standard_normal((2, 5, 1, 4)).astype(np.float32)
    c = np.zeros((4, 4, 1, 4), np.float32)
    for kw in ({"compress_lens": np.array([[2], [1]], np.int32),
                "compress_seq_offsets": np.array([1, 0], np.int32)},
               {"compress_lens": np.array([2, 3], np.int32)}):
        kw["seq_lens"] = np.array([5, 4], np.int32)
        sm = np.array([[0], [8]], np.int32)
        want = c.copy()
        kvscatter.scatter_pa_cache(key4, want, sm, **kw)
        same(kj.scatter_pa_cache(key4, c, sm, **kw), want)
    with pytest.raises(Exception, match=r"slot_mapping\[0\] = 8"):
        jax.block_until_ready(kj.scatter_pa_cache(key, cache, np.array([8, 0, 1], np.int32)))


@pytest.mark.parametrize("mode", ["fp8", "mxfp8", "hifloat8", "mxfp4"])
def test_indexer_quant_cache_matches_numpy(rng, mode):
    x = (rng.standard_normal((2, 3, 64)) * 3).astype(ml_dtypes.bfloat16)
    slots = np.array([[6, -1, 1], [0, 7, 6]], np.int32)
    width = 32 if mode == "mxfp4" else 64
    cache = rng.integers(0, 256, (2, 4, 1, width), dtype=np.uint8)
    scale_dtype = np.uint8 if mode.startswith("mx") else np.float32
    scale = np.zeros((2, 4, 1, 2 if mode.startswith("mx") else 1), scale_dtype)
    kw = {"quant_mode": mode, "round_scale": mode != "fp8"}
    if mode == "hifloat8":
        kw["x_scale"] = 0.75
    kw["dtype"] = {"fp8": "float8_e4m3fn", "mxfp8": "float8_e5m2", "mxfp4": "float4_e2m1"}.get(mode)
    want_c, want_s = cache.copy(), scale.copy()
    kvscatter.indexer_quant_cache(want_c, want_s, x, slots, **kw)
    f = jax.jit(lambda *a: kj.indexer_quant_cache(*a, **kw), donate_argnums=(0, 1))
    c, s = f(cache, scale, x, slots)
    same(c, want_c)
    same(s, want_s)


def test_vmap_new_operators_sequentially(rng):
    n = 3
    key = rng.standard_normal((n, 2, 1, 8)).astype(np.float32)
    cache = np.zeros((n, 2, 2, 1, 8), np.float32)
    slots = np.array([[0, 3], [1, -1], [2, 2]], np.int32)
    got = jax.vmap(kj.scatter_pa_cache)(key, cache, slots)
    tables = np.array([[[1, 0]], [[0, 1]], [[1, 1]]], np.int32)
    lens = np.array([[3], [2], [4]], np.int32)
    out = np.zeros((n, 4, 1, 8), np.float32)
    gathered, _ = jax.vmap(lambda c, t, l, o: kj.gather_pa_kv_cache(c, None, t, l, o, None))(
        got, tables, lens, out)
    x = rng.standard_normal((n, 2, 32)).astype(np.float16)
    qc, qs = jax.vmap(lambda c, s, xx, sl: kj.indexer_quant_cache(c, s, xx, sl, quant_mode="hifloat8"))(
        np.zeros((n, 1, 2, 1, 32), np.uint8), np.zeros((n, 1, 2, 1, 1), np.float32), x,
        np.array([[0, 1], [1, -1], [1, 0]], np.int32))
    for i in range(n):
        want = cache[i].copy()
        kvscatter.scatter_pa_cache(key[i], want, slots[i])
        same(got[i], want)
        want_out = out[i].copy()
        kvscatter.gather_pa_kv_cache(want, None, tables[i], lens[i], want_out, None)
        same(gathered[i], want_out)
        wc, ws = np.zeros((1, 2, 1, 32), np.uint8), np.zeros((1, 2, 1, 1), np.float32)
        kvscatter.indexer_quant_cache(wc, ws, x[i], np.array([[0, 1], [1, -1], [1, 0]], np.int32)[i],
                                      quant_mode="hifloat8")
        same(qc[i], wc)


# ---- paged_kv_write, paged_cache_gather, paged_latent_write against the NumPy path ----------

def test_paged_kv_write_matches_numpy(rng):
    key = rng.standard_normal((3, 2, 8)).astype(np.float32)
    value = rng.standard_normal((3, 2, 8)).astype(np.float32)
    slots = np.array([7, 2, -1], np.int32)
    for kw, dtype, shape in (({}, np.float32, (2, 4, 2, 8)),
                             ({"format": "fp8_e4m3", "layout": "HND",
                               "k_scale": np.array([0.5, 0.25], np.float32),
                               "v_scale": np.array([2.0, 1.0], np.float32)}, np.uint8, (2, 2, 4, 8))):
        kc = np.zeros(shape, dtype)
        vc = np.ones(shape, dtype)
        want_k, want_v = kc.copy(), vc.copy()
        kvscatter.paged_kv_write(key, value, want_k, want_v, slots, **kw)
        f = jax.jit(lambda *a, kw=kw: kj.paged_kv_write(*a, **kw), donate_argnums=(2, 3))
        k, v = f(key, value, kc, vc, slots)
        same(k, want_k)
        same(v, want_v)
    with pytest.raises(Exception, match="slot_mapping"):
        jax.block_until_ready(kj.paged_kv_write(key, value, np.zeros((2, 4, 2, 8), np.float32),
                                                np.zeros((2, 4, 2, 8), np.float32),
                                                np.array([8, 0, 0], np.int32))[0])


def test_paged_cache_gather_matches_numpy(rng):
    table = np.array([[2, 0], [1, 0]], np.int32)
    cu = np.array([0, 3, 6], np.int32)
    src = rng.standard_normal((3, 4, 2, 8)).astype(ml_dtypes.bfloat16)
    dst = rng.standard_normal((7, 2, 8)).astype(ml_dtypes.bfloat16)
    want = dst.copy()
    kvscatter.paged_cache_gather(src, want, table, cu)
    same(jax.jit(kj.paged_cache_gather, donate_argnums=(1,))(src, jnp.asarray(dst), table, cu), want)
    codes = rng.integers(0, 120, (3, 4, 16), dtype=np.uint8)
    kw = {"format": "fp8_e5m2", "scale": np.array([0.5], np.float32),
          "token_to_seq": np.array([0, 0, 0, 1, 1, 1], np.int32), "num_tokens": 5,
          "seq_starts": np.array([1, 2], np.int32)}
    want = np.zeros((6, 16), np.float32)
    kvscatter.paged_cache_gather(codes, want, table, cu, **kw)
    same(kj.paged_cache_gather(codes, np.zeros((6, 16), np.float32), table, cu, **kw), want)
    want = np.zeros((6, 2, 8), ml_dtypes.bfloat16)
    kvscatter.paged_cache_gather(src, want, table, cu, batch_size=1)
    same(kj.paged_cache_gather(src, np.zeros((6, 2, 8), ml_dtypes.bfloat16), table, cu, batch_size=1),
         want)


def test_paged_latent_write_matches_numpy(rng):
    kv_c = rng.standard_normal((3, 16)).astype(np.float16)
    k_pe = rng.standard_normal((3, 8)).astype(np.float16)
    slots = np.array([5, -1, 0], np.int64)
    for kw, dtype in (({}, np.float16), ({"format": "fp8_e5m2", "scale": np.array([0.25], np.float32)},
                                         np.uint8)):
        cache = np.zeros((2, 4, 24), dtype)
        want = cache.copy()
        kvscatter.paged_latent_write(kv_c, k_pe, want, slots, **kw)
        got = jax.jit(lambda *a, kw=kw: kj.paged_latent_write(*a, **kw), donate_argnums=(2,))(
            kv_c, k_pe, cache, slots.astype(np.int32))
        same(got, want)
    got = jax.vmap(lambda c, p, k, s: kj.paged_latent_write(c, p, k, s))(
        np.stack([kv_c, kv_c]), np.stack([k_pe, -k_pe]), np.zeros((2, 2, 4, 24), np.float16),
        np.array([[5, -1, 0], [1, 2, 3]], np.int32))
    for i, (sign, sl) in enumerate(((1, [5, -1, 0]), (-1, [1, 2, 3]))):
        want = np.zeros((2, 4, 24), np.float16)
        kvscatter.paged_latent_write(kv_c, sign * k_pe, want, np.array(sl))
        same(got[i], want)
