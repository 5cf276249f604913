"""TF1 model code inside model_fn: compat.v1 layers, losses, custom and cross-shard optimizers."""

import functools
import logging

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import models, tf1_models
from tests.fixtures.models import assert_replicas_equal

make_model = functools.partial(models.make_model, batch=32)  # this file's models take batches of 32


def tf1_graph_variable_names(model_fn, params):
    """The variable names the same model_fn gets in a TF1 graph (TRAIN mode)."""
    with tf.Graph().as_default(), kte.legacy_layers():
        features = {"image": tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 1])}
        labels = tf.compat.v1.placeholder(tf.int64, [None])
        model_fn(features, labels, kte.ModeKeys.TRAIN, dict(params, batch_size=8))
        return sorted(v.op.name for v in tf.compat.v1.global_variables())


# ------------------------------------------------------------------ compat.v1 layers
def test_cnn_of_compat_v1_layers_trains_evaluates_predicts_with_tf1_names(strategy, tmp_path):
    model = make_model(tf1_models.cnn_model_fn, strategy, params={})
    before = model.evaluate(tf1_models.image_input_fn, steps=4, verbose=0)
    model.fit(
        tf1_models.image_input_fn, verbose=0,
        callbacks=[kte.StopAtStep(steps=40), kte.CheckpointSaver(str(tmp_path))],
    )
    after = model.evaluate(tf1_models.image_input_fn, steps=4, verbose=0)
    assert after < 0.7 * before
    predictions = model.predict(tf1_models.image_predict_input_fn, verbose=0)
    assert predictions["logits"].shape == (64, tf1_models.NUM_CLASSES)
    accuracy = np.mean(predictions["logits"].argmax(1) == tf1_models.image_data(64)[1])
    assert accuracy > 0.6

    saved = sorted(name for name, _ in tf.train.list_variables(str(tmp_path)))
    assert saved == tf1_graph_variable_names(tf1_models.cnn_model_fn, {})
    assert "batch_normalization/moving_mean" in saved and "conv2d/kernel/Adam" in saved


def test_other_layer_functions_and_classes_get_tf1_names(strategy):
    model = make_model(tf1_models.layer_zoo_model_fn, strategy)
    model.fit(tf1_models.image_input_fn, callbacks=[kte.StopAtStep(steps=4)], verbose=0)
    names = sorted(model.variables_by_name)
    assert names == tf1_graph_variable_names(tf1_models.layer_zoo_model_fn, {})
    for expected in ["conv2d/kernel", "conv2d_transpose/kernel", "conv2d_1/bias",
                     "conv1d/kernel", "dense_1/kernel/Momentum", "batch_normalization/moving_variance"]:
        assert expected in names


def test_compat_v1_layers_route_only_inside_model_fn(strategy):
    model = make_model(tf1_models.cnn_model_fn, strategy, params={})
    model.fit(tf1_models.image_input_fn, callbacks=[kte.StopAtStep(steps=4)], verbose=0)
    with pytest.raises(AttributeError, match="not available with Keras 3"):
        tf.compat.v1.layers.dense  # noqa: B018


def test_missing_tf_keras_names_the_package(strategy, monkeypatch):
    from keras_tpu_estimator import _compat

    def missing():
        raise ImportError("No module named 'tf_keras'")

    monkeypatch.setattr(_compat, "legacy_tf_layers", missing)
    model = make_model(tf1_models.cnn_model_fn, strategy, params={})
    major, minor = tf.__version__.split(".")[:2]
    with pytest.raises(
        AttributeError, match=rf'needs the `tf_keras` package.*--no-deps "tf_keras=={major}\.{minor}\.\*"'
    ):
        model.fit(tf1_models.image_input_fn, callbacks=[kte.StopAtStep(steps=1)], verbose=0)


# ------------------------------------------------------------------ batch normalization
def bn_model_fn(features, labels, mode, params):
    normed = tf.compat.v1.layers.batch_normalization(
        features["x"], momentum=0.5, training=mode == kte.ModeKeys.TRAIN
    )
    output = tf.compat.v1.layers.dense(normed, 1, kernel_initializer=tf.compat.v1.ones_initializer())
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions={"y": output})
    loss = tf.reduce_mean(tf.square(output - labels))
    train_op = None
    if mode == kte.ModeKeys.TRAIN:
        wired = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
        assert len(wired) == 2, wired  # moving mean and variance, as in a TF1 graph
        with tf.control_dependencies(wired if (params or {}).get("wire_updates", True) else []):
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(
                loss, tf.compat.v1.train.get_or_create_global_step()
            )
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def shifted_input_fn(params):
    features, labels = models.data()
    features = {"x": features["x"] * 2.0 + 3.0}
    return tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(
        params["batch_size"], drop_remainder=True
    )


