"""kvscatter.gather_pa_kv_cache: the worked example, scatter-then-gather round trips for every
layout and dtype, and the errors seen from Python (messages, untouched outputs)."""

import kvscatter
import ml_dtypes
import numpy as np
import pytest

S8 = ["float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16", "int32", "uint32",
      "hifloat8", "float8_e5m2", "float8_e4m3fn"]
NP = {"bfloat16": ml_dtypes.bfloat16, "hifloat8": np.uint8, "float8_e5m2": ml_dtypes.float8_e5m2,
      "float8_e4m3fn": ml_dtypes.float8_e4m3fn}


def np_dtype(kind):
    return np.dtype(NP.get(kind, kind))


def dtype_kw(kind):
    return {"dtype": "hifloat8"} if kind == "hifloat8" else {}


def random_bits(rng, shape, kind):
    dt = np_dtype(kind)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def worked_example():
    kc = np.zeros((4, 2, 1, 2), np.float16)
    vc = np.zeros((4, 2, 1, 1), np.float16)
    for b in range(4):
        for o in range(2):
            kc[b, o, 0] = [10 * b + o, 10 * b + o + 0.5]
            vc[b, o, 0, 0] = 100 + 10 * b + o
    key = np.full((6, 1, 2), -1.0, np.float16)
    value = np.full((6, 1, 1), -1.0, np.float16)
    return kc, vc, np.array([[2, 0, 3], [1, 3, -1]], np.int32), np.array([3, 2], np.int32), key, value


def test_worked_example_norm():
    kc, vc, tables, lens, key, value = worked_example()
    kvscatter.gather_pa_kv_cache(kc, vc, tables, lens, key, value)
    assert key[:, 0].tolist() == [[20, 20.5], [21, 21.5], [0, 0.5], [10, 10.5], [11, 11.5], [-1, -1]]
    assert value[:, 0, 0].tolist() == [120, 121, 100, 110, 111, -1]


def test_worked_example_variants():
    kc, vc, tables, _, key, value = worked_example()
    kvscatter.gather_pa_kv_cache(kc, vc, tables, np.array([0, 3, 5], np.int32), key, value,
                                 is_seq_lens_cumsum=True)
    assert value[:, 0, 0].tolist() == [120, 121, 100, 110, 111, -1]
    kc, vc, tables, lens, key, value = worked_example()
    kvscatter.gather_pa_kv_cache(kc, vc, tables, lens, key, value,
                                 seq_offset=np.array([2, 3], np.int32))
    assert value[:, 0, 0].tolist() == [100, 101, 130, 130, 131, -1]
    kc, vc, _, lens, key, value = worked_example()
    kvscatter.gather_pa_kv_cache(kc, vc, np.array([[2, 0, 3], [-1, 3, 99]], np.int32), lens, key,
                                 value)
    assert bits(key[3:5]).tolist() == [[[0, 0, 0, 0]]] * 2
    kc, _, tables, lens, key, _ = worked_example()
    kvscatter.npu_gather_pa_kv_cache(kc, None, tables, lens, key, None, cache_mode=None)
    assert key[:5, 0, 0].tolist() == [20, 21, 0, 10, 11]


def test_worked_example_pa_nz():
    b, c, o, e = np.meshgrid(np.arange(2), np.arange(2), np.arange(2), np.arange(16), indexing="ij")
    kc = (1000 * b + 100 * o + 16 * c + e).astype(np.float16)
    key = np.zeros((3, 32), np.float16)
    kvscatter.gather_pa_kv_cache(kc, None, np.array([[1, 0]], np.int64), np.array([3], np.int64),
                                 key, None, cache_mode="PA_NZ")
    assert key.tolist() == [list(range(1000, 1032)), list(range(1100, 1132)), list(range(32))]
    assert bits(key[0, [0, 1, 16, 17]]).view(np.uint16).tolist() == [0x63D0, 0x63D2, 0x63F0, 0x63F2]


