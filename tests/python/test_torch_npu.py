"""kvscatter.torch_npu: code written for torch_npu (and vLLM-Ascend) runs unchanged on the CPU."""

import inspect

import kvscatter
import ml_dtypes
import numpy as np
import pytest
import refs
from needs import need

torch = need("torch")
import kvscatter.torch_npu as torch_npu  # noqa: E402


def nz_golden(key, key_cache, slots):
    """torch_npu's test golden for PA_NZ: each token's [N * D] row, cut into 32-byte lanes,
    lands at (block, :, offset, :); negative slots are skipped."""
    out = key_cache.clone()
    _, _, bs, lanes = key_cache.shape
    for t, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        out[s // bs, :, s % bs, :] = key[t].reshape(-1, lanes)
    return out


def test_upstream_signatures_and_defaults():
    sig = inspect.signature(torch_npu.npu_scatter_pa_kv_cache)
    assert list(sig.parameters)[:5] == ["key", "value", "key_cache", "value_cache", "slot_mapping"]
    assert sig.parameters["cache_mode"].default == "PA_NZ"
    assert sig.parameters["cache_mode"].kind is inspect.Parameter.KEYWORD_ONLY
    for name in ("compress_lens", "compress_seq_offsets", "seq_lens"):
        assert sig.parameters[name].default is None
    sig = inspect.signature(torch_npu.kv_compress_epilog)
    assert {k: p.default for k, p in sig.parameters.items() if p.kind is p.KEYWORD_ONLY} == {
        "quant_group_size": 64, "quant_mode": "fp8_e8m0", "round_scale": True, "x_scale": 1.0}
    sig = inspect.signature(torch_npu.scatter_pa_kv_cache_with_k_scale)
    assert sig.parameters["cache_layout"].default == "BNBD"
    assert kvscatter.npu_scatter_pa_kv_cache is torch_npu.npu_scatter_pa_kv_cache
    sig = inspect.signature(torch_npu.npu_gather_pa_kv_cache)
    assert list(sig.parameters) == ["key_cache", "value_cache", "block_tables", "seq_lens", "key",
                                    "value", "seq_offset", "is_seq_lens_cumsum", "cache_mode"]
    assert sig.parameters["is_seq_lens_cumsum"].default is False
    assert sig.parameters["cache_mode"].default == "Norm"
    sig = inspect.signature(torch_npu.npu_scatter_pa_cache)
    assert list(sig.parameters)[:2] == ["key", "slot_mapping"]
    assert sig.parameters["key_cache"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.parameters["key_cache"].default is inspect.Parameter.empty
    assert sig.parameters["compress_seq_offset"].default is None
    sig = inspect.signature(torch_npu.indexer_quant_cache)
    assert list(sig.parameters)[:4] == ["cache", "cache_scale", "x", "slot_mapping"]
    assert {k: p.default for k, p in sig.parameters.items() if p.kind is p.KEYWORD_ONLY} == {
        "quant_mode": "fp8", "round_scale": True, "x_scale": 1.0, "dtype": None}


def test_npu_scatter_pa_cache_upstream_call_forms():
    # vLLM-Ascend's call: slot_mapping second, key_cache by keyword.
    key = torch.randn(3, 1, 16).to(torch.bfloat16)
    cache = torch.zeros(2, 4, 1, 16, dtype=torch.bfloat16)
    torch_npu.npu_scatter_pa_cache(key, torch.tensor([6, -1, 0], dtype=torch.int32), key_cache=cache)
    assert torch.equal(cache[1, 2, 0], key[0, 0]) and torch.equal(cache[0, 0, 0], key[2, 0])
    assert cache[1, 3].eq(0).all()
    # ReduceMean with either spelling of the offsets, the same bytes as kvscatter.scatter_pa_cache.
    key4 = torch.randn(1, 5, 1, 4).half()
    kw = {"compress_lens": torch.tensor([[2]]), "seq_lens": torch.tensor([5])}
    want = torch.zeros(2, 4, 1, 4).half()
    kvscatter.scatter_pa_cache(key4, want, torch.tensor([[4]]), compress_seq_offsets=torch.tensor([1]), **kw)
    for name in ("compress_seq_offset", "compress_seq_offsets"):
        got = torch.zeros(2, 4, 1, 4).half()
        torch_npu.npu_scatter_pa_cache(key4, torch.tensor([[4]]), key_cache=got,
                                       **{name: torch.tensor([1])}, **kw)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    with pytest.raises(ValueError, match="not both"):
        torch_npu.npu_scatter_pa_cache(key4, torch.tensor([[4]]), key_cache=got, **kw,
                                       compress_seq_offset=torch.tensor([1]),
                                       compress_seq_offsets=torch.tensor([1]))
    before = cache.clone()
    with pytest.raises(ValueError, match=r"slot_mapping\[0\] = 8"):
        torch_npu.npu_scatter_pa_cache(key, torch.tensor([8, 0, 1]), key_cache=cache)
    assert torch.equal(cache.view(torch.int16), before.view(torch.int16))


@pytest.mark.parametrize("mode", ["fp8", 0, "HIFLOAT8", "mxfp4"])
def test_indexer_quant_cache_matches_the_numpy_path(mode):
    x = (torch.randn(2, 64) * 3).to(torch.bfloat16)
    fp4 = mode == "mxfp4"
    mx = mode in (0, "mxfp4")
    cache = torch.zeros(1, 4, 1, 32 if fp4 else 64,
                        dtype=torch.uint8 if fp4 or mode == "HIFLOAT8" else torch.float8_e4m3fn)
    scale = torch.zeros(1, 4, 1, 2, dtype=torch.uint8) if mx else torch.zeros(1, 4, 1, 1)
    kw = {"quant_mode": mode, "dtype": "float4_e2m1" if fp4 else None}
    slots = torch.tensor([3, 1])
    torch_npu.indexer_quant_cache(cache, scale, x, slots, **kw)
    want_c = np.zeros(tuple(cache.shape), np.uint8)
    want_s = np.zeros(tuple(scale.shape), np.uint8 if mx else np.float32)
    if cache.dtype == torch.float8_e4m3fn:
        want_c = want_c.view(ml_dtypes.float8_e4m3fn)
    kvscatter.indexer_quant_cache(want_c, want_s, x.view(torch.int16).numpy().view(ml_dtypes.bfloat16),
                                  slots.numpy(), **kw)
    np.testing.assert_array_equal(cache.view(torch.uint8).numpy(), want_c.view(np.uint8))
    np.testing.assert_array_equal(scale.numpy(), want_s)
    assert cache.view(torch.uint8)[0, 3].any()


def test_gather_round_trips_a_scatter():
    kc = torch.zeros(4, 8, 2, 16, dtype=torch.bfloat16)
    vc = torch.zeros_like(kc)
    key = torch.randn(5, 2, 16).to(torch.bfloat16)
    blocks = torch.tensor([[3, 1]], dtype=torch.int32)
    slots = torch.tensor([24, 25, 26, 27, 28], dtype=torch.int32)  # block 3, offsets 0..4
    torch_npu.npu_scatter_pa_kv_cache(key, key, kc, vc, slots, cache_mode="Norm")
    out_k, out_v = torch.zeros_like(key), torch.zeros_like(key)
    torch_npu.npu_gather_pa_kv_cache(kc, vc, blocks, torch.tensor([5], dtype=torch.int32), out_k, out_v)
    assert torch.equal(out_k, key) and torch.equal(out_v, key)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8])
