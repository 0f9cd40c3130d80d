"""What a user would otherwise write to update or read a KV cache, for bench/compare.py.

- NumPy fancy-index assignment, the style of the upstream golden scripts
  (``cache.reshape(-1, H, D)[slots] = key``), ``np.take`` for the gathers, and vectorized NumPy
  versions of the quantizing operators (docs/operators/kv_compress_epilog.md,
  docs/operators/indexer_quant_cache.md; the number-format helpers and constants come from the
  plain references in tests/python/refs.py);
- JAX on the CPU: ``.at[slots].set`` for paged caches, ``lax.dynamic_update_slice`` for
  contiguous ones, ``jnp.take`` for the gather, jit-compiled with the caches (or the gather's
  outputs) donated so XLA may update them in place;
- PyTorch: ``index_copy_``, ``index_put_``, ``index_select``, advanced indexing, and the eager
  PyTorch formulation of each quantizer, among them the one vLLM's
  tests/kernels/attention/test_cache.py uses as its reference for the vLLM operators (index
  assignment into the cache view, torch's float8 conversion of ``x / scale``).

Every builder takes a workload's arrays (NumPy, owned by the caller) and returns
``(call, result)``: ``call()`` performs one update, ``result()`` returns the caches (or
outputs) it wrote as NumPy arrays (compare.py checks them byte for byte against kvscatter).
"""

from __future__ import annotations

import functools
import pathlib
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
import refs  # noqa: E402  (spec references: HiFloat8 encoder, bfloat16 rounding, constants)

F4 = refs.F4
E4M3 = refs.E4M3


def valid_rows(slots):
    """Indices of the non-padding tokens, or None when every slot is valid (no copy needed)."""
    valid = slots >= 0
    return None if valid.all() else np.flatnonzero(valid)


# ---- NumPy ------------------------------------------------------------------------------------


