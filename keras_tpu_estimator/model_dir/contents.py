"""What is in a `model_dir`: its checkpoints found by scanning, leftovers of interrupted saves, repair.

`tf.train.latest_checkpoint` trusts the `checkpoint` state file; when that
file is missing or names an older checkpoint (a crash between a checkpoint
and its state update, a user's cleanup), training would restart from it and
overwrite newer work. Here the checkpoints are the `model.ckpt-<N>.index`
files themselves, newest first, and the state file is a cache that a trainer
rewrites when it disagrees.

A trainer (the only writer of a `model_dir`, see `model_dir/lock.py`;
`CheckpointSaver` in practice) removes what interrupted saves left at start
(this library's and TensorFlow's temporary names only), then, once it knows
the step training resumes from, sets aside newer checkpoints (a damaged one
that could not be restored, so nothing newer is ever overwritten) and
rewrites the state file from the scan. Readers (`evaluate`, `predict`)
change nothing.
"""

from __future__ import annotations

import re
import time
from typing import Any

import tensorflow as tf

from keras_tpu_estimator.utils import get_logger

from .checkpoints import CHECKPOINT_NAME
from .lock import LOCK_FILE
from .meta_graph import META_SUFFIX

_log = get_logger(__name__)

_INDEX = re.compile(rf"^{re.escape(CHECKPOINT_NAME)}-(\d+)\.index$")
_DATA = re.compile(rf"^{re.escape(CHECKPOINT_NAME)}-(\d+)\.data-\d+-of-\d+$")
_META = re.compile(rf"^{re.escape(CHECKPOINT_NAME)}-(\d+){re.escape(META_SUFFIX)}$")  # written before the index
_LEFTOVERS = (
    re.compile(rf"^{re.escape(CHECKPOINT_NAME)}-\d+_temp/?$"),  # write_checkpoint's shards before the merge
    re.compile(rf"^{re.escape(CHECKPOINT_NAME)}-\d+\..*tempstate\d*$"),  # TensorFlow's file writes
    re.compile(r"^checkpoint\.tmp[0-9a-f]+$"),  # the state file's atomic write
    re.compile(rf"^{re.escape(LOCK_FILE)}\.[0-9a-f]+\.tmp$"),  # a lock heartbeat's atomic write
)


def check_model_dir(model_dir: str) -> None:
    """Raises a ValueError naming `model_dir` when it exists and is not a directory.

    Example:

    ```python
    check_model_dir(model_dir)   # fine if missing: it is created when needed
    ```
    """
    if tf.io.gfile.exists(model_dir) and not tf.io.gfile.isdir(model_dir):
        raise ValueError(
            f"model_dir {model_dir} is a file, not a directory: pass a directory path "
            "(it holds checkpoints and summaries)."
        )


def _step(prefix: str) -> int:
    return int(prefix.rsplit("-", 1)[1])


def scanned_checkpoints(model_dir: str) -> list[str]:
    """Every checkpoint prefix in `model_dir` with an index file, newest step first."""
    if not tf.io.gfile.isdir(model_dir):
        return []
    steps = [int(m.group(1)) for m in map(_INDEX.match, tf.io.gfile.listdir(model_dir)) if m]
    return [f"{model_dir.rstrip('/')}/{CHECKPOINT_NAME}-{step}" for step in sorted(steps, reverse=True)]


def _state(model_dir: str) -> Any:
    """The parsed `checkpoint` state file, or None when it is missing or cannot be parsed."""
    try:
        return tf.train.get_checkpoint_state(model_dir)
    except (tf.errors.OpError, ValueError):
        return None


def _state_latest(model_dir: str) -> str | None:
    state = _state(model_dir)
    return state.model_checkpoint_path if state is not None else None


