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

from . import _kvscatter as _ext
from . import formats
from ._kvscatter import (
    Error,
    get_num_threads,
    set_num_threads,
    simd_target,
    simd_targets_available,
)

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
    """Writes each token's key (and value) rows into paged caches at ``slot_mapping``.

    Same arguments as ``torch_npu.npu_scatter_pa_kv_cache`` plus the aclnn attributes
    ``scatter_mode``, ``strides`` and ``offsets``. ``value`` and ``value_cache`` may be None
    (key-only call). ``cache_mode``: "Norm" or "PA_NZ"; ``scatter_mode``: "None", "Nct",
    "Alibi", "Rope", "Omni" or "NHSD" (None means the default). ``strides`` and ``offsets``:
    ``[key, value]`` pairs in elements, Nct only. Negative slots are padding and are skipped;
    a slot past the cache is an error. ``key_cache`` and ``value_cache`` are updated in place.
    """
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


#: Alias for code written against ``torch_npu.npu_scatter_pa_kv_cache``.
npu_scatter_pa_kv_cache = scatter_pa_kv_cache


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
    in place; the caches are only read.

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
        Outputs: Norm ``[rows, num_heads, head_size]``, PA_NZ ``[rows, C1 * L]``, with at least
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
    and rows not hit, keep their contents. Repeated slots: the last row wins.

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

    if isinstance(quant_mode, bool) or not isinstance(quant_mode, (str, int)):
        raise TypeError(f"quant_mode must be a str or an int, got {quant_mode!r}")
    if isinstance(x_scale, bool) or not isinstance(x_scale, numbers.Real):
        raise TypeError(f"x_scale must be a float, got {x_scale!r}")
    if not isinstance(round_scale, bool):
        raise TypeError(f"round_scale must be a bool, got {round_scale!r}")
    _ext.indexer_quant_cache(
        cache,
        cache_scale,
        x,
        slot_mapping,
        str(quant_mode),
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

    ``key`` ``[T, N, Dk]``, ``value`` ``[T, N, Dv]`` (float8_e4m3fn or float8_e5m2),
    ``key_cache`` ``[NB, N, BS, Dk]``, ``value_cache`` ``[NB, N, BS, Dv]``, ``key_scale``
    ``[T, N]`` float32, ``key_scale_cache`` ``[NB, N, BS, 1]`` float32. Slots below 0 or past
    the cache are skipped. The three caches are updated in place.
    """
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
    """
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
    """
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
    """
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

    ``quant_mode``: "fp8_bf16" (0), "fp8_e8m0" (1) or "hifloat8_fp4" (2), as a string (any
    case) or an int. ``cache`` ``[num_blocks, block_size, 1, row_bytes]`` uint8 is updated in
    place; a slot of -1 skips its row.
    """
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

    ``new_keys`` and ``new_values`` are ``(B, L, H, D)`` in float32 or the cache dtype;
    ``0 <= position <= S - L``. Updates the caches in place and returns
    ``{"key_cache": key_cache, "value_cache": value_cache, "length": position + L}``
    (the same array objects that were passed in).
    """
    length = _ext.kv_cache_update(
        key_cache,
        value_cache,
        new_keys,
        new_values,
        _as_int(position, "position"),
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
