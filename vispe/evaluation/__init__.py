"""Evaluation at unseen resolutions, benchmarks and plots."""
