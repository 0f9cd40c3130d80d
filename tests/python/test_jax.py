"""kvscatter.jax: XLA FFI custom calls under jax.jit, donation and shard_map."""

import functools

import numpy as np
import pytest
import refs
from needs import need

jax = need("jax")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import kvscatter.jax as kj  # noqa: E402


@pytest.fixture(params=["auto", "kvscatter", "xla"])
def update(request):
    """kv_cache_update by each method: the library's kernel, XLA's own update, and the pick."""
    return functools.partial(kj.kv_cache_update, method=request.param)


def reference_update(key_cache, value_cache, new_keys, new_values, position):
    """The plain JAX update it replaces: dynamic_update_slice with a traced position."""
    k = jax.lax.dynamic_update_slice(key_cache, new_keys.astype(key_cache.dtype), (0, position, 0, 0))
    v = jax.lax.dynamic_update_slice(value_cache, new_values.astype(value_cache.dtype), (0, position, 0, 0))
    return {"key_cache": k, "value_cache": v, "length": position + new_keys.shape[1]}


def assert_same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def assert_same_result(got, want):
    assert set(got) == {"key_cache", "value_cache", "length"}
    assert_same(got["key_cache"], want["key_cache"])
    assert_same(got["value_cache"], want["value_cache"])
    assert got["length"].dtype == jnp.int32 and got["length"].shape == ()
    assert int(got["length"]) == int(want["length"])


WORKED_EXAMPLES = [
    # (key_cache, value_cache, new_keys, new_values, position, expected output)
    ([[[[0, 0]], [[0, 0]], [[0, 0]], [[0, 0]]]], [[[[0, 0]], [[0, 0]], [[0, 0]], [[0, 0]]]],
     [[[[1, 2]]]], [[[[3, 4]]]], 0,
     {"key_cache": [[[[1.0, 2.0]], [[0.0, 0.0]], [[0.0, 0.0]], [[0.0, 0.0]]]],
      "value_cache": [[[[3.0, 4.0]], [[0.0, 0.0]], [[0.0, 0.0]], [[0.0, 0.0]]]], "length": 1}),
    ([[[[1, 1]], [[2, 2]], [[9, 9]], [[9, 9]]]], [[[[-1, -1]], [[-2, -2]], [[9, 9]], [[9, 9]]]],
     [[[[3, 3]], [[4, 4]]]], [[[[-3, -3]], [[-4, -4]]]], 2,
     {"key_cache": [[[[1.0, 1.0]], [[2.0, 2.0]], [[3.0, 3.0]], [[4.0, 4.0]]]],
      "value_cache": [[[[-1.0, -1.0]], [[-2.0, -2.0]], [[-3.0, -3.0]], [[-4.0, -4.0]]]], "length": 4}),
    ([[[[1], [2]], [[0], [0]], [[0], [0]]], [[[5], [6]], [[0], [0]], [[0], [0]]]],
     [[[[0.1], [0.2]], [[0], [0]], [[0], [0]]], [[[0.5], [0.6]], [[0], [0]], [[0], [0]]]],
     [[[[3], [4]]], [[[7], [8]]]], [[[[0.3], [0.4]]], [[[0.7], [0.8]]]], 1,
     {"key_cache": [[[[1.0], [2.0]], [[3.0], [4.0]], [[0.0], [0.0]]], [[[5.0], [6.0]], [[7.0], [8.0]], [[0.0], [0.0]]]],
      "value_cache": [[[[0.1], [0.2]], [[0.3], [0.4]], [[0.0], [0.0]]], [[[0.5], [0.6]], [[0.7], [0.8]], [[0.0], [0.0]]]],
      "length": 2}),
]


