"""The torch_npu entry points of kvscatter's operators, with upstream names, signatures and defaults.

Code written for Ascend NPUs runs on the CPU by importing this module in place of torch_npu
(and of the ``cann_ops_transformer`` torch extension, which provides the quantized cache
writers)::

    import kvscatter.torch_npu as torch_npu
    torch_npu.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping,
                                      cache_mode="Norm")

Every function takes PyTorch tensors (through the native ``torch.ops.kvscatter`` operators)
or NumPy arrays, updates the caches in place and returns what upstream returns. Upstream
defaults are kept, in particular ``cache_mode='PA_NZ'`` for ``npu_scatter_pa_kv_cache``:
torch_npu's own tests pass NZ-shaped caches without a ``cache_mode``, while vLLM-Ascend passes
``cache_mode="Norm"`` explicitly. ``cache_mode=None`` runs Norm, as torch_npu's C++ does with
a null mode.
"""

from __future__ import annotations

from . import gather_pa_kv_cache as _gather_pa_kv_cache
from . import indexer_quant_cache as _indexer_quant_cache
from . import kv_compress_epilog as _kv_compress_epilog
from . import scatter_pa_cache as _scatter_pa_cache
from . import scatter_pa_kv_cache as _scatter_pa_kv_cache
from . import scatter_pa_kv_cache_with_k_scale as _scatter_with_k_scale

__all__ = [
    "indexer_quant_cache",
    "kv_compress_epilog",
    "npu_gather_pa_kv_cache",
    "npu_scatter_pa_cache",
    "npu_scatter_pa_kv_cache",
    "npu_scatter_pa_kv_cache_functional",
    "scatter_pa_kv_cache_with_k_scale",
]


def npu_scatter_pa_kv_cache(
    key,
    value,
    key_cache,
    value_cache,
    slot_mapping,
    *,
    compress_lens=None,
    compress_seq_offsets=None,
    seq_lens=None,
    cache_mode="PA_NZ",
):
    """Writes each token's key and value rows into paged caches, in place (torch_npu's API).

    Upstream: ``torch_npu.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache,
    slot_mapping, *, compress_lens=None, compress_seq_offsets=None, seq_lens=None,
    cache_mode='PA_NZ') -> None``.

    Parameters
    ----------
    key : Tensor or ndarray
        ``[T, N, Dk]`` new keys (or ``[B, S, N, Dk]`` with the compress tensors).
    value : Tensor or ndarray
        ``[T, N, Dv]`` new values, the dtype of ``key``.
    key_cache, value_cache : Tensor or ndarray
        PA_NZ: ``[num_blocks, N * D * itemsize / 32, block_size, 32 / itemsize]``; Norm:
        ``[num_blocks, block_size, N, D]``. Updated in place.
    slot_mapping : Tensor or ndarray
        ``[T]`` int32 or int64 slots; negative slots are padding and are skipped.
    compress_lens, compress_seq_offsets, seq_lens : Tensor or ndarray, optional
        The compressed-cache modes (see :func:`kvscatter.scatter_pa_kv_cache`).
    cache_mode : str or None, default 'PA_NZ'
        ``"PA_NZ"`` or ``"Norm"``; None means Norm.

    Returns
    -------
    None

    Raises
    ------
    ValueError
        A shape, dtype or slot the operator rejects; nothing is written.

    Examples
    --------
    >>> import torch, kvscatter.torch_npu as torch_npu
    >>> key = torch.ones(1, 1, 16, dtype=torch.float16)
    >>> kc = torch.zeros(2, 1, 16, 16, dtype=torch.float16)   # NZ: 1 * 16 * 2 / 32 = 1
    >>> vc = torch.zeros_like(kc)
    >>> torch_npu.npu_scatter_pa_kv_cache(key, key, kc, vc, torch.tensor([17], dtype=torch.int32))
    >>> bool(kc[1, 0, 1].eq(1).all())
    True
    """
    _scatter_pa_kv_cache(
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        compress_lens=compress_lens,
        compress_seq_offsets=compress_seq_offsets,
        seq_lens=seq_lens,
        cache_mode=cache_mode,
    )


