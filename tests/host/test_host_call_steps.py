"""The global step host-call tensors see on the strategy path, and `experimental_host_call_every_n_steps`.

On a TPU a host call's tensors were those of the step in the loop, so a read of
the global step was the step's 0-based index wherever `model_fn` placed it
(tensorflow/tpu's ResNet reads it after `minimize`: its summaries were at steps
0..23 of 24), and `_OutfeedHostCall.create_enqueue_op(step)` sent the steps
whose index within their loop is a multiple of n (reference ~1835, ~2181-2210,
~3655-3675 `_train_on_tpu_system`'s `while_loop` index).
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from tests.fixtures import models


def resnet_style_model_fn(read: str):
    """`read`: where `model_fn` reads the global step: "after" minimize (ResNet), "before" it, or "control"
    (after, under a control dependency on the train_op)."""

    def model_fn(features, labels, mode, params):
        global_step = tf.compat.v1.train.get_global_step()
        if read == "before":
            gs_t = tf.reshape(global_step, [1])
        spec = models.get_variable_mlp(features, labels, mode, params)
        if read == "after" or mode != kte.ModeKeys.TRAIN:
            gs_t = tf.reshape(global_step, [1])
        elif read == "control":
            with tf.control_dependencies([spec.train_op]):
                gs_t = tf.reshape(tf.identity(global_step), [1])
        loss_t = tf.reshape(spec.loss, [1])
        logdir = params["logdir"]

        def host_call_fn(gs, loss):
            gs = gs[0]
            with tf.summary.create_file_writer(logdir).as_default():
                tf.summary.scalar("loss", loss[0], step=gs)
                tf.summary.scalar("gs", tf.cast(gs, tf.float32), step=gs)
            return tf.compat.v1.summary.all_v2_summary_ops()

        return spec._replace(host_call=(host_call_fn, [gs_t, loss_t]))

    return model_fn


def estimator(tmp_path, strategy, read="after", k=4, every_n=1):
    config = kte.RunConfig(
        model_dir=str(tmp_path / "model"), train_distribute=strategy, tf_random_seed=7,
        tpu_config=kte.TPUConfig(iterations_per_loop=k, experimental_host_call_every_n_steps=every_n),
    )
    return kte.TPUEstimator(
        resnet_style_model_fn(read), config=config, params={"logdir": str(tmp_path / "host")},
        train_batch_size=32, eval_batch_size=32,
    )


def steps_of(logdir, tag):
    """(step, value) of each `tag` scalar in `logdir`'s event files, by step."""
    found = []
    for path in tf.io.gfile.glob(f"{logdir}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            found += [(event.step, float(tf.make_ndarray(v.tensor))) for v in event.summary.value if v.tag == tag]
    return sorted(found)


@pytest.mark.parametrize("read", ["after", "before", "control"])
@pytest.mark.parametrize("k", [4, 5])
def test_host_call_summaries_are_at_steps_0_to_23_of_24(tmp_path, strategy, read, k):
    est = estimator(tmp_path, strategy, read=read, k=k)
    est.train(models.input_fn, steps=24)
    assert est.get_variable_value("global_step") == 24  # the train_op counted every step
    gs = steps_of(tmp_path / "host", "gs")
    assert gs == [(step, float(step)) for step in range(24)]
    assert [step for step, _ in steps_of(tmp_path / "host", "loss")] == list(range(24))


def test_the_train_op_and_loss_are_those_of_program_order(tmp_path, strategy):
    """Only host tensors see the step before its update: the loss of a 24-step run is the same with either read."""
    losses = {}
    for read in ("after", "before"):
        est = estimator(tmp_path / read, strategy, read=read, k=5)
        est.train(models.input_fn, steps=24)
        losses[read] = [value for _, value in steps_of(tmp_path / read / "host", "loss")]
    np.testing.assert_array_equal(losses["after"], losses["before"])
    assert len(losses["after"]) == 24


@pytest.mark.parametrize(
    ("k", "every_n", "expected"),
    [
        # Loops of 5, 5, 5, 5 and 4 steps: indexes 0, 2, 4 of each.
        (5, 2, [0, 2, 4, 5, 7, 9, 10, 12, 14, 15, 17, 19, 20, 22]),
        # Loops of 4: indexes 0 and 3 (the global rule would give 0, 3, 6, ...).
        (4, 3, [0, 3, 4, 7, 8, 11, 12, 15, 16, 19, 20, 23]),
        # n >= iterations_per_loop: each loop's first step.
        (5, 5, [0, 5, 10, 15, 20]),
        (4, 8, [0, 4, 8, 12, 16, 20]),
    ],
)
def test_every_n_steps_chooses_by_the_index_within_each_loop(tmp_path, strategy, k, every_n, expected):
    est = estimator(tmp_path, strategy, k=k, every_n=every_n)
    est.train(models.input_fn, steps=24)
    assert [step for step, _ in steps_of(tmp_path / "host", "gs")] == expected


def test_a_second_train_call_starts_its_loops_again(tmp_path, strategy):
    est = estimator(tmp_path, strategy, k=4, every_n=3)
    est.train(models.input_fn, steps=6)  # loops of 4 and 2
    est.train(models.input_fn, steps=5)  # loops of 4 and 1
    assert [step for step, _ in steps_of(tmp_path / "host", "gs")] == [0, 3, 4, 6, 9, 10]


def test_evaluation_host_call_sees_the_model_s_step(tmp_path, strategy):
    est = estimator(tmp_path, strategy, k=4, every_n=3)
    est.train(models.input_fn, steps=8)
    est.evaluate(models.input_fn, steps=3)  # every step, at the model's step
    gs = steps_of(tmp_path / "host", "gs")
    assert gs == [(0, 0.0), (3, 3.0), (4, 4.0), (7, 7.0), (8, 8.0), (8, 8.0), (8, 8.0)]


def test_replace_reads_rewires_only_stateless_paths_from_the_variable():
    from keras_tpu_estimator import _compat

    step, other = tf.Variable(5, dtype=tf.int64), tf.Variable(1, dtype=tf.int64)

    @tf.function(autograph=False)
    def run():
        before = step.read_value()
        update = step.assign_add(1)
        with tf.control_dependencies([update]):
            after = tf.reshape(tf.identity(step), [1])  # a read under a control dependency
        plain = step + other  # one input rewired, the other kept
        stateful = tf.reshape(tf.numpy_function(lambda s: s, [step.value()], tf.int64), [1])
        return _compat.replace_reads([after, plain, other.read_value(), stateful, eager], before, before)

    eager = tf.constant([3], tf.int64)  # captured as it is
    after, plain, untouched, stateful, kept = (t.numpy() for t in run())
    assert kept.tolist() == [3]
    assert after.tolist() == [5] and plain == 6 and untouched == 1
    assert stateful.tolist() == [6]  # through a stateful op: left as it is (the read after the update)
    assert step.numpy() == 6  # the update ran once
