#!/usr/bin/env python3
"""kvscatter side by side with what a user would otherwise write, and the performance report.

Runs, in one process, every operator on realistic shapes over token counts from 1 to 16,384
with kvscatter (1 thread and all cores, and through its PyTorch operators and kvscatter.jax)
and with the alternatives of bench/alternatives.py (NumPy fancy-index assignment, np.take and
NumPy quantizers; JAX with donated caches; PyTorch index_copy_, index_put_, index_select and the
eager PyTorch quantizers, for the vLLM-compatible operators the formulation vLLM's tests use,
when torch is importable); runs the native sweep ``kvscatter bench --json``
(time per call, GB/s and ratio to memcpy for 1 thread and all threads, and the targets); then
writes ``performance.md`` and PNG plots under ``perf/`` in the output directory.

    python3 bench/compare.py                  # regenerates docs/performance.md, docs/perf/*.png
    python3 bench/compare.py --quick --out /tmp/report   # a few token counts: tests the script

Needs the installed package (``python3 -m pip install --no-build-isolation .``), matplotlib
(not with ``--no-plots``), and the ``kvscatter`` program (``--cli``; found under build/*/tools/ or on PATH) for the
native table.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import importlib
import json
import math
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Callable

import ml_dtypes
import numpy as np

# PyTorch's OpenMP workers spin after each PyTorch operator by default and would take the cores
# the next measured call (kvscatter's pool, XLA's) needs: let idle workers sleep.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import alternatives as alt  # noqa: E402

import kvscatter  # noqa: E402
import kvscatter.vllm  # noqa: E402

FULL_TOKENS = [1, 4, 16, 64, 256, 1024, 4096, 16384]
QUICK_TOKENS = [1, 256]
BLOCK = 128
MIN_BLOCKS = 64  # as in the native sweep: decode batches scatter over at least 8,192 slots
MAX_DECODE = 64
BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
MODES = {"fp8_bf16": 0, "fp8_e8m0": 1, "hifloat8_fp4": 2}
KVS1, KVSN = "kvscatter, 1 thread", "kvscatter, all threads"
# kvscatter through its framework front doors (PyTorch operator, JAX custom call): compared
# with the framework's own way in the same table.
TORCH_OPS, KVS_JAX = "kvscatter torch.ops", "kvscatter.jax"
INDEX_PUT = "PyTorch index_put_"
ADV_INDEX = "PyTorch advanced index"
ALTERNATIVES = ["NumPy", "JAX", "PyTorch", INDEX_PUT, ADV_INDEX]
NOTES = ROOT / "bench" / "performance_notes.md"


# ---- workloads (the same as the native sweep's, tools/bench_all.cc) ---------------------------


def blocks_for(tokens: int) -> int:
    return max(MIN_BLOCKS, -(-tokens // BLOCK))


def written_tokens(tokens: int) -> int:
    return tokens - tokens // 8 if tokens <= MAX_DECODE else tokens


def realistic_slots(tokens: int, nb: int, rng) -> np.ndarray:
    """Decode (<= 64 tokens): one token per sequence at a random offset of a distinct random
    block, the last 1 in 8 entries padding (-1). Prefill: tokens fill shuffled blocks in order."""
    blocks = rng.permutation(nb)
    if tokens <= MAX_DECODE:
        slots = np.full(tokens, -1, np.int64)
        n = written_tokens(tokens)
        slots[:n] = blocks[:n] * BLOCK + rng.integers(0, BLOCK, n)
        return slots
    t = np.arange(tokens)
    return (blocks[t // BLOCK] * BLOCK + t % BLOCK).astype(np.int64)


@dataclasses.dataclass
class Impl:
    call: Callable[[], None]
    result: Callable[[], list]
    threads: int | None = None  # kvscatter rows set the thread count before each batch


@dataclasses.dataclass
class Workload:
    op: str
    variant: str
    shape: str
    build: Callable  # (tokens, rng) -> dict of arrays
    traffic: Callable[[int], int]  # bytes read + written per call, the native sweep's rule
    impls: dict  # name -> (arrays -> (call, result)); kvscatter first

    @property
    def id(self) -> str:
        return f"{self.op} {self.variant} {self.shape}"


def scatter_workload(mode: str, heads: int, dim: int, key_only: bool = False) -> Workload:
    def build(tokens, rng):
        nb = blocks_for(tokens)
        shape = (nb, BLOCK, heads, dim) if mode == "Norm" else (nb, heads * dim // 16, BLOCK, 16)
        a = {"key": rng.standard_normal((tokens, heads, dim), np.float32).astype(BF16),
             "slots": realistic_slots(tokens, nb, rng), "shape": shape}
        a["value"] = None if key_only else rng.standard_normal(
            (tokens, heads, dim), np.float32).astype(BF16)
        return a

    def caches(a):
        return np.zeros(a["shape"], BF16), None if key_only else np.zeros(a["shape"], BF16)

    def kvs(a):
        kc, vc = caches(a)
        return (lambda: kvscatter.scatter_pa_kv_cache(a["key"], a["value"], kc, vc, a["slots"],
                                                      cache_mode=mode),
                lambda: [c for c in (kc, vc) if c is not None])

    def using(fn):
        return lambda a: fn(a["key"], a["value"], *caches(a), a["slots"], cache_mode=mode)

    sides = 1 if key_only else 2
    return Workload(
        "scatter_pa_kv_cache", f"{mode}{' key-only' if key_only else ''} bf16", f"{heads}x{dim}",
        build, lambda t: written_tokens(t) * 2 * sides * heads * dim * 2 + 8 * t,
        {"kvscatter": kvs, TORCH_OPS: using(alt.kvs_torch_scatter),
         KVS_JAX: using(alt.kvs_jax_scatter), "NumPy": using(alt.numpy_scatter),
         "JAX": using(alt.jax_scatter), "PyTorch": using(alt.torch_scatter),
         INDEX_PUT: using(alt.torch_scatter_index_put)})


def k_scale_workload(heads: int, dim: int) -> Workload:
    def build(tokens, rng):
        nb = blocks_for(tokens)
        return {"key": rng.standard_normal((tokens, heads, dim), np.float32).astype(E4M3),
                "value": rng.standard_normal((tokens, heads, dim), np.float32).astype(E4M3),
                "key_scale": rng.random((tokens, heads), np.float32),
                "slots": realistic_slots(tokens, nb, rng), "nb": nb}

    def caches(a):
        return (np.zeros((a["nb"], heads, BLOCK, dim), E4M3),
                np.zeros((a["nb"], heads, BLOCK, dim), E4M3),
                np.zeros((a["nb"], heads, BLOCK, 1), np.float32))

    def kvs(a):
        kc, vc, sc = caches(a)
        return (lambda: kvscatter.scatter_pa_kv_cache_with_k_scale(
            a["key"], a["value"], kc, vc, a["slots"], a["key_scale"], sc), lambda: [kc, vc, sc])

    def using(fn):
        def make(a):
            kc, vc, sc = caches(a)
            return fn(a["key"], a["value"], kc, vc, a["slots"], a["key_scale"], sc)
        return make

    return Workload(
        "scatter_pa_kv_cache_with_k_scale", "fp8_e4m3 BNBD", f"{heads}x{dim}", build,
        lambda t: written_tokens(t) * 2 * (2 * heads * dim + 4 * heads) + 8 * t,
        {"kvscatter": kvs, "NumPy": using(alt.numpy_scatter_with_k_scale),
         "JAX": using(alt.jax_scatter_with_k_scale),
         "PyTorch": using(alt.torch_scatter_with_k_scale)})


def epilog_workload(mode_name: str, d: int = 576) -> Workload:
    mode = MODES[mode_name]
    row = alt.refs.epilog_row_bytes(d, mode, 64)[1]

    def build(tokens, rng):
        nb = blocks_for(tokens)
        x = (rng.standard_normal((tokens, d), np.float32) * 2).astype(BF16)
        return {"x": x, "slots": realistic_slots(tokens, nb, rng), "nb": nb}

    def cache(a):
        return np.zeros((a["nb"], BLOCK, 1, row), np.uint8)

    def kvs(a):
        c = cache(a)
        return (lambda: kvscatter.kv_compress_epilog(c, a["x"], a["slots"], quant_mode=mode),
                lambda: [c])

    return Workload(
        "kv_compress_epilog", mode_name, f"d{d}", build,
        lambda t: written_tokens(t) * (2 * d + row) + 8 * t,
        {"kvscatter": kvs, "NumPy": lambda a: alt.numpy_epilog(cache(a), a["x"], a["slots"], mode),
         "PyTorch": lambda a: alt.torch_epilog(cache(a), a["x"], a["slots"], mode)})


def update_workload(cache_dtype, heads: int, dim: int) -> Workload:
    cd = np.dtype(cache_dtype)
    name = "f32" if cd == np.float32 else "bf16"

    def build(tokens, rng):
        seq = max(4096, tokens)
        return {"new_keys": rng.standard_normal((1, tokens, heads, dim), np.float32),
                "new_values": rng.standard_normal((1, tokens, heads, dim), np.float32),
                "seq": seq, "position": seq - tokens}

    def caches(a):
        return (np.zeros((1, a["seq"], heads, dim), cd), np.zeros((1, a["seq"], heads, dim), cd))

    def kvs(a):
        kc, vc = caches(a)
        return (lambda: kvscatter.kv_cache_update(kc, vc, a["new_keys"], a["new_values"],
                                                  a["position"]), lambda: [kc, vc])

    def using(fn):
        return lambda a: fn(*caches(a), a["new_keys"], a["new_values"], a["position"])

    return Workload(
        "kv_cache_update", f"f32->{name}", f"{heads}x{dim}", build,
        lambda t: 2 * t * heads * dim * (4 + cd.itemsize),
        {"kvscatter": kvs, KVS_JAX: using(alt.kvs_jax_update), "NumPy": using(alt.numpy_update),
         "JAX": using(alt.jax_update), "PyTorch": using(alt.torch_update)})


def scatter_pa_cache_workload(heads: int, dim: int) -> Workload:
    def build(tokens, rng):
        nb = blocks_for(tokens)
        return {"key": rng.standard_normal((tokens, heads, dim), np.float32).astype(BF16),
                "slots": realistic_slots(tokens, nb, rng), "shape": (nb, BLOCK, heads, dim)}

    def kvs(a):
        c = np.zeros(a["shape"], BF16)
        return lambda: kvscatter.scatter_pa_cache(a["key"], c, a["slots"]), lambda: [c]

    def using(fn):  # the key side of the paged scatter's alternatives
        return lambda a: fn(a["key"], None, np.zeros(a["shape"], BF16), None, a["slots"])

    return Workload(
        "scatter_pa_cache", "plain bf16", f"{heads}x{dim}", build,
        lambda t: written_tokens(t) * 2 * heads * dim * 2 + 8 * t,
        {"kvscatter": kvs,
         TORCH_OPS: lambda a: alt.kvs_torch_scatter_pa_cache(
             a["key"], np.zeros(a["shape"], BF16), a["slots"]),
         KVS_JAX: lambda a: alt.kvs_jax_scatter_pa_cache(
             a["key"], np.zeros(a["shape"], BF16), a["slots"]),
         "NumPy": using(alt.numpy_scatter), "JAX": using(alt.jax_scatter),
         "PyTorch": using(alt.torch_scatter), INDEX_PUT: using(alt.torch_scatter_index_put)})


def gather_workload(heads: int, dim: int, seq: int = 512) -> Workload:
    """Sequences of up to `seq` tokens in shuffled blocks, read back into dense key/value rows."""
    width = -(-seq // BLOCK)

    def build(tokens, rng):
        nb = blocks_for(tokens) + 4
        lens = np.minimum(seq, tokens - np.arange(-(-tokens // seq)) * seq).astype(np.int64)
        tables = np.full((len(lens), width), -1, np.int64)
        blocks, used = rng.permutation(nb), 0
        for i, n in enumerate(lens):
            k = -(-int(n) // BLOCK)
            tables[i, :k] = blocks[used:used + k]
            used += k
        shape = (nb, BLOCK, heads, dim)
        return {"key_cache": rng.standard_normal(shape, np.float32).astype(BF16),
                "value_cache": rng.standard_normal(shape, np.float32).astype(BF16),
                "tables": tables, "lens": lens, "rows": (tokens, heads, dim)}

    def using(fn):
        return lambda a: fn(a["key_cache"], a["value_cache"], a["tables"], a["lens"],
                            np.zeros(a["rows"], BF16), np.zeros(a["rows"], BF16))

    def kvs(a):
        k, v = np.zeros(a["rows"], BF16), np.zeros(a["rows"], BF16)
        return (lambda: kvscatter.gather_pa_kv_cache(a["key_cache"], a["value_cache"],
                                                     a["tables"], a["lens"], k, v),
                lambda: [k, v])

    return Workload(
        "gather_pa_kv_cache", "Norm bf16", f"{heads}x{dim}", build,
        lambda t: 2 * 2 * t * heads * dim * 2 + 8 * -(-t // seq) * (width + 1),
        {"kvscatter": kvs, TORCH_OPS: using(alt.kvs_torch_gather),
         KVS_JAX: using(alt.kvs_jax_gather), "NumPy": using(alt.numpy_gather),
         "JAX": using(alt.jax_gather), "PyTorch": using(alt.torch_gather_index_select),
         ADV_INDEX: using(alt.torch_gather_advanced_index)})


def indexer_workload(mode: str, d: int = 128) -> Workload:
    """IndexerQuantCache into a float8_e4m3fn cache: "fp8" (a float32 scale a row, rounded to
    a power of two) or "mxfp8" (an E8M0 scale per 32 elements)."""
    scale_bytes = 4 if mode == "fp8" else d // 32

    def build(tokens, rng):
        nb = blocks_for(tokens)
        x = (rng.standard_normal((tokens, d), np.float32) * 2).astype(BF16)
        return {"x": x, "slots": realistic_slots(tokens, nb, rng), "nb": nb}

    def caches(a):
        scale = (np.zeros((a["nb"], BLOCK, 1, 1), np.float32) if mode == "fp8" else
                 np.zeros((a["nb"], BLOCK, 1, d // 32), E8M0))
        return np.zeros((a["nb"], BLOCK, 1, d), E4M3), scale

    def kvs(a):
        c, s = caches(a)
        return (lambda: kvscatter.indexer_quant_cache(c, s, a["x"], a["slots"], quant_mode=mode),
                lambda: [c, s])

    def using(fn):
        return lambda a: fn(*caches(a), a["x"], a["slots"], mode)

    return Workload(
        "indexer_quant_cache", mode, f"d{d}", build,
        lambda t: written_tokens(t) * (2 * d + d + scale_bytes) + 8 * t,
        {"kvscatter": kvs, TORCH_OPS: using(alt.kvs_torch_indexer),
         KVS_JAX: using(alt.kvs_jax_indexer), "NumPy": using(alt.numpy_indexer),
         "PyTorch": using(alt.torch_indexer)})


# The vLLM-compatible operators, called through kvscatter.vllm with vLLM's arguments; the ids
# are those of the native operators they adapt (paged_kv_write, paged_cache_gather,
# paged_latent_write).


def paged_write_workload(fp8: bool, hnd: bool, heads: int, dim: int) -> Workload:
    """reshape_and_cache_flash, "auto" or "fp8" with per-head scales, into NHD caches or into HND
    caches interleaved in one [NB, 2, H, BS, D] allocation, passed as vLLM passes them (permuted
    views)."""
    kind = "fp8" if fp8 else "auto"
    cdt = np.dtype(np.uint8) if fp8 else BF16

    def build(tokens, rng):
        nb = blocks_for(tokens)
        return {"key": (rng.standard_normal((tokens, heads, dim), np.float32) * 2).astype(BF16),
                "value": (rng.standard_normal((tokens, heads, dim), np.float32) * 2).astype(BF16),
                "slots": realistic_slots(tokens, nb, rng), "nb": nb,
                "k_scale": np.full(heads, 0.05, np.float32),
                "v_scale": np.full(heads, 0.07, np.float32)}

    def caches(a):
        if hnd:
            kv = np.zeros((a["nb"], 2, heads, BLOCK, dim), cdt)
            return kv[:, 0].transpose(0, 2, 1, 3), kv[:, 1].transpose(0, 2, 1, 3)
        return np.zeros((a["nb"], BLOCK, heads, dim), cdt), np.zeros((a["nb"], BLOCK, heads, dim),
                                                                     cdt)

    def kvs(a):
        kc, vc = caches(a)
        return (lambda: kvscatter.vllm.reshape_and_cache_flash(
            a["key"], a["value"], kc, vc, a["slots"], kind, a["k_scale"], a["v_scale"]),
                lambda: [kc, vc])

    def using(fn):
        return lambda a: fn(a["key"], a["value"], *caches(a), a["slots"], fp8, a["k_scale"],
                            a["v_scale"])

    return Workload(
        "paged_kv_write", f"{'fp8_e4m3' if fp8 else 'copy'} {'HND-kv' if hnd else 'NHD'} bf16",
        f"{heads}x{dim}", build,
        lambda t: written_tokens(t) * 2 * heads * dim * (2 + cdt.itemsize) + 8 * t,
        {"kvscatter": kvs, TORCH_OPS: using(alt.kvs_torch_flash), "NumPy": using(alt.numpy_flash),
         "PyTorch": using(alt.torch_flash)})


def paged_gather_workload(fp8: bool, entry: int = 576, bs: int = 64) -> Workload:
    """gather_and_maybe_dequant_cache of MLA entries: up to 8 sequences in shuffled blocks of 64,
    copied ("auto", bfloat16 cache) or dequantized ("fp8", e4m3 codes times 0.25)."""
    def build(tokens, rng):
        seqs = min(8, tokens)
        per_seq = -(-tokens // seqs)
        cols = -(-per_seq // bs)
        nb = max(MIN_BLOCKS, seqs * cols)
        src = (rng.integers(0, 256, (nb, bs, entry), np.uint8) & 0xBF if fp8 else
               rng.standard_normal((nb, bs, entry), np.float32).astype(BF16))
        cu = np.minimum(tokens, np.arange(seqs + 1) * per_seq).astype(np.int64)
        return {"src": src, "table": rng.permutation(nb)[:seqs * cols].reshape(seqs, cols),
                "cu": cu, "token_to_seq": np.repeat(np.arange(seqs), np.diff(cu)),
                "tokens": tokens, "scale": np.array([0.25], np.float32)}

    def using(fn):
        return lambda a: fn(a["src"], np.zeros((a["tokens"], entry), BF16), a["table"], a["cu"],
                            a["token_to_seq"], a["tokens"], fp8, a["scale"])

    def kvs(a):
        dst = np.zeros((a["tokens"], entry), BF16)
        return (lambda: kvscatter.vllm.gather_and_maybe_dequant_cache(
            a["src"], dst, a["table"], a["cu"], a["token_to_seq"], a["tokens"],
            "fp8" if fp8 else "auto", a["scale"]), lambda: [dst])

    return Workload(
        "paged_cache_gather", "fp8_e4m3->bf16" if fp8 else "copy bf16", f"e{entry}", build,
        lambda t: t * entry * ((1 if fp8 else 2) + 2),
        {"kvscatter": kvs, TORCH_OPS: using(alt.kvs_torch_gather_cache),
         "NumPy": using(alt.numpy_gather_cache), "PyTorch": using(alt.torch_gather_cache)})


def latent_workload(fp8: bool, rank: int = 512, pe: int = 64) -> Workload:
    """concat_and_cache_mla: bfloat16 kv_c [T, 512] and k_pe [T, 64] into one 576-element entry
    a slot, copied ("auto") or quantized with one scale ("fp8")."""
    entry_bytes = (rank + pe) * (1 if fp8 else 2)

    def build(tokens, rng):
        nb = blocks_for(tokens)
        return {"kv_c": (rng.standard_normal((tokens, rank), np.float32) * 2).astype(BF16),
                "k_pe": (rng.standard_normal((tokens, pe), np.float32) * 2).astype(BF16),
                "slots": realistic_slots(tokens, nb, rng), "nb": nb,
                "scale": np.array([0.05], np.float32)}

    def cache(a):
        return np.zeros((a["nb"], BLOCK, rank + pe), np.uint8 if fp8 else BF16)

    def kvs(a):
        c = cache(a)
        return (lambda: kvscatter.vllm.concat_and_cache_mla(
            a["kv_c"], a["k_pe"], c, a["slots"], "fp8" if fp8 else "auto", a["scale"]),
                lambda: [c])

    def using(fn):
        return lambda a: fn(a["kv_c"], a["k_pe"], cache(a), a["slots"], fp8, a["scale"])

    return Workload(
        "paged_latent_write", f"{'fp8_e4m3' if fp8 else 'copy'} bf16", f"{rank}+{pe}", build,
        lambda t: written_tokens(t) * ((rank + pe) * 2 + entry_bytes) + 8 * t,
        {"kvscatter": kvs, TORCH_OPS: using(alt.kvs_torch_latent),
         "NumPy": using(alt.numpy_latent), "PyTorch": using(alt.torch_latent)})


def workloads() -> list[Workload]:
    """In the native sweep's order (tools/bench_all.cc)."""
    return [
        scatter_workload("Norm", 8, 128), scatter_workload("Norm", 32, 128),
        scatter_workload("PA_NZ", 8, 128), scatter_workload("PA_NZ", 32, 128),
        scatter_workload("Norm", 1, 576, key_only=True),
        scatter_pa_cache_workload(8, 128),
        gather_workload(8, 128),
        indexer_workload("fp8"), indexer_workload("mxfp8"),
        k_scale_workload(8, 128),
        epilog_workload("fp8_bf16"), epilog_workload("fp8_e8m0"), epilog_workload("hifloat8_fp4"),
        update_workload(np.float32, 8, 128), update_workload(BF16, 8, 128),
        update_workload(np.float32, 32, 128), update_workload(BF16, 32, 128),
        paged_write_workload(False, False, 8, 128), paged_write_workload(False, True, 8, 128),
        paged_write_workload(True, False, 8, 128), paged_write_workload(True, True, 8, 128),
        paged_gather_workload(False), paged_gather_workload(True),
        latent_workload(False), latent_workload(True),
    ]


