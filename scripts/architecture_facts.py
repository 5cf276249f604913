"""The package's plan in numbers: rooms, floors and arrows, and the walks of `mode`, `batch_size`, `params`.

- *rooms*: the modules that hold code (a wing's `__init__`, which only re-exports, is its door,
  not a room); *arrows*: the distinct imports between rooms, an import through a wing's
  `__init__` counted to the module that defines the name; *floors*: the longest chain of arrows.
- *walks*: `ModelFnRunner.distribute_input` (which builds the mode) on a small TF1 `model_fn`, on
  the strategy path, TRAIN then EVAL; a room is crossed when a function of that module has a
  parameter or local of that name; a *climb* is a call from such a function into one of a room
  on a higher floor (a callback back up the plan). `--wings` counts by top-level entry instead:
  a subpackage (a wing, or `_compat/`) is one room, a top-level module another.

Run: `python scripts/architecture_facts.py [PACKAGE_DIR] [--walks] [--wings]`
"""

from __future__ import annotations

import ast
import functools
import os
import sys

NAMES = ("mode", "batch_size", "params")


def _modules(root: str) -> dict[str, tuple[str, bool]]:
    package = os.path.basename(os.path.normpath(root))
    found = {}
    for folder, _, files in os.walk(root):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                name = os.path.relpath(path, os.path.dirname(os.path.normpath(root)))[:-3].replace(os.sep, ".")
                is_init = name.endswith(".__init__")
                found[name.removesuffix(".__init__") if is_init else name] = (path, is_init)
    assert package in found
    return found


def _defining_module(modules: dict, module: str, name: str, seen: tuple = ()) -> str:
    """The module that defines `name` imported from `module` (following `__init__` re-exports)."""
    if f"{module}.{name}" in modules:
        return f"{module}.{name}"
    path, is_init = modules[module]
    if not is_init or module in seen:
        return module
    for node in ast.parse(open(path).read()).body:
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            source = _absolute(module, True, node)
            if source in modules:
                return _defining_module(modules, source, name, (*seen, module))
    return module


def _absolute(module: str, is_init: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_init else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def arrows(root: str) -> dict[str, set[str]]:
    """`{room: rooms it imports}`."""
    modules = _modules(root)
    package = os.path.basename(os.path.normpath(root))
    edges: dict[str, set[str]] = {}
    for module, (path, is_init) in modules.items():
        if is_init and module != package and _only_imports(path):
            continue
        targets = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(module, is_init, node)
                if source.split(".")[0] == package and source in modules:
                    targets |= {_defining_module(modules, source, a.name) for a in node.names}
        edges[module] = {t for t in targets if t != module and t != package}
    return edges


def _only_imports(path: str) -> bool:
    body = ast.parse(open(path).read()).body
    return all(isinstance(n, ast.ImportFrom | ast.Import | ast.Expr | ast.Assign) for n in body)


def floors(edges: dict[str, set[str]]) -> dict[str, int]:
    @functools.lru_cache(None)
    def floor(module: str, stack: tuple = ()) -> int:
        below = [floor(t, (*stack, module)) for t in edges.get(module, ()) if t not in stack and t in edges]
        return 1 + max(below, default=0)

    return {module: floor(module) for module in edges}


def walks(root: str, by_wing: bool) -> dict[str, tuple[int, int]]:
    """`{name: (rooms crossed, climbs)}` for one TRAIN and one EVAL `distribute_input`."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, os.path.dirname(os.path.abspath(os.path.normpath(root))))
    import numpy as np
    import tensorflow as tf

    import keras_tpu_estimator as kte

    package_dir = os.path.dirname(kte.__file__)
    floor = floors(arrows(package_dir))

    def room(filename: str) -> str:
        name = os.path.relpath(filename, os.path.dirname(package_dir))[:-3].replace(os.sep, ".")
        name = name.removesuffix(".__init__")
        return ".".join(name.split(".")[:2]) if by_wing else name

    def model_fn(features, labels, mode, params):
        loss = tf.reduce_mean(tf.square(tf.compat.v1.layers.dense(features["x"], 1) - labels))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return kte.TPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)

    def input_fn(params):
        x, y = np.ones([64, 4], np.float32), np.ones([64, 1], np.float32)
        return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(params["batch_size"], True)

    model = kte.EstimatorModel(model_fn, train_batch_size=16, eval_batch_size=16, use_tpu=True)
    crossed: dict[str, set] = {name: set() for name in NAMES}
    climbs: dict[str, set] = {name: set() for name in NAMES}

    def profile(frame, event, _):
        if event != "return" or not frame.f_code.co_filename.startswith(package_dir):
            return
        here = room(frame.f_code.co_filename)
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(package_dir):
            caller = caller.f_back
        for name in NAMES:
            if name in frame.f_locals:
                crossed[name].add(here)
                if caller is not None and name in caller.f_locals:
                    there = room(caller.f_code.co_filename)
                    if there != here and _floor_of(floor, here) > _floor_of(floor, there):
                        climbs[name].add((there, here))

    for mode in (kte.ModeKeys.TRAIN, kte.ModeKeys.EVAL):
        sys.setprofile(profile)
        try:
            model._runner.distribute_input(input_fn, mode)
        finally:
            sys.setprofile(None)
    if os.environ.get("WALKS_VERBOSE"):
        print({name: sorted(crossed[name]) for name in NAMES}, {name: sorted(climbs[name]) for name in NAMES})
    return {name: (len(crossed[name]), len(climbs[name])) for name in NAMES}


def _floor_of(floor: dict[str, int], room: str) -> int:
    return max((f for module, f in floor.items() if module == room or module.startswith(room + ".")), default=0)


def by_entry(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The arrows between the package's top-level entries: a subpackage (a wing) is one room."""
    def entry(module: str) -> str:
        return ".".join(module.split(".")[:2])

    grouped: dict[str, set[str]] = {}
    for module, targets in edges.items():
        grouped.setdefault(entry(module), set()).update(entry(t) for t in targets)
    return {room: targets - {room} for room, targets in grouped.items()}


def main(argv: list[str]) -> None:
    root = next((a for a in argv if not a.startswith("--")), os.path.join(os.path.dirname(__file__), "..",
                                                                         "keras_tpu_estimator"))
    edges = by_entry(arrows(root)) if "--wings" in argv else arrows(root)
    print(f"rooms {len(edges)}, arrows {sum(map(len, edges.values()))}, floors {max(floors(edges).values())}")
    if "--walks" in argv:
        for name, (rooms, up) in walks(root, "--wings" in argv).items():
            print(f"{name}: {rooms} rooms, {up} climbs")


if __name__ == "__main__":
    main(sys.argv[1:])
