"""`RestoreOrWarmStart`: what each TPUEstimator call did before running, as a Keras callback.

The Estimator's session creation restored the latest checkpoint, else
warm-started. Here the candidates are `model_dir`'s checkpoints newest first
(found by scanning, `model_dir/contents.py`): one that cannot be read is skipped with a
warning naming it and why, and the next older one is restored; if none
restores, one error lists what was tried. A checkpoint named explicitly
(`checkpoint_path=`) is restored or is an error naming it.

In evaluation and prediction the mode's Scaffold saver decides which
checkpoint name restores a variable (`Saver(ema.variables_to_restore())`:
`w` from `w/ExponentialMovingAverage`), as the original's session restored
with that saver; variables it does not list restore by their own names.
Training restores every variable by its own name, so it goes on from the raw
weights after an evaluation of the averages. Then, as a TF1 session started,
the mode's Scaffold `init_op` and `init_fn` run when nothing was restored
(once per model), and its `local_init_op` at every call.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras

from keras_tpu_estimator.model_dir import (
    DamagedCheckpointError,
    WarmStartSettings,
    open_checkpoint,
    restore_checkpoint,
)
from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)


def _older_optimizer_names(names: list, model_names: dict, stored: set) -> dict:
    """`{name: name in the checkpoint}` for Keras optimizer variables saved by version 0.1.

    0.1 saved `keras_optimizer/<optimizer name>/<path>`, with the optimizer's
    per-process name (`sgd`, `sgd_1`) and slots named after `mlp__hidden__kernel`
    where the path is now the TF1 name (`mlp_hidden_kernel_momentum`). Used
    only when the checkpoint holds one such optimizer name.
    """
    owners = {key.split("/")[1] for key in stored if key.startswith("keras_optimizer/") and key.count("/") >= 2}
    if len(owners) != 1:
        return {}
    owner = owners.pop()
    prefixes = sorted((v for v in model_names if "/" in v), key=len, reverse=True)
    older = {}
    for name in names:
        relative = name[len("keras_optimizer/"):]
        forms = [relative]
        for variable in prefixes:
            if relative.startswith(variable.replace("/", "_") + "_"):
                forms.append(variable.replace("/", "__") + relative[len(variable):])
                break
        for form in forms:
            if name not in stored and f"keras_optimizer/{owner}/{form}" in stored:
                older[name] = f"keras_optimizer/{owner}/{form}"
                break
    return older


def _scaffold_saver_names(model: keras.Model, mode: str) -> dict[str, str]:
    """`{variable: checkpoint name}` of the mode's Scaffold saver (`ModelFnRunner.restore_names`)."""
    runner = getattr(model, "_runner", None)
    return runner.restore_names(mode) if hasattr(runner, "restore_names") else {}


def _start_session(model: keras.Model, mode: str, restored: bool) -> None:
    """The Scaffold's `init_op` / `init_fn` (nothing restored) and `local_init_op` (`ModelFnRunner.start_session`)."""
    runner = getattr(model, "_runner", None)
    if hasattr(runner, "start_session"):
        runner.start_session(mode, restored)


class RestoreOrWarmStart(keras.callbacks.Callback):
    """Before the first execution: restore a checkpoint, else apply warm-start settings.

    Args:
        checkpoint: A list of candidate checkpoint prefixes, newest first (the
            newest that can be read is restored; `model_dir`'s checkpoints), one
            prefix (that checkpoint or an error), or None (warm-start, if set).
        warm_start: Applied when there is no checkpoint.

    Attributes:
        restored: The prefix restored, or None.
        damaged: `[(prefix, reason)]` of the candidates that could not be read.

    Example:

    ```python
    from keras_tpu_estimator.model_dir import checkpoints_newest_first

    model.fit(input_fn, callbacks=[RestoreOrWarmStart(checkpoints_newest_first(model_dir), None),
                                   kte.StopAtStep(steps=1)])
    ```
    """

    def __init__(self, checkpoint: str | Sequence[str] | None, warm_start: WarmStartSettings | None):
        super().__init__()
        self._explicit = isinstance(checkpoint, str)
        self._candidates = [checkpoint] if self._explicit else list(checkpoint or [])
        self._warm_start = warm_start
        self.restored: str | None = None
        self.damaged: list[tuple[str, str]] = []

    def _restore_one(self, path: str, mode: str) -> None:
        variables = self.model.checkpoint_variables
        optimizer = [name for name in variables if name.startswith("keras_optimizer/")]
        stored = set(open_checkpoint(path)[1])
        name_map = _older_optimizer_names(optimizer, self.model.variables_by_name, stored)
        scaffold = _scaffold_saver_names(self.model, mode)
        absent = sorted(key for key in scaffold.values() if key not in stored)
        if absent:
            raise ValueError(
                f"The Scaffold's Saver restores {absent} (into {sorted(n for n, k in scaffold.items() if k in absent)}) "
                f"from the checkpoint {path}, which has no such names; it holds {sorted(stored)}. Write them in "
                "training (for ema.variables_to_restore(): ema.apply(...) in the train_op), or build the "
                "Saver from names the checkpoint holds."
            )
        name_map.update(scaffold)
        restore_checkpoint(path, variables, name_map=name_map, allow_missing=optimizer)
        fresh = [name for name in optimizer if name_map.get(name, name) not in stored]
        if fresh and any(name.startswith("keras_optimizer/") for name in stored):
            _log.warning(
                "The checkpoint %s has no value for %d Keras optimizer variable(s) (%s...): "
                "they start fresh.", path, len(fresh), fresh[:3],
            )

    def _restore(self, mode: str) -> None:
        self.restored, self.damaged = None, []
        for path in self._candidates:
            try:
                self._restore_one(path, mode)
            except DamagedCheckpointError as error:
                if self._explicit:
                    raise DamagedCheckpointError(
                        path, error.reason,
                        f"The checkpoint {path} (checkpoint_path) cannot be read: {error.reason}. "
                        "Pass another checkpoint, or none to use the newest in model_dir.",
                    ) from error
                self.damaged.append((path, error.reason))
                _log.warning(
                    "The checkpoint %s cannot be read (%s); trying the next older one.", path, error.reason
                )
                continue
            self.restored = path
            _start_session(self.model, mode, restored=True)
            return
        if self.damaged:
            tried = "; ".join(f"{path}: {reason}" for path, reason in self.damaged)
            raise DamagedCheckpointError(
                self.damaged[0][0], self.damaged[0][1],
                f"No checkpoint in model_dir can be read. Tried, newest first: {tried}. Move them "
                "away to start from scratch (or warm-start), or restore the files from a backup.",
            )
        if self._warm_start is not None:
            names = self._warm_start.apply(self.model.checkpoint_variables)
            _log.info("Warm-started %d variables from %s.", len(names), self._warm_start.ckpt_to_initialize_from)
        _start_session(self.model, mode, restored=False)

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._restore("train")

    def on_test_begin(self, logs: dict | None = None) -> None:
        self._restore("eval")

    def on_predict_begin(self, logs: dict | None = None) -> None:
        self._restore("infer")