def test_batch_norm_statistics_stay_unless_the_train_op_depends_on_update_ops(strategy):
    """TF1's rule: UPDATE_OPS run only when fetched, as a `session.run(train_op)` ran them."""
    model = make_model(bn_model_fn, strategy, params={"wire_updates": False}, batch=64)
    model.fit(shifted_input_fn, callbacks=[kte.StopAtStep(steps=12)], verbose=0)
    np.testing.assert_array_equal(model.variables_by_name["batch_normalization/moving_mean"].numpy(), 0.0)
    np.testing.assert_array_equal(model.variables_by_name["batch_normalization/moving_variance"].numpy(), 1.0)
    assert model.global_step == 12


def test_batch_norm_moving_statistics_update_in_training_and_serve_eval_and_predict(strategy):
    """The usual TF1 code: `train_op` under `control_dependencies(UPDATE_OPS)`."""
    model = make_model(bn_model_fn, strategy, batch=64)
    model.fit(shifted_input_fn, callbacks=[kte.StopAtStep(steps=12)], verbose=0)
    variables = {name: v.numpy() for name, v in model.variables_by_name.items()}
    # The input has mean 3 and variance 4 per column; the statistics moved there from 0 and 1.
    np.testing.assert_allclose(variables["batch_normalization/moving_mean"], 3.0, atol=0.5)
    np.testing.assert_allclose(variables["batch_normalization/moving_variance"], 4.0, atol=1.0)

    # EVAL and PREDICT normalise with the moving statistics, not the batch's.
    # (Each replica keeps its own statistics, as each TPU core did: set them all.)
    moving_mean = np.array([10.0, -10.0, 0.0, 0.0], np.float32)
    moving_variance = np.array([1.0, 4.0, 9.0, 16.0], np.float32)
    model.variables_by_name["batch_normalization/moving_mean"].assign(moving_mean)
    model.variables_by_name["batch_normalization/moving_variance"].assign(moving_variance)
    variables = {name: v.numpy() for name, v in model.variables_by_name.items()}
    x = models.data(64)[0]["x"]
    normed = (x - moving_mean) / np.sqrt(moving_variance + 1e-3)
    normed = normed * variables["batch_normalization/gamma"] + variables["batch_normalization/beta"]
    expected = normed @ variables["dense/kernel"] + variables["dense/bias"]
    predictions = model.predict(models.predict_input_fn, verbose=0)["y"]
    np.testing.assert_allclose(predictions, expected, rtol=1e-4, atol=1e-4)
    assert_unchanged = model.variables_by_name["batch_normalization/moving_mean"].numpy()
    model.evaluate(shifted_input_fn, steps=2, verbose=0)
    np.testing.assert_array_equal(
        model.variables_by_name["batch_normalization/moving_mean"].numpy(), assert_unchanged
    )


# ------------------------------------------------------------------ dropout, losses, regularizers
def dropout_model_fn(features, labels, mode, params):
    x = features["x"]
    training = mode == kte.ModeKeys.TRAIN
    layer_dropped = tf.compat.v1.layers.dropout(tf.ones_like(x), 0.5, training=training)
    keep_prob = 0.5 if training else 1.0
    nn_dropped = tf.compat.v1.nn.dropout(tf.ones_like(x), keep_prob=keep_prob)
    kernel = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.zeros_initializer())
    output = tf.matmul(x, kernel)
    zero_fraction = tf.stack([tf.reduce_mean(tf.cast(t == 0, tf.float32)) for t in (layer_dropped, nn_dropped)])
    host_call = (params["record"], [tf.reshape(zero_fraction, [1, 2])])
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions={"y": output}, host_call=host_call)
    loss = tf.compat.v1.losses.mean_squared_error(labels, output)
    train_op = None
    if training:
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(
            loss, tf.compat.v1.train.get_or_create_global_step()
        )
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=host_call)


