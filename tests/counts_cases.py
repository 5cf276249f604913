"""Count arguments given NumPy integers, floats, strings, bools, zero and negatives, run on both libraries.

`CASES`: name -> case, a function of an `api` namespace (that of
`tests/original_api_cases.py`, plus `api.on_original`). A case makes one call
with a count argument set to one of `VALUES` and returns what followed: the
global step after `train`, the number of evaluation steps a hook saw, the
number of predictions. `scripts/record_counts_numbers.py` runs every case on
the original (TF 2.15 + tensorflow-estimator 2.15) and records
`["ok", result]` or `[exception type, normalised str(exception)]` in
`tests/recorded_counts_numbers.py`.

`use_tpu=True` cases run the original's one-core TPU context (see
`original_api_cases`): its graph cannot run without a TPU, so on the original
the model_fn raises `Stop` once the arguments were accepted and the record is
`["Stop", ""]`. There the result to expect is the CPU case's of the same value
(`cpu_twin`): the original's TPU path runs the counts it accepted as its CPU
path does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from tests import original_api_cases as base

Case = Callable[[Any], Any]
CASES: dict[str, Case] = {}

# Each value stands for 3 (4 where it is a batch size: 4 replicas take it) where a library takes it.
VALUES: dict[str, Any] = {
    "np.int64(3)": np.int64(3),
    "np.int32(3)": np.int32(3),
    "2.5": 2.5,
    "1.0": 1.0,
    "'3'": "3",
    "True": True,
    "0": 0,
    "-1": -1,
}
BATCH_VALUES: dict[str, Any] = {
    "np.int64(4)": np.int64(4),
    "np.int32(4)": np.int32(4),
    "2.5": 2.5,
    "'2'": "2",
    "0": 0,
}


def _path(use_tpu: bool) -> str:
    return "tpu" if use_tpu else "cpu"


def cpu_twin(name: str) -> str:
    """The use_tpu=False case of a use_tpu=True case's name."""
    return name.replace(".tpu.", ".cpu.", 1)


def _model_fn(api: Any, use_tpu: bool) -> Callable[..., Any]:
    plain = base.model_fn_for(api)

    def model_fn(features, labels, mode, params):
        if use_tpu and api.on_original:
            raise base.Stop()
        return plain(features, labels, mode, params)

    return model_fn


def _on_strategy(api: Any, use_tpu: bool) -> bool:
    return use_tpu and getattr(api, "strategy", None) is not None  # this library only: a strategy's replicas


def _config(api: Any, use_tpu: bool, tpu_fields: dict | None = None, run_fields: dict | None = None) -> Any:
    run_fields = dict(run_fields or {})
    if _on_strategy(api, use_tpu):
        run_fields.update(train_distribute=api.strategy, eval_distribute=api.strategy)
    return api.estimator.tpu.RunConfig(
        model_dir=api.model_dir,
        tpu_config=base.tpu_config(api, use_tpu and not _on_strategy(api, use_tpu), **(tpu_fields or {})),
        **run_fields,
    )


def _estimator(api: Any, use_tpu: bool, tpu_fields: dict | None = None, run_fields: dict | None = None,
               **kwargs: Any) -> Any:
    return _estimator_of(api, _model_fn(api, use_tpu), use_tpu, tpu_fields, run_fields, **kwargs)


def _estimator_of(api: Any, model_fn: Callable[..., Any], use_tpu: bool, tpu_fields: dict | None = None,
                  run_fields: dict | None = None, **kwargs: Any) -> Any:
    if _on_strategy(api, use_tpu):
        kwargs = {"train_batch_size": 4, "eval_batch_size": 4, "predict_batch_size": 4, **kwargs}
    config = _config(api, use_tpu, tpu_fields, run_fields)
    return base.estimator_for(api, model_fn, use_tpu=use_tpu, config=config, **kwargs)


def input_fn(params):
    """`original_api_cases.input_fn`, repeated: every case's steps find batches, whatever the batch size."""
    return base.input_fn(params).repeat()


