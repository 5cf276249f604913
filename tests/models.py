"""model_fns and input_fns shared by the tests, written as TPUEstimator users wrote them."""

import keras
import numpy as np
import tensorflow as tf

import keras_tpu_estimator as kte

WEIGHTS = np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32)
NUM_ROWS = 640


def data(num_rows=NUM_ROWS):
    rng = np.random.RandomState(0)
    x = rng.randn(num_rows, 4).astype(np.float32)
    return {"x": x, "id": np.arange(num_rows, dtype=np.int64)}, x @ WEIGHTS


def input_fn(params):
    features, labels = data()
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    return dataset.repeat().batch(params["batch_size"], drop_remainder=True)


def predict_input_fn(params):
    features, _ = data(64)
    dataset = tf.data.Dataset.from_tensor_slices(features)
    return dataset.batch(params["batch_size"], drop_remainder=True)


def _spec(mode, predictions, loss, optimizer):
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions=predictions)
    train_op = None
    if mode == kte.ModeKeys.TRAIN and optimizer is not None:
        step = tf.compat.v1.train.get_or_create_global_step()
        train_op = optimizer.minimize(loss, global_step=step)
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def get_variable_mlp(features, labels, mode, params):
    """A TF1 get_variable MLP trained by a TF1 optimizer named in params."""
    init = tf.compat.v1.glorot_uniform_initializer(seed=1)
    with tf.compat.v1.variable_scope("mlp"):
        w1 = tf.compat.v1.get_variable("hidden/kernel", [4, 16], initializer=init)
        b1 = tf.compat.v1.get_variable("hidden/bias", [16], initializer=tf.zeros_initializer())
        w2 = tf.compat.v1.get_variable("out/kernel", [16, 1], initializer=init)
    hidden = tf.nn.relu(tf.matmul(features["x"], w1) + b1)
    output = tf.matmul(hidden, w2)
    predictions = {"y": output, "id": features["id"]}
    loss = None if labels is None else tf.reduce_mean(tf.square(output - labels))
    optimizer = {
        "sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.05),
        "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.01),
        "keras": lambda: None,
    }[params.get("optimizer", "sgd")]()
    return _spec(mode, predictions, loss, optimizer)


def keras_layers_model(features, labels, mode, params):
    """Keras 3 layers created inline, unnamed, as a migrated model_fn does."""
    hidden = keras.layers.Dense(16, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=3))(features["x"])
    output = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=4))(hidden)
    loss = None if labels is None else tf.reduce_mean(tf.square(output - labels))
    optimizer = tf.compat.v1.train.AdamOptimizer(0.01) if params.get("tf1_adam", True) else None
    return _spec(mode, {"y": output}, loss, optimizer)


class ExecutionRecorder(keras.callbacks.Callback):
    """Records the global step at each execution boundary; `sizes` are the differences."""

    def on_train_begin(self, logs=None):
        self.steps = [self.model.global_step]

    def on_train_batch_end(self, batch, logs=None):
        self.steps.append(self.model.global_step)

    @property
    def sizes(self):
        return [int(x) for x in np.diff(self.steps)]


def assert_replicas_equal(model):
    """Every replica's copy of every model_fn variable is identical (one copy off a strategy)."""
    for name, variable in model.variables_by_name.items():
        copies = [v.numpy() for v in getattr(variable.value, "values", [variable.value])]
        for copy in copies[1:]:
            np.testing.assert_array_equal(copies[0], copy, err_msg=name)
