"""Tests of `keras_tpu_estimator.tf1`."""
