"""Objects seen only through DLPack (no NumPy, no torch needed): caches written in place."""

import kvscatter
import numpy as np
import pytest


class DLPackOnly:
    """Exposes an array through __dlpack__ alone, as a framework tensor would."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_cache_written_in_place_through_dlpack():
    kc = np.zeros((2, 8, 2, 4), np.float32)
    vc = np.zeros_like(kc)
    new = np.arange(2 * 3 * 2 * 4, dtype=np.float32).reshape(2, 3, 2, 4)
    out = kvscatter.kv_cache_update(DLPackOnly(kc), DLPackOnly(vc), DLPackOnly(new), DLPackOnly(-new), 4)
    assert out["length"] == 7
    np.testing.assert_array_equal(kc[:, 4:7], new)
    np.testing.assert_array_equal(vc[:, 4:7], -new)
    assert not kc[:, :4].any() and not kc[:, 7:].any()


def test_strided_dlpack_views():
    big = np.zeros((4, 6, 2, 8), np.float16)
    kc = big[:, :4]  # strided along the block axis
    key = np.arange(5 * 2 * 16, dtype=np.float16).reshape(5, 2, 16)[:, :, :8]  # strided tokens
    slots = np.array([0, 5, 9, 14, 15], np.int32)
    kvscatter.scatter_pa_kv_cache(DLPackOnly(key), None, DLPackOnly(kc), None, DLPackOnly(slots))
    for t, s in enumerate(slots):
        np.testing.assert_array_equal(big[s // 4, s % 4], key[t])
    assert not big[:, 4:].any()


def test_read_only_dlpack_cache_is_refused():
    kc = np.zeros((1, 4, 1, 2), np.float32)
    kc.setflags(write=False)
    new = np.ones((1, 1, 1, 2), np.float32)
    try:
        kc.__dlpack__(max_version=(1, 0))
    except (BufferError, TypeError):
        pytest.skip("this NumPy cannot export read-only arrays through DLPack")
    with pytest.raises(ValueError, match="key_cache is read-only"):
        kvscatter.kv_cache_update(DLPackOnly(kc), np.zeros_like(kc), new, new, 0)
