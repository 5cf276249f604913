"""`tf.estimator.Exporter` and its three flavours: what `EvalSpec(exporters=...)` runs after each evaluation.

`train_and_evaluate` (facade/training.py) calls
`exporter.export(estimator, model_dir/export/<name>, checkpoint_path,
eval_result, is_the_final_export)` after every evaluation. The exporters
here write through `estimator.export_saved_model` (a SavedModel under
`export_path/<unix time>`) and keep the newest `exports_to_keep` of those
directories, as the original's did:

- `LatestExporter` exports after every evaluation;
- `BestExporter` exports when `compare_fn` finds the evaluation better than
  the best so far, which it first reads back from the eval event files
  (`event_file_pattern`), so a restarted job keeps its best;
- `FinalExporter` exports once, at the end of training.

Example:

```python
exporter = LatestExporter("latest", serving_input_receiver_fn, exports_to_keep=3)
eval_spec = kte.estimator.EvalSpec(eval_input_fn, steps=1, exporters=[exporter])
```
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from keras_tpu_estimator.model_dir import evaluations
from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)
CompareFn = Callable[..., bool]


class Exporter:
    """A kind of model export: the base class `EvalSpec(exporters=...)` takes.

    A subclass gives a `name` (the directory under `model_dir/export`) and
    `export(...)`, which returns the export directory, or None when it skipped.

    Example:

    ```python
    class Logged(Exporter):
        name = "logged"

        def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
            print(eval_result["global_step"], checkpoint_path)
            return None
    ```
    """

    @property
    def name(self) -> str | None:
        """Directory name under `model_dir/export`; neither None nor empty."""
        return None

    def export(
        self,
        estimator: Any,
        export_path: str,
        checkpoint_path: str,
        eval_result: dict,
        is_the_final_export: bool,
    ) -> str | bytes | None:
        """Exports `estimator` at `checkpoint_path` under `export_path`.

        Args:
            estimator: The estimator being trained.
            export_path: Directory to write the export under.
            checkpoint_path: The checkpoint just evaluated.
            eval_result: What `estimator.evaluate` returned for it.
            is_the_final_export: True when the checkpoint reached `TrainSpec.max_steps`
                (always False without `max_steps`).

        Returns:
            The export directory, or None when the export is skipped.
        """
        return None


def _export_versions(export_dir_base: str) -> list[tuple[int, str]]:
    """`(version, path)` of the exports under `export_dir_base`: subdirectories named by 10 digits."""
    if not tf.io.gfile.isdir(export_dir_base):
        return []
    names = [name.rstrip("/") for name in tf.io.gfile.listdir(export_dir_base)]
    return sorted((int(n), os.path.join(export_dir_base, n)) for n in names if len(n) == 10 and n.isdigit())


def garbage_collect_exports(export_dir_base: str, exports_to_keep: int | None) -> None:
    """Deletes all but the `exports_to_keep` newest exports under `export_dir_base` (None keeps all).

    Example:

    ```python
    garbage_collect_exports("/tmp/m/export/latest", 5)
    ```
    """
    if exports_to_keep is None:
        return
    for _, path in _export_versions(export_dir_base)[:-exports_to_keep]:
        try:
            tf.io.gfile.rmtree(path)
        except tf.errors.NotFoundError as error:
            _log.warning("Can not delete %s recursively: %s", path, error)


def _after_newest_export(export_dir_base: str) -> None:
    """Waits until the clock has passed the newest export's timestamp.

    The original named exports by the current second and waited a second
    when that directory existed, so names only grew; waiting here keeps a
    new export newer than every kept one (the garbage collection keeps the
    largest names).
    """
    versions = _export_versions(export_dir_base)
    while versions and int(time.time()) <= versions[-1][0]:
        time.sleep(min(1.0, versions[-1][0] + 1 - time.time()) + 0.01)


class _SavedModelExport:
    """Exports through `estimator.export_saved_model`: what the three exporters share."""

    def __init__(self, name: str, serving_input_receiver_fn: Any, assets_extra: dict | None, as_text: bool):
        self.name = name
        self.serving_input_receiver_fn = serving_input_receiver_fn
        self.assets_extra = assets_extra
        self.as_text = as_text

    def __call__(self, estimator: Any, export_path: str, checkpoint_path: str) -> Any:
        _after_newest_export(export_path)
        return estimator.export_saved_model(
            export_path,
            self.serving_input_receiver_fn,
            assets_extra=self.assets_extra,
            as_text=self.as_text,
            checkpoint_path=checkpoint_path,
        )


def _check_exports_to_keep(exports_to_keep: int | None, message: str) -> None:
    if exports_to_keep is not None and exports_to_keep <= 0:
        raise ValueError(message)


class LatestExporter(Exporter):
    """Exports a SavedModel after every evaluation and keeps the newest `exports_to_keep`.

    Args:
        name: Directory under `model_dir/export`.
        serving_input_receiver_fn: Returns a `ServingInputReceiver`.
        assets_extra: `{destination under assets.extra: source file}` to copy in.
        as_text: Write `saved_model.pbtxt`.
        exports_to_keep: Exports kept (older ones deleted); None keeps all.

    Example:

    ```python
    kte.estimator.EvalSpec(eval_input_fn, exporters=LatestExporter("latest", serving_input_receiver_fn))
    ```
    """

    def __init__(
        self,
        name: str,
        serving_input_receiver_fn: Any,
        assets_extra: dict | None = None,
        as_text: bool = False,
        exports_to_keep: int | None = 5,
    ):
        self._export = _SavedModelExport(name, serving_input_receiver_fn, assets_extra, as_text)
        self._exports_to_keep = exports_to_keep
        _check_exports_to_keep(exports_to_keep, "`exports_to_keep`, if provided, must be positive number")

    @property
    def name(self) -> str:
        return self._export.name

    def export(
        self, estimator: Any, export_path: str, checkpoint_path: str, eval_result: dict,
        is_the_final_export: bool,
    ) -> str | bytes | None:
        path = self._export(estimator, export_path, checkpoint_path)
        garbage_collect_exports(export_path, self._exports_to_keep)
        return path


def _loss_smaller(best_eval_result: dict, current_eval_result: dict) -> bool:
    """The default `compare_fn`: True when the current evaluation's `loss` is smaller."""
    if not best_eval_result or "loss" not in best_eval_result:
        raise ValueError("best_eval_result cannot be empty or no loss is found in it.")
    if not current_eval_result or "loss" not in current_eval_result:
        raise ValueError("current_eval_result cannot be empty or no loss is found in it.")
    return best_eval_result["loss"] > current_eval_result["loss"]


