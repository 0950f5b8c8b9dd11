"""The README's demo: train three tiny ViTs on shapes2d (ape_learned, rope_axial, rope_mixed) with
tools/train.py, evaluate each at 1x, 1.5x and 2x the training resolution with tools/eval_resolution.py, and
print one comparison table; writes outputs/demo/summary.json and summary.png.

A second run reuses finished checkpoints (delete outputs/demo to retrain) and resumes unfinished ones.
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rich.console import Console  # noqa: E402

from vispe.evaluation.resolution import plot_results, results_table, write_json  # noqa: E402

ENCODINGS = ['ape_learned', 'rope_axial', 'rope_mixed']
CONFIG = 'configs/vit/vit_tiny_{}_shapes2d_position.py'
RESOLUTIONS = ['32', '48', '64']  # 1x, 1.5x, 2x the training resolution
OUT = os.path.join(ROOT, 'outputs', 'demo')
console = Console()


def run(cmd):
    console.print(f'[bold]$ {" ".join(cmd)}[/bold]')
    subprocess.run([sys.executable, *cmd], cwd=ROOT, check=True)


def final_checkpoint(config, work_dir):
    """The last checkpoint of a run of ``config`` that finished, or None."""
    from mmengine.config import Config

    pointer = os.path.join(work_dir, 'last_checkpoint')
    if not os.path.isfile(pointer):
        return None
    with open(pointer) as f:
        ckpt = f.read().strip()
    max_epochs = Config.fromfile(os.path.join(ROOT, config)).train_cfg.max_epochs
    return ckpt if os.path.basename(ckpt) == f'epoch_{max_epochs}.pth' and os.path.isfile(ckpt) else None


def train_and_eval(encoding):
    config, work_dir = CONFIG.format(encoding), os.path.join(OUT, encoding)
    ckpt = final_checkpoint(config, work_dir)
    if ckpt:
        rel = os.path.relpath
        console.print(f'{encoding}: reusing {rel(ckpt, ROOT)} (delete {rel(OUT, ROOT)} to retrain)')
    else:
        resume = ['--resume'] if os.path.isfile(os.path.join(work_dir, 'last_checkpoint')) else []
        run(['tools/train.py', config, '--work-dir', work_dir, *resume])
        ckpt = final_checkpoint(config, work_dir)
    eval_dir = os.path.join(work_dir, 'eval')
    run(['tools/eval_resolution.py', config, ckpt, '--resolutions', *RESOLUTIONS, '--out', eval_dir, '--no-progress'])
    with open(os.path.join(eval_dir, 'results.json')) as f:
        return json.load(f)


def main():
    start = time.time()
    results = [train_and_eval(enc) for enc in ENCODINGS]
    rows = [row for r in results for row in r['results']]
    summary = {
        'task': 'shapes2d position',
        'train_resolution': results[0]['train_resolution'],
        'metric': 'accuracy',
        'runs': results,
        'results': rows,
    }
    json_path = write_json(summary, os.path.join(OUT, 'summary.json'))
    png_path = plot_results(rows, os.path.join(OUT, 'summary.png'), train_resolution=summary['train_resolution'])
    console.print(results_table(rows, title='shapes2d position: top-1 accuracy (%) by test resolution (trained at 32)'))
    console.print(f'summary: {json_path}\nplot: {png_path}\ntotal time: {(time.time() - start) / 60:.1f} min')


if __name__ == '__main__':
    main()
