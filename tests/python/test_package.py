"""Package-level behaviour: import, version, runtime settings, error type."""

import importlib
import importlib.metadata
import pathlib
import re

import kvscatter
import pytest


def test_version_matches_cmake_project():
    assert re.fullmatch(r"\d+\.\d+\.\d+", kvscatter.__version__)
    assert kvscatter.__version__ == importlib.metadata.version("kvscatter")
    cmake = pathlib.Path(__file__).resolve().parents[2] / "CMakeLists.txt"
    if cmake.exists():  # running from a checkout
        m = re.search(r"project\(kvscatter\s+VERSION\s+([0-9.]+)", cmake.read_text())
        assert m and m.group(1) == kvscatter.__version__


def test_public_api():
    for name in kvscatter.__all__:
        assert hasattr(kvscatter, name), name
    assert kvscatter.npu_scatter_pa_kv_cache is kvscatter.scatter_pa_kv_cache
    assert issubclass(kvscatter.Error, ValueError)
    vllm = importlib.import_module("kvscatter.vllm")
    for name in vllm.__all__:
        assert callable(getattr(vllm, name)), name


def test_threads_round_trip():
    before = kvscatter.get_num_threads()
    try:
        kvscatter.set_num_threads(3)
        assert kvscatter.get_num_threads() == 3
        kvscatter.set_num_threads(0)  # back to the default
        assert kvscatter.get_num_threads() >= 1
    finally:
        kvscatter.set_num_threads(before)


def test_simd_target_is_available():
    target = kvscatter.simd_target()
    assert target
    assert target in kvscatter.simd_targets_available()


def test_error_carries_status():
    import numpy as np

    kc = np.zeros((1, 4, 1, 2), np.float32)
    new = np.zeros((1, 1, 1, 2), np.float32)
    with pytest.raises(kvscatter.Error) as info:
        kvscatter.kv_cache_update(kc, kc.copy(), new, new, 7)
    assert info.value.status == 161002
    assert "position" in str(info.value)
