"""vLLM-compatible cache operators: vLLM's names, argument order and defaults.

Each function is a thin adapter over a kvscatter operator and takes NumPy arrays or CPU tensors,
updating the caches in place like ``vllm._custom_ops``. PyTorch tensors go through the native
operator of the same name, ``torch.ops.kvscatter.<name>`` (one dispatcher call, the
``kv_cache_dtype`` mapped in C++), when the build has the PyTorch operators, else through
DLPack. The calls check everything vLLM's CUDA kernels take on trust (cache dtypes, slot ranges,
strides) and raise ``ValueError`` / ``TypeError`` before writing anything.
"""

from __future__ import annotations

import operator
import re
import sys

from . import _kvscatter as _ext
from . import _torch_ops_for

__all__ = [
    "concat_and_cache_mla",
    "cp_gather_cache",
    "gather_and_maybe_dequant_cache",
    "reshape_and_cache_flash",
]

_FLASH_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
_GATHER_DTYPES = _FLASH_DTYPES
_MLA_DTYPES = _FLASH_DTYPES + ("fp8_ds_mla",)


def concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale) -> None:
    """``vllm._custom_ops.concat_and_cache_mla`` (kvscatter ``paged_latent_write``).

    Row ``[kv_c[t] | k_pe[t]]`` of every token with ``slot_mapping[t] >= 0`` goes to slot
    ``slot_mapping[t]`` of ``kv_cache [num_blocks, block_size, entry]``: copied (``"auto"``,
    ``"float16"``, ``"bfloat16"``), quantized with ``scale`` (``"fp8"``, ``"fp8_e4m3"``,
    ``"fp8_e5m2"``), or packed into the 656-byte ``"fp8_ds_mla"`` entry (per-tile scales;
    ``scale`` validated and unused). ``kv_c`` ``[T, kv_lora_rank]`` and ``k_pe`` ``[T, pe_dim]``
    are 2-D; ``scale`` is float32 with one element.
    """
    fmt, dtype = _cache_format(kv_cache_dtype, "concat_and_cache_mla", _MLA_DTYPES)
    _required(kv_c=kv_c, k_pe=k_pe, kv_cache=kv_cache, slot_mapping=slot_mapping)
    _float32_scale(scale, "scale")
    ops = _torch_ops_for(kv_cache)
    if ops is not None:
        _on_torch(ops.concat_and_cache_mla.default, "kv_cache", kv_c, k_pe, kv_cache,
                  slot_mapping, kv_cache_dtype, scale)
        return
    _ext.paged_latent_write(kv_c, k_pe, kv_cache, slot_mapping, fmt, scale, dtype)


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
    if kv_cache_dtype == "fp8_ds_mla":
        return "fp8_ds_mla", None
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
    _required(key=key, value=value, key_cache=key_cache, value_cache=value_cache,
              slot_mapping=slot_mapping)
    _float32_scale(k_scale, "k_scale")
    _float32_scale(v_scale, "v_scale")
    ops = _torch_ops_for(key_cache)
    if ops is not None:
        _on_torch(ops.reshape_and_cache_flash.default, "key_cache", key, value, key_cache,
                  value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)
        return
    _ext.paged_kv_write(
        key, value, key_cache, value_cache, slot_mapping, fmt, "NHD", k_scale, v_scale, dtype
    )


def _index(value, name):
    """A Python integer (or any object with __index__), never a bool (nor a bool array or
    tensor), within the int64 range the operators take."""
    if (isinstance(value, bool) or _dtype_name(value) == "bool"
            or not hasattr(type(value), "__index__")):
        raise TypeError(f"{name} must be an int, got {value!r}")
    value = operator.index(value)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{name} = {value} is outside the int64 range")
    return value


def _dtype_name(array):
    """The element type's name without a framework prefix ("float64" for NumPy and torch
    alike), or None for an object without a dtype."""
    dtype = getattr(array, "dtype", None)
    return None if dtype is None else str(dtype).removeprefix("torch.")


def _required(**arrays):
    for name, array in arrays.items():
        if array is None:
            raise TypeError(f"{name} is required, got None")


def _float32_scale(scale, name):
    """The scales are float32 arrays (or tensors); any other element type is a ValueError, the
    types the library does not take at all (float64) included."""
    _required(**{name: scale})
    found = _dtype_name(scale)
    if found is not None and found != "float32":
        raise ValueError(f"{name} must be float32, got {found}")


_NOT_A_TENSOR = re.compile(r"Expected a value of type '[^']*' for argument '(\w+)' but instead "
                           r"found type '(\w+)'")


