"""TF1 identity inside `model_fn`: `v.op.name`, hashable tensors, collections fresh per trace.

Each case of `tf1_identity_cases.py` gives the original's result (recorded on TF 2.15,
`use_tpu=False`) on the CPU path and on the strategy path under the default
strategy and `MirroredStrategy` over 4 CPUs.
"""

import types

import numpy as np
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator._compat.tf1_identity import tf1_identity
from tests.fixtures import tf1_identity_cases as cases
from tests.recorded import tf1_identity_numbers_generated as recorded


def _assert_close(ours, original, path="result"):
    if isinstance(original, dict):
        assert sorted(ours) == sorted(original), path
        for key in original:
            _assert_close(ours[key], original[key], f"{path}[{key!r}]")
    elif isinstance(original, list) and original and all(
        isinstance(x, (int, float)) for x in np.asarray(original, dtype=object).ravel()
    ):
        np.testing.assert_allclose(np.asarray(ours, np.float64), np.asarray(original, np.float64),
                                   atol=2e-5, err_msg=path)
    elif isinstance(original, float):
        assert ours == pytest.approx(original, abs=2e-5), path
    else:
        assert ours == original, path


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_cpu_path_gives_the_originals_result(name, tmp_path):
    _assert_close(cases.CASES[name](kte, str(tmp_path), False), recorded.RESULTS[name])


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_strategy_path_gives_the_originals_result(name, strategy, tmp_path):
    api = types.SimpleNamespace(TPUEstimator=kte.TPUEstimator, RunConfig=kte.RunConfig, TPUConfig=kte.TPUConfig,
                                TPUEstimatorSpec=kte.TPUEstimatorSpec, run_on=strategy)
    _assert_close(cases.CASES[name](api, str(tmp_path), True), recorded.RESULTS[name])


def test_outside_model_fn_tensorflow_keeps_its_own_rules():
    variable = tf.Variable(1.0)

    @tf.function
    def traced():
        with pytest.raises(TypeError, match="unhashable"):
            hash(variable)
        with tf1_identity():
            assert hash(variable) == id(variable)
            assert variable.op.name == variable.name.split(":")[0]
            step = tf.constant(3)
            assert isinstance(step % 2 == 1, tf.Tensor)  # '==' stays elementwise
        return tf.constant(0)

    traced()
