"""kvscatter: write new keys and values into LLM KV caches, in place, on the CPU.

The functions take NumPy arrays (bfloat16 and float8 through ml_dtypes) or any DLPack-capable
CPU tensor (PyTorch tensors included) and update the caches in place, without copies. A failing
call raises before writing anything: the caches stay bit-identical. Errors found by the library
raise :class:`kvscatter.Error` (a ``ValueError`` with a ``status`` code); arguments of the wrong
Python type raise ``TypeError``.

Every function takes ``dtype=`` to name the element type that an array cannot carry itself,
e.g. HiFloat8 data passed as ``uint8`` with ``dtype="hifloat8"``: the data arrays (keys, values
and their caches) whose dtype is an integer of the same width are read as that type.

``kvscatter.jax`` (imported separately) holds the JAX versions, built on XLA FFI custom calls.
"""

from __future__ import annotations

import sys as _sys

from . import _kvscatter as _ext
from . import formats
from ._kvscatter import Error

__version__: str = _ext.__version__

__all__ = [
    "Error",
    "__version__",
    "formats",
    "gather_pa_kv_cache",
    "get_num_threads",
    "indexer_quant_cache",
    "kv_cache_update",
    "kv_compress_epilog",
    "npu_gather_pa_kv_cache",
    "npu_scatter_pa_cache",
    "npu_scatter_pa_kv_cache",
    "paged_cache_gather",
    "paged_kv_write",
    "paged_latent_write",
    "scatter_pa_cache",
    "scatter_pa_kv_cache",
    "scatter_pa_kv_cache_with_k_scale",
    "set_num_threads",
    "simd_target",
    "simd_targets_available",
]


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
    dtype=None,
) -> None:
    """Writes each token's key (and value) rows into paged caches at ``slot_mapping``, in place.

    Same arguments as ``torch_npu.npu_scatter_pa_kv_cache`` (but ``cache_mode`` defaults to
    Norm here) plus the aclnn attributes ``scatter_mode``, ``strides`` and ``offsets``. Torch
    tensors go through the native operator ``torch.ops.kvscatter.scatter_pa_kv_cache``.

    Parameters
    ----------
    key : ndarray or Tensor
        ``[T, N, Dk]`` new keys (``[B, S, N, Dk]`` in the Alibi and Rope modes).
    value : ndarray or Tensor or None
        ``[T, N, Dv]`` new values, the dtype of ``key``; None with ``value_cache`` None for a
        key-only call.
    key_cache, value_cache : ndarray or Tensor
        Norm: ``[num_blocks, block_size, N, D]``; PA_NZ:
        ``[num_blocks, N * D * itemsize / 32, block_size, 32 / itemsize]``. Updated in place.
    slot_mapping : ndarray or Tensor
        int32 or int64 slots, one per token; negative slots are padding and are skipped, a
        slot past the cache is an error.
    compress_lens, compress_seq_offsets, seq_lens : ndarray or Tensor, optional
        The index tensors of the compressed-cache modes (int32).
    cache_mode : str, default "Norm"
        ``"Norm"`` or ``"PA_NZ"``; None means Norm.
    scatter_mode : str, default "None"
        ``"None"``, ``"Nct"``, ``"Alibi"``, ``"Rope"``, ``"Omni"`` or ``"NHSD"``.
    strides, offsets : pair of int, optional
        ``[key, value]`` in elements, Nct only.
    dtype : str, optional
        The element type of data arrays passed as raw integers (e.g. ``"hifloat8"``).

    Returns
    -------
    None

    Raises
    ------
    kvscatter.Error
        (a ``ValueError``; plain ``ValueError`` for torch tensors) a shape, dtype, mode or slot
        the operator rejects, with the library's message; nothing is written.
    TypeError
        An argument of the wrong Python type or an unsupported element type.

    Examples
    --------
    >>> import numpy as np, kvscatter
    >>> key_cache = np.zeros((4, 8, 1, 16), np.float32)
    >>> kvscatter.scatter_pa_kv_cache(np.ones((2, 1, 16), np.float32), None, key_cache, None,
    ...                               np.array([9, -1]))
    >>> float(key_cache[1, 1].sum())
    16.0
    """
    ops = _torch_ops_for(key_cache)
    if ops is not None:
        # Only the arguments that differ from the schema's defaults: each keyword costs
        # the dispatcher's argument parsing time on a decode step.
        if (compress_lens is None and compress_seq_offsets is None and seq_lens is None
                and strides is None and offsets is None and dtype is None
                and scatter_mode in ("None", None)):
            ops.scatter_pa_kv_cache.default(key, value, key_cache, value_cache, slot_mapping,
                                            cache_mode=cache_mode)
            return
        ops.scatter_pa_kv_cache.default(
            key,
            value,
            key_cache,
            value_cache,
            slot_mapping,
            compress_lens=compress_lens,
            compress_seq_offsets=compress_seq_offsets,
            seq_lens=seq_lens,
            cache_mode=cache_mode,
            scatter_mode=scatter_mode,
            strides=_int_pair(strides),
            offsets=_int_pair(offsets),
            dtype=formats.canonical_dtype(dtype),
        )
        return
    _ext.scatter_pa_kv_cache(
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        compress_lens,
        compress_seq_offsets,
        seq_lens,
        cache_mode,
        scatter_mode,
        strides,
        offsets,
        formats.canonical_dtype(dtype),
    )



