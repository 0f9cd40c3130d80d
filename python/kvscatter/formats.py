"""Number formats of kvscatter, vectorised over NumPy arrays.

``encode(x, dtype)`` rounds float32 values to a format and returns the codes as unsigned
integers (uint16 for bfloat16/float16, uint8 for the 8-bit formats and float4_e2m1, one nibble
per byte in the low 4 bits, uint32 for float32); ``decode(codes, dtype)`` returns float32.
They call the library's scalar (and, for bfloat16/float16, SIMD batch) conversions, so they
show exactly what the operators write. View codes as ml_dtypes types with
``codes.view(ml_dtypes.bfloat16)`` and so on (float4_e2m1fn included: ml_dtypes keeps one
nibble per byte too).

Formats: float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, float8_e8m0 (ml_dtypes:
float8_e8m0fnu), float4_e2m1 (ml_dtypes: float4_e2m1fn), hifloat8. ``saturate`` applies to
hifloat8 only: True (what KvCompressEpilog uses) sends overflow and infinities to the largest
finite code and NaN to 0x00; False sends overflow to infinity and NaN to 0x80.
"""

from __future__ import annotations

import numpy as np

from . import _kvscatter as _ext

__all__ = ["FORMATS", "canonical_dtype", "code_dtype", "decode", "encode"]

FORMATS = (
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e8m0",
    "float4_e2m1",
    "float4_e1m2",
    "hifloat8",
)

# ml_dtypes / NumPy spellings of kvscatter's canonical names.
_ALIASES = {
    "float8_e8m0fnu": "float8_e8m0",
    "float4_e2m1fn": "float4_e2m1",
}


def canonical_dtype(dtype) -> str | None:
    """kvscatter's name for ``dtype``: a name string, a NumPy dtype or an ml_dtypes type.

    Parameters
    ----------
    dtype : str, dtype or None
        A kvscatter name or alias, a NumPy dtype or an ml_dtypes type.

    Returns
    -------
    str or None
        The canonical name (None for None).

    Raises
    ------
    ValueError
        A type kvscatter does not know.

    Examples
    --------
    >>> import ml_dtypes, kvscatter.formats as f
    >>> f.canonical_dtype(ml_dtypes.bfloat16)
    'bfloat16'
    """
    if dtype is None:
        return None
    if isinstance(dtype, str):
        name = dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"dtype must be a str, a NumPy dtype or None, got {dtype!r}") from None
    return _ALIASES.get(name, name)


def code_dtype(dtype) -> np.dtype:
    """The unsigned integer type that holds the codes of format ``dtype``.

    Parameters
    ----------
    dtype : str or dtype
        The format, as for :func:`encode`.

    Returns
    -------
    numpy.dtype
        ``uint16`` for the 16-bit formats, ``uint8`` otherwise.

    Examples
    --------
    >>> import kvscatter.formats as f
    >>> f.code_dtype("hifloat8")
    dtype('uint8')
    """
    name = _format(dtype)
    if name == "float32":
        return np.dtype(np.uint32)
    if name in ("float16", "bfloat16"):
        return np.dtype(np.uint16)
    return np.dtype(np.uint8)


def encode(x, dtype, *, saturate: bool = True) -> np.ndarray:
    """Rounds ``x`` (converted to float32) to format ``dtype``; returns codes of x's shape.

    Parameters
    ----------
    x : array_like
        Values, converted to float32.
    dtype : str or dtype
        ``"bfloat16"``, ``"float16"``, ``"float8_e4m3fn"``, ``"float8_e5m2"``,
        ``"float8_e8m0"``, ``"float4_e2m1"`` or ``"hifloat8"`` (or the ml_dtypes type).
    saturate : bool, default True
        Clamp values past the format's range to its largest finite value.

    Returns
    -------
    ndarray
        The codes, of :func:`code_dtype` (uint16 or uint8; float4_e2m1 one nibble per byte).

    Raises
    ------
    ValueError
        An unknown format.

    Examples
    --------
    >>> import kvscatter.formats as f
    >>> f.encode([1.0, -2.0], "bfloat16").tolist()
    [16256, 49152]
    """
    name = _format(dtype)
    a = np.ascontiguousarray(x, dtype=np.float32)
    codes = _ext.formats_encode(a.reshape(-1), name, bool(saturate))
    return codes.reshape(a.shape)


def decode(codes, dtype) -> np.ndarray:
    """Decodes ``codes`` (unsigned integers, see :func:`code_dtype`) of format ``dtype``.

    Parameters
    ----------
    codes : ndarray
        Unsigned integer codes of the format (:func:`code_dtype` or narrower).
    dtype : str or dtype
        The format, as for :func:`encode`.

    Returns
    -------
    ndarray
        float32 values of the codes' shape.

    Raises
    ------
    ValueError
        An unknown format.
    TypeError
        Codes that are not unsigned integers of the format's width or narrower.

    Examples
    --------
    >>> import numpy as np, kvscatter.formats as f
    >>> f.decode(np.array([16256, 49152], np.uint16), "bfloat16").tolist()
    [1.0, -2.0]
    """
    name = _format(dtype)
    want = code_dtype(name)
    c = np.asarray(codes)
    if c.dtype.kind not in "ui" or c.dtype.itemsize > want.itemsize:
        raise TypeError(f"codes of {name} must be {want.name} (or narrower unsigned), got {c.dtype}")
    nibble = name in ("float4_e2m1", "float4_e1m2")
    if c.size and (c.min() < 0 or (nibble and c.max() > 15)):
        raise ValueError(f"codes of {name} out of range [0, {15 if nibble else np.iinfo(want).max}]")
    c = np.ascontiguousarray(c, dtype=want)
    return _ext.formats_decode(c.reshape(-1), name).reshape(c.shape)


def _format(dtype) -> str:
    name = canonical_dtype(dtype)
    if name not in FORMATS:
        raise ValueError(f"unknown number format {dtype!r}; kvscatter.formats knows {', '.join(FORMATS)}")
    return name
