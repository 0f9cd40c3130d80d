"""Shared test setup.

XLA_FLAGS must be set before jax is first imported so that the host platform exposes 4 CPU
devices for the shard_map tests; conftest.py is imported before any test module.
"""

import os
import zlib

_flag = "--xla_force_host_platform_device_count=4"
if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng(request):
    # A fixed seed per test: failures reproduce, and every test sees different data.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
