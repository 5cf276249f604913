"""`RunPath`: the CPU path or the strategy path, decided once where a model is made.

TPUEstimator ran a `model_fn` one of two ways. With `use_tpu=False` (the *CPU
path*) it ran as an Estimator: one global batch a step, TF1 metrics inside the
step, host calls every step, labels withheld in PREDICT. With `use_tpu=True`
(the *strategy path*) each replica got `params['batch_size']` rows and a
`params['context']`, partial batches were padded, and `host_call` /
`eval_metrics` ran on the host on tensors stacked by step. Every such
difference is a property of this one frozen record; the engine reads it and
never tests `use_tpu` again.

Example:

```python
path = RunPath.decide(use_tpu=False, strategy=None, config=kte.RunConfig())
assert not path.pads_partial_batches and path.num_replicas == 1
```
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import tensorflow as tf

from keras_tpu_estimator import _compat
from keras_tpu_estimator.contract import ModeKeys, check_supported

from .strategy import TPUContext, num_workers, resolve_strategy


@dataclasses.dataclass(frozen=True)
class RunPath:
    """How one model runs its `model_fn`, and everything that follows from it.

    Attributes:
        strategy: The `tf.distribute.Strategy` the model runs under.
        strategy_path: `use_tpu`: per-replica batches on the strategy, rather than the CPU path.
        tpu_strategy: Whether `strategy` is a `TPUStrategy` (static shapes, no empty replica).
        tpu_program: The steps are built as a TPU core runs them, on another device (the
            TPU-readiness check): TF1 summaries are not written in the step.
        num_replicas: Replicas one global batch is split over (1 on the CPU path).
        local_replicas: Of those, the replicas whose values this process sees.
        host_call_every_n: `host_call` runs every n steps (1 on the CPU path, as the original).
    """

    strategy: Any
    strategy_path: bool
    tpu_strategy: bool
    tpu_program: bool
    num_replicas: int
    local_replicas: int
    host_call_every_n: int

    @classmethod
    def decide(cls, use_tpu: bool, strategy: tf.distribute.Strategy | None, config: Any) -> RunPath:
        """The path of a model made with `use_tpu` and `strategy` (None: picked as TPUEstimator did).

        Raises:
            ValueError: a `TPUStrategy` on the CPU path, or `TPUConfig.num_shards`
                other than the strategy's replicas.
        """
        if not use_tpu:
            # The Estimator's rule: RunConfig(train_distribute=...) runs the CPU path's replicas.
            strategy = strategy or config.train_distribute or tf.distribute.get_strategy()
            if _compat.is_tpu_strategy(strategy):
                raise ValueError(
                    "`use_tpu=False` runs on the CPU path, which cannot use a TPUStrategy. "
                    "Pass `use_tpu=True` to run on the TPU."
                )
        elif strategy is None:
            if tf.distribute.has_strategy():
                strategy = tf.distribute.get_strategy()
            elif config.train_distribute is not None:
                strategy = config.train_distribute
            else:
                strategy = resolve_strategy(use_tpu, config.master, config.cluster)
        num_shards = config.tpu_config.num_shards
        if use_tpu:
            check_supported(config.tpu_config)
        if use_tpu and num_shards and num_shards != strategy.num_replicas_in_sync:
            raise ValueError(
                "TPUConfig.num_shards is not set correctly. According to TPU system metadata for "
                f"Tensorflow master ({config.master}): num_replicas should be "
                f"({strategy.num_replicas_in_sync}), got ({num_shards}). For non-model-parallelism, "
                "num_replicas should be the total num of TPU cores in the system. Leave "
                "num_shards as None, or set it to the strategy's replicas."
            )
        replicas = strategy.num_replicas_in_sync if use_tpu else 1
        return cls(
            strategy=strategy,
            strategy_path=bool(use_tpu),
            tpu_strategy=_compat.is_tpu_strategy(strategy),
            tpu_program=False,
            num_replicas=replicas,
            local_replicas=replicas // num_workers(strategy) if use_tpu else 1,
            host_call_every_n=config.tpu_config.experimental_host_call_every_n_steps if use_tpu else 1,
        )

    def as_tpu_program(self, cores: int) -> RunPath:
        """This path with its steps built as `cores` TPU cores run them (the readiness check's)."""
        return dataclasses.replace(self, tpu_program=True, num_replicas=cores)

    # What follows from the path; each is one of the original's CPU-path / TPU-path differences.
    @property
    def on_tpu(self) -> bool:
        """The steps are a TPU's: TF1 summaries in `model_fn` are not written (nor were they by TPUEstimator)."""
        return self.tpu_strategy or self.tpu_program

    @property
    def pads_partial_batches(self) -> bool:
        """EVAL and PREDICT batches are padded to a static size with a mask (the CPU path keeps real rows)."""
        return self.strategy_path

    @property
    def needs_static_batch(self) -> bool:
        """The batch size must be known: it sets `params['batch_size']` per replica."""
        return self.strategy_path

    @property
    def ragged_host_tensors(self) -> bool:
        """The host gets each step's tensors as `model_fn` made them (shapes may vary by step)."""
        return not self.strategy_path

    @property
    def labels_in_predict(self) -> bool:
        """PREDICT's `model_fn` gets the input's labels (the CPU path's, as Estimator.predict, gets None)."""
        return self.strategy_path

    @property
    def loss_weighted_by_rows(self) -> bool:
        """A replica's loss counts by its rows (the CPU path averages its steps' losses)."""
        return self.strategy_path

    @property
    def host_call_reads_step_index(self) -> bool:
        """`host_call` tensors read the global step before the update, as a TPU's host call saw it."""
        return self.strategy_path

    @property
    def eval_metrics_in_step(self) -> bool:
        """`eval_metrics` run inside the EVAL step as TF1 metrics; on the strategy path they run on the host."""
        return not self.strategy_path

    @property
    def hooks_from_first_replica(self) -> bool:
        """Session hooks and host tensors come from replica 0 (the Estimator's replicas)."""
        return not self.strategy_path

    def writes_tf1_summaries(self, mode: str) -> bool:
        """Whether `model_fn`'s TF1 summaries are written in `mode`: TRAIN, off a TPU (the Estimator's)."""
        return mode == ModeKeys.TRAIN and not self.on_tpu

    def cpu_replicas(self, mode: str) -> int:
        """Replicas the CPU path runs in `mode`; 0 on the strategy path.

        On a strategy (`RunConfig(train_distribute=...)`) each replica takes whole
        batches of the input in turn, as the Estimator's `make_input_fn_iterator`
        fed them. The Estimator never predicted on a strategy: PREDICT ("infer")
        with several replicas is refused.

        Example:

        >>> RunPath.decide(False, None, kte.RunConfig()).cpu_replicas("train")
        1
        """
        if self.strategy_path:
            return 0
        replicas = self.strategy.num_replicas_in_sync
        if mode == ModeKeys.PREDICT and replicas > 1:
            raise ValueError(
                f"Prediction on the CPU path (use_tpu=False) runs on one replica, as Estimator.predict "
                f"did, but this model's strategy has {replicas}. Predict with a model made without the "
                "strategy (TPUEstimator/Estimator.predict do), or pass use_tpu=True to predict on the "
                "strategy path."
            )
        return replicas

    def params(
        self, base: dict, mode: str, global_batch: int | None, per_replica: int | None,
        input_context: Any = None, for_input_fn: bool = False,
    ) -> dict:
        """A fresh copy of `base` for one call: `batch_size` (per replica), `context`, `use_tpu` (model_fn only)."""
        params = copy.deepcopy(base)
        if global_batch is not None:
            params["batch_size"] = per_replica
        if not for_input_fn:  # as the original: only model_fn is told
            params["use_tpu"] = self.strategy_path
        if self.strategy_path:
            params["context"] = TPUContext(
                self.strategy, mode, global_batch, input_context, call_from_input_fn=for_input_fn
            )
        return params
