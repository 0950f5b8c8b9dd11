r"""The prepared GPU check: GPU-marked tests, then the benchmarks under a time budget, into one summary.

    tools/gpu_check.sh                   # on a GPU machine: its own python3 (or .venv) and torch, no internet
    tools/gpu_check.sh --device cpu      # the same steps at toy sizes, to test the script where there is no GPU
    python -m workbench.gpu_check --device cuda --budget 360 --out outputs/gpu_check --tests tests

Writes OUT/summary.md (the targets and whether they are met, the figures, what was skipped and why), one JSON
report per step (the format of ``vispe benchmark``) and OUT/tests.txt. The steps and how the budget is spent:
workbench/gpu_steps.py. Exit status: pytest's when the GPU tests failed, 1 when a step failed, else 0.
Environment (defaults of the options): OUT, BUDGET, ENCODINGS (space-separated rows).
"""

from __future__ import annotations

import time

START = time.monotonic()  # the budget counts this process's imports too

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

os.environ.setdefault('HF_HUB_OFFLINE', '1')  # every model is randomly initialised: nothing may be downloaded

#: the whole check's seconds on each device when BUDGET is not set (the toy CPU run is not hurried)
DEFAULT_BUDGET = {'cuda': 360.0, 'cpu': 1800.0}


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--device', choices=('cuda', 'cpu'), default='cuda')
    p.add_argument(
        '--out',
        default=os.environ.get('OUT', 'outputs/gpu_check'),
        help="the check's folder: an earlier check's reports there are replaced, any other file in the way is refused",
    )
    p.add_argument(
        '--force',
        action='store_true',
        help='replace report-named files in OUT that vispe did not write (a file of another format is never written '
        'over)',
    )
    p.add_argument(
        '--budget',
        type=float,
        default=None,
        help='seconds for everything (default: $BUDGET, else 360 '
        'on cuda, 1800 on cpu); compiled rows that would overrun it are left out',
    )
    p.add_argument(
        '--encodings',
        nargs='+',
        default=os.environ.get('ENCODINGS', '').split() or None,
        help='encoding rows (default: $ENCODINGS, else every image encoding)',
    )
    p.add_argument('--compile-backend', default='inductor', help="torch.compile backend ('aot_eager': quick, toy)")
    p.add_argument(
        '--compile-scope',
        choices=('blocks', 'model'),
        default='blocks',
        help='compiled rows: each transformer block (one compilation reused by every block; default) or the model',
    )
    p.add_argument(
        '--tests',
        nargs='+',
        default=['tests'],
        help="where pytest looks for the GPU-marked tests (a checkout's tests/)",
    )
    args = p.parse_args(argv)
    if args.budget is None:
        args.budget = float(os.environ.get('BUDGET') or DEFAULT_BUDGET[args.device])
    return args


def main(argv: list[str] | None = None, prog: str | None = None, start: float = START) -> int:
    args = parse_args(argv, prog)
    import torch

    if args.device == 'cuda' and not torch.cuda.is_available():
        print('gpu_check: error: torch sees no CUDA device; use --device cpu for the toy run', file=sys.stderr)
        return 2
    from dataclasses import replace

    from vispe.evaluation.outputs import OutputConflict, forcing, write_text
    from workbench.gpu_steps import KIND, Clock, plan_for, run_gpu_check
    from workbench.gpu_summary import summary_markdown

    plan = replace(
        plan_for(args.device, args.encodings, args.compile_backend, args.compile_scope), tests=tuple(args.tests)
    )
    clock = Clock(args.budget, start)
    try:
        with forcing(args.force):
            results = run_gpu_check(plan, args.out, args.budget, clock)
            text = summary_markdown(plan, results, args.budget, clock.used())
            write_text(Path(args.out) / 'summary.md', text, KIND)
    except OutputConflict as err:
        print(f'gpu_check: error: {err}', file=sys.stderr)
        return 2
    print(text)
    tests = next((r for r in results if r.key == 'tests'), None)
    if tests and tests.report and tests.report['exit'] != 0:
        print(f'GPU-marked tests FAILED: {tests.report["summary"]} ({args.out}/tests.txt)', file=sys.stderr)
        return int(tests.report['exit']) if tests.report['exit'] > 0 else 1
    failed = [r.key for r in results if r.status == 'failed']
    if failed:
        print(f'gpu_check: steps failed: {", ".join(failed)} (see {args.out}/summary.md)', file=sys.stderr)
        return 1
    return 0


__all__ = ['DEFAULT_BUDGET', 'main', 'parse_args']

if __name__ == '__main__':
    sys.exit(main())
