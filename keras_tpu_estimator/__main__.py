"""`python -m keras_tpu_estimator SCRIPT [ARGS...]`: runs an unchanged TPUEstimator program.

The script runs as `python SCRIPT ARGS...` would run it (`sys.argv`,
`__name__ == "__main__"`, its directory first on `sys.path`, absl flags and
`app.run`, its exit code), after `keras_tpu_estimator.install()` has put the
estimator names back (`tf.estimator`, `tf.compat.v1.estimator`,
`tensorflow_estimator...`).

Options, before the script:

    -m MODULE          run a module as `python -m MODULE` would
    --replicas N       split the CPU into N logical devices: `use_tpu=True` then runs
                       N replicas on a MirroredStrategy where no TPU is found

Example:

```bash
python -m keras_tpu_estimator resnet_main.py --use_tpu=false --model_dir=/tmp/resnet
python -m keras_tpu_estimator --replicas 2 mnist_tpu.py --use_tpu=true
```
"""

from __future__ import annotations

import os
import runpy
import sys

USAGE = (
    "usage: python -m keras_tpu_estimator [--replicas N] SCRIPT [ARGS...]\n"
    "       python -m keras_tpu_estimator [--replicas N] -m MODULE [ARGS...]\n"
    "Runs a TPUEstimator program unchanged on this library (see keras_tpu_estimator.install)."
)


def _parse(argv: list[str]) -> tuple[int | None, str | None, str | None, list[str]]:
    """`(replicas, script, module, program_args)` from the runner's own arguments."""
    replicas = None
    while argv and argv[0].startswith("-"):
        option, argv = argv[0], argv[1:]
        if option in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        if option == "-m" and argv:
            return replicas, None, argv[0], argv[1:]
        value = None
        if option.startswith("--replicas="):
            value = option.split("=", 1)[1]
        elif option == "--replicas" and argv:
            value, argv = argv[0], argv[1:]
        if value is None or not value.isdigit() or int(value) < 1:
            raise SystemExit(f"{USAGE}\nerror: unknown option or bad value: {option}")
        replicas = int(value)
    if not argv:
        raise SystemExit(f"{USAGE}\nerror: no script given")
    return replicas, argv[0], None, argv[1:]


def main(argv: list[str] | None = None) -> None:
    """Runs the program named in `argv` (default: `sys.argv[1:]`) under `install()`."""
    replicas, script, module, args = _parse(list(sys.argv[1:] if argv is None else argv))
    if script is not None and not os.path.exists(script):
        raise SystemExit(f"python -m keras_tpu_estimator: can't open file {script!r}: no such file")
    import keras_tpu_estimator

    if replicas is not None:
        keras_tpu_estimator.use_cpu_replicas(replicas)
    keras_tpu_estimator.install()
    if module is not None:
        sys.argv = [module, *args]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
