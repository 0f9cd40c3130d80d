"""kvscatter's operators as native PyTorch operators: ``torch.ops.kvscatter.<op>``.

Importing this module loads the operators (registered from C++ with ``TORCH_LIBRARY``) and
their fake kernels, so they work in eager mode, under ``torch.inference_mode()`` and inside
``torch.compile(fullgraph=True)`` graphs. Each operator updates its caches in place (the
schema marks them ``Tensor(a!)``) and returns nothing; the arguments are the ones of the
functions of the same name in :mod:`kvscatter`, the keyword ``dtype=`` included (a canonical
kvscatter dtype name such as ``"hifloat8"``).

``kvscatter.scatter_pa_kv_cache(...)`` and the other functions route torch tensors through
these operators by themselves; call ``torch.ops.kvscatter.<op>`` directly on the hot path of
a decode loop (no Python work at all between the call and the kernel).

Errors found by the library raise ``ValueError`` with the library's message and leave every
cache untouched; a tensor on any device but the CPU raises ``RuntimeError`` ("kvscatter runs
on CPU tensors ...").

Example
-------
>>> import torch, kvscatter.torch
>>> key = torch.ones(2, 8, 128, dtype=torch.bfloat16)
>>> key_cache = torch.zeros(4, 128, 8, 128, dtype=torch.bfloat16)
>>> torch.ops.kvscatter.scatter_pa_kv_cache(
...     key, None, key_cache, None, torch.tensor([5, -1]), cache_mode="Norm")
>>> bool(key_cache[0, 5].eq(1).all())
True
"""

from __future__ import annotations

try:
    import torch
except ImportError as _e:  # pragma: no cover - exercised in the no-torch CI job
    raise ImportError(
        "kvscatter.torch needs PyTorch: pip install torch, then reinstall kvscatter with "
        "`pip install --no-build-isolation .` so that its PyTorch operators are built"
    ) from _e

try:
    from . import _torch_ops  # noqa: F401  (registers torch.ops.kvscatter.*)
except ImportError as _e:
    raise ImportError(
        "this kvscatter build has no PyTorch operators (it was built where torch was not "
        f"importable, or for another torch than {torch.__version__}): reinstall kvscatter with "
        "`pip install --no-build-isolation .` in this environment"
    ) from _e

__all__ = ["OPERATORS", "ops"]

#: The operators registered under ``torch.ops.kvscatter``.
OPERATORS = (
    "scatter_pa_kv_cache",
    "scatter_pa_kv_cache_with_k_scale",
    "kv_compress_epilog",
    "kv_cache_update",
    "gather_pa_kv_cache",
    "scatter_pa_cache",
    "indexer_quant_cache",
    "paged_kv_write",
    "paged_cache_gather",
    "paged_latent_write",
    "reshape_and_cache_flash",
    "concat_and_cache_mla",
    "gather_and_maybe_dequant_cache",
    "cp_gather_cache",
)

#: ``torch.ops.kvscatter``.
ops = torch.ops.kvscatter


def _make_fake(name: str):
    # The operators return nothing and only mutate their caches, so tracing needs no shapes;
    # a real tensor on the meta (or any non-CPU) device lands here too and is refused.
    def fake(*args, **kwargs):
        for arg in (*args, *kwargs.values()):
            if isinstance(arg, torch.Tensor) and arg.device.type != "cpu":
                raise RuntimeError(
                    f"kvscatter runs on CPU tensors: kvscatter::{name} got a tensor on "
                    f"{arg.device}"
                )

    fake.__name__ = f"{name}_fake"
    return fake


for _name in OPERATORS:
    torch.library.register_fake(f"kvscatter::{_name}")(_make_fake(_name))
