"""JAX entry points of kvscatter: XLA FFI custom calls on the CPU.

The functions are pure (they return the updated caches) and work under ``jax.jit``, with
traced positions and slots, and inside ``jax.shard_map``. The caches are aliased to the outputs
(``input_output_aliases``): donate them (``jax.jit(..., donate_argnums=...)``) and XLA updates
them in place instead of copying the whole cache first.

- :func:`kv_cache_update` is a drop-in for the reference built on
  ``jax.lax.dynamic_update_slice``: the same result bit for bit (the payload of a float32 NaN
  written into a bfloat16 cache aside: see ``method``), out-of-range positions
  included (the start is clamped to ``[0, S - L]``, for positions of any integer dtype), and
  ``length = position + L``. Decode-size updates go to XLA's own in-place update, which writes
  the same bytes without a custom call's fixed cost (``method=``).
- :func:`scatter_pa_kv_cache` (every mode), :func:`scatter_pa_kv_cache_with_k_scale` and
  :func:`kv_compress_epilog` are the other operators. Slot values are only known when the
  computation runs, so a slot past the cache fails the computation with the library's message
  (an ``XlaRuntimeError``/``JaxRuntimeError``), and nothing is written.
- :func:`gather_pa_kv_cache`, :func:`scatter_pa_cache` and :func:`indexer_quant_cache` return
  their updated outputs the same way (the dense ``key``/``value`` of the gather, the caches of
  the others).
- ``jax.vmap`` works over each: natively for :func:`kv_cache_update` (one position per
  sequence is one call), one mapped instance after another for the others.
"""

from __future__ import annotations

import operator

import jax
import jax.custom_batching
import jax.numpy as jnp
import numpy as np

from . import _epilog_quant_mode, _indexer_quant_mode
from . import _kvscatter as _ext

