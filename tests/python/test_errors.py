"""Every error path: ValueError / TypeError carrying a message that names the argument and the
offending value, and caches left bit-identical (docs/semantics.md, 'All or nothing')."""

import kvscatter
import ml_dtypes
import numpy as np
import pytest
from needs import need


def expect_error(exc_type, fn, *needles, caches=(), status=None):
    before = [np.array(c, copy=True) for c in caches]
    with pytest.raises(exc_type) as info:
        fn()
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    if status is not None:
        assert isinstance(info.value, kvscatter.Error)
        assert info.value.status == status
    for c, b in zip(caches, before):
        np.testing.assert_array_equal(np.asarray(c).view(np.uint8), b.view(np.uint8))
    return message


INVALID, NULL = 161002, 161001


# ---- argument conversion (the Python layer) --------------------------------------------------


@pytest.fixture
def kv():
    kc = np.arange(2 * 8 * 2 * 4, dtype=np.float32).reshape(2, 8, 2, 4)
    vc = -kc
    new = np.ones((2, 3, 2, 4), np.float32)
    return kc, vc, new


def test_not_an_array(kv):
    kc, vc, new = kv
    expect_error(TypeError, lambda: kvscatter.kv_cache_update(kc, vc, new.tolist(), new, 0),
                 "new_keys", "list", caches=(kc, vc))
    expect_error(TypeError, lambda: kvscatter.kv_cache_update(None, vc, new, new, 0),
                 "key_cache", "None", caches=(vc,))


def test_unsupported_element_types(kv):
    kc, vc, new = kv
    for bad in (new.astype(np.float64), new.astype(bool), new.astype(np.complex64), new.astype(np.uint64)):
        expect_error(TypeError, lambda: kvscatter.kv_cache_update(kc, vc, bad, new, 0),
                     "new_keys", "unsupported element type", bad.dtype.name, caches=(kc, vc))
    f4 = np.zeros((2, 3, 2, 4), ml_dtypes.float4_e2m1fn)
    expect_error(TypeError, lambda: kvscatter.kv_cache_update(kc, vc, f4, new, 0), "new_keys",
                 "float4_e2m1fn", "packs two per byte", caches=(kc, vc))


def test_byte_swapped(kv):
    kc, vc, new = kv
    swapped = new.astype(">f4")
    expect_error(TypeError, lambda: kvscatter.kv_cache_update(kc, vc, swapped, new, 0),
                 "new_keys", "byte order", caches=(kc, vc))


def test_stride_not_a_multiple_of_the_element_size(kv):
    kc, vc, new = kv
    odd = np.ndarray((2, 3, 2, 4), np.float32, buffer=np.zeros(400, np.uint8), offset=0, strides=(98, 32, 16, 4))
    expect_error(ValueError, lambda: kvscatter.kv_cache_update(kc, vc, odd, new, 0),
                 "new_keys", "stride of axis 0 is 98 bytes", "element size", caches=(kc, vc))


def test_read_only_cache(kv):
    kc, vc, new = kv
    kc.setflags(write=False)
    expect_error(ValueError, lambda: kvscatter.kv_cache_update(kc, vc, new, new, 0),
                 "key_cache is read-only", caches=(kc, vc))
    bc = np.broadcast_to(vc, vc.shape)  # broadcast views are read-only too
    expect_error(ValueError, lambda: kvscatter.kv_cache_update(vc.copy(), bc, new, new, 0),
                 "value_cache is read-only", caches=(vc,))


class _InterfaceOnly(np.ndarray):
    """An ndarray that hides __array_struct__, so the binding reads __array_interface__."""

    @property
    def __array_struct__(self):
        raise AttributeError("__array_struct__")


