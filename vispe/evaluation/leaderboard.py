"""The encoding leaderboard: every encoding x task x seed trained with one schedule, evaluated at several
resolutions with every strategy; reported per (task, encoding) with its best strategy and with the plain one,
as mean and spread over seeds."""

from __future__ import annotations

import os
import statistics
from typing import Callable, Dict, List, Sequence, Tuple

from vispe.evaluation.compare import Run, encoding_option, train_and_evaluate

#: the strategy that means "no extrapolation trick" for each family; encodings without strategies report 'default'
PLAIN = ('none', 'default', 'bicubic')

Key = Tuple[str, str, str, str]  # task, encoding, strategy, resolution


def leaderboard_runs(
    task_configs: Dict[str, str], encodings: Sequence[str], seeds: Sequence[int], out: str
) -> List[Run]:
    """One run per (task, encoding, seed), in ``out/<task>/<encoding>/seed<k>``."""
    return [
        Run(
            task, config, os.path.join(out, task, enc, f'seed{seed}'), [encoding_option(enc), f'randomness.seed={seed}']
        )
        for task, config in task_configs.items()
        for enc in encodings
        for seed in seeds
    ]


def collect(
    runs: Sequence[Run], resolutions: Sequence[str], log: Callable[[str], None] = print
) -> Dict[Key, List[float]]:
    """Train / reuse and evaluate every run; values per (task, encoding label, strategy, resolution)."""
    values: Dict[Key, List[float]] = {}
    for run in runs:
        for row in train_and_evaluate(run, resolutions, log)['results']:
            key = (run.task, row['encoding'], row['strategy'], str(row['resolution']))
            values.setdefault(key, []).append(row['value'])
    return values


def summarize(values: Dict[Key, List[float]]) -> Dict[Key, Tuple[float, float, int]]:
    """(mean, standard deviation (0 for one seed), seeds) per key."""
    return {k: (statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 0.0, len(v)) for k, v in values.items()}


def best_strategy(stats: Dict[Key, Tuple[float, float, int]], task: str, encoding: str, train_res: str) -> str:
    """The strategy with the highest mean over the resolutions other than the training one."""
    scores: Dict[str, List[float]] = {}
    for (t, enc, strat, res), (mean, _, _) in stats.items():
        if t == task and enc == encoding and res != train_res:
            scores.setdefault(strat, []).append(mean)
    if not scores:
        raise ValueError(f'no results for {encoding} on {task} beyond the training resolution {train_res}')
    return max(scores, key=lambda s: statistics.fmean(scores[s]))


def plain_strategy(stats: Dict[Key, Tuple[float, float, int]], task: str, encoding: str) -> str:
    """The no-trick strategy of this encoding (none / default / bicubic for learned tables)."""
    have = {strat for (t, enc, strat, _) in stats if t == task and enc == encoding}
    return next(s for s in PLAIN if s in have)


def markdown(stats: Dict[Key, Tuple[float, float, int]], task: str, resolutions: Sequence[str]) -> str:
    """One table per task: each encoding with its plain strategy and, if different, its best one."""
    lines = ['| encoding | strategy | ' + ' | '.join(resolutions) + ' |', '|---|---|' + '---|' * len(resolutions)]
    encodings = sorted({enc for (t, enc, _, _) in stats if t == task})
    for enc in encodings:
        plain, best = plain_strategy(stats, task, enc), best_strategy(stats, task, enc, resolutions[0])
        for strat in dict.fromkeys([plain, best]):
            cells = []
            for res in resolutions:
                mean, std, n = stats.get((task, enc, strat, res), (float('nan'), 0.0, 0))
                cells.append(f'{mean:.1f} ± {std:.1f}' if n > 1 else f'{mean:.1f}')
            label = strat + (' (best)' if strat == best and best != plain else '')
            lines.append(f'| {enc} | {label} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)
