"""Imports flow down the module layers (STYLE.md); no module imports one above it."""

import ast
import pathlib

LAYERS = {
    "_compat": 0, "per_thread": 0, "versions": 0, "tf_config": 0, "logs": 0,
    "spec": 1, "config": 1,
    "strategy": 2, "variables": 2, "inputs": 2, "checkpoints": 2, "legacy": 2, "cross_replica": 2,
    "serving": 2, "fetches": 2, "worker_errors": 2, "optimizer_view": 2, "model_dir": 2,
    "model_dir_lock": 2,
    "loop": 3, "host": 3, "metric_ops": 3, "padding": 3, "export": 3, "preemption": 3, "inference": 3,
    "model_fn": 4,
    "trainer": 5, "model": 5, "session_hooks": 5, "batch_methods": 5, "keras_methods": 5,
    "callbacks": 6, "restore": 6,
    "tpu_estimator": 7,
    "estimator": 8,  # the package laid out like tf.compat.v1.estimator
}
PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "keras_tpu_estimator"


def _sources(name: str) -> list[pathlib.Path]:
    module = PACKAGE / f"{name}.py"
    return [module] if module.exists() else sorted((PACKAGE / name).rglob("*.py"))


def test_no_module_imports_a_higher_layer():
    for name, layer in LAYERS.items():
        trees = [ast.parse(source.read_text()) for source in _sources(name)]
        for node in (node for tree in trees for node in ast.walk(tree)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keras_tpu_estimator"):
                targets = [node.module.split(".")[1]] if "." in node.module else [a.name for a in node.names]
                for target in targets:
                    assert LAYERS.get(target, -1) <= layer, f"{name} imports {target}"


def test_every_module_is_placed_in_a_layer():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    modules |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")} - {"examples"}
    assert modules == set(LAYERS)


def test_private_tensorflow_and_keras_modules_are_imported_only_in_compat():
    private = ("tensorflow.python", "keras.src", "tf_keras.src")
    for source in PACKAGE.rglob("*.py"):
        if "_compat" in source.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(source.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            leaked = [n for n in names if n.startswith(private)]
            assert not leaked, f"{source.name} imports {leaked}: private API belongs in _compat"
