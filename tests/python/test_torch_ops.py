"""torch.ops.kvscatter: schemas, fake kernels (opcheck), torch.compile, errors and devices."""

import kvscatter
import ml_dtypes
import numpy as np
import pytest
import refs
from needs import need

torch = need("torch")
need("kvscatter.torch")  # in CI a build without the operators fails here
import kvscatter.torch  # noqa: E402
import kvscatter.vllm  # noqa: E402

ops = torch.ops.kvscatter


def as_numpy(t):
    """A copy as NumPy (bfloat16 and float8 through their bits)."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn).copy()
    return t.numpy().copy()


def same_bytes(a, b):
    a = a.contiguous().view(torch.uint8) if a.element_size() == 1 else a.contiguous().view(torch.int16 if a.element_size() == 2 else torch.int32)
    b = b.contiguous().view(a.dtype)
    return torch.equal(a, b)


def randn(*shape, dtype=torch.bfloat16, gen=None):
    return torch.randn(*shape, generator=gen).to(dtype)


# ---- sample calls, one list per operator: (args, kwargs) ------------------------------------

def scatter_samples():
    g = torch.Generator().manual_seed(1)
    out = []
    # Norm, key and value, int64 slots with padding.
    out.append(((randn(5, 2, 16, gen=g), randn(5, 2, 8, gen=g), randn(4, 8, 2, 16, gen=g),
                 randn(4, 8, 2, 8, gen=g), torch.tensor([3, -1, 31, 0, 9])), {"cache_mode": "Norm"}))
    # Key only, int32 slots.
    out.append(((randn(3, 1, 32, gen=g), None, torch.zeros(2, 4, 1, 32, dtype=torch.bfloat16), None,
                 torch.tensor([7, 0, -1], dtype=torch.int32)), {}))
    # PA_NZ: [num_blocks, heads * head_size / 16, block_size, 16] for 2-byte elements.
    out.append(((randn(4, 2, 32, gen=g), randn(4, 2, 32, gen=g),
                 torch.zeros(3, 4, 16, 16, dtype=torch.bfloat16),
                 torch.zeros(3, 4, 16, 16, dtype=torch.bfloat16),
                 torch.tensor([0, 17, -1, 47])), {"cache_mode": "PA_NZ"}))
    return out


def with_k_scale_samples():
    # float8 data travels as its uint8 bits with dtype= (opcheck's value comparisons have no
    # float8 kernels); test_torch.py passes real float8 tensors.
    g = torch.Generator().manual_seed(2)
    f8 = torch.float8_e4m3fn
    key = randn(3, 2, 16, dtype=f8, gen=g).view(torch.uint8)
    value = randn(3, 2, 8, dtype=f8, gen=g).view(torch.uint8)
    kc, vc = torch.zeros(2, 2, 4, 16, dtype=torch.uint8), torch.zeros(2, 2, 4, 8, dtype=torch.uint8)
    return [((key, value, kc, vc, torch.tensor([5, -1, 2]), torch.randn(3, 2, generator=g),
              torch.zeros(2, 2, 4, 1)), {"dtype": "float8_e4m3fn"})]


def epilog_samples():
    g = torch.Generator().manual_seed(3)
    out = []
    for mode in (0, 1, 2):
        gs = 64 if mode < 2 else 32
        _, row_bytes = refs.epilog_row_bytes(192, mode, gs)
        out.append(((torch.zeros(2, 4, 1, row_bytes, dtype=torch.uint8), randn(3, 192, gen=g),
                     torch.tensor([6, -1, 1], dtype=torch.int32)),
                    {"quant_group_size": gs, "quant_mode": str(mode), "round_scale": mode != 1,
                     "x_scale": 0.5}))
    return out


def update_samples():
    g = torch.Generator().manual_seed(4)
    return [((torch.zeros(2, 16, 2, 8, dtype=torch.bfloat16),
              torch.zeros(2, 16, 2, 8, dtype=torch.bfloat16), torch.randn(2, 3, 2, 8, generator=g),
              torch.randn(2, 3, 2, 8, generator=g), 5), {})]


def gather_samples():
    g = torch.Generator().manual_seed(5)
    out = []
    # Norm, key and value of different head sizes, a padding block (-1) read as zero rows, one
    # spare output row that keeps its contents.
    out.append(((randn(4, 2, 2, 8, gen=g), randn(4, 2, 2, 4, gen=g),
                 torch.tensor([[2, 0], [-1, 3]], dtype=torch.int32),
                 torch.tensor([3, 2], dtype=torch.int32), randn(6, 2, 8, gen=g),
                 randn(6, 2, 4, gen=g)), {}))
    # Key only, int64 prefix sums and a seq_offset that skips one block.
    out.append(((torch.randn(3, 4, 1, 16, generator=g), None, torch.tensor([[0, 2], [1, 0]]),
                 torch.tensor([0, 3, 5]), torch.zeros(5, 1, 16), None),
                {"seq_offset": torch.tensor([4, 1]), "is_seq_lens_cumsum": True,
                 "cache_mode": "Norm"}))
    return out


def scatter_pa_cache_samples():
    g = torch.Generator().manual_seed(6)
    out = []
    # Plain, padding slot.
    out.append(((randn(3, 2, 16, gen=g), torch.zeros(2, 4, 2, 16, dtype=torch.bfloat16),
                 torch.tensor([5, -1, 0])), {}))
    # Packed FP4 as bytes.
    out.append(((torch.randint(0, 256, (2, 1, 8), dtype=torch.uint8, generator=g),
                 torch.zeros(2, 2, 1, 8, dtype=torch.uint8), torch.tensor([3, 0])),
                {"dtype": "float4_e2m1"}))
    # ReduceMean of a 4-D key.
    out.append(((torch.randn(1, 5, 1, 4, generator=g).half(), torch.zeros(2, 4, 1, 4).half(),
                 torch.tensor([[4]]), ),
                {"compress_lens": torch.tensor([[2]]), "compress_seq_offsets": torch.tensor([1]),
                 "seq_lens": torch.tensor([5])}))
    return out


def indexer_samples():
    # float8 and E8M0 caches travel as uint8 (opcheck compares bytes through uint8 kernels).
    g = torch.Generator().manual_seed(7)
    out = []
    x = torch.randn(3, 64, generator=g).half()
    slots = torch.tensor([6, -1, 1], dtype=torch.int32)
    u8 = torch.uint8
    out.append(((torch.zeros(2, 4, 1, 64, dtype=u8), torch.zeros(2, 4, 1, 1), x, slots),
                {"quant_mode": "fp8", "dtype": "float8_e4m3fn"}))
    out.append(((torch.zeros(2, 4, 1, 64, dtype=u8), torch.zeros(2, 4, 1, 2, dtype=u8),
                 x.bfloat16(), slots), {"quant_mode": "mxfp8", "dtype": "float8_e5m2"}))
    out.append(((torch.zeros(2, 4, 1, 64, dtype=u8), torch.zeros(2, 4, 1, 1), x, slots),
                {"quant_mode": "hifloat8", "x_scale": 0.5}))
    out.append(((torch.zeros(2, 4, 1, 32, dtype=u8), torch.zeros(2, 4, 1, 2, dtype=u8), x,
                 slots), {"quant_mode": "mxfp4", "dtype": "float4_e2m1"}))
    return out


def paged_kv_write_samples():
    g = torch.Generator().manual_seed(8)
    out = []
    out.append(((randn(3, 2, 8, gen=g), randn(3, 2, 8, gen=g),
                 torch.zeros(2, 4, 2, 8, dtype=torch.bfloat16),
                 torch.zeros(2, 4, 2, 8, dtype=torch.bfloat16), torch.tensor([5, -1, 0])), {}))
    # fp8 codes in uint8 HND caches, per-head key scales.
    out.append(((torch.randn(3, 2, 8, generator=g), torch.randn(3, 2, 8, generator=g),
                 torch.zeros(2, 2, 4, 8, dtype=torch.uint8), torch.zeros(2, 2, 4, 8, dtype=torch.uint8),
                 torch.tensor([7, 2, -1], dtype=torch.int32)),
                {"format": "fp8_e4m3", "layout": "HND", "k_scale": torch.tensor([0.5, 0.25]),
                 "v_scale": torch.tensor([2.0, 1.0])}))
    return out


def paged_cache_gather_samples():
    g = torch.Generator().manual_seed(9)
    table = torch.tensor([[2, 0], [1, 0]], dtype=torch.int32)
    cu = torch.tensor([0, 3, 6], dtype=torch.int32)
    return [
        ((randn(3, 4, 2, 8, gen=g), randn(7, 2, 8, gen=g), table, cu), {}),
        ((torch.randint(0, 120, (3, 4, 16), dtype=torch.uint8, generator=g), torch.zeros(6, 16),
          table, cu), {"format": "fp8_e5m2", "scale": torch.tensor([0.5]),
                       "token_to_seq": torch.tensor([0, 0, 0, 1, 1, 1], dtype=torch.int32),
                       "num_tokens": 5, "seq_starts": torch.tensor([1, 2], dtype=torch.int32)}),
    ]


def paged_latent_write_samples():
    g = torch.Generator().manual_seed(10)
    return [
        ((randn(3, 16, gen=g), randn(3, 8, gen=g), torch.zeros(2, 4, 24, dtype=torch.bfloat16),
          torch.tensor([5, -1, 0])), {}),
        ((torch.randn(2, 16, generator=g), torch.randn(2, 8, generator=g),
          torch.zeros(2, 4, 24, dtype=torch.uint8), torch.tensor([1, 6])),
         {"format": "fp8_e4m3", "scale": torch.tensor([0.25])}),
    ]


def reshape_and_cache_flash_samples():
    out = []
    for (k, v, kc, vc, sm), kw in paged_kv_write_samples():
        dtype = "fp8_e4m3" if kw else "auto"
        out.append(((k, v, kc, vc, sm, dtype, kw.get("k_scale", torch.tensor([1.0])),
                     kw.get("v_scale", torch.tensor([1.0]))), {}))
    out[1] = ((*out[1][0][:2], out[1][0][2].permute(0, 2, 1, 3), out[1][0][3].permute(0, 2, 1, 3),
               *out[1][0][4:]), {})  # vLLM passes an HND cache as a permuted NHD view
    return out


def concat_and_cache_mla_samples():
    (c, p, cache, sm), _ = paged_latent_write_samples()[0]
    return [((c, p, cache, sm, "bfloat16", torch.tensor([1.0])), {})]


def gather_and_maybe_dequant_cache_samples():
    (src, dst, table, cu), _ = paged_cache_gather_samples()[0]
    return [((src, dst, table, cu, torch.tensor([0, 0, 0, 1, 1, 1], dtype=torch.int32), 6, "auto",
              torch.tensor([1.0])), {"seq_starts": torch.tensor([0, 1], dtype=torch.int32)})]


def cp_gather_cache_samples():
    (src, dst, table, cu), _ = paged_cache_gather_samples()[0]
    return [((src, dst, table, cu, 2), {}), ((src, dst.clone(), table, cu, 1),
                                             {"seq_starts": torch.tensor([2, 0], dtype=torch.int32)})]


SAMPLES = {
    "scatter_pa_kv_cache": scatter_samples,
    "scatter_pa_kv_cache_with_k_scale": with_k_scale_samples,
    "kv_compress_epilog": epilog_samples,
    "kv_cache_update": update_samples,
    "gather_pa_kv_cache": gather_samples,
    "scatter_pa_cache": scatter_pa_cache_samples,
    "indexer_quant_cache": indexer_samples,
    "paged_kv_write": paged_kv_write_samples,
    "paged_cache_gather": paged_cache_gather_samples,
    "paged_latent_write": paged_latent_write_samples,
    "reshape_and_cache_flash": reshape_and_cache_flash_samples,
    "concat_and_cache_mla": concat_and_cache_mla_samples,
    "gather_and_maybe_dequant_cache": gather_and_maybe_dequant_cache_samples,
    "cp_gather_cache": cp_gather_cache_samples,
}

# The package function of the same name on NumPy copies: the torch operator must write the same
# bytes.
NUMPY_PATH = {
    "gather_pa_kv_cache": kvscatter.gather_pa_kv_cache,
    "scatter_pa_cache": kvscatter.scatter_pa_cache,
    "indexer_quant_cache": kvscatter.indexer_quant_cache,
    "paged_kv_write": kvscatter.paged_kv_write,
    "paged_cache_gather": kvscatter.paged_cache_gather,
    "paged_latent_write": kvscatter.paged_latent_write,
    "reshape_and_cache_flash": kvscatter.vllm.reshape_and_cache_flash,
    "concat_and_cache_mla": kvscatter.vllm.concat_and_cache_mla,
    "gather_and_maybe_dequant_cache": kvscatter.vllm.gather_and_maybe_dequant_cache,
    "cp_gather_cache": kvscatter.vllm.cp_gather_cache,
}
# The binding each of them calls for arrays that are not torch tensors.
EXT_NAME = {"reshape_and_cache_flash": "paged_kv_write", "concat_and_cache_mla": "paged_latent_write",
            "gather_and_maybe_dequant_cache": "paged_cache_gather",
            "cp_gather_cache": "paged_cache_gather"}


def numpy_bits(t):
    return t.detach().contiguous().view(torch.uint8).numpy().copy()


def numpy_view_bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def to_numpy_arg(a):
    return as_numpy(a) if isinstance(a, torch.Tensor) else a


@pytest.mark.parametrize("name", sorted(NUMPY_PATH))
def test_new_operators_match_the_numpy_path(name):
    for args, kwargs in SAMPLES[name]():
        np_args = [to_numpy_arg(a) for a in args]
        np_kwargs = {k: to_numpy_arg(v) for k, v in kwargs.items()}
        NUMPY_PATH[name](*np_args, **np_kwargs)
        getattr(ops, name)(*args, **kwargs)
        for t, a in zip(args, np_args):
            if isinstance(t, torch.Tensor):
                np.testing.assert_array_equal(numpy_bits(t), numpy_view_bits(a))


def test_the_new_package_functions_route_torch_tensors(monkeypatch):
    for name in NUMPY_PATH:
        monkeypatch.setattr(kvscatter._ext, EXT_NAME.get(name, name),
                            lambda *a, name=name: pytest.fail(name))
        for args, kwargs in SAMPLES[name]():
            eager = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            getattr(ops, name)(*eager, **kwargs)
            NUMPY_PATH[name](*args, **kwargs)
            for e, a in zip(eager, args):
                if isinstance(a, torch.Tensor):
                    assert same_bytes(e, a), name


def test_every_operator_is_registered_and_sampled():
    assert set(kvscatter.torch.OPERATORS) == set(SAMPLES)
    for name in kvscatter.torch.OPERATORS:
        schema = str(getattr(ops, name).default._schema)
        assert schema.endswith("-> ()"), schema
        assert "(a!)" in schema


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_opcheck(name):
    for args, kwargs in SAMPLES[name]():
        torch.library.opcheck(getattr(ops, name).default, args, kwargs)


# ---- results against the NumPy references ------------------------------------------------

def test_scatter_matches_reference():
    for (key, value, kc, vc, slots), kwargs in scatter_samples():
        want = refs.scatter_pa_kv_cache(as_numpy(key), None if value is None else as_numpy(value),
                                        as_numpy(kc), None if vc is None else as_numpy(vc),
                                        slots.numpy(), cache_mode=kwargs.get("cache_mode", "Norm"))
        ops.scatter_pa_kv_cache(key, value, kc, vc, slots, **kwargs)
        np.testing.assert_array_equal(as_numpy(kc).view(np.uint16), want[0].view(np.uint16))
        if vc is not None:
            np.testing.assert_array_equal(as_numpy(vc).view(np.uint16), want[1].view(np.uint16))


def test_with_k_scale_matches_reference():
    (args, kwargs), = with_k_scale_samples()
    want = refs.scatter_pa_kv_cache_with_k_scale(*[as_numpy(a) for a in args])
    ops.scatter_pa_kv_cache_with_k_scale(*args, **kwargs)
    for got, w in zip(args[2:4] + args[6:7], want):
        np.testing.assert_array_equal(as_numpy(got).view(np.uint8), w.view(np.uint8))


def test_epilog_matches_reference():
    for (cache, x, slots), kw in epilog_samples():
        want = refs.kv_compress_epilog(cache.numpy(), as_numpy(x), slots.numpy(),
                                       quant_group_size=kw["quant_group_size"],
                                       quant_mode=int(kw["quant_mode"]),
                                       round_scale=kw["round_scale"], x_scale=kw["x_scale"])
        ops.kv_compress_epilog(cache, x, slots, **kw)
        np.testing.assert_array_equal(cache.numpy(), want)


def test_kv_cache_update_matches_slicing():
    (kc, vc, nk, nv, pos), _ = update_samples()[0]
    ops.kv_cache_update(kc, vc, nk, nv, pos)
    assert torch.equal(kc[:, pos:pos + 3], nk.to(torch.bfloat16))
    assert torch.equal(vc[:, pos:pos + 3], nv.to(torch.bfloat16))
    assert kc[:, :pos].eq(0).all() and kc[:, pos + 3:].eq(0).all()


def test_dtype_keyword_reinterprets_raw_bytes():
    codes = torch.randint(0, 256, (2, 1, 32), dtype=torch.uint8)
    kc = torch.zeros(2, 2, 1, 32, dtype=torch.uint8)
    ops.scatter_pa_kv_cache(codes, None, kc, None, torch.tensor([3, 0]), dtype="hifloat8")
    assert torch.equal(kc[1, 1], codes[0]) and torch.equal(kc[0, 0], codes[1])
    with pytest.raises(ValueError, match="unknown element type"):
        ops.scatter_pa_kv_cache(codes, None, kc, None, torch.tensor([3, 0]), dtype="fp9")


def test_inference_mode():
    with torch.inference_mode():
        for name, samples in SAMPLES.items():
            for args, kwargs in samples():
                before = [a.clone() for a in args if isinstance(a, torch.Tensor)]
                getattr(ops, name)(*args, **kwargs)
                after = [a for a in args if isinstance(a, torch.Tensor)]
                assert any(not torch.equal(b.view(torch.uint8) if b.element_size() == 1 else b,
                                           a.view(torch.uint8) if a.element_size() == 1 else a)
                           for b, a in zip(before, after)), name


def test_the_functions_take_the_native_path_for_torch_tensors(monkeypatch):
    calls = []
    real = kvscatter._ext.scatter_pa_kv_cache
    monkeypatch.setattr(kvscatter._ext, "scatter_pa_kv_cache", lambda *a: calls.append(a) or real(*a))
    kc = torch.zeros(2, 4, 1, 8)
    kvscatter.scatter_pa_kv_cache(torch.ones(1, 1, 8), None, kc, None, torch.tensor([5]))
    assert calls == [] and kc[1, 1].eq(1).all()
    kvscatter.scatter_pa_kv_cache(np.ones((1, 1, 8), np.float32), None, kc.numpy(), None, np.array([6]))
    assert len(calls) == 1 and kc[1, 2].eq(1).all()


# ---- errors ----------------------------------------------------------------------------------

def snapshot(tensors):
    return [t.clone() for t in tensors if isinstance(t, torch.Tensor)]


def unchanged(before, args):
    now = [t for t in args if isinstance(t, torch.Tensor)]
    return all(torch.equal(b.view(torch.uint8), a.view(torch.uint8)) if b.element_size() == 1
               else torch.equal(b, a) for b, a in zip(before, now))


ERROR_CASES = [
    # (operator, (args, kwargs) of its first sample -> bad (args, kwargs), expected message)
    ("scatter_pa_kv_cache", lambda a, k: (a[:4] + (torch.tensor([3, -1, 32, 0, 9]),), k),
     r"slot_mapping\[2\] = 32 is out of range"),
    ("scatter_pa_kv_cache", lambda a, k: (a[:4] + (a[4][:3],), k), "slot_mapping"),
    ("scatter_pa_kv_cache", lambda a, k: (a, {"cache_mode": "Foo"}), "Foo"),
    ("kv_cache_update", lambda a, k: (a[:4] + (14,), k), "position"),
    ("kv_compress_epilog", lambda a, k: (a, {**k, "quant_mode": "fp7"}), "fp7"),
    ("scatter_pa_kv_cache_with_k_scale", lambda a, k: (a[:6] + (torch.zeros(2, 2, 4, 2),), k),
     "key_scale_cache"),
    ("gather_pa_kv_cache", lambda a, k: (a[:2] + (torch.tensor([[2, 0], [4, 3]], dtype=torch.int32),)
                                         + a[3:], k), "block_tables"),
    ("gather_pa_kv_cache", lambda a, k: (a, {"cache_mode": "NZ"}), "NZ"),
    ("scatter_pa_cache", lambda a, k: (a[:2] + (torch.tensor([5, -1, 8]),), k),
     r"slot_mapping\[2\] = 8"),
    ("indexer_quant_cache", lambda a, k: (a[:3] + (torch.tensor([6, 8, 1], dtype=torch.int32),), k),
     "slot_mapping"),
    ("indexer_quant_cache", lambda a, k: (a, {**k, "quant_mode": "fp7"}), "fp7"),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(ERROR_CASES)])
def test_library_errors_raise_value_error_and_write_nothing(case):
    name, mutate, pattern = case
    args, kwargs = mutate(*SAMPLES[name]()[0])
    before = snapshot(args)
    with pytest.raises(ValueError, match=pattern):
        getattr(ops, name)(*args, **kwargs)
    assert unchanged(before, args)


def test_wrong_dtype_is_a_type_error():
    kc = torch.zeros(2, 4, 1, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match="key_cache: dtype Double is not supported by kvscatter"):
        ops.scatter_pa_kv_cache(torch.ones(1, 1, 8), None, kc, None, torch.tensor([0]))
    assert kc.eq(0).all()


def test_a_required_tensor_given_as_none_is_a_type_error():
    kc = torch.zeros(2, 4, 1, 8)
    with pytest.raises(TypeError, match="slot_mapping is required, got None"):
        ops.scatter_pa_kv_cache(torch.ones(1, 1, 8), None, kc, None, None)
    assert kc.eq(0).all()


def test_meta_tensors_are_refused():
    (key, value, kc, vc, slots), kwargs = scatter_samples()[0]
    before = snapshot([kc, vc])
    with pytest.raises(RuntimeError, match="kvscatter runs on CPU tensors.*meta"):
        ops.scatter_pa_kv_cache(key, value, kc.to("meta"), vc, slots, **kwargs)
    with pytest.raises(RuntimeError, match="kvscatter runs on CPU tensors.*meta"):
        ops.scatter_pa_kv_cache(*(t.to("meta") for t in (key, value, kc, vc, slots)), **kwargs)
    with pytest.raises(RuntimeError, match="kvscatter runs on CPU tensors"):
        kvscatter.kv_cache_update(torch.zeros(1, 4, 1, 2, device="meta"),
                                  torch.zeros(1, 4, 1, 2, device="meta"),
                                  torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2), 0)
    assert unchanged(before, [kc, vc])


# ---- torch.compile ----------------------------------------------------------------------------

LAYERS, HEADS, HEAD, BLOCK, BLOCKS = 3, 2, 16, 8, 6


def decode_step(keys, values, key_caches, value_caches, slots):
    for layer in range(LAYERS):
        # Each layer writes a different function of the step's keys, as attention layers do.
        ops.scatter_pa_kv_cache(keys * (layer + 1), values - layer, key_caches[layer],
                                value_caches[layer], slots, cache_mode="Norm")
    return key_caches[0][0, 0, 0, 0] + 1  # an output, so the graph is not empty of results


def run_steps(step, gen_seed):
    g = torch.Generator().manual_seed(gen_seed)
    kcs = [torch.zeros(BLOCKS, BLOCK, HEADS, HEAD, dtype=torch.bfloat16) for _ in range(LAYERS)]
    vcs = [torch.zeros(BLOCKS, BLOCK, HEADS, HEAD, dtype=torch.bfloat16) for _ in range(LAYERS)]
    # Prefill of two sequences (7 and 5 tokens) with two padding slots, then decode steps for
    # both sequences (batch of 4 slots, the last two padding).
    prefill = torch.tensor(list(range(0, 7)) + [-1] + list(range(16, 21)) + [-1])
    steps = [prefill] + [torch.tensor([7 + i, 21 + i, -1, -1]) for i in range(4)]
    for slots in steps:
        t = slots.numel()
        keys = torch.randn(t, HEADS, HEAD, generator=g).to(torch.bfloat16)
        values = torch.randn(t, HEADS, HEAD, generator=g).to(torch.bfloat16)
        step(keys, values, kcs, vcs, slots)
    return kcs, vcs


def test_compiled_decode_is_byte_identical_to_eager():
    torch._dynamo.reset()
    want = run_steps(decode_step, 7)
    compiled = torch.compile(decode_step, fullgraph=True)
    got = run_steps(compiled, 7)
    for w, gt in zip(want[0] + want[1], got[0] + got[1]):
        assert torch.equal(w.view(torch.int16), gt.view(torch.int16))
    assert any(c.ne(0).any() for c in got[0])


def test_compile_every_operator():
    torch._dynamo.reset()
    for name, samples in SAMPLES.items():
        for args, kwargs in samples():
            torch._dynamo.reset()  # one fresh compilation per sample, not recompiles of one lambda
            eager = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            getattr(ops, name)(*eager, **kwargs)
            fn = torch.compile(lambda *a: getattr(ops, name)(*a, **kwargs), fullgraph=True)
            fn(*args)
            for e, a in zip(eager, args):
                if isinstance(a, torch.Tensor):
                    assert same_bytes(e, a), name


def test_the_package_functions_compile_without_graph_breaks():
    torch._dynamo.reset()

    def step(k, kc, vc, slots):
        kvscatter.scatter_pa_kv_cache(k, k, kc, vc, slots)
        return kvscatter.kv_cache_update(kc.view(1, -1, 2, 16), vc.view(1, -1, 2, 16),
                                         k[:1].unsqueeze(0).float(), k[:1].unsqueeze(0).float(), 0)

    caches = [torch.zeros(4, 8, 2, 16, dtype=torch.bfloat16) for _ in range(4)]
    key = torch.randn(2, 2, 16).to(torch.bfloat16)
    slots = torch.tensor([3, 9])
    step(key, caches[0], caches[1], slots)
    torch.compile(step, fullgraph=True)(key, caches[2], caches[3], slots)
    assert torch.equal(caches[0].view(torch.int16), caches[2].view(torch.int16))
    assert torch.equal(caches[1].view(torch.int16), caches[3].view(torch.int16))
