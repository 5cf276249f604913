"""Imports flow down the module layers (STYLE.md); no module imports one above it."""

import ast
import pathlib
import tempfile

LAYERS = {
    "_compat": 0, "per_thread": 0, "versions": 0, "tf_config": 0, "logs": 0, "nan_errors": 0, "graph_mode": 0,
    "spec": 1, "config": 1,
    "strategy": 2, "variables": 2, "inputs": 2, "graph_input": 2, "checkpoints": 2, "meta_graph": 2, "legacy": 2, "cross_replica": 2, "tf1_summaries": 2,
    "serving": 2, "fetches": 2, "worker_errors": 2, "optimizer_view": 2, "model_dir": 2,
    "model_dir_lock": 2, "batch_plan": 2, "estimator_args": 2, "step_compilation": 2, "source_lines": 0,
    "tf1_saver": 2,  # imports checkpoints (2); legacy (2) enters its stand-in
    "invoke": 3, "loop": 3, "host": 3, "host_plan": 3, "host_loop": 3, "host_gather": 3, "metric_ops": 3, "padding": 3, "predictions": 3, "export": 3, "preemption": 3,
    "inference": 3, "step_tensors": 3, "profiler": 3, "input_deployment": 3,
    "model_fn": 4, "driver": 4, "hook_graph": 4, "tpu_readiness": 4,
    "trainer": 5, "model": 5, "session_hooks": 5, "batch_methods": 5, "keras_methods": 5,
    "callbacks": 6, "restore": 6,
    "estimator_calls": 7,  # the facade's train / evaluate / predict bodies
    "plain_estimator": 8,  # the plain Estimator, which TPUEstimator subclasses
    "tpu_estimator": 9,
    # train_and_evaluate, its exporters and the experimental hooks drive the facade through its public methods
    "eval_events": 2, "nested_evaluation": 2, "exporters": 10, "early_stopping": 10, "training": 11,
    "estimator": 12,  # the package laid out like tf.compat.v1.estimator
    "install": 13,  # the old names resolve to this library
    "__main__": 14,  # python -m keras_tpu_estimator SCRIPT
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


_NAMEDTUPLE_API = {"_asdict", "_fields", "_replace", "_make", "_field_defaults"}


def _private_names(value) -> set[str]:
    return {n for n in dir(value) if n.startswith("_") and not n.startswith("__")}


def _foreign_bases() -> dict[str, set[str]]:
    """`{base class as written: its instances' underscore attributes}` for the TF / Keras bases we extend."""
    import keras

    return {
        "keras.Model": _private_names(keras.Model()),
        "keras.layers.Layer": _private_names(keras.layers.Layer()),
        "keras.callbacks.Callback": _private_names(keras.callbacks.Callback()),
    }


def _held_objects() -> set[str]:
    """Underscore attributes of TF / Keras objects the package holds and must not reach into."""
    import keras
    import tensorflow as tf

    manager = tf.train.CheckpointManager(tf.train.Checkpoint(), tempfile.mkdtemp(), max_to_keep=1)
    objects = [keras.Model(), keras.optimizers.SGD(), keras.Variable(1.0), tf.Variable(1.0), manager,
               tf.distribute.get_strategy(), tf.compat.v1.train.StopAtStepHook(num_steps=1)]
    return set().union(*map(_private_names, objects))


def test_private_tensorflow_and_keras_attributes_are_used_only_in_compat():
    """Outside `_compat`: no underscore attribute of a TF / Keras object, read or written.

    `self._x` in a class that extends a Keras class must not be one of that
    class's own private attributes; `obj._x` on anything else must be a name
    this package defines and not a TF / Keras private one.
    """
    trees = {p: ast.parse(p.read_text()) for p in PACKAGE.rglob("*.py")}
    ours, functions, bases = set(), set(), {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                ours.add(node.name)
                functions.add(node.name)
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [ast.unparse(b) for b in node.bases]
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                ours.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ours.add(node.id)
    foreign_bases, held = _foreign_bases(), _held_objects() - functions
    mixed_into = {mixin: name for name, parents in bases.items() for mixin in parents}

    def foreign_of(cls: str | None, seen=()) -> set[str]:
        if cls is None or cls in seen:
            return set()
        found = set()
        for base in bases.get(cls, []):
            found |= foreign_bases.get(base, set()) | foreign_of(base, (*seen, cls))
        return found | foreign_of(mixed_into.get(cls), (*seen, cls))  # a mixin is what it is mixed into

    leaks = []
    for path, tree in trees.items():
        if "_compat" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(tree):  # getattr(obj, "_x"), get_collection("_X")
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in {
                "getattr", "setattr", "hasattr", "get_collection", "get_collection_ref"
            }:
                for arg in node.args[:2]:
                    value = arg.value if isinstance(arg, ast.Constant) else None
                    if isinstance(value, str) and value.startswith("_") and value not in ours | _NAMEDTUPLE_API:
                        leaks.append(f"{path.name}:{node.lineno} {ast.unparse(node)[:60]}")
        for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)] + [tree]:
            own = foreign_of(cls.name) - functions if isinstance(cls, ast.ClassDef) else set()
            for node in ast.walk(cls):
                if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")) or node.attr.startswith("__"):
                    continue
                name, on_self = node.attr, isinstance(node.value, ast.Name) and node.value.id == "self"
                if name in _NAMEDTUPLE_API:
                    continue
                if (on_self and name in own) or (not on_self and (name not in ours or name in held)):
                    leaks.append(f"{path.name}:{node.lineno} {ast.unparse(node)[:60]}")
    assert not sorted(set(leaks)), f"private TF/Keras attributes outside _compat: {sorted(set(leaks))}"
