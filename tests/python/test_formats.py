"""kvscatter.formats against ml_dtypes: every code decoded, a dense float32 sample encoded."""

import kvscatter
import ml_dtypes
import numpy as np
import pytest
import refs
from kvscatter import formats

ML = {
    "bfloat16": ml_dtypes.bfloat16,
    "float16": np.float16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e8m0": ml_dtypes.float8_e8m0fnu,
    "float4_e2m1": ml_dtypes.float4_e2m1fn,
}
BITS = {"bfloat16": 16, "float16": 16, "float4_e2m1": 4}


def all_codes(name):
    n = 1 << BITS.get(name, 8)
    return np.arange(n, dtype=formats.code_dtype(name))


def ml_decode(codes, name):
    return codes.view(ML[name]).astype(np.float32)


def ml_encode(x, name):
    with np.errstate(over="ignore", invalid="ignore"):
        codes = np.asarray(x, np.float32).astype(ML[name]).view(formats.code_dtype(name))
    return codes & 0xF if name == "float4_e2m1" else codes


def assert_same_floats(got, want):
    """Bit-identical, except that any NaN matches any NaN (payloads are not specified)."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def dense_float32_sample(name):
    """A stride through every float32 bit pattern, plus every value of the format, the
    midpoints between neighbours (the rounding ties) and the float32 values next to them."""
    strided = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    values = ml_decode(all_codes(name), name)
    values = np.unique(values[np.isfinite(values)].astype(np.float64))
    mids = ((values[1:] + values[:-1]) / 2).astype(np.float32)
    parts = [strided, values.astype(np.float32), mids,
             np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
             np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)]
    x = np.concatenate(parts).astype(np.float32)
    return np.concatenate([x, -x])


@pytest.mark.parametrize("name", list(ML))
def test_decode_every_code_matches_ml_dtypes(name):
    codes = all_codes(name)
    assert_same_floats(formats.decode(codes, name), ml_decode(codes, name))


@pytest.mark.parametrize("name", list(ML))
def test_encode_dense_sample_matches_ml_dtypes(name):
    x = dense_float32_sample(name)
    got = formats.encode(x, name)
    want = ml_encode(x, name)
    assert got.dtype == formats.code_dtype(name)
    # Compare the decoded values: NaN codes may carry any payload.
    assert_same_floats(ml_decode(got, name), ml_decode(want, name))
    finite = ~np.isnan(ml_decode(want, name))
    np.testing.assert_array_equal(got[finite], want[finite])


def test_hifloat8_decode_table():
    codes = np.arange(256, dtype=np.uint8)
    assert_same_floats(formats.decode(codes, "hifloat8"), refs.hif8_decode(codes))


@pytest.mark.parametrize("saturate", [True, False])
def test_hifloat8_encode_dense_sample(saturate):
    x = dense_float32_sample("float8_e5m2")
    values = refs.hif8_decode(np.arange(256, dtype=np.uint8))
    values = np.unique(values[np.isfinite(values)].astype(np.float64))
    mids = ((values[1:] + values[:-1]) / 2).astype(np.float32)
    x = np.concatenate([x, mids, -mids, np.nextafter(mids, np.float32(0))])
    np.testing.assert_array_equal(formats.encode(x, "hifloat8", saturate=saturate),
                                  refs.hif8_encode(x, saturate=saturate))


def test_hifloat8_spec_examples():
    examples = {1.0: 0x08, 1.0625: 0x09, 0.9375: 0x1F, 7.5: 0x27, 15.5: 0x40, -2.5: 0x92,
                3.0: 0x14, 100.0: 0x4A, 1000.0: 0x64, 30000.0: 0x6E, 40000.0: 0x6E, 1e30: 0x6E,
                1.5 * 2**-16: 0x7E, 2**-23: 0x01, 0.9 * 2**-23: 0x00, -1e-9: 0x00, 0.1: 0x52,
                -0.3: 0xB2, float("nan"): 0x00, float("inf"): 0x6E}
    got = formats.encode(np.array(list(examples), np.float32), "hifloat8")
    np.testing.assert_array_equal(got, np.array(list(examples.values()), np.uint8))
    unsat = formats.encode(np.array([np.nan, np.inf, -1e6], np.float32), "hifloat8", saturate=False)
    np.testing.assert_array_equal(unsat, [0x80, 0x6F, 0xEF])


def test_shapes_and_aliases():
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    codes = formats.encode(x, ml_dtypes.bfloat16)
    assert codes.shape == x.shape and codes.dtype == np.uint16
    np.testing.assert_array_equal(formats.decode(codes, "bfloat16"), x.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert formats.encode(x, "float8_e8m0fnu").dtype == np.uint8
    assert formats.canonical_dtype(ml_dtypes.float4_e2m1fn) == "float4_e2m1"
    np.testing.assert_array_equal(formats.decode(formats.encode(x, "float32"), "float32"), x)


def test_bad_format_names():
    with pytest.raises(ValueError, match="unknown number format"):
        formats.encode(np.zeros(3, np.float32), "int8")
    with pytest.raises(ValueError, match="out of range"):
        formats.decode(np.array([16], np.uint8), "float4_e2m1")
    with pytest.raises(TypeError):
        formats.decode(np.zeros(3, np.float32), "bfloat16")
    assert kvscatter.formats is formats
