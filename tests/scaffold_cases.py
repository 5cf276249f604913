"""Scaffold initialisers (`init_fn`, `init_op`, `local_init_op`), as cases that run unchanged on both libraries.

The `api` namespace is `ema_cases`' (`estimator`, `model_dir`, `use_tpu`,
`strategy`). Each case trains `ema_cases`' linear model with a Scaffold from
`scaffold_fn` in TRAIN: Show and Tell's and slim's `init_fn` restoring a
pretrained checkpoint through a `Saver`, an `init_fn` running assign ops
built in `model_fn`, and an `init_op` (RigL, SimCLR) that initialises the
variables itself. The original ran `init_op` then `init_fn` once, when the
session initialised the model rather than restoring it from `model_dir`;
the cases record the weights after the first `train` call (initialised) and
after a second (restored: the initialisers must not run again).
`DEFAULTS` name -> case returning JSON-able values; recorded by
`scripts/record_ema_numbers.py` into `tests/recorded_ema_numbers.py`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

try:
    from tests import ema_cases as program
except ImportError:  # run from scripts/ with tests/ on sys.path
    import ema_cases as program

Case = Callable[[Any], Any]
DEFAULTS: dict[str, Case] = {}
PRETRAINED_W = np.array([[0.25], [-0.5], [0.75]], np.float32)
ASSIGNED_B = np.array([0.6], np.float32)


def _default(name: str) -> Callable[[Case], Case]:
    def register(case: Case) -> Case:
        assert name not in DEFAULTS, name
        DEFAULTS[name] = case
        return case

    return register


def pretrained_checkpoint(model_dir: str) -> str:
    """A TF1 checkpoint of another program, `pretrained/w` = PRETRAINED_W (written in a TF1 graph)."""
    prefix = os.path.join(model_dir, "pretrained", "model.ckpt")
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("pretrained/w", initializer=PRETRAINED_W)
        with tf.compat.v1.Session() as session:
            session.run(w.initializer)
            return tf.compat.v1.train.Saver([w]).save(session, prefix)


def scaffold_model_fn(api: Any, make_scaffold: Callable[[Any, Any], Any]) -> Callable:
    """The linear program; in TRAIN `scaffold_fn` returns `make_scaffold(w, b)`."""
    tpu = api.estimator.tpu

    def model_fn(features, labels, mode, params):
        w, b, predictions = program.linear(features)
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        if api.use_tpu:
            optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
        train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
        scaffold = make_scaffold(w, b)
        scaffold_fn = None if scaffold is None else lambda: scaffold
        return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, scaffold_fn=scaffold_fn)

    return model_fn


def _weights(estimator: Any) -> dict:
    return {name: program._floats(estimator.get_variable_value(name)) for name in ("w", "b")}


def scaffold_run(api: Any, make_scaffold: Callable[[Any, Any], Any]) -> dict:
    estimator = program.estimator_for(api, scaffold_model_fn(api, make_scaffold))
    estimator.train(program.train_input_fn, max_steps=1)
    first = _weights(estimator)
    estimator.train(program.train_input_fn, steps=2)  # restored from model_dir: no initialiser runs
    return {"after_first_train": first, "after_second_train": _weights(estimator)}


@_default("Scaffold(init_fn) restores a pretrained checkpoint through a Saver (Show and Tell)")
def init_fn_saver_restore(api: Any) -> dict:
    pretrained = pretrained_checkpoint(api.model_dir)

    def make_scaffold(w, b):
        saver = tf.compat.v1.train.Saver({"pretrained/w": w})
        return tf.compat.v1.train.Scaffold(init_fn=lambda scaffold, session: saver.restore(session, pretrained))

    return scaffold_run(api, make_scaffold)


@_default("Scaffold(init_fn) runs an assign op built in model_fn")
def init_fn_session_run(api: Any) -> dict:
    def make_scaffold(w, b):
        assign = tf.compat.v1.assign(b, ASSIGNED_B)
        return tf.compat.v1.train.Scaffold(init_fn=lambda scaffold, session: session.run(assign))

    return scaffold_run(api, make_scaffold)


@_default("Scaffold(init_op) initialises the variables itself (RigL, SimCLR)")
def init_op(api: Any) -> dict:
    def make_scaffold(w, b):
        initialise = tf.compat.v1.global_variables_initializer()
        with tf.control_dependencies([initialise]):
            op = tf.group(tf.compat.v1.assign(w, PRETRAINED_W), tf.compat.v1.assign(b, ASSIGNED_B))
        return tf.compat.v1.train.Scaffold(init_op=op)

    return scaffold_run(api, make_scaffold)


@_default("Scaffold(init_op, init_fn): init_op runs first")
def init_op_then_init_fn(api: Any) -> dict:
    def make_scaffold(w, b):
        initialise = tf.compat.v1.global_variables_initializer()
        with tf.control_dependencies([initialise]):
            op = tf.group(tf.compat.v1.assign(b, ASSIGNED_B))
        double = tf.compat.v1.assign(b, b * 2.0)
        return tf.compat.v1.train.Scaffold(init_op=op, init_fn=lambda scaffold, session: session.run(double))

    return scaffold_run(api, make_scaffold)


@_default("Scaffold(local_init_op) runs in every session (each train call)")
def local_init_op(api: Any) -> dict:
    def model_fn(features, labels, mode, params):
        sessions = tf.compat.v1.get_variable("sessions", [], tf.int64, tf.compat.v1.zeros_initializer(),
                                             trainable=False)
        spec = scaffold_model_fn(api, lambda w, b: None)(features, labels, mode, params)
        op = tf.group(tf.compat.v1.local_variables_initializer(), tf.compat.v1.assign_add(sessions, 1))
        return spec._replace(scaffold_fn=lambda: tf.compat.v1.train.Scaffold(local_init_op=op))

    estimator = program.estimator_for(api, model_fn)
    estimator.train(program.train_input_fn, max_steps=1)
    first = int(estimator.get_variable_value("sessions"))
    estimator.train(program.train_input_fn, steps=2)
    return {"after_first_train": first, "after_second_train": int(estimator.get_variable_value("sessions"))}


@_default("Scaffold(init_fn) in evaluate: runs on an empty model_dir, not over a checkpoint")
def init_fn_in_evaluate(api: Any) -> dict:
    train = scaffold_model_fn(api, lambda w, b: None)

    def model_fn(features, labels, mode, params):
        if mode != api.estimator.ModeKeys.EVAL:
            return train(features, labels, mode, params)
        _, b, predictions = program.linear(features)
        assign = tf.compat.v1.assign(b, ASSIGNED_B)
        scaffold = tf.compat.v1.train.Scaffold(init_fn=lambda scaffold, session: session.run(assign))
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        return api.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, scaffold_fn=lambda: scaffold)

    estimator = program.estimator_for(api, model_fn)
    initialised = estimator.evaluate(program.eval_input_fn, steps=1)["loss"]
    estimator.train(program.train_input_fn, max_steps=1)
    restored = estimator.evaluate(program.eval_input_fn, steps=1)["loss"]
    return {"empty_model_dir": round(float(initialised), 5), "after_training": round(float(restored), 5)}