def _positional_args(fn: Callable[..., Any]) -> list[str]:
    """The arguments the original's `fn_args` saw: positional ones, less what a `functools.partial` binds."""
    if isinstance(fn, functools.partial):
        return [a for a in _positional_args(fn.func)[len(fn.args):] if a not in (fn.keywords or {})]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    try:
        return [p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds]
    except (TypeError, ValueError):
        return []


def _check_compare_fn(compare_fn: CompareFn | None) -> None:
    if compare_fn is None:
        raise ValueError("`compare_fn` must not be None.")
    args = set(_positional_args(compare_fn))
    for needed in ("best_eval_result", "current_eval_result"):
        if needed not in args:
            raise ValueError(f"compare_fn ({compare_fn}) must include {needed} argument.")
    unexpected = list(args - {"best_eval_result", "current_eval_result"})
    if unexpected:
        raise ValueError(f"compare_fn ({compare_fn}) has following not expected args: {unexpected}")


class BestExporter(Exporter):
    """Exports a SavedModel when an evaluation beats the best so far (by `compare_fn`).

    The first export call of a `model_dir` reads the best result from the
    event files matching `model_dir/<event_file_pattern>` (the evaluations
    written so far, this one included), so a restarted job compares with
    its earlier best; the first evaluation of each run is always exported.

    Args:
        name: Directory under `model_dir/export`.
        serving_input_receiver_fn: Returns a `ServingInputReceiver`.
        event_file_pattern: Eval event files relative to `model_dir`; None
            starts from no best (not preemption-safe).
        compare_fn: `compare_fn(best_eval_result, current_eval_result)` is
            True when the current one is better; default: smaller `loss`.
        assets_extra: `{destination under assets.extra: source file}` to copy in.
        as_text: Write `saved_model.pbtxt`.
        exports_to_keep: Exports kept (older ones deleted); None keeps all.

    Example:

    ```python
    def higher_accuracy(best_eval_result, current_eval_result):
        return current_eval_result["accuracy"] > best_eval_result["accuracy"]

    BestExporter("best", serving_input_receiver_fn, compare_fn=higher_accuracy, exports_to_keep=1)
    ```
    """

    def __init__(
        self,
        name: str = "best_exporter",
        serving_input_receiver_fn: Any = None,
        event_file_pattern: str | None = "eval/*.tfevents.*",
        compare_fn: CompareFn | None = _loss_smaller,
        assets_extra: dict | None = None,
        as_text: bool = False,
        exports_to_keep: int | None = 5,
    ):
        _check_compare_fn(compare_fn)
        self._compare_fn = compare_fn
        self._export = _SavedModelExport(name, serving_input_receiver_fn, assets_extra, as_text)
        self._event_file_pattern = event_file_pattern
        self._model_dir: str | None = None
        self._best_eval_result: dict | None = None
        self._has_exported = False
        self._exports_to_keep = exports_to_keep
        _check_exports_to_keep(
            exports_to_keep, f"`exports_to_keep`, if provided, must be a positive number. Got {exports_to_keep}"
        )

    @property
    def name(self) -> str:
        return self._export.name

    def export(
        self, estimator: Any, export_path: str, checkpoint_path: str, eval_result: dict,
        is_the_final_export: bool,
    ) -> str | bytes | None:
        if self._model_dir != estimator.model_dir and self._event_file_pattern:
            _log.info("Loading best metric from event files.")
            self._model_dir = estimator.model_dir
            self._best_eval_result = self._best_in(os.path.join(self._model_dir, self._event_file_pattern))
        if (
            self._best_eval_result is None
            or not self._has_exported
            or self._compare_fn(best_eval_result=self._best_eval_result, current_eval_result=eval_result)
        ):
            _log.info("Performing best model export.")
            self._best_eval_result = eval_result
            path = self._export(estimator, export_path, checkpoint_path)
            garbage_collect_exports(export_path, self._exports_to_keep)
            self._has_exported = True
            return path
        return None

    def _best_in(self, file_pattern: str) -> dict | None:
        """The best evaluation in the event files matching `file_pattern`, by `compare_fn`."""
        best = None
        for _, result in evaluations(file_pattern):
            if best is None or self._compare_fn(best, result):
                best = result
        return best


class FinalExporter(Exporter):
    """Exports a SavedModel once, after the evaluation that ends training (`is_the_final_export`).

    Args:
        name: Directory under `model_dir/export`.
        serving_input_receiver_fn: Returns a `ServingInputReceiver`.
        assets_extra: `{destination under assets.extra: source file}` to copy in.
        as_text: Write `saved_model.pbtxt`.

    Example:

    ```python
    kte.estimator.EvalSpec(eval_input_fn, exporters=[FinalExporter("final", serving_input_receiver_fn)])
    ```
    """

    def __init__(
        self, name: str, serving_input_receiver_fn: Any, assets_extra: dict | None = None, as_text: bool = False
    ):
        self._export = _SavedModelExport(name, serving_input_receiver_fn, assets_extra, as_text)

    @property
    def name(self) -> str:
        return self._export.name

    def export(
        self, estimator: Any, export_path: str, checkpoint_path: str, eval_result: dict,
        is_the_final_export: bool,
    ) -> str | bytes | None:
        if not is_the_final_export:
            return None
        _log.info("Performing the final export in the end of training.")
        return self._export(estimator, export_path, checkpoint_path)
