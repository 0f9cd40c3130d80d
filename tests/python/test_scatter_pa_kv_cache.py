"""kvscatter.scatter_pa_kv_cache on NumPy arrays against the NumPy reference, every mode."""

import kvscatter
import ml_dtypes
import numpy as np
import pytest
import refs

# The twelve element types of ScatterPaKvCache. hifloat8 travels as uint8 + dtype=.
ELEMENT_TYPES = ["float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16", "int32",
                 "uint32", "hifloat8", "float8_e5m2", "float8_e4m3fn"]
NP = {"bfloat16": ml_dtypes.bfloat16, "hifloat8": np.uint8, "float8_e5m2": ml_dtypes.float8_e5m2,
      "float8_e4m3fn": ml_dtypes.float8_e4m3fn}


def np_dtype(kind):
    return np.dtype(NP.get(kind, kind))


def dtype_kw(kind):
    return {"dtype": "hifloat8"} if kind == "hifloat8" else {}


def random_bits(rng, shape, kind):
    """Any bit pattern: the copy modes move bytes without looking at them."""
    dt = np_dtype(kind)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def random_values(rng, shape, kind):
    """Finite values, for Rope's mean."""
    dt = np_dtype(kind)
    if kind == "hifloat8":
        codes = np.array([c for c in range(256) if c not in (0x80, 0x6F, 0xEF)], np.uint8)
        return rng.choice(codes, size=shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt)
    scale = 4.0 if kind.startswith("float8") else 100.0
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(dt)


def same_bytes(a, b):
    np.testing.assert_array_equal(np.ascontiguousarray(a).view(np.uint8),
                                  np.ascontiguousarray(b).view(np.uint8))


def run(key, value, key_cache, value_cache, slot_mapping, kind, **kw):
    """Runs the library on the given caches and the reference on copies; compares."""
    want_k, want_v = refs.scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping,
                                              kind=kind, **{k: v for k, v in kw.items()
                                                            if k not in ("strides", "offsets")})
    kvscatter.scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping, **kw,
                                  **dtype_kw(kind))
    same_bytes(key_cache, want_k)
    if value_cache is not None and value_cache.ndim:
        same_bytes(value_cache, want_v)


def random_slots(rng, t, ns, index_dtype, duplicates=False):
    if duplicates:
        slots = rng.integers(0, ns, size=t)
    else:
        slots = rng.permutation(ns)[:t] if t <= ns else rng.integers(0, ns, size=t)
    slots = np.where(rng.random(t) < 0.2, -1 - rng.integers(0, 3, size=t), slots)
    return slots.astype(index_dtype)


# ---- Norm / None, key-only, NHSD, PA_NZ, Nct ---------------------------------------------------


@pytest.mark.parametrize("kind", ELEMENT_TYPES)
def test_norm_random(rng, kind):
    for _ in range(6):
        t, nh = int(rng.integers(0, 20)), int(rng.integers(1, 4))
        dk, dv = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        nb, bs = int(rng.integers(1, 6)), int(rng.integers(1, 9))
        key = random_bits(rng, (t, nh, dk), kind)
        value = random_bits(rng, (t, nh, dv), kind)
        kc = random_bits(rng, (nb, bs, nh, dk), kind)
        vc = random_bits(rng, (nb, bs, nh, dv), kind)
        slots = random_slots(rng, t, nb * bs, rng.choice([np.int32, np.int64]))
        run(key, value, kc, vc, slots, kind)


def test_norm_duplicate_slots_last_writer_wins(rng):
    key = random_bits(rng, (300, 2, 8), "float32")
    value = random_bits(rng, (300, 2, 8), "float32")
    kc = np.zeros((4, 4, 2, 8), np.float32)
    vc = np.zeros_like(kc)
    slots = rng.integers(-1, 16, size=300).astype(np.int32)
    run(key, value, kc, vc, slots, "float32")


def test_norm_key_only(rng):
    for value, value_cache in ((None, None), (np.zeros((), np.float16), np.zeros((), np.float16))):
        key = random_bits(rng, (7, 2, 16), "float16")
        kc = random_bits(rng, (3, 4, 2, 16), "float16")
        run(key, value, kc, value_cache, random_slots(rng, 7, 12, np.int64), "float16")


