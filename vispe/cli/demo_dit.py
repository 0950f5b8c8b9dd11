"""vispe demo-dit [--samples-per-class 4] (tools/demo_dit.py, `make demo-dit`): the DiT demo (about 1.5 hours on a
2-core CPU; not for CI). Trains DiT-Ti/4 on shapes2d 'shape_color' with ape_sincos, rope_axial, rope_axial + RPE-2D
and harope (about 16 minutes each), samples each at 1x, 1.5x and 2x the training resolution, and prints one table
per metric; writes outputs/demo_dit/summary.md and .json, a samples figure outputs/demo_dit/samples.png, and sample
grids in outputs/demo_dit/<run>/generation/.

The FD / KID feature extractor (a tiny classifier) comes from the model zoo when it is there (--zoo-root: the folder
holding models/, by default the working directory), else it is trained first (about 20 minutes). Finished runs are
reused and unfinished ones resume.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

from vispe.cli.common import bold_log, demo_parser
from vispe.engine.config import load_config
from vispe.evaluation.outputs import MARKER, check_target, forcing, write_json, write_text
from vispe.evaluation.report import console as report_console
from vispe.evaluation.trained_model import parse_resolution
from vispe.experiments.compare import Run, covers, markdown_table, run_config, shown, train
from vispe.sweeps.engine import RESULTS, failure_message, replace_args
from vispe.sweeps.generation import METRICS, feature_extractor, sweep_generation

RESOLUTIONS = ['32', '48', '64']  # 1x, 1.5x, 2x
#: label -> (config, strategies to sample with; None = the encoding's only one)
RUNS = {
    'ape_sincos': ('dit/dit_tiny_ape_sincos_shapes2d.py', None),
    'rope_axial': ('dit/dit_tiny_rope_axial_shapes2d.py', ['none', 'interpolate', 'yarn']),
    'rope_axial+rpe2d': ('dit/dit_tiny_rope_axial_rpe2d_shapes2d.py', ['none']),
    'harope': ('dit/dit_tiny_harope_shapes2d.py', ['none', 'interpolate', 'yarn']),
}


def classifier_checkpoint(zoo_root: str, out: str, log) -> str:
    """The classifier checkpoint for FD / KID: the configs' default (the model zoo's, under ``zoo_root``), or one
    trained now into ``out/classifier``."""
    opts = load_config(RUNS['ape_sincos'][0]).generation_eval
    zoo = os.path.join(zoo_root, opts.classifier_checkpoint)
    if os.path.isfile(zoo):
        return zoo
    return train(Run('shape_color', opts.classifier_config, os.path.join(out, 'classifier')), log)


def train_and_generate(
    run, resolutions: Sequence[str], strategies: Sequence[str] | None, samples_per_class: int, log=print
) -> dict[str, Any]:
    """Train (or reuse / resume) one diffusion run, then sweep it with ``sweep_generation`` into
    ``work_dir/generation`` (reused when the checkpoint, resolutions, strategies, sample count and FD / KID feature
    extractor are unchanged); returns results.json."""
    ckpt = train(run, log)
    out = os.path.join(run.work_dir, 'generation')
    path = os.path.join(out, RESULTS)
    cfg = run_config(run)
    classifier = feature_extractor(cfg)
    extractor = os.path.abspath(classifier[1]) if classifier and classifier[1] else None
    if os.path.isfile(path) and os.path.getmtime(path) > os.path.getmtime(ckpt):
        with open(path) as f:
            previous = json.load(f)
        same = covers(previous, resolutions, strategies)  # complete, the same resolutions and strategies
        same &= previous['settings'].get('samples_per_class') == samples_per_class
        same &= previous.get('feature_extractor') == extractor
        if extractor and os.path.isfile(extractor):
            same &= os.path.getmtime(path) > os.path.getmtime(extractor)
        if same:
            log(f'reusing {shown(path)}')
            return previous
    force = bool(replace_args(out, ckpt, *([extractor] if extractor else [])))  # stale: an older checkpoint's numbers
    log(f'sweep_generation {shown(ckpt)} -> {shown(out)}')
    resolved = [parse_resolution(r) for r in resolutions]
    results = sweep_generation(
        cfg, ckpt, resolved, strategies, samples_per_class, classifier, out, log=log, force=force
    )
    if results['failed']:
        raise RuntimeError(failure_message(results, out))
    return results


#: grid rows (two classes of four samples each) whose first class the summary figure shows: a red, a green, a blue
#: and a yellow shape
SHOWN_ROWS = (0, 3, 5, 8)


def sample_figure(cells, out: str, path: str) -> str:
    """Sample strips from the sweeps' grids: a row per (run, strategy), a column per resolution."""
    import matplotlib.pyplot as plt
    import numpy as np

    from vispe.datasets.images import open_image
    from vispe.evaluation.figures import save_figure

    fig, axes = plt.subplots(
        len(cells), len(RESOLUTIONS), figsize=(1.6 * len(RESOLUTIONS), 1.6 * len(cells)), squeeze=False, dpi=100
    )
    for i, (label, strategy) in enumerate(cells):
        for j, res in enumerate(RESOLUTIONS):
            grid = open_image(os.path.join(out, label, 'generation', f'samples_{strategy}_{res}.png')).convert('RGB')
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
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text('Software', MARKER)  # still vispe's figure (vispe.evaluation.outputs)
    small = open_image(path).convert('RGB').quantize(colors=64)  # a palette PNG, about 4x smaller
    small.save(path, optimize=True, pnginfo=info)
    return path


