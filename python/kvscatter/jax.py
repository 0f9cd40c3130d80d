"""JAX entry points of kvscatter: XLA FFI custom calls on the CPU.

The functions are pure (they return the updated caches) and work under ``jax.jit``, with
traced positions and slots, and inside ``jax.shard_map``. The caches are aliased to the outputs
(``input_output_aliases``): donate them (``jax.jit(..., donate_argnums=...)``) and XLA updates
them in place instead of copying the whole cache first.

- :func:`kv_cache_update` is a drop-in for the reference built on
  ``jax.lax.dynamic_update_slice``: the same result bit for bit, out-of-range positions
  included (the start is clamped to ``[0, S - L]``), and ``length = position + L`` (int32).
- :func:`scatter_pa_kv_cache` is the paged scatter in the Norm layout. Slot values are only
  known when the computation runs, so a slot past the cache fails the computation with the
  library's message (an ``XlaRuntimeError``/``JaxRuntimeError``), and nothing is written.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import _kvscatter as _ext

__all__ = ["kv_cache_update", "scatter_pa_kv_cache"]

if not getattr(_ext, "has_jax_ffi", False):
    raise ImportError(
        "this kvscatter build has no JAX support: it was built without the XLA FFI headers. "
        "Reinstall with jax present in the build environment: "
        "pip install --no-build-isolation ."
    )

for _name, _capsule in _ext.jax_ffi_handlers.items():
    jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")

_CACHE_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
_SCATTER_DTYPES = tuple(
    jnp.dtype(t)
    for t in (
        jnp.float32,
        jnp.float16,
        jnp.bfloat16,
        jnp.int8,
        jnp.uint8,
        jnp.int16,
        jnp.uint16,
        jnp.int32,
        jnp.uint32,
        jnp.float8_e5m2,
        jnp.float8_e4m3fn,
    )
)


def _shape_dtype(x):
    return jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x))


def kv_cache_update(key_cache, value_cache, new_keys, new_values, position):
    """Writes ``L`` new tokens at slot ``position`` of ``(B, S, H, D)`` key and value caches.

    ``new_keys`` / ``new_values``: ``(B, L, H, D)``, converted to the cache dtype (float32,
    bfloat16 or float16) with round-to-nearest-even. ``position``: an int32 scalar, traced or
    not; like ``jax.lax.dynamic_update_slice``, a start outside ``[0, S - L]`` is clamped into
    it. Returns ``{"key_cache", "value_cache", "length"}`` with ``length = position + L``.
    """
    key_cache = jnp.asarray(key_cache)
    value_cache = jnp.asarray(value_cache)
    new_keys = jnp.asarray(new_keys)
    new_values = jnp.asarray(new_values)
    for name, a in (("key_cache", key_cache), ("value_cache", value_cache)):
        if a.ndim != 4:
            raise ValueError(f"{name} must be 4-D (B, S, H, D), got shape {a.shape}")
        if a.dtype not in _CACHE_DTYPES:
            raise TypeError(f"{name} dtype must be float32, bfloat16 or float16, got {a.dtype}")
    if value_cache.shape != key_cache.shape:
        raise ValueError(
            f"value_cache shape {value_cache.shape} must equal key_cache shape {key_cache.shape}"
        )
    b, s, h, d = key_cache.shape
    for name, a in (("new_keys", new_keys), ("new_values", new_values)):
        if a.ndim != 4 or (a.shape[0], a.shape[2], a.shape[3]) != (b, h, d):
            raise ValueError(f"{name} must have shape ({b}, L, {h}, {d}), got {a.shape}")
    if new_values.shape != new_keys.shape:
        raise ValueError(
            f"new_values shape {new_values.shape} must equal new_keys shape {new_keys.shape}"
        )
    new_len = new_keys.shape[1]
    if new_len > s:
        raise ValueError(f"new_keys.shape[1] = {new_len} new tokens do not fit {s} cache slots")
    # The reference writes block.astype(cache.dtype); the library converts float32 itself.
    if new_keys.dtype not in (jnp.dtype(jnp.float32), key_cache.dtype):
        new_keys = new_keys.astype(key_cache.dtype)
    if new_values.dtype not in (jnp.dtype(jnp.float32), value_cache.dtype):
        new_values = new_values.astype(value_cache.dtype)
    position = jnp.asarray(position)
    if position.ndim != 0 or not jnp.issubdtype(position.dtype, jnp.integer):
        raise TypeError(f"position must be an integer scalar, got {position.dtype}{list(position.shape)}")
    position = position.astype(jnp.int32)
    call = jax.ffi.ffi_call(
        "kvscatter_kv_cache_update",
        (_shape_dtype(key_cache), _shape_dtype(value_cache)),
        input_output_aliases={0: 0, 1: 1},
    )
    k, v = call(key_cache, value_cache, new_keys, new_values, position)
    return {"key_cache": k, "value_cache": v, "length": position + jnp.int32(new_len)}


def scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping, *, cache_mode="Norm",
                        scatter_mode="None"):
    """Paged scatter, Norm layout: ``cache[s // bs, s % bs] = row`` for each token's slot ``s``.

    ``key`` ``[T, NH, Dk]``, ``value`` ``[T, NH, Dv]`` (or None with ``value_cache`` None),
    ``key_cache`` ``[num_blocks, block_size, NH, Dk]``, ``value_cache``
    ``[num_blocks, block_size, NH, Dv]``, ``slot_mapping`` ``[T]`` int32/int64 (negative slots
    are padding). Returns ``(key_cache, value_cache)`` (``value_cache`` None when absent).
    Only ``cache_mode="Norm"`` with ``scatter_mode="None"`` is available in JAX; the NumPy API
    (``kvscatter.scatter_pa_kv_cache``) has every mode.
    """
    if cache_mode not in (None, "", "Norm") or scatter_mode not in (None, "", "None"):
        raise NotImplementedError(
            "kvscatter.jax.scatter_pa_kv_cache supports cache_mode='Norm' with "
            f"scatter_mode='None' only, got cache_mode={cache_mode!r}, scatter_mode={scatter_mode!r}"
        )
    if (value is None) != (value_cache is None):
        raise ValueError("value and value_cache must both be given or both be None")
    key = jnp.asarray(key)
    key_cache = jnp.asarray(key_cache)
    slot_mapping = jnp.asarray(slot_mapping)
    arrays = [("key", key), ("key_cache", key_cache)]
    if value is not None:
        value = jnp.asarray(value)
        value_cache = jnp.asarray(value_cache)
        arrays += [("value", value), ("value_cache", value_cache)]
    for name, a in arrays:
        if a.dtype not in _SCATTER_DTYPES:
            raise TypeError(f"{name} dtype {a.dtype} is not supported by scatter_pa_kv_cache")
    if slot_mapping.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(f"slot_mapping dtype must be int32 or int64, got {slot_mapping.dtype}")
    if value is None:
        call = jax.ffi.ffi_call(
            "kvscatter_scatter_pa_kv_cache_key",
            _shape_dtype(key_cache),
            input_output_aliases={1: 0},
        )
        return call(key, key_cache, slot_mapping), None
    call = jax.ffi.ffi_call(
        "kvscatter_scatter_pa_kv_cache",
        (_shape_dtype(key_cache), _shape_dtype(value_cache)),
        input_output_aliases={2: 0, 3: 1},
    )
    k, v = call(key, value, key_cache, value_cache, slot_mapping)
    return k, v