def npu_scatter_pa_kv_cache_functional(
    key,
    value,
    key_cache,
    value_cache,
    slot_mapping,
    *,
    compress_lens=None,
    compress_seq_offsets=None,
    seq_lens=None,
    cache_mode="PA_NZ",
):
    """Out-of-place :func:`npu_scatter_pa_kv_cache`: returns updated copies of both caches.

    Upstream: ``torch_npu.npu_scatter_pa_kv_cache_functional(...) -> (Tensor, Tensor)``, same
    arguments as :func:`npu_scatter_pa_kv_cache`. The caches passed in are left untouched.

    Parameters
    ----------
    key, value, key_cache, value_cache, slot_mapping, compress_lens, compress_seq_offsets, seq_lens, cache_mode
        As for :func:`npu_scatter_pa_kv_cache`.

    Returns
    -------
    tuple of Tensor or ndarray
        ``(key_cache_out, value_cache_out)``: contiguous copies of the caches, updated.

    Raises
    ------
    ValueError
        A shape, dtype or slot the operator rejects.

    Examples
    --------
    >>> import torch, kvscatter.torch_npu as torch_npu
    >>> kc = torch.zeros(2, 4, 1, 8)
    >>> k2, v2 = torch_npu.npu_scatter_pa_kv_cache_functional(
    ...     torch.ones(1, 1, 8), torch.ones(1, 1, 8), kc, kc.clone(), torch.tensor([5]),
    ...     cache_mode="Norm")
    >>> float(k2.sum()), float(kc.sum())
    (8.0, 0.0)
    """
    key_cache = _contiguous_copy(key_cache)
    value_cache = _contiguous_copy(value_cache)
    npu_scatter_pa_kv_cache(
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        compress_lens=compress_lens,
        compress_seq_offsets=compress_seq_offsets,
        seq_lens=seq_lens,
        cache_mode=cache_mode,
    )
    return key_cache, value_cache


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
):
    """Copies float8 key/value rows and a float32 scale per (token, head) into BNBD caches.

    Upstream (``cann_ops_transformer`` torch extension):
    ``scatter_pa_kv_cache_with_k_scale(key, value, key_cache, value_cache, slot_mapping,
    key_scale, key_scale_cache, *, cache_layout='BNBD') -> None``.

    Parameters
    ----------
    key : Tensor or ndarray
        ``[T, N, Dk]`` float8_e4m3fn or float8_e5m2.
    value : Tensor or ndarray
        ``[T, N, Dv]``, the dtype of ``key``.
    key_cache, value_cache : Tensor or ndarray
        ``[NB, N, BS, Dk]`` and ``[NB, N, BS, Dv]``, updated in place.
    slot_mapping : Tensor or ndarray
        ``[T]`` int32 or int64; slots below 0 or past the cache are skipped.
    key_scale : Tensor or ndarray
        ``[T, N]`` float32.
    key_scale_cache : Tensor or ndarray
        ``[NB, N, BS, 1]`` float32, updated in place.
    cache_layout : str, default 'BNBD'
        The only layout.

    Returns
    -------
    None

    Raises
    ------
    ValueError
        A shape or dtype the operator rejects; nothing is written.

    Examples
    --------
    >>> import torch, kvscatter.torch_npu as torch_npu
    >>> f8 = torch.float8_e4m3fn
    >>> kc, vc = torch.zeros(1, 1, 4, 8, dtype=f8), torch.zeros(1, 1, 4, 8, dtype=f8)
    >>> ksc = torch.zeros(1, 1, 4, 1)
    >>> torch_npu.scatter_pa_kv_cache_with_k_scale(
    ...     torch.ones(1, 1, 8, dtype=f8), torch.ones(1, 1, 8, dtype=f8), kc, vc,
    ...     torch.tensor([2]), torch.full((1, 1), 0.5), ksc)
    >>> float(ksc[0, 0, 2, 0])
    0.5
    """
    _scatter_with_k_scale(
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        key_scale,
        key_scale_cache,
        cache_layout=cache_layout,
    )


def kv_compress_epilog(
    cache,
    x,
    slot_mapping,
    *,
    quant_group_size=64,
    quant_mode="fp8_e8m0",
    round_scale=True,
    x_scale=1.0,
):
    """Quantizes bfloat16 rows of ``x`` and scatters them into the paged uint8 ``cache``.

    Upstream (``cann_ops_transformer`` torch extension): ``kv_compress_epilog(cache, x,
    slot_mapping, *, quant_group_size=64, quant_mode="fp8_e8m0", round_scale=True,
    x_scale=1.0) -> None``.

    Parameters
    ----------
    cache : Tensor or ndarray
        ``[num_blocks, block_size, 1, row_bytes]`` uint8, updated in place.
    x : Tensor or ndarray
        ``[..., d]`` bfloat16, ``d > 64`` and ``d % 64 == 0``.
    slot_mapping : Tensor or ndarray
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
    None

    Raises
    ------
    ValueError
        A shape, mode or slot the operator rejects; nothing is written.

    Examples
    --------
    >>> import torch, kvscatter.torch_npu as torch_npu
    >>> cache = torch.zeros(1, 4, 1, 224, dtype=torch.uint8)
    >>> x = torch.ones(1, 128, dtype=torch.bfloat16)
    >>> torch_npu.kv_compress_epilog(cache, x, torch.tensor([3]), quant_mode="fp8_bf16")
    >>> bool(cache[0, 3].any())
    True
    """
    _kv_compress_epilog(
        cache,
        x,
        slot_mapping,
        quant_group_size=quant_group_size,
        quant_mode=quant_mode,
        round_scale=round_scale,
        x_scale=x_scale,
    )


