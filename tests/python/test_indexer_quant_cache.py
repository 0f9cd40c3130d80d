"""kvscatter.indexer_quant_cache: the worked examples byte for byte, the argument rules of the
Python front end, and errors (messages, untouched caches)."""

import kvscatter
import ml_dtypes
import numpy as np
import pytest

E4 = ml_dtypes.float8_e4m3fn
E5 = ml_dtypes.float8_e5m2
E8 = ml_dtypes.float8_e8m0fnu


def b(s):
    return [int(t, 16) for t in s.split()]


def u8(a):
    return np.ascontiguousarray(a).view(np.uint8).reshape(-1).tolist()


ROW = ((np.arange(32) - 16) / 4).astype(np.float32)
ROW_ROUND = b("F8 F7 F6 F5 F4 F3 F2 F1 F0 EE EC EA E8 E4 E0 D8 00 58 60 64 68 6A 6C 6E 70 71 72 73 "
              "74 75 76 77")
ROW_EXACT = b("FE FD FC FB FA FA F9 F8 F6 F4 F2 F1 EE EA E6 DE 00 5E 66 6A 6E 71 72 74 76 78 79 7A "
              "7A 7B 7C 7D")
ROW_E5 = b("F8 F8 F7 F6 F6 F6 F5 F4 F4 F3 F2 F1 F0 EE EC E8 00 68 6C 6E 70 71 72 73 74 74 75 76 76 "
           "76 77 78")


@pytest.mark.parametrize("round_scale, cache_dt, codes, scale_bits", [
    (True, E4, ROW_ROUND, 0x3C800000),
    (False, E4, ROW_EXACT, 0x3C124925),
    (True, E5, ROW_E5, 0x39000000),
])
def test_fp8_float16(round_scale, cache_dt, codes, scale_bits):
    cache = np.zeros((1, 2, 1, 32), cache_dt)
    scale = np.zeros((1, 2, 1, 1), np.float32)
    kvscatter.indexer_quant_cache(cache, scale, ROW.astype(np.float16)[None], np.array([1], np.int32),
                                  quant_mode="fp8", round_scale=round_scale)
    assert u8(cache[0, 1]) == codes
    assert int(scale[0, 1, 0, 0:1].view(np.uint32)[0]) == scale_bits
    assert u8(cache[0, 0]) == [0] * 32 and scale[0, 0, 0, 0] == 0


@pytest.mark.parametrize("cache_dt, codes, scales", [(E4, ROW_ROUND, [0x79, 0x69]),
                                                     (E5, ROW_E5, [0x72, 0x62])])
def test_mxfp8_bfloat16(cache_dt, codes, scales):
    x = np.concatenate([ROW, np.zeros(32, np.float32)]).astype(ml_dtypes.bfloat16)[None]
    cache = np.zeros((1, 1, 1, 64), cache_dt)
    scale = np.zeros((1, 1, 1, 2), E8)
    kvscatter.indexer_quant_cache(cache, scale, x, np.array([0]), quant_mode=" MXFP8 ",
                                  round_scale=False)
    assert u8(cache) == codes + [0] * 32
    assert u8(scale) == scales


def test_quant_mode_as_a_numpy_integer():
    x = np.concatenate([ROW, np.zeros(32, np.float32)]).astype(ml_dtypes.bfloat16)[None]
    got, want = (np.zeros((1, 1, 1, 64), E4) for _ in range(2))
    scales = [np.zeros((1, 1, 1, 2), E8) for _ in range(2)]
    kvscatter.indexer_quant_cache(got, scales[0], x, np.array([0]), quant_mode=np.int64(0))
    kvscatter.indexer_quant_cache(want, scales[1], x, np.array([0]), quant_mode="mxfp8")
    assert u8(got) == u8(want) and u8(scales[0]) == u8(scales[1])


@pytest.mark.parametrize("x_scale, codes", [(1.0, "08 88 18 14 09 4A B2 6E"),
                                            (0.5, "18 98 30 0C 19 46 BA 6C")])
def test_hifloat8(x_scale, codes):
    x = np.zeros((1, 32), np.float16)
    x[0, :8] = [1, -1, 0.5, 3, 1.0625, 100, -0.3, 40000]
    cache = np.zeros((1, 1, 1, 32), np.uint8)
    scale = np.full((1, 1, 1, 1), 7.0, np.float32)
    kvscatter.indexer_quant_cache(cache, scale, x, np.array([0]), quant_mode=2, x_scale=x_scale,
                                  dtype="hifloat8")
    assert u8(cache) == b(codes) + [0] * 24
    assert scale[0, 0, 0, 0] == 7.0