def test_dropout_follows_the_mode(strategy):
    seen = []

    def record(fractions):
        return tf.numpy_function(lambda f: seen.append(f) or np.int64(0), [fractions], tf.int64)

    model = make_model(dropout_model_fn, strategy, params={"record": record}, batch=64)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=8)], verbose=0)
    trained = np.concatenate(seen)
    assert trained.shape[1] == 2
    np.testing.assert_allclose(trained.mean(axis=0), [0.5, 0.5], atol=0.05)
    seen.clear()
    model.predict(models.predict_input_fn, verbose=0)
    model.evaluate(models.input_fn, steps=2, verbose=0)
    np.testing.assert_array_equal(np.concatenate(seen), 0.0)


def regularized_model_fn(features, labels, mode, params):
    output = tf.compat.v1.layers.dense(
        features["x"], 1,
        kernel_initializer=tf.compat.v1.constant_initializer([[1.0], [1.0], [1.0], [1.0]]),
        kernel_regularizer=lambda w: 0.5 * tf.reduce_sum(tf.square(w)),
    )
    tf.compat.v1.losses.mean_squared_error(labels, output)
    losses = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES)
    assert len(losses) == 1, losses
    loss = tf.compat.v1.losses.get_total_loss()
    return kte.TPUEstimatorSpec(mode, loss=loss)


def test_losses_and_regularization_collections_are_per_replica(strategy):
    model = make_model(regularized_model_fn, strategy, batch=64)
    loss = model.evaluate(models.input_fn, steps=10, verbose=0)
    features, labels = models.data()
    data_loss = np.mean((features["x"].sum(axis=1, keepdims=True) - labels) ** 2)
    assert loss == pytest.approx(data_loss + 0.5 * 4.0, rel=1e-5)


# ------------------------------------------------------------------ optimizers across replicas
OPTIMIZERS = ["bert", "bert+cross_shard", "adam", "adam+cross_shard"]


def _train_bert_style(strategy, optimizer, steps=20, record=None):
    model = make_model(
        tf1_models.bert_style_model_fn, strategy, params={"optimizer": optimizer, "record": record},
        k=4, batch=32, seed=7,
    )
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=steps)], verbose=0)
    return model


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_hand_written_updates_match_one_replica_and_keep_replicas_identical(optimizer, mirrored):
    one = _train_bert_style(tf.distribute.get_strategy(), optimizer)
    four = _train_bert_style(mirrored, optimizer)
    assert_replicas_equal(four)
    assert four.global_step == one.global_step == 20
    for name, variable in one.variables_by_name.items():
        np.testing.assert_allclose(
            four.variables_by_name[name].numpy(), variable.numpy(), atol=1e-5, err_msg=name
        )
    if optimizer.startswith("bert"):
        assert "dense/kernel/adam_m" in one.variables_by_name


def test_gradient_clipping_sees_the_global_batch_gradient(mirrored):
    """Clipping is active, and still 4 replicas equal one: it ran after the mean."""
    norms = []

    def record(step, learning_rate, norm):
        return tf.numpy_function(lambda n: norms.append(n) or np.int64(0), [norm], tf.int64)

    one = _train_bert_style(tf.distribute.get_strategy(), "bert", steps=4, record=record)
    four = _train_bert_style(mirrored, "bert", steps=4, record=record)
    first_one, first_four = norms[0], norms[4]
    assert first_one[0] > 2.0  # so clip_norm=1.0 clips
    np.testing.assert_allclose(first_four, first_one[0], rtol=1e-5)  # each replica saw the global norm
    for name, variable in one.variables_by_name.items():
        np.testing.assert_allclose(four.variables_by_name[name].numpy(), variable.numpy(), atol=1e-6)


def test_cross_shard_group_assignment_is_refused(strategy):
    def model_fn(features, labels, mode, params):
        output = tf.compat.v1.layers.dense(features["x"], 1)
        loss = tf.reduce_mean(tf.square(output - labels))
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.1), group_assignment=[[0]]
        )
        step = tf.compat.v1.train.get_or_create_global_step()
        return kte.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, step))

    model = make_model(model_fn, strategy)
    with pytest.raises(ValueError, match="group_assignment=...\\) is not supported"):
        model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=1)], verbose=0)


