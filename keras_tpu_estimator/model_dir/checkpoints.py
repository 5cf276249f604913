"""Checkpoints in `model_dir`, keyed by TF1 variable names, as TPUEstimator wrote them.

A checkpoint here is a TensorFlow V2 bundle (`model.ckpt-<step>.index` and
`.data-*`) whose keys are the TF1 names (`dense/kernel`, `global_step`,
`dense/kernel/Adam`). So `tf.train.list_variables`, `tf.train.load_variable`,
`tf.compat.v1.train.init_from_checkpoint` and checkpoints written by TF1's
`Saver` all work with it, in both directions.

`tf.train.CheckpointManager` does the numbering, the `checkpoint` state file
(what `tf.train.latest_checkpoint` reads) and `keep_checkpoint_max`; this
module only writes and reads the bundle. A bundle is written under a temporary
prefix and merged into place (`MergeV2Checkpoints`), and the state file is
updated only after that, so `latest_checkpoint` never names a partial write.
The `.meta` TPUEstimator's `Saver` wrote beside each checkpoint
(`model_dir/meta_graph.py`) is written before the merge: a checkpoint (an index) always
has its `.meta`, and a `.meta` without an index is a leftover.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import tensorflow as tf

from keras_tpu_estimator import _compat

from .meta_graph import META_SUFFIX

CHECKPOINT_NAME = "model.ckpt"


class DamagedCheckpointError(tf.errors.DataLossError):
    """A checkpoint's files cannot be read (truncated, corrupt or missing a part).

    A `tf.errors.DataLossError`, as TensorFlow's reader raises for a corrupt
    bundle, with the checkpoint's path and the reader's reason in the message.

    Example:

    ```python
    path = write_checkpoint(os.path.join(model_dir, "model.ckpt-8"), {"w": tf.Variable(1.0)})
    open(path + ".data-00000-of-00001", "wb").close()   # a save cut short: the data is gone
    try:
        restore_checkpoint(path, {"w": tf.Variable(0.0)})
    except DamagedCheckpointError as error:
        print(error.path, error.reason)
    ```
    """

    def __init__(self, path: str, reason: str, message: str | None = None):
        self.path, self.reason = path, reason
        super().__init__(None, None, message or f"The checkpoint {path} cannot be read: {reason}")


# TF's reader raises IndexError on a short read and RuntimeError on a short index.
READ_ERRORS = (tf.errors.OpError, IndexError, OSError, RuntimeError)


def _reason(error: BaseException) -> str:
    return getattr(error, "message", None) or str(error) or type(error).__name__


def write_checkpoint(prefix: str, variables: Mapping[str, Any], meta_graph: bytes | None = None) -> str:
    """Writes `{name: variable}` as a V2 bundle at `prefix`; returns `prefix`.

    The shards are written under `<prefix>_temp/` and merged into place; a
    failed write (a full disk) removes them and raises naming `prefix`.
    `meta_graph` (serialized, see `meta_graph.meta_graph_bytes`) is written to
    `<prefix>.meta` before the merge writes the index, so a checkpoint always
    has it.

    Example:

    ```python
    write_checkpoint("/tmp/m/model.ckpt-10", model.variables_by_name)
    ```
    """
    names = sorted(variables)
    temporary = f"{prefix}_temp/part"
    rewriting = meta_graph is not None and tf.io.gfile.exists(prefix + ".index")  # its .meta is not ours to remove
    try:
        with tf.device("/cpu:0"):
            tensors = [tf.convert_to_tensor(variables[name]) for name in names]
            tf.raw_ops.SaveV2(
                prefix=temporary, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors
            )
            if meta_graph is not None:
                with tf.io.gfile.GFile(prefix + META_SUFFIX, "wb") as file:
                    file.write(meta_graph)
            tf.raw_ops.MergeV2Checkpoints(
                checkpoint_prefixes=[temporary], destination_prefix=prefix, delete_old_dirs=True
            )
    except tf.errors.OpError as error:
        if tf.io.gfile.exists(f"{prefix}_temp"):
            tf.io.gfile.rmtree(f"{prefix}_temp")
        if meta_graph is not None and not rewriting:
            _remove_if_exists(prefix + META_SUFFIX)
        raise type(error)(
            None, None, f"Could not write the checkpoint {prefix} (its partial files were removed): "
            f"{error.message}. Check that the directory exists, is writable and has space."
        ) from error
    return prefix


def _remove_if_exists(path: str) -> None:
    try:
        tf.io.gfile.remove(path)
    except tf.errors.NotFoundError:
        pass


def open_checkpoint(path: str) -> tuple[Any, dict[str, list[int]]]:
    """`(reader, {name: shape})` of the checkpoint prefix `path`.

    Raises:
        DamagedCheckpointError: its index cannot be read.
    """
    try:
        reader = tf.train.load_checkpoint(path)
        return reader, reader.get_variable_to_shape_map()
    except READ_ERRORS as error:
        raise DamagedCheckpointError(path, _reason(error)) from error


def restore_checkpoint(
    path: str,
    variables: Mapping[str, Any],
    name_map: Mapping[str, str] | None = None,
    allow_missing: Sequence[str] = (),
) -> list[str]:
    """Assigns each variable the value stored under its name (or `name_map[name]`).

    Args:
        path: A checkpoint prefix or a directory (its latest checkpoint).
        variables: `{name: variable}` to restore.
        name_map: Checkpoint name to read for a variable name, when they differ.
        allow_missing: Names that may be absent from the checkpoint (left as they are).

    Returns:
        The names restored.

    Every value is read before any variable is assigned, so a checkpoint
    that cannot be read leaves the variables as they were.

    Raises:
        ValueError: the checkpoint lacks some names, or a shape differs; the
            message lists them and what the checkpoint holds.
        DamagedCheckpointError: its files cannot be read.
    """
    path = resolve_checkpoint_path(path)
    reader, shapes = open_checkpoint(path)
    name_map = dict(name_map or {})
    missing = [
        name for name in variables
        if name_map.get(name, name) not in shapes and name not in allow_missing
    ]
    if missing:
        raise ValueError(
            f"The checkpoint {path} has no value for {len(missing)} variable(s) of the model: "
            f"{sorted(missing)}. It holds: {sorted(shapes)}. Restore from a checkpoint written "
            "for this model_fn, or map the names (WarmStartSettings.var_name_to_prev_var_name)."
        )
    values = {}
    for name, variable in variables.items():
        source = name_map.get(name, name)
        if source not in shapes:
            continue
        if list(shapes[source]) != list(variable.shape):
            raise ValueError(
                f"Shape mismatch for '{name}': the model has {list(variable.shape)}, the "
                f"checkpoint {path} has {list(shapes[source])} under '{source}'."
            )
        try:
            values[name] = reader.get_tensor(source)
        except READ_ERRORS as error:
            raise DamagedCheckpointError(path, f"reading '{source}': {_reason(error)}") from error
    for name, value in values.items():
        variables[name].assign(tf.cast(value, variables[name].dtype))
    return list(values)


def resolve_checkpoint_path(path: str) -> str:
    """A checkpoint prefix from a prefix or a directory; ValueError when there is none."""
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise ValueError(f"No checkpoint found in {path}.")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise ValueError(f"No checkpoint found at {path} (no {path}.index).")
    return path


def checkpoint_step(path: str) -> int:
    """The global step stored in a checkpoint (0 when it has none).

    Raises:
        DamagedCheckpointError: the checkpoint cannot be read.
    """
    try:
        reader = tf.train.load_checkpoint(path)
        return int(reader.get_tensor("global_step")) if reader.has_tensor("global_step") else 0
    except READ_ERRORS as error:
        raise DamagedCheckpointError(path, _reason(error)) from error


def init_from_checkpoint(
    variables: Mapping[str, Any],
    ckpt_dir_or_file: str,
    assignment_map: Mapping[str, Any],
    only: Collection[str] | None = None,
) -> list[str]:
    """TF1's `init_from_checkpoint` rules, applied to `{name: variable}` now.

    `assignment_map` maps checkpoint names to model names: `"scope/": "scope2/"`
    maps every model variable under `scope2/` to the same name under `scope/`
    (`"/"` is the root); `"name": "name2"` (or a variable) maps one variable.
    `only` limits the assignment to those model names (the variables being
    initialised now); the map is still checked against all of `variables`.

    Returns:
        The model variable names assigned.

    Raises:
        ValueError: a mapped name is missing from the checkpoint or the model.
    """
    by_value = {id(getattr(v, "value", v)): n for n, v in variables.items()}
    name_map: dict[str, str] = {}
    for source, target in assignment_map.items():
        if not isinstance(target, str):
            target = by_value.get(id(target)) or getattr(target, "name", str(target)).split(":")[0]
        if source.endswith("/") or source == "/":
            source_prefix = "" if source == "/" else source
            target_prefix = "" if target == "/" else target if target.endswith("/") else target + "/"
            matched = {n: source_prefix + n[len(target_prefix):] for n in variables if n.startswith(target_prefix)}
            if not matched:
                raise ValueError(
                    f"init_from_checkpoint: no model variable is under '{target_prefix}'. "
                    f"Model variables: {sorted(variables)}"
                )
            name_map.update(matched)
        else:
            if target not in variables:
                raise ValueError(
                    f"init_from_checkpoint: '{target}' is not a model variable. "
                    f"Model variables: {sorted(variables)}"
                )
            name_map[target] = source
    if only is not None:
        name_map = {n: source for n, source in name_map.items() if n in only}
    if not name_map:
        return []
    return restore_checkpoint(
        ckpt_dir_or_file, {n: variables[n] for n in name_map}, name_map=name_map
    )


class CheckpointKeeper:
    """Numbered checkpoints of a model's TF1-named variables in `model_dir`.

    Args:
        model_dir: Directory for `model.ckpt-<step>` files and the `checkpoint` state file.
        variables: `{TF1 name: variable}` to save and restore.
        max_to_keep: `keep_checkpoint_max` (None keeps all).
        keep_checkpoint_every_n_hours: Also keep one checkpoint per this many hours.
        meta_graph: A serialized `MetaGraphDef` written as `model.ckpt-<step>.meta`
            with every checkpoint (`meta_graph.meta_graph_bytes`), or None for none.

    Example:

    ```python
    keeper = CheckpointKeeper(model_dir, model.variables_by_name, max_to_keep=5)
    keeper.save(step=model.global_step)
    tf.train.latest_checkpoint(model_dir)   # ".../model.ckpt-<step>"
    ```
    """

    def __init__(
        self,
        model_dir: str,
        variables: Mapping[str, Any],
        max_to_keep: int | None = 5,
        keep_checkpoint_every_n_hours: float | None = None,
        meta_graph: bytes | None = None,
    ):
        self._variables = variables
        self._prefix = os.path.join(model_dir, CHECKPOINT_NAME)
        self._manager = tf.train.CheckpointManager(
            _compat.checkpoint_for_manager(lambda prefix: write_checkpoint(prefix, variables, meta_graph)),
            model_dir,
            max_to_keep=max_to_keep or None,
            keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours,
            checkpoint_name=CHECKPOINT_NAME,
        )

    def save(self, step: int) -> str:
        """Writes `model.ckpt-<step>` and records it as the latest."""
        if self._manager.latest_checkpoint == f"{self._prefix}-{step}":
            return self._manager.latest_checkpoint
        before = set(self._manager.checkpoints)
        path = self._manager.save(checkpoint_number=step)
        # The manager deletes the index and data of checkpoints past max_to_keep; their
        # .meta goes too (one kept by keep_checkpoint_every_n_hours keeps its index, and its .meta).
        for removed in before - set(self._manager.checkpoints):
            if not tf.io.gfile.exists(removed + ".index"):
                _remove_if_exists(removed + META_SUFFIX)
        return path

    @property
    def latest(self) -> str | None:
        """The latest checkpoint prefix, or None."""
        return self._manager.latest_checkpoint

    @property
    def checkpoints(self) -> list[str]:
        """Checkpoints kept, oldest first."""
        return list(self._manager.checkpoints)


@dataclasses.dataclass(frozen=True)
class WarmStartSettings:
    """Which variables to initialise from another checkpoint before training starts.

    Used only when `model_dir` has no checkpoint yet, as in the Estimator.

    Args:
        ckpt_to_initialize_from: A checkpoint prefix or a directory.
        vars_to_warm_start: A regex over trainable variable names (default
            `".*"`: all trainable variables), or a list of regexes matched
            against all variable names (optimizer slots included).
        var_name_to_vocab_info: Not supported; must be empty.
        var_name_to_prev_var_name: `{name in model: name in checkpoint}`.

    Example:

    ```python
    WarmStartSettings("/pretrained", vars_to_warm_start="encoder/.*")
    ```
    """

    ckpt_to_initialize_from: str
    vars_to_warm_start: str | Sequence[str] | None = ".*"
    var_name_to_vocab_info: Mapping[str, Any] | None = None
    var_name_to_prev_var_name: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.var_name_to_vocab_info:
            raise ValueError("`var_name_to_vocab_info` (vocabulary remapping) is not supported.")

    def select(self, variables: Mapping[str, Any]) -> dict[str, Any]:
        """The subset of `{name: variable}` this setting warm-starts."""
        patterns = self.vars_to_warm_start
        if patterns is None:
            return {}
        if isinstance(patterns, str):
            regex = re.compile(patterns)
            return {n: v for n, v in variables.items() if v.trainable and regex.match(n)}
        regexes = [re.compile(p) for p in patterns]
        return {n: v for n, v in variables.items() if any(r.match(n) for r in regexes)}

    def apply(self, variables: Mapping[str, Any]) -> list[str]:
        """Assigns the selected variables from the checkpoint; returns their names."""
        return restore_checkpoint(
            self.ckpt_to_initialize_from,
            self.select(variables),
            name_map=self.var_name_to_prev_var_name,
        )


def as_warm_start_settings(value: str | WarmStartSettings | None) -> WarmStartSettings | None:
    """`warm_start_from` as settings: a path means every trainable variable."""
    if value is None or isinstance(value, WarmStartSettings):
        return value
    if isinstance(value, (str, os.PathLike)):
        return WarmStartSettings(os.fspath(value))
    raise ValueError(
        f"warm_start_from must be a string or a WarmStartSettings, instead got {type(value)}"
    )