def gather_pa_kv_cache(
    key_cache,
    value_cache,
    block_tables,
    seq_lens,
    key,
    value,
    *,
    seq_offset=None,
    is_seq_lens_cumsum=False,
    cache_mode="Norm",
    dtype=None,
) -> None:
    """Reads each sequence's tokens out of paged caches into dense ``key`` / ``value`` rows.

    The inverse of :func:`scatter_pa_kv_cache`: sequence ``b`` owns ``seq_lens[b]`` tokens,
    stored block by block in the physical blocks ``block_tables[b][shift:]`` with
    ``shift = seq_offset[b] // block_size``; its tokens become consecutive rows of ``key`` (and
    ``value``), sequences one after another in batch order. ``key`` and ``value`` are written
    in place; the caches are only read. Torch tensors go through the native operator
    ``torch.ops.kvscatter.gather_pa_kv_cache``.

    Parameters
    ----------
    key_cache, value_cache : array
        ``cache_mode="Norm"``: ``[num_blocks, block_size, num_heads, head_size]``;
        ``"PA_NZ"``: ``[num_blocks, head_size * num_heads / L, block_size, L]`` with
        ``L = 32 / itemsize``. ``value_cache`` may be None together with ``value`` (key only).
        A cache may be strided along its block axis.
    block_tables : array of int32 or int64
        ``[batch, max_blocks_per_seq]``. Only the entries a sequence needs are read; a
        negative id read there is a padding block, whose rows are written as zero bytes. An
        id past the cache, or a table too short for its sequence, is an error.
    seq_lens : array
        ``[batch]`` lengths, or ``[batch + 1]`` prefix sums starting at 0 when
        ``is_seq_lens_cumsum`` is True. Same dtype as ``block_tables``.
    key, value : array
        Outputs: Norm ``[rows, num_heads, head_size]``, PA_NZ ``[rows, chunks * L]`` (the NZ cache's chunk count times its chunk width), with at least
        as many rows as the sequences hold; rows past the last sequence keep their contents.
    seq_offset : array, optional
        ``[batch]``, non-negative; only whole blocks (``seq_offset // block_size``) shift the
        start in the block table.
    is_seq_lens_cumsum : bool
        ``seq_lens`` holds prefix sums.
    cache_mode : {"Norm", "PA_NZ"}
        Exact case; None means "Norm". Key and value dtypes may differ in PA_NZ only.
    dtype : str, optional
        Element type of integer-typed caches and outputs (e.g. ``"hifloat8"`` for ``uint8``).

    Raises
    ------
    kvscatter.Error
        On any broken rule; nothing has been written then.

    Examples
    --------
    >>> import numpy as np, kvscatter
    >>> kc = np.arange(4 * 2 * 1 * 2, dtype=np.float32).reshape(4, 2, 1, 2)
    >>> key = np.zeros((3, 1, 2), np.float32)
    >>> kvscatter.gather_pa_kv_cache(kc, None, np.array([[2, 0]], np.int32),
    ...                              np.array([3], np.int32), key, None)
    >>> key[:, 0, 0].tolist()
    [8.0, 10.0, 0.0]
    """
    ops = _torch_ops_for(key)
    if ops is not None:
        if not isinstance(is_seq_lens_cumsum, bool):
            raise TypeError(f"is_seq_lens_cumsum must be a bool, got {is_seq_lens_cumsum!r}")
        ops.gather_pa_kv_cache.default(
            key_cache,
            value_cache,
            block_tables,
            seq_lens,
            key,
            value,
            seq_offset=seq_offset,
            is_seq_lens_cumsum=is_seq_lens_cumsum,
            cache_mode=cache_mode,
            dtype=formats.canonical_dtype(dtype),
        )
        return
    _ext.gather_pa_kv_cache(
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        key,
        value,
        seq_offset,
        is_seq_lens_cumsum,
        cache_mode,
        formats.canonical_dtype(dtype),
    )


