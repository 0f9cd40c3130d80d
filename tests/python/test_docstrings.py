"""Every public Python function has a numpydoc docstring whose example runs."""

import doctest
import importlib
import inspect

import pytest
from needs import in_ci

MODULES = ["kvscatter", "kvscatter.formats", "kvscatter.torch_npu", "kvscatter.jax"]


def public_functions():
    out = []
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            if in_ci():
                raise
            continue
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr)
            if inspect.isfunction(obj) or inspect.isbuiltin(obj):
                out.append((f"{name}.{attr}", obj))
    return out


FUNCTIONS = public_functions()


@pytest.mark.parametrize("name,fn", FUNCTIONS, ids=[n for n, _ in FUNCTIONS])
def test_numpydoc_sections_and_a_running_example(name, fn):
    doc = inspect.getdoc(fn) or ""
    for section in ("Examples\n--------",):
        assert section in doc, f"{name}: no {section.splitlines()[0]} section"
    if inspect.signature(fn).parameters:
        assert "Parameters\n----------" in doc, f"{name}: no Parameters section"
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(fn, name, globs={})
    assert tests and tests[0].examples, f"{name}: the example has no >>> lines"
    for test in tests:
        result = runner.run(test)
        assert result.failed == 0, f"{name}: its example fails"


def test_every_module_function_is_covered():
    names = {n for n, _ in FUNCTIONS}
    for required in ("kvscatter.scatter_pa_kv_cache", "kvscatter.kv_cache_update",
                     "kvscatter.kv_compress_epilog", "kvscatter.scatter_pa_kv_cache_with_k_scale",
                     "kvscatter.set_num_threads", "kvscatter.formats.encode"):
        assert required in names
