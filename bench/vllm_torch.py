"""kvscatter.vllm against the eager PyTorch formulation of vLLM's tests, side by side.

    PYTHONPATH=... python3 bench/vllm_torch.py [--tokens 4096] [--threads 1]

For each operator: the eager PyTorch code vLLM's tests/kernels/attention/test_cache.py uses as
its reference (index assignment into the cache view, torch's float8 conversion), the kvscatter
call, and ``copy_`` of the same bytes, all on the same tensors in the same run; prints the best
time of each and the ratios, and checks that both write the same bytes.
"""

from __future__ import annotations

import argparse
import time

import torch

import kvscatter
from kvscatter import vllm


def best(fn, reps=7):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def memcpy_time(nbytes):
    a = torch.empty(nbytes, dtype=torch.uint8).fill_(1)
    b = torch.empty_like(a)
    return best(lambda: b.copy_(a))


def flash_case(tokens, fp8, hnd, heads=8, head_size=128, block_size=128):
    g = torch.Generator().manual_seed(0)
    num_blocks = max(64, tokens // block_size + 1)
    qkv = torch.randn(tokens, 3, heads, head_size, generator=g).to(torch.bfloat16)
    key, value = qkv[:, 1], qkv[:, 2]
    slots = torch.randperm(num_blocks * block_size, generator=g)[:tokens]
    dt = torch.uint8 if fp8 else torch.bfloat16
    shape = (num_blocks, 2, heads, block_size, head_size) if hnd else (
        num_blocks, 2, block_size, heads, head_size)
    kv = torch.zeros(shape, dtype=dt)
    view = kv.permute(0, 1, 3, 2, 4) if hnd else kv
    kc, vc = view[:, 0], view[:, 1]
    ks = torch.tensor([0.05], dtype=torch.float32)
    vs = torch.tensor([0.07], dtype=torch.float32)
    blk, off = slots // block_size, slots % block_size
    ref = torch.zeros_like(kv)
    rview = ref.permute(0, 1, 3, 2, 4) if hnd else ref

    def eager():
        if fp8:
            rview[:, 0][blk, off] = (key.float() / ks).clamp(-448, 448).to(
                torch.float8_e4m3fn).view(torch.uint8)
            rview[:, 1][blk, off] = (value.float() / vs).clamp(-448, 448).to(
                torch.float8_e4m3fn).view(torch.uint8)
        else:
            rview[:, 0][blk, off] = key
            rview[:, 1][blk, off] = value

    def ours():
        vllm.reshape_and_cache_flash(key, value, kc, vc, slots, "fp8" if fp8 else "auto", ks, vs)

    traffic = 2 * tokens * heads * head_size * (2 + (1 if fp8 else 2))
    name = f"reshape_and_cache_flash {'fp8' if fp8 else 'auto'} {'HND' if hnd else 'NHD'}"
    return name, eager, ours, lambda: torch.equal(kv, ref), traffic


def gather_case(tokens, fp8, entry=576, block_size=64, seqs=8):
    g = torch.Generator().manual_seed(1)
    per_seq = tokens // seqs
    cols = (per_seq + block_size - 1) // block_size
    num_blocks = seqs * cols + 4
    if fp8:
        src = (torch.randint(0, 256, (num_blocks, block_size, entry), generator=g) & 0xBF).to(
            torch.uint8)
    else:
        src = torch.randn(num_blocks, block_size, entry, generator=g).to(torch.bfloat16)
    table = torch.randperm(num_blocks, generator=g)[: seqs * cols].reshape(seqs, cols).int()
    cu = torch.arange(seqs + 1, dtype=torch.int32) * per_seq
    token_to_seq = torch.repeat_interleave(torch.arange(seqs, dtype=torch.int32), per_seq)
    n = seqs * per_seq
    dst = torch.zeros(n, entry, dtype=torch.bfloat16)
    ref = torch.zeros_like(dst)
    scale = torch.tensor([0.25], dtype=torch.float32)
    pos = torch.arange(n) - cu[token_to_seq.long()].long()
    blk = table[token_to_seq.long(), pos // block_size].long()
    off = pos % block_size

    def eager():
        rows = src[blk, off]
        if fp8:
            ref.copy_((rows.view(torch.float8_e4m3fn).float() * scale).to(torch.bfloat16))
        else:
            ref.copy_(rows)

    def ours():
        vllm.gather_and_maybe_dequant_cache(src, dst, table, cu, token_to_seq, n,
                                            "fp8" if fp8 else "auto", scale)

    traffic = n * entry * ((1 if fp8 else 2) + 2)
    name = f"gather_and_maybe_dequant_cache {'fp8' if fp8 else 'auto'}"
    return name, eager, ours, lambda: torch.equal(dst.view(torch.int16), ref.view(torch.int16)), traffic


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    kvscatter.set_num_threads(args.threads)
    print(f"{args.tokens} tokens, {args.threads} thread(s); times are the best of 7 calls")
    print(f"{'operator':44s} {'eager torch':>12s} {'kvscatter':>10s} {'speedup':>8s} "
          f"{'x memcpy':>9s}  same bytes")
    cases = [flash_case(args.tokens, fp8, hnd) for fp8 in (False, True) for hnd in (False, True)]
    cases += [gather_case(args.tokens, fp8) for fp8 in (False, True)]
    for name, eager, ours, same, traffic in cases:
        te, to = best(eager), best(ours)
        tm = memcpy_time(traffic // 2)
        print(f"{name:44s} {te * 1e3:10.3f}ms {to * 1e3:8.3f}ms {te / to:8.2f} {tm / to:9.3f}  "
              f"{same()}")


if __name__ == "__main__":
    main()