def test_array_interface_fallback(kv):
    kc, vc, new = kv
    k2, v2 = kc.copy().view(_InterfaceOnly), vc.copy().view(_InterfaceOnly)
    kvscatter.kv_cache_update(k2, v2, new.view(_InterfaceOnly), new, 1)
    kvscatter.kv_cache_update(kc, vc, new, new, 1)
    np.testing.assert_array_equal(np.asarray(k2), kc)
    np.testing.assert_array_equal(np.asarray(v2), vc)
    k2.setflags(write=False)
    expect_error(ValueError, lambda: kvscatter.kv_cache_update(k2, v2, new, new, 0),
                 "key_cache is read-only", caches=(k2, v2))
    odd = np.ndarray((2, 3, 2, 4), np.float32, buffer=np.zeros(400, np.uint8), offset=0,
                     strides=(98, 32, 16, 4)).view(_InterfaceOnly)
    expect_error(ValueError, lambda: kvscatter.kv_cache_update(kc, vc, odd, new, 0),
                 "new_keys", "stride of axis 0 is 98 bytes", caches=(kc, vc))


def test_jax_array_as_cache(kv):
    jnp = need("jax.numpy")
    kc, vc, new = kv
    jk = jnp.asarray(kc)
    expect_error(TypeError, lambda: kvscatter.kv_cache_update(jk, vc, new, new, 0),
                 "key_cache is a JAX array", "kvscatter.jax", caches=(vc,))
    # As a read-only input a JAX array is fine (DLPack, no copy).
    kvscatter.kv_cache_update(kc, vc, jnp.asarray(new), jnp.asarray(new), 5)
    np.testing.assert_array_equal(kc[:, 5:], 1)


def test_dtype_keyword(kv):
    kc, vc, new = kv
    expect_error(ValueError, lambda: kvscatter.kv_cache_update(kc, vc, new, new, 0, dtype="bf16"),
                 "unknown element type", "bf16", caches=(kc, vc))
    expect_error(ValueError, lambda: kvscatter.kv_cache_update(kc, vc, new, new, 0, dtype="hifloat8"),
                 'dtype="hifloat8"', "8-bit", "key_cache is float32", caches=(kc, vc))
    expect_error(TypeError, lambda: kvscatter.kv_cache_update(kc, vc, new, new, 0, dtype=3.5),
                 "dtype", caches=(kc, vc))


def test_position_type(kv):
    kc, vc, new = kv
    for bad in (1.5, "3", True, None):
        expect_error(TypeError, lambda: kvscatter.kv_cache_update(kc, vc, new, new, bad),
                     "position", caches=(kc, vc))


# ---- kv_cache_update (library) ---------------------------------------------------------------


def test_kv_cache_update_library_errors(kv):
    kc, vc, new = kv
    for pos in (-1, 6, 1 << 40):
        expect_error(kvscatter.Error, lambda: kvscatter.kv_cache_update(kc, vc, new, new, pos),
                     "position", str(pos), caches=(kc, vc), status=INVALID)
    expect_error(kvscatter.Error,
                 lambda: kvscatter.kv_cache_update(kc, vc, new[:, :, :1], new, 0), "new_keys",
                 caches=(kc, vc), status=INVALID)
    expect_error(kvscatter.Error,
                 lambda: kvscatter.kv_cache_update(kc, vc[:, :4], new, new, 0),
                 "value_cache.shape[1]", caches=(kc, vc), status=INVALID)
    expect_error(kvscatter.Error,
                 lambda: kvscatter.kv_cache_update(kc, vc.astype(np.int16), new, new, 0),
                 "value_cache", "int16", caches=(kc,), status=INVALID)
    expect_error(kvscatter.Error,
                 lambda: kvscatter.kv_cache_update(kc[0], vc[0], new[0], new[0], 0), "key_cache",
                 "4", caches=(kc, vc), status=INVALID)
    expect_error(kvscatter.Error,
                 lambda: kvscatter.kv_cache_update(kc, vc, new.astype(np.int32), new, 0),
                 "new_keys", "int32", caches=(kc, vc), status=INVALID)


