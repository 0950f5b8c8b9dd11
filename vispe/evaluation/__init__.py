"""Inference and reporting: trained checkpoints as models, image and point inference, generation metrics, output files
that never overwrite a result, tables and plots."""
