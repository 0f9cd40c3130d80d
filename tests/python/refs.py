"""Plain NumPy references written from the documented semantics (docs/semantics.md and
docs/operators/), independent of the library: slow, obvious loops.

Every reference works on copies of the caches it is given and returns them.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
F4 = np.dtype(ml_dtypes.float4_e2m1fn)


def f32_bits(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]


# ---- HiFloat8 (docs/formats.md) --------------------------------------------------------------


def hif8_decode(codes) -> np.ndarray:
    """float32 value of every HiFloat8 code (0x80 is NaN, 0x6F/0xEF are +-Inf)."""
    c = np.asarray(codes, np.uint8).astype(np.int64)
    neg = (c & 0x80) != 0
    b = c & 0x7F
    out = np.zeros(c.shape, np.float64)
    d4 = (b >> 5) == 0b11
    d3 = (b >> 5) == 0b10
    d2 = (b >> 5) == 0b01
    d1 = (b >> 4) == 0b001
    d0 = (b >> 3) == 0b0001
    den = (b >> 3) == 0
    for mask, s, e, m, ebase, mbits in (
        (d4, (b >> 4) & 1, (b >> 1) & 7, b & 1, 8, 1),
        (d3, (b >> 4) & 1, (b >> 2) & 3, b & 3, 4, 2),
        (d2, (b >> 4) & 1, (b >> 3) & 1, b & 7, 2, 3),
        (d1, (b >> 3) & 1, 0 * b, b & 7, 1, 3),
    ):
        mag = ebase + e
        exp = np.where(s == 1, -mag, mag)
        val = np.ldexp(1.0 + m / float(1 << mbits), exp)
        out = np.where(mask, val, out)
    out = np.where(d0, 1.0 + (b & 7) / 8.0, out)
    out = np.where(den, np.where((b & 7) == 0, 0.0, np.ldexp(1.0, (b & 7) - 23)), out)
    out = np.where(b == 0x6F, np.inf, out)
    out = np.where(neg, -out, out)
    out = np.where(c == 0x80, np.nan, out)
    return out.astype(np.float32)


def hif8_encode(x, saturate: bool = True) -> np.ndarray:
    """float32 -> HiFloat8, round half away from zero (a bit-level algorithm)."""
    x = np.asarray(x, np.float32)
    b = x.view(np.uint32).astype(np.int64)
    a = b & 0x7FFFFFFF
    s = np.where((b >> 31) != 0, 0x80, 0)
    big = 0x6E if saturate else 0x6F
    e = (a >> 23) - 127
    ae = np.abs(e)
    mb = np.where(ae <= 3, 3, np.where(ae <= 7, 2, np.where(ae <= 15, 1, 0)))
    sh = 23 - mb
    r = (a + (1 << (sh - 1))) & ~((1 << sh) - 1)
    e2 = (r >> 23) - 127
    m = (r >> sh) & ((1 << mb) - 1)
    n = (e2 < 0).astype(np.int64)
    ae2 = np.abs(e2)
    c = np.where(
        ae2 == 0,
        0x08 | m,
        np.where(
            ae2 == 1,
            0x10 | n << 3 | m,
            np.where(
                ae2 <= 3,
                0x20 | n << 4 | (ae2 - 2) << 3 | m,
                np.where(ae2 <= 7, 0x40 | n << 4 | (ae2 - 4) << 2 | m, 0x60 | n << 4 | (ae2 - 8) << 1 | m),
            ),
        ),
    )
    c = np.where(e2 <= -16, np.where(e2 == -23, 1, e2 + 23), c)
    c = np.where((e2 > 15) | ((e2 == 15) & (m != 0)), big, c)
    c = np.where(e >= 16, big, c)
    c = s | c
    c = np.where(a < 0x34000000, 0, c)
    c = np.where(a == 0x7F800000, s | big, c)
    c = np.where(a > 0x7F800000, 0x00 if saturate else 0x80, c)
    return c.astype(np.uint8)


# ---- float conversions used by the references -----------------------------------------------


def to_bf16_bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(BF16).view(np.uint16)


def bf16_round(x) -> np.ndarray:
    """float32 -> bfloat16 (RNE) -> float32."""
    return np.asarray(x, np.float32).astype(BF16).astype(np.float32)


# ---- ScatterPaKvCache ------------------------------------------------------------------------


def rope_mean(rows: np.ndarray, kind: str) -> np.ndarray:
    """Mean of `rows` ([w, D]) in the cache type (docs/semantics.md, 'scatter_pa_kv_cache').

    kind: the kvscatter dtype name."""
    w = rows.shape[0]
    if kind == "hifloat8":
        acc = np.zeros(rows.shape[1], np.float32)
        for r in hif8_decode(rows):
            acc = np.float32(r) + acc
        return hif8_encode(acc / np.float32(w))
    if rows.dtype.kind in "iu":
        wide = np.int64 if rows.dtype.kind == "i" else np.uint64
        acc32 = np.int32 if rows.dtype.kind == "i" else np.uint32
        acc = np.zeros(rows.shape[1], acc32)
        for r in rows:
            acc = (acc.astype(wide) + r.astype(wide)).astype(acc32)  # wraps like (u)int32
        a = acc.astype(np.int64)
        q = np.sign(a) * (np.abs(a) // w)  # truncating division
        return q.astype(acc32).astype(rows.dtype)
    acc = np.zeros(rows.shape[1], np.float32)
    for r in rows:
        acc = r.astype(np.float32) + acc
    return (acc / np.float32(w)).astype(rows.dtype)


def scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping, *, compress_lens=None,
                        compress_seq_offsets=None, seq_lens=None, cache_mode="Norm",
                        scatter_mode="None", kind=None):
    """The documented scatter semantics (Nct is tested separately). Returns new caches."""
    if value is not None and value.ndim == 0:  # a 0-D value means a key-only call (key only)
        value, value_cache = None, None
    kc = key_cache.copy()
    vc = None if value_cache is None else value_cache.copy()
    slots = np.asarray(slot_mapping).reshape(-1).astype(np.int64)
    sides = [(key, kc)] + ([] if value is None else [(value, vc)])
    if key.ndim == 4 and scatter_mode in ("None", None, ""):
        scatter_mode = "Rope" if compress_seq_offsets is not None else "Alibi"

    if scatter_mode in ("None", None, "", "NHSD"):
        for x, c in sides:
            if cache_mode == "PA_NZ":
                lanes = 32 // x.dtype.itemsize
                c4 = c.reshape(c.shape[0], -1, c.shape[-2], lanes)  # the 5-D cache is the same memory
                bs = c4.shape[2]
                for t, s in enumerate(slots):
                    if s < 0:
                        continue
                    flat = x[t].reshape(-1)
                    for ch in range(flat.size // lanes):
                        c4[s // bs, ch, s % bs, :] = flat[ch * lanes:(ch + 1) * lanes]
            elif scatter_mode == "NHSD":
                bs = c.shape[2]
                for t, s in enumerate(slots):
                    if s >= 0:
                        c[s // bs, :, s % bs, :] = x[t]
            else:
                bs = c.shape[1]
                for t, s in enumerate(slots):
                    if s >= 0:
                        c[s // bs, s % bs] = x[t]
        return kc, vc

    seq = np.asarray(seq_lens).astype(np.int64)
    lens = np.asarray(compress_lens).reshape(-1).astype(np.int64)
    offs = None if compress_seq_offsets is None else np.asarray(compress_seq_offsets).reshape(-1).astype(np.int64)
    packed = key.ndim == 3
    nh = key.shape[1] if packed else key.shape[2]
    for x, c in sides:
        bs = c.shape[1]
        rows_view = c.reshape(-1, c.shape[-1]) if c.flags.c_contiguous else None
        assert rows_view is not None

        def put(row, data):
            rows_view[row] = data

        base = 0
        for b in range(seq.size):
            L = int(seq[b])
            for h in range(nh):
                i = b * nh + h
                s0 = int(slots[i])
                w = int(lens[i])

                def tok(k):
                    return x[base + k, h] if packed else x[b, k, h]

                if s0 < 0:
                    continue
                if scatter_mode == "Alibi":
                    for k in range(w):
                        put(s0 + k, tok(L - w + k))
                    continue
                o = int(offs[i])
                if o == -1 or w == 0:
                    o = L
                if o == L:
                    w = 0
                for k in range(o):
                    put(s0 + k, tok(k))
                if w > 0:
                    if scatter_mode == "Rope":
                        window = np.stack([tok(o + k) for k in range(w)])
                        put(s0 + o, rope_mean(window, kind or x.dtype.name))
                        for m in range(L - o - w):
                            put(s0 + o + 1 + m, tok(o + w + m))
                    else:  # Omni
                        for m in range(L - o - w):
                            put(s0 + o + m, tok(o + w + m))
            if packed:
                base += L
        del bs
    return kc, vc


# ---- ScatterPaKvCacheWithKScale --------------------------------------------------------------


def scatter_pa_kv_cache_with_k_scale(key, value, key_cache, value_cache, slot_mapping, key_scale,
                                     key_scale_cache):
    kc, vc, ksc = key_cache.copy(), value_cache.copy(), key_scale_cache.copy()
    nb, _, bs, _ = key_cache.shape
    for t, s in enumerate(np.asarray(slot_mapping).astype(np.int64)):
        if s < 0 or s >= nb * bs:
            continue
        kc[s // bs, :, s % bs, :] = key[t]
        vc[s // bs, :, s % bs, :] = value[t]
        ksc[s // bs, :, s % bs, 0] = key_scale[t]
    return kc, vc, ksc


# ---- KvCompressEpilog ------------------------------------------------------------------------

C448 = f32_bits(0x3B124925)  # (float)(1.0f / 448.0f)
EPS = f32_bits(0x38D1B717)  # (float)1e-4
C_SIXTH = f32_bits(0x3E2AAAAB)  # (float)(1.0f / 6.0f)


def epilog_row_bytes(d: int, mode: int, gs: int) -> tuple[int, int]:
    """(payload bytes = concatCol, bytes written = kvCacheCol).

    As docs/operators/kv_compress_epilog.md states them under 'Row size'."""
    n = d - 64
    if mode in (0, 1):
        concat = n + 128 + (n // 64) * (2 if mode == 0 else 1)
    else:
        concat = 64 + n // 2 + (n // gs) * 2
    return concat, concat if mode == 1 else -(-concat // 32) * 32


def epilog_row(x_row, mode: int, gs: int, round_scale: bool, x_scale: float) -> np.ndarray:
    """The bytes written for one bfloat16 row (docs/operators/kv_compress_epilog.md)."""
    d = x_row.size
    n = d - 64
    v = x_row.astype(np.float32)
    concat, total = epilog_row_bytes(d, mode, gs)
    out = np.zeros(total, np.uint8)
    if mode in (0, 1):
        out[:128] = x_row[n:].view(np.uint8)
        groups = v[:n].reshape(-1, 64)
        codes, scales = [], []
        for g in groups:
            amax = np.max(np.abs(g))
            s = np.float32(np.maximum(amax, EPS) * C448)
            if round_scale:
                u = int(np.array([s], np.float32).view(np.uint32)[0])
                e = u >> 23
                if u & 0x7FFFFF:
                    e += 1
                s = f32_bits(e << 23)
            q = np.clip((g / s).astype(np.float32), np.float32(-448), np.float32(448))
            codes.append(q.astype(E4M3).view(np.uint8))
            if mode == 0:
                scales.append(to_bf16_bits([s]).view(np.uint8))
            else:
                scales.append(np.array([(int(np.array([s], np.float32).view(np.uint32)[0]) >> 23) & 0xFF], np.uint8))
        out[128:128 + n] = np.concatenate(codes)
        out[128 + n:concat] = np.concatenate(scales)
        return out
    xs = np.float32(x_scale)
    out[:64] = hif8_encode((v[n:] * xs).astype(np.float32), saturate=True)
    codes, scales = [], []
    for g in v[:n].reshape(-1, gs):
        amax = np.max(np.abs(g))
        scale = np.float32(amax * C_SIXTH)
        inv = np.float32(np.float32(6.0) / amax) if amax != 0 else np.float32(0.0)
        inv_b = bf16_round([inv])[0]
        xq = bf16_round((g * inv_b).astype(np.float32))  # exact product, one RNE to bfloat16
        xq = np.clip(xq, np.float32(-6), np.float32(6))
        codes.append(xq.astype(F4).view(np.uint8) & 0x0F)
        scales.append(to_bf16_bits([scale]).view(np.uint8))
    nib = np.concatenate(codes).astype(np.uint8)
    out[64:64 + n // 2] = nib[0::2] | (nib[1::2] << 4)
    out[64 + n // 2:concat] = np.concatenate(scales)
    return out


def kv_compress_epilog(cache, x, slot_mapping, *, quant_group_size=64, quant_mode=1,
                       round_scale=True, x_scale=1.0):
    c = cache.copy()
    bs = cache.shape[1]
    gs = 64 if quant_mode in (0, 1) else quant_group_size
    rows = x.reshape(-1, x.shape[-1])
    for r, s in enumerate(np.asarray(slot_mapping).reshape(-1).astype(np.int64)):
        if s == -1:
            continue
        data = epilog_row(rows[r], quant_mode, gs, round_scale, x_scale)
        c[s // bs, s % bs, 0, :data.size] = data
    return c
