"""The `.meta` beside each checkpoint: a TF1 MetaGraphDef that the checkpoint restores into.

TPUEstimator's `Saver` wrote `model.ckpt-<N>.meta` with every checkpoint.
TF1 programs copy it with the checkpoint (google-research/albert keeps its
best checkpoint as `.index`, `.data-*` and `.meta`) or load it with
`tf.compat.v1.train.import_meta_graph(path + ".meta")`, `saver.restore(session,
path)` and read variables by name. The meta graph written here holds what
those programs use: every checkpoint variable under its TF1 name, shape and
dtype, in the `variables` collection (the trainable ones also in
`trainable_variables`, `global_step` in its own), and the Estimator's saver
(sharded, V2, `max_to_keep`, `keep_checkpoint_every_n_hours`; its
`saver_def` restores `model.ckpt-<N>`). Variables are resource variables, or
TF1 reference variables in a program that disabled resource variables
(`tf.compat.v1.disable_v2_behavior()`), as the original's were. The model's
ops (loss, train_op, input pipeline) are not in it.

The variables do not change after a model is built, so a meta graph is built
once per variable signature and each save writes the same bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from keras_tpu_estimator.utils import get_logger

_log = get_logger(__name__)

META_SUFFIX = ".meta"
GLOBAL_STEP = "global_step"

Signature = tuple[tuple[str, tuple[int, ...], str, bool], ...]


def variable_signature(variables: Mapping[str, Any]) -> Signature:
    """`((name, shape, dtype, trainable), ...)` of `{TF1 name: variable}`, in its order.

    Example:

    ```python
    variable_signature({"w": tf.Variable([1.0, 2.0])})   # (("w", (2,), "float32", True),)
    ```
    """
    return tuple(
        (name, tuple(int(d) for d in variable.shape), tf.as_dtype(variable.dtype).name, bool(variable.trainable))
        for name, variable in variables.items()
    )


def meta_graph_bytes(
    variables: Mapping[str, Any],
    max_to_keep: int | None = 5,
    keep_checkpoint_every_n_hours: float | None = None,
) -> bytes:
    """The serialized `MetaGraphDef` to write as `model.ckpt-<N>.meta` beside a checkpoint of `variables`.

    Built once per variable signature, saver settings and variable kind (cached).

    Example:

    ```python
    meta = meta_graph_bytes(model.checkpoint_variables, max_to_keep=5)
    with tf.io.gfile.GFile("/tmp/m/model.ckpt-10.meta", "wb") as f:
        f.write(meta)
    ```
    """
    return _build(
        variable_signature(variables),
        max_to_keep or 0,
        float(keep_checkpoint_every_n_hours or 10000.0),  # the Saver's default: none kept by age
        tf.compat.v1.resource_variables_enabled(),
    )


@functools.lru_cache(maxsize=8)
def _build(signature: Signature, max_to_keep: int, hours: float, resource: bool) -> bytes:
    graph = tf.Graph()
    with graph.as_default():
        by_name = {}
        for name, shape, dtype, trainable in signature:
            collections = [tf.compat.v1.GraphKeys.GLOBAL_VARIABLES]
            if name == GLOBAL_STEP:  # TPUEstimator's: a resource variable in its own collection
                collections.append(tf.compat.v1.GraphKeys.GLOBAL_STEP)
            if trainable:
                collections.append(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
            variable = tf.compat.v1.get_variable(
                name, shape, tf.as_dtype(dtype), initializer=tf.compat.v1.zeros_initializer(),
                trainable=trainable, collections=collections, use_resource=resource or name == GLOBAL_STEP,
            )
            if variable.op.name != name:
                _log.warning(
                    "In the checkpoints' .meta, variable '%s' is named '%s' in the graph (a name "
                    "clash); the saver still restores it from '%s'.", name, variable.op.name, name,
                )
            by_name[name] = variable
        saver = tf.compat.v1.train.Saver(
            by_name, sharded=True, max_to_keep=max_to_keep,
            keep_checkpoint_every_n_hours=hours, save_relative_paths=True,
        )
        graph.add_to_collection(tf.compat.v1.GraphKeys.SAVERS, saver)
        meta = tf.compat.v1.train.export_meta_graph(graph=graph, saver_def=saver.saver_def)
    return meta.SerializeToString()