# ---- measurement ------------------------------------------------------------------------------


def available(module: str) -> str | None:
    """The version of an importable module, else None."""
    try:
        return getattr(importlib.import_module(module), "__version__", "?")
    except Exception:
        return None


def same_bytes(got: list, want: list) -> bool:
    return all(np.array_equal(np.ascontiguousarray(g).view(np.uint8).reshape(-1),
                              np.ascontiguousarray(w).view(np.uint8).reshape(-1))
               for g, w in zip(got, want))


def time_impls(impls: dict[str, Impl], rounds: int, batch_s: float) -> dict:
    """Median and best microseconds per call of each implementation: one warm-up call (JIT
    compilation included), then `rounds` rounds that each time one batch of every
    implementation in turn, so that all of them see the same background load."""
    inner = {}
    for name, im in impls.items():
        if im.threads:
            kvscatter.set_num_threads(im.threads)
        im.call()
        t0 = time.perf_counter_ns()
        im.call()
        dt = max(time.perf_counter_ns() - t0, 100) / 1e9
        inner[name] = int(min(max(batch_s / dt, 1), 100_000))
    times = {name: [] for name in impls}
    for _ in range(rounds):
        for name, im in impls.items():
            if im.threads:
                kvscatter.set_num_threads(im.threads)
            n = inner[name]
            t0 = time.perf_counter_ns()
            for _ in range(n):
                im.call()
            times[name].append((time.perf_counter_ns() - t0) / n / 1e3)
    kvscatter.set_num_threads(0)
    return {name: (statistics.median(t), min(t)) for name, t in times.items()}