@pytest.mark.parametrize("example", range(len(WORKED_EXAMPLES)))
@pytest.mark.parametrize("cache_dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
def test_worked_examples_under_jit(update, example, cache_dtype):
    kc, vc, nk, nv, pos, expected = WORKED_EXAMPLES[example]
    kc, vc = jnp.asarray(kc, cache_dtype), jnp.asarray(vc, cache_dtype)
    nk, nv = jnp.asarray(nk, jnp.float32), jnp.asarray(nv, jnp.float32)
    out = jax.jit(update)(kc, vc, nk, nv, jnp.int32(pos))
    assert out["key_cache"].dtype == cache_dtype and out["key_cache"].shape == kc.shape
    for name in ("key_cache", "value_cache"):
        want = jnp.asarray(expected[name], jnp.float32).astype(cache_dtype)
        assert_same(out[name], want)
    assert int(out["length"]) == expected["length"] and out["length"].dtype == jnp.int32
    assert_same_result(out, jax.jit(reference_update)(kc, vc, nk, nv, jnp.int32(pos)))


@pytest.mark.parametrize("cache_dtype", [jnp.float32, jnp.bfloat16, jnp.float16],
                         ids=["float32", "bfloat16", "float16"])
def test_random_positions_match_dynamic_update_slice(update, rng, cache_dtype):
    ours, theirs = jax.jit(update), jax.jit(reference_update)
    for b, s, h, d, L in ((2, 16, 3, 8, 3), (1, 7, 2, 5, 7), (3, 33, 1, 64, 1)):
        kc = jnp.asarray(rng.standard_normal((b, s, h, d)), jnp.float32).astype(cache_dtype)
        vc = jnp.asarray(rng.standard_normal((b, s, h, d)), jnp.float32).astype(cache_dtype)
        nk = jnp.asarray(rng.standard_normal((b, L, h, d)) * 300, jnp.float32)
        nv = jnp.asarray(rng.standard_normal((b, L, h, d)) * 1e-3, jnp.float32)
        # Every valid start, and out-of-range ones (clamped; negative ones count from the end).
        positions = list(range(-s - 3, s + 4)) + [int(v) for v in rng.integers(-2**31, 2**31 - L, 8)]
        for pos in positions:
            assert_same_result(ours(kc, vc, nk, nv, jnp.int32(pos)), theirs(kc, vc, nk, nv, jnp.int32(pos)))


@pytest.mark.parametrize("cache_dtype", [jnp.bfloat16, jnp.float16], ids=["bfloat16", "float16"])
def test_nan_payloads_by_method(cache_dtype):
    # The one documented difference between the methods: a float32 NaN into a bfloat16 cache.
    bits = np.array([0x7FA00000, 0xFFA00000, 0x7FBFFFFF, 0x7FC00001], np.uint32)
    new = jnp.asarray(bits.view(np.float32).reshape(1, 4, 1, 1))
    cache = jnp.zeros((1, 6, 1, 1), cache_dtype)
    got = {m: np.asarray(kj.kv_cache_update(cache, cache, new, new, 1, method=m)["key_cache"])
           .view(np.uint16)[0, 1:5, 0, 0].tolist() for m in ("xla", "kvscatter")}
    if cache_dtype == jnp.float16:
        assert got["kvscatter"] == got["xla"]
    else:
        assert got["xla"] == [0x7FC0, 0xFFC0, 0x7FC0, 0x7FC0]
        assert got["kvscatter"] == [0x7FE0, 0xFFE0, 0x7FFF, 0x7FC0]


def test_new_vectors_in_cache_dtype_and_python_position(update, rng):
    kc = jnp.asarray(rng.standard_normal((2, 9, 2, 4)), jnp.bfloat16)
    nk = jnp.asarray(rng.standard_normal((2, 2, 2, 4)), jnp.bfloat16)
    out = update(kc, kc, nk, nk, 4)  # eager, Python int position
    assert_same_result(out, reference_update(kc, kc, nk, nk, jnp.int32(4)))


def test_donated_caches_are_updated_in_place(update, rng):
    update = jax.jit(update, donate_argnums=(0, 1))
    kc = jnp.asarray(rng.standard_normal((2, 1024, 4, 64)), jnp.bfloat16)
    vc = jnp.asarray(rng.standard_normal((2, 1024, 4, 64)), jnp.bfloat16)
    expected = reference_update(kc, vc, jnp.ones((2, 1, 4, 64)), jnp.ones((2, 1, 4, 64)), jnp.int32(0))
    for pos in range(3):
        k_ptr, v_ptr = kc.unsafe_buffer_pointer(), vc.unsafe_buffer_pointer()
        new = jnp.full((2, 1, 4, 64), pos + 1, jnp.float32)
        out = update(kc, vc, new, new, jnp.int32(pos))
        # Same buffers: XLA aliased the donated caches to the outputs, no copy of the cache.
        assert out["key_cache"].unsafe_buffer_pointer() == k_ptr
        assert out["value_cache"].unsafe_buffer_pointer() == v_ptr
        assert kc.is_deleted() and vc.is_deleted()
        kc, vc = out["key_cache"], out["value_cache"]
    assert_same(kc[:, 3:], expected["key_cache"][:, 3:])
    np.testing.assert_array_equal(np.asarray(kc[0, :3, 0, 0], np.float32), [1, 2, 3])


def test_without_donation_the_input_is_untouched(update, rng):
    kc = jnp.asarray(rng.standard_normal((1, 8, 2, 4)), jnp.float32)
    before = np.asarray(kc).copy()
    out = jax.jit(update)(kc, kc, jnp.ones((1, 2, 2, 4)), jnp.ones((1, 2, 2, 4)), jnp.int32(3))
    np.testing.assert_array_equal(np.asarray(kc), before)
    assert out["key_cache"].unsafe_buffer_pointer() != kc.unsafe_buffer_pointer()


def test_trace_time_errors():
    kc = jnp.zeros((1, 4, 1, 2))
    with pytest.raises(ValueError, match="new_keys"):
        kj.kv_cache_update(kc, kc, jnp.zeros((1, 1, 2, 2)), jnp.zeros((1, 1, 2, 2)), 0)
    with pytest.raises(ValueError, match="do not fit"):
        kj.kv_cache_update(kc, kc, jnp.zeros((1, 5, 1, 2)), jnp.zeros((1, 5, 1, 2)), 0)
    with pytest.raises(TypeError, match="key_cache dtype"):
        kj.kv_cache_update(kc.astype(jnp.int32), kc, jnp.zeros((1, 1, 1, 2)), jnp.zeros((1, 1, 1, 2)), 0)
    with pytest.raises(TypeError, match="position"):
        kj.kv_cache_update(kc, kc, jnp.zeros((1, 1, 1, 2)), jnp.zeros((1, 1, 1, 2)), 1.5)


def test_auto_method_leaves_decode_steps_to_xla_and_prefills_to_the_library():
    # The rows of both caches: 2 x L x 8 x 128 x 4 bytes; the limit falls between 511 and 512.
    assert 2 * 511 * 8 * 128 * 4 < kj.XLA_UPDATE_MAX_BYTES <= 2 * 512 * 8 * 128 * 4
    kc = jnp.zeros((1, 1024, 8, 128))

    def lowered(L, **kw):
        new = jnp.ones((1, L, 8, 128))
        fn = jax.jit(functools.partial(kj.kv_cache_update, **kw), donate_argnums=(0, 1))
        return fn.lower(kc, kc, new, new, jnp.int32(0)).as_text()

    for L, kw, custom_call in ((1, {}, False), (511, {}, False), (512, {}, True),
                               (1024, {}, True), (1, {"method": "kvscatter"}, True),
                               (1024, {"method": "xla"}, False)):
        hlo = lowered(L, **kw)
        assert ("kvscatter_kv_cache_update" in hlo) == custom_call, (L, kw)
        assert ("dynamic_update_slice" in hlo) != custom_call, (L, kw)
    with pytest.raises(ValueError, match="method must be 'auto', 'kvscatter' or 'xla', got 'fast'"):
        kj.kv_cache_update(kc, kc, jnp.ones((1, 1, 8, 128)), jnp.ones((1, 1, 8, 128)), 0,
                           method="fast")


def four_device_mesh():
    if jax.device_count() < 4:
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=4 before jax is imported")
    return jax.make_mesh((4,), ("heads",))


def test_kv_cache_update_inside_shard_map(rng):
    mesh = four_device_mesh()
    spec = P(None, None, "heads", None)  # (B, S, H, D) sharded along the heads
    sharding = NamedSharding(mesh, spec)
    kc, vc = (jax.device_put(jnp.asarray(rng.standard_normal((2, 16, 8, 4)), jnp.bfloat16), sharding)
              for _ in range(2))
    nk, nv = (jax.device_put(jnp.asarray(rng.standard_normal((2, 3, 8, 4)), jnp.float32), sharding)
              for _ in range(2))
    step = jax.jit(jax.shard_map(kj.kv_cache_update, mesh=mesh,
                                 in_specs=(spec, spec, spec, spec, P()),
                                 out_specs={"key_cache": spec, "value_cache": spec, "length": P()}),
                   donate_argnums=(0, 1))
    for pos in (5, -2, 40):
        want = reference_update(kc, vc, nk, nv, jnp.int32(pos))
        ptrs = [s.data.unsafe_buffer_pointer() for s in kc.addressable_shards]
        out = step(kc, vc, nk, nv, jnp.int32(pos))
        assert out["key_cache"].sharding.spec == spec
        assert len(out["key_cache"].addressable_shards) == 4
        # Each device updated its own shard of the donated cache in place.
        assert [s.data.unsafe_buffer_pointer() for s in out["key_cache"].addressable_shards] == ptrs
        assert_same_result(out, want)
        kc, vc = out["key_cache"], out["value_cache"]


# ---- scatter_pa_kv_cache ---------------------------------------------------------------------


def paged_case(rng, t=12, nh=4, dk=8, dv=6, nb=5, bs=4, dtype=np.float32):
    key = rng.standard_normal((t, nh, dk)).astype(dtype)
    value = rng.standard_normal((t, nh, dv)).astype(dtype)
    kc = rng.standard_normal((nb, bs, nh, dk)).astype(dtype)
    vc = rng.standard_normal((nb, bs, nh, dv)).astype(dtype)
    slots = rng.permutation(nb * bs)[:t]
    slots[::5] = -1
    return key, value, kc, vc, slots.astype(np.int32)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, jnp.float8_e4m3fn, np.int8],
                         ids=["float32", "bfloat16", "float8_e4m3fn", "int8"])
