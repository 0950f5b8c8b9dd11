"""The encoding leaderboard (about an hour or more on CPU; not for CI):

python tools/leaderboard.py [--encodings ...] [--tasks position relation] [--seeds 0 1 2] \
    [--resolutions 32 48 64 96] [--out outputs/leaderboard]

Trains every encoding on each shapes2d task with one schedule and each seed (finished runs are reused), evaluates
at every resolution with every strategy, and writes OUT/leaderboard.md and OUT/leaderboard.json: per encoding its
plain strategy and its best one, mean +- std over seeds.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import vispe  # noqa: E402
from vispe.evaluation.compare import ROOT, SHAPES2D_TASK_CONFIGS  # noqa: E402
from vispe.evaluation.leaderboard import collect, leaderboard_runs, markdown, summarize  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description='Train and rank every 2D encoding on shapes2d')
    parser.add_argument('--encodings', nargs='+', default=vispe.list_encodings())
    parser.add_argument(
        '--tasks', nargs='+', default=list(SHAPES2D_TASK_CONFIGS), choices=sorted(SHAPES2D_TASK_CONFIGS)
    )
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--resolutions', nargs='+', default=['32', '48', '64', '96'], help='first = training size')
    parser.add_argument('--out', default=os.path.join(ROOT, 'outputs', 'leaderboard'))
    args = parser.parse_args()
    runs = leaderboard_runs({t: SHAPES2D_TASK_CONFIGS[t] for t in args.tasks}, args.encodings, args.seeds, args.out)
    stats = summarize(collect(runs, args.resolutions))
    report = '\n\n'.join(
        f'### shapes2d {task}: top-1 accuracy (%), mean ± std over seeds {args.seeds}\n\n'
        + markdown(stats, task, args.resolutions)
        for task in args.tasks
    )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, 'leaderboard.md'), 'w') as f:
        f.write(report + '\n')
    with open(os.path.join(args.out, 'leaderboard.json'), 'w') as f:
        json.dump(
            [
                dict(zip(('task', 'encoding', 'strategy', 'resolution'), k), mean=m, std=s, seeds=n)
                for k, (m, s, n) in stats.items()
            ],
            f,
            indent=2,
        )
    print(report)
    print(f'\nwritten: {os.path.join(args.out, "leaderboard.md")}, leaderboard.json')


if __name__ == '__main__':
    main()
