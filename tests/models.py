"""model_fns and input_fns shared by the tests, written as TPUEstimator users wrote them, and the
factories and helpers the tests share (`make_model`, `make_estimator`, `summary_values`)."""

import keras
import numpy as np
import tensorflow as tf

import keras_tpu_estimator as kte

BATCH_SIZES = ("train_batch_size", "eval_batch_size", "predict_batch_size")
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


def make_model(model_fn=get_variable_mlp, strategy=None, params=None, *, k=4, seed=None, config=None,
               batch=16, **kwargs) -> kte.EstimatorModel:
    """The `EstimatorModel` the tests build: `model_fn` on `strategy` (None: the one in scope or the default).

    k: `iterations_per_loop`; seed: `tf_random_seed`: a RunConfig of the two (k=None and
    seed=None: EstimatorModel's default RunConfig), or `config` as given (then k and seed are not).
    batch: the batch size of each mode whose `*_batch_size` kwargs do not name; None leaves
    them unset. kwargs: EstimatorModel's other arguments (use_tpu, optimizer,
    steps_per_execution, train_batch_size, ...).
    """
    if config is not None and (k != 4 or seed is not None):
        raise TypeError("make_model: k and seed go in `config` when a config is given")
    if config is None and (k is not None or seed is not None):
        tpu_config = kte.TPUConfig() if k is None else kte.TPUConfig(iterations_per_loop=k)
        config = kte.RunConfig(tpu_config=tpu_config, tf_random_seed=seed)
    if batch is not None:
        for size in BATCH_SIZES:
            kwargs.setdefault(size, batch)
    return kte.EstimatorModel(model_fn, params=params, config=config, strategy=strategy, **kwargs)


def make_estimator(model_dir, model_fn=get_variable_mlp, strategy=None, params=None, *, k=4, batch=16,
                   **config) -> kte.TPUEstimator:
    """The `TPUEstimator` the tests build: `model_fn` writing to `model_dir`, `strategy` as `train_distribute`.

    k: `iterations_per_loop`; batch: every mode's batch size; config: RunConfig's other arguments.
    """
    run_config = kte.RunConfig(model_dir=str(model_dir), train_distribute=strategy,
                               tpu_config=kte.TPUConfig(iterations_per_loop=k), **config)
    return kte.TPUEstimator(model_fn, config=run_config, params=params, train_batch_size=batch,
                            eval_batch_size=batch, predict_batch_size=batch)


def summary_values(logdir):
    """`(step, summary value)` of every value in the event files directly in `logdir`."""
    for path in sorted(tf.io.gfile.glob(f"{logdir}/events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                yield event.step, value


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
