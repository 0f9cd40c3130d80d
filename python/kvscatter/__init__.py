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
    the cache are skipped, as upstream does. The three caches are updated in place.
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
    ops = _torch_ops_for(cache)
    if ops is not None:
        ops.kv_compress_epilog(
            cache,
            x,
            slot_mapping,
            quant_group_size=_as_int(quant_group_size, "quant_group_size"),
            quant_mode=_quant_mode_str(quant_mode),
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

    ``new_keys`` and ``new_values`` are ``(B, L, H, D)`` in float32 or the cache dtype;
    ``0 <= position <= S - L``. Updates the caches in place and returns
    ``{"key_cache": key_cache, "value_cache": value_cache, "length": position + L}``
    (the same array objects that were passed in).
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


def _quant_mode_str(mode) -> str:
    if isinstance(mode, str):
        return mode
    return str(_as_int(mode, "quant_mode"))


# torch_npu's entry point with torch_npu's defaults (cache_mode='PA_NZ'); see kvscatter.torch_npu.
from .torch_npu import npu_scatter_pa_kv_cache  # noqa: E402
