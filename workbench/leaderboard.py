"""``python tools/leaderboard.py [--encodings ...] [--tasks position relation] [--seeds 0 1 2] \
    [--resolutions 32 16 ... 24x44] [--regimes fixed sizes aspect] [--out outputs/leaderboard] [--models models] \
    [--archive DIR] [--jobs N] [--no-train]`` (``make leaderboard``, ``python -m workbench.leaderboard``)

The encoding leaderboard (about an hour or more on CPU; not for CI). Trains every encoding on each shapes2d task
with one schedule and each seed (finished runs are reused), evaluates at every resolution with every strategy, and
writes OUT/leaderboard.md, .json and .png: per encoding its plain strategy and its best one, mean +- std over seeds.
With several ``--regimes`` (how the model is trained: ``fixed`` 32 px, ``sizes`` FlexiViT-style square sides of
16-64 px, ``aspect`` random aspect ratios within the 64 tokens of 32 px; ``leaderboard_runs.REGIME_CONFIGS``)
each regime is trained and tabled like a task of its own, and one more table per task sets the regimes side by side
(and OUT/regimes_<task>.png plots them, a panel per encoding).
Then exports the first seed's fixed-regime checkpoints to the model zoo (MODELS/<name>/ with config, slim
checkpoint, metrics and card; MODELS/README.md with the table and plot). With ``--archive DIR`` each run's results
are kept in DIR too (``leaderboard_runs.Archive``), and a run found there is read instead of trained.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from vispe.datasets import three_cell
from vispe.encodings import list_encodings
from vispe.encodings.build import VARIANTS as NAMED_VARIANTS
from vispe.engine.workdir import out_folder
from vispe.evaluation.outputs import check_target, forcing, write_json, write_text
from vispe.experiments.compare import SHAPES2D_TASK_CONFIGS
from workbench.leaderboard_report import (
    markdown,
    plot,
    regime_markdown,
    regime_plot,
    summarize,
    task_label,
    three_cell_markdown,
)
from workbench.leaderboard_runs import (
    DEFAULT_TASKS,
    REGIME_CONFIGS,
    TASK_RESOLUTIONS,
    Archive,
    collect,
    leaderboard_runs,
    task_resolutions,
    training_losses,
)
from workbench.zoo import write_model_zoo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: variants the board trains beside the registered encodings: rope_dinov3 without its training-time coordinate
#: augmentation (on by default), to show what the augmentation does; the learned table with LaPE's per-block
#: LayerNorms; ViTAR's fuzzy PE (a named variant, encodings.build.VARIANTS: ape_learned trained on jittered
#: positions, read at them)
VARIANTS = ('rope_dinov3:rescale=none', 'ape_learned:lape=true', 'ape_learned@fuzzy')
#: the Three-Cell paper's rows that the main board does not train: no PE, and its 1D sine (LOOPE's raster order)
THREE_CELL_EXTRAS = tuple(e for e in three_cell.PAPER_AVERAGES if e not in (*list_encodings(ndim=2), *VARIANTS))
#: the checkout's folders for the outputs, the model zoo and the archive of runs (committed: the runs behind the
#: docs' tables)
CHECKOUT = {
    'default_out': os.path.join(ROOT, 'outputs', 'leaderboard'),
    'default_models': os.path.join(ROOT, 'models'),
    'default_archive': os.path.join(ROOT, 'results', 'leaderboard'),
}


def main(
    argv: Sequence[str] | None = None,
    prog: str | None = None,
    default_out: str = os.path.join('outputs', 'leaderboard'),
    default_models: str = 'models',
    default_archive: str = '',
) -> None:
    parser = argparse.ArgumentParser(prog=prog, description='Train and rank every 2D encoding on shapes2d')
    parser.add_argument(
        '--encodings',
        nargs='+',
        default=None,
        help="names, one-line specs with options ('rope_dinov3:rescale=none'; 'a+b' combines) or variants "
        f'({", ".join(NAMED_VARIANTS)}); default: every 2D encoding and ' + ', '.join(VARIANTS) + ', and on '
        "three_cell_loope the paper's rows that are not among them: " + ', '.join(THREE_CELL_EXTRAS),
    )
    parser.add_argument(
        '--tasks',
        nargs='+',
        default=list(DEFAULT_TASKS),
        choices=sorted(SHAPES2D_TASK_CONFIGS),
        help="default: position relation; 'three_cell_loope' (LOOPE's Three-Cell benchmark, 56 px) is a board of its "
        "own (--tasks three_cell_loope), tabled once more beside the paper's averages",
    )
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument(
        '--resolutions',
        nargs='+',
        default=None,
        help="first = training size (default: the task's: 32 16 24 48 64 96 44x24 24x44, i.e. 1x, then 0.5x-3x and "
        '2:1 / 1:2 at the 64 tokens of 32 px; three_cell_loope: 56)',
    )
    parser.add_argument(
        '--regimes',
        nargs='+',
        default=['fixed'],
        choices=list(REGIME_CONFIGS),
        help='training regimes (default: fixed; the issue-18 board trains all three)',
    )
    parser.add_argument('--out', type=out_folder, default=default_out)
    parser.add_argument(
        '--force',
        action='store_true',
        help='replace leaderboard files in OUT that vispe did not write (a file of another format is never written '
        'over)',
    )
    parser.add_argument(
        '--archive',
        default=default_archive,
        help="keep each run's results.json (and run.json: wall time, commit) under this folder, and read runs "
        "found there instead of training them ('' = none; a checkout's tools/leaderboard.py: results/leaderboard)",
    )
    parser.add_argument(
        '--models', default=default_models, help="model zoo folder for the first seed's runs ('' = none)"
    )
    parser.add_argument(
        '--no-train',
        action='store_true',
        help='train nothing: table the runs found in the archive or finished in OUT, list the others as missing '
        '(no model zoo export)',
    )
    parser.add_argument(
        '--jobs',
        type=int,
        default=1,
        help='runs trained at once, each in its own process with cpu_count / JOBS threads (on a GPU they share it); '
        'finished runs are archived as they finish',
    )
    args = parser.parse_args(argv)
    with forcing(args.force):
        board(parser, args)


def board(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    # before anything is trained; leaderboard.json is a list, which carries no mark: its format is checked, and
    # leaderboard.md (written with it) says whose board the folder holds
    check_target(os.path.join(args.out, 'leaderboard.md'), 'leaderboard')
    check_target(os.path.join(args.out, 'leaderboard.json'), None)
    check_target(os.path.join(args.out, 'leaderboard.png'), 'figure')
    regimes = {r: REGIME_CONFIGS[r] for r in dict.fromkeys(args.regimes)}
    tasks = {t: SHAPES2D_TASK_CONFIGS[t] for t in args.tasks}
    own = [t for t in tasks if t in TASK_RESOLUTIONS]
    if own and (len(tasks) > 1 or regimes.keys() != {'fixed'}):
        parser.error(
            f'{own[0]} is a board of its own (fixed regime, {" ".join(TASK_RESOLUTIONS[own[0]])} px): run it alone, '
            f'--tasks {own[0]} --regimes fixed'
        )
    if args.resolutions is None:
        args.resolutions = task_resolutions(args.tasks[0])
    if args.encodings is None:
        args.encodings = list_encodings(ndim=2) + list(VARIANTS) + (list(THREE_CELL_EXTRAS) if own else [])
    runs = leaderboard_runs(tasks, args.encodings, args.seeds, args.out, regimes)
    archive = Archive(args.archive, args.out) if args.archive else None
    if args.jobs < 1:
        parser.error(f'--jobs must be at least 1, got {args.jobs}')
    values = collect(runs, args.resolutions, archive=archive, jobs=args.jobs, train=not args.no_train)
    if not values:
        raise SystemExit('error: no run of this board is archived or finished yet; run it without --no-train')
    stats = summarize(values)
    # with --no-train, only what the archive holds: a task or regime without runs gets no table
    labels = [task_label(t, r) for r in regimes for t in args.tasks if any(k[0] == task_label(t, r) for k in stats)]
    tabled = [t for t in args.tasks if any(task_label(t, r) in labels for r in regimes)]
    seeds = f'seeds {args.seeds}' + (
        ' (those archived; the spread is over the seeds each cell has)' if args.no_train else ''
    )
    report = '\n\n'.join(
        f'### shapes2d {label}: top-1 accuracy (%), mean ± std over {seeds}\n\n'
        + markdown(stats, label, args.resolutions)
        for label in labels
    )
    if len(regimes) > 1:
        report += '\n\n' + '\n\n'.join(
            f'### shapes2d {task} by training regime (plain strategy), mean ± std over {seeds}\n\n'
            + regime_markdown(stats, task, list(regimes), args.resolutions)
            for task in tabled
        )
    if own and own[0] in labels:  # Three-Cell beside the paper, with when each run left chance
        report += f"\n\n### shapes2d {own[0]} beside the paper's averages (LOOPE, Chowdhury et al. 2025)\n\n"
        report += three_cell_markdown(
            stats,
            own[0],
            args.resolutions[0],
            training_losses(runs, archive),
            three_cell.PAPER_AVERAGES,
            three_cell.ESCAPE_LOSS,
        )
    write_text(os.path.join(args.out, 'leaderboard.md'), report + '\n', 'leaderboard')
    write_json(
        os.path.join(args.out, 'leaderboard.json'),
        [
            dict(zip(('task', 'encoding', 'strategy', 'resolution'), k), mean=m, std=s, seeds=n)
            for k, (m, s, n) in stats.items()
        ],
        None,
    )
    png = plot(stats, labels, args.resolutions, os.path.join(args.out, 'leaderboard.png'))
    written = ['leaderboard.json', 'leaderboard.png']
    if len(regimes) > 1:  # what the training regime changes, one panel per encoding
        for task in tabled:
            regime_plot(stats, task, list(regimes), args.resolutions, os.path.join(args.out, f'regimes_{task}.png'))
            written.append(f'regimes_{task}.png')
    print(report)
    print(f'\nwritten: {os.path.join(args.out, "leaderboard.md")}, {", ".join(written)}')
    fixed = [run for run in runs if run.regime == 'fixed']
    if args.models and args.no_train:
        print(f'model zoo: {args.models} left as it is (--no-train exports no checkpoints)')
    elif args.models and own:
        print(f'model zoo: {args.models} left as it is (it holds the position and relation models)')
    elif args.models and not fixed:
        print(f'model zoo: {args.models} left as it is (it holds fixed-regime models, and none were trained)')
    elif args.models:
        folders = write_model_zoo(fixed, args.seeds[0], stats, args.resolutions, report, png, args.models)
        print(f'model zoo: {len(folders)} models and README.md in {args.models}')


if __name__ == '__main__':
    main()

if __name__ == '__main__':
    main(**CHECKOUT)