def test_scatter_norm_under_jit(rng, dtype):
    scatter = jax.jit(kj.scatter_pa_kv_cache)
    for _ in range(3):
        key, value, kc, vc, slots = paged_case(rng, dtype=dtype)
        want_k, want_v = refs.scatter_pa_kv_cache(key, value, kc, vc, slots)
        k, v = scatter(key, value, kc, vc, slots)
        assert_same(k, want_k)
        assert_same(v, want_v)


def test_scatter_key_only_and_donation(rng):
    key, _, kc, _, slots = paged_case(rng)
    want_k, _ = refs.scatter_pa_kv_cache(key, None, kc, None, slots)
    kc = jnp.asarray(kc)
    ptr = kc.unsafe_buffer_pointer()
    k, v = jax.jit(kj.scatter_pa_kv_cache, donate_argnums=(2,))(key, None, kc, None, slots)
    assert v is None
    assert k.unsafe_buffer_pointer() == ptr
    assert_same(k, want_k)


def test_scatter_inside_shard_map(rng):
    mesh = four_device_mesh()
    key, value, kc, vc, slots = paged_case(rng, nh=8)
    want_k, want_v = refs.scatter_pa_kv_cache(key, value, kc, vc, slots)
    tok, cache = P(None, "heads", None), P(None, None, "heads", None)
    f = jax.jit(jax.shard_map(kj.scatter_pa_kv_cache, mesh=mesh,
                              in_specs=(tok, tok, cache, cache, P()), out_specs=(cache, cache)))
    args = [jax.device_put(a, NamedSharding(mesh, s))
            for a, s in ((key, tok), (value, tok), (kc, cache), (vc, cache), (slots, P()))]
    k, v = f(*args)
    assert k.sharding.spec == cache
    assert_same(k, want_k)
    assert_same(v, want_v)


def test_scatter_errors(rng):
    key, value, kc, vc, slots = paged_case(rng)
    bad = slots.copy()
    bad[3] = 20
    with pytest.raises(Exception, match=r"slot_mapping\[3\] = 20 is out of range"):
        jax.block_until_ready(jax.jit(kj.scatter_pa_kv_cache)(key, value, kc, vc, bad))
    # Norm-shaped caches in PA_NZ mode: the library's shape message.
    with pytest.raises(Exception, match="PA_NZ"):
        jax.block_until_ready(kj.scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode="PA_NZ"))
    with pytest.raises(ValueError, match="both"):
        kj.scatter_pa_kv_cache(key, value, kc, None, slots)
    with pytest.raises(Exception, match="slot_mapping"):
        jax.block_until_ready(kj.scatter_pa_kv_cache(key, value, kc, vc, slots.astype(np.float32)))
