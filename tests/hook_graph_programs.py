"""Probes of the graph a session hook sees in each of its methods, run unchanged on the original and here.

Each case is `case(api) -> JSON-able value` (`api` as in `tests/hook_programs.py`, whose TF1 linear
model they train). `GraphProbe` records, in `begin`, `after_create_session`, `before_run`,
`after_run` and `end`, what a TF1 hook relies on: `get_global_step()`, the default graph (the one
of `begin`), the graph's variable collections, whether a default session is set,
`session.run(get_global_step())`, and the errors of `session.run` on a None fetch. `scripts/record_hook_graph_numbers.py` runs the cases on TF 2.15
(`use_tpu=False`) and writes `tests/recorded_hook_graph_numbers.py`;
`tests/test_hook_graph_methods.py` compares.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from tests import hook_programs

CASES: dict[str, Callable[[Any], Any]] = {}
K = 4  # iterations_per_loop


def case(function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    CASES[function.__name__] = function
    return function


def _error(session: Any, fetches: Any) -> list:
    """`[type name, message]` of `session.run(fetches)`'s error (or `["no error", result]`)."""
    try:
        return ["no error", repr(session.run(fetches))]
    except Exception as error:  # noqa: BLE001 - recorded, whatever it is
        return [type(error).__name__, str(error)]


class GraphProbe(tf.compat.v1.train.SessionRunHook):
    """Records the graph facts of each method call and the global step its session reads."""

    def __init__(self):
        self.calls: list = []  # the methods called, in order
        self.facts: dict = {}  # method -> the distinct facts its calls saw
        self.steps: dict = {"after_create_session": None, "after_run": [], "end": None}
        self.none_fetches: dict = {}

    def _facts(self, method: str, session: Any = None) -> None:
        graph = tf.compat.v1.get_default_graph()
        step = tf.compat.v1.train.get_global_step()
        facts = {
            "global_step": None if step is None else step.op.name,
            "graph_of_begin": graph is getattr(self, "graph", graph),
            "global_variables": sorted(v.op.name for v in tf.compat.v1.global_variables()),
            "trainable_variables": sorted(v.op.name for v in tf.compat.v1.trainable_variables()),
            "global_step_collection": [v.op.name for v in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_STEP)],
            "executing_eagerly": tf.executing_eagerly(),
            "default_session": tf.compat.v1.get_default_session() is not None,
        }
        if session is not None:
            facts["session_graph_is_default"] = session.graph is graph
        self.calls.append(method)
        seen = self.facts.setdefault(method, [])
        if facts not in seen:
            seen.append(facts)

    def _step(self, session: Any) -> int | None:
        step = tf.compat.v1.train.get_global_step()
        return None if step is None else int(session.run(step))

    def begin(self):
        self.graph = tf.compat.v1.get_default_graph()
        self._facts("begin")

    def after_create_session(self, session, coord):
        self._facts("after_create_session", session)
        self.steps["after_create_session"] = self._step(session)

    def before_run(self, run_context):
        self._facts("before_run", run_context.session)

    def after_run(self, run_context, run_values):
        session = run_context.session
        self._facts("after_run", session)
        self.steps["after_run"].append(self._step(session))
        if not self.none_fetches:
            step = tf.compat.v1.train.get_global_step()
            self.none_fetches = {
                "none": _error(session, None),
                "list": _error(session, [None]),
                "nested": _error(session, {"step": step, "more": {"none": None}}),
                "empty": _error(session, []),
            }
        assert run_values.results is None  # before_run asked for nothing

    def end(self, session):
        self._facts("end", session)
        self.steps["end"] = self._step(session)

    def record(self) -> dict:
        return {"calls": self.calls, "facts": self.facts, "steps": self.steps, "none_fetches": self.none_fetches}


def _estimator(api: Any, spec_probes: dict[str, GraphProbe] | None = None) -> Any:
    """The linear model of `hook_programs`, with `spec_probes[mode]` in the spec's hooks of `mode`."""
    spec_probes = spec_probes or {}

    def hooks(mode, tensors):
        return [spec_probes[mode]] if mode in spec_probes else []

    return hook_programs.estimator(api, hooks, k=K)


@case
def train(api: Any) -> dict:
    """`train(steps=10)` with a probe in `hooks=` and one in the spec's `training_hooks`."""
    passed, spec = GraphProbe(), GraphProbe()
    _estimator(api, {"train": spec}).train(hook_programs.input_fn, steps=10, hooks=[passed])
    return {"passed": passed.record(), "spec": spec.record()}


@case
def train_resumed(api: Any) -> dict:
    """`train(steps=3)`, then `train(steps=10)` with a probe."""
    est = _estimator(api)
    est.train(hook_programs.input_fn, steps=3)
    probe = GraphProbe()
    est.train(hook_programs.input_fn, steps=10, hooks=[probe])
    return probe.record()