def test_norm_strided_views(rng):
    # Caches may be strided along the block axis and keys along the token axis (see
    # docs/semantics.md, 'Strides').
    big_k = random_bits(rng, (5, 6, 2, 8), "bfloat16")
    big_v = random_bits(rng, (5, 6, 2, 4), "bfloat16")
    kc, vc = big_k[:, :4], big_v[:, :4]
    assert not kc.flags.c_contiguous
    keys = random_bits(rng, (9, 2, 12), "bfloat16")[:, :, :8]
    values = random_bits(rng, (18, 2, 4), "bfloat16")[::2]
    before_k, before_v = big_k.copy(), big_v.copy()
    run(keys, values, kc, vc, random_slots(rng, 9, 20, np.int32), "bfloat16")
    # The rows between the blocks are not part of the caches and stay as they were.
    same_bytes(big_k[:, 4:], before_k[:, 4:])
    same_bytes(big_v[:, 4:], before_v[:, 4:])


@pytest.mark.parametrize("kind", ["float16", "bfloat16", "uint8", "float32", "hifloat8"])
def test_nhsd_random(rng, kind):
    for _ in range(5):
        t, nh, d = int(rng.integers(0, 12)), int(rng.integers(1, 4)), int(rng.choice([8, 16, 32]))
        nb, bs = int(rng.integers(1, 5)), int(rng.integers(1, 6))
        key = random_bits(rng, (t, nh, d), kind)
        value = random_bits(rng, (t, nh, d), kind)
        kc = random_bits(rng, (nb, nh, bs, d), kind)
        vc = random_bits(rng, (nb, nh, bs, d), kind)
        run(key, value, kc, vc, random_slots(rng, t, nb * bs, np.int64), kind, scatter_mode="NHSD")


@pytest.mark.parametrize("kinds", [("float16", "float16"), ("int8", "bfloat16"),
                                   ("bfloat16", "float16"), ("float32", "uint8"),
                                   ("hifloat8", "hifloat8")])
