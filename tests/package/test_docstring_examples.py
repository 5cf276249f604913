"""Every ```python block after an `Example:` line in keras_tpu_estimator's docstrings runs.

Docstrings are read with `ast` from the source (modules, classes, functions, methods, private
ones too). Each block runs as its own test in a fresh namespace: its module's globals, `os`, `tf`,
`keras`, `np`, `kte`, and the names of the toy world (tests/fixtures/docstring_world.py) it uses.
Running without error is the check; examples assert the values they claim.
"""

import ast
import builtins
import importlib
import os
import pathlib
import re
import textwrap
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures.docstring_world import world

PACKAGE = pathlib.Path(kte.__file__).parent
_FENCE = re.compile(r"^```(\w*)$")


def _blocks(doc: str) -> list[str]:
    """The ```python blocks of `doc` that follow an `Example:` line (other fences too: ignored)."""
    found, after, lines, i = [], False, doc.splitlines(), 0
    while i < len(lines):
        line = lines[i].strip()
        if re.match(r"^Examples?( \w+)*:$", line):
            after = True
        fence = _FENCE.match(line)
        if fence:
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if after and fence.group(1) == "python":
                found.append(textwrap.dedent("\n".join(lines[i + 1:end])))
            after, i = False, end
        i += 1
    return found


def _docstrings(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + node.name
            if doc := ast.get_docstring(node):
                yield name, doc
            yield from _docstrings(node, name + ".")


def _examples():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(), str(path))
        docs = [("<module>", ast.get_docstring(tree) or ""), *_docstrings(tree)]
        for qualname, doc in docs:
            for index, code in enumerate(_blocks(doc)):
                yield pytest.param(module, code, id=f"{module}:{qualname}:{index}")


EXAMPLES = list(_examples())


def _free_names(tree: ast.AST) -> set[str]:
    """Names the code reads but never binds itself."""
    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return loaded - bound


def test_there_are_examples():
    assert len(EXAMPLES) > 100


@pytest.mark.parametrize("module, code", EXAMPLES)
def test_example(module: str, code: str, tmp_path):
    tree = ast.parse(code)
    namespace = dict(vars(importlib.import_module(module)))
    # a world name shadows a module global only where that global is a subpackage (kte.model_dir)
    missing = {n for n in _free_names(tree) if not hasattr(builtins, n)
               and (n not in namespace or isinstance(namespace[n], types.ModuleType))}
    model_dir = tmp_path / "model_dir"
    model_dir.mkdir()
    namespace.update(world(missing, str(model_dir)))
    namespace.update(os=os, tf=tf, keras=keras, np=np, kte=kte, __name__="docstring_example")
    exec(compile(tree, f"<{module} example>", "exec"), namespace)
    # An example leaves the process as it found it: the tests after it run in the same one.
    assert tf.executing_eagerly() and not kte.installed(), "the example changed TensorFlow for the whole process"