# ---- scatter_pa_kv_cache ---------------------------------------------------------------------


@pytest.fixture
def paged():
    rng = np.random.default_rng(7)
    key = rng.standard_normal((20, 2, 8)).astype(np.float16)
    value = rng.standard_normal((20, 2, 8)).astype(np.float16)
    kc = rng.standard_normal((32, 128, 2, 8)).astype(np.float16)
    vc = rng.standard_normal((32, 128, 2, 8)).astype(np.float16)
    return key, value, kc, vc


def test_scatter_slot_out_of_range(paged):
    key, value, kc, vc = paged
    slots = np.arange(20, dtype=np.int32)
    slots[17] = 4096
    msg = expect_error(kvscatter.Error,
                       lambda: kvscatter.scatter_pa_kv_cache(key, value, kc, vc, slots),
                       "slot_mapping[17] = 4096", "[0, 4096)", caches=(kc, vc), status=INVALID)
    assert "32 blocks of 128 slots" in msg


def test_scatter_bad_modes(paged):
    key, value, kc, vc = paged
    slots = np.arange(20, dtype=np.int64)
    for kw, needle in (({"cache_mode": "NZ"}, '"NZ"'), ({"scatter_mode": "rope"}, '"rope"'),
                       ({"cache_mode": "PA_NZ", "scatter_mode": "Nct"}, "PA_NZ")):
        expect_error(kvscatter.Error,
                     lambda: kvscatter.scatter_pa_kv_cache(key, value, kc, vc, slots, **kw),
                     needle, caches=(kc, vc), status=INVALID)
    expect_error(TypeError, lambda: kvscatter.scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode=1),
                 "cache_mode", caches=(kc, vc))
    expect_error(ValueError, lambda: kvscatter.scatter_pa_kv_cache(
        key, value, kc, vc, slots, scatter_mode="Nct", strides=[1, 2, 3]), "strides", "2 entries",
        caches=(kc, vc))
    expect_error(TypeError, lambda: kvscatter.scatter_pa_kv_cache(
        key, value, kc, vc, slots, scatter_mode="Nct", offsets=[0, "1"]), "offsets[1]",
        caches=(kc, vc))
    expect_error(TypeError, lambda: kvscatter.scatter_pa_kv_cache(
        key, value, kc, vc, slots, scatter_mode="Nct", offsets=5), "offsets", caches=(kc, vc))
    expect_error(kvscatter.Error, lambda: kvscatter.scatter_pa_kv_cache(
        key, value, kc, vc, slots, strides=[4, 4]), "strides", "Nct", caches=(kc, vc),
        status=INVALID)


def test_scatter_shapes_and_dtypes(paged):
    key, value, kc, vc = paged
    slots = np.arange(20, dtype=np.int32)
    cases = [
        ((key, value, kc, vc, slots[:19]), "slot_mapping"),
        ((key, value.astype(np.float32), kc, vc.astype(np.float32), slots), "value"),
        ((key, value, kc[:, :, :1], vc, slots), "key_cache"),
        ((key, value, kc, vc, slots.astype(np.float32)), "slot_mapping"),
        ((key, value, kc, vc[:16], slots), "value_cache"),
        ((key[:, :, None], value, kc, vc, slots), "key"),
    ]
    for args, needle in cases:
        expect_error(kvscatter.Error, lambda: kvscatter.scatter_pa_kv_cache(*args), needle,
                     caches=(kc, vc), status=INVALID)
    expect_error(kvscatter.Error, lambda: kvscatter.scatter_pa_kv_cache(key, value, kc, None, slots),
                 "value_cache", caches=(kc,), status=NULL)