def compare(tokens_list, rounds, batch_s, cores, ops_filter, log) -> dict:
    rows, unavailable = [], {}
    rng = np.random.default_rng(2024)
    for w in workloads():
        if ops_filter and not any(f in w.id for f in ops_filter):
            continue
        for tokens in tokens_list:
            arrays = w.build(tokens, rng)
            impls, verified = {}, {}
            for name, make in w.impls.items():
                try:
                    call, result = make(arrays)
                except ModuleNotFoundError as e:
                    unavailable.setdefault(name, f"not installed ({e.name})")
                    continue
                except NotImplementedError as e:
                    unavailable.setdefault(f"{name} for {w.id}", str(e))
                    continue
                if name == "kvscatter":
                    impls[KVS1] = Impl(call, result, 1)
                    if cores > 1:
                        impls[KVSN] = Impl(call, result, cores)
                else:
                    impls[name] = Impl(call, result)
            try:
                timing = time_impls(impls, rounds, batch_s)
            except Exception as e:  # one failing alternative must not lose the others
                bad = []
                for name, im in list(impls.items()):
                    try:
                        im.call()
                    except Exception as err:
                        bad.append(name)
                        unavailable.setdefault(f"{name} for {w.id}", f"{type(err).__name__}: {err}")
                if not bad:
                    raise e
                for name in bad:
                    del impls[name]
                timing = time_impls(impls, rounds, batch_s)
            want = impls[KVS1].result()
            for name, im in impls.items():
                verified[name] = name in (KVS1, KVSN) or same_bytes(im.result(), want)
            for name, (median, best) in timing.items():
                rows.append({"op": w.op, "variant": w.variant, "shape": w.shape, "id": w.id,
                             "tokens": tokens, "impl": name, "time_us": median,
                             "time_us_best": best, "bytes": w.traffic(tokens),
                             "verified": verified[name]})
            log(f"{w.id:<52} {tokens:>6}  " + "  ".join(
                f"{n.replace('kvscatter, ', '')}: {t[0]:.1f}" for n, t in timing.items()) + " us")
            del arrays, impls
            gc.collect()
    return {"rows": rows, "unavailable": unavailable}