def checkpoints_newest_first(model_dir: str) -> list[str]:
    """The checkpoints of `model_dir`, newest first, found by scanning.

    Warns when the `checkpoint` state file is missing, or names an older
    checkpoint than the newest found (`tf.train.latest_checkpoint` would return
    it, or nothing).

    Example:

    ```python
    checkpoints_newest_first(model_dir)   # ["/tmp/m/model.ckpt-8", "/tmp/m/model.ckpt-4"]
    ```
    """
    found = scanned_checkpoints(model_dir)
    if not found:
        return found
    latest = _state_latest(model_dir)
    if latest is None:
        _log.warning(
            "The checkpoint state file %s/checkpoint is missing or unreadable; found %d "
            "checkpoint(s) by scanning, the newest %s.", model_dir, len(found), found[0],
        )
    elif _INDEX.match(latest.rsplit("/", 1)[-1] + ".index") and _step(latest) < _step(found[0]):
        _log.warning(
            "The checkpoint state file in %s names %s, but %s is newer; using the newer one.",
            model_dir, latest, found[0],
        )
    return found


def latest_checkpoint(model_dir: str) -> str | None:
    """The newest checkpoint of `model_dir` by scanning (see `checkpoints_newest_first`), or None."""
    found = checkpoints_newest_first(model_dir)
    return found[0] if found else None


def remove_leftovers(model_dir: str) -> list[str]:
    """Removes what interrupted saves left in `model_dir`; returns the names removed.

    Only temporary names of this library and of TensorFlow's writes, and data
    and `.meta` files of a checkpoint that never got its index (the index is
    written last), are removed. Call it only as the single writer of `model_dir`.
    """
    if not tf.io.gfile.isdir(model_dir):
        return []
    names = tf.io.gfile.listdir(model_dir)
    indexed = {m.group(1) for m in map(_INDEX.match, names) if m}
    removed = []
    for name in names:
        part = _DATA.match(name) or _META.match(name)
        if any(p.match(name) for p in _LEFTOVERS) or (part and part.group(1) not in indexed):
            path = f"{model_dir.rstrip('/')}/{name.rstrip('/')}"
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)
            removed.append(name.rstrip("/"))
    if removed:
        _log.warning("Removed what interrupted checkpoint saves left in %s: %s", model_dir, sorted(removed))
    return removed


def set_aside_newer(model_dir: str, step: int) -> list[str]:
    """Renames checkpoints newer than `step` to `model.ckpt-<N>.set-aside-<unix time>.*`; returns them.

    Training resumes from `step`; a newer checkpoint is one that could not be
    restored (damaged) or one the caller chose not to restore. Either way the
    next saves must not overwrite it: it stays, renamed, for inspection.
    """
    stamp = int(time.time())
    moved = []
    for prefix in scanned_checkpoints(model_dir):
        if _step(prefix) <= step:
            continue
        directory, base = prefix.rsplit("/", 1)
        parts = [
            name for name in tf.io.gfile.listdir(directory)
            if name.startswith(f"{base}.data-") or name == f"{base}{META_SUFFIX}"
        ]
        # The index last: until it moves the checkpoint is whole, and nothing is a leftover.
        for name in [*parts, f"{base}.index"]:
            suffix = name[len(base):]
            tf.io.gfile.rename(f"{directory}/{name}", f"{directory}/{base}.set-aside-{stamp}{suffix}")
        moved.append(prefix)
    if moved:
        _log.warning(
            "Training resumes from global step %d; set aside the newer checkpoint(s) %s as "
            "'<name>.set-aside-%d' so they are not overwritten.", step, moved, stamp,
        )
    return moved


def rewrite_state(model_dir: str) -> None:
    """Makes the `checkpoint` state file list the checkpoints found by scanning (newest last)."""
    found = scanned_checkpoints(model_dir)
    if not found:
        return
    state = _state(model_dir)
    if state is not None and state.model_checkpoint_path == found[0]:
        if sorted(state.all_model_checkpoint_paths) == sorted(found):
            return
    tf.compat.v1.train.update_checkpoint_state(
        model_dir, found[0], all_model_checkpoint_paths=list(reversed(found))
    )
