"""Synchronous data parallelism for TF1 training code inside `model_fn`.

Under N replicas, each replica runs `model_fn` on its share of the global
batch. For the replicas to stay identical and to train exactly like one
replica fed the whole global batch, every replica must apply the same
update, computed from the **mean over replicas** of the per-replica
gradients (the gradient of the global batch's mean loss, for equal replica
batches). This module makes TF1 training code do that unchanged, whichever
way it computes and applies gradients:

- `tf.gradients` / `tf.compat.v1.gradients` with respect to variables return
  the replica mean at once, so gradient clipping and hand-written updates
  (BERT's `AdamWeightDecayOptimizer`, which assigns `m`, `v` and the weights
  itself) see the global-batch gradient on every replica.
- Stock `tf.compat.v1.train.Optimizer`s reduce at `apply_gradients` with a
  mean (TF sums; the gradients are divided by N first).
- An optimizer that overrides `apply_gradients` gets the replica mean from
  `compute_gradients` (so `minimize` works), and `CrossShardOptimizer`
  averages before calling the optimizer it wraps; with
  `reduction=tf.compat.v1.losses.Reduction.SUM` it sums instead.

Averaging twice is harmless: the mean of identical values is that value.
With one replica nothing changes. Active only while `synchronized_gradients()`
is entered (the model enters it around every `model_fn` trace).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from keras_tpu_estimator import _compat

_Optimizer = tf.compat.v1.train.Optimizer


def num_replicas() -> int:
    """The replicas in sync in the current replica context (1 in cross-replica context).

    Example:

    >>> num_replicas()
    1
    """
    context = tf.distribute.get_replica_context()
    return 1 if context is None else context.num_replicas_in_sync


def replica_mean(gradients: list, variables: list) -> list:
    """Averages the gradients of variables over the replicas; other entries pass through.

    Call it in a replica context. `IndexedSlices` become dense tensors.

    Example:

    ```python
    with tf.Graph().as_default():   # inside model_fn, in a replica
        tvars = [tf.compat.v1.get_variable("w", [2])]
        loss = tf.reduce_sum(tf.square(tvars[0]))
        grads = tf.compat.v1.gradients(loss, tvars)      # this replica's
        grads = replica_mean(grads, tvars)              # the same on every replica
    ```
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return list(gradients)
    picked = [
        i
        for i, (gradient, variable) in enumerate(zip(gradients, variables, strict=True))
        if gradient is not None and isinstance(variable, tf.Variable)
    ]
    if not picked:
        return list(gradients)
    dense = [tf.convert_to_tensor(gradients[i]) for i in picked]
    reduced = context.all_reduce(tf.distribute.ReduceOp.MEAN, dense)
    result = list(gradients)
    for i, value in zip(picked, reduced, strict=True):
        result[i] = value
    return result


def _scaled(gradient: Any, factor: float) -> Any:
    if gradient is None:
        return None
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * factor, gradient.indices, gradient.dense_shape)
    return gradient * factor


def overrides_apply_gradients(optimizer: Any) -> bool:
    """True when a TF1 optimizer class replaces `Optimizer.apply_gradients` (BERT-style).

    Example:

    >>> overrides_apply_gradients(tf.compat.v1.train.AdamOptimizer(0.1))
    False
    """
    for cls in type(optimizer).__mro__:
        if cls is _Optimizer:
            return False
        if "apply_gradients" in vars(cls):
            return True
    return False


def _synced_gradients_function(original: Any) -> Any:
    def gradients(ys: Any, xs: Any, *args: Any, **kwargs: Any) -> list:
        result = original(ys, xs, *args, **kwargs)
        flat_xs = list(xs) if isinstance(xs, (list, tuple)) else [xs]
        return replica_mean(result, flat_xs)

    gradients.__doc__ = original.__doc__
    return gradients


def _patches() -> list:
    compute = _Optimizer.compute_gradients
    apply = _Optimizer.apply_gradients
    cross_shard = tf.compat.v1.tpu.CrossShardOptimizer

    def compute_gradients(self: Any, loss: Any, var_list: Any = None, **kwargs: Any) -> list:
        pairs = compute(self, loss, var_list=var_list, **kwargs)
        if not overrides_apply_gradients(self):
            return pairs  # apply_gradients reduces
        grads = replica_mean([g for g, _ in pairs], [v for _, v in pairs])
        return list(zip(grads, [v for _, v in pairs], strict=True))

    def apply_gradients(self: Any, grads_and_vars: Any, global_step: Any = None, name: Any = None):
        pairs = list(grads_and_vars)
        replicas = num_replicas()
        if replicas > 1:  # TF sums over replicas in apply_gradients: make it a mean
            pairs = [(_scaled(g, 1.0 / replicas), v) for g, v in pairs]
        return apply(self, pairs, global_step=global_step, name=name)

    def cross_shard_compute_gradients(self: Any, loss: Any, var_list: Any = None, **kwargs):
        inner, _, _ = _check_cross_shard(self)
        return inner.compute_gradients(loss, var_list=var_list, **kwargs)

    def cross_shard_apply_gradients(
        self: Any, grads_and_vars: Any, global_step: Any = None, name: Any = None
    ):
        inner, reduction, _ = _check_cross_shard(self)
        pairs = list(grads_and_vars)
        grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
        if overrides_apply_gradients(inner):
            grads = replica_mean(grads, variables)
        replicas = num_replicas()
        if reduction == tf.compat.v1.losses.Reduction.SUM and replicas > 1:
            grads = [_scaled(g, float(replicas)) for g in grads]
        return inner.apply_gradients(
            list(zip(grads, variables, strict=True)), global_step=global_step, name=name
        )

    return [
        (tf, "gradients", _synced_gradients_function(tf.gradients)),
        *[
            (v1, "gradients", _synced_gradients_function(v1.gradients))
            for v1 in _compat.compat_v1_modules()
        ],
        (_Optimizer, "compute_gradients", compute_gradients),
        (_Optimizer, "apply_gradients", apply_gradients),
        (cross_shard, "compute_gradients", cross_shard_compute_gradients),
        (cross_shard, "apply_gradients", cross_shard_apply_gradients),
    ]


def _check_cross_shard(optimizer: Any) -> tuple[Any, str, Any]:
    inner, reduction, group_assignment = _compat.cross_shard_parts(optimizer)
    if group_assignment is not None:
        raise ValueError(
            "CrossShardOptimizer(group_assignment=...) is not supported: under "
            "tf.distribute every replica joins one all-reduce. Remove group_assignment."
        )
    return inner, reduction, group_assignment


@contextlib.contextmanager
def synchronized_gradients() -> Iterator[None]:
    """While active, TF1 gradients and optimizers average over replicas (see the module doc).

    Example:

    ```python
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with tf.Graph().as_default(), strategy.scope():
        w = tf.Variable(1.0, name="w")

        def train_step(batch):
            return tf.compat.v1.gradients(tf.reduce_sum(batch) * w, [w])   # as model_fn does

        with synchronized_gradients():
            grads = strategy.run(train_step, args=(tf.ones([2]),))   # averaged over replicas
    ```
    """
    with _compat.patched_attributes("synchronized_gradients", _patches):
        yield