def test_scatter_compress_value_errors():
    key = np.zeros((6, 1, 16), np.float16)
    kc = np.ones((2, 4, 1, 16), np.float16)
    base = dict(compress_lens=np.array([2, 1], np.int32), compress_seq_offsets=np.array([1, 0], np.int32),
                seq_lens=np.array([3, 3], np.int32))
    slots = np.array([0, 4], np.int32)
    cases = [
        (dict(base, seq_lens=np.array([3, 2], np.int32)), "sum(seq_lens)"),
        (dict(base, compress_lens=np.array([-1, 1], np.int32)), "compress_lens[0] = -1"),
        (dict(base, compress_seq_offsets=np.array([1, 4], np.int32)), "compress_seq_offsets[1] = 4"),
        (dict(base, compress_lens=np.array([3, 1], np.int32)), "compress_seq_offsets[0] + compress_lens[0]"),
    ]
    for kw, needle in cases:
        expect_error(kvscatter.Error, lambda: kvscatter.scatter_pa_kv_cache(
            key, None, kc, None, slots, scatter_mode="Rope", **kw), needle, caches=(kc,), status=INVALID)
    # A run that would end past the last slot: nothing is written, the first run included.
    expect_error(kvscatter.Error, lambda: kvscatter.scatter_pa_kv_cache(
        key, None, kc, None, np.array([0, 7], np.int32), scatter_mode="Rope", **base),
        "slot_mapping[1] = 7", caches=(kc,), status=INVALID)
    expect_error(kvscatter.Error, lambda: kvscatter.scatter_pa_kv_cache(
        key, None, kc, None, slots, scatter_mode="Rope", compress_lens=base["compress_lens"],
        seq_lens=base["seq_lens"]), "compress_seq_offsets", caches=(kc,), status=NULL)


# ---- scatter_pa_kv_cache_with_k_scale --------------------------------------------------------


@pytest.fixture
def kscale():
    e4 = ml_dtypes.float8_e4m3fn
    key = np.ones((3, 2, 4), e4)
    kc = np.zeros((2, 2, 4, 4), e4)
    vc = np.zeros((2, 2, 4, 4), e4)
    ks = np.ones((3, 2), np.float32)
    ksc = np.zeros((2, 2, 4, 1), np.float32)
    return key, kc, vc, ks, ksc


def test_with_k_scale_errors(kscale):
    key, kc, vc, ks, ksc = kscale
    slots = np.array([0, 1, 2], np.int32)
    caches = (kc, vc, ksc)
    expect_error(kvscatter.Error, lambda: kvscatter.scatter_pa_kv_cache_with_k_scale(
        key, key, kc, vc, slots, ks, ksc, cache_layout="BSND"), '"BSND"', caches=caches, status=INVALID)
    expect_error(TypeError, lambda: kvscatter.scatter_pa_kv_cache_with_k_scale(
        key, key, kc, vc, slots, ks, ksc, cache_layout=0), "cache_layout", caches=caches)
    cases = [
        ((key.astype(np.float32), key, kc, vc, slots, ks, ksc), "key"),
        ((key, key, kc, vc, slots, ks[:2], ksc), "key_scale"),
        ((key, key, kc, vc, slots, ks, ksc[..., :0]), "key_scale_cache"),
        ((key, key, kc, vc[:1], slots, ks, ksc), "value_cache"),
        ((key, key, kc, vc, slots, ks.astype(np.float16), ksc), "key_scale"),
    ]
    for args, needle in cases:
        expect_error(kvscatter.Error, lambda: kvscatter.scatter_pa_kv_cache_with_k_scale(*args),
                     needle, caches=caches, status=INVALID)


# ---- kv_compress_epilog ----------------------------------------------------------------------


@pytest.fixture
def epilog():
    x = np.ones((3, 128), ml_dtypes.bfloat16)
    cache = np.full((2, 2, 1, 256), 0xEE, np.uint8)
    return cache, x


