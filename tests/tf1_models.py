"""TF1-era model code, written the way TPUEstimator programs were (BERT, ResNet, MNIST)."""

import re

import numpy as np
import tensorflow as tf

import keras_tpu_estimator as kte

NUM_CLASSES = 3


def image_data(num_rows=256):
    rng = np.random.RandomState(0)
    images = rng.randn(num_rows, 8, 8, 1).astype(np.float32)
    labels = np.digitize(images.mean(axis=(1, 2, 3)), [-0.05, 0.05]).astype(np.int64)
    return {"image": images}, labels


def image_input_fn(params):
    features, labels = image_data()
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    return dataset.repeat().batch(params["batch_size"], drop_remainder=True)


def image_predict_input_fn(params):
    features, _ = image_data(64)
    return tf.data.Dataset.from_tensor_slices(features).batch(params["batch_size"])


def cnn_model_fn(features, labels, mode, params):
    """A small CNN written only with tf.compat.v1.layers, losses and a TF1 optimizer."""
    training = mode == kte.ModeKeys.TRAIN
    init = tf.compat.v1.glorot_uniform_initializer(seed=1)
    net = tf.compat.v1.layers.conv2d(
        features["image"], 8, 3, padding="same", activation=tf.nn.relu, kernel_initializer=init
    )
    net = tf.compat.v1.layers.batch_normalization(net, training=training)
    net = tf.compat.v1.layers.max_pooling2d(net, 2, 2)
    net = tf.compat.v1.layers.flatten(net)
    net = tf.compat.v1.layers.dropout(net, 0.1, training=training)
    logits = tf.compat.v1.layers.dense(
        net, NUM_CLASSES, kernel_initializer=init,
        kernel_regularizer=lambda w: 1e-3 * tf.nn.l2_loss(w),
    )
    if mode == kte.ModeKeys.PREDICT:
        return kte.TPUEstimatorSpec(mode, predictions={"logits": logits})
    tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    loss = tf.compat.v1.losses.get_total_loss()
    train_op = None
    if training:
        optimizer = tf.compat.v1.train.AdamOptimizer(0.01)
        if params.get("cross_shard"):
            optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
        update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
        with tf.control_dependencies(update_ops):
            train_op = optimizer.minimize(loss, tf.compat.v1.train.get_or_create_global_step())
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def layer_zoo_model_fn(features, labels, mode, params):
    """The other tf.compat.v1.layers functions and classes, for variable names."""
    layers = tf.compat.v1.layers
    image = features["image"]
    net = layers.Conv2D(4, 3, padding="same")(image)
    net = layers.conv2d_transpose(net, 2, 3, strides=2)
    net = layers.average_pooling2d(net, 2, 2)
    net = layers.conv2d(net, 2, 1)
    sequence = tf.reshape(image, [-1, 8, 8])
    sequence = layers.conv1d(sequence, 3, 2)
    net = tf.concat([layers.flatten(net), layers.flatten(sequence)], axis=1)
    net = layers.BatchNormalization()(net, training=mode == kte.ModeKeys.TRAIN)
    logits = layers.Dense(NUM_CLASSES)(layers.dense(net, 5))
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = None
    if mode == kte.ModeKeys.TRAIN:
        train_op = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9).minimize(
            loss, tf.compat.v1.train.get_or_create_global_step()
        )
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


class AdamWeightDecay(tf.compat.v1.train.Optimizer):
    """The BERT pattern: apply_gradients assigns m, v and the weights itself."""

    def __init__(self, learning_rate, weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6):
        super().__init__(use_locking=False, name="AdamWeightDecay")
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        updates = []
        for grad, param in grads_and_vars:
            if grad is None:
                continue
            base = re.sub(r":\d+$", "", param.name)
            slots = [
                tf.compat.v1.get_variable(
                    f"{base}/{suffix}", param.shape.as_list(), tf.float32,
                    trainable=False, initializer=tf.zeros_initializer(),
                )
                for suffix in ("adam_m", "adam_v")
            ]
            m = self.beta_1 * slots[0] + (1.0 - self.beta_1) * grad
            v = self.beta_2 * slots[1] + (1.0 - self.beta_2) * tf.square(grad)
            step = m / (tf.sqrt(v) + self.epsilon)
            if "bias" not in base:
                step += self.weight_decay * param
            updates += [
                param.assign(param - self.learning_rate * step),
                slots[0].assign(m),
                slots[1].assign(v),
            ]
        return tf.group(*updates, name=name)


def warmup_polynomial_decay(init_lr, total_steps, warmup_steps):
    """BERT's learning rate: linear warm-up, then polynomial (linear) decay."""
    global_step = tf.compat.v1.train.get_or_create_global_step()
    decayed = tf.compat.v1.train.polynomial_decay(
        tf.constant(init_lr), global_step, total_steps, end_learning_rate=0.0, power=1.0
    )
    step = tf.cast(tf.cast(global_step, tf.int32), tf.float32)
    warming = tf.cast(step < warmup_steps, tf.float32)
    return (1.0 - warming) * decayed + warming * init_lr * step / warmup_steps


def expected_learning_rate(step, init_lr, total_steps, warmup_steps):
    if step < warmup_steps:
        return init_lr * step / warmup_steps
    return init_lr * (1.0 - min(step, total_steps) / total_steps)


def bert_style_model_fn(features, labels, mode, params):
    """tf.gradients + clip_by_global_norm + a custom optimizer + a hand-made step increment."""
    init = tf.compat.v1.glorot_uniform_initializer(seed=2)
    hidden = tf.compat.v1.layers.dense(features["x"], 16, tf.nn.tanh, kernel_initializer=init)
    output = tf.compat.v1.layers.dense(hidden, 1, kernel_initializer=init)
    loss = tf.reduce_mean(tf.square(output - labels))
    if mode != kte.ModeKeys.TRAIN:
        return kte.TPUEstimatorSpec(mode, loss=loss)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    learning_rate = warmup_polynomial_decay(0.05, total_steps=40, warmup_steps=4)
    # Read before the train_op runs: the step this update is for (0-based).
    host_tensors = [tf.reshape(tf.identity(global_step), [1]), tf.reshape(learning_rate, [1])]
    kind = params["optimizer"]
    if kind.startswith("bert"):
        optimizer = AdamWeightDecay(learning_rate)
    else:
        optimizer = tf.compat.v1.train.AdamOptimizer(learning_rate)
    if kind.endswith("+cross_shard"):
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    tvars = tf.compat.v1.trainable_variables()
    grads = tf.compat.v1.gradients(loss, tvars)
    grads, norm = tf.clip_by_global_norm(grads, clip_norm=1.0)
    host_tensors.append(tf.reshape(norm, [1]))
    train_op = optimizer.apply_gradients(zip(grads, tvars, strict=True), global_step=global_step)
    if kind.startswith("bert"):
        train_op = tf.group(train_op, [global_step.assign(global_step + 1)])
    host_call = None
    if params.get("record"):  # fn(step, learning_rate, gradient_norm)
        host_call = (params["record"], host_tensors)
    return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=host_call)
