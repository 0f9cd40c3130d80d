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
    "get_num_threads",
    "kv_cache_update",
    "kv_compress_epilog",
    "npu_scatter_pa_kv_cache",
    "paged_cache_gather",
    "paged_kv_write",
    "paged_latent_write",
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
