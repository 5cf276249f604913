"""Every `>>>` example in the package's docstrings runs and prints what it says (`doctest`)."""

import doctest
import importlib
import pathlib

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte

PACKAGE = pathlib.Path(kte.__file__).parent


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return [name for name in names if not name.endswith("__main__")]


def _doctests() -> list:
    finder, found = doctest.DocTestFinder(exclude_empty=True), []
    for name in _modules():
        module = importlib.import_module(name)
        for test in finder.find(module, name, globs={}):
            if test.examples and test.name.startswith(name) and _defined_here(module, test):
                found.append(pytest.param(name, test.name, id=test.name))
    return found


def _defined_here(module, test) -> bool:
    """Only docstrings written in `module` (not those of names it imports)."""
    return test.filename is None or pathlib.Path(test.filename).resolve() == pathlib.Path(module.__file__).resolve()


@pytest.mark.parametrize(("module_name", "test_name"), _doctests())
def test_doctest(module_name, test_name, mirrored):
    module = importlib.import_module(module_name)
    test = next(t for t in doctest.DocTestFinder().find(module, module_name) if t.name == test_name)
    # `ctx`: the `params['context']` an input_fn gets, on a MirroredStrategy over the 4 logical CPUs.
    context = kte.TPUContext(mirrored, "train", 8)
    test.globs = {**vars(module), "tf": tf, "np": np, "kte": kte, "ctx": context}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0, f"{test_name}: {runner.failures} of {len(test.examples)} examples failed (see output)"