#: Alias for code written against ``torch_npu.npu_gather_pa_kv_cache``.
npu_gather_pa_kv_cache = gather_pa_kv_cache


def scatter_pa_cache(
    key,
    key_cache,
    slot_mapping,
    *,
    compress_lens=None,
    compress_seq_offsets=None,
    seq_lens=None,
    dtype=None,
) -> None:
    """Writes one tensor into one paged cache (``torch_npu``-style ``npu_scatter_pa_cache``).

    Three scenarios, chosen by the rank of ``key`` and the presence of ``compress_seq_offsets``;
    each writes the bytes of the key side of the matching :func:`scatter_pa_kv_cache` call.
    Torch tensors go through the native operator ``torch.ops.kvscatter.scatter_pa_cache``.

    Parameters
    ----------
    key : array
        3-D ``[tokens, num_heads, head_size]`` (plain), or 4-D
        ``[batch, seq_len, num_heads, head_size]`` (compress scenarios).
    key_cache : array
        Plain: ``[num_blocks, block_size, num_heads, head_size]``; 4-D key:
        ``[num_blocks, block_size, 1, head_size]``. Same dtype as ``key``; updated in place.
        May be strided along its block axis.
    slot_mapping : array of int32 or int64
        Plain: ``[tokens]``, a negative slot is padding; 4-D key: ``[batch, num_heads]``, the
        first slot of each (batch, head) run, negative to skip the run. A slot or run reaching
        past the cache is an error.
    compress_lens : array, optional
        4-D key: ``[batch, num_heads]`` or ``[batch * num_heads]``, the window length ``w``.
    compress_seq_offsets : array, optional
        4-D key: ``[batch * num_heads]``; given: ReduceMean (tokens ``[o, o + w)`` replaced by
        their mean, ``w = 0`` or ``o = seq_len`` means no compression); absent: tail keep (the
        last ``w`` tokens).
    seq_lens : array, optional
        4-D key: ``[batch]``, each at most ``seq_len``.
    dtype : str, optional
        Element type of integer-typed arrays: ``"hifloat8"``, ``"float8_e4m3fn"``, or the packed
        ``"float4_e2m1"`` / ``"float4_e1m2"`` (``uint8`` arrays whose last axis counts bytes,
        two elements each; plain scenario only).

    Raises
    ------
    kvscatter.Error
        On any broken rule; the cache is unchanged then.

    Examples
    --------
    >>> import numpy as np, kvscatter
    >>> cache = np.zeros((2, 2, 1, 4), np.uint8)
    >>> key = np.array([[[8, 136, 24, 20]], [[1, 2, 3, 4]]], np.uint8)
    >>> kvscatter.scatter_pa_cache(key, cache, np.array([3, 0]), dtype="hifloat8")
    >>> cache.reshape(4, 4)[[0, 3]].tolist()
    [[1, 2, 3, 4], [8, 136, 24, 20]]
    """
    ops = _torch_ops_for(key_cache)
    if ops is not None:
        ops.scatter_pa_cache.default(
            key,
            key_cache,
            slot_mapping,
            compress_lens=compress_lens,
            compress_seq_offsets=compress_seq_offsets,
            seq_lens=seq_lens,
            dtype=formats.canonical_dtype(dtype),
        )
        return
    _ext.scatter_pa_cache(
        key,
        key_cache,
        slot_mapping,
        compress_lens,
        compress_seq_offsets,
        seq_lens,
        formats.canonical_dtype(dtype),
    )


#: Alias for code written against ``torch_npu.npu_scatter_pa_cache``.
npu_scatter_pa_cache = scatter_pa_cache