def numpy_scatter(key, value, key_cache, value_cache, slots, cache_mode="Norm"):
    """Paged scatter by fancy-index assignment; padding slots (-1) skipped."""
    sides = [(key, key_cache)] + ([] if value is None else [(value, value_cache)])
    def call():
        rows = valid_rows(slots)
        s = slots if rows is None else slots[rows]
        for x, c in sides:
            src = x if rows is None else x[rows]
            if cache_mode == "PA_NZ":  # [NB, H*D/16, BS, 16]: a 16-element chunk per (slot, ch)
                bs = c.shape[2]
                c[s // bs, :, s % bs, :] = src.reshape(len(s), c.shape[1], c.shape[3])
            else:
                c.reshape(-1, *x.shape[1:])[s] = src

    return call, lambda: [c for _, c in sides]


def numpy_scatter_with_k_scale(key, value, key_cache, value_cache, slots, key_scale,
                               scale_cache):
    """BNBD caches [NB, H, BS, D]: the (block, offset) pairs index around the head axis."""
    bs = key_cache.shape[2]

    def call():
        rows = valid_rows(slots)
        s = slots if rows is None else slots[rows]
        b, o = s // bs, s % bs
        for x, c in ((key, key_cache), (value, value_cache)):
            c[b, :, o, :] = x if rows is None else x[rows]
        scale_cache[b, :, o, 0] = key_scale if rows is None else key_scale[rows]

    return call, lambda: [key_cache, value_cache, scale_cache]


def _bf16_bytes(x):
    """float32 [..., n] -> the little-endian bytes of its bfloat16 rounding, [..., 2n]."""
    b = np.ascontiguousarray(x, np.float32).astype(ml_dtypes.bfloat16).view(np.uint8)
    return b.reshape(*x.shape[:-1], 2 * x.shape[-1])


def epilog_rows(x, mode: int, group: int = 64, round_scale: bool = True,
                x_scale: float = 1.0) -> np.ndarray:
    """Vectorized KvCompressEpilog rows: bfloat16 x [T, d] -> uint8 [T, row_bytes]."""
    t, d = x.shape
    n = d - 64
    concat, total = refs.epilog_row_bytes(d, mode, group)
    out = np.zeros((t, total), np.uint8)
    v = x.astype(np.float32)
    if mode in (0, 1):
        out[:, :128] = np.ascontiguousarray(x[:, n:]).view(np.uint8).reshape(t, 128)
        g = v[:, :n].reshape(t, n // 64, 64)
        amax = np.abs(g).max(axis=-1)
        s = (np.maximum(amax, refs.EPS) * refs.C448).astype(np.float32)
        if round_scale:  # the next power of two at or above s
            u = s.view(np.uint32)
            e = (u >> 23) + ((u & 0x7FFFFF) != 0)
            s = (e.astype(np.uint32) << 23).view(np.float32)
        q = np.clip(g / s[..., None], np.float32(-448), np.float32(448))
        out[:, 128:128 + n] = q.astype(E4M3).view(np.uint8).reshape(t, n)
        if mode == 0:
            out[:, 128 + n:concat] = _bf16_bytes(s)
        else:
            out[:, 128 + n:concat] = ((s.view(np.uint32) >> 23) & 0xFF).astype(np.uint8)
        return out
    out[:, :64] = refs.hif8_encode((v[:, n:] * np.float32(x_scale)).astype(np.float32))
    g = v[:, :n].reshape(t, n // group, group)
    amax = np.abs(g).max(axis=-1)
    scale = (amax * refs.C_SIXTH).astype(np.float32)
    inv = np.zeros_like(amax)
    np.divide(np.float32(6.0), amax, out=inv, where=amax != 0)
    inv_b = refs.bf16_round(inv)
    xq = np.clip(refs.bf16_round(g * inv_b[..., None]), np.float32(-6), np.float32(6))
    nib = (xq.astype(F4).view(np.uint8) & 0x0F).reshape(t, n)
    out[:, 64:64 + n // 2] = nib[:, 0::2] | (nib[:, 1::2] << 4)
    out[:, 64 + n // 2:concat] = _bf16_bytes(scale)
    return out


def numpy_epilog(cache, x, slots, mode: int):
    """Quantize every row in NumPy, then scatter the rows into the paged uint8 cache."""
    flat = cache.reshape(-1, cache.shape[-1])

    def call():
        rows = valid_rows(slots)
        if rows is None:
            flat[slots] = epilog_rows(x, mode)
        else:
            flat[slots[rows]] = epilog_rows(x[rows], mode)

    return call, lambda: [cache]


def numpy_update(key_cache, value_cache, new_keys, new_values, position):
    """Contiguous (B, S, H, D) caches: slice assignment, casting to the cache dtype."""
    length = new_keys.shape[1]

    def call():
        key_cache[:, position:position + length] = new_keys
        value_cache[:, position:position + length] = new_values

    return call, lambda: [key_cache, value_cache]


def gather_slots(block_tables, seq_lens, block_size):
    """The cache slot each output row of a paged gather reads, and where the block id is
    padding (negative: the row is zero-filled), for plain (not cumulative) ``seq_lens``."""
    lens = seq_lens.astype(np.int64)
    seq = np.repeat(np.arange(len(lens)), lens)
    pos = np.arange(len(seq)) - (np.cumsum(lens) - lens)[seq]
    blk = block_tables[seq, pos // block_size].astype(np.int64)
    return np.maximum(blk, 0) * block_size + pos % block_size, blk < 0


def numpy_gather(key_cache, value_cache, block_tables, seq_lens, key, value):
    """Norm caches read back by ``np.take`` of the slots into the dense outputs' first rows."""
    sides = [(key_cache, key)] + ([] if value is None else [(value_cache, value)])

    def call():
        idx, pad = gather_slots(block_tables, seq_lens, key_cache.shape[1])
        for c, out in sides:
            rows = out[:len(idx)]
            np.take(c.reshape(-1, *c.shape[2:]), idx, axis=0, out=rows)
            if pad.any():
                rows[pad] = 0

    return call, lambda: [out for _, out in sides]


def indexer_rows(x, mode: str):
    """Vectorized IndexerQuantCache rows, ``"fp8"`` (round_scale=True) or ``"mxfp8"``, into a
    float8_e4m3fn cache: bfloat16 x [T, d] -> (codes uint8 [T, d], scale bytes [T, 4 or d/32]).

    Both modes scale by a power of two ``2^(127 - E)``, ``E`` the biased exponent of ``s`` rounded
    up (``s`` = the row's or the 32-group's absolute maximum times f32(1/448), the group's floored
    at 1e-4), so the products are exact and one float8 rounding of them gives the codes.
    """
    v = x.astype(np.float32)
    t, d = v.shape
    g = v.reshape(t, 1, d) if mode == "fp8" else v.reshape(t, d // 32, 32)
    amax = np.abs(g).max(axis=-1)
    if mode == "mxfp8":
        amax = np.maximum(amax, refs.EPS)
    u = (amax * refs.C448).astype(np.float32).view(np.uint32)
    e = (u >> 23) + ((u & 0x7FFFFF) != 0).astype(np.uint32)
    inv = ((np.uint32(254) - e) << 23).view(np.float32)
    codes = (g * inv[..., None]).astype(E4M3).view(np.uint8).reshape(t, d)
    if mode == "fp8":  # the stored scale 2^(E - 127), 0.0 for an all-zero row
        return codes, (e << 23).view(np.float32).view(np.uint8).reshape(t, 4)
    return codes, e.astype(np.uint8)


def numpy_indexer(cache, cache_scale, x, slots, mode: str):
    """Quantize every row in NumPy, then scatter codes and scales into the paged caches."""
    flat = cache.view(np.uint8).reshape(-1, cache.shape[-1])
    flat_scale = cache_scale.view(np.uint8).reshape(-1, cache_scale.shape[-1]
                                                    * cache_scale.dtype.itemsize)

    def call():
        rows = valid_rows(slots)
        s = slots if rows is None else slots[rows]
        codes, scales = indexer_rows(x if rows is None else x[rows], mode)
        flat[s] = codes
        flat_scale[s] = scales

    return call, lambda: [cache, cache_scale]


def _fp8(x, scale):
    """vLLM's fp8 conversion: float32 ``x / scale``, saturated to +-448, float8_e4m3fn codes."""
    q = np.clip(x.astype(np.float32) / scale, np.float32(-448), np.float32(448))
    return q.astype(E4M3).view(np.uint8)


def numpy_flash(key, value, key_cache, value_cache, slots, fp8, k_scale, v_scale):
    """reshape_and_cache_flash: ``cache[block, offset] = row`` on the (possibly strided)
    [NB, BS, H, D] cache views; fp8 rows divided by the per-head (or per-tensor) scale."""
    bs = key_cache.shape[1]

    def call():
        rows = valid_rows(slots)
        s = slots if rows is None else slots[rows]
        b, o = s // bs, s % bs
        for x, c, sc in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
            x = x if rows is None else x[rows]
            c[b, o] = _fp8(x, sc.reshape(-1, 1)) if fp8 else x

    return call, lambda: [key_cache, value_cache]


def numpy_gather_cache(src, dst, block_table, cu_seq_lens, token_to_seq, num_tokens, fp8, scale):
    """gather_and_maybe_dequant_cache: row t reads token t - cu_seq_lens[seq] of its sequence;
    fp8 entries dequantized as float32 ``code * scale`` rounded to bfloat16."""
    bs = src.shape[1]

    def call():
        seq = token_to_seq[:num_tokens]
        pos = np.arange(num_tokens) - cu_seq_lens[seq]
        rows = src[block_table[seq, pos // bs], pos % bs]
        if fp8:
            rows = (rows.view(E4M3).astype(np.float32) * scale).astype(dst.dtype)
        dst[:num_tokens] = rows

    return call, lambda: [dst]


def numpy_latent(kv_c, k_pe, cache, slots, fp8, scale):
    """concat_and_cache_mla: ``cache[block, offset] = concat(kv_c, k_pe)``, fp8 as vLLM's."""
    bs = cache.shape[1]

    def call():
        rows = valid_rows(slots)
        s = slots if rows is None else slots[rows]
        x = np.concatenate([kv_c, k_pe] if rows is None else [kv_c[rows], k_pe[rows]], axis=-1)
        cache[s // bs, s % bs] = _fp8(x, scale) if fp8 else x

    return call, lambda: [cache]


# ---- JAX --------------------------------------------------------------------------------------


def _jax():
    import jax

    return jax


class _Donated:
    """Caches living on the JAX CPU device, replaced by each donated call's outputs."""

    def __init__(self, fn, caches, args):
        jax = _jax()
        self.fn, self.args = fn, [jax.device_put(a) for a in args]
        self.caches = [jax.device_put(c) for c in caches]

    def call(self):
        self.caches = list(self.fn(*self.caches, *self.args))
        self.caches[0].block_until_ready()

    def result(self):
        return [np.asarray(c) for c in self.caches]


def jax_scatter(key, value, key_cache, value_cache, slots, cache_mode="Norm"):
    import jax.numpy as jnp

    jax = _jax()

    def one(c, x, s):
        if cache_mode == "PA_NZ":
            bs = c.shape[2]
            s = jnp.where(s < 0, c.shape[0] * bs, s)  # padding -> out of range -> dropped
            rows = x.reshape(x.shape[0], c.shape[1], c.shape[3])
            return c.at[s // bs, :, s % bs, :].set(rows, mode="drop")
        flat = c.reshape(-1, *x.shape[1:])
        s = jnp.where(s < 0, flat.shape[0], s)
        return flat.at[s].set(x, mode="drop").reshape(c.shape)

    if value is None:
        update = jax.jit(lambda kc, k, s: (one(kc, k, s),), donate_argnums=(0,))
        d = _Donated(update, [key_cache.copy()], [key, slots])
    else:
        update = jax.jit(lambda kc, vc, k, v, s: (one(kc, k, s), one(vc, v, s)),
                         donate_argnums=(0, 1))
        d = _Donated(update, [key_cache.copy(), value_cache.copy()], [key, value, slots])
    return d.call, d.result


def jax_scatter_with_k_scale(key, value, key_cache, value_cache, slots, key_scale, scale_cache):
    import jax.numpy as jnp

    jax = _jax()
    nb, _, bs, _ = key_cache.shape

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2))
    def update(kc, vc, sc, k, v, ks, s):
        s_ok = jnp.where(s < 0, nb * bs, s)
        b, o = s_ok // bs, s_ok % bs
        return (kc.at[b, :, o, :].set(k, mode="drop"), vc.at[b, :, o, :].set(v, mode="drop"),
                sc.at[b, :, o, 0].set(ks, mode="drop"))

    d = _Donated(update, [key_cache.copy(), value_cache.copy(), scale_cache.copy()],
                 [key, value, key_scale, slots])
    return d.call, d.result


def jax_update(key_cache, value_cache, new_keys, new_values, position):
    from jax import lax

    jax = _jax()

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def update(kc, vc, k, v, pos):
        start = (0, pos, 0, 0)
        return (lax.dynamic_update_slice(kc, k.astype(kc.dtype), start),
                lax.dynamic_update_slice(vc, v.astype(vc.dtype), start))

    d = _Donated(update, [key_cache.copy(), value_cache.copy()],
                 [new_keys, new_values, np.int32(position)])
    return d.call, d.result


def jax_gather(key_cache, value_cache, block_tables, seq_lens, key, value):
    """``jnp.take`` of the slots each output row reads (row -> sequence by ``searchsorted``
    over the length prefix sums), padding blocks zero-filled, rows past the last sequence kept."""
    import jax.numpy as jnp

    jax = _jax()
    bs = key_cache.shape[1]

    def one(out, c, bt, lens):
        ends = jnp.cumsum(lens)
        r = jnp.arange(out.shape[0])
        seq = jnp.minimum(jnp.searchsorted(ends, r, side="right"), lens.shape[0] - 1)
        pos = r - (ends - lens)[seq]
        blk = bt[seq, jnp.clip(pos // bs, 0, bt.shape[1] - 1)]
        rows = jnp.take(c.reshape(-1, *c.shape[2:]), jnp.maximum(blk, 0) * bs + pos % bs, axis=0,
                        mode="clip")
        rows = jnp.where((blk < 0)[:, None, None], jnp.zeros((), rows.dtype), rows)
        return jnp.where((r < ends[-1])[:, None, None], rows, out)

    if value is None:
        update = jax.jit(lambda k, kc, bt, sl: (one(k, kc, bt, sl),), donate_argnums=(0,))
        d = _Donated(update, [key.copy()], [key_cache, block_tables, seq_lens])
    else:
        update = jax.jit(lambda k, v, kc, vc, bt, sl: (one(k, kc, bt, sl), one(v, vc, bt, sl)),
                         donate_argnums=(0, 1))
        d = _Donated(update, [key.copy(), value.copy()],
                     [key_cache, value_cache, block_tables, seq_lens])
    return d.call, d.result


# ---- PyTorch ----------------------------------------------------------------------------------


def _torch_view(a):
    """A torch tensor sharing a NumPy array's memory (bfloat16/float8 travel as raw ints)."""
    import torch

    if a.dtype.itemsize == 2 and a.dtype.kind not in "iuf":
        return torch.from_numpy(a.view(np.int16))
    if a.dtype.itemsize == 1 and a.dtype.kind not in "iu":
        return torch.from_numpy(a.view(np.uint8))
    return torch.from_numpy(a)


def _torch_tensor(a):
    """As _torch_view, with bfloat16 arrays as torch.bfloat16 tensors (for arithmetic)."""
    import torch

    t = _torch_view(a)
    return t.view(torch.bfloat16) if a.dtype == ml_dtypes.bfloat16 else t


def torch_scatter(key, value, key_cache, value_cache, slots, cache_mode="Norm"):
    """index_copy_ into [num_slots, H * D] views; torch has no skip-padding form, so padded
    tokens are dropped first as a user would."""
    import torch

    if cache_mode != "Norm":
        raise NotImplementedError("index_copy_ addresses whole slots (Norm layout) only")
    sides = [(key, key_cache)] + ([] if value is None else [(value, value_cache)])
    views = [(_torch_view(x).reshape(x.shape[0], -1), _torch_view(c).view(-1, x[0].size))
             for x, c in sides]
    s = torch.from_numpy(slots)

    def call():
        rows = torch.nonzero(s >= 0).flatten() if bool((s < 0).any()) else None
        for x, c in views:
            if rows is None:
                c.index_copy_(0, s, x)
            else:
                c.index_copy_(0, s[rows], x[rows])

    return call, lambda: [c for _, c in sides]


def torch_update(key_cache, value_cache, new_keys, new_values, position):
    """index_copy_ along the sequence axis (the cast to a bfloat16 cache goes through .to())."""
    import torch

    length = new_keys.shape[1]
    idx = torch.arange(position, position + length)
    if key_cache.dtype == np.float32:
        caches = [torch.from_numpy(key_cache), torch.from_numpy(value_cache)]
        news = [torch.from_numpy(new_keys), torch.from_numpy(new_values)]
    else:
        caches = [_torch_view(key_cache).view(torch.bfloat16),
                  _torch_view(value_cache).view(torch.bfloat16)]
        news = [torch.from_numpy(new_keys), torch.from_numpy(new_values)]

    def call():
        for c, x in zip(caches, news):
            c.index_copy_(1, idx, x.to(c.dtype))

    return call, lambda: [key_cache, value_cache]


def torch_scatter_index_put(key, value, key_cache, value_cache, slots, cache_mode="Norm"):
    """index_put_ (advanced-index assignment, ``cache[slots] = key``) into [num_slots, H, D]
    views, padded tokens dropped first."""
    import torch

    if cache_mode != "Norm":
        raise NotImplementedError("index_put_ addresses whole slots (Norm layout) only")
    sides = [(key, key_cache)] + ([] if value is None else [(value, value_cache)])
    views = [(_torch_view(x), _torch_view(c).view(-1, *x.shape[1:])) for x, c in sides]
    s = torch.from_numpy(slots)

    def call():
        rows = torch.nonzero(s >= 0).flatten() if bool((s < 0).any()) else None
        for x, c in views:
            if rows is None:
                c.index_put_((s,), x)
            else:
                c.index_put_((s[rows],), x[rows])

    return call, lambda: [c for _, c in sides]


def torch_scatter_with_k_scale(key, value, key_cache, value_cache, slots, key_scale, scale_cache):
    """Advanced-index assignment ``cache[block, :, offset] = rows`` on the BNBD caches."""
    import torch

    nb, _, bs, _ = key_cache.shape
    caches = [_torch_view(c) for c in (key_cache, value_cache, scale_cache)]
    rows = [_torch_view(key), _torch_view(value), torch.from_numpy(key_scale)[..., None]]
    s = torch.from_numpy(slots)

    def call():
        ok = (s >= 0) & (s < nb * bs)
        sv = s[ok] if not bool(ok.all()) else s
        b, o = sv // bs, sv % bs
        for c, x in zip(caches, rows):
            c[b, :, o] = x[ok] if sv is not s else x

    return call, lambda: [key_cache, value_cache, scale_cache]


def torch_epilog(cache, x, slots, mode: int):
    """The fp8 quantizers written in eager PyTorch (torch has no HiFloat8 type for mode 2),
    then index_copy_ of the rows into the paged uint8 cache."""
    import torch

    if mode == 2:
        raise NotImplementedError("PyTorch has no HiFloat8 type to write the hifloat8_fp4 mode")
    t, d = x.shape
    n = d - 64
    concat, total = refs.epilog_row_bytes(d, mode, 64)
    xt = _torch_view(x).view(torch.bfloat16)
    flat = torch.from_numpy(cache).view(-1, cache.shape[-1])
    s = torch.from_numpy(slots)
    eps, c448 = float(refs.EPS), float(refs.C448)

    def rows_of(xr):
        r = xr.shape[0]
        out = torch.zeros(r, total, dtype=torch.uint8)
        out[:, :128] = xr[:, n:].contiguous().view(torch.uint8)
        g = xr[:, :n].float().reshape(r, n // 64, 64)
        sc = g.abs().amax(-1).clamp_min(eps) * c448
        u = sc.view(torch.int32)
        sc = (((u >> 23) + ((u & 0x7FFFFF) != 0).int()) << 23).view(torch.float32)
        q = (g / sc[..., None]).clamp(-448.0, 448.0)
        out[:, 128:128 + n] = q.to(torch.float8_e4m3fn).view(torch.uint8).reshape(r, n)
        if mode == 0:
            out[:, 128 + n:concat] = sc.to(torch.bfloat16).view(torch.uint8).reshape(r, -1)
        else:
            out[:, 128 + n:concat] = ((sc.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
        return out

    def call():
        ok = s >= 0
        if bool(ok.all()):
            flat.index_copy_(0, s, rows_of(xt))
        else:
            idx = torch.nonzero(ok).flatten()
            flat.index_copy_(0, s[idx], rows_of(xt[idx]))

    return call, lambda: [cache]


def _torch_gather(key_cache, value_cache, block_tables, seq_lens, key, value, select: bool):
    import torch

    bs = key_cache.shape[1]
    sides = [(key_cache, key)] + ([] if value is None else [(value_cache, value)])
    views = [(_torch_view(c).view(-1, *c.shape[2:]), _torch_view(out)) for c, out in sides]
    bt, lens = torch.from_numpy(block_tables), torch.from_numpy(seq_lens)

    def call():
        seq = torch.repeat_interleave(torch.arange(lens.shape[0]), lens)
        pos = torch.arange(seq.shape[0]) - (torch.cumsum(lens, 0) - lens)[seq]
        blk = bt[seq, pos // bs]
        pad = blk < 0
        idx = blk.clamp_min(0) * bs + pos % bs
        for c, out in views:
            rows = out[:idx.shape[0]]
            if select:
                torch.index_select(c, 0, idx, out=rows)
            else:
                rows[:] = c[idx]
            if bool(pad.any()):
                rows[pad] = 0

    return call, lambda: [out for _, out in sides]


def torch_gather_index_select(key_cache, value_cache, block_tables, seq_lens, key, value):
    """``torch.index_select(cache_rows, 0, slots, out=...)`` into the dense outputs."""
    return _torch_gather(key_cache, value_cache, block_tables, seq_lens, key, value, True)


def torch_gather_advanced_index(key_cache, value_cache, block_tables, seq_lens, key, value):
    """Advanced indexing, ``key[:n] = cache_rows[slots]`` (a gather into a temporary, then a
    copy)."""
    return _torch_gather(key_cache, value_cache, block_tables, seq_lens, key, value, False)


def torch_indexer(cache, cache_scale, x, slots, mode: str):
    """IndexerQuantCache ``"fp8"`` (round_scale=True) or ``"mxfp8"`` in eager PyTorch (the
    computation of ``indexer_rows``), then index_copy_ of codes and scales into the caches."""
    import torch

    d = x.shape[-1]
    flat = torch.from_numpy(cache.view(np.uint8)).view(-1, cache.shape[-1])
    flat_scale = torch.from_numpy(cache_scale.view(np.uint8)).view(
        -1, cache_scale.shape[-1] * cache_scale.dtype.itemsize)
    xt = _torch_tensor(x)
    s = torch.from_numpy(slots)
    eps, c448 = float(refs.EPS), float(refs.C448)

    def rows_of(xr):
        t = xr.shape[0]
        g = xr.float().reshape(t, 1, d) if mode == "fp8" else xr.float().reshape(t, d // 32, 32)
        amax = g.abs().amax(-1)
        if mode == "mxfp8":
            amax = amax.clamp_min(eps)
        u = (amax * c448).view(torch.int32)
        e = (u >> 23) + ((u & 0x7FFFFF) != 0).int()
        inv = ((254 - e) << 23).view(torch.float32)
        codes = (g * inv[..., None]).to(torch.float8_e4m3fn).view(torch.uint8).reshape(t, d)
        if mode == "fp8":
            return codes, (e << 23).view(torch.float32).view(torch.uint8).reshape(t, 4)
        return codes, e.to(torch.uint8)

    def call():
        ok = s >= 0
        idx = None if bool(ok.all()) else torch.nonzero(ok).flatten()
        codes, scales = rows_of(xt if idx is None else xt[idx])
        sv = s if idx is None else s[idx]
        flat.index_copy_(0, sv, codes)
        flat_scale.index_copy_(0, sv, scales)

    return call, lambda: [cache, cache_scale]


def _torch_fp8(x, scale):
    """vLLM test_cache.py's fp8 reference: ``(x.float() / scale)`` saturated, to float8_e4m3fn."""
    import torch

    return (x.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)


def torch_flash(key, value, key_cache, value_cache, slots, fp8, k_scale, v_scale):
    """reshape_and_cache_flash as vLLM's test writes its reference: ``cache[block, offset] =
    row`` on the [NB, BS, H, D] cache views (an HND cache through its permuted view), fp8 rows
    divided by the per-head (or per-tensor) scale; padded tokens dropped first."""
    import torch

    bs = key_cache.shape[1]
    sides = [(_torch_tensor(x), _torch_tensor(c), torch.from_numpy(sc).reshape(-1, 1))
             for x, c, sc in ((key, key_cache, k_scale), (value, value_cache, v_scale))]
    s = torch.from_numpy(slots)

    def call():
        ok = s >= 0
        idx = None if bool(ok.all()) else torch.nonzero(ok).flatten()
        sv = s if idx is None else s[idx]
        b, o = sv // bs, sv % bs
        for x, c, sc in sides:
            x = x if idx is None else x[idx]
            c[b, o] = _torch_fp8(x, sc) if fp8 else x

    return call, lambda: [key_cache, value_cache]


def torch_gather_cache(src, dst, block_table, cu_seq_lens, token_to_seq, num_tokens, fp8, scale):
    """gather_and_maybe_dequant_cache as vLLM's test references it: ``src[block, offset]`` of
    each row's token, fp8 codes as ``code.float() * scale`` rounded to bfloat16."""
    import torch

    bs = src.shape[1]
    s, out = _torch_tensor(src), _torch_tensor(dst)
    table, cu = torch.from_numpy(block_table), torch.from_numpy(cu_seq_lens)
    seqs, sc = torch.from_numpy(token_to_seq), torch.from_numpy(scale)

    def call():
        seq = seqs[:num_tokens]
        pos = torch.arange(num_tokens) - cu[seq]
        rows = s[table[seq, pos // bs], pos % bs]
        if fp8:
            out[:num_tokens] = (rows.view(torch.float8_e4m3fn).float() * sc).to(torch.bfloat16)
        else:
            out[:num_tokens] = rows

    return call, lambda: [dst]


def torch_latent(kv_c, k_pe, cache, slots, fp8, scale):
    """concat_and_cache_mla as vLLM's test references it: ``cache[block, offset] =
    torch.cat([kv_c, k_pe], -1)``, fp8 as in torch_flash."""
    import torch

    bs = cache.shape[1]
    kc, kp, c = _torch_tensor(kv_c), _torch_tensor(k_pe), _torch_tensor(cache)
    s, sc = torch.from_numpy(slots), torch.from_numpy(scale)

    def call():
        ok = s >= 0
        idx = None if bool(ok.all()) else torch.nonzero(ok).flatten()
        sv = s if idx is None else s[idx]
        x = torch.cat([kc, kp] if idx is None else [kc[idx], kp[idx]], dim=-1)
        c[sv // bs, sv % bs] = _torch_fp8(x, sc) if fp8 else x

    return call, lambda: [cache]


# ---- kvscatter's framework front doors ----------------------------------------------------------


def kvs_torch_scatter(key, value, key_cache, value_cache, slots, cache_mode="Norm"):
    """torch.ops.kvscatter.scatter_pa_kv_cache on torch tensors (the native PyTorch operator)."""
    import torch

    import kvscatter.torch  # noqa: F401

    op = torch.ops.kvscatter.scatter_pa_kv_cache.default
    bf = [None if a is None else _torch_view(a).view(torch.bfloat16)
          for a in (key, value, key_cache, value_cache)]
    s = torch.from_numpy(slots)

    def call():
        op(bf[0], bf[1], bf[2], bf[3], s, cache_mode=cache_mode)

    return call, lambda: [c for c in (key_cache, value_cache) if c is not None]


def kvs_jax_update(key_cache, value_cache, new_keys, new_values, position):
    """kvscatter.jax.kv_cache_update under jax.jit with the caches donated."""
    import kvscatter.jax as kj

    jax = _jax()
    update = jax.jit(lambda kc, vc, k, v, p: tuple(kj.kv_cache_update(kc, vc, k, v, p).values())[:2],
                     donate_argnums=(0, 1))
    d = _Donated(update, [key_cache.copy(), value_cache.copy()],
                 [new_keys, new_values, np.int32(position)])
    return d.call, d.result


def kvs_jax_scatter(key, value, key_cache, value_cache, slots, cache_mode="Norm"):
    """kvscatter.jax.scatter_pa_kv_cache under jax.jit with the caches donated."""
    import kvscatter.jax as kj

    jax = _jax()
    if value is None:
        update = jax.jit(lambda kc, k, s: (kj.scatter_pa_kv_cache(k, None, kc, None, s,
                                                                  cache_mode=cache_mode)[0],),
                         donate_argnums=(0,))
        d = _Donated(update, [key_cache.copy()], [key, slots])
    else:
        update = jax.jit(lambda kc, vc, k, v, s: kj.scatter_pa_kv_cache(k, v, kc, vc, s,
                                                                        cache_mode=cache_mode),
                         donate_argnums=(0, 1))
        d = _Donated(update, [key_cache.copy(), value_cache.copy()], [key, value, slots])
    return d.call, d.result


def kvs_torch_gather(key_cache, value_cache, block_tables, seq_lens, key, value):
    """torch.ops.kvscatter.gather_pa_kv_cache on torch tensors."""
    import torch

    import kvscatter.torch  # noqa: F401

    op = torch.ops.kvscatter.gather_pa_kv_cache.default
    kc, vc, k, v = (None if a is None else _torch_tensor(a)
                    for a in (key_cache, value_cache, key, value))
    bt, lens = torch.from_numpy(block_tables), torch.from_numpy(seq_lens)

    def call():
        op(kc, vc, bt, lens, k, v)

    return call, lambda: [a for a in (key, value) if a is not None]


def kvs_jax_gather(key_cache, value_cache, block_tables, seq_lens, key, value):
    """kvscatter.jax.gather_pa_kv_cache under jax.jit with the outputs donated."""
    import kvscatter.jax as kj

    jax = _jax()
    update = jax.jit(lambda k, v, kc, vc, bt, sl: kj.gather_pa_kv_cache(kc, vc, bt, sl, k, v),
                     donate_argnums=(0, 1))
    d = _Donated(update, [key.copy(), value.copy()],
                 [key_cache, value_cache, block_tables, seq_lens])
    return d.call, d.result


def kvs_torch_scatter_pa_cache(key, key_cache, slots):
    """torch.ops.kvscatter.scatter_pa_cache on torch tensors."""
    import torch

    import kvscatter.torch  # noqa: F401

    op = torch.ops.kvscatter.scatter_pa_cache.default
    k, c, s = _torch_tensor(key), _torch_tensor(key_cache), torch.from_numpy(slots)
    return lambda: op(k, c, s), lambda: [key_cache]


def kvs_jax_scatter_pa_cache(key, key_cache, slots):
    """kvscatter.jax.scatter_pa_cache under jax.jit with the cache donated."""
    import kvscatter.jax as kj

    jax = _jax()
    update = jax.jit(lambda c, k, s: (kj.scatter_pa_cache(k, c, s),), donate_argnums=(0,))
    d = _Donated(update, [key_cache.copy()], [key, slots])
    return d.call, d.result


def kvs_torch_indexer(cache, cache_scale, x, slots, mode: str):
    """torch.ops.kvscatter.indexer_quant_cache on torch tensors (E8M0 scales as uint8)."""
    import torch

    import kvscatter.torch  # noqa: F401

    op = torch.ops.kvscatter.indexer_quant_cache.default
    c = torch.from_numpy(cache.view(np.uint8)).view(torch.float8_e4m3fn)
    sc = torch.from_numpy(cache_scale if mode == "fp8" else cache_scale.view(np.uint8))
    xt, s = _torch_tensor(x), torch.from_numpy(slots)
    return lambda: op(c, sc, xt, s, quant_mode=mode), lambda: [cache, cache_scale]


def kvs_jax_indexer(cache, cache_scale, x, slots, mode: str):
    """kvscatter.jax.indexer_quant_cache under jax.jit with both caches donated."""
    import kvscatter.jax as kj

    jax = _jax()
    update = jax.jit(lambda c, sc, xx, s: kj.indexer_quant_cache(c, sc, xx, s, quant_mode=mode),
                     donate_argnums=(0, 1))
    d = _Donated(update, [cache.copy(), cache_scale.copy()], [x, slots])
    return d.call, d.result


def kvs_torch_flash(key, value, key_cache, value_cache, slots, fp8, k_scale, v_scale):
    """torch.ops.kvscatter.reshape_and_cache_flash (vLLM's signature) on torch tensors."""
    import torch

    import kvscatter.torch  # noqa: F401

    op = torch.ops.kvscatter.reshape_and_cache_flash.default
    k, v, kc, vc = (_torch_tensor(a) for a in (key, value, key_cache, value_cache))
    s, ks, vs = (torch.from_numpy(a) for a in (slots, k_scale, v_scale))
    kind = "fp8" if fp8 else "auto"
    return lambda: op(k, v, kc, vc, s, kind, ks, vs), lambda: [key_cache, value_cache]


def kvs_torch_gather_cache(src, dst, block_table, cu_seq_lens, token_to_seq, num_tokens, fp8,
                           scale):
    """torch.ops.kvscatter.gather_and_maybe_dequant_cache (vLLM's signature) on torch tensors."""
    import torch

    import kvscatter.torch  # noqa: F401

    op = torch.ops.kvscatter.gather_and_maybe_dequant_cache.default
    s, d = _torch_tensor(src), _torch_tensor(dst)
    bt, cu, seqs, sc = (torch.from_numpy(a) for a in (block_table, cu_seq_lens, token_to_seq,
                                                      scale))
    kind = "fp8" if fp8 else "auto"
    return lambda: op(s, d, bt, cu, seqs, num_tokens, kind, sc, None), lambda: [dst]


def kvs_torch_latent(kv_c, k_pe, cache, slots, fp8, scale):
    """torch.ops.kvscatter.concat_and_cache_mla (vLLM's signature) on torch tensors."""
    import torch

    import kvscatter.torch  # noqa: F401

    op = torch.ops.kvscatter.concat_and_cache_mla.default
    kc, kp, c = _torch_tensor(kv_c), _torch_tensor(k_pe), _torch_tensor(cache)
    s, sc = torch.from_numpy(slots), torch.from_numpy(scale)
    kind = "fp8" if fp8 else "auto"
    return lambda: op(kc, kp, c, s, kind, sc), lambda: [cache]