__all__ = [
    "gather_pa_kv_cache",
    "indexer_quant_cache",
    "kv_cache_update",
    "kv_compress_epilog",
    "scatter_pa_kv_cache",
    "scatter_pa_cache",
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

#: ``kv_cache_update(method="auto")`` leaves updates of fewer new bytes (both caches, in the
#: cache dtype) to XLA's own ``dynamic_update_slice``: on one thread the library's copy is no
#: faster than XLA's, and below this size its threads do not win back the custom call's fixed
#: cost and their own start-up (measured with ``bench/front_doors.py``; docs/python.md).
XLA_UPDATE_MAX_BYTES = 4 * 1024 * 1024

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


def _xla_update(key_cache, value_cache, new_keys, new_values, position):
    # The same bytes as the library writes: the float32 rows rounded to the cache dtype to
    # nearest even, the start normalized and clamped by dynamic_update_slice itself.
    zero = jnp.zeros((), position.dtype)
    start = (zero, position, zero, zero)
    return (jax.lax.dynamic_update_slice(key_cache, new_keys.astype(key_cache.dtype), start),
            jax.lax.dynamic_update_slice(value_cache, new_values.astype(value_cache.dtype), start))


# method="auto" below the size limit: XLA's update, except that jax.vmap takes the library's
# batched form (one call for every sequence) rather than batching dynamic_update_slice into a
# scatter.
_small_update = jax.custom_batching.custom_vmap(_xla_update)


@_small_update.def_vmap
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


def kv_cache_update(key_cache, value_cache, new_keys, new_values, position, *, method="auto"):
    """Writes ``L`` new tokens at slot ``position`` of ``(B, S, H, D)`` key and value caches.

    A drop-in for the reference built on ``jax.lax.dynamic_update_slice``, bit for bit (but for
    the payload of a float32 NaN converted to bfloat16, as ``method`` says).

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
    method : {"auto", "kvscatter", "xla"}, default "auto"
        Who moves the bytes; the result is the same bit for bit, except where float32 new
        vectors hold a NaN and the cache is bfloat16: XLA writes the canonical quiet NaN
        (``0x7FC0``, or ``0xFFC0`` with the sign), the library keeps the sign and the top seven
        payload bits and sets the quiet bit (docs/formats.md, "bfloat16").
        ``"kvscatter"``: the library's kernel, through an XLA custom call. ``"xla"``: XLA's own in-place
        ``dynamic_update_slice``. ``"auto"``: XLA's own update when the new rows of both caches
        add up to less than :data:`XLA_UPDATE_MAX_BYTES` (4 MiB: decode steps and short
        prefill chunks, where a custom call's fixed cost is not won back), the library's kernel
        above (it spreads the copy over its threads) and under ``jax.vmap`` with one position
        per sequence (one call for every sequence, where XLA would scatter).

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
    ValueError
        An unknown ``method``.

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
    if method not in ("auto", "kvscatter", "xla"):
        raise ValueError(f"method must be 'auto', 'kvscatter' or 'xla', got {method!r}")
    new_bytes = 2 * new_keys.size * key_cache.dtype.itemsize
    if method == "auto" and new_bytes >= XLA_UPDATE_MAX_BYTES:
        method = "kvscatter"
    update = {"auto": _small_update, "xla": _xla_update, "kvscatter": _update}[method]
    k, v = update(key_cache, value_cache, new_keys, new_values, position)
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
    quant_mode = _epilog_quant_mode(quant_mode)
    call = jax.ffi.ffi_call(
        "kvscatter_kv_compress_epilog",
        _shape_dtype(cache),
        input_output_aliases={0: 0},
        vmap_method="sequential",
    )
    return call(
        cache, jnp.asarray(x), jnp.asarray(slot_mapping),
        quant_group_size=np.int64(operator.index(quant_group_size)),
        quant_mode=quant_mode,
        round_scale=bool(round_scale),
        x_scale=np.float32(x_scale),
    )


def _dtype_attr(dtype) -> str:
    if dtype is None:
        return ""
    from . import formats

    return formats.canonical_dtype(dtype)


def gather_pa_kv_cache(
    key_cache, value_cache, block_tables, seq_lens, key, value, *, seq_offset=None,
    is_seq_lens_cumsum=False, cache_mode="Norm", dtype=None
):
    """Reads each sequence's tokens out of paged caches into dense ``key`` / ``value`` rows.

    The JAX form of :func:`kvscatter.gather_pa_kv_cache`: ``key`` and ``value`` are the
    outputs, returned updated (in place when donated); rows past the last sequence keep the
    contents passed in.

    Parameters
    ----------
    key_cache, value_cache : jax.Array
        Norm ``[num_blocks, block_size, num_heads, head_size]`` or PA_NZ caches; ``value_cache``
        None together with ``value`` for a key-only call.
    block_tables : jax.Array
        ``[batch, max_blocks_per_seq]`` int32 or int64.
    seq_lens : jax.Array
        ``[batch]`` lengths (``[batch + 1]`` prefix sums with ``is_seq_lens_cumsum``).
    key, value : jax.Array
        The outputs' previous contents: Norm ``[rows, num_heads, head_size]``.
    seq_offset : jax.Array, optional
        ``[batch]``; whole blocks shift the start in the block table.
    is_seq_lens_cumsum : bool, default False
        ``seq_lens`` holds prefix sums.
    cache_mode : str, default "Norm"
        ``"Norm"`` or ``"PA_NZ"``.
    dtype : str, optional
        Element type of ``uint8`` caches and outputs (e.g. ``"hifloat8"``).

    Returns
    -------
    tuple
        ``(key, value)``; ``value`` is None for a key-only call.

    Raises
    ------
    ValueError
        ``value`` without ``value_cache`` (or the reverse).
    TypeError
        ``is_seq_lens_cumsum`` is not a bool.
    XlaRuntimeError
        Shapes, block ids or lengths the library rejects, with its message, when the
        computation runs; nothing is written.

    Notes
    -----
    ``jax.vmap`` runs the mapped instances one after another.

    Examples
    --------
    >>> import jax.numpy as jnp, kvscatter.jax as kj
    >>> kc = jnp.arange(16, dtype=jnp.float32).reshape(4, 2, 1, 2)
    >>> k, _ = kj.gather_pa_kv_cache(kc, None, jnp.array([[2, 0]]), jnp.array([3]),
    ...                              jnp.zeros((3, 1, 2)), None)
    >>> k[:, 0, 0].tolist()
    [8.0, 10.0, 0.0]
    """
    if (value is None) != (value_cache is None):
        raise ValueError("value and value_cache must both be given or both be None")
    if not isinstance(is_seq_lens_cumsum, bool):
        raise TypeError(f"is_seq_lens_cumsum must be a bool, got {is_seq_lens_cumsum!r}")
    has_value = value is not None
    operands = [jnp.asarray(key_cache)]
    if has_value:
        operands.append(jnp.asarray(value_cache))
    operands += [jnp.asarray(block_tables), jnp.asarray(seq_lens), jnp.asarray(key)]
    outs = [len(operands) - 1]
    if has_value:
        operands.append(jnp.asarray(value))
        outs.append(len(operands) - 1)
    if seq_offset is not None:
        operands.append(jnp.asarray(seq_offset))
    call = jax.ffi.ffi_call(
        "kvscatter_gather_pa_kv_cache",
        tuple(_shape_dtype(operands[i]) for i in outs),
        input_output_aliases={i: n for n, i in enumerate(outs)},
        vmap_method="sequential",
    )
    results = call(
        *operands,
        cache_mode=_mode(cache_mode, "Norm"),
        is_seq_lens_cumsum=is_seq_lens_cumsum,
        present=np.int64((1 if has_value else 0) | (2 if seq_offset is not None else 0)),
        dtype=_dtype_attr(dtype),
    )
    return (results[0], results[1]) if has_value else (results[0], None)


def scatter_pa_cache(
    key, key_cache, slot_mapping, *, compress_lens=None, compress_seq_offsets=None,
    seq_lens=None, dtype=None
):
    """Writes one tensor into one paged cache: plain, ReduceMean or tail keep.

    The JAX form of :func:`kvscatter.scatter_pa_cache`: returns the updated cache (in place
    when donated).

    Parameters
    ----------
    key : jax.Array
        ``[tokens, num_heads, head_size]`` (plain) or ``[batch, seq_len, num_heads, head_size]``.
    key_cache : jax.Array
        ``[num_blocks, block_size, num_heads, head_size]`` (``num_heads`` 1 with a 4-D key).
    slot_mapping : jax.Array
        int32 or int64: ``[tokens]``, or ``[batch, num_heads]`` run starts with a 4-D key.
    compress_lens, compress_seq_offsets, seq_lens : jax.Array, optional
        The compress scenarios' index tensors.
    dtype : str, optional
        Element type of ``uint8`` data: ``"hifloat8"``, or the packed ``"float4_e2m1"`` /
        ``"float4_e1m2"`` (last axis in bytes).

    Returns
    -------
    jax.Array
        The updated ``key_cache``.

    Raises
    ------
    XlaRuntimeError
        Shapes or slots the library rejects, with its message; nothing is written.

    Notes
    -----
    ``jax.vmap`` runs the mapped instances one after another.

    Examples
    --------
    >>> import jax.numpy as jnp, kvscatter.jax as kj
    >>> cache = kj.scatter_pa_cache(jnp.ones((2, 1, 4)), jnp.zeros((2, 2, 1, 4)),
    ...                             jnp.array([3, -1]))
    >>> cache.reshape(4, 4).sum(axis=1).tolist()
    [0.0, 0.0, 0.0, 4.0]
    """
    operands = [jnp.asarray(key), jnp.asarray(key_cache), jnp.asarray(slot_mapping)]
    present = 0
    for bit, extra in ((1, compress_lens), (2, compress_seq_offsets), (4, seq_lens)):
        if extra is not None:
            operands.append(jnp.asarray(extra))
            present |= bit
    call = jax.ffi.ffi_call(
        "kvscatter_scatter_pa_cache",
        _shape_dtype(operands[1]),
        input_output_aliases={1: 0},
        vmap_method="sequential",
    )
    return call(*operands, present=np.int64(present), dtype=_dtype_attr(dtype))


def indexer_quant_cache(
    cache, cache_scale, x, slot_mapping, *, quant_mode="fp8", round_scale=True, x_scale=1.0,
    dtype=None
):
    """Quantizes each row of ``x`` and writes its codes and scale(s) into paged caches.

    The JAX form of :func:`kvscatter.indexer_quant_cache`: returns the updated ``cache`` and
    ``cache_scale`` (in place when donated).

    Parameters
    ----------
    cache : jax.Array
        ``[num_blocks, block_size, 1, W]``: float8 for ``"fp8"``/``"mxfp8"``, ``uint8`` for
        ``"hifloat8"`` and for ``"mxfp4"`` (with ``dtype="float4_e2m1"`` or ``"float4_e1m2"``).
    cache_scale : jax.Array
        ``[num_blocks, block_size, 1, Ws]``: float32 (``"fp8"``, ``"hifloat8"``) or E8M0
        (``jnp.float8_e8m0fnu`` or ``uint8``) for the MX modes.
    x : jax.Array
        ``[..., d]`` float16 or bfloat16, ``d`` a multiple of 32.
    slot_mapping : jax.Array
        ``x.shape[:-1]`` int32 or int64; -1 skips the row.
    quant_mode : str or int, default "fp8"
        ``"mxfp8"`` (0), ``"fp8"`` (1), ``"hifloat8"`` (2) or ``"mxfp4"`` (3).
    round_scale : bool, default True
        ``"fp8"`` only: scales rounded up to powers of two.
    x_scale : float, default 1.0
        ``"hifloat8"`` only: multiplies ``x`` before encoding.
    dtype : str, optional
        Element type of integer-typed ``x`` or ``cache``.

    Returns
    -------
    tuple of jax.Array
        ``(cache, cache_scale)``, updated.

    Raises
    ------
    TypeError
        A ``quant_mode`` that is neither a str nor an int.
    XlaRuntimeError
        Shapes, modes or slots the library rejects, with its message; nothing is written.

    Notes
    -----
    ``jax.vmap`` runs the mapped instances one after another.

    Examples
    --------
    >>> import jax.numpy as jnp, kvscatter.jax as kj
    >>> x = ((jnp.arange(32) - 16) / 4).astype(jnp.float16)[None]
    >>> c, s = kj.indexer_quant_cache(jnp.zeros((1, 2, 1, 32), jnp.float8_e4m3fn),
    ...                               jnp.zeros((1, 2, 1, 1)), x, jnp.array([1]))
    >>> float(s[0, 1, 0, 0])
    0.015625
    """
    quant_mode = _indexer_quant_mode(quant_mode)
    cache, cache_scale = jnp.asarray(cache), jnp.asarray(cache_scale)
    call = jax.ffi.ffi_call(
        "kvscatter_indexer_quant_cache",
        (_shape_dtype(cache), _shape_dtype(cache_scale)),
        input_output_aliases={0: 0, 1: 1},
        vmap_method="sequential",
    )
    return tuple(call(
        cache, cache_scale, jnp.asarray(x), jnp.asarray(slot_mapping),
        quant_mode=quant_mode,
        round_scale=bool(round_scale),
        x_scale=np.float32(x_scale),
        dtype=_dtype_attr(dtype),
    ))


def paged_kv_write(
    key, value, key_cache, value_cache, slot_mapping, *, format="copy", layout="NHD",
    k_scale=None, v_scale=None
):
    """Writes each token's key and value vectors into paged K and V caches at ``slot_mapping``.

    The JAX form of :func:`kvscatter.paged_kv_write`: returns the updated caches (in place when
    donated). JAX arrays are dense, so the caches are whole arrays here (no interleaved views).

    Parameters
    ----------
    key, value : jax.Array
        ``[T, num_heads, head_size]`` float32, float16 or bfloat16.
    key_cache, value_cache : jax.Array
        ``[num_blocks, block_size, num_heads, head_size]`` (``"NHD"``) or
        ``[num_blocks, num_heads, block_size, head_size]`` (``"HND"``): the input dtype for
        ``"copy"``, ``uint8`` or float8 for the fp8 formats.
    slot_mapping : jax.Array
        ``[num_tokens]`` int32 or int64; negative slots are padding.
    format : {"copy", "fp8_e4m3", "fp8_e5m2"}
        Byte copy or ``x / scale`` as fp8.
    layout : {"NHD", "HND"}
        The caches' dimension order.
    k_scale, v_scale : jax.Array, optional
        float32, 1 or ``num_heads`` elements; required by the fp8 formats.

    Returns
    -------
    tuple of jax.Array
        ``(key_cache, value_cache)``, updated.

    Raises
    ------
    ValueError
        Only one of ``k_scale`` and ``v_scale``.
    XlaRuntimeError
        Shapes, formats or slots the library rejects, with its message; nothing is written.

    Examples
    --------
    >>> import jax.numpy as jnp, kvscatter.jax as kj
    >>> kc, vc = kj.paged_kv_write(jnp.ones((1, 1, 4)), jnp.ones((1, 1, 4)),
    ...                            jnp.zeros((2, 2, 1, 4)), jnp.zeros((2, 2, 1, 4)), jnp.array([3]))
    >>> float(kc[1, 1].sum())
    4.0
    """
    if (k_scale is None) != (v_scale is None):
        raise ValueError("k_scale and v_scale must both be given or both be None")
    caches = [jnp.asarray(key_cache), jnp.asarray(value_cache)]
    operands = [jnp.asarray(key), jnp.asarray(value), *caches, jnp.asarray(slot_mapping)]
    if k_scale is not None:
        operands += [jnp.asarray(k_scale), jnp.asarray(v_scale)]
    call = jax.ffi.ffi_call(
        "kvscatter_paged_kv_write",
        tuple(_shape_dtype(c) for c in caches),
        input_output_aliases={2: 0, 3: 1},
        vmap_method="sequential",
    )
    k, v = call(*operands, format=_mode(format, "copy"), layout=_mode(layout, "NHD"),
                present=np.int64(k_scale is not None))
    return k, v


def paged_cache_gather(
    src_cache, dst, block_table, cu_seq_lens, *, format="copy", scale=None, batch_size=-1,
    seq_starts=None, token_to_seq=None, num_tokens=0
):
    """Copies the cached entries of sequences out of a paged cache into rows of ``dst``.

    The JAX form of :func:`kvscatter.paged_cache_gather`: returns the updated ``dst`` (in place
    when donated); rows not gathered keep the values passed in.

    Parameters
    ----------
    src_cache : jax.Array
        ``[num_blocks, block_size, *entry]``.
    dst : jax.Array
        ``[rows, *entry]``.
    block_table : jax.Array
        ``[>= batch_size, W]`` int32 or int64.
    cu_seq_lens : jax.Array
        ``[>= batch_size + 1]``, same dtype.
    format : {"copy", "fp8_e4m3", "fp8_e5m2"}
        Raw copy, or dequantize fp8 codes into ``dst``'s float type.
    scale : jax.Array, optional
        float32, one element; required by the fp8 formats.
    batch_size : int, default -1
        Sequences gathered; -1: ``len(cu_seq_lens) - 1``.
    seq_starts : jax.Array, optional
        First gathered position of each sequence.
    token_to_seq : jax.Array, optional
        Row-driven form: the sequence of each row ``t < num_tokens``.
    num_tokens : int, default 0
        Rows examined with ``token_to_seq``.

    Returns
    -------
    jax.Array
        The updated ``dst``.

    Raises
    ------
    XlaRuntimeError
        Shapes, block ids or lengths the library rejects, with its message; nothing is written.

    Examples
    --------
    >>> import jax.numpy as jnp, kvscatter.jax as kj
    >>> src = jnp.arange(8, dtype=jnp.float32).reshape(2, 2, 2)
    >>> out = kj.paged_cache_gather(src, jnp.zeros((3, 2)), jnp.array([[1, 0]]), jnp.array([0, 3]))
    >>> out[:, 0].tolist()
    [4.0, 6.0, 0.0]
    """
    operands = [jnp.asarray(src_cache), jnp.asarray(dst), jnp.asarray(block_table),
                jnp.asarray(cu_seq_lens)]
    present = 0
    for bit, extra in ((1, scale), (2, seq_starts), (4, token_to_seq)):
        if extra is not None:
            operands.append(jnp.asarray(extra))
            present |= bit
    call = jax.ffi.ffi_call(
        "kvscatter_paged_cache_gather",
        _shape_dtype(operands[1]),
        input_output_aliases={1: 0},
        vmap_method="sequential",
    )
    return call(*operands, format=_mode(format, "copy"),
                batch_size=np.int64(operator.index(batch_size)),
                num_tokens=np.int64(operator.index(num_tokens)), present=np.int64(present))


def paged_latent_write(kv_c, k_pe, kv_cache, slot_mapping, *, format="copy", scale=None):
    """Writes one cache row ``[kv_c | k_pe]`` per token into a paged latent cache.

    The JAX form of :func:`kvscatter.paged_latent_write`: returns the updated cache (in place
    when donated).

    Parameters
    ----------
    kv_c, k_pe : jax.Array
        ``[T, kv_lora_rank]`` and ``[T, pe_dim]``, float32, float16 or bfloat16 (one dtype).
    kv_cache : jax.Array
        ``[num_blocks, block_size, entry]``: ``kv_lora_rank + pe_dim`` elements of the input
        dtype or fp8 codes, or 656 ``uint8`` bytes for ``"fp8_ds_mla"``.
    slot_mapping : jax.Array
        ``[num_tokens]`` int32 or int64; negative slots are padding.
    format : {"copy", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"}
        How a row is stored.
    scale : jax.Array, optional
        float32, one element; required by ``"fp8_e4m3"``/``"fp8_e5m2"``.

    Returns
    -------
    jax.Array
        The updated ``kv_cache``.

    Raises
    ------
    XlaRuntimeError
        Shapes, formats or slots the library rejects, with its message; nothing is written.

    Examples
    --------
    >>> import jax.numpy as jnp, kvscatter.jax as kj
    >>> cache = kj.paged_latent_write(jnp.ones((1, 4)), jnp.full((1, 2), 2.0),
    ...                               jnp.zeros((1, 2, 6)), jnp.array([1]))
    >>> cache[0, 1].tolist()
    [1.0, 1.0, 1.0, 1.0, 2.0, 2.0]
    """
    cache = jnp.asarray(kv_cache)
    operands = [jnp.asarray(kv_c), jnp.asarray(k_pe), cache, jnp.asarray(slot_mapping)]
    if scale is not None:
        operands.append(jnp.asarray(scale))
    call = jax.ffi.ffi_call(
        "kvscatter_paged_latent_write",
        _shape_dtype(cache),
        input_output_aliases={2: 0},
        vmap_method="sequential",
    )
    return call(*operands, format=_mode(format, "copy"), present=np.int64(scale is not None))
