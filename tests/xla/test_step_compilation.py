"""XLA for the replica step off a TPU: `jit_compile` and the TF1 `global_jit_level` switch.

The same TF1 `model_fn`s train, evaluate and predict with and without XLA,
under the default strategy (one XLA program per step) and `MirroredStrategy`
over 4 CPUs (XLA clusters per replica), and give the same numbers within 1e-5.
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures.models import (
    get_variable_mlp,
    input_fn,
    keras_layers_model,
    make_estimator,
    make_model,
)
from tests.fixtures.tf1_models import bert_style_model_fn

TOL = 1e-5
HOST_CALLS = []  # (step, loss) of each host_call of batch_norm_model_fn


def batch_norm_model_fn(features, labels, mode, params):
    """tf.compat.v1.layers with batch norm, its UPDATE_OPS, eval_metrics, a host_call, padded predict."""
    training = mode == kte.ModeKeys.TRAIN
    init = tf.compat.v1.glorot_uniform_initializer(seed=5)
    net = tf.compat.v1.layers.dense(features["x"], 16, kernel_initializer=init)
    net = tf.compat.v1.layers.batch_normalization(net, training=training)
    logits = tf.compat.v1.layers.dense(tf.nn.relu(net), 1, kernel_initializer=init)
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions={"y": logits, "id": features["id"]})
    loss = tf.reduce_mean(tf.square(logits - labels))
    if mode == kte.ModeKeys.EVAL:
        def metric_fn(labels, logits):
            return {
                "mae": tf.compat.v1.metrics.mean_absolute_error(labels, logits),
                "positive": tf.compat.v1.metrics.accuracy(labels > 0, logits > 0),
            }

        return kte.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    step = tf.compat.v1.train.get_or_create_global_step()
    with tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)):
        train_op = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, step)

    def host_fn(step, loss):
        HOST_CALLS.append((int(step[0]), float(loss[0])))
        return tf.no_op()

    host_tensors = [tf.reshape(step, [1]), tf.reshape(loss, [1])]
    host_call = (lambda *t: tf.py_function(host_fn, t, []), host_tensors) if params.get("host_call") else None
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=host_call)


def padded_predict_input_fn(params):
    """60 rows: the last batch is padded on the strategy path."""
    features, _ = _rows(60)
    return tf.data.Dataset.from_tensor_slices(features).batch(params["batch_size"])


def _rows(n):
    rng = np.random.RandomState(3)
    x = rng.randn(n, 4).astype(np.float32)
    return {"x": x, "id": np.arange(n, dtype=np.int64)}, x @ np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32)


def _run(model_fn, strategy, jit_compile, params=None, **kwargs):
    HOST_CALLS.clear()
    model = make_model(model_fn, strategy=strategy, params=params, seed=1, jit_compile=jit_compile, **kwargs)
    model.fit(input_fn, steps_per_epoch=8, epochs=1, verbose=0)
    evaluation = model.evaluate(input_fn, steps=3, return_dict=True, verbose=0)
    weights = {name: v.numpy() for name, v in model.variables_by_name.items()}
    if model_fn is batch_norm_model_fn:  # its host_call's values, and a padded prediction
        evaluation["host_call_steps"] = [step for step, _ in HOST_CALLS]
        evaluation["host_call_losses"] = [loss for _, loss in HOST_CALLS]
        predictions = model.predict(padded_predict_input_fn, verbose=0)
        np.testing.assert_array_equal(predictions["id"], np.arange(60))
        evaluation["predictions"] = predictions["y"]
    return model, evaluation, weights


def _assert_same(a, b):
    assert a[1].keys() == b[1].keys()
    for key in a[1]:
        np.testing.assert_allclose(a[1][key], b[1][key], rtol=TOL, atol=TOL, err_msg=key)
    assert a[2].keys() == b[2].keys()
    for name in a[2]:
        np.testing.assert_allclose(a[2][name], b[2][name], rtol=TOL, atol=TOL, err_msg=name)
    assert a[0].global_step == b[0].global_step == 8


@pytest.mark.parametrize(
    "model_fn, params, kwargs",
    [
        (get_variable_mlp, {"optimizer": "adam"}, {}),
        (keras_layers_model, {"tf1_adam": False}, {"optimizer": "adam"}),
        (bert_style_model_fn, {"optimizer": "bert"}, {}),
        (batch_norm_model_fn, {"host_call": True}, {}),
    ],
    ids=["tf1_adam", "keras_optimizer", "bert_gradients", "batch_norm_metrics"],
)
def test_xla_step_equals_the_plain_step(strategy, model_fn, params, kwargs):
    plain = _run(model_fn, strategy, False, dict(params), **kwargs)
    compiled = _run(model_fn, strategy, True, dict(params), **kwargs)
    _assert_same(plain, compiled)
    assert plain[0].jit_compile is False and compiled[0].jit_compile is True
    if model_fn is batch_norm_model_fn:
        assert compiled[1]["host_call_steps"] == list(range(8))


def _xla_marks(function):
    """What the traced loop asks of XLA: 'program' (a must-compile call) and/or 'clusters' (marked ops)."""
    found = set()
    definitions = function.graph.as_graph_def()
    nodes = list(definitions.node) + [n for f in definitions.library.function for n in f.node_def]
    for node in nodes:
        if node.attr["_XlaMustCompile"].b:
            found.add("program")
        if node.attr["_XlaCompile"].b:
            found.add("clusters")
    return found


def test_the_step_is_one_program_on_one_device_and_clusters_under_mirrored(strategy):
    model = make_model(get_variable_mlp, strategy=strategy, jit_compile=True)
    marks = _xla_marks(model.trace(input_fn))
    if strategy.num_replicas_in_sync == 1:
        assert "program" in marks
    else:
        assert marks == {"clusters"}
    assert _xla_marks(make_model(get_variable_mlp, strategy=strategy).trace(input_fn)) == set()


def test_the_cpu_path_compiles_too(strategy):
    plain = _run(get_variable_mlp, strategy, False, {"optimizer": "sgd"}, use_tpu=False)
    compiled = _run(get_variable_mlp, strategy, True, {"optimizer": "sgd"}, use_tpu=False)
    _assert_same(plain, compiled)


def py_function_model_fn(features, labels, mode, params):
    """A `tf.py_function` and a string op inside the step, as some TF1 programs have."""
    scale = tf.py_function(lambda x: x * 0 + 1.0, [tf.reduce_mean(features["x"])], tf.float32)
    scale.set_shape([])
    if params.get("string"):
        tag = tf.strings.join(["step", tf.strings.as_string(tf.reduce_sum(features["id"]))])
        scale = scale + tf.cast(tf.strings.length(tag) * 0, tf.float32)
    spec = get_variable_mlp(features, labels, mode, params)
    if spec.loss is None:
        return spec
    return spec._replace(loss=spec.loss * scale)


@pytest.mark.parametrize("string", [False, True])
def test_jit_compile_refuses_an_op_xla_cannot_compile_naming_it(strategy, string):
    model = make_model(py_function_model_fn, strategy=strategy, params={"string": string}, jit_compile=True)
    with pytest.raises(ValueError, match=r"jit_compile=True: XLA cannot compile op .*(EagerPyFunc|String).*"
                       r"test_step_compilation\.py:\d+"):
        model.fit(input_fn, steps_per_epoch=2, epochs=1, verbose=0)


def cond_py_function_model_fn(features, labels, mode, params):
    """A `tf.py_function` inside a `tf.cond` branch of the step."""
    def scaled():
        value = tf.py_function(lambda x: x * 0 + 1.0, [tf.reduce_mean(features["x"])], tf.float32)
        value.set_shape([])
        return value

    scale = tf.cond(tf.reduce_sum(features["x"]) > -1e9, scaled, lambda: tf.constant(1.0))
    spec = get_variable_mlp(features, labels, mode, params)
    return spec if spec.loss is None else spec._replace(loss=spec.loss * scale)


def test_jit_compile_refuses_an_op_xla_cannot_compile_inside_a_cond_branch(strategy):
    model = make_model(cond_py_function_model_fn, strategy=strategy, jit_compile=True)
    with pytest.raises(ValueError, match=r"XLA cannot compile op .*EagerPyFunc.*test_step_compilation\.py:\d+"):
        model.fit(input_fn, steps_per_epoch=2, epochs=1, verbose=0)


def _on_1():
    options = tf.compat.v1.OptimizerOptions(global_jit_level=tf.compat.v1.OptimizerOptions.ON_1)
    return tf.compat.v1.ConfigProto(graph_options=tf.compat.v1.GraphOptions(optimizer_options=options))


def test_global_jit_level_on_1_clusters_and_runs_a_py_function(strategy):
    config = kte.RunConfig(session_config=_on_1(), tf_random_seed=1, tpu_config=kte.TPUConfig(iterations_per_loop=4))
    clustered = make_model(py_function_model_fn, strategy=strategy, config=config, params={"string": True})
    assert _xla_marks(clustered.trace(input_fn)) == {"clusters"}
    clustered.fit(input_fn, steps_per_epoch=8, epochs=1, verbose=0)
    plain = make_model(py_function_model_fn, strategy=strategy, seed=1, params={"string": True})
    plain.fit(input_fn, steps_per_epoch=8, epochs=1, verbose=0)
    for name, variable in plain.variables_by_name.items():
        np.testing.assert_allclose(clustered.variables_by_name[name].numpy(), variable.numpy(), rtol=TOL, atol=TOL)
    # An explicit False wins over the session's switch.
    off = make_model(get_variable_mlp, strategy=strategy, config=config, jit_compile=False)
    assert _xla_marks(off.trace(input_fn)) == set()


def test_run_config_jit_compile_reaches_the_facade_step(tmp_path):
    plain = make_estimator(tmp_path / "plain", params={"optimizer": "adam"}, tf_random_seed=1)
    compiled = make_estimator(tmp_path / "xla", params={"optimizer": "adam"}, tf_random_seed=1, jit_compile=True)
    assert compiled.config.jit_compile is True
    results = []
    for estimator in (plain, compiled):
        estimator.train(input_fn, max_steps=8)
        results.append(estimator.evaluate(input_fn, steps=2))
    for key in ("loss", "global_step"):
        np.testing.assert_allclose(results[0][key], results[1][key], rtol=TOL)
    assert results[1]["global_step"] == 8
    model = kte.EstimatorModel(get_variable_mlp, config=compiled.config, train_batch_size=16)
    assert model.jit_compile is True and "program" in _xla_marks(model.trace(input_fn))


def test_bad_jit_compile_values_name_the_choices():
    with pytest.raises(ValueError, match="must be 'auto', True or False"):
        make_model(get_variable_mlp, jit_compile="yes")
    with pytest.raises(ValueError, match="jit_compile must be True, False or None"):
        kte.RunConfig(jit_compile="auto")
    model = make_model(get_variable_mlp)
    assert model.jit_compile is False
    model.compile(jit_compile=True)
    assert model.jit_compile is True
    model.compile(steps_per_execution=2)  # None keeps the model's setting
    assert model.jit_compile is True


def _nan_input_fn(params):
    features, labels = _rows(160)
    labels[16 * 6] = np.nan  # the 7th batch's loss is NaN
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(params["batch_size"], drop_remainder=True)


@pytest.mark.parametrize("use_tpu", [True, False])
def test_nan_checks_and_exact_stop_steps_are_unchanged(strategy, use_tpu):
    messages = []
    for jit in (False, True):
        model = make_model(get_variable_mlp, strategy=strategy, k=2, jit_compile=jit, use_tpu=use_tpu)
        with pytest.raises(FloatingPointError, match="global step") as raised:
            model.fit(_nan_input_fn, callbacks=[kte.StopAtStep(steps=10)], verbose=0)
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    # One replica (and the strategy path's replicas) train on the 7th batch at step 7: its execution ends at 8.
    assert "global step 8" in messages[1] or (not use_tpu and strategy.num_replicas_in_sync == 4)
    model = make_model(get_variable_mlp, strategy=strategy, k=4, jit_compile=True, use_tpu=use_tpu)
    model.fit(input_fn, callbacks=[kte.StopAtStep(steps=6)], verbose=0)
    assert model.global_step == 6  # an execution of 4, then one of 2


def unfetched_ops_model_fn(features, labels, mode, params):
    """An Adam update built in every mode and a counter update nothing fetches (TF1: it never runs)."""
    counters = [
        tf.compat.v1.get_variable(name, [], tf.float32, tf.compat.v1.zeros_initializer(), trainable=False)
        for name in ("unfetched", "fetched")
    ]
    counters[0].assign_sub(1.0)
    output = tf.compat.v1.layers.dense(features["x"], 1)
    loss = tf.compat.v1.losses.mean_squared_error(labels, output)
    with tf.control_dependencies([counters[1].assign_sub(1.0)]):
        train_op = tf.compat.v1.train.AdamOptimizer(0.01).minimize(loss, tf.compat.v1.train.get_or_create_global_step())
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op if mode == kte.ModeKeys.TRAIN else None)


def test_only_what_the_step_fetches_runs_under_xla(strategy):
    model = make_model(unfetched_ops_model_fn, strategy=strategy, jit_compile=True)
    model.fit(input_fn, steps_per_epoch=4, epochs=1, verbose=0)
    model.evaluate(input_fn, steps=4, verbose=0)
    assert float(model.variables_by_name["unfetched"].numpy()) == 0.0
    assert float(model.variables_by_name["fetched"].numpy()) == -4.0  # training steps only
    assert model.global_step == 4
