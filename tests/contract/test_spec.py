"""TPUEstimatorSpec / EstimatorSpec construction and the seed's validation rules."""

import keras
import pytest
import tensorflow as tf

import keras_tpu_estimator as kte
from keras_tpu_estimator.contract.spec import check_spec

T = tf.constant([1.0, 2.0])


L = tf.constant(1.0)  # a scalar loss, which TRAIN and EVAL specs need (as the original)


def test_spec_has_every_seed_field_with_defaults():
    spec = kte.TPUEstimatorSpec(kte.ModeKeys.TRAIN, loss=L)
    assert spec._fields == (
        "mode", "predictions", "loss", "train_op", "eval_metrics", "export_outputs",
        "scaffold_fn", "host_call", "training_hooks", "evaluation_hooks", "prediction_hooks",
    )
    assert spec.training_hooks == () and spec.host_call is None


@pytest.mark.parametrize(
    "host_call, error, message",
    [
        (lambda t: t, ValueError, "host_call should be tuple or list"),
        ((lambda t: t,), ValueError, "host_call should have two elements"),
        ((1, [T]), TypeError, r"host_call\[0\] should be callable"),
        ((lambda t: t, T), ValueError, r"host_call\[1\] should be tuple or list, or dict"),
        ((lambda a, b: a, [T]), RuntimeError, "length of tensors 1 does not match method args of the function, which takes 2"),
    ],
)
def test_host_call_validation_follows_the_seed(host_call, error, message):
    with pytest.raises(error, match=message):
        kte.TPUEstimatorSpec(kte.ModeKeys.TRAIN, loss=L, host_call=host_call)
    with pytest.raises(error, match=message.replace("host_call", "eval_metrics")):
        kte.TPUEstimatorSpec(kte.ModeKeys.EVAL, loss=L, eval_metrics=host_call)


def test_varargs_and_dict_host_calls_are_accepted():
    spec = kte.TPUEstimatorSpec(kte.ModeKeys.TRAIN, loss=L, host_call=(lambda *a: a, [T, T, T]))
    assert len(spec.host_call[1]) == 3
    spec = kte.TPUEstimatorSpec(kte.ModeKeys.EVAL, loss=L, eval_metrics=(lambda a, b: a, {"a": T, "b": T}))
    assert sorted(spec.eval_metrics[1]) == ["a", "b"]
    # Too few positional arguments for the same functions is the seed's error.
    with pytest.raises(RuntimeError, match="length of tensors 1 does not match method args"):
        kte.TPUEstimatorSpec(kte.ModeKeys.EVAL, loss=L, eval_metrics=(lambda a, b: a, [T]))


def test_spec_hooks_are_session_hooks_or_callbacks():
    hook = tf.compat.v1.train.SessionRunHook()
    assert kte.TPUEstimatorSpec(kte.ModeKeys.TRAIN, loss=L, training_hooks=[hook]).training_hooks == (hook,)
    with pytest.raises(TypeError, match="^All hooks must be SessionRunHook instances, given: <object.*Callback objects"):
        kte.TPUEstimatorSpec(kte.ModeKeys.EVAL, evaluation_hooks=[object()])
    spec = kte.TPUEstimatorSpec(kte.ModeKeys.PREDICT, predictions=T, prediction_hooks=[keras.callbacks.History()])
    assert len(spec.prediction_hooks) == 1


def test_mode_and_scaffold_fn_are_not_checked_as_in_the_original():
    assert kte.TPUEstimatorSpec(None).mode is None
    assert kte.TPUEstimatorSpec("bogus").mode == "bogus"
    assert kte.TPUEstimatorSpec(kte.ModeKeys.EVAL, loss=L, scaffold_fn=3).scaffold_fn == 3


def test_estimator_spec_chief_hooks_fail_when_training_as_on_the_original_tpu_path():
    spec = kte.EstimatorSpec(kte.ModeKeys.TRAIN, loss=T[0], train_op=tf.no_op(),
                             training_chief_hooks=[tf.compat.v1.train.SessionRunHook()])
    with pytest.raises(ValueError, match=r"^training_chief_hooks returned by EstimatorSpec is not supported in TPUEstimator\.If"):
        check_spec(spec, kte.ModeKeys.TRAIN, model_fn)


def model_fn():
    pass


@pytest.mark.parametrize(
    "spec, mode, error, message",
    [
        ({"loss": 1}, "train", ValueError, r"^model_fn should return an EstimatorSpec. `model_fn` \(model_fn\)"),
        # Built without a mode (unchecked, as in the original), then used in one: the build checks.
        (kte.TPUEstimatorSpec(None), "train", ValueError, "^Missing loss. .*in mode 'train'"),
        (kte.TPUEstimatorSpec(None)._replace(loss=T), "eval", ValueError, "^Loss must be scalar, given: "),
        (kte.TPUEstimatorSpec(None), "infer", ValueError, "^Missing predictions. "),
        (kte.TPUEstimatorSpec(None, loss=T[0])._replace(train_op="op"), "train", TypeError,
         "^train_op must be Operation or Tensor, given: op$"),
    ],
)
def test_check_spec_names_the_problem(spec, mode, error, message):
    with pytest.raises(error, match=message):
        check_spec(spec, mode, model_fn)


def test_a_loss_of_shape_one_is_reshaped_to_a_scalar():
    assert kte.TPUEstimatorSpec("eval", loss=tf.constant([2.0])).loss.shape.rank == 0  # as the original
    spec = check_spec(kte.TPUEstimatorSpec(None)._replace(loss=tf.constant([2.0])), "eval", model_fn)
    assert spec.loss.shape.rank == 0 and float(spec.loss) == 2.0
