"""The TensorFlow and Keras releases this package supports, and the installed TensorFlow.

TensorFlow comes as several distributions of the same `tensorflow` package:
`tensorflow` (with CUDA), `tensorflow-cpu`, `tensorflow-tpu` (Cloud TPU VMs and
TPU notebook runtimes), `tf-nightly`. This package requires none of them, so
installing it never replaces the one a machine has; the `[cpu]`, `[gpu]` and
`[tpu]` extras install one where there is none. This module imports no
TensorFlow: it is what `import keras_tpu_estimator` checks first.

Run as a script, it prints the `tf_keras` requirement that matches the
installed TensorFlow (for `pip install --no-deps`, which keeps pip from
installing a second TensorFlow): `python -m keras_tpu_estimator.versions tf_keras`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys

SUPPORTED = {"tensorflow": ((2, 20), (2, 21)), "keras": ((3, 10), (3, 15))}
"""Inclusive `(major, minor)` ranges tested in CI; the extras in pyproject.toml use the same."""

DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tf-nightly", "tf-nightly-cpu",
                 "tensorflow-intel", "tensorflow-macos")
"""Distribution names that install the `tensorflow` package."""

_INSTALL_HELP = (
    "keras_tpu_estimator needs TensorFlow {low}-{high}, and none is installed. Install the "
    "distribution for this machine, for example: pip install 'keras-tpu-estimator[cpu]' "
    "(CPU only), 'keras-tpu-estimator[gpu]' (NVIDIA GPUs) or 'keras-tpu-estimator[tpu]' "
    "(Cloud TPU; on TPU VMs and TPU notebook runtimes tensorflow-tpu is usually installed already)."
)


def supported_range(name: str = "tensorflow") -> str:
    """`"2.20-2.21"`: the supported releases of `name`, for messages.

    Example:

    >>> supported_range()
    '2.20-2.21'
    """
    (low_major, low_minor), (high_major, high_minor) = SUPPORTED[name]
    return f"{low_major}.{low_minor}-{high_major}.{high_minor}"


def installed_distributions() -> list[str]:
    """The TensorFlow distributions installed in this environment (usually one).

    Example:

    ```python
    installed_distributions()   # ['tensorflow-cpu']
    ```
    """
    found = []
    for name in DISTRIBUTIONS:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(name)
    return found


def require_tensorflow() -> None:
    """Raises ImportError naming what to install when the `tensorflow` package is missing.

    Example:

    ```python
    require_tensorflow()   # nothing when TensorFlow is importable
    ```
    """
    if importlib.util.find_spec("tensorflow") is None:
        low, high = supported_range().split("-")
        raise ImportError(_INSTALL_HELP.format(low=low, high=high))


def tf_keras_requirement() -> str:
    """`tf_keras==2.21.*`: the tf_keras release that matches the installed TensorFlow.

    Example:

    ```python
    tf_keras_requirement()   # 'tf_keras==2.21.*' under TensorFlow 2.21
    ```
    """
    require_tensorflow()
    distributions = installed_distributions()
    if any(name.startswith("tf-nightly") for name in distributions):
        return "tf-keras-nightly"
    version = importlib.metadata.version(distributions[0]) if distributions else None
    if version is None:  # an unusual build: ask the package itself
        import tensorflow as tf

        version = tf.__version__
    major, minor = version.split(".")[:2]
    return f"tf_keras=={major}.{minor}.*"


if __name__ == "__main__":
    if sys.argv[1:] != ["tf_keras"]:
        sys.exit("usage: python -m keras_tpu_estimator.versions tf_keras")
    print(tf_keras_requirement())