@case
def evaluation(api: Any) -> dict:
    """`train(steps=5)`, then `evaluate(steps=3)` with a probe in `hooks=` and one in `evaluation_hooks`."""
    passed, spec = GraphProbe(), GraphProbe()
    est = _estimator(api, {"eval": spec})
    est.train(hook_programs.input_fn, steps=5)
    result = est.evaluate(hook_programs.input_fn, steps=3, hooks=[passed])
    return {"passed": passed.record(), "spec": spec.record(), "global_step": int(result["global_step"])}


@case
def prediction(api: Any) -> dict:
    """`train(steps=5)`, then `predict` of 5 batches with a probe in `hooks=` and one in `prediction_hooks`."""
    passed, spec = GraphProbe(), GraphProbe()
    est = _estimator(api, {"infer": spec})
    est.train(hook_programs.input_fn, steps=5)
    predictions = [np.asarray(p["y"]).tolist() for p in est.predict(hook_programs.predict_input_fn, hooks=[passed])]
    return {"passed": passed.record(), "spec": spec.record(), "predictions": len(predictions)}


class EvalStepProbe(tf.compat.v1.train.SessionRunHook):
    """Records the graph's `eval_step` (GraphKeys.EVAL_STEP) as a hook reads it in each method."""

    def __init__(self):
        self.calls: list = []
        self.values: dict = {"before_run": [], "after_run": [], "end": None}
        self.variable: dict = {}

    def begin(self):
        (step,) = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.EVAL_STEP)
        local = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
        self.step = step
        self.variable = {
            "name": step.name, "dtype": step.dtype.name, "local": any(v is step for v in local),
            "global": any(v is step for v in tf.compat.v1.global_variables()),
        }

    def before_run(self, run_context):
        self.calls.append("before_run")
        self.values["before_run"].append(int(run_context.session.run(self.step)))

    def after_run(self, run_context, run_values):
        self.calls.append("after_run")
        self.values["after_run"].append(int(run_context.session.run(self.step)))

    def end(self, session):
        self.values["end"] = int(session.run(self.step))


@case
def evaluation_eval_step(api: Any) -> dict:
    """`train(steps=5)`, then `evaluate(steps=6)` (more steps than K) with a probe of `eval_step`."""
    probe = EvalStepProbe()
    est = _estimator(api)
    est.train(hook_programs.input_fn, steps=5)
    est.evaluate(hook_programs.input_fn, steps=6, hooks=[probe])
    return {"calls": probe.calls, "values": probe.values, "variable": probe.variable}


class ListenerProbe(tf.compat.v1.train.CheckpointSaverListener):
    """Records, in each listener method, the graph facts a TF1 listener relies on and the step its session reads."""

    def __init__(self):
        self.facts: dict = {}  # method -> the distinct facts its calls saw
        self.steps: dict = {"before_save": [], "after_save": [], "end": None}

    def _facts(self, method: str, session: Any = None) -> None:
        step = tf.compat.v1.train.get_global_step()
        facts = {
            "global_step": None if step is None else step.op.name,
            "global_variables": sorted(v.op.name for v in tf.compat.v1.global_variables()),
            "executing_eagerly": tf.executing_eagerly(),
        }
        if session is not None:
            facts["session_graph_is_default"] = session.graph is tf.compat.v1.get_default_graph()
            facts["session_step"] = None if step is None else "read"
        seen = self.facts.setdefault(method, [])
        if facts not in seen:
            seen.append(facts)
        return None if step is None or session is None else int(session.run(step))

    def begin(self):
        self._facts("begin")

    def before_save(self, session, global_step_value):
        read = self._facts("before_save", session)
        self.steps["before_save"].append([int(global_step_value), read])

    def after_save(self, session, global_step_value):
        read = self._facts("after_save", session)
        self.steps["after_save"].append([int(global_step_value), read])

    def end(self, session, global_step_value):
        read = self._facts("end", session)
        self.steps["end"] = [int(global_step_value), read]


@case
def saving_listener(api: Any) -> dict:
    """`train(steps=10)` saving every 5 steps with a `CheckpointSaverListener` probe."""
    config = api.tpu.RunConfig(
        model_dir=api.model_dir, train_distribute=api.strategy, save_checkpoints_steps=5,
        save_summary_steps=1000, tpu_config=api.tpu.TPUConfig(iterations_per_loop=1),
    )
    hook_programs.API["tpu"] = api.tpu
    est = api.tpu.TPUEstimator(hook_programs.model_fn, config=config, params={"hooks": lambda mode, tensors: []},
                               use_tpu=api.use_tpu, train_batch_size=hook_programs.BATCH)
    probe = ListenerProbe()
    est.train(hook_programs.input_fn, steps=10, saving_listeners=[probe])
    return {"facts": probe.facts, "steps": probe.steps}
