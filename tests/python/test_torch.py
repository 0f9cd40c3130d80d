"""The kvscatter functions update PyTorch tensors in place (through torch.ops.kvscatter)."""

import kvscatter
import ml_dtypes
import numpy as np
import pytest
import refs
from needs import need

torch = need("torch")


def as_numpy(t):
    """A copy as NumPy (bfloat16 through its bits)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


def test_scatter_pa_kv_cache_in_place():
    g = torch.Generator().manual_seed(0)
    key = torch.randn(10, 2, 16, generator=g).to(torch.bfloat16)
    value = torch.randn(10, 2, 8, generator=g).to(torch.bfloat16)
    kc = torch.randn(4, 8, 2, 16, generator=g).to(torch.bfloat16)
    vc = torch.randn(4, 8, 2, 8, generator=g).to(torch.bfloat16)
    slots = torch.tensor([3, -1, 0, 31, 7, 8, 9, -1, 12, 30], dtype=torch.int64)
    want_k, want_v = refs.scatter_pa_kv_cache(as_numpy(key), as_numpy(value), as_numpy(kc),
                                              as_numpy(vc), slots.numpy())
    ptr = kc.data_ptr()
    kvscatter.npu_scatter_pa_kv_cache(key, value, kc, vc, slots, cache_mode="Norm")
    assert kc.data_ptr() == ptr
    np.testing.assert_array_equal(as_numpy(kc).view(np.uint16), want_k.view(np.uint16))
    np.testing.assert_array_equal(as_numpy(vc).view(np.uint16), want_v.view(np.uint16))


def test_strided_cache_view_in_place():
    big = torch.zeros(4, 10, 2, 16, dtype=torch.float16)
    kc = big[:, :8]  # strided along the block axis
    key = torch.randn(5, 2, 16).to(torch.float16)
    kvscatter.scatter_pa_kv_cache(key, None, kc, None, torch.tensor([0, 9, 17, 25, 31], dtype=torch.int32))
    assert torch.equal(big[1, 1], key[1]) and torch.equal(big[3, 7], key[4])
    assert big[:, 8:].eq(0).all()


def test_kv_cache_update_in_place():
    k = torch.zeros(2, 16, 4, 8, dtype=torch.bfloat16)
    v = torch.zeros_like(k)
    new = torch.randn(2, 3, 4, 8)
    out = kvscatter.kv_cache_update(k, v, new, -new, 4)
    assert out["key_cache"] is k and out["length"] == 7
    assert torch.equal(k[:, 4:7], new.to(torch.bfloat16))
    assert torch.equal(v[:, 4:7], (-new).to(torch.bfloat16))


def test_quant_ops_in_place():
    x = torch.randn(3, 128).to(torch.bfloat16)
    cache = torch.zeros(2, 2, 1, 224, dtype=torch.uint8)
    slots = torch.tensor([1, -1, 2], dtype=torch.int32)
    want = refs.kv_compress_epilog(cache.numpy(), as_numpy(x), slots.numpy(), quant_mode=0)
    kvscatter.kv_compress_epilog(cache, x, slots, quant_mode="fp8_bf16")
    np.testing.assert_array_equal(cache.numpy(), want)

    fp8 = torch.float8_e4m3fn
    key = torch.randn(3, 2, 4).to(fp8)
    kc = torch.zeros(2, 2, 2, 4, dtype=fp8)
    vc = torch.zeros(2, 2, 2, 4, dtype=fp8)
    ks = torch.randn(3, 2)
    ksc = torch.zeros(2, 2, 2, 1)
    kvscatter.scatter_pa_kv_cache_with_k_scale(key, key, kc, vc, slots, ks, ksc)
    assert torch.equal(kc[0, :, 1].view(torch.uint8), key[0].view(torch.uint8))
    assert torch.equal(ksc[1, :, 0, 0], ks[2])


def test_hifloat8_as_uint8():
    codes = torch.randint(0, 256, (4, 1, 32), dtype=torch.uint8)
    kc = torch.zeros(2, 2, 1, 32, dtype=torch.uint8)
    kvscatter.scatter_pa_kv_cache(codes, None, kc, None, torch.tensor([3, 2, 1, 0], dtype=torch.int32),
                                  dtype="hifloat8")
    assert torch.equal(kc[1, 1], codes[0]) and torch.equal(kc[0, 0], codes[3])


def test_errors():
    kc = torch.zeros(2, 4, 1, 2)
    new = torch.ones(2, 1, 1, 2)
    # Through torch.ops.kvscatter the library's errors are ValueError (as kvscatter.Error is).
    with pytest.raises(ValueError, match="position"):
        kvscatter.kv_cache_update(kc, kc.clone(), new, new, 4)
    assert kc.eq(0).all()
    with pytest.raises(TypeError, match="new_keys: dtype Double is not supported"):
        kvscatter.kv_cache_update(kc, kc.clone(), new.double(), new, 0)
    assert kc.eq(0).all()