def test_cross_shard_sum_reduction_sums_the_replica_gradients(mirrored):
    def model_fn(features, labels, mode, params):
        kernel = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(features["x"], kernel) - labels))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.01)
        if params["reduction"] is not None:
            optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer, reduction=params["reduction"])
        step = tf.compat.v1.train.get_or_create_global_step()
        return kte.TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, step))

    kernels = {}
    for reduction in (None, tf.compat.v1.losses.Reduction.SUM):
        model = make_model(model_fn, mirrored, params={"reduction": reduction})
        model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=1)], verbose=0)
        kernels[reduction] = model.variables_by_name["w"].numpy()
    np.testing.assert_allclose(kernels[tf.compat.v1.losses.Reduction.SUM], 4 * kernels[None], rtol=1e-5)


# ------------------------------------------------------------------ learning-rate schedules
def test_warmup_polynomial_decay_follows_the_global_step_across_executions(strategy):
    seen = {}

    def record(step, learning_rate, norm):
        def keep(s, lr):
            seen[int(s[0])] = lr.tolist()
            return np.int64(0)

        return tf.numpy_function(keep, [step, learning_rate], tf.int64)

    model = make_model(
        tf1_models.bert_style_model_fn, strategy, k=4,
        params={"optimizer": "bert", "record": record},
    )
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=12)], verbose=0)
    assert sorted(seen) == list(range(12))
    for step in (0, 5, 10):
        expected = tf1_models.expected_learning_rate(step, 0.05, total_steps=40, warmup_steps=4)
        np.testing.assert_allclose(seen[step], expected, rtol=1e-6, atol=1e-9)
    assert len(seen[5]) == strategy.num_replicas_in_sync


# ------------------------------------------------------------------ what cannot run in model_fn
def _model_fn_calling(construct):
    def model_fn(features, labels, mode, params):
        construct()
        output = tf.compat.v1.layers.dense(features["x"], 1)
        return kte.TPUEstimatorSpec(mode, loss=tf.reduce_mean(tf.square(output - labels)))

    return model_fn


@pytest.mark.parametrize(
    "construct, error, message",
    [
        (lambda: tf.compat.v1.Session(), kte.UnsupportedInModelFnError,
         r"`tf.compat.v1.Session` cannot be created inside model_fn.*host_call"),
        (lambda: tf.compat.v1.train.start_queue_runners(), kte.UnsupportedInModelFnError,
         r"queue-runner input pipeline.*tf.data"),
        (lambda: tf.compat.v1.train.shuffle_batch([tf.constant(1)], 2, 4, 1), kte.UnsupportedInModelFnError,
         r"`tf.compat.v1.train.shuffle_batch` builds"),
        (lambda: tf.contrib.tpu.CrossShardOptimizer, AttributeError,
         r"`tf.contrib.tpu` does not exist.*tf.compat.v1.tpu.CrossShardOptimizer"),
        (lambda: tf.compat.v1.contrib.summary, AttributeError, r"tf.summary. inside host_call"),
    ],
    ids=["session", "queue_runners", "shuffle_batch", "contrib_tpu", "contrib_summary"],
)
def test_constructs_that_cannot_run_in_model_fn_name_the_replacement(construct, error, message):
    model = make_model(_model_fn_calling(construct), tf.distribute.get_strategy())
    with pytest.raises(error, match=message):
        model.evaluate(models.input_fn, steps=1, verbose=0)
    assert not hasattr(tf, "contrib")
    tf.compat.v1.Session(graph=tf.Graph()).close()  # fine outside model_fn


def test_tf1_summaries_in_model_fn_point_to_host_call(strategy, caplog):
    def model_fn(features, labels, mode, params):
        output = tf.compat.v1.layers.dense(features["x"], 1)
        loss = tf.reduce_mean(tf.square(output - labels))
        tf.compat.v1.summary.scalar("my_loss", loss)
        return kte.TPUEstimatorSpec(mode, loss=loss)

    caplog.set_level(logging.WARNING, logger="keras_tpu_estimator")
    make_model(model_fn, strategy).evaluate(models.input_fn, steps=1, verbose=0)
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "my_loss" in message and "host_call" in message


