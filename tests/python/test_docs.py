"""The examples of docs/python.md run and their assertions hold.

Each ```python block runs in a fresh interpreter (the shard_map example sets XLA_FLAGS before
importing jax); blocks that import torch or jax are skipped when those are missing.
"""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest
from needs import need

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def blocks():
    if not DOC.exists():
        return []
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def needs(code):
    return [m for m in ("torch", "jax") if re.search(rf"^\s*(import|from) {m}\b", code, re.M)]


@pytest.mark.parametrize("code", blocks(), ids=lambda c: c.splitlines()[0][:40])
def test_doc_example_runs(code, tmp_path):
    for module in needs(code):
        need(module)
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # each example sets what it needs
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_doc_has_numpy_torch_and_jax_examples():
    if not DOC.exists():
        pytest.skip("docs/python.md is not in this tree")
    found = blocks()
    assert found, "docs/python.md has no python examples"
    assert any("torch" in needs(c) for c in found)
    assert any("jax" in needs(c) and "donate_argnums" in c for c in found)
    assert any("shard_map" in c for c in found)