def indexer_quant_cache(
    cache,
    cache_scale,
    x,
    slot_mapping,
    *,
    quant_mode="fp8",
    round_scale=True,
    x_scale=1.0,
    dtype=None,
) -> None:
    """Quantizes each row of ``x`` and writes its codes and scale(s) into paged caches.

    The quantize-and-scatter of a sparse-attention indexer key (``cann_ops_transformer.
    indexer_quant_cache``). Row ``t`` of ``x`` (leading axes flattened) goes to slot
    ``slot_mapping.flat[t]``: row ``slot % block_size`` of block ``slot // block_size`` of
    ``cache`` and ``cache_scale``; ``-1`` skips the row. Bytes past the written part of a row,
    and rows not hit, keep their contents. Repeated slots: the last row wins. Torch tensors go
    through the native operator ``torch.ops.kvscatter.indexer_quant_cache``.

    Parameters
    ----------
    cache : array
        ``[num_blocks, block_size, 1, W]``, updated in place. ``"fp8"``/``"mxfp8"``:
        float8_e4m3fn or float8_e5m2 (ml_dtypes, or ``uint8`` with ``dtype=``), ``W >= d``;
        ``"hifloat8"``: ``uint8``, ``W >= d``; ``"mxfp4"``: packed FP4 as ``uint8`` with
        ``dtype="float4_e2m1"`` or ``"float4_e1m2"``, ``W >= d / 2`` bytes.
    cache_scale : array
        ``[num_blocks, block_size, 1, Ws]`` with the blocks of ``cache``. ``"fp8"``: float32,
        one scale per row; ``"mxfp8"``/``"mxfp4"``: E8M0 (``ml_dtypes.float8_e8m0fnu`` or
        ``uint8``), ``d / 32`` per row; ``"hifloat8"``: float32, never written.
    x : array
        ``[..., d]`` float16 or bfloat16, ``d`` a positive multiple of 32, at most 8192.
    slot_mapping : array of int32 or int64
        ``x.shape[:-1]``.
    quant_mode : {"fp8", "mxfp8", "hifloat8", "mxfp4"} or {0, 1, 2, 3}
        Names in any case, surrounding blanks ignored; the upstream numbers are
        0 mxfp8, 1 fp8, 2 hifloat8, 3 mxfp4.
    round_scale : bool
        ``"fp8"`` only: the per-row scale ``amax / max_finite`` is rounded up to a power of two.
    x_scale : float
        ``"hifloat8"`` only: ``x`` is multiplied by it before encoding.
    dtype : str, optional
        Element type of an integer-typed ``x`` or ``cache``.

    Raises
    ------
    kvscatter.Error
        On any broken rule; nothing has been written then.
    TypeError
        For a ``quant_mode`` that is neither a string nor an int, or an ``x_scale`` that is not
        a real number.

    Examples
    --------
    >>> import numpy as np, ml_dtypes, kvscatter
    >>> cache = np.zeros((1, 2, 1, 32), ml_dtypes.float8_e4m3fn)
    >>> scale = np.zeros((1, 2, 1, 1), np.float32)
    >>> x = (np.arange(32, dtype=np.float16) - 16) / 4
    >>> kvscatter.indexer_quant_cache(cache, scale, x[None], np.array([1]))
    >>> float(scale[0, 1, 0, 0]), cache[0, 1, 0].view(np.uint8)[:2].tolist()
    (0.015625, [248, 247])
    """
    import numbers

    quant_mode = _indexer_quant_mode(quant_mode)
    if isinstance(x_scale, bool) or not isinstance(x_scale, numbers.Real):
        raise TypeError(f"x_scale must be a float, got {x_scale!r}")
    if not isinstance(round_scale, bool):
        raise TypeError(f"round_scale must be a bool, got {round_scale!r}")
    ops = _torch_ops_for(cache)
    if ops is not None:
        ops.indexer_quant_cache.default(
            cache,
            cache_scale,
            x,
            slot_mapping,
            quant_mode=quant_mode,
            round_scale=round_scale,
            x_scale=float(x_scale),
            dtype=formats.canonical_dtype(dtype),
        )
        return
    _ext.indexer_quant_cache(
        cache,
        cache_scale,
        x,
        slot_mapping,
        quant_mode,
        round_scale,
        float(x_scale),
        formats.canonical_dtype(dtype),
    )


def scatter_pa_kv_cache_with_k_scale(
    key,
    value,
    key_cache,
    value_cache,
    slot_mapping,
    key_scale,
    key_scale_cache,
    *,
    cache_layout="BNBD",
    dtype=None,
) -> None:
    """Copies float8 key/value rows and one float32 scale per (token, head) into BNBD caches.

    Parameters
    ----------
    key : ndarray or Tensor
        ``[T, N, Dk]`` float8_e4m3fn or float8_e5m2.
    value : ndarray or Tensor
        ``[T, N, Dv]``, the dtype of ``key``.
    key_cache, value_cache : ndarray or Tensor
        ``[NB, N, BS, Dk]`` and ``[NB, N, BS, Dv]``, updated in place.
    slot_mapping : ndarray or Tensor
        ``[T]`` int32 or int64; slots below 0 or past the cache are skipped, as upstream does.
    key_scale : ndarray or Tensor
        ``[T, N]`` float32.
    key_scale_cache : ndarray or Tensor
        ``[NB, N, BS, 1]`` float32, updated in place.
    cache_layout : str, default "BNBD"
        The only layout.
    dtype : str, optional
        The float8 type of key/value data passed as raw ``uint8``.

    Returns
    -------
    None

    Raises
    ------
    kvscatter.Error
        (a ``ValueError``; plain ``ValueError`` for torch tensors) a shape or dtype the
        operator rejects; nothing is written.
    TypeError
        An argument of the wrong Python type.

    Examples
    --------
    >>> import ml_dtypes, numpy as np, kvscatter
    >>> f8 = ml_dtypes.float8_e4m3fn
    >>> kc, vc = np.zeros((1, 1, 4, 8), f8), np.zeros((1, 1, 4, 8), f8)
    >>> scales = np.zeros((1, 1, 4, 1), np.float32)
    >>> kvscatter.scatter_pa_kv_cache_with_k_scale(np.ones((1, 1, 8), f8), np.ones((1, 1, 8), f8),
    ...     kc, vc, np.array([2]), np.full((1, 1), 0.5, np.float32), scales)
    >>> float(scales[0, 0, 2, 0])
    0.5
    """
    ops = _torch_ops_for(key_cache)
    if ops is not None:
        ops.scatter_pa_kv_cache_with_k_scale(
            key,
            value,
            key_cache,
            value_cache,
            slot_mapping,
            key_scale,
            key_scale_cache,
            cache_layout=cache_layout,
            dtype=formats.canonical_dtype(dtype),
        )
        return
    _ext.scatter_pa_kv_cache_with_k_scale(
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        key_scale,
        key_scale_cache,
        cache_layout,
        formats.canonical_dtype(dtype),
    )


