"""bench/compare.py: its NumPy alternatives compute what kvscatter computes, and a quick run
writes the report and its plots (no timing is asserted)."""

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


@pytest.fixture(scope="module")
def alternatives():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import alternatives as alt
    finally:
        sys.path.pop(0)
    return alt


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_vectorized_epilog_matches_the_reference(alternatives, rng, mode):
    x = (rng.standard_normal((12, 576)) * rng.choice([1e-3, 1.0, 300.0], (12, 1))).astype(
        ml_dtypes.bfloat16)
    x[2, :64] = 0  # an all-zero group: EPS scale (fp8 modes), zero inverse scale (fp4)
    x[5, 100] = np.float32(2e4)  # one large element dominates its group
    got = alternatives.epilog_rows(x, mode)
    want = np.stack([refs.epilog_row(row, mode, 64, True, 1.0) for row in x])
    np.testing.assert_array_equal(got, want)


def test_quick_run_writes_the_report(tmp_path):
    pytest.importorskip("matplotlib")
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the script runs on one host device
    ops = "Norm bf16 8x128,fp8_e8m0,kv_cache_update f32->bf16 8x128"
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
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import compare
    finally:
        sys.path.pop(0)
    return compare


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
