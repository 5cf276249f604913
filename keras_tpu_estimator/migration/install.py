"""`install()`: the names of the removed estimator resolve to this library, so old programs run unchanged.

TensorFlow 2.16 removed `tf.estimator` and the `tensorflow_estimator`
package. After `install()`:

- `tf.estimator`, `tf.compat.v1.estimator` and `tf.compat.v2.estimator` are
  `keras_tpu_estimator.estimator` (so `from tensorflow.compat.v1 import
  estimator as tf_estimator` and `import tensorflow.compat.v1 as tf;
  tf.estimator.tpu.TPUEstimator` work);
- the module paths programs import (`tensorflow_estimator.python.estimator.
  tpu.tpu_estimator`, `...tpu.tpu_config`, `...estimator`, `...model_fn`,
  `tensorflow.python.estimator.estimator`, ...; the list is `MODULE_PATHS`)
  are this library's modules.

Importing `keras_tpu_estimator` changes nothing in TensorFlow; `install()` is
explicit and idempotent, and `python -m keras_tpu_estimator script.py` calls
it before running the script. `tf.contrib` stays absent, as in TF 2.x.

Example:

(Not run by the docs tests: `install()` changes TensorFlow for the rest of the process.)

```text
import keras_tpu_estimator
keras_tpu_estimator.install()

import tensorflow as tf
estimator = tf.estimator.tpu.TPUEstimator(model_fn, config=tf.estimator.tpu.RunConfig(), train_batch_size=8)
```
"""

from __future__ import annotations

import importlib
import sys
import types

import tensorflow as tf

from keras_tpu_estimator import _compat

# Where `tf.estimator` and its subpackages are reached as module paths (`from X import Y` needs them).
NAMESPACE_PATHS = ("tensorflow.estimator", "tensorflow.compat.v1.estimator", "tensorflow.compat.v2.estimator")

# Old module path (relative to `tensorflow_estimator.python.estimator`, also under
# `tensorflow.python.estimator`) -> the module of this library that stands in for it.
MODULE_PATHS = {
    "estimator_lib": "keras_tpu_estimator.estimator",
    "estimator": "keras_tpu_estimator.facade.estimator",
    "model_fn": "keras_tpu_estimator.contract.spec",
    "mode_keys": "keras_tpu_estimator.contract.spec",
    "run_config": "keras_tpu_estimator.contract.config",
    "export": "keras_tpu_estimator.estimator.export",
    "export.export": "keras_tpu_estimator.export.serving",
    "export.export_lib": "keras_tpu_estimator.export.serving",
    "export.export_output": "keras_tpu_estimator.export.serving",
    "tpu": "keras_tpu_estimator.estimator.tpu",
    "tpu.tpu_estimator": "keras_tpu_estimator.tpu_estimator",
    "tpu.tpu_config": "keras_tpu_estimator.contract.config",
    "tpu.tpu_context": "keras_tpu_estimator.distribute.strategy",
    "tpu.util": "keras_tpu_estimator.contract.config",
    "exporter": "keras_tpu_estimator.facade.exporters",
    "training": "keras_tpu_estimator.facade.training",
    "early_stopping": "keras_tpu_estimator.facade.early_stopping",
    "hooks.hooks": "keras_tpu_estimator.facade.early_stopping",  # InMemoryEvaluatorHook
}
ESTIMATOR_PACKAGES = ("tensorflow_estimator.python.estimator", "tensorflow.python.estimator")


def _namespace() -> types.ModuleType:
    return importlib.import_module("keras_tpu_estimator.estimator")


def _package(name: str) -> types.ModuleType:
    """The module `name` in `sys.modules`, made (as an empty package) when missing, and set on its parent."""
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name, f"Stands in for `{name}` (keras_tpu_estimator.install()).")
        module.__path__ = []  # a package: its children are found in sys.modules
        sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(_package(parent) if parent != "tensorflow.python" else _compat.tensorflow_python(),
                child, module)
    return module


def _alias(name: str, module: types.ModuleType) -> None:
    """Makes `module` importable as `name` and an attribute of `name`'s parent."""
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    owner = _compat.tensorflow_python() if parent == "tensorflow.python" else _package(parent)
    setattr(owner, child, module)


def _submodules(module: types.ModuleType, prefix: str) -> dict[str, types.ModuleType]:
    """`module` and its subpackages, keyed by the dotted path each has under `prefix`."""
    found = {prefix: module}
    for name, value in vars(module).items():
        if isinstance(value, types.ModuleType) and value.__name__.startswith(module.__name__ + "."):
            found.update(_submodules(value, f"{prefix}.{name}"))
    return found


def install() -> None:
    """Makes `tf.estimator`, `tf.compat.v1.estimator` and the `tensorflow_estimator` module paths this library.

    Idempotent. What it sets: `estimator` on `tensorflow`, every
    `tensorflow.compat.v1` module object and `tensorflow.compat.v2`; the
    `sys.modules` entries of `NAMESPACE_PATHS` and of `MODULE_PATHS` under
    `tensorflow_estimator.python.estimator` and `tensorflow.python.estimator`;
    `tensorflow_estimator` itself (its `estimator` attribute is the
    namespace, as in the original package).

    Example:

    (Not run by the docs tests: it changes TensorFlow for the rest of the process.)

    ```text
    keras_tpu_estimator.install()
    from tensorflow_estimator.python.estimator.tpu import tpu_estimator  # this library's
    ```
    """
    namespace = _namespace()
    for owner in (tf, *_compat.compat_v1_modules(), importlib.import_module("tensorflow.compat.v2")):
        owner.estimator = namespace
    for path in NAMESPACE_PATHS:
        for name, module in _submodules(namespace, path).items():
            sys.modules[name] = module
    _package("tensorflow_estimator").estimator = namespace
    for package in ESTIMATOR_PACKAGES:
        for relative, target in MODULE_PATHS.items():
            _alias(f"{package}.{relative}", importlib.import_module(target))


def installed() -> bool:
    """True once `install()` has run in this process.

    Example:

    >>> installed()  # before install()
    False
    """
    return sys.modules.get("tensorflow.compat.v1.estimator") is _namespace()