def npu_gather_pa_kv_cache(
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
):
    """Reads each sequence's tokens out of paged caches into dense ``key`` / ``value`` rows.

    Upstream: ``torch_npu.npu_gather_pa_kv_cache(key_cache, value_cache, block_tables,
    seq_lens, key, value, *, seq_offset=None, is_seq_lens_cumsum=False) -> None``. Upstream
    reads the cache layout from the NPU tensor format (FRACTAL_NZ means PA_NZ); a CPU tensor
    has no such format, so ``cache_mode`` says it here.

    Parameters
    ----------
    key_cache, value_cache : Tensor or ndarray
        ``[num_blocks, block_size, num_heads, head_size]``; read only.
    block_tables : Tensor or ndarray
        ``[batch, max_blocks_per_seq]`` int32 or int64 block ids.
    seq_lens : Tensor or ndarray
        ``[batch]`` lengths (or ``[batch + 1]`` prefix sums with ``is_seq_lens_cumsum``).
    key, value : Tensor or ndarray
        ``[rows, num_heads, head_size]`` outputs, written in place.
    seq_offset : Tensor or ndarray, optional
        ``[batch]`` offsets; whole blocks shift the start in the block table.
    is_seq_lens_cumsum : bool, default False
        ``seq_lens`` holds prefix sums.
    cache_mode : {"Norm", "PA_NZ"}, default "Norm"
        The caches' layout (see :func:`kvscatter.gather_pa_kv_cache`).

    Returns
    -------
    None

    Raises
    ------
    ValueError
        A shape, dtype or block id the operator rejects; nothing is written.

    Examples
    --------
    >>> import numpy as np, kvscatter.torch_npu as torch_npu
    >>> kc = np.arange(4 * 2 * 1 * 2, dtype=np.float32).reshape(4, 2, 1, 2)
    >>> key = np.zeros((3, 1, 2), np.float32)
    >>> torch_npu.npu_gather_pa_kv_cache(kc, kc.copy(), np.array([[2, 0]], np.int32),
    ...                                  np.array([3], np.int32), key, key.copy())
    >>> key[:, 0, 0].tolist()
    [8.0, 10.0, 0.0]
    """
    _gather_pa_kv_cache(
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        key,
        value,
        seq_offset=seq_offset,
        is_seq_lens_cumsum=is_seq_lens_cumsum,
        cache_mode=cache_mode,
    )


