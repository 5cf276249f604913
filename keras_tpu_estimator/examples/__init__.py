"""Runnable examples: `python -m keras_tpu_estimator.examples.synthetic_mlp`."""