def paged_kv_write(
    key,
    value,
    key_cache,
    value_cache,
    slot_mapping,
    *,
    format="copy",
    layout="NHD",
    k_scale=None,
    v_scale=None,
) -> None:
    """Writes each token's key and value vectors into paged K and V caches at ``slot_mapping``.

    Each cache is addressed through its own strides, so NHD and HND caches, K and V interleaved
    in one ``[num_blocks, 2, ...]`` allocation and padded blocks are written in place.

    Parameters
    ----------
    key, value : array_like
        ``[T, num_heads, head_size]`` float32, float16 or bfloat16, any token and head strides.
        Only the first ``len(slot_mapping)`` rows are read.
    key_cache, value_cache : array_like
        4-D caches of equal shape and dtype: ``[num_blocks, block_size, num_heads, head_size]``
        for ``layout="NHD"``, ``[num_blocks, num_heads, block_size, head_size]`` for
        ``layout="HND"``. The dtype is the input dtype for ``format="copy"``, ``uint8`` or the
        matching float8 dtype for the fp8 formats. Updated in place.
    slot_mapping : array_like
        ``[num_tokens]`` int32 or int64. Slot ``s`` is row ``s % block_size`` of block
        ``s // block_size``; negative slots are padding; duplicates: the last token wins.
    format : {"copy", "fp8_e4m3", "fp8_e5m2"}
        ``"copy"`` stores the input bytes; the fp8 formats store ``x / scale`` rounded to nearest
        even, saturated to the largest finite value, NaN as ``0x7F``.
    layout : {"NHD", "HND"}
        How the cache dimensions are ordered (see above).
    k_scale, v_scale : array_like, optional
        float32 with 1 (per tensor) or ``num_heads`` (per head) elements, equal shapes. Required
        by the fp8 formats; validated and unused by ``"copy"``.

    Raises
    ------
    kvscatter.Error
        Any broken rule (shapes, dtypes, strides, overlapping caches, a slot past the cache);
        nothing has been written.

    Notes
    -----
    Torch tensors go through the native operator ``torch.ops.kvscatter.paged_kv_write``.

    Examples
    --------
    >>> import numpy as np, kvscatter
    >>> kc, vc = np.zeros((2, 4, 1, 8), np.float32), np.zeros((2, 4, 1, 8), np.float32)
    >>> kvscatter.paged_kv_write(np.ones((2, 1, 8), np.float32), np.full((2, 1, 8), 2, np.float32),
    ...                          kc, vc, np.array([5, -1]))
    >>> float(kc[1, 1].sum()), float(vc[1, 1].sum()), float(kc.sum())
    (8.0, 16.0, 8.0)
    """
    ops = _torch_ops_for(key_cache)
    if ops is not None:
        ops.paged_kv_write.default(key, value, key_cache, value_cache, slot_mapping, format,
                                   layout, k_scale, v_scale)
        return
    _ext.paged_kv_write(
        key, value, key_cache, value_cache, slot_mapping, format, layout, k_scale, v_scale, None
    )