def _on_torch(op, routed_by, *args):
    """Calls a torch.ops.kvscatter operator, chosen because ``routed_by`` is a tensor. The
    dispatcher refuses another argument that is not a tensor (a NumPy array) before the
    operator runs, with a RuntimeError; that is the caller's type error."""
    try:
        op(*args)
    except RuntimeError as e:
        m = _NOT_A_TENSOR.search(str(e))
        if m is None:
            raise
        raise TypeError(f"{m[1]} must be a torch.Tensor like {routed_by}, got {m[2]}") from None


# The element types every operator takes; cp_gather_cache copies any other of 1, 2 or 4 bytes
# (bool, float8_e4m3fnuz, a packed float4 tensor) as the unsigned integers of its width.
_COPY_VIEWS = {1: "uint8", 2: "uint16", 4: "uint32"}
_KNOWN = {"float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16", "int32",
          "uint32", "float8_e5m2", "float8_e4m3fn", "float8_e8m0fnu"}


def _as_raw(src_cache, dst):
    """src_cache and dst viewed as unsigned integers of their width where they share a dtype
    the library has no name for; unchanged otherwise (a mismatch is reported as such)."""
    name, dst_name = _dtype_name(src_cache), _dtype_name(dst)
    if name is None or dst_name is None or (name in _KNOWN and dst_name in _KNOWN):
        return src_cache, dst
    if name != dst_name:  # the library's message, for types it may have no name for
        raise ValueError(f"dst dtype {dst_name} differs from src_cache dtype {name}")
    width = _COPY_VIEWS.get(getattr(src_cache, "itemsize", None))
    if width is None:
        return src_cache, dst
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(src_cache, torch.Tensor):
        target = getattr(torch, width)
    else:
        import numpy as np

        target = np.dtype(width)
    return src_cache.view(target), dst.view(target)


def gather_and_maybe_dequant_cache(
    src_cache, dst, block_table, cu_seq_lens, token_to_seq, num_tokens, kv_cache_dtype, scale,
    seq_starts=None,
) -> None:
    """``vllm._custom_ops.gather_and_maybe_dequant_cache`` (kvscatter ``paged_cache_gather``).

    Row ``t < num_tokens`` of ``dst`` receives token ``t - cu_seq_lens[b] + seq_starts[b]`` of
    sequence ``b = token_to_seq[t]`` (skipped when ``t >= cu_seq_lens[b + 1]``), copied for
    ``"auto"``/``"float16"``/``"bfloat16"`` caches or dequantized (``code * scale`` in float32,
    rounded to ``dst``'s type) for ``"fp8"``/``"fp8_e4m3"``/``"fp8_e5m2"``. ``src_cache``:
    ``[num_blocks, block_size, *entry]``; ``dst``: ``[rows, *entry]`` float32, float16 or
    bfloat16; index tensors int32 or int64, one dtype; ``scale``: float32, one element.
    """
    fmt, dtype = _cache_format(kv_cache_dtype, "gather_and_maybe_dequant_cache", _GATHER_DTYPES)
    _required(src_cache=src_cache, dst=dst, block_table=block_table, cu_seq_lens=cu_seq_lens,
              token_to_seq=token_to_seq)
    _float32_scale(scale, "scale")
    num_tokens = _index(num_tokens, "num_tokens")
    ops = _torch_ops_for(dst)
    if ops is not None:
        _on_torch(ops.gather_and_maybe_dequant_cache.default, "dst", src_cache, dst, block_table,
                  cu_seq_lens, token_to_seq, num_tokens, kv_cache_dtype, scale, seq_starts)
        return
    rule = None if fmt != "copy" else (dtype or "float")
    _ext.paged_cache_gather(
        src_cache, dst, block_table, cu_seq_lens, fmt, scale, -1, seq_starts, token_to_seq,
        num_tokens, rule,
    )


def cp_gather_cache(src_cache, dst, block_table, cu_seq_lens, batch_size, seq_starts=None) -> None:
    """``vllm._custom_ops.cp_gather_cache`` (kvscatter ``paged_cache_gather``, raw copy).

    Sequence ``b < batch_size`` fills rows ``[cu_seq_lens[b], cu_seq_lens[b+1])`` of ``dst``
    with its cached entries from position ``seq_starts[b]`` (default 0) on. ``src_cache`` and
    ``dst`` share any dtype of 1, 2 or 4 bytes.
    """
    _required(src_cache=src_cache, dst=dst, block_table=block_table, cu_seq_lens=cu_seq_lens)
    batch_size = _index(batch_size, "batch_size")
    if batch_size < 0:
        raise ValueError(f"batch_size must be >= 0, got {batch_size}")
    src_cache, dst = _as_raw(src_cache, dst)
    ops = _torch_ops_for(dst)
    if ops is not None:
        _on_torch(ops.cp_gather_cache.default, "dst", src_cache, dst, block_table, cu_seq_lens,
                  batch_size, seq_starts)
        return
    _ext.paged_cache_gather(
        src_cache, dst, block_table, cu_seq_lens, "copy", None, batch_size, seq_starts, None, 0,
        None,
    )