@pytest.mark.parametrize("five_d", [False, True], ids=["4d_cache", "5d_cache"])
def test_pa_nz_random(rng, kinds, five_d):
    kk, vk = kinds
    lk, lv = 32 // np_dtype(kk).itemsize, 32 // np_dtype(vk).itemsize
    for _ in range(4):
        t, nh = int(rng.integers(0, 10)), int(rng.integers(1, 4))
        dk, dv = lk * int(rng.integers(1, 3)), lv * int(rng.integers(1, 3))
        nb, bs = int(rng.integers(1, 4)), int(rng.choice([1, 3, 16]))
        key = random_bits(rng, (t, nh, dk), kk)
        value = random_bits(rng, (t, nh, dv), vk)
        if five_d:
            kc = random_bits(rng, (nb, nh, dk // lk, bs, lk), kk)
            vc = random_bits(rng, (nb, nh, dv // lv, bs, lv), vk)
        else:
            kc = random_bits(rng, (nb, nh * dk // lk, bs, lk), kk)
            vc = random_bits(rng, (nb, nh * dv // lv, bs, lv), vk)
        slots = random_slots(rng, t, nb * bs, np.int32)
        want_k, want_v = refs.scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode="PA_NZ")
        kw = {"dtype": "hifloat8"} if kk == "hifloat8" else {}
        kvscatter.scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode="PA_NZ", **kw)
        same_bytes(kc, want_k)
        same_bytes(vc, want_v)


def test_pa_nz_spec_example_e1():
    t, nh, dk, dv, bs, nb = 2, 2, 16, 32, 2, 2
    key = np.fromfunction(lambda t, h, d: 100 * t + 20 * h + d, (t, nh, dk)).astype(np.float16)
    value = np.fromfunction(lambda t, h, d: 500 + 100 * t + 40 * h + d, (t, nh, dv)).astype(np.float16)
    kc = np.zeros((nb, 2, bs, 16), np.float16)
    vc = np.zeros((nb, 4, bs, 16), np.float16)
    kvscatter.scatter_pa_kv_cache(key, value, kc, vc, np.array([3, 0], np.int32), cache_mode="PA_NZ")
    np.testing.assert_array_equal(kc[1, 0, 1], np.arange(16))
    np.testing.assert_array_equal(kc[1, 1, 1], np.arange(20, 36))
    np.testing.assert_array_equal(kc[0, 0, 0], np.arange(100, 116))
    np.testing.assert_array_equal(kc[0, 1, 0], np.arange(120, 136))
    assert np.count_nonzero(kc) == 4 * 16 - 1  # token 0 head 0 starts with a 0
    np.testing.assert_array_equal(vc[1, :, 1].reshape(-1), np.r_[500:532, 540:572])
    np.testing.assert_array_equal(vc[0, :, 0].reshape(-1), np.r_[600:632, 640:672])


@pytest.mark.parametrize("explicit", [True, False], ids=["explicit_strides", "default_strides"])
def test_nct_random(rng, explicit):
    for _ in range(6):
        t, nh = int(rng.integers(1, 10)), int(rng.integers(1, 3))
        dk, dv = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        row = nh * dk + nh * dv + int(rng.integers(0, 5))
        buf = random_bits(rng, (t, row), "float16")
        # One fused buffer: key then value in each token's row; value read at offset nh*dk.
        # Nct reads a buffer of key.shape[0] rows of key.strides[0] elements, so the views
        # carry the row stride explicitly (NumPy picks any stride for a single row).
        item = buf.itemsize
        key = np.lib.stride_tricks.as_strided(buf, (t, nh, dk), (row * item, dk * item, item))
        value = np.lib.stride_tricks.as_strided(buf, (t, nh, dv), (row * item, dv * item, item))
        nb, bs = int(rng.integers(1, 4)), int(rng.integers(1, 6))
        kc = random_bits(rng, (nb, bs, nh, dk), "float16")
        vc = random_bits(rng, (nb, bs, nh, dv), "float16")
        slots = random_slots(rng, t, nb * bs, np.int64)
        flat = buf.reshape(-1)
        k_rows = np.stack([flat[i * row:i * row + nh * dk] for i in range(t)]).reshape(t, nh, dk)
        v_rows = np.stack([flat[nh * dk + i * row:nh * dk + i * row + nh * dv] for i in range(t)])
        want_k, want_v = refs.scatter_pa_kv_cache(k_rows, v_rows.reshape(t, nh, dv), kc, vc, slots)
        kw = {"strides": [row, row]} if explicit else {"strides": None}
        kvscatter.scatter_pa_kv_cache(key, value, kc, vc, slots, scatter_mode="Nct",
                                      offsets=(0, nh * dk), **kw)
        same_bytes(kc, want_k)
        same_bytes(vc, want_v)


def test_nct_spec_example_e3():
    buf = np.array([1, 2, 10, 20, 30, 99, 3, 4, 40, 50, 60, 99], np.float16).reshape(2, 6)
    key = buf[:, :2].reshape(2, 1, 2)
    value = buf[:, :3].reshape(2, 1, 3)
    kc = np.zeros((1, 2, 1, 2), np.float16)
    vc = np.zeros((1, 2, 1, 3), np.float16)
    kvscatter.scatter_pa_kv_cache(key, value, kc, vc, np.array([1, 0], np.int32),
                                  scatter_mode="Nct", strides=[6, 6], offsets=[0, 2])
    np.testing.assert_array_equal(kc[0, :, 0], [[3, 4], [1, 2]])
    np.testing.assert_array_equal(vc[0, :, 0], [[40, 50, 60], [10, 20, 30]])


# ---- compress modes ---------------------------------------------------------------------------


def compress_case(rng, mode, four_d, kind, key_only=False):
    """Random valid inputs for Alibi / Rope / Omni (3-D packed or 4-D keys)."""
    b, nh = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dk = int(rng.integers(1, 20))
    dv = dk if not four_d else int(rng.integers(1, 20))
    s_pad = int(rng.integers(1, 8))
    seq = rng.integers(0, s_pad + 1 if four_d else 8, size=b)
    lens = np.zeros(b * nh, np.int64)
    offs = np.zeros(b * nh, np.int64)
    rows = np.zeros(b * nh, np.int64)
    for i in range(b * nh):
        L = int(seq[i // nh])
        if mode == "Alibi":
            w = int(rng.integers(0, L + 1))
            lens[i], rows[i] = w, w
            continue
        o = int(rng.integers(-1 if not four_d else 0, L + 1))
        w = int(rng.integers(0, (L - o if o >= 0 else L) + 1))
        offs[i], lens[i] = o, w
        if o == -1 or w == 0 or o == L:
            rows[i] = L
        else:
            rows[i] = L - w + 1 if mode == "Rope" else L - w
    nb, bs = int(rng.integers(2, 6)), int(rng.integers(1, 6))
    ns = nb * bs
    while ns < rows.max(initial=0):
        nb += 1
        ns = nb * bs
    # A start slot must lie inside the cache even for an empty run.
    slots = np.array([-1 if rng.random() < 0.15 else int(rng.integers(0, ns - max(r, 1) + 1)) for r in rows])
    gen = random_values if mode == "Rope" else random_bits
    if four_d:
        key = gen(rng, (b, s_pad, nh, dk), kind)
        value = gen(rng, (b, s_pad, nh, dv), kind)
    else:
        t = int(seq.sum())
        key = gen(rng, (t, nh, dk), kind)
        value = gen(rng, (t, nh, dv), kind)
    kc = random_bits(rng, (nb, bs, 1, dk), kind)
    vc = random_bits(rng, (nb, bs, 1, dv), kind)
    idx = rng.choice([np.int32, np.int64])
    shape2 = (b, nh) if four_d else (b * nh,)
    kw = {"compress_lens": lens.reshape(shape2).astype(idx), "seq_lens": seq.astype(idx),
          "slot_mapping": slots.reshape(shape2).astype(idx)}
    if mode != "Alibi":
        kw["compress_seq_offsets"] = offs.astype(idx)
    if key_only:
        value, vc = None, None
    return key, value, kc, vc, kw


@pytest.mark.parametrize("mode", ["Alibi", "Rope", "Omni"])
@pytest.mark.parametrize("kind", ["float16", "bfloat16", "float32", "int8"])
def test_compress_packed_random(rng, mode, kind):
    for i in range(8):
        key, value, kc, vc, kw = compress_case(rng, mode, False, kind, key_only=i == 7)
        slots = kw.pop("slot_mapping")
        run(key, value, kc, vc, slots, kind, scatter_mode=mode, **kw)


@pytest.mark.parametrize("mode", ["Alibi", "Rope"])
@pytest.mark.parametrize("explicit_mode", [True, False], ids=["explicit", "auto"])
def test_compress_4d_random(rng, mode, explicit_mode):
    for i in range(8):
        key, value, kc, vc, kw = compress_case(rng, mode, True, "bfloat16", key_only=i == 7)
        slots = kw.pop("slot_mapping")
        run(key, value, kc, vc, slots, "bfloat16", scatter_mode=mode if explicit_mode else "None", **kw)


@pytest.mark.parametrize("kind", ELEMENT_TYPES)
def test_rope_mean_every_dtype(rng, kind):
    for _ in range(4):
        key, value, kc, vc, kw = compress_case(rng, "Rope", True, kind)
        slots = kw.pop("slot_mapping")
        run(key, value, kc, vc, slots, kind, scatter_mode="Rope", **kw)


def test_rope_spec_example_e6():
    key = np.fromfunction(lambda t, h, d: 4 * t + d, (7, 1, 16)).astype(np.float16)
    kc = np.zeros((3, 4, 1, 16), np.float16)
    kvscatter.scatter_pa_kv_cache(
        key, None, kc, None, np.array([0, 8], np.int32), scatter_mode="Rope",
        compress_lens=np.array([2, 2], np.int32), compress_seq_offsets=np.array([1, -1], np.int32),
        seq_lens=np.array([4, 3], np.int32))
    rows = kc.reshape(12, 16)
    np.testing.assert_array_equal(rows[0], np.arange(16))
    np.testing.assert_array_equal(rows[1], np.arange(6, 22))
    np.testing.assert_array_equal(rows[2], np.arange(12, 28))
    np.testing.assert_array_equal(rows[3], 0)
    np.testing.assert_array_equal(rows[8:11], [np.arange(16, 32), np.arange(20, 36), np.arange(24, 40)])


def test_rope_mean_rounding_e6b():
    # fp32 accumulation: (2048 + 1 + 1) / 3 = 683.33 -> float16 683.5 (0x6157).
    cases = [(np.float16, [1, 1, 2], 0x3D55), (ml_dtypes.bfloat16, [1, 1, 2], 0x3FAB),
             (np.float16, [2048, 1, 1], 0x6157), (np.float16, [1, 2], 0x3E00)]
    for dt, window, code in cases:
        w = len(window)
        key = np.array(window, np.float32).reshape(w, 1, 1).repeat(16, axis=2).astype(dt)
        kc = np.zeros((1, 4, 1, 16), dt)
        kvscatter.scatter_pa_kv_cache(
            key, None, kc, None, np.array([0], np.int32), scatter_mode="Rope",
            compress_lens=np.array([w], np.int32), compress_seq_offsets=np.array([0], np.int32),
            seq_lens=np.array([w], np.int32))
        assert (kc[0, 0, 0].view(np.uint16) == code).all(), (dt, window)


def test_result_does_not_depend_on_threads(rng):
    t, nh, d = 4000, 4, 64
    key = random_bits(rng, (t, nh, d), "bfloat16")
    slots = rng.integers(-1, 2048, size=t).astype(np.int64)  # duplicates and padding
    results = []
    before = kvscatter.get_num_threads()
    try:
        for n in (1, 2, 7):
            kvscatter.set_num_threads(n)
            kc = np.zeros((128, 16, nh, d), ml_dtypes.bfloat16)
            kvscatter.scatter_pa_kv_cache(key, key, kc, kc.copy(), slots)
            results.append(kc.view(np.uint16))
    finally:
        kvscatter.set_num_threads(before)
    want, _ = refs.scatter_pa_kv_cache(key, None, np.zeros((128, 16, nh, d), ml_dtypes.bfloat16), None, slots)
    for r in results:
        np.testing.assert_array_equal(r, want.view(np.uint16))
