"""bench/compare.py: its NumPy alternatives compute what kvscatter computes, and a quick run
writes the report and its plots (no timing is asserted)."""

import importlib
import json
import os
import pathlib
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import refs

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPARE = ROOT / "bench" / "compare.py"
pytestmark = pytest.mark.skipif(not COMPARE.exists(), reason="bench/ is not in this tree")


def bench_module(name: str):
    """A module of bench/, which is not a package."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


@pytest.fixture(scope="module")
def alternatives():
    return bench_module("alternatives")


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_vectorized_epilog_matches_the_reference(alternatives, rng, mode):
    x = (rng.standard_normal((12, 576)) * rng.choice([1e-3, 1.0, 300.0], (12, 1))).astype(
        ml_dtypes.bfloat16)
    x[2, :64] = 0  # an all-zero group: EPS scale (fp8 modes), zero inverse scale (fp4)
    x[5, 100] = np.float32(2e4)  # one large element dominates its group
    got = alternatives.epilog_rows(x, mode)
    want = np.stack([refs.epilog_row(row, mode, 64, True, 1.0) for row in x])
    np.testing.assert_array_equal(got, want)


def _zeros_like_cache(mode, nb, d):
    scale = (np.zeros((nb, 4, 1, 1), np.float32) if mode == "fp8" else
             np.zeros((nb, 4, 1, d // 32), ml_dtypes.float8_e8m0fnu))
    return np.zeros((nb, 4, 1, d), ml_dtypes.float8_e4m3fn), scale


@pytest.mark.parametrize("mode", ["fp8", "mxfp8"])
def test_indexer_formulations_match_kvscatter(alternatives, rng, mode):
    import kvscatter

    d, t = 128, 10
    x = (rng.standard_normal((t, d)) * rng.choice([1e-30, 1e-3, 1.0, 300.0], (t, 1))).astype(
        ml_dtypes.bfloat16)
    x[1] = 0  # an all-zero row: scale 0.0 (fp8) / the 1e-4 floor (mxfp8), zero codes
    x[2, 32:64] = -0.0  # an all-zero group, signed zeros kept
    x[3, 7] = np.float32(3e38)  # one huge element dominates its row or group
    x[4, ::3] = np.float32(2 ** -130)  # bfloat16 subnormals
    slots = np.array([3, 0, 7, -1, 5, 1, 9, 2, 6, 4], np.int64)
    want = _zeros_like_cache(mode, 3, d)
    kvscatter.indexer_quant_cache(*want, x, slots, quant_mode=mode)
    for build in (alternatives.numpy_indexer, alternatives.torch_indexer):
        got = _zeros_like_cache(mode, 3, d)
        call, result = build(*got, x, slots, mode)
        call()
        for g, w in zip(result(), want):
            np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8), build.__name__)


@pytest.mark.parametrize("hnd", [False, True])
def test_vllm_fp8_formulations_match_kvscatter(alternatives, rng, hnd):
    import kvscatter.vllm

    t, h, dim, nb, bs = 9, 3, 16, 4, 8
    key, value = ((rng.standard_normal((t, h, dim)) * rng.choice([1e-3, 1.0, 40.0], (t, h, 1)))
                  .astype(ml_dtypes.bfloat16) for _ in range(2))
    key[0, 0, :4] = [448 * 0.5, 464 * 0.5, -1e4, 0]  # the largest code, a tie, saturation
    slots = np.array([5, -1, 31, 0, 17, 8, -1, 30, 12], np.int64)
    k_scale = np.array([0.5, 0.25, 2.0], np.float32)  # per head
    v_scale = np.array([0.07, 1.0, 0.3], np.float32)

    def caches():
        if hnd:
            kv = np.zeros((nb, 2, h, bs, dim), np.uint8)
            return kv[:, 0].transpose(0, 2, 1, 3), kv[:, 1].transpose(0, 2, 1, 3)
        return np.zeros((nb, bs, h, dim), np.uint8), np.zeros((nb, bs, h, dim), np.uint8)

    want = caches()
    kvscatter.vllm.reshape_and_cache_flash(key, value, *want, slots, "fp8", k_scale, v_scale)
    for build in (alternatives.numpy_flash, alternatives.torch_flash):
        got = caches()
        call, result = build(key, value, *got, slots, True, k_scale, v_scale)
        call()
        for g, w in zip(result(), want):
            np.testing.assert_array_equal(g, w, build.__name__)

    kv_c, k_pe = key.reshape(t, -1), value.reshape(t, -1)[:, :8]
    scale = np.array([0.5], np.float32)
    want = np.zeros((nb, bs, kv_c.shape[1] + 8), np.uint8)
    kvscatter.vllm.concat_and_cache_mla(kv_c, k_pe, want, slots, "fp8", scale)
    for build in (alternatives.numpy_latent, alternatives.torch_latent):
        got = np.zeros_like(want)
        call, _ = build(kv_c, k_pe, got, slots, True, scale)
        call()
        np.testing.assert_array_equal(got, want, build.__name__)


def test_quick_run_writes_the_report(tmp_path):
    pytest.importorskip("matplotlib")
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the script runs on one host device
    ops = "scatter_pa_kv_cache Norm bf16 8x128,fp8_e8m0,kv_cache_update f32->bf16 8x128"
    result = subprocess.run(
        [sys.executable, str(COMPARE), "--quick", "--out", str(tmp_path), "--ops", ops],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    text = (tmp_path / "performance.md").read_text()
    for section in ("## Machine and versions", "## How it is measured",
                    "## Side by side with the alternatives", "## Regression guard"):
        assert section in text
    pngs = sorted((tmp_path / "perf").glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    for p in pngs:
        assert f"](perf/{p.name})" in text
    data = json.loads((tmp_path / "perf" / "compare.json").read_text())
    rows = data["compare"]["rows"]
    assert {r["id"] for r in rows} == {"scatter_pa_kv_cache Norm bf16 8x128",
                                       "kv_compress_epilog fp8_e8m0 d576",
                                       "kv_cache_update f32->bf16 8x128"}
    # Every alternative wrote exactly the caches kvscatter wrote.
    assert all(r["verified"] for r in rows), [r for r in rows if not r["verified"]]
    assert {r["impl"] for r in rows} >= {"kvscatter, 1 thread", "NumPy"}
    if data["native"] is not None:  # the kvscatter program was built: targets judged
        assert "## Targets" in text and "## Where targets are missed" in text
        assert all(t["met"] in (True, False) for t in data["native"]["targets"])


@pytest.fixture(scope="module")
def compare_module():
    return bench_module("compare")


def test_elements_per_token_counts_every_input_element(compare_module):
    count = compare_module.elements_per_token
    assert count("kv_compress_epilog", "d576") == 576
    assert count("indexer_quant_cache", "d128") == 128
    assert count("paged_latent_write", "512+64") == 576
    assert count("paged_cache_gather", "e576") == 576
    assert count("paged_kv_write", "8x128") == 2 * 1024  # keys and values
    assert count("scatter_pa_kv_cache_with_k_scale", "8x128") == 2 * 1024


def test_quantizers_are_reported_per_simd_target(compare_module):
    cli = compare_module.find_cli(None)
    if cli is None:
        pytest.fail("the kvscatter program is not built (cmake --build build/release)")
    per_target = compare_module.run_cli_per_target(cli, True, lambda msg: None)
    info = subprocess.run([cli, "info"], capture_output=True, text=True, check=True).stdout
    available = next(x for x in info.splitlines() if x.startswith("simd targets available:"))
    assert list(per_target) == available.split(":", 1)[1].split()
    lines = []
    compare_module.quantizers_per_target(lines.append, per_target)
    text = "\n".join(lines)
    assert text.startswith("## Quantizers per SIMD target")
    for target, bench in per_target.items():
        assert bench["simd_target"] == target and bench["cpu_ghz"] > 0.1
        for workload in ("kv_compress_epilog hifloat8_fp4 d576", "indexer_quant_cache fp8 d128",
                         "paged_kv_write fp8_e4m3 NHD bf16 8x128"):
            row = next(x for x in lines if x.startswith(f"| `{workload}` | {target} |"))
            ratio, cycles = row.split("|")[3].split(",")
            assert float(ratio.strip().rstrip("x")) > 0
            assert float(cycles.strip().split()[0]) > 0


# The side-by-side workloads of the operators added with the CANN family and the vLLM-compatible
# operators: their ids are those of the native sweep, so the rows line up.
NEW_IDS = {
    "scatter_pa_cache plain bf16 8x128", "gather_pa_kv_cache Norm bf16 8x128",
    "indexer_quant_cache fp8 d128", "indexer_quant_cache mxfp8 d128",
    "paged_kv_write copy NHD bf16 8x128", "paged_kv_write copy HND-kv bf16 8x128",
    "paged_kv_write fp8_e4m3 NHD bf16 8x128", "paged_kv_write fp8_e4m3 HND-kv bf16 8x128",
    "paged_cache_gather copy bf16 e576", "paged_cache_gather fp8_e4m3->bf16 e576",
    "paged_latent_write copy bf16 512+64", "paged_latent_write fp8_e4m3 bf16 512+64",
}


def test_quick_run_verifies_the_new_operators(tmp_path, compare_module):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    ops = "scatter_pa_cache plain,gather_pa_kv_cache,indexer_quant_cache,paged_"
    # A decode batch with padding slots, and a prefill; the plots are the other test's.
    args = [sys.executable, str(COMPARE), "--quick", "--out", str(tmp_path), "--ops", ops,
            "--tokens", "16,256", "--no-plots"]
    cli = compare_module.find_cli(None)
    args += ["--cli", cli] if cli else ["--no-cli"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads((tmp_path / "perf" / "compare.json").read_text())
    rows = data["compare"]["rows"]
    assert {r["id"] for r in rows} == NEW_IDS
    assert data["compare"]["unavailable"] == {}  # no alternative failed or was left out
    assert all(r["verified"] for r in rows), [r for r in rows if not r["verified"]]
    impls = {i: {r["impl"] for r in rows if r["id"] == i} for i in NEW_IDS}
    for i, names in impls.items():
        assert {"kvscatter, 1 thread", "kvscatter torch.ops", "NumPy", "PyTorch"} <= names, i
    for i in ("scatter_pa_cache plain bf16 8x128", "gather_pa_kv_cache Norm bf16 8x128"):
        assert {"JAX", "kvscatter.jax"} <= impls[i]
    assert "PyTorch index_put_" in impls["scatter_pa_cache plain bf16 8x128"]
    assert "PyTorch advanced index" in impls["gather_pa_kv_cache Norm bf16 8x128"]
    assert not list((tmp_path / "perf").glob("*.png"))
    assert "## Side by side with the alternatives" in (tmp_path / "performance.md").read_text()
    if data["native"] is not None:  # the native sweep ran the same workloads under these ids
        native_ids = {f"{r['op']} {r['variant']} {r['shape']}" for r in data["native"]["rows"]}
        assert NEW_IDS <= native_ids, NEW_IDS - native_ids
