"""JAX entry points of kvscatter: XLA FFI custom calls on the CPU.

The functions are pure (they return the updated caches) and work under ``jax.jit``, with
traced positions and slots, and inside ``jax.shard_map``. The caches are aliased to the outputs
(``input_output_aliases``): donate them (``jax.jit(..., donate_argnums=...)``) and XLA updates
them in place instead of copying the whole cache first.

- :func:`kv_cache_update` is a drop-in for the reference built on
  ``jax.lax.dynamic_update_slice``: the same result bit for bit, out-of-range positions
  included (the start is clamped to ``[0, S - L]``, for positions of any integer dtype), and
  ``length = position + L``.
- :func:`scatter_pa_kv_cache` (every mode), :func:`scatter_pa_kv_cache_with_k_scale` and
  :func:`kv_compress_epilog` are the other operators. Slot values are only known when the
  computation runs, so a slot past the cache fails the computation with the library's message
  (an ``XlaRuntimeError``/``JaxRuntimeError``), and nothing is written.
- ``jax.vmap`` works over each: natively for :func:`kv_cache_update` (one position per
  sequence is one call), one mapped instance after another for the others.
"""

from __future__ import annotations

import operator

import jax
import jax.custom_batching
import jax.numpy as jnp
import numpy as np

from . import _kvscatter as _ext

__all__ = [
    "kv_cache_update",
    "kv_compress_epilog",
    "scatter_pa_kv_cache",
    "scatter_pa_kv_cache_with_k_scale",
]

if not getattr(_ext, "has_jax_ffi", False):
    raise ImportError(
        "this kvscatter build has no JAX support: it was built without the XLA FFI headers. "
        "Reinstall with jax present in the build environment: "
        "pip install --no-build-isolation ."
    )

for _name, _capsule in _ext.jax_ffi_handlers.items():
    jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")

_CACHE_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))

def _shape_dtype(x):
    return jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x))


@jax.custom_batching.custom_vmap
def _update(key_cache, value_cache, new_keys, new_values, starts):
    # starts: any integer dtype, shape () for every sequence or (B,) for one start per
    # sequence; the handler clamps each exactly as dynamic_update_slice does.
    call = jax.ffi.ffi_call(
        "kvscatter_kv_cache_update",
        (_shape_dtype(key_cache), _shape_dtype(value_cache)),
        input_output_aliases={0: 0, 1: 1},
    )
    return call(key_cache, value_cache, new_keys, new_values, starts)


@_update.def_vmap
def _update_vmap(axis_size, in_batched, key_cache, value_cache, new_keys, new_values, starts):
    # The native batched form: fold the mapped axis into the batch axis, so each sequence of
    # each mapped instance is one row with its own start, and run one call.
    args = [key_cache, value_cache, new_keys, new_values]
    args = [a if b else jnp.broadcast_to(a, (axis_size, *a.shape)) for a, b in zip(args, in_batched)]
    batch = args[0].shape[1]
    if not in_batched[4]:
        starts = jnp.broadcast_to(starts, (axis_size, *starts.shape))
    starts = jnp.broadcast_to(starts.reshape(axis_size, -1), (axis_size, batch)).reshape(-1)
    folded = [a.reshape(axis_size * batch, *a.shape[2:]) for a in args]
    k, v = _update(*folded, starts)
    return (k.reshape(args[0].shape), v.reshape(args[1].shape)), (True, True)


