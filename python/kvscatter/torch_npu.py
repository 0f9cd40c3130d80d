"""The torch_npu entry points of kvscatter's operators, with upstream names, signatures and defaults.

Code written for Ascend NPUs runs on the CPU by importing this module in place of torch_npu
(and of the ``cann_ops_transformer`` torch extension, which provides the two quantized cache
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
from . import kv_compress_epilog as _kv_compress_epilog
from . import scatter_pa_kv_cache as _scatter_pa_kv_cache
from . import scatter_pa_kv_cache_with_k_scale as _scatter_with_k_scale

__all__ = [
    "kv_compress_epilog",
    "npu_gather_pa_kv_cache",
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
):
    """Reads each sequence's tokens out of paged caches into dense ``key`` / ``value`` rows.

    Upstream: ``torch_npu.npu_gather_pa_kv_cache(key_cache, value_cache, block_tables,
    seq_lens, key, value, *, seq_offset=None, is_seq_lens_cumsum=False) -> None``; Norm
    caches. :func:`kvscatter.gather_pa_kv_cache` has the same arguments plus ``cache_mode``.

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
    )


def _contiguous_copy(cache):
    clone = getattr(cache, "clone", None)
    if clone is not None and hasattr(cache, "contiguous"):  # a torch tensor
        return cache.contiguous().clone()
    import numpy as np

    return np.array(cache, copy=True, order="C")