def test_kv_compress_epilog_errors(epilog):
    cache, x = epilog
    ok = np.array([0, 1, 2], np.int32)
    for slots, needle in ((np.array([0, -2, 1], np.int32), "slot_mapping[1] = -2"),
                          (np.array([0, 1, 4], np.int64), "slot_mapping[2] = 4")):
        expect_error(kvscatter.Error, lambda: kvscatter.kv_compress_epilog(cache, x, slots), needle,
                     caches=(cache,), status=INVALID)
    for mode in ("fp4", 3, -1):
        expect_error(kvscatter.Error, lambda: kvscatter.kv_compress_epilog(cache, x, ok, quant_mode=mode),
                     "quant_mode", str(mode), caches=(cache,), status=INVALID)
    for mode in (1.0, True, None):
        expect_error(TypeError, lambda: kvscatter.kv_compress_epilog(cache, x, ok, quant_mode=mode),
                     "quant_mode", caches=(cache,))
    for mode in ("1", " 2 "):  # a name or an int; digit strings are the C ABI's
        expect_error(ValueError, lambda: kvscatter.kv_compress_epilog(cache, x, ok, quant_mode=mode),
                     "or an int 0-2", f"got '{mode}'", caches=(cache,))
    expect_error(kvscatter.Error, lambda: kvscatter.kv_compress_epilog(
        cache, x, ok, quant_mode=2, quant_group_size=48), "quant_group_size", "48", caches=(cache,),
        status=INVALID)
    expect_error(kvscatter.Error, lambda: kvscatter.kv_compress_epilog(
        cache, np.ones((3, 96), ml_dtypes.bfloat16), ok), "96", caches=(cache,), status=INVALID)
    expect_error(kvscatter.Error, lambda: kvscatter.kv_compress_epilog(
        cache, x.astype(np.float32), ok), "x", "float32", caches=(cache,), status=INVALID)
    expect_error(kvscatter.Error, lambda: kvscatter.kv_compress_epilog(
        cache[..., :100], x, ok), "cache", "193", caches=(cache,), status=INVALID)
    expect_error(kvscatter.Error, lambda: kvscatter.kv_compress_epilog(
        cache, x, ok[:2]), "slot_mapping", caches=(cache,), status=INVALID)


def test_scatter_layout_errors():
    key = np.zeros((4, 1, 8), np.float16)
    kc = np.ones((2, 4, 1, 8), np.float16)
    slots = np.arange(4, dtype=np.int32)
    expect_error(kvscatter.Error, lambda: kvscatter.scatter_pa_kv_cache(
        key, None, kc, None, slots, scatter_mode="Nct", strides=[8, 8], offsets=[4, 0]),
        "key Nct row 3", "past the end of the buffer", caches=(kc,), status=INVALID)
    nz = np.ones((2, 1, 4, 16), np.float16)
    expect_error(kvscatter.Error, lambda: kvscatter.scatter_pa_kv_cache(
        key, None, nz, None, slots, cache_mode="PA_NZ"), "multiple of 32 bytes", caches=(nz,),
        status=INVALID)
    key4 = np.zeros((2, 3, 1, 8), np.float16)
    expect_error(kvscatter.Error, lambda: kvscatter.scatter_pa_kv_cache(
        key4, None, kc, None, np.zeros((2, 1), np.int32), compress_lens=np.ones((2, 1), np.int32),
        seq_lens=np.array([3, 4], np.int32)), "seq_lens[1] = 4", caches=(kc,), status=INVALID)


def test_empty_inputs_are_a_no_op():
    kc = np.ones((2, 4, 1, 8), np.float16)
    before = kc.copy()
    kvscatter.scatter_pa_kv_cache(np.zeros((0, 1, 8), np.float16), None, kc, None,
                                  np.zeros(0, np.int32))
    cache = np.full((2, 2, 1, 256), 0xEE, np.uint8)
    kvscatter.kv_compress_epilog(cache, np.zeros((0, 128), ml_dtypes.bfloat16), np.zeros(0, np.int32))
    np.testing.assert_array_equal(kc, before)
    assert (cache == 0xEE).all()
