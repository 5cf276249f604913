"""The bundled example (README's first command) runs and learns."""

from keras_tpu_estimator.examples import synthetic_mlp


def test_example_trains_evaluates_and_predicts():
    result = synthetic_mlp.main(["--steps", "200", "--iterations-per-loop", "50"])
    assert result["global_step"] == 200
    assert result["loss_after"] < 0.5 * result["loss_before"]
    assert result["accuracy"] > 0.7
