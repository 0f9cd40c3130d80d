"""vLLM-compatible cache operators: vLLM's names, argument order and defaults.

Each function is a thin adapter over a kvscatter operator and takes NumPy arrays or CPU tensors
(PyTorch tensors through DLPack), updating the caches in place like ``vllm._custom_ops``. The
calls check everything vLLM's CUDA kernels take on trust (cache dtypes, slot ranges, strides) and
raise ``ValueError`` / ``TypeError`` before writing anything.
"""

from __future__ import annotations

from . import _kvscatter as _ext

__all__ = ["reshape_and_cache_flash"]

_FLASH_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")


def _cache_format(kv_cache_dtype, op, allowed):
    """Maps a vLLM ``kv_cache_dtype`` string to (kvscatter format, required input dtype)."""
    if not isinstance(kv_cache_dtype, str):
        raise TypeError(f"kv_cache_dtype must be a str, got {kv_cache_dtype!r}")
    if kv_cache_dtype not in allowed:
        expected = ", ".join(f"'{a}'" for a in allowed)
        raise ValueError(
            f"kv_cache_dtype '{kv_cache_dtype}' is not supported by {op} (expected one of {expected})"
        )
    if kv_cache_dtype in ("fp8", "fp8_e4m3"):
        return "fp8_e4m3", None
    if kv_cache_dtype == "fp8_e5m2":
        return "fp8_e5m2", None
    if kv_cache_dtype == "auto":
        return "copy", None
    return "copy", kv_cache_dtype


def reshape_and_cache_flash(
    key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale
) -> None:
    """``vllm._custom_ops.reshape_and_cache_flash`` on the CPU (kvscatter ``paged_kv_write``).

    Parameters
    ----------
    key, value : array_like
        ``[T, num_heads, head_size]`` float32, float16 or bfloat16; ``T >= len(slot_mapping)``.
    key_cache, value_cache : array_like
        ``[num_blocks, block_size, num_heads, head_size]`` views with any strides (an HND cache
        is passed, as vLLM does, as a permuted view; K and V may be ``kv[:, 0]`` and
        ``kv[:, 1]`` of one allocation). ``uint8`` or float8 for the fp8 types.
    slot_mapping : array_like
        ``[num_tokens]`` int32 or int64; negative slots are padding.
    kv_cache_dtype : str
        ``"auto"``, ``"float16"``, ``"bfloat16"`` (no conversion; the named types require data of
        that dtype), ``"fp8"`` / ``"fp8_e4m3"`` or ``"fp8_e5m2"`` (quantized: ``x / scale``,
        round to nearest even, saturated, NaN as ``0x7F``).
    k_scale, v_scale : array_like
        float32 with 1 or ``num_heads`` elements, equal shapes (checked in every mode).
    """
    fmt, dtype = _cache_format(kv_cache_dtype, "reshape_and_cache_flash", _FLASH_DTYPES)
    if k_scale is None or v_scale is None:
        raise TypeError(f"{'k_scale' if k_scale is None else 'v_scale'} is required, got None")
    _ext.paged_kv_write(
        key, value, key_cache, value_cache, slot_mapping, fmt, "NHD", k_scale, v_scale, dtype
    )