def paged_cache_gather(
    src_cache,
    dst,
    block_table,
    cu_seq_lens,
    *,
    format="copy",
    scale=None,
    batch_size=-1,
    seq_starts=None,
    token_to_seq=None,
    num_tokens=0,
) -> None:
    """Copies the cached entries of sequences out of a paged cache into ``dst``, in place.

    Sequence ``b`` fills rows ``[cu_seq_lens[b], cu_seq_lens[b+1])``; its position ``p`` is
    read from block ``block_table[b, pos // block_size]``, row ``pos % block_size``, with
    ``pos = p + seq_starts[b]``.

    Parameters
    ----------
    src_cache : array_like
        ``[num_blocks, block_size, *entry]``, entry dims C-contiguous, any block and slot strides.
    dst : array_like
        ``[rows, *entry]``, entry C-contiguous, any row stride. Rows not gathered keep their
        values.
    block_table : array_like
        ``[>= batch_size, W]`` int32 or int64; entries that are not read are not checked.
    cu_seq_lens : array_like
        ``[>= batch_size + 1]``, same dtype, ``cu_seq_lens[0] >= 0`` and non-decreasing.
    format : {"copy", "fp8_e4m3", "fp8_e5m2"}
        ``"copy"``: raw bytes, ``src_cache`` and ``dst`` share a dtype of 1, 2 or 4 bytes. The fp8
        formats dequantize ``uint8`` / float8 codes: ``float(code) * scale`` in float32, rounded
        to nearest even into ``dst``'s float type, NaN as that type's canonical NaN.
    scale : array_like, optional
        float32 with one element; required by the fp8 formats.
    batch_size : int
        Sequences gathered; ``-1`` means ``len(cu_seq_lens) - 1``.
    seq_starts : array_like, optional
        ``[>= batch_size]`` position of the first gathered token of each sequence (any alignment).
    token_to_seq : array_like, optional
        Row-driven form: row ``t < num_tokens`` belongs to sequence ``token_to_seq[t]`` and is
        skipped when ``t >= cu_seq_lens[b + 1]``.
    num_tokens : int
        Rows examined with ``token_to_seq``.

    Raises
    ------
    kvscatter.Error
        Any broken rule (shapes, dtypes, strides, a block-table entry or column out of range, an
        out-of-order ``cu_seq_lens``); ``dst`` is untouched.

    Notes
    -----
    Torch tensors go through the native operator ``torch.ops.kvscatter.paged_cache_gather``.

    Examples
    --------
    >>> import numpy as np, kvscatter
    >>> src = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    >>> dst = np.zeros((3, 2), np.float32)
    >>> kvscatter.paged_cache_gather(src, dst, np.array([[1, 0]]), np.array([0, 3]))
    >>> dst[:, 0].tolist()
    [4.0, 6.0, 0.0]
    """
    ops = _torch_ops_for(dst)
    if ops is not None:
        ops.paged_cache_gather.default(
            src_cache, dst, block_table, cu_seq_lens, format, scale, _as_int(batch_size, "batch_size"),
            seq_starts, token_to_seq, _as_int(num_tokens, "num_tokens"),
        )
        return
    _ext.paged_cache_gather(
        src_cache, dst, block_table, cu_seq_lens, format, scale, batch_size, seq_starts,
        token_to_seq, num_tokens, None,
    )


def paged_latent_write(kv_c, k_pe, kv_cache, slot_mapping, *, format="copy", scale=None) -> None:
    """Writes one cache row ``[kv_c | k_pe]`` per token into a paged latent cache, in place.

    Parameters
    ----------
    kv_c, k_pe : array_like
        ``[T, kv_lora_rank]`` and ``[T, pe_dim]``, float32, float16 or bfloat16 (one dtype), any
        token stride; only the first ``len(slot_mapping)`` rows are read.
    kv_cache : array_like
        ``[num_blocks, block_size, entry]``, any block and slot strides, unit stride on the entry
        axis. ``entry = kv_lora_rank + pe_dim`` elements of the input dtype (``"copy"``) or of
        ``uint8`` / float8 codes (fp8), or 656 ``uint8`` bytes (``"fp8_ds_mla"``).
    slot_mapping : array_like
        ``[num_tokens]`` int32 or int64; negative slots are padding; duplicates: the last wins.
    format : {"copy", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"}
        The fp8 formats store ``x / scale`` (saturating, NaN as ``0x7F``) for both parts.
        ``"fp8_ds_mla"`` (``kv_lora_rank`` 512, ``pe_dim`` 64, float16/bfloat16 inputs) stores
        512 e4m3 codes quantized per tile of 128 with ``max(amax / 448, FLT_MIN)`` (NaNs ignored),
        the 4 float32 tile scales, then the 64 raw 16-bit ``k_pe`` values.
    scale : array_like, optional
        float32 with one element; required by ``"fp8_e4m3"``/``"fp8_e5m2"``, validated and
        unused otherwise.

    Raises
    ------
    kvscatter.Error
        Any broken rule; nothing has been written.

    Notes
    -----
    Torch tensors go through the native operator ``torch.ops.kvscatter.paged_latent_write``.

    Examples
    --------
    >>> import numpy as np, kvscatter
    >>> cache = np.zeros((1, 2, 6), np.float32)
    >>> kvscatter.paged_latent_write(np.ones((1, 4), np.float32), np.full((1, 2), 2, np.float32),
    ...                              cache, np.array([1]))
    >>> cache[0, 1].tolist()
    [1.0, 1.0, 1.0, 1.0, 2.0, 2.0]
    """
    ops = _torch_ops_for(kv_cache)
    if ops is not None:
        ops.paged_latent_write.default(kv_c, k_pe, kv_cache, slot_mapping, format, scale)
        return
    _ext.paged_latent_write(kv_c, k_pe, kv_cache, slot_mapping, format, scale, None)


