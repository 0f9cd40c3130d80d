"""Optional test dependencies: skipped on a developer machine without them, required in CI.

CI (the CI environment variable set, as GitHub Actions and scripts/test.sh do) installs torch
and jax, so there a missing package fails the tests instead of skipping them silently.
"""

import importlib
import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(module: str):
    """Imports `module`; skips the calling test module when it is missing outside CI."""
    if in_ci():
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed (CI requires it)")