# ------------------------------------------------------------------ facade and export
def test_facade_trains_and_exports_a_compat_v1_layers_model(tmp_path):
    config = kte.RunConfig(model_dir=str(tmp_path / "model"), tf_random_seed=3,
                           tpu_config=kte.TPUConfig(iterations_per_loop=4))
    estimator = kte.TPUEstimator(
        tf1_models.cnn_model_fn, config=config, params={"cross_shard": True},
        train_batch_size=32, eval_batch_size=32, predict_batch_size=32,
    )
    estimator.train(tf1_models.image_input_fn, max_steps=8)
    predicted = np.stack([p["logits"] for p in estimator.predict(tf1_models.image_predict_input_fn)])
    receiver_fn = kte.export.build_raw_serving_input_receiver_fn(
        {"image": tf.TensorSpec([None, 8, 8, 1], tf.float32)}
    )
    path = estimator.export_saved_model(str(tmp_path / "export"), receiver_fn)
    serve = tf.saved_model.load(path, tags=["serve"]).signatures["serving_default"]
    images = tf1_models.image_data(64)[0]["image"]
    np.testing.assert_allclose(serve(image=tf.constant(images))["logits"].numpy(), predicted, atol=1e-5)


def test_a_tf1_graph_checkpoint_of_the_same_code_loads_and_predicts_the_same(tmp_path):
    """Train in a TF1 graph with a Session, save with tf.compat.v1.train.Saver, serve from the bridge."""
    images = tf1_models.image_data(64)[0]["image"]
    with tf.Graph().as_default(), kte.legacy_layers():
        features = {"image": tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 1])}
        labels = tf.compat.v1.placeholder(tf.int64, [None])
        spec = tf1_models.cnn_model_fn(features, labels, kte.ModeKeys.TRAIN, {"batch_size": 32})
        train_features, train_labels = tf1_models.image_data(32)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                session.run(spec.train_op, {features["image"]: train_features["image"], labels: train_labels})
            tf.compat.v1.train.Saver().save(session, str(tmp_path / "model.ckpt"), global_step=3)
    with tf.Graph().as_default(), kte.legacy_layers():
        features = {"image": tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 1])}
        spec = tf1_models.cnn_model_fn(features, None, kte.ModeKeys.PREDICT, {"batch_size": 64})
        with tf.compat.v1.Session() as session:
            tf.compat.v1.train.Saver().restore(session, str(tmp_path / "model.ckpt-3"))
            expected = session.run(spec.predictions["logits"], {features["image"]: images})

    estimator = kte.TPUEstimator(
        tf1_models.cnn_model_fn, config=kte.RunConfig(model_dir=str(tmp_path)), params={},
        train_batch_size=32, predict_batch_size=32,
    )
    predicted = np.stack([p["logits"] for p in estimator.predict(tf1_models.image_predict_input_fn)])
    np.testing.assert_allclose(predicted, expected, rtol=1e-5, atol=1e-5)
    estimator.train(tf1_models.image_input_fn, max_steps=7)  # resumes at step 3, slots included
    assert estimator.latest_checkpoint().endswith("model.ckpt-7")


# ------------------------------------------------------------------ tf_keras models in model_fn
def tf_keras_sequential_model_fn(features, labels, mode, params):
    """TF2-era TPUEstimator code under TF_USE_LEGACY_KERAS: a tf_keras model built per call."""
    import tf_keras

    model = tf_keras.Sequential([
        tf_keras.layers.Dense(8, activation="relu", kernel_initializer="ones"),
        tf_keras.layers.Dense(1, kernel_initializer="ones"),
    ])
    output = model(features["x"])
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions={"y": output})
    loss = tf.reduce_mean(tf.square(output - labels))
    train_op = tf.compat.v1.train.GradientDescentOptimizer(1e-3).minimize(
        loss, tf.compat.v1.train.get_or_create_global_step()
    )
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op if mode == kte.ModeKeys.TRAIN else None)


def test_a_tf_keras_model_gets_the_same_names_in_every_call_and_replica(strategy):
    """tf_keras names layers per graph; replicas share one graph, yet each call names afresh."""
    model = make_model(tf_keras_sequential_model_fn, strategy)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=8)], verbose=0)
    before = model.evaluate(models.input_fn, steps=2, verbose=0)
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=16)], verbose=0)
    assert sorted(model.variables_by_name) == [
        "dense/bias", "dense/kernel", "dense_1/bias", "dense_1/kernel", "global_step",
    ]
    assert model.evaluate(models.input_fn, steps=2, verbose=0) < before
    assert model.predict(models.predict_input_fn, verbose=0)["y"].shape == (64, 1)
