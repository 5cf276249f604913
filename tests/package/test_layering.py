"""The package's plan: wings (subpackages), the directions their imports may take, and `_compat`.

A wing is entered from outside only through its `__init__` names; inside a wing,
modules import each other relatively. `ALLOWED` is the whole map: a wing imports
only the wings listed for it, so two siblings left out of each other's lists
(for instance `host` and `inputs`) cannot come to know each other unnoticed.
"""

import ast
import graphlib
import pathlib
import tempfile

# wing: the wings it may import from (directly). "" is the package's own `__init__` (the `kte.*` face).
ALLOWED = {
    "versions": set(),  # the supported releases; runs with `python -m`, imports no TensorFlow
    "utils": set(),  # logging, per-thread containers, source lines
    "_compat": {"utils", "versions"},  # every private TF / Keras symbol
    "contract": set(),  # what programs write against: ModeKeys, the specs, RunConfig, TF_CONFIG
    "distribute": {"_compat", "contract", "utils"},
    "model_dir": {"_compat", "utils"},
    "tf1": {"_compat", "model_dir", "utils", "versions"},
    "inputs": {"contract", "distribute", "utils"},
    "host": {"_compat", "contract", "tf1", "utils"},
    "xla": {"_compat", "contract", "inputs", "tf1", "utils"},
    "engine": {"_compat", "contract", "distribute", "host", "inputs", "model_dir", "tf1", "utils", "xla"},
    "export": {"_compat", "contract", "engine", "model_dir", "tf1", "utils"},
    "callbacks": {"_compat", "contract", "distribute", "export", "model_dir", "tf1", "utils"},
    "model": {"_compat", "callbacks", "contract", "distribute", "engine", "export", "inputs", "model_dir", "tf1",
              "utils", "xla"},
    "facade": {"_compat", "callbacks", "contract", "distribute", "engine", "export", "host", "model", "model_dir",
               "utils", "xla"},
    "estimator": {"contract", "export", "facade", "model_dir"},  # the tf.compat.v1.estimator namespace
    "tpu_estimator": {"contract", "export", "facade", "model", "model_dir", "xla"},  # the old path of TPUEstimator
    "migration": {"_compat"},  # install(): the removed names resolve to this library
    "": {"_compat", "callbacks", "contract", "distribute", "estimator", "export", "facade", "inputs", "migration",
         "model", "model_dir", "tf1", "versions", "xla"},
    "__main__": {""},
    "examples": {""},
}
# Siblings that must never know each other, whatever ALLOWED comes to say.
STRANGERS = [("distribute", "model_dir"), ("tf1", "inputs"), ("tf1", "distribute"), ("host", "inputs"),
             ("host", "xla"), ("host", "distribute"), ("export", "host"),
             ("callbacks", "host"), ("callbacks", "inputs"), ("model_dir", "contract")]
PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "keras_tpu_estimator"
OPEN_WINGS = {"_compat", "estimator"}  # entered by submodule: `_compat.xla`, `estimator.tpu`


def _wing(source: pathlib.Path) -> str:
    parts = source.relative_to(PACKAGE).parts
    return "" if parts == ("__init__.py",) else parts[0].removesuffix(".py")


def _package_imports():
    """(source, its wing, line, the module imported, names) for every absolute import of the package."""
    for source in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                module, names = node.module or "", [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "keras_tpu_estimator":
                        yield source, _wing(source), node.lineno, alias.name, []
                continue
            else:
                continue
            if module.split(".")[0] == "keras_tpu_estimator":
                yield source, _wing(source), node.lineno, module, names


def _targets(module: str, names: list[str]) -> list[str]:
    parts = module.split(".")
    if len(parts) > 1:
        return [parts[1]]
    return [n for n in names if n in ALLOWED] or [""]


def test_every_wing_imports_only_the_wings_it_may():
    wrong = []
    for source, wing, line, module, names in _package_imports():
        for target in _targets(module, names):
            if target != wing and target not in ALLOWED[wing]:
                wrong.append(f"{source.relative_to(PACKAGE)}:{line} ({wing or 'kte'}) imports {target or 'kte'}")
    assert not wrong, wrong


def test_the_wings_form_one_order():
    order = list(graphlib.TopologicalSorter(ALLOWED).static_order())  # raises CycleError on a cycle
    assert set(order) == set(ALLOWED)


def test_strangers_stay_strangers():
    for a, b in STRANGERS:
        assert b not in ALLOWED[a] and a not in ALLOWED[b], (a, b)


def test_a_wing_is_entered_from_outside_only_through_its_init():
    deep = []
    for source, wing, line, module, _ in _package_imports():
        parts = module.split(".")
        if len(parts) > 2 and parts[1] not in OPEN_WINGS:
            deep.append(f"{source.relative_to(PACKAGE)}:{line} imports {module}")
        if len(parts) == 2 and parts[1] == wing and wing in WINGS - OPEN_WINGS:
            deep.append(f"{source.relative_to(PACKAGE)}:{line} imports its own wing's __init__ (use `from .x import`)")
    assert not deep, deep


WINGS = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def test_every_wing_and_top_module_is_placed_and_each_wing_teaches_its_concept():
    placed = WINGS | {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"} | {""}
    assert placed == set(ALLOWED)
    for wing in WINGS:
        doc = ast.get_docstring(ast.parse((PACKAGE / wing / "__init__.py").read_text())) or ""
        assert len(doc.split()) >= 12, f"{wing}/__init__.py: a docstring that teaches the wing's concept"


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