def kv_compress_epilog(
    cache,
    x,
    slot_mapping,
    *,
    quant_group_size=64,
    quant_mode="fp8_e8m0",
    round_scale=True,
    x_scale=1.0,
    dtype=None,
) -> None:
    """Quantizes each bfloat16 row of ``x`` and scatters it into the paged uint8 ``cache``.

    Parameters
    ----------
    cache : ndarray or Tensor
        ``[num_blocks, block_size, 1, row_bytes]`` uint8, updated in place.
    x : ndarray or Tensor
        ``[..., d]`` bfloat16 (``d > 64``, ``d % 64 == 0``): 64 rope columns last.
    slot_mapping : ndarray or Tensor
        ``x.shape[:-1]`` int32 or int64; -1 skips the row.
    quant_group_size : int, default 64
        The group of the hifloat8_fp4 mode.
    quant_mode : str or int, default "fp8_e8m0"
        ``"fp8_bf16"`` (0), ``"fp8_e8m0"`` (1) or ``"hifloat8_fp4"`` (2), any case.
    round_scale : bool, default True
        Round the scales up to powers of two.
    x_scale : float, default 1.0
        Multiplies ``x`` before quantizing (rounded to float32).
    dtype : str, optional
        ``"bfloat16"`` for ``x`` passed as raw ``uint16``/``int16``.

    Returns
    -------
    None

    Raises
    ------
    kvscatter.Error
        (a ``ValueError``; plain ``ValueError`` for torch tensors) a shape, mode or slot the
        operator rejects; nothing is written.
    TypeError
        An argument of the wrong Python type.

    Examples
    --------
    >>> import ml_dtypes, numpy as np, kvscatter
    >>> cache = np.zeros((1, 4, 1, 224), np.uint8)
    >>> x = np.ones((1, 128), ml_dtypes.bfloat16)
    >>> kvscatter.kv_compress_epilog(cache, x, np.array([3]), quant_mode="fp8_bf16")
    >>> bool(cache[0, 3].any())
    True
    """
    quant_mode = _epilog_quant_mode(quant_mode)
    ops = _torch_ops_for(cache)
    if ops is not None:
        ops.kv_compress_epilog(
            cache,
            x,
            slot_mapping,
            quant_group_size=_as_int(quant_group_size, "quant_group_size"),
            quant_mode=quant_mode,
            round_scale=bool(round_scale),
            x_scale=float(x_scale),
            dtype=formats.canonical_dtype(dtype),
        )
        return
    _ext.kv_compress_epilog(
        cache,
        x,
        slot_mapping,
        _as_int(quant_group_size, "quant_group_size"),
        quant_mode,
        bool(round_scale),
        float(x_scale),
        formats.canonical_dtype(dtype),
    )


def kv_cache_update(key_cache, value_cache, new_keys, new_values, position, *, dtype=None) -> dict:
    """Writes ``L`` new tokens at sequence slot ``position`` of ``(B, S, H, D)`` caches.

    Parameters
    ----------
    key_cache, value_cache : ndarray or Tensor
        ``(B, S, H, D)`` float32, bfloat16 or float16, updated in place.
    new_keys, new_values : ndarray or Tensor
        ``(B, L, H, D)`` in float32 (converted with round-to-nearest-even) or the cache dtype.
    position : int
        ``0 <= position <= S - L``.
    dtype : str, optional
        The cache element type of data passed as raw integers.

    Returns
    -------
    dict
        ``{"key_cache": key_cache, "value_cache": value_cache, "length": position + L}``, the
        same array objects that were passed in.

    Raises
    ------
    kvscatter.Error
        (a ``ValueError``; plain ``ValueError`` for torch tensors) a shape, dtype or position
        the operator rejects; nothing is written.
    TypeError
        An argument of the wrong Python type.

    Examples
    --------
    >>> import numpy as np, kvscatter
    >>> k = np.zeros((1, 8, 2, 4), np.float32); v = np.zeros_like(k)
    >>> out = kvscatter.kv_cache_update(k, v, np.ones((1, 2, 2, 4), np.float32),
    ...                                 np.ones((1, 2, 2, 4), np.float32), 5)
    >>> out["length"], float(k[0, 5:7].sum())
    (7, 16.0)
    """
    position = _as_int(position, "position")
    ops = _torch_ops_for(key_cache)
    if ops is not None:
        ops.kv_cache_update(
            key_cache,
            value_cache,
            new_keys,
            new_values,
            position,
            dtype=formats.canonical_dtype(dtype),
        )
        return {"key_cache": key_cache, "value_cache": value_cache, "length": position + new_keys.shape[1]}
    length = _ext.kv_cache_update(
        key_cache,
        value_cache,
        new_keys,
        new_values,
        position,
        formats.canonical_dtype(dtype),
    )
    return {"key_cache": key_cache, "value_cache": value_cache, "length": length}


