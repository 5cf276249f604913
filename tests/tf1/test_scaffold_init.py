"""Scaffold initialisers run as TF1's SessionManager ran them.

The cases of `tests/fixtures/scaffold_cases.py` run here on `keras_tpu_estimator.estimator`
(CPU path, and the strategy path on the default strategy and `MirroredStrategy`)
and are compared with TF 2.15's TPUEstimator on its CPU path
(`tests/recorded/ema_numbers_generated.py`): `init_op`, then `init_fn(scaffold,
session)`, once, when the model is initialised rather than restored from
`model_dir` (the weights after the first and the second `train` call), with a
session that restores a `Saver` and runs assign ops built in `model_fn`; and
`local_init_op` in every call.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from keras_tpu_estimator._compat.tf1_identity import tf1_identity
from keras_tpu_estimator.tf1.scaffold import ScaffoldSession
from tests.fixtures import scaffold_cases as cases
from tests.fixtures.same_results import assert_same
from tests.recorded import ema_numbers_generated as recorded
from tests.tf1.test_ema import _strategy_api, api_for


@pytest.mark.parametrize("name", sorted(cases.DEFAULTS))
def test_cpu_path_runs_the_initialisers_as_the_original(name, tmp_path):
    assert_same(cases.DEFAULTS[name](api_for(tmp_path, False)), recorded.SCAFFOLD[name], name)


@pytest.mark.parametrize("name", sorted(cases.DEFAULTS))
def test_strategy_path_runs_the_initialisers_as_the_original(name, strategy, tmp_path):
    assert_same(cases.DEFAULTS[name](_strategy_api(strategy, tmp_path)), recorded.SCAFFOLD[name], name)


def test_every_case_was_recorded():
    assert sorted(cases.DEFAULTS) == sorted(recorded.SCAFFOLD)


def test_the_session_runs_graph_ops_and_reads_variables():
    w = tf.Variable([1.0, 2.0], name="w")
    built = {}

    @tf.function
    def build():
        built["assign"] = tf.compat.v1.assign(w, [3.0, 4.0])
        built["doubled"] = w.read_value() * 2.0
        built["fed"] = tf.compat.v1.placeholder_with_default(1.0, []) + 1.0
        built["needs_input"] = tf.compat.v1.placeholder(tf.float32, []) * 2.0
        return tf.constant(0)

    build.get_concrete_function()  # traced, not run
    session = ScaffoldSession({"w": w})
    assert w.numpy().tolist() == [1.0, 2.0]
    assert session.run(built["assign"]).tolist() == [3.0, 4.0]
    assert session.run({"twice": built["doubled"], "w": w})["twice"].tolist() == [6.0, 8.0]
    fed = built["fed"].op.inputs[0]
    with tf1_identity():  # as inside model_fn: tensors are dict keys
        feed_dict = {fed: np.float32(5.0)}
    assert session.run(built["fed"], feed_dict=feed_dict) == 6.0
    with pytest.raises(TypeError, match="Cannot run"):
        session.run("not a tensor")
    with pytest.raises(ValueError, match="cannot run: .*or feed them with feed_dict"):
        session.run(built["needs_input"])


def test_variable_initializers_inside_model_fn_group_nothing():
    """The model's variables are created initialised: TF1's initializer ops group no-ops (TF raised before)."""
    from keras_tpu_estimator.tf1.legacy import model_fn_scope

    variable = tf.Variable(1.0)
    types = []

    @tf.function
    def trace():
        with model_fn_scope():
            for op in (tf.compat.v1.global_variables_initializer(), tf.compat.v1.variables_initializer([variable]),
                       tf.compat.v1.initializers.global_variables(), tf.compat.v1.local_variables_initializer()):
                types.append(op.type)
        return tf.constant(0)

    trace()
    assert types == ["NoOp"] * 4
    with tf.Graph().as_default():  # a TF1 graph keeps TensorFlow's own
        graph_variable = tf.compat.v1.get_variable("v", [1])
        with model_fn_scope():
            assert tf.compat.v1.variables_initializer([graph_variable]).control_inputs == [graph_variable.initializer]
