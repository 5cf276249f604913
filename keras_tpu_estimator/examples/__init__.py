"""Runnable examples: `python -m keras_tpu_estimator.examples.synthetic_mlp`.

Each is an unchanged TPUEstimator-style program (flags, `main()`, `model_fn`, `input_fn`)
that `bash scripts/demo.sh` runs end to end on synthetic data.
"""