def _as_int(value, name: str) -> int:
    import operator

    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None


# torch.ops.kvscatter once kvscatter.torch loaded; False when this build has no torch operators.
_torch_ops_cache = None


def _torch_ops_for(tensor):
    """``torch.ops.kvscatter`` when ``tensor`` is a torch tensor and the operators are built."""
    global _torch_ops_cache
    torch = _sys.modules.get("torch")
    if torch is None or not isinstance(tensor, torch.Tensor):
        return None
    if _torch_ops_cache is None:
        try:
            from . import torch as kvs_torch

            _torch_ops_cache = kvs_torch.ops
        except ImportError:
            _torch_ops_cache = False  # no torch operators in this build: DLPack serves torch tensors
    return _torch_ops_cache or None


def _int_pair(pair):
    if pair is None or isinstance(pair, str):
        return pair
    return [_as_int(v, "strides/offsets entry") for v in pair]


def _mode_arg(mode, allowed: str) -> str:
    """A quant_mode as the library parses it: a name (any case, blanks stripped) or an int (a
    NumPy integer too). A string of digits is neither: the library reads those for its C ABI."""
    import operator

    if isinstance(mode, bool) or not (isinstance(mode, str) or hasattr(type(mode), "__index__")):
        raise TypeError(f"quant_mode must be a str or an int, got {mode!r}")
    if not isinstance(mode, str):
        return str(operator.index(mode))
    if mode.strip().isdigit():
        raise ValueError(f"quant_mode should be one of {allowed}, got '{mode}'")
    return mode


def _indexer_quant_mode(mode) -> str:
    return _mode_arg(mode, "[mxfp8, fp8, hifloat8, mxfp4] or an int 0-3")


def _epilog_quant_mode(mode) -> str:
    return _mode_arg(mode, "[fp8_bf16, fp8_e8m0, hifloat8_fp4] or an int 0-2")


# torch_npu's entry point with torch_npu's defaults (cache_mode='PA_NZ'); see kvscatter.torch_npu.
from .torch_npu import npu_scatter_pa_kv_cache  # noqa: E402


def set_num_threads(n: int) -> None:
    """Sets the number of worker threads the operators use.

    Parameters
    ----------
    n : int
        Threads; ``n <= 0`` restores the default (``KVSCATTER_NUM_THREADS`` or all cores).

    Returns
    -------
    None

    Raises
    ------
    TypeError
        ``n`` is not an int.

    Examples
    --------
    >>> import kvscatter
    >>> kvscatter.set_num_threads(2); kvscatter.get_num_threads()
    2
    >>> kvscatter.set_num_threads(0)
    """
    _ext.set_num_threads(_as_int(n, "n"))


def get_num_threads() -> int:
    """The number of worker threads the operators use.

    Returns
    -------
    int
        At least 1. Results never depend on it.

    Examples
    --------
    >>> import kvscatter
    >>> kvscatter.get_num_threads() >= 1
    True
    """
    return _ext.get_num_threads()


def simd_target() -> str:
    """The SIMD target (Highway's name, e.g. ``"AVX2"``) the kernels run on.

    Returns
    -------
    str
        The target the dispatcher chose for this CPU.

    Examples
    --------
    >>> import kvscatter
    >>> kvscatter.simd_target() in kvscatter.simd_targets_available().split()
    True
    """
    return _ext.simd_target()


def simd_targets_available() -> str:
    """The SIMD targets compiled into the library that this CPU can run.

    Returns
    -------
    str
        Highway target names separated by spaces, best first (e.g. ``"AVX2 SSE4 SCALAR"``).

    Examples
    --------
    >>> import kvscatter
    >>> "SCALAR" in kvscatter.simd_targets_available().split()
    True
    """
    return _ext.simd_targets_available()
