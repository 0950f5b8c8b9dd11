"""Evaluation streams: a 2x-resolution sweep over a few thousand images holds one batch at a time, so its peak
memory does not grow with the number of images, and the metric keeps one small host-side record per image."""

from __future__ import annotations

import pytest
import torch
from test_tools import tiny_config

from vispe.bench.timing import peak_memory_mb
from vispe.engine.config import load_config
from vispe.registry import MODELS
from vispe.sweeps.resolution import sweep


@pytest.mark.slow
def test_sweep_memory_does_not_grow_with_the_number_of_images(tmp_path) -> None:
    from mmengine.registry import init_default_scope

    cfg = load_config(tiny_config(tmp_path))  # trained at 32 px; evaluated here at 64 px (2x)
    init_default_scope('vispe')
    torch.save({'state_dict': MODELS.build(cfg.model).state_dict()}, tmp_path / 'model.pth')

    def run(num_images: int) -> dict:
        cfg.test_dataloader.dataset.num_samples = num_images
        cfg.test_dataloader.batch_size = 64
        return sweep(cfg, str(tmp_path / 'model.pth'), [64], device='cpu', show_progress=False)

    peaks = {n: peak_memory_mb(lambda n=n: run(n), 'cpu') for n in (256, 2048)}
    print(f'peak MiB by number of images: {peaks}')
    assert peaks[2048] < 1.25 * peaks[256], f'peak MiB by number of images: {peaks}'
    result = run(2048)['results'][0]
    assert result['resolution'] == 64 and 0.0 <= result['value'] <= 100.0


def test_metric_records_are_host_scalars(tmp_path) -> None:
    """What the evaluator keeps per image: plain Python numbers, not tensors on the model's device."""
    from mmengine.evaluator import Evaluator
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner

    cfg = load_config(tiny_config(tmp_path))
    init_default_scope('vispe')
    model = MODELS.build(cfg.model).eval()
    evaluator = Evaluator(cfg.test_evaluator)
    loader = Runner.build_dataloader(cfg.test_dataloader, seed=0)
    batch = next(iter(loader))
    with torch.no_grad():
        evaluator.process(data_samples=model.test_step(batch), data_batch=batch)
    records = evaluator.metrics[0].results
    assert len(records) == len(batch['inputs'])
    assert all(isinstance(x, (int, float)) for record in records for x in record)