def npu_scatter_pa_cache(
    key,
    slot_mapping,
    *,
    compress_lens=None,
    compress_seq_offset=None,
    seq_lens=None,
    key_cache,
    compress_seq_offsets=None,
    dtype=None,
):
    """Writes one tensor into one paged cache, in place (torch_npu's API).

    Upstream: ``torch_npu.npu_scatter_pa_cache(key, slot_mapping, *, compress_lens=None,
    compress_seq_offset=None, seq_lens=None, key_cache) -> ()``: ``slot_mapping`` second and
    ``key_cache`` a required keyword. :func:`kvscatter.scatter_pa_cache` has the arguments in
    kvscatter's order (``key, key_cache, slot_mapping``).

    Parameters
    ----------
    key : Tensor or ndarray
        ``[tokens, num_heads, head_size]`` (plain) or ``[batch, seq_len, num_heads, head_size]``.
    slot_mapping : Tensor or ndarray
        int32 or int64: ``[tokens]`` (negative: padding), or ``[batch, num_heads]`` run starts
        with a 4-D key.
    compress_lens, seq_lens : Tensor or ndarray, optional
        The compress scenarios' lengths (see :func:`kvscatter.scatter_pa_cache`).
    compress_seq_offset : Tensor or ndarray, optional
        ``[batch * num_heads]`` window starts: given, the ReduceMean scenario; absent, tail keep.
    key_cache : Tensor or ndarray
        ``[num_blocks, block_size, num_heads, head_size]``, updated in place.
    compress_seq_offsets : Tensor or ndarray, optional
        The same as ``compress_seq_offset`` (the spelling of upstream's own examples); give one.
    dtype : str, optional
        Stands in for ``torch_npu.hifloat8`` / ``float4_e2m1`` / ``float4_e1m2`` tensors:
        ``"hifloat8"``, ``"float4_e2m1"`` or ``"float4_e1m2"`` for ``uint8`` data (FP4 packed
        two per byte, the last axis counting bytes).

    Returns
    -------
    None

    Raises
    ------
    ValueError
        A shape, dtype or slot the operator rejects (nothing is written), or both spellings of
        the offsets.

    Examples
    --------
    >>> import torch, kvscatter.torch_npu as torch_npu
    >>> cache = torch.zeros(2, 2, 1, 4, dtype=torch.uint8)
    >>> codes = torch.tensor([[[0x21, 0x7F, 0x00, 0x9A]]], dtype=torch.uint8)
    >>> torch_npu.npu_scatter_pa_cache(codes, torch.tensor([3]), key_cache=cache,
    ...                                dtype="float4_e2m1")
    >>> cache[1, 1, 0].tolist()
    [33, 127, 0, 154]
    """
    if compress_seq_offset is not None and compress_seq_offsets is not None:
        raise ValueError("give compress_seq_offset or compress_seq_offsets, not both")
    _scatter_pa_cache(
        key,
        key_cache,
        slot_mapping,
        compress_lens=compress_lens,
        compress_seq_offsets=compress_seq_offset if compress_seq_offsets is None
        else compress_seq_offsets,
        seq_lens=seq_lens,
        dtype=dtype,
    )


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
):
    """Quantizes each row of ``x`` into a paged cache and its scale(s) into a scale cache.

    Upstream (``cann_ops_transformer`` torch extension): ``indexer_quant_cache(Tensor(a!)
    cache, Tensor(b!) cache_scale, Tensor x, Tensor slot_mapping, *, str quant_mode="fp8",
    bool round_scale=True, float x_scale=1.0) -> ()``.

    Parameters
    ----------
    cache : Tensor or ndarray
        ``[num_blocks, block_size, 1, W]``: float8 (``"fp8"``, ``"mxfp8"``), ``uint8`` for
        ``"hifloat8"`` and packed ``"mxfp4"``. Updated in place.
    cache_scale : Tensor or ndarray
        ``[num_blocks, block_size, 1, Ws]``: float32 (``"fp8"``) or E8M0 (``uint8`` or
        ``torch.float8_e8m0fnu``) for the MX modes. Updated in place.
    x : Tensor or ndarray
        ``[..., d]`` float16 or bfloat16.
    slot_mapping : Tensor or ndarray
        ``x.shape[:-1]`` int32 or int64; -1 skips the row.
    quant_mode : str or int, default "fp8"
        ``"mxfp8"`` (0), ``"fp8"`` (1), ``"hifloat8"`` (2) or ``"mxfp4"`` (3), any case.
    round_scale : bool, default True
        ``"fp8"``: round the scale up to a power of two.
    x_scale : float, default 1.0
        ``"hifloat8"``: multiplies ``x`` before encoding.
    dtype : str, optional
        Not upstream: stands in for ``torch_npu`` dtypes torch lacks (``"float4_e2m1"`` for a
        packed ``uint8`` cache, ``"float8_e4m3fn"`` for float8 bits in ``uint8``).

    Returns
    -------
    None

    Raises
    ------
    ValueError
        A shape, mode or slot the operator rejects; nothing is written.

    Examples
    --------
    >>> import torch, kvscatter.torch_npu as torch_npu
    >>> cache = torch.zeros(1, 2, 1, 32, dtype=torch.float8_e4m3fn)
    >>> scale = torch.zeros(1, 2, 1, 1)
    >>> x = ((torch.arange(32) - 16) / 4).half()[None]
    >>> torch_npu.indexer_quant_cache(cache, scale, x, torch.tensor([1]))
    >>> float(scale[0, 1, 0, 0])
    0.015625
    """
    _indexer_quant_cache(
        cache,
        cache_scale,
        x,
        slot_mapping,
        quant_mode=quant_mode,
        round_scale=round_scale,
        x_scale=x_scale,
        dtype=dtype,
    )


def _contiguous_copy(cache):
    clone = getattr(cache, "clone", None)
    if clone is not None and hasattr(cache, "contiguous"):  # a torch tensor
        return cache.contiguous().clone()
    import numpy as np

    return np.array(cache, copy=True, order="C")
