"""Inference and reporting shared by the sweeps and experiments: checkpoints read for evaluation, image and point
inference, generation metrics, report tables and plots, and output files that never overwrite a result."""