def main(
    argv: Sequence[str] | None = None,
    prog: str | None = None,
    default_out: str = os.path.join('outputs', 'demo_dit'),
    zoo_root: str = '.',
) -> None:
    parser = demo_parser(prog, __doc__, default_out)
    parser.add_argument('--samples-per-class', type=int, default=4)
    parser.add_argument('--zoo-root', default=zoo_root, help='the folder holding models/ (the feature extractor)')
    args = parser.parse_args(argv)
    out = args.out
    console = report_console()
    log = bold_log(console)
    start = time.time()
    with forcing(args.force):
        check_targets(out)  # before anything is trained
        run_demo(args, out, console, log, start)


def check_targets(out: str) -> None:
    """OutputConflict unless the demo may write its summary files into ``out`` (vispe.evaluation.outputs)."""
    for name, kind in (('summary.md', 'summary'), ('summary.json', 'summary'), ('samples.png', 'figure')):
        check_target(os.path.join(out, name), kind)


def run_demo(args, out: str, console, log, start: float) -> None:
    classifier = classifier_checkpoint(args.zoo_root, out, log)
    rows = []
    for label, (config, strategies) in RUNS.items():
        run = Run(
            'shape_color', config, os.path.join(out, label), [f'generation_eval.classifier_checkpoint={classifier}']
        )
        results = train_and_generate(run, RESOLUTIONS, strategies, args.samples_per_class, log)
        rows += [dict(r, encoding=label) for r in results['results']]  # the run's label: rpe2d is rope_axial too
    report = []
    for metric in METRICS:
        fmt = '.1f' if metric.endswith('accuracy') else '.4g'
        table = markdown_table([r for r in rows if r['metric'] == metric], RESOLUTIONS, fmt)
        report += [f'### {metric}', '', table, '']
    text = '\n'.join(report)
    check_targets(out)
    write_text(os.path.join(out, 'summary.md'), text, 'summary')
    write_json(os.path.join(out, 'summary.json'), {'resolutions': RESOLUTIONS, 'results': rows}, 'summary')
    console.print(text)
    cells = [(label, s) for label, (_, strategies) in RUNS.items() for s in strategies or ['default']]
    figure = sample_figure(cells, out, os.path.join(out, 'samples.png'))
    console.print(f'summary: {out}/summary.md; samples: {figure} and {out}/<run>/generation/samples_*.png')
    console.print(f'total time: {(time.time() - start) / 60:.1f} min')


if __name__ == '__main__':
    main()
