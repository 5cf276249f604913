"""`input_fn` deployed as TPUEstimator deployed it on a TPU (`per_host_input_for_training`).

The original (`tpu_estimator.py`: `generate_per_host_enqueue_ops_fn_for_host`,
`generate_per_core_enqueue_ops_fn_for_host`, `generate_per_host_v2_enqueue_ops_fn_for_host`;
`tpu_context.py`: `batch_size_for_input_fn`, `is_input_sharded_per_core`), with a host
standing for one worker's replicas (1 here, or the 4 of `MirroredStrategy`):

- `PER_HOST_V1` (the default; EVAL and PREDICT unless `PER_HOST_V2`): one call per host
  with the per-host batch (global / hosts), each batch split over the host's cores, core 0
  taking the first rows (PREDICT padded first);
- `PER_HOST_V2`: one call per host with the per-core batch, successive batches to the cores;
- `PER_SHARD_V1` (TRAIN): one call per core with the per-core batch and its own context.
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.inputs.deployment import interleave_replicas, split_to_replicas

PIPELINES = {
    "PER_HOST_V1": kte.InputPipelineConfig.PER_HOST_V1,
    "PER_HOST_V2": kte.InputPipelineConfig.PER_HOST_V2,
    "PER_SHARD_V1": kte.InputPipelineConfig.PER_SHARD_V1,
}


def _estimator(tmp_path, strategy, pipeline, batch=8):
    config = kte.RunConfig(
        model_dir=str(tmp_path), train_distribute=strategy,
        tpu_config=kte.TPUConfig(iterations_per_loop=1, per_host_input_for_training=PIPELINES[pipeline]),
    )
    seen = {"model_fn": []}

    def model_fn(features, labels, mode, params):
        seen["model_fn"].append(params["batch_size"])
        weight = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.ones_initializer())
        output = features["x"] * weight
        if mode == kte.ModeKeys.PREDICT:
            return kte.TPUEstimatorSpec(mode, predictions={"x": output, "id": features["id"]})
        loss = tf.reduce_mean(tf.square(output - labels))
        step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.0).minimize(loss, step)
        return kte.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    estimator = kte.TPUEstimator(model_fn, config=config, train_batch_size=batch,
                                 eval_batch_size=batch, predict_batch_size=batch)
    return estimator, seen


def _rows(rows):
    ids = np.arange(rows, dtype=np.int64)
    return {"x": ids.astype(np.float32), "id": ids}, ids.astype(np.float32)


@pytest.mark.parametrize("pipeline", list(PIPELINES))
def test_predict_with_take_2_gives_the_originals_rows(strategy, tmp_path, pipeline):
    """predict_batch_size=8, `.take(2)` of the batches: PER_HOST_V1 (and PER_SHARD_V1, which
    predicts per host) gave input_fn 8 rows a batch: 16 predictions on 1 or 4 cores of a host;
    PER_HOST_V2 gave it the per-core 2 on 4 cores: 4 predictions (16 on 1 core)."""
    estimator, seen = _estimator(tmp_path, strategy, pipeline)
    batches = []

    def input_fn(params):
        batches.append(params["batch_size"])
        features, _ = _rows(64)
        return tf.data.Dataset.from_tensor_slices(features).batch(params["batch_size"]).take(2)

    ids = [int(p["id"]) for p in estimator.predict(input_fn)]
    replicas = strategy.num_replicas_in_sync
    per_input_fn = 8 // replicas if pipeline == "PER_HOST_V2" else 8
    assert batches == [per_input_fn]
    assert ids == list(range(2 * per_input_fn))
    assert set(seen["model_fn"]) == {8 // replicas}  # model_fn: the per-core batch


@pytest.mark.parametrize("pipeline", list(PIPELINES))
def test_train_calls_input_fn_as_the_original(strategy, tmp_path, pipeline):
    """TRAIN, batch 8: PER_HOST_V1 one call of 8 rows; PER_HOST_V2 one call of 8 / cores;
    PER_SHARD_V1 one call per core of 8 / cores, invocation index = core (tensors returned)."""
    estimator, seen = _estimator(tmp_path, strategy, pipeline)
    calls = []

    def input_fn(params):
        context = params["context"]
        _, index, count, fed = context.current_input_fn_deployment()
        calls.append((params["batch_size"], index, count, fed))
        features, labels = _rows(64)
        dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat()
        dataset = dataset.batch(params["batch_size"], drop_remainder=True)
        if pipeline == "PER_SHARD_V1":
            return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        return dataset

    estimator.train(input_fn, steps=2)
    replicas = strategy.num_replicas_in_sync
    distinct = [c for i, c in enumerate(calls) if i == 0 or c != calls[i - 1]]  # tensors: called twice
    if pipeline == "PER_HOST_V1":
        assert distinct == [(8, 0, 1, replicas)]
    elif pipeline == "PER_HOST_V2":
        assert distinct == [(8 // replicas, 0, 1, replicas)]
    else:
        assert distinct == [(8 // replicas, core, replicas, 1) for core in range(replicas)]
    assert set(seen["model_fn"]) == {8 // replicas}


def test_per_host_v1_eval_sizes_its_data_by_the_per_host_batch(strategy, tmp_path):
    """EVAL under PER_HOST_V1: input_fn gets eval_batch_size (the per-host batch) and `.take(1)` of it
    evaluates 8 rows: the loss of rows 0..7 against labels 0 (here every replica's real rows count)."""
    estimator, _ = _estimator(tmp_path, strategy, "PER_HOST_V1")
    estimator.train(lambda params: tf.data.Dataset.from_tensor_slices(_rows(64)).repeat().batch(
        params["batch_size"], drop_remainder=True), steps=1)

    def input_fn(params):
        features, _ = _rows(64)
        return tf.data.Dataset.from_tensor_slices((features, tf.zeros([64]))).batch(params["batch_size"]).take(1)

    result = estimator.evaluate(input_fn)
    assert result["loss"] == pytest.approx(np.mean(np.arange(8.0) ** 2))


def test_a_pipeline_hands_consecutive_elements_to_replicas_in_order(strategy):
    """What the split relies on: element i of a pipeline goes to replica i % replicas."""
    replicas = strategy.num_replicas_in_sync
    dataset = strategy.distribute_datasets_from_function(lambda _: tf.data.Dataset.range(2 * replicas))
    step = next(iter(dataset))
    values = strategy.experimental_local_results(step)
    assert [int(v) for v in values] == list(range(replicas))


def test_the_split_gives_contiguous_slices_and_broadcasts_scalars():
    dataset = tf.data.Dataset.from_tensors({"x": tf.range(8), "scale": tf.constant(3)})
    parts = list(split_to_replicas(dataset, 4))
    assert [p["x"].numpy().tolist() for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [int(p["scale"]) for p in parts] == [3, 3, 3, 3]
    odd = tf.data.Dataset.from_generator(lambda: iter([np.arange(5)]), output_signature=tf.TensorSpec([None], tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match="split evenly"):
        list(split_to_replicas(odd, 2))


def test_per_shard_pipelines_interleave_by_core():
    datasets = [tf.data.Dataset.range(core * 10, core * 10 + 2) for core in range(3)]
    assert [int(e) for e in interleave_replicas(datasets)] == [0, 10, 20, 1, 11, 21]


def test_sliced_eval_input_calls_input_fn_with_the_hosts_batch(strategy, tmp_path):
    """eval_training_input_configuration=SLICED under PER_HOST_V2: the original's input_fn got the
    global batch (8) for PREDICT (`batch_size_for_input_fn`: broadcast); one host here."""
    config = kte.RunConfig(
        model_dir=str(tmp_path), train_distribute=strategy,
        tpu_config=kte.TPUConfig(per_host_input_for_training=kte.InputPipelineConfig.PER_HOST_V2,
                                 eval_training_input_configuration=kte.InputPipelineConfig.SLICED),
    )
    estimator, _ = _estimator(tmp_path, strategy, "PER_HOST_V2")
    estimator = kte.TPUEstimator(estimator._model_fn, config=config, train_batch_size=8, predict_batch_size=8)
    batches = []

    def input_fn(params):
        batches.append(params["batch_size"])
        return tf.data.Dataset.from_tensor_slices(_rows(64)[0]).batch(params["batch_size"]).take(2)

    assert len(list(estimator.predict(input_fn))) == 16 and batches == [8]