def paged_batch(rng, lens, bs, extra_cols):
    """Block tables for `lens` with every block distinct, plus the slot of every token."""
    need = [(n + bs - 1) // bs for n in lens]
    nb = sum(need) + 2
    perm = rng.permutation(nb)
    width = max(need + [0]) + extra_cols + 1
    tables = np.full((len(lens), width), -1, np.int64)
    slots, used = [], 0
    for b, n in enumerate(lens):
        ids = perm[used:used + need[b]]
        used += need[b]
        tables[b, extra_cols:extra_cols + need[b]] = ids
        tables[b, :extra_cols] = rng.integers(-1, nb, size=extra_cols)  # stale, skipped
        slots += [ids[j // bs] * bs + j % bs for j in range(n)]
    return nb, tables, np.array(slots, np.int64)


@pytest.mark.parametrize("kind", S8)
@pytest.mark.parametrize("mode", ["Norm", "PA_NZ"])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_scatter_then_gather_round_trip(rng, kind, mode, index):
    dt = np_dtype(kind)
    bs, heads = int(rng.integers(1, 9)), int(rng.integers(1, 4))
    lanes = 32 // dt.itemsize
    dk = lanes * int(rng.integers(1, 3)) if mode == "PA_NZ" else int(rng.integers(1, 40))
    dv = lanes * int(rng.integers(1, 3)) if mode == "PA_NZ" else int(rng.integers(1, 40))
    lens = [int(n) for n in rng.integers(0, 3 * bs + 2, size=int(rng.integers(1, 5)))]
    extra = int(rng.integers(0, 3))
    nb, tables, slots = paged_batch(rng, lens, bs, extra)
    total = sum(lens)
    key, value = random_bits(rng, (total, heads, dk), kind), random_bits(rng, (total, heads, dv), kind)
    if mode == "Norm":
        kc, vc = random_bits(rng, (nb, bs, heads, dk), kind), random_bits(rng, (nb, bs, heads, dv), kind)
    else:
        kc = random_bits(rng, (nb, heads * dk // lanes, bs, lanes), kind)
        vc = random_bits(rng, (nb, heads * dv // lanes, bs, lanes), kind)
    kvscatter.scatter_pa_kv_cache(key, value, kc, vc, slots.astype(index), cache_mode=mode,
                                  **dtype_kw(kind))
    shape_k = (total + 2, heads, dk) if mode == "Norm" else (total + 2, heads * dk)
    shape_v = (total + 2, heads, dv) if mode == "Norm" else (total + 2, heads * dv)
    out_k, out_v = random_bits(rng, shape_k, kind), random_bits(rng, shape_v, kind)
    tail_k, tail_v = out_k[total:].copy(), out_v[total:].copy()
    cumsum = bool(rng.integers(0, 2))
    seq_lens = np.concatenate([[0], np.cumsum(lens)]) if cumsum else np.array(lens)
    offset = np.array([extra * bs + int(rng.integers(0, bs)) for _ in lens], index)
    kvscatter.gather_pa_kv_cache(kc, vc, tables.astype(index), seq_lens.astype(index), out_k, out_v,
                                 seq_offset=offset, is_seq_lens_cumsum=cumsum, cache_mode=mode,
                                 **dtype_kw(kind))
    np.testing.assert_array_equal(bits(out_k[:total]).reshape(-1), bits(key).reshape(-1))
    np.testing.assert_array_equal(bits(out_v[:total]).reshape(-1), bits(value).reshape(-1))
    np.testing.assert_array_equal(bits(out_k[total:]), bits(tail_k))  # past the last sequence
    np.testing.assert_array_equal(bits(out_v[total:]), bits(tail_v))


def test_strided_cache_and_output_rows(rng):
    # A cache viewed out of a fused [nb, 2, bs, H, D] buffer and output rows of a wider tensor.
    fused = random_bits(rng, (5, 2, 4, 2, 8), "bfloat16")
    kc = fused[:, 0]
    key = np.zeros((6, 2, 12), ml_dtypes.bfloat16)[:, :, :8]
    with pytest.raises(kvscatter.Error, match=r"key.strides\[1\] must be 8"):
        kvscatter.gather_pa_kv_cache(kc, None, np.array([[3, 1]]), np.array([6]), key, None)
    out = np.zeros((6, 3, 2, 8), ml_dtypes.bfloat16)[:, 1]
    kvscatter.gather_pa_kv_cache(kc, None, np.array([[3, 1]]), np.array([6]), out, None)
    np.testing.assert_array_equal(bits(out[:4]), bits(kc[3]))
    np.testing.assert_array_equal(bits(out[4:]), bits(kc[1, :2]))


@pytest.mark.parametrize("change, kind, message", [
    ({"tables": [[2, 4, 3], [1, 3, -1]]}, kvscatter.Error,
     "block_tables[0][1] = 4 is out of range [0, 4) (key_cache has 4 blocks)"),
    ({"seq_offset": [5, 0]}, kvscatter.Error,
     "batch 0 needs block_tables[0][2:4] (seq_offset 5 // block_size 2 = 2, 2 blocks) but "
     "block_tables has 3 columns"),
    ({"seq_offset": [0, -4]}, kvscatter.Error, "seq_offset[1] = -4 is negative"),
    ({"lens": [4, 3]}, kvscatter.Error, "seq_lens cover 7 tokens but key has only 6 rows"),
    ({"lens": [1, 3, 5], "is_seq_lens_cumsum": True}, kvscatter.Error,
     "seq_lens[0] = 1 must be 0 when is_seq_lens_cumsum is True"),
    ({"is_seq_lens_cumsum": True}, kvscatter.Error,
     "seq_lens shape [2] must be [3] for batch 2 (is_seq_lens_cumsum=True)"),
    ({"cache_mode": "norm"}, kvscatter.Error, 'cache_mode must be one of {"Norm", "PA_NZ"} (or empty for Norm), got "norm"'),
    ({"cache_mode": 0}, TypeError, "cache_mode must be a str or None"),
    ({"is_seq_lens_cumsum": 1}, TypeError, "is_seq_lens_cumsum must be a bool"),
    ({"value": None}, kvscatter.Error,
     "value and value_cache must both be given or both be None (got only value_cache)"),
    ({"lens64": True}, kvscatter.Error,
     "seq_lens dtype int64 differs from block_tables dtype int32 (index tensors share one dtype)"),
])
def test_errors_leave_outputs_untouched(change, kind, message):
    kc, vc, tables, lens, key, value = worked_example()
    kw = {k: change[k] for k in ("cache_mode", "is_seq_lens_cumsum") if k in change}
    if "seq_offset" in change:
        kw["seq_offset"] = np.array(change["seq_offset"], np.int32)
    tables = np.array(change.get("tables", tables), np.int32)
    lens = np.array(change.get("lens", lens), np.int64 if "lens64" in change else np.int32)
    value = change.get("value", value)
    key0, value0 = key.copy(), worked_example()[5]
    with pytest.raises(kind) as err:
        kvscatter.gather_pa_kv_cache(kc, vc, tables, lens, key, value, **kw)
    assert message in str(err.value)
    np.testing.assert_array_equal(bits(key), bits(key0))
    if value is not None:
        np.testing.assert_array_equal(bits(value), bits(value0))


def test_readonly_output_rejected():
    kc, vc, tables, lens, key, value = worked_example()
    key.flags.writeable = False
    with pytest.raises((ValueError, TypeError), match="key"):
        kvscatter.gather_pa_kv_cache(kc, vc, tables, lens, key, value)