# ---- native sweep -----------------------------------------------------------------------------


def find_cli(path: str | None) -> str | None:
    if path:
        return path
    for preset in ("release", "ci", "debug"):
        p = ROOT / "build" / preset / "tools" / "kvscatter"
        if p.exists():
            return str(p)
    return shutil.which("kvscatter")


def run_cli(cli: str, quick: bool, ops, log) -> tuple[dict, str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "bench.json"
        args = [cli, "bench", "--json", str(out)]
        if quick:
            args += ["--tokens", "1,1024", "--reps", "3", "--batch-ms", "1"]
        if ops:
            args += ["--ops", ",".join(ops)]
        log("$ " + " ".join(args[:2] + args[4:]) + " --json FILE")
        proc = subprocess.run(args, capture_output=True, text=True)
        if proc.returncode not in (0, 1) or not out.exists():
            raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        info = subprocess.run([cli, "info"], capture_output=True, text=True).stdout
        return json.loads(out.read_text()), info


# The quantizing workloads (the rows that compute), swept once per SIMD target.
QUANT_OPS = ["kv_compress_epilog", "scatter_pa_kv_cache_with_k_scale", "indexer_quant_cache",
             "paged_kv_write fp8", "paged_latent_write fp8", "paged_cache_gather fp8"]
QUANT_TOKENS = "1024,4096,16384"


def run_cli_per_target(cli: str, quick: bool, log) -> dict:
    """`kvscatter bench --simd T` over the quantizers, 1 thread, for every target this build has
    and this CPU runs: {target: bench json}."""
    info = subprocess.run([cli, "info"], capture_output=True, text=True).stdout
    line = next((x for x in info.splitlines() if x.startswith("simd targets available:")), "")
    out = {}
    for target in line.split(":", 1)[1].split() if line else []:
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "bench.json"
            args = [cli, "bench", "--simd", target, "--ops", ",".join(QUANT_OPS),
                    "--tokens", "1024" if quick else QUANT_TOKENS, "--threads-list", "1",
                    "--reps", "3" if quick else "9"]
            args += ["--batch-ms", "1"] if quick else []
            args += ["--json", str(path)]
            log("$ " + " ".join(args[:-2]) + " --json FILE")
            proc = subprocess.run(args, capture_output=True, text=True)
            if proc.returncode not in (0, 1) or not path.exists():
                raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
            out[target] = json.loads(path.read_text())
    return out


def elements_per_token(op: str, shape: str) -> int:
    """Elements of the input rows one token brings (keys and values both counted): shapes
    are "8x128" (heads x head size), "d576", "e576" or "512+64" (two inputs of one row)."""
    dims = shape.lstrip("de")
    n = sum(map(int, dims.split("+"))) if "+" in dims else math.prod(map(int, dims.split("x")))
    return n * (2 if op in ("scatter_pa_kv_cache_with_k_scale", "paged_kv_write") else 1)


# ---- report -----------------------------------------------------------------------------------


def machine() -> dict:
    m = {"cpu": platform.processor() or platform.machine(), "cores": len(os.sched_getaffinity(0))}
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        m["cpu"] = fields.get("Model name", m["cpu"])
        m["caches"] = ", ".join(f"{k.split()[0]} {fields[k]}" for k in
                                ("L1d cache", "L2 cache", "L3 cache") if k in fields)
        m["hypervisor"] = fields.get("Hypervisor vendor", "")
    except OSError:
        pass
    try:
        kb = int(next(line.split()[1] for line in open("/proc/meminfo")
                      if line.startswith("MemTotal")))
        m["memory"] = f"{kb / 2**20:.0f} GiB"
    except (OSError, StopIteration):
        pass
    m["os"] = f"{platform.system()} {platform.release()}"
    return m


def fmt_us(us: float) -> str:
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.2f} us" if us < 10 else f"{us:.1f} us"


