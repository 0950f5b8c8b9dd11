"""Inference and reporting: checkpoints and their models, image and point inference, generation metrics, output
files that never overwrite a result, tables and plots. The sweeps (vispe.sweeps), the benchmarks (vispe.bench) and
the experiments (vispe.experiments) are built on them."""
