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
    assert kvscatter.npu_scatter_pa_kv_cache is kvscatter.torch_npu.npu_scatter_pa_kv_cache
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


def _run(code):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_without_torch_numpy_works_and_kvscatter_torch_says_how_to_get_it():
    # sys.modules[name] = None makes `import name` fail, as in an environment without it.
    result = _run(
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np, kvscatter\n"
        "c = np.zeros((2, 4, 1, 8), np.float32)\n"
        "kvscatter.scatter_pa_kv_cache(np.ones((1, 1, 8), np.float32), None, c, None, np.array([5]))\n"
        "assert c[1, 1].sum() == 8\n"
        "try:\n"
        "    import kvscatter.torch\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n")
    assert result.returncode == 0, result.stderr
    assert "ImportError: kvscatter.torch needs PyTorch: pip install torch" in result.stdout
    assert "--no-build-isolation" in result.stdout


def test_a_build_without_the_torch_operators_says_how_to_rebuild():
    result = _run(
        "import sys, importlib.util\n"
        "if importlib.util.find_spec('torch') is None: print('no torch'); raise SystemExit\n"
        "sys.modules['kvscatter._torch_ops'] = None\n"
        "try:\n"
        "    import kvscatter.torch\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n")
    assert result.returncode == 0, result.stderr
    if "no torch" not in result.stdout:
        assert "has no PyTorch operators" in result.stdout
        assert "pip install --no-build-isolation ." in result.stdout
