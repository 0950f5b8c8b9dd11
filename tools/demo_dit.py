"""The DiT demo (about 1.5 hours on a 2-core CPU; not for CI): train DiT-Ti/4 on shapes2d 'shape_color' with
ape_sincos, rope_axial, rope_axial + RPE-2D and harope (about 16 minutes each), sample each at 1x, 1.5x and 2x the
training resolution, and print one table per metric; writes outputs/demo_dit/summary.md and .json, a samples figure
outputs/demo_dit/samples.png, and sample grids in outputs/demo_dit/<run>/generation/.

python tools/demo_dit.py [--samples-per-class 4]

The FD / KID feature extractor (a tiny classifier) comes from the model zoo when it is there, else it is trained
first (about 20 minutes). Finished runs are reused and unfinished ones resume.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rich.console import Console  # noqa: E402

from vispe.engine.config import load_config  # noqa: E402
from vispe.evaluation.compare import ROOT, Run, markdown_table, train  # noqa: E402
from vispe.evaluation.generation_sweep import METRICS, train_and_generate  # noqa: E402

RESOLUTIONS = ['32', '48', '64']  # 1x, 1.5x, 2x
#: label -> (config, strategies to sample with; None = the encoding's only one)
RUNS = {
    'ape_sincos': ('configs/dit/dit_tiny_ape_sincos_shapes2d.py', None),
    'rope_axial': ('configs/dit/dit_tiny_rope_axial_shapes2d.py', ['none', 'interpolate', 'yarn']),
    'rope_axial+rpe2d': ('configs/dit/dit_tiny_rope_axial_rpe2d_shapes2d.py', ['none']),
    'harope': ('configs/dit/dit_tiny_harope_shapes2d.py', ['none', 'interpolate', 'yarn']),
}
OUT = os.path.join(ROOT, 'outputs', 'demo_dit')


def feature_extractor(log) -> str:
    """The classifier checkpoint for FD / KID: the configs' default (the model zoo's), or one trained now."""
    opts = load_config(os.path.join(ROOT, RUNS['ape_sincos'][0])).generation_eval
    zoo = os.path.join(ROOT, opts.classifier_checkpoint)
    if os.path.isfile(zoo):
        return zoo
    return train(Run('shape_color', opts.classifier_config, os.path.join(OUT, 'classifier')), log)


#: grid rows (two classes of four samples each) whose first class the summary figure shows: a red, a green, a blue
#: and a yellow shape
SHOWN_ROWS = (0, 3, 5, 8)


def sample_figure(cells, path: str) -> str:
    """Sample strips from the sweeps' grids: a row per (run, strategy), a column per resolution."""
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    from vispe.evaluation.report import save_figure

    fig, axes = plt.subplots(
        len(cells), len(RESOLUTIONS), figsize=(1.6 * len(RESOLUTIONS), 1.6 * len(cells)), squeeze=False, dpi=100
    )
    for i, (label, strategy) in enumerate(cells):
        for j, res in enumerate(RESOLUTIONS):
            grid = Image.open(os.path.join(OUT, label, 'generation', f'samples_{strategy}_{res}.png')).convert('RGB')
            step = int(res) + 1  # one image plus the grid's 1 px padding
            rows = [np.asarray(grid)[r * step : (r + 1) * step + 1, : 4 * step + 1] for r in SHOWN_ROWS]
            strip = np.concatenate(rows)  # 4 x 4 samples
            ax = axes[i, j]
            ax.imshow(strip, interpolation='nearest')
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel(f'{label}\n{strategy}', fontsize=7)
            if i == 0:
                ax.set_title(f'{res} px', fontsize=8)
    save_figure(fig, path)
    Image.open(path).convert('RGB').quantize(colors=64).save(path, optimize=True)  # a palette PNG, about 4x smaller
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--samples-per-class', type=int, default=4)
    args = parser.parse_args()
    console = Console()
    log = lambda line: console.print(f'[bold]{line}[/bold]')  # noqa: E731
    start = time.time()
    classifier = feature_extractor(log)
    rows = []
    for label, (config, strategies) in RUNS.items():
        run = Run(
            'shape_color', config, os.path.join(OUT, label), [f'generation_eval.classifier_checkpoint={classifier}']
        )
        results = train_and_generate(run, RESOLUTIONS, strategies, args.samples_per_class, log)
        rows += [dict(r, encoding=label) for r in results['results']]  # the run's label: rpe2d is rope_axial too
    report = []
    for metric in METRICS:
        fmt = '.1f' if metric.endswith('accuracy') else '.4g'
        table = markdown_table([r for r in rows if r['metric'] == metric], RESOLUTIONS, fmt)
        report += [f'### {metric}', '', table, '']
    text = '\n'.join(report)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, 'summary.md'), 'w') as f:
        f.write(text)
    with open(os.path.join(OUT, 'summary.json'), 'w') as f:
        json.dump({'resolutions': RESOLUTIONS, 'results': rows}, f, indent=2)
    console.print(text)
    cells = [(label, s) for label, (_, strategies) in RUNS.items() for s in strategies or ['default']]
    figure = sample_figure(cells, os.path.join(OUT, 'samples.png'))
    console.print(f'summary: {OUT}/summary.md; samples: {figure} and {OUT}/<run>/generation/samples_*.png')
    console.print(f'total time: {(time.time() - start) / 60:.1f} min')


if __name__ == '__main__':
    main()
