"""Tests of `keras_tpu_estimator.contract`."""