def _global_step(estimator: Any) -> int:
    return int(estimator.get_variable_value("global_step"))


class _CountRuns(tf.compat.v1.train.SessionRunHook):
    def __init__(self) -> None:
        self.runs = 0

    def after_run(self, run_context, run_values):
        self.runs += 1


def _case(name: str) -> Callable[[Case], Case]:
    def register(case: Case) -> Case:
        assert name not in CASES, name
        CASES[name] = case
        return case

    return register


def _train_case(use_tpu: bool, argument: str, value: Any) -> Case:
    def case(api):
        estimator = _estimator(api, use_tpu)
        estimator.train(input_fn, **{argument: value})
        return _global_step(estimator)

    return case


def _evaluate_case(use_tpu: bool, value: Any) -> Case:
    def case(api):
        estimator = _estimator(api, use_tpu)
        if not (use_tpu and api.on_original):
            estimator.train(input_fn, steps=1)
        hook = _CountRuns()
        estimator.evaluate(input_fn, steps=value, hooks=[hook])
        return hook.runs

    return case


def _iterations_case(use_tpu: bool, value: Any) -> Case:
    def case(api):
        estimator = _estimator(api, use_tpu, tpu_fields={"iterations_per_loop": value})
        estimator.train(input_fn, max_steps=3)
        return _global_step(estimator)

    return case


def _run_config_case(use_tpu: bool, field: str, value: Any) -> Case:
    def case(api):
        estimator = _estimator(api, use_tpu, run_fields={field: value})
        estimator.train(input_fn, max_steps=3)
        return _global_step(estimator)

    return case


def _batch_case(use_tpu: bool, field: str, value: Any) -> Case:
    def case(api):
        estimator = _estimator(api, use_tpu, **{field: value})
        if field == "train_batch_size":
            estimator.train(input_fn, max_steps=2)
            return _global_step(estimator)
        if not (use_tpu and api.on_original):
            estimator.train(input_fn, steps=1)
        if field == "eval_batch_size":
            hook = _CountRuns()
            estimator.evaluate(input_fn, steps=2, hooks=[hook])
            return hook.runs
        return len(list(estimator.predict(base.predict_input_fn)))

    return case


@_case("evaluate.tpu.EstimatorSpec(eval_metric_ops=...)")
def _(api):
    """Not a count: the TPU path's check of a plain EstimatorSpec's eval_metric_ops (the original's RuntimeError)."""

    def model_fn(features, labels, mode, params):
        spec = base.model_fn_for(api)(features, labels, mode, params)
        if mode != api.estimator.ModeKeys.EVAL:
            return spec
        mean = tf.compat.v1.metrics.mean(spec.loss)
        return api.estimator.EstimatorSpec(mode, loss=spec.loss, eval_metric_ops={"mean": mean})

    estimator = _estimator_of(api, model_fn, True)
    if not api.on_original:
        estimator.train(input_fn, steps=1)
    return estimator.evaluate(input_fn, steps=1)


for _use_tpu in (False, True):
    _p = _path(_use_tpu)
    for _label, _value in VALUES.items():
        for _argument in ("steps", "max_steps"):
            _case(f"train.{_p}.{_argument}={_label}")(_train_case(_use_tpu, _argument, _value))
        _case(f"evaluate.{_p}.steps={_label}")(_evaluate_case(_use_tpu, _value))
        _case(f"TPUConfig.{_p}.iterations_per_loop={_label}")(_iterations_case(_use_tpu, _value))
        for _field in ("save_checkpoints_steps", "save_summary_steps", "keep_checkpoint_max",
                       "log_step_count_steps"):
            _case(f"RunConfig.{_p}.{_field}={_label}")(_run_config_case(_use_tpu, _field, _value))
    for _label, _value in BATCH_VALUES.items():
        for _field in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
            _case(f"constructor.{_p}.{_field}={_label}")(_batch_case(_use_tpu, _field, _value))
