"""What a user would otherwise write to update a KV cache, for bench/compare.py.

- NumPy fancy-index assignment, the style of the upstream golden scripts
  (``cache.reshape(-1, H, D)[slots] = key``), and vectorized NumPy versions of the quantizing
  operators (docs/operators/kv_compress_epilog.md; the number-format helpers and constants come
  from the plain references in tests/python/refs.py);
- JAX on the CPU: ``.at[slots].set`` for paged caches, ``lax.dynamic_update_slice`` for
  contiguous ones, jit-compiled with the caches donated so XLA may update them in place;
- PyTorch ``index_copy_`` when torch is importable.

Every builder takes a workload's arrays (NumPy, owned by the caller) and returns
``(call, result)``: ``call()`` performs one update, ``result()`` returns the caches it wrote as
NumPy arrays (compare.py checks them byte for byte against kvscatter).
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


# ---- PyTorch ----------------------------------------------------------------------------------


def _torch_view(a):
    """A torch tensor sharing a NumPy array's memory (bfloat16/float8 travel as raw ints)."""
    import torch

    if a.dtype.itemsize == 2 and a.dtype.kind not in "iuf":
        return torch.from_numpy(a.view(np.int16))
    if a.dtype.itemsize == 1 and a.dtype.kind not in "iu":
        return torch.from_numpy(a.view(np.uint8))
    return torch.from_numpy(a)


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
