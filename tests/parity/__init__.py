"""Whole-API comparisons with the original TPUEstimator's recorded results (programs, API checks, count arguments)."""