@pytest.mark.parametrize("fp4, codes, scale_byte", [
    ("float4_e2m1", "EE DE DD CC CC AB AA 89 00 21 22 43 44 54 55 66", 0x7E),
    ("float4_e1m2", "CC BC BB AA AA 9A 99 88 00 10 11 22 22 32 33 44", 0x80),
])
@pytest.mark.parametrize("xdt", [np.float16, ml_dtypes.bfloat16])
def test_mxfp4(fp4, codes, scale_byte, xdt):
    x = ((np.arange(32) - 16) / 8).astype(xdt)[None]
    cache = np.zeros((1, 1, 1, 16), np.uint8)
    scale = np.zeros((1, 1, 1, 1), np.uint8)
    kvscatter.indexer_quant_cache(cache, scale, x, np.array([0]), quant_mode="mxfp4", dtype=fp4)
    assert u8(cache) == b(codes)
    assert u8(scale) == [scale_byte]


def test_paged_placement_and_rank3_x():
    buf = np.full(200, 0xEE, np.uint8)
    cache = np.lib.stride_tricks.as_strided(buf, (2, 2, 1, 40), (100, 40, 40, 1)).view(E4)
    scale = np.full((2, 2, 1, 3), -1.0, np.float32)
    x = np.stack([ROW, np.ones(32), np.zeros(32)]).astype(np.float16).reshape(1, 3, 32)
    kvscatter.indexer_quant_cache(cache, scale, x, np.array([[3, -1, 0]], np.int64))
    assert buf[140:172].tolist() == ROW_ROUND and buf[172:180].tolist() == [0xEE] * 8
    assert buf[:32].tolist() == [0] * 32 and buf[32:140].tolist() == [0xEE] * 108
    assert scale[1, 1, 0].tolist() == [0.015625, -1, -1] and scale[0, 0, 0].tolist() == [0, -1, -1]


@pytest.mark.parametrize("kw, kind, message", [
    ({"quant_mode": "int8"}, kvscatter.Error,
     "quant_mode should be one of [mxfp8, fp8, hifloat8, mxfp4], got 'int8'"),
    ({"quant_mode": True}, TypeError, "quant_mode must be a str or an int"),
    ({"quant_mode": 7}, kvscatter.Error, "got '7'"),
    ({"quant_mode": "1"}, ValueError, "or an int 0-3, got '1'"),
    ({"x_scale": "1.0"}, TypeError, "x_scale must be a float, got '1.0'"),
    ({"round_scale": 1}, TypeError, "round_scale must be a bool"),
    ({"quant_mode": "mxfp8"}, kvscatter.Error,
     'cache_scale dtype float32 does not fit quant_mode "mxfp8"'),
    ({"slots": np.array([0, 1, -2, 3])}, kvscatter.Error,
     "slot_mapping[2] = -2 is out of range: -1 (skip) or [0, 12)"),
    ({"slots": np.array([0, 1, 2])}, kvscatter.Error,
     "slot_mapping shape [3] must equal x.shape[:-1] = [4]"),
    ({"x": np.ones((4, 48), np.float16)}, kvscatter.Error,
     "x last dim d = 48 must be a positive multiple of 32 and at most 8192"),
    ({"cache": np.zeros((3, 4, 1, 63), np.uint8)}, kvscatter.Error,
     "cache dtype uint8 does not fit quant_mode \"fp8\" (float8_e4m3fn or float8_e5m2)"),
    ({"cache": np.zeros((3, 4, 1, 63), E4)}, kvscatter.Error,
     "cache row holds 63 elements, needs 64 for d = 64"),
    ({"scale": np.zeros((2, 4, 1, 1), np.float32)}, kvscatter.Error,
     "cache_scale has 2 blocks of 4 slots, cache has 3 blocks of 4"),
])
def test_errors_leave_caches_untouched(kw, kind, message):
    cache = kw.get("cache", np.full((3, 4, 1, 64), 0x11, np.uint8).view(E4))
    scale = kw.get("scale", np.full((3, 4, 1, 1), 9.0, np.float32))
    x = kw.get("x", np.ones((4, 64), np.float16))
    slots = kw.get("slots", np.array([0, 1, 2, 3]))
    opts = {k: kw[k] for k in ("quant_mode", "x_scale", "round_scale") if k in kw}
    c0, s0 = cache.copy(), scale.copy()
    with pytest.raises(kind) as err:
        kvscatter.indexer_quant_cache(cache, scale, x, slots, **opts)
    assert message in str(err.value)
    assert u8(cache) == u8(c0) and u8(scale) == u8(s0)
