"""The one device-to-host transfer format (host/transfer.py): its cutter, its padding rule, any rank."""

import types

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.host import transfer
from tests.fixtures import models, transfer_cases
from tests.recorded import transfer_numbers_generated as recorded


def encoded_steps(steps):
    """What the device loop hands the host for `steps`: each ragged part concatenated over steps."""
    parts = [[t.numpy() for t in transfer.ragged_encoding(tf.constant(step))] for step in steps]
    return [np.concatenate(column) for column in zip(*parts, strict=True)]


def test_the_cutter_gives_back_each_step_whatever_its_rank():
    steps = [np.arange(6.0).reshape(2, 3), np.float32(7.0), np.array([8.0, 9.0]), np.zeros([0, 2])]
    cut = transfer.RaggedSteps(*encoded_steps(steps))
    assert len(cut) == 4 and cut.shapes == [(2, 3), (), (2,), (0, 2)]
    for got, expected in zip((cut[i] for i in range(4)), steps, strict=True):
        np.testing.assert_array_equal(got, expected)
    assert len(transfer.RaggedSteps(*encoded_steps(steps), count=2)) == 2


def test_the_host_graph_slices_where_the_cutter_cut():
    steps = [np.arange(4).reshape(2, 2), np.arange(3)]
    cut = transfer.RaggedSteps(*encoded_steps(steps))
    with tf.Graph().as_default() as graph:
        placeholders, step = transfer.ragged_placeholders(tf.TensorSpec(None, tf.int64))
        values = [step(tf.constant(i)) for i in range(2)]
        with tf.compat.v1.Session(graph=graph) as session:
            got = session.run(values, dict(zip(placeholders, cut.feeds(), strict=True)))
    for value, expected in zip(got, steps, strict=True):
        np.testing.assert_array_equal(value, expected)


def test_one_padding_rule_static_where_the_build_knows_and_by_rows_where_it_does_not():
    mask = np.array([1.0, 1.0, 0.0])
    ids, loss, rows = np.array([7, 8, 0]), np.array([0.5]), np.array([[1], [2], [3]])
    kept = transfer.drop_padding([ids, loss, rows], mask, per_row=[True, False, None])
    np.testing.assert_array_equal(kept[0], [7, 8])
    np.testing.assert_array_equal(kept[1], [0.5])  # not per row: whole
    np.testing.assert_array_equal(kept[2], [[1], [2]])  # unknown at build: its rows are the mask's
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        keep = tf.constant(mask) > 0.5
        got = session.run([transfer.drop_padding_in_graph(tf.constant(v), keep, row)
                           for v, row in zip([ids, loss, rows], [True, False, None], strict=True)])
    for value, expected in zip(got, kept, strict=True):
        np.testing.assert_array_equal(value, expected)
    assert transfer.drop_padding([ids], np.ones(3), [True])[0] is ids  # all real: nothing copied


@pytest.mark.parametrize("iterations_per_loop", [1, 4])
def test_a_host_tensor_whose_rank_changes_by_step_reaches_the_host_call(iterations_per_loop):
    """The CPU path, several steps an execution: a tensor of unknown rank, rank 1 then 2 then 1..."""
    seen = []

    def host_fn(value, step):
        return tf.numpy_function(lambda v, s: seen.append((v.copy(), int(s[0]))) or np.int64(0), [value, step], tf.int64)

    def model_fn(features, labels, mode, params):
        step = tf.reshape(tf.compat.v1.train.get_global_step(), [1])  # read before the train_op: 0-based
        shape = tf.cond(tf.equal(step[0] % 2, 0), lambda: tf.constant([4]), lambda: tf.constant([2, 2]))
        value = tf.reshape(tf.range(4, dtype=tf.int64) + step, shape)  # its rank is known only per step
        assert value.shape.rank is None
        spec = models.get_variable_mlp(features, labels, mode, params)
        return spec._replace(host_call=(host_fn, [value, step]))

    model = kte.EstimatorModel(
        model_fn, use_tpu=False, train_batch_size=32,
        config=kte.RunConfig(tpu_config=kte.TPUConfig(iterations_per_loop=iterations_per_loop)),
    )
    model.fit(models.input_fn, callbacks=[kte.StopAtStep(steps=8)], verbose=0)
    assert [step for _, step in seen] == list(range(8))
    for value, step in seen:
        expected = np.arange(4) + step
        np.testing.assert_array_equal(value, expected if step % 2 == 0 else expected.reshape(2, 2))


@pytest.mark.parametrize("iterations_per_loop", transfer_cases.ITERATIONS_PER_LOOP)
def test_the_rank_changing_host_call_gets_the_originals_values(iterations_per_loop, tmp_path):
    """The same program through the facade (`tf.compat.v1` model code, `use_tpu=False`), against the original's record."""
    api = types.SimpleNamespace(estimator=kte.estimator, model_dir=str(tmp_path))
    seen = transfer_cases.rank_changing_host_call(api, iterations_per_loop)
    assert seen == recorded.RANK_CHANGING[iterations_per_loop]