def kv_cache_update(key_cache, value_cache, new_keys, new_values, position):
    """Writes ``L`` new tokens at slot ``position`` of ``(B, S, H, D)`` key and value caches.

    A drop-in for the reference built on ``jax.lax.dynamic_update_slice``, bit for bit.

    Parameters
    ----------
    key_cache, value_cache : jax.Array
        ``(B, S, H, D)`` float32, bfloat16 or float16. Donate them
        (``jax.jit(..., donate_argnums=(0, 1))``) and XLA updates them in place.
    new_keys, new_values : jax.Array
        ``(B, L, H, D)``, float32 or the cache dtype; converted to the cache dtype with
        round-to-nearest-even.
    position : int or integer scalar array
        The start, traced or not, of any integer dtype. Exactly as ``dynamic_update_slice``
        treats it: a negative signed start counts from the end, then the start is clamped into
        ``[0, S - L]``.

    Returns
    -------
    dict
        ``{"key_cache", "value_cache", "length"}``; ``length = position + L`` in the position's
        dtype (int32 for a Python int).

    Raises
    ------
    ValueError
        Shapes that do not match (at trace time).
    TypeError
        A cache dtype other than float32/bfloat16/float16, or a non-integer position.

    Notes
    -----
    ``jax.vmap`` maps natively: caches and a position mapped together (one position per
    sequence, the ragged decode case) run as one call with a start per sequence.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, kvscatter.jax as kj
    >>> kc = jnp.zeros((1, 8, 2, 4)); vc = jnp.zeros((1, 8, 2, 4))
    >>> step = jax.jit(kj.kv_cache_update, donate_argnums=(0, 1))
    >>> out = step(kc, vc, jnp.ones((1, 1, 2, 4)), jnp.ones((1, 1, 2, 4)), 3)
    >>> int(out["length"]), float(out["key_cache"][0, 3, 0, 0])
    (4, 1.0)
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
        raise TypeError(
            f"position must be an integer scalar, got {position.dtype}{list(position.shape)}"
        )
    k, v = _update(key_cache, value_cache, new_keys, new_values, position)
    length = position + jnp.asarray(new_len, position.dtype)
    return {"key_cache": k, "value_cache": v, "length": length}


def _mode(value, default: str) -> str:
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise TypeError(f"mode must be a str or None, got {value!r}")
    return value


def _pair(value, name: str) -> np.ndarray:
    if value is None:
        return np.zeros((0,), np.int64)
    pair = np.asarray([operator.index(v) for v in value], np.int64)
    if pair.shape != (2,):
        raise ValueError(f"{name} must have 2 entries, got {len(pair)}")
    return pair


def scatter_pa_kv_cache(
    key,
    value,
    key_cache,
    value_cache,
    slot_mapping,
    *,
    compress_lens=None,
    compress_seq_offsets=None,
    seq_lens=None,
    cache_mode="Norm",
    scatter_mode="None",
    strides=None,
    offsets=None,
):
    """Writes each token's key (and value) rows into paged caches at ``slot_mapping``.

    The JAX form of :func:`kvscatter.scatter_pa_kv_cache`, every mode included: a pure function
    that returns the updated caches (in place when they are donated).

    Parameters
    ----------
    key : jax.Array
        ``[T, N, Dk]`` (``[B, S, N, Dk]`` in the Alibi and Rope modes).
    value : jax.Array or None
        ``[T, N, Dv]``; None with ``value_cache`` None for a key-only call.
    key_cache, value_cache : jax.Array
        Norm: ``[num_blocks, block_size, N, D]``; PA_NZ:
        ``[num_blocks, N * D * itemsize / 32, block_size, 32 / itemsize]``.
    slot_mapping : jax.Array
        int32 or int64 slots; negative slots are padding.
    compress_lens, compress_seq_offsets, seq_lens : jax.Array, optional
        The compressed-cache modes' index tensors.
    cache_mode : str, default "Norm"
        ``"Norm"`` or ``"PA_NZ"``.
    scatter_mode : str, default "None"
        ``"None"``, ``"Nct"``, ``"Alibi"``, ``"Rope"``, ``"Omni"`` or ``"NHSD"``.
    strides, offsets : pair of int, optional
        ``[key, value]`` in elements, Nct only.

    Returns
    -------
    tuple
        ``(key_cache, value_cache)``; ``value_cache`` is None for a key-only call.

    Raises
    ------
    ValueError
        ``value`` without ``value_cache`` (or the reverse), or a bad ``strides``/``offsets``.
    XlaRuntimeError
        Shapes, modes or slots the library rejects, with its message, when the computation
        runs; nothing is written.

    Notes
    -----
    ``jax.vmap`` runs the mapped instances one after another.

    Examples
    --------
    >>> import jax.numpy as jnp, kvscatter.jax as kj
    >>> kc = jnp.zeros((2, 4, 1, 8))
    >>> k, _ = kj.scatter_pa_kv_cache(jnp.ones((1, 1, 8)), None, kc, None, jnp.array([5]))
    >>> float(k[1, 1].sum())
    8.0
    """
    if (value is None) != (value_cache is None):
        raise ValueError("value and value_cache must both be given or both be None")
    operands = [jnp.asarray(key)]
    present = 0
    if value is not None:
        operands.append(jnp.asarray(value))
        present |= 1
    operands.append(jnp.asarray(key_cache))
    outs = [(len(operands) - 1, operands[-1])]
    if value is not None:
        operands.append(jnp.asarray(value_cache))
        outs.append((len(operands) - 1, operands[-1]))
    operands.append(jnp.asarray(slot_mapping))
    for bit, extra in ((2, compress_lens), (4, compress_seq_offsets), (8, seq_lens)):
        if extra is not None:
            operands.append(jnp.asarray(extra))
            present |= bit
    call = jax.ffi.ffi_call(
        "kvscatter_scatter_pa_kv_cache",
        tuple(_shape_dtype(a) for _, a in outs),
        input_output_aliases={i: n for n, (i, _) in enumerate(outs)},
        vmap_method="sequential",
    )
    results = call(
        *operands,
        cache_mode=_mode(cache_mode, "Norm"),
        scatter_mode=_mode(scatter_mode, "None"),
        present=np.int64(present),
        strides=_pair(strides, "strides"),
        offsets=_pair(offsets, "offsets"),
    )
    return (results[0], results[1]) if value is not None else (results[0], None)


def scatter_pa_kv_cache_with_k_scale(
    key, value, key_cache, value_cache, slot_mapping, key_scale, key_scale_cache, *,
    cache_layout="BNBD"
):
    """Copies float8 key/value rows and one float32 scale per (token, head) into BNBD caches.

    The JAX form of :func:`kvscatter.scatter_pa_kv_cache_with_k_scale`.

    Parameters
    ----------
    key, value : jax.Array
        ``[T, N, Dk]`` and ``[T, N, Dv]``, float8_e4m3fn or float8_e5m2.
    key_cache, value_cache : jax.Array
        ``[NB, N, BS, Dk]`` and ``[NB, N, BS, Dv]``, the dtype of ``key``.
    slot_mapping : jax.Array
        ``[T]`` int32 or int64; slots below 0 or past the cache are skipped.
    key_scale : jax.Array
        ``[T, N]`` float32.
    key_scale_cache : jax.Array
        ``[NB, N, BS, 1]`` float32.
    cache_layout : str, default "BNBD"
        The only layout.

    Returns
    -------
    tuple of jax.Array
        ``(key_cache, value_cache, key_scale_cache)``, updated.

    Raises
    ------
    XlaRuntimeError
        Shapes or dtypes the library rejects, with its message; nothing is written.

    Examples
    --------
    >>> import jax.numpy as jnp, kvscatter.jax as kj
    >>> f8 = jnp.float8_e4m3fn
    >>> kc = jnp.zeros((1, 1, 4, 8), f8)
    >>> k, v, s = kj.scatter_pa_kv_cache_with_k_scale(
    ...     jnp.ones((1, 1, 8), f8), jnp.ones((1, 1, 8), f8), kc, kc, jnp.array([2]),
    ...     jnp.full((1, 1), 0.5), jnp.zeros((1, 1, 4, 1)))
    >>> float(s[0, 0, 2, 0])
    0.5
    """
    caches = [jnp.asarray(c) for c in (key_cache, value_cache, key_scale_cache)]
    call = jax.ffi.ffi_call(
        "kvscatter_scatter_pa_kv_cache_with_k_scale",
        tuple(_shape_dtype(c) for c in caches),
        input_output_aliases={2: 0, 3: 1, 6: 2},
        vmap_method="sequential",
    )
    k, v, s = call(
        jnp.asarray(key), jnp.asarray(value), caches[0], caches[1], jnp.asarray(slot_mapping),
        jnp.asarray(key_scale), caches[2], cache_layout=_mode(cache_layout, "BNBD"),
    )
    return k, v, s


def kv_compress_epilog(
    cache, x, slot_mapping, *, quant_group_size=64, quant_mode="fp8_e8m0", round_scale=True,
    x_scale=1.0
):
    """Quantizes each bfloat16 row of ``x`` and scatters it into the paged uint8 ``cache``.

    The JAX form of :func:`kvscatter.kv_compress_epilog`.

    Parameters
    ----------
    cache : jax.Array
        ``[num_blocks, block_size, 1, row_bytes]`` uint8.
    x : jax.Array
        ``[..., d]`` bfloat16.
    slot_mapping : jax.Array
        ``x.shape[:-1]`` int32 or int64; -1 skips the row.
    quant_group_size : int, default 64
        The group of the hifloat8_fp4 mode.
    quant_mode : str or int, default "fp8_e8m0"
        ``"fp8_bf16"`` (0), ``"fp8_e8m0"`` (1) or ``"hifloat8_fp4"`` (2).
    round_scale : bool, default True
        Round the scales up to powers of two.
    x_scale : float, default 1.0
        Multiplies ``x`` before quantizing (rounded to float32).

    Returns
    -------
    jax.Array
        The updated cache.

    Raises
    ------
    XlaRuntimeError
        Shapes, modes or slots the library rejects, with its message; nothing is written.

    Examples
    --------
    >>> import jax.numpy as jnp, kvscatter.jax as kj
    >>> cache = jnp.zeros((1, 4, 1, 224), jnp.uint8)
    >>> out = kj.kv_compress_epilog(cache, jnp.ones((1, 128), jnp.bfloat16), jnp.array([3]),
    ...                             quant_mode="fp8_bf16")
    >>> bool(out[0, 3].any())
    True
    """
    cache = jnp.asarray(cache)
    if isinstance(quant_mode, bool) or not isinstance(quant_mode, (str, int, np.integer)):
        raise TypeError(f"quant_mode must be a str or an int, got {quant_mode!r}")
    call = jax.ffi.ffi_call(
        "kvscatter_kv_compress_epilog",
        _shape_dtype(cache),
        input_output_aliases={0: 0},
        vmap_method="sequential",
    )
    return call(
        cache, jnp.asarray(x), jnp.asarray(slot_mapping),
        quant_group_size=np.int64(operator.index(quant_group_size)),
        quant_mode=str(quant_mode) if not isinstance(quant_mode, str) else quant_mode,
        round_scale=bool(round_scale),
        x_scale=np.float32(x_scale),
    )
