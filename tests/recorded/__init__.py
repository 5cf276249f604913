"""What the original TPUEstimator (TensorFlow 2.15) gave, as generated files: `X_generated.py` is written by `scripts/X.py` or `scripts/record_X.py`; do not edit by hand."""
