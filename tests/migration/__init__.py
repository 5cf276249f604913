"""Tests of `keras_tpu_estimator.migration` and the `keras_tpu_estimator.estimator` namespace an old program finds."""