def by_key(rows, *keys):
    out = {}
    for r in rows:
        out[tuple(r[k] for k in keys)] = r
    return out


def ordered_ids(rows):
    seen = []
    for r in rows:
        i = f"{r['op']} {r['variant']} {r['shape']}"
        if i not in seen:
            seen.append(i)
    return seen


def row_id(r):
    return f"{r['op']} {r['variant']} {r['shape']}"


def plots(native, comp, out: pathlib.Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    made = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        made.append(name)

    def grid(n):
        cols = min(3, n)
        rows = -(-n // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
        for ax in axes.flat[n:]:
            ax.set_visible(False)
        return fig, list(axes.flat)

    if native:
        rows = native["rows"]
        threads = native["threads"]
        ids = ordered_ids(rows)
        ops = list(dict.fromkeys(r["op"] for r in rows))
        colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
        # Throughput against token count per operator, memcpy of the same bytes as roofline.
        for op in ops:
            op_ids = [i for i in ids if i.startswith(op + " ")]
            fig, axes = grid(len(op_ids))
            for ax, i in zip(axes, op_ids):
                for c, n in zip(colors, threads):
                    rs = sorted((r for r in rows if row_id(r) == i and r["threads"] == n),
                                key=lambda r: r["tokens"])
                    t = [r["tokens"] for r in rs]
                    ax.plot(t, [r["gbps"] for r in rs], "o-", color=c, label=f"{n} thread(s)")
                    ax.plot(t, [r["memcpy_gbps"] for r in rs], "--", color=c, alpha=0.6,
                            label=f"memcpy, {n} thread(s)")
                ax.set_xscale("log", base=2)
                ax.set_title(i.removeprefix(op + " "), fontsize=9)
                ax.set_xlabel("tokens")
                ax.set_ylabel("GB/s (read + written)")
                ax.grid(alpha=0.3)
            axes[0].legend(fontsize=7)
            fig.suptitle(f"{op}\n(dashed: memcpy of the same bytes)", fontsize=9)
            save(fig, f"throughput_{op}.png")
        # Time against token count, log-log, 1 thread: cost growth.
        fig, axes = grid(len(ops))
        for ax, op in zip(axes, ops):
            for i in (i for i in ids if i.startswith(op + " ")):
                rs = sorted((r for r in rows if row_id(r) == i and r["threads"] == 1),
                            key=lambda r: r["tokens"])
                ax.loglog([r["tokens"] for r in rs], [r["time_us"] for r in rs], "o-",
                          label=i.removeprefix(op + " "), base=2)
            t = sorted({r["tokens"] for r in rows})
            ax.loglog(t, [t_ / t[-1] * max(r["time_us"] for r in rows if r["op"] == op)
                          for t_ in t], "k:", label="linear", base=2)
            ax.set_title(op, fontsize=9)
            ax.set_xlabel("tokens")
            ax.set_ylabel("time per call, us (1 thread)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        save(fig, "time_vs_tokens.png")
        # Speedup from 1 thread to all threads.
        if len(threads) > 1:
            fig, axes = grid(len(ops))
            n = threads[-1]
            for ax, op in zip(axes, ops):
                for i in (i for i in ids if i.startswith(op + " ")):
                    k = by_key([r for r in rows if row_id(r) == i], "tokens", "threads")
                    t = sorted({tk for tk, _ in k})
                    ax.plot(t, [k[(x, 1)]["time_us"] / k[(x, n)]["time_us"] for x in t], "o-",
                            label=i.removeprefix(op + " "))
                ax.axhline(1, color="k", lw=0.8)
                ax.axhline(n, color="k", lw=0.8, ls=":")
                ax.set_xscale("log", base=2)
                ax.set_title(op, fontsize=9)
                ax.set_xlabel("tokens")
                ax.set_ylabel(f"speedup, {n} threads vs 1")
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
            save(fig, "thread_scaling.png")
    if comp and comp["rows"]:
        rows = comp["rows"]
        ids = ordered_ids(rows)
        fig, axes = grid(len(ids))
        colors = {"NumPy": "tab:blue", "JAX": "tab:orange", "PyTorch": "tab:green",
                  INDEX_PUT: "tab:olive", ADV_INDEX: "tab:cyan"}
        for ax, i in zip(axes, ids):
            k = by_key([r for r in rows if r["id"] == i], "tokens", "impl")
            t = sorted({tk for tk, _ in k})
            for a in ALTERNATIVES:
                for ref, style in ((KVS1, "o-"), (KVSN, "x--")):
                    pts = [(x, k[(x, a)]["time_us"] / k[(x, ref)]["time_us"]) for x in t
                           if (x, a) in k and (x, ref) in k]
                    if pts:
                        ax.plot(*zip(*pts), style, color=colors[a],
                                label=f"vs {a}" + (" (all threads)" if ref == KVSN else ""))
            ax.axhline(1, color="k", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(i, fontsize=8)
            ax.set_xlabel("tokens")
            ax.set_ylabel("kvscatter speedup")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
        fig.suptitle("kvscatter speedup over each alternative\n(time of the alternative / "
                     "time of kvscatter)", fontsize=9)
        save(fig, "speedup.png")
    return made


def quantizers_per_target(w, per_target: dict) -> None:
    """The computing workloads on each SIMD target: ratio to memcpy and core cycles per input
    element, 1 thread."""
    first = next(iter(per_target.values()))
    ghz = statistics.median(j["cpu_ghz"] for j in per_target.values())
    toks = sorted({r["tokens"] for r in first["rows"]})
    w("## Quantizers per SIMD target\n")
    w("The workloads that compute (quantize, dequantize, pick scales), each pinned to every "
      "Highway target this build has and this CPU runs (`kvscatter bench --simd TARGET --ops "
      "... --threads-list 1`), 1 thread. Each cell: ratio to memcpy of the same bytes in the "
      "same run, then core cycles per element of the input rows (keys and values both "
      f"counted), at the clock measured during the run ({ghz:.2f} GHz, from a chain of "
      "dependent additions). At 1,024 and 4,096 tokens the data stays in cache, so the "
      "cycles are the kernel's own cost; at 16,384 tokens memory bandwidth caps both.\n")
    w("| Workload | SIMD target |" + "".join(f" {t:,} tokens |" for t in toks))
    w("|---|---|" + "---|" * len(toks))
    ids = list(dict.fromkeys(row_id(r) for r in first["rows"]))
    for i in ids:
        for target, j in per_target.items():
            k = {r["tokens"]: r for r in j["rows"] if row_id(r) == i and r["threads"] == 1}
            cells = []
            for t in toks:
                r = k.get(t)
                if not r:
                    cells.append("")
                    continue
                elems = t * elements_per_token(r["op"], r["shape"])
                cpe = r["time_us"] * 1e3 * j["cpu_ghz"] / elems
                cells.append(f"{r['ratio']:.3g} x, {cpe:.3g} c/el")
            w(f"| `{i}` | {target} | " + " | ".join(cells) + " |")
    w("")


def report(native, cli_info, comp, meta, made, out: pathlib.Path, per_target=None) -> str:
    L = []
    w = L.append
    w("# Performance\n")
    w("<!-- Generated by bench/compare.py; edit bench/compare.py or bench/performance_notes.md, "
      "not this file. -->\n")
    w("kvscatter's operators measured two ways, in one run on one machine:\n")
    w("1. **Native sweep** (`kvscatter bench`): every operator over token counts from 1 to "
      "16,384 on realistic shapes, 1 thread and all cores, each against `memcpy` of the same "
      "bytes timed in alternating batches in the same run.")
    w("2. **Side by side** (`bench/compare.py`): the same workloads through the Python package "
      "(and through `torch.ops.kvscatter` and `kvscatter.jax`) against what a user would "
      "otherwise write: NumPy fancy-index assignment, `np.take` and NumPy quantizers; JAX on "
      "the CPU; PyTorch `index_copy_`, `index_put_`, `index_select`, advanced indexing and the "
      "eager PyTorch formulation of each quantizer (for the vLLM-compatible operators, the one "
      "vLLM's own tests use as their reference).\n")
    w(f"Regenerate (this run took {meta['wall_min']:.1f} minutes):\n")
    w("```sh\ncmake --preset release && cmake --build build/release --target kvscatter_cli\n"
      "python3 -m pip install --no-build-isolation .\npython3 bench/compare.py\n```\n")
    w("Numbers from a shared or virtual machine move by 10-30 % between runs; compare ratios "
      "to memcpy, which are measured under the same load, rather than absolute times.\n")

    w("## Machine and versions\n")
    m = meta["machine"]
    w("| | |\n|---|---|")
    w(f"| Date | {meta['date']} |")
    w(f"| CPU | {m.get('cpu', '?')}, {m['cores']} cores"
      + (f" ({m['hypervisor']} guest)" if m.get("hypervisor") else "") + " |")
    if m.get("caches"):
        w(f"| Caches | {m['caches']} |")
    if m.get("memory"):
        w(f"| Memory | {m['memory']} |")
    w(f"| OS | {m['os']} |")
    if cli_info:
        w("| kvscatter | " + "; ".join(line.strip() for line in cli_info.strip().splitlines())
          + " |")
    for name, v in meta["versions"].items():
        w(f"| {name} | {v or 'not installed'} |")
    w("")
    if comp and comp["unavailable"]:
        w("Alternatives not measured:\n")
        for name, why in sorted(comp["unavailable"].items()):
            w(f"- {name}: {why}")
        w("")

    w("## How it is measured\n")
    w("- **Bytes** (FlashInfer's convention): bytes read plus bytes written per call. Read: the "
      "new keys/values or rows (padding tokens excluded, their rows are not read), the whole "
      "`slot_mapping` (8 bytes a token), key scales; written: cache rows (padding included for "
      "`kv_compress_epilog`'s 32-byte rows) and scale entries. The gathers read the cache "
      "rows (and the block tables, 8 bytes an entry, for `gather_pa_kv_cache`) and write the "
      "dense rows. `kv_cache_update` has no "
      "slot mapping: 2 x L x H x D x (4 + cache element size). GB/s = bytes / time per call.")
    w("- **Ratio to memcpy**: `memcpy` of half those bytes (so the same traffic) between buffers "
      "of that size, placed to avoid glibc's 4 KiB-aliasing slow path, on as many threads as "
      "the operator (split over the library's thread pool). The operator and the copy run in "
      "alternating batches of about 10 ms; the fastest batch of each gives the ratio (medians "
      "are in the JSON). Ratio 1 = as fast as memcpy.")
    w("- **Workloads**: caches of block size 128 with at least 64 blocks. Decode sizes (up to "
      "64 tokens) write one token per sequence at a random offset of a distinct random block, "
      "one token in eight is padding (slot -1); larger batches are a prefill filling a "
      "shuffled block table in order. Shapes: Llama-3-8B (8 KV heads x 128), a 32-head x 128 "
      "model, the MLA latent (1 x 576, key only) for the scatter; 8 x 128 FP8 with per-head "
      "key scales; d = 576 rows for `kv_compress_epilog`; `kv_cache_update` writes L tokens "
      "at the end of (1, max(4096, L), H, D) caches. `gather_pa_kv_cache` reads sequences of "
      "up to 512 tokens from shuffled blocks; `indexer_quant_cache` quantizes d = 128 rows. "
      "The vLLM-compatible operators: `paged_kv_write` (vLLM's `reshape_and_cache_flash`, "
      "8 x 128, per-head scales) into NHD caches or HND caches interleaved in one "
      "[blocks, 2, heads, 128, 128] allocation; `paged_cache_gather` "
      "(`gather_and_maybe_dequant_cache`) of 576-element MLA entries of up to 8 sequences in "
      "shuffled blocks of 64; `paged_latent_write` (`concat_and_cache_mla`) of 512 + 64 "
      "latent rows.")
    w("- **Side by side**: `time.perf_counter_ns` over batches of repeated calls (about 5 ms "
      "each) after a warm-up call (JIT compilation included), implementations interleaved "
      "batch by batch, median of the batches. Every alternative's caches are checked byte for "
      "byte against kvscatter's after the run (the *verified* marks).\n")

    if native:
        rows = native["rows"]
        threads = native["threads"]
        w("## Targets\n")
        w("Ratio to memcpy with 1 thread, each at its own token count (1,024 and 4,096 tokens "
          "run in cache, 16,384 streams from memory), from the native sweep, judged "
          f"automatically for this machine's SIMD target ({native['simd_target']}; the "
          "quantizers' in-cache targets are lower on AVX2 than on AVX-512):\n")
        w("| Target | Workload | Tokens | Target ratio | Measured | Status | Source |")
        w("|---|---|---|---|---|---|---|")
        missed = []
        for t in native["targets"]:
            if t["measured"] is None or t["met"] is None:  # not measured, or a floor check only
                continue
            status = "met" if t["met"] else \
                f"**missed** by {100 * (1 - t['measured'] / t['target']):.0f} %"
            if not t["met"]:
                missed.append(t)
            w(f"| {t['name']} | `{t['id']}` | {t['tokens']:,} | >= {t['target']:.2f} | "
              f"{t['measured']:.3f} | {status} | {t['source']} |")
        w("")
        # Decode: fixed cost per call.
        target_us = native["overhead_target_us"]
        nmax = threads[-1]
        k = by_key(rows, "op", "variant", "shape", "tokens", "threads")
        w(f"**Decode overhead** (target: a fixed cost per call under {target_us:g} us at 1 to "
          "64 tokens). The fixed cost is the part of the time that does not grow with the "
          "tokens: the intercept of a least-squares line through the 1, 4, 16 and 64-token "
          "times (1 thread), which decides the status. The excess of a 1-token call over memcpy "
          "of the same bytes is an upper bound on it that also holds the per-token cost of the "
          "layout (a PA_NZ token writes one cache line per 32 bytes).\n")
        head = "| Workload | 1 token, 1 thread | 1 token minus memcpy, 1 thread |"
        sep = "|---|---|---|"
        if nmax > 1:
            head += f" 1 token minus memcpy, {nmax} threads |"
            sep += "---|"
        w(head + " fixed cost (intercept 1-64) | Status |")
        w(sep + "---|---|")
        over_missed = []
        for i in ordered_ids(rows):
            key = tuple(next(r for r in rows if row_id(r) == i)[x] for x in ("op", "variant",
                                                                            "shape"))
            r1 = k.get(key + (1, 1))
            if not r1:
                continue
            cost = r1["time_us"] - r1["memcpy_us"]
            line = f"| `{i}` | {fmt_us(r1['time_us'])} | {cost:.2f} us |"
            costs = [cost]
            if nmax > 1 and key + (1, nmax) in k:
                rn = k[key + (1, nmax)]
                costs.append(rn["time_us"] - rn["memcpy_us"])
                line += f" {costs[-1]:.2f} us |"
            pts = [(t, k[key + (t, 1)]["time_us"]) for t in (1, 4, 16, 64) if key + (t, 1) in k]
            if len(pts) >= 2:
                xs, ys = zip(*pts)
                b, a = np.polyfit(xs, ys, 1)
                line += f" {a:.2f} us |"
                fixed = max(a, 0.0)
            else:
                line += " - |"
                fixed = max(costs)
            ok = fixed < target_us
            if not ok:
                over_missed.append((i, fixed))
            w(line + (" met |" if ok else " **missed** |"))
        w("")

        w("## Where targets are missed\n")
        if not missed and not over_missed:
            w("Every target is met in this run.\n")
        for t in missed:
            r = k.get(tuple(t["id"].rsplit(" ", 1)[0].split(" ", 1))
                      + (t["id"].rsplit(" ", 1)[1], t["tokens"], 1))
            extra = ""
            if r:
                extra = (f" ({fmt_us(r['time_us'])} per call, {r['gbps']:.1f} GB/s against "
                         f"memcpy's {r['memcpy_gbps']:.1f} GB/s)")
            w(f"- **{t['name']}** at {t['tokens']:,} tokens: {t['measured']:.3f} x memcpy "
              f"against {t['target']:.2f}, "
              f"{100 * (1 - t['measured'] / t['target']):.0f} % short{extra}.")
        for i, c in over_missed:
            w(f"- **Decode overhead of `{i}`**: {c:.2f} us against {target_us:g} us.")
        w("")
        if NOTES.exists():
            w(NOTES.read_text().strip() + "\n")

        w("## Native sweep\n")
        w("`kvscatter bench` (`--json FILE` writes every row; `--ops`, `--tokens`, "
          "`--threads-list` filter; `--simd TARGET` pins a Highway target, as "
          "`KVSCATTER_SIMD=TARGET` does for `build/release/bench/*_bench`). Time per call "
          "(fastest batch), GB/s of bytes read + written, memcpy GB/s of the same bytes on as "
          "many threads, ratio.\n")
        for name in made:
            if name.startswith("throughput_"):
                w(f"![{name}](perf/{name})\n")
        for i in ordered_ids(rows):
            w(f"### `{i}`\n")
            head = "| tokens |"
            sep = "|---|"
            for n in threads:
                head += f" {n} thr: time | GB/s | memcpy GB/s | ratio |"
                sep += "---|---|---|---|"
            w(head)
            w(sep)
            key = tuple(next(r for r in rows if row_id(r) == i)[x] for x in ("op", "variant",
                                                                            "shape"))
            for t in sorted({r["tokens"] for r in rows if row_id(r) == i}):
                line = f"| {t:,} |"
                for n in threads:
                    r = k.get(key + (t, n))
                    line += (f" {fmt_us(r['time_us'])} | {r['gbps']:.2f} | "
                             f"{r['memcpy_gbps']:.2f} | {r['ratio']:.2f} |") if r else " | | | |"
                w(line)
            w("")

        w("## Cost growth and thread scaling\n")
        if "time_vs_tokens.png" in made:
            w("![time per call against tokens](perf/time_vs_tokens.png)\n")
        toks = sorted({r["tokens"] for r in rows})
        big = [t for t in toks if t >= 1024]
        w("Cost growth: the slope of log(time) against log(tokens) between the smallest and "
          "largest prefill sizes (1 = linear), 1 thread. Thread scaling: time with 1 thread / "
          f"time with {nmax} threads.\n")
        head = "| Workload | growth slope |" + "".join(f" speedup at {t:,} |" for t in big)
        w(head)
        w("|---|---|" + "---|" * len(big))
        for i in ordered_ids(rows):
            key = tuple(next(r for r in rows if row_id(r) == i)[x] for x in ("op", "variant",
                                                                            "shape"))
            line = f"| `{i}` |"
            lo, hi = (big[0], big[-1]) if len(big) >= 2 else (toks[0], toks[-1])
            if key + (lo, 1) in k and key + (hi, 1) in k and hi > lo:
                s = math.log(k[key + (hi, 1)]["time_us"] / k[key + (lo, 1)]["time_us"]) / \
                    math.log(hi / lo)
                line += f" {s:.2f} |"
            else:
                line += " - |"
            for t in big:
                if key + (t, 1) in k and key + (t, nmax) in k and nmax > 1:
                    line += f" {k[key + (t, 1)]['time_us'] / k[key + (t, nmax)]['time_us']:.2f} |"
                else:
                    line += " - |"
            w(line)
        w("")
        if "thread_scaling.png" in made:
            w("![thread scaling](perf/thread_scaling.png)\n")

    if per_target:
        quantizers_per_target(w, per_target)

    if comp and comp["rows"]:
        rows = comp["rows"]
        w("## Side by side with the alternatives\n")
        w("Median time per call through each library's Python API. In brackets: time relative "
          "to kvscatter on 1 thread (above 1: slower than kvscatter). A dagger marks an "
          "alternative whose caches were *not* byte-identical to kvscatter's.\n")
        w("- **kvscatter, 1 thread / all threads**: the Python package on NumPy arrays; the "
          "`paged_kv_write`, `paged_cache_gather` and `paged_latent_write` rows call "
          "`kvscatter.vllm.reshape_and_cache_flash`, `gather_and_maybe_dequant_cache` and "
          "`concat_and_cache_mla` with vLLM's arguments (`kv_cache_dtype` \"auto\" for copy, "
          "\"fp8\" for fp8_e4m3), under the ids of the native operators they adapt.")
        w(f"- **{TORCH_OPS}**: the native PyTorch operator on torch tensors "
          "(`torch.ops.kvscatter.<op>`, the vLLM names for the vLLM rows); "
          f"**{KVS_JAX}**: the JAX custom call under `jax.jit` with the caches donated "
          "(`kv_cache_update` with its default `method=\"auto\"`, which leaves updates under 4 MiB "
          "of new rows to XLA's own in-place `dynamic_update_slice`).")
        w("- **NumPy**: fancy-index assignment (`cache[slots] = rows`, `cache[block, offset] = "
          "rows` on strided views), `np.take` for `gather_pa_kv_cache`, advanced-index reads for "
          "`paged_cache_gather`, the quantizers vectorized in NumPy.")
        w("- **JAX**: `.at[slots].set` (`lax.dynamic_update_slice` for `kv_cache_update`) and "
          "`jnp.take`, jit-compiled with the caches (or the gather's outputs) donated.")
        w("- **PyTorch**: `index_copy_` for the scatters and `kv_cache_update`; "
          "`index_select(out=)` for `gather_pa_kv_cache`; the eager quantizer then `index_copy_` "
          "for `kv_compress_epilog` and `indexer_quant_cache`; advanced-index assignment for "
          "`scatter_pa_kv_cache_with_k_scale`; for the vLLM-compatible operators the reference "
          "of vLLM's tests/kernels/attention/test_cache.py: `cache[block, offset] = rows` "
          "(`torch.cat([kv_c, k_pe], -1)` for the latent rows), fp8 as `(x.float() / scale)"
          ".clamp(-448, 448).to(torch.float8_e4m3fn)`, dequantization as `code.float() * "
          f"scale` rounded to bfloat16. **{INDEX_PUT}**: `cache[slots] = rows` through "
          f"`index_put_`. **{ADV_INDEX}**: `key[:n] = cache_rows[slots]`.")
        w("- Padding tokens (slot -1) are dropped first where the alternative has no skip form.\n")
        if native:
            nk = by_key(native["rows"], "op", "variant", "shape", "tokens", "threads")
            extra = sorted(r["time_us"] - nk[(r["op"], r["variant"], r["shape"], 1, 1)]["time_us"]
                           for r in rows if r["impl"] == KVS1 and r["tokens"] == 1
                           and (r["op"], r["variant"], r["shape"], 1, 1) in nk)
            if extra:
                w(f"At 1 token a call through the Python package costs {extra[0]:.1f} to "
                  f"{extra[-1]:.1f} us more than the same call from C++ (median "
                  f"{statistics.median(extra):.1f} us over the workloads): the binding's "
                  "per-call cost, not the kernel's, decides decode-size calls from Python.\n")
        if "speedup.png" in made:
            w("![speedup over each alternative](perf/speedup.png)\n")
        for i in ordered_ids(rows):
            sub = [r for r in rows if r["id"] == i]
            k = by_key(sub, "tokens", "impl")
            impls = list(dict.fromkeys(r["impl"] for r in sub))
            w(f"### `{i}`\n")
            w("| tokens | " + " | ".join(impls) + " |")
            w("|---|" + "---|" * len(impls))
            for t in sorted({r["tokens"] for r in sub}):
                base = k[(t, KVS1)]["time_us"] if (t, KVS1) in k else None
                cells = []
                for name in impls:
                    r = k.get((t, name))
                    if not r:
                        cells.append("")
                        continue
                    c = fmt_us(r["time_us"])
                    if base and name != KVS1:
                        c += f" ({r['time_us'] / base:.1f}x)"
                    if not r["verified"]:
                        c += " †"
                    cells.append(c)
                w(f"| {t:,} | " + " | ".join(cells) + " |")
            w("")

    w("## Regression guard\n")
    w("`kvscatter bench --quick` (under a minute) sweeps 1, 64 and 4,096 tokens and exits with "
      "status 1 when a target's ratio to memcpy falls below its floor (half the target, or a "
      "third of the present speed where the target is not reached yet; never an absolute "
      "time). A target under its floor is measured twice more before it counts. CTest runs it "
      "under the `perf` label, outside the default presets: "
      "`ctest --test-dir build/release -L perf`.\n")
    return "\n".join(L)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help=f"token counts {QUICK_TOKENS}, short batches: checks the script itself")
    p.add_argument("--out", default=str(ROOT / "docs"),
                   help="directory for performance.md and perf/*.png (default: docs/)")
    p.add_argument("--cli", help="the kvscatter program (default: build/*/tools/kvscatter)")
    p.add_argument("--cli-json", help="use this `kvscatter bench --json` output, skip the sweep")
    p.add_argument("--no-cli", action="store_true", help="skip the native sweep")
    p.add_argument("--render-only", action="store_true",
                   help="re-render the report and plots from OUT/perf/compare.json (after "
                        "editing bench/performance_notes.md), measuring nothing")
    p.add_argument("--tokens", help="comma-separated token counts for the side-by-side runs")
    p.add_argument("--ops", help="comma-separated filters on 'op variant shape'")
    p.add_argument("--no-plots", action="store_true",
                   help="write the report without its plots (no matplotlib needed)")
    args = p.parse_args(argv)
    start = time.time()
    warnings.filterwarnings("ignore")
    out = pathlib.Path(args.out)

    def log(msg):
        print(msg, flush=True)

    if args.render_only:
        saved = json.loads((out / "perf" / "compare.json").read_text())
        made = [] if args.no_plots else plots(saved["native"], saved["compare"], out / "perf")
        text = report(saved["native"], saved["meta"].get("cli_info", ""), saved["compare"],
                      saved["meta"], made, out, saved.get("per_target"))
        (out / "performance.md").write_text(text)
        log(f"re-rendered {out / 'performance.md'} and {len(made)} plots")
        return 0
    ops = args.ops.split(",") if args.ops else None
    native, cli_info, per_target = None, "", None
    if args.cli_json:
        native = json.loads(pathlib.Path(args.cli_json).read_text())
    elif not args.no_cli:
        cli = find_cli(args.cli)
        if cli:
            native, cli_info = run_cli(cli, args.quick, ops, log)
            if not ops:
                per_target = run_cli_per_target(cli, args.quick, log)
        else:
            log("kvscatter program not found (build it or pass --cli): no native sweep")
    cores = len(os.sched_getaffinity(0))
    tokens = [int(t) for t in args.tokens.split(",")] if args.tokens else (
        QUICK_TOKENS if args.quick else FULL_TOKENS)
    comp = compare(tokens, 3 if args.quick else 5, 0.001 if args.quick else 0.005, cores, ops,
                   log)
    versions = {"Python": platform.python_version(), "kvscatter (Python)": kvscatter.__version__,
                "NumPy": np.__version__, "ml_dtypes": ml_dtypes.__version__,
                "JAX": available("jax"), "jaxlib": available("jaxlib"),
                "PyTorch": available("torch"), "matplotlib": available("matplotlib")}
    made = [] if args.no_plots else plots(native, comp, out / "perf")
    meta = {"machine": machine(), "versions": versions,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "wall_min": (time.time() - start) / 60, "cli_info": cli_info}
    text = report(native, cli_info, comp, meta, made, out, per_target)
    (out / "perf").mkdir(parents=True, exist_ok=True)
    (out / "performance.md").write_text(text)
    (out / "perf" / "compare.json").write_text(json.dumps(
        {"native": native, "compare": comp, "meta": meta, "per_target": per_target}))
    log(f"wrote {out / 'performance.md'} and {len(made)} plots in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