def test_torch_npu_test_style_nz_call(dtype):
    # As torch_npu's own test calls it: NZ-shaped caches, int32 unique slots, no cache_mode.
    g = torch.Generator().manual_seed(5)
    tokens, heads, k_size, v_size, blocks, bs = 9, 4, 32, 64, 5, 16
    lanes = 32 // torch.empty((), dtype=dtype).element_size()
    key = torch.randint(-100, 100, (tokens, heads, k_size), generator=g).to(dtype)
    value = torch.randint(-100, 100, (tokens, heads, v_size), generator=g).to(dtype)
    key_cache = torch.randint(-100, 100, (blocks, heads * k_size // lanes, bs, lanes), generator=g).to(dtype)
    value_cache = torch.randint(-100, 100, (blocks, heads * v_size // lanes, bs, lanes), generator=g).to(dtype)
    slots = torch.randperm(blocks * bs, generator=g)[:tokens].to(torch.int32)
    want_k, want_v = nz_golden(key, key_cache, slots), nz_golden(value, value_cache, slots)
    torch_npu.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slots)
    assert torch.equal(key_cache, want_k) and torch.equal(value_cache, want_v)
    # The top-level alias has the same default.
    key_cache2 = torch.zeros_like(key_cache)
    kvscatter.npu_scatter_pa_kv_cache(key, value, key_cache2, torch.zeros_like(value_cache), slots)
    assert torch.equal(key_cache2, nz_golden(key, torch.zeros_like(key_cache), slots))


def test_nz_default_rejects_norm_shaped_caches():
    kc = torch.zeros(4, 8, 2, 16, dtype=torch.float16)  # [blocks, block_size, heads, head_size]
    key = torch.ones(1, 2, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="key_cache"):
        torch_npu.npu_scatter_pa_kv_cache(key, key, kc, kc.clone(), torch.tensor([1], dtype=torch.int32))
    assert kc.eq(0).all()


def test_vllm_ascend_style_decode_loop():
    # As vLLM-Ascend writes each layer's KV: keyword arguments, cache_mode="Norm" explicitly,
    # int32 slot mappings; a prefill of two sequences, then decode steps.
    layers, heads, head, bs, blocks = 3, 2, 64, 16, 8
    g = torch.Generator().manual_seed(11)
    caches = [(torch.zeros(blocks, bs, heads, head, dtype=torch.bfloat16),
               torch.zeros(blocks, bs, heads, head, dtype=torch.bfloat16)) for _ in range(layers)]
    want = [(k.clone(), v.clone()) for k, v in caches]
    block_tables = [[2, 5], [0, 7]]  # each sequence's blocks
    lengths = [20, 3]

    def slot(seq, pos):
        return block_tables[seq][pos // bs] * bs + pos % bs

    steps = [[slot(0, p) for p in range(20)] + [slot(1, p) for p in range(3)]]
    for i in range(5):
        steps.append([slot(0, lengths[0] + i), slot(1, lengths[1] + i), -1, -1])  # 2 padding
    for step in steps:
        slot_mapping = torch.tensor(step, dtype=torch.int32)
        for layer in range(layers):
            key = torch.randn(len(step), heads, head, generator=g).to(torch.bfloat16)
            value = torch.randn(len(step), heads, head, generator=g).to(torch.bfloat16)
            kc, vc = caches[layer]
            torch_npu.npu_scatter_pa_kv_cache(key=key, value=value, key_cache=kc, value_cache=vc,
                                              slot_mapping=slot_mapping, cache_mode="Norm")
            wk, wv = want[layer]
            for t, s in enumerate(step):
                if s >= 0:
                    wk.view(-1, heads, head)[s] = key[t]
                    wv.view(-1, heads, head)[s] = value[t]
    for (k, v), (wk, wv) in zip(caches, want):
        assert torch.equal(k.view(torch.int16), wk.view(torch.int16))
        assert torch.equal(v.view(torch.int16), wv.view(torch.int16))


def test_functional_variant_leaves_inputs_untouched():
    kc = torch.zeros(2, 4, 1, 8)[:, :, :, :]
    vc = torch.zeros(2, 4, 1, 8)
    k2, v2 = torch_npu.npu_scatter_pa_kv_cache_functional(
        torch.ones(1, 1, 8), 2 * torch.ones(1, 1, 8), kc, vc, torch.tensor([5]), cache_mode="Norm")
    assert kc.eq(0).all() and vc.eq(0).all()
    assert k2[1, 1].eq(1).all() and v2[1, 1].eq(2).all() and k2.is_contiguous()


def test_cann_ops_transformer_entry_points():
    x = torch.randn(3, 128).to(torch.bfloat16)
    cache = torch.zeros(2, 2, 1, 224, dtype=torch.uint8)
    slots = torch.tensor([1, -1, 2], dtype=torch.int32)
    want = refs.kv_compress_epilog(cache.numpy(), x.view(torch.int16).numpy().view(ml_dtypes.bfloat16),
                                   slots.numpy(), quant_mode=0)
    torch_npu.kv_compress_epilog(cache, x, slots, quant_mode="fp8_bf16")
    np.testing.assert_array_equal(cache.numpy(), want)
    assert cache[0, 1].any() and not cache[0, 0].any()

    f8 = torch.float8_e5m2
    key = torch.randn(2, 2, 8).to(f8)
    kc, vc = torch.zeros(2, 2, 4, 8, dtype=f8), torch.zeros(2, 2, 4, 8, dtype=f8)
    ksc = torch.zeros(2, 2, 4, 1)
    scales = torch.randn(2, 2)
    torch_npu.scatter_pa_kv_cache_with_k_scale(key, key, kc, vc, torch.tensor([6, 99]), scales, ksc)
    assert torch.equal(kc[1, :, 2].view(torch.uint8), key[0].view(torch.uint8))
    assert torch.equal(ksc[1, :, 2, 0], scales[0]) and ksc.count_nonzero() == 2  # slot 99 skipped


def test_numpy_arrays_work_too():
    kc = np.zeros((2, 1, 16, 16), np.float16)  # NZ, 1 head of 16
    key = np.arange(16, dtype=np.float16).reshape(1, 1, 16)
    torch_npu.npu_scatter_pa_kv_cache(key, key, kc, kc.copy(), np.array([3], np.int32))
    np.testing.assert_array_equal(kc[0, 0, 3], key[0, 0])
